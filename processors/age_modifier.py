"""Age modifier: makes each chosen face older or younger by a signed amount, steady over a video.

Models (their facts and sources: the entries' comments in engine/models/manifest.toml):
- `fran` (default; FRAN, a face re-aging U-Net): the face cut on `ffhq_512` at 1024 px, RGB in [0, 1], with
  `direction` = [present age, wanted age] / 100, each clipped to [0, 1]; its 1024 px output (RGB in [0, 1]) is
  pasted back under a feathered box. The present age is `present_age`, or (empty) each face's apparent age by
  FairFace (engine/faces/age.py), smoothed per tracked face over AGE_SECONDS so that a face whose estimate
  wavers between two age groups does not flicker between two ages.
- `styleganex_age` (StyleGANEX's age edit, non-commercial): `target` the face on `ffhq_512` at 256 px and
  `target_with_background` a wider view (the 5 landmarks drawn in ×0.875 about the nose tip, on
  `styleganex_384` at 384 px), both (pixel/255 − 0.5)/0.5; `direction` a scalar, −amount/40 (±100 → ∓2.5, the
  span FaceFusion offers); its output in [−1, 1] covers the 384 px view and is colour-matched to it before it is
  pasted back.
Amount 0 runs nothing and returns every frame as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import Field

from engine.core.options import Shown
from engine.core.types import Face, Frame, Mask
from engine.faces import colour, masker
from engine.faces.age import estimate_ages
from engine.faces.align import estimate_affine, paste_back, scaled_landmarks, warp_face
from engine.faces.masks import box_mask
from engine.faces.temporal import TrackedValues
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import from_tensor, to_tensor

FRAN, STYLEGANEX, CLASSIFIER = "fran", "styleganex_age", "fairface"
# StyleGANEX's wider view: the landmarks drawn in about the nose tip, and its template and size.
VIEW_SCALE, VIEW_TEMPLATE, VIEW_SIZE = 0.875, "styleganex_384", 384
# StyleGANEX's edit: ±100 % of the amount is ∓2.5 along its age direction (older is negative).
STYLEGANEX_SPAN = 2.5
# Seconds over which a tracked face's estimated present age settles (a FairFace group is 10 years wide).
AGE_SECONDS = 1.5


class AgeModifierOptions(ProcessorOptions):
    model: Annotated[Literal["fran", "styleganex_age"], Shown(models="age_modifier")] = Field(
        default=FRAN,
        description="fran: FRAN re-aging (download); styleganex_age: StyleGANEX (download, non-commercial)",
    )
    amount: Annotated[int, Shown(unit="years")] = Field(
        default=20,
        ge=-100,
        le=100,
        description="older (+) or younger (−): fran, in years from the present age; styleganex_age, the edit's "
        "strength on the same scale (0: nothing runs)",
    )
    present_age: Annotated[int | None, Shown(when={"model": (FRAN,)}, unit="years")] = Field(
        default=None, ge=1, le=100, description="the faces' present age; empty: each face's own, by FairFace (download)"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="box mask feather, fraction of the crop")


class AgeModifier(FrameProcessor[AgeModifierOptions]):
    """Re-ages every face in `ctx.faces` (see the module docstring)."""

    id: ClassVar[str] = "age_modifier"
    title: ClassVar[str] = "Age modifier"
    Options: ClassVar[type[ProcessorOptions]] = AgeModifierOptions
    needs_faces: ClassVar[bool] = True

    def __init__(self, options: AgeModifierOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.model: LoadedModel | None = None
        self.classifier: LoadedModel | None = None
        self._ages = TrackedValues(AGE_SECONDS)
        ids = self.model_ids(options)
        if not ids:
            return
        runtime.ensure(ids, options.backend)
        self.model = runtime.load(options.model, options.backend)
        if CLASSIFIER in ids:
            self.classifier = runtime.load(CLASSIFIER, options.backend)

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        opts: AgeModifierOptions = options  # type: ignore[assignment]
        if opts.amount == 0:
            return []
        return [opts.model, CLASSIFIER] if opts.model == FRAN and opts.present_age is None else [opts.model]

    def describe(self) -> dict[str, Any]:
        models = {loaded.spec.id: loaded.describe() for loaded in (self.model, self.classifier) if loaded is not None}
        main = self.model.describe() if self.model is not None else {}
        return {"options": self.options.model_dump(mode="json"), **main, "models": models}

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Each frame (H×W×3 uint8 RGB) with its faces re-aged; frames without faces, or amount 0, as they were."""
        if self.model is None:
            return list(frames)
        out = list(frames)
        for i, ctx in enumerate(ctxs):
            if not ctx.faces:
                continue
            if self.options.model == FRAN:
                for face, age in zip(ctx.faces, self._present_ages(out[i], ctx), strict=True):
                    out[i] = self._fran(out[i], face, age)
            else:
                for face in ctx.faces:
                    out[i] = self._styleganex(out[i], face)
        return out

    def frame_masks(self, frame: Frame, faces: Sequence[Face]) -> list[Mask]:
        """Each face's paste-back mask on `frame` (H×W float32 in [0, 1]), as `process` uses it (face debugger);
        all 0 at amount 0 (nothing is pasted)."""
        if self.model is None:
            return [np.zeros(frame.shape[:2], np.float32) for _ in faces]
        out = []
        for face in faces:
            affine, size = self._crop(face)
            out.append(masker.to_frame(box_mask(size, blur=self.options.mask_blur), affine, frame.shape))
        return out

    def _crop(self, face: Face) -> tuple[npt.NDArray[np.float64], int]:
        """(the affine, the size) of the crop the model's output is pasted back on."""
        if self.options.model == FRAN:
            assert self.model is not None and self.model.spec.input_size is not None
            size = self.model.spec.input_size
            return estimate_affine(face.landmarks5, self.model.spec.template or "ffhq_512", size), size
        return estimate_affine(scaled_landmarks(face.landmarks5, VIEW_SCALE), VIEW_TEMPLATE, VIEW_SIZE), VIEW_SIZE

    def _present_ages(self, frame: Frame, ctx: FrameContext) -> list[float]:
        if self.options.present_age is not None:
            return [float(self.options.present_age)] * len(ctx.faces)
        assert self.classifier is not None
        estimated = estimate_ages(self.classifier, frame, ctx.faces)
        return [float(self._ages.smooth(ctx.index, ctx.time, f, a)) for f, a in zip(ctx.faces, estimated, strict=True)]

    def _fran(self, frame: Frame, face: Face, age: float) -> Frame:
        assert self.model is not None
        io = self.model.spec.io
        affine, size = self._crop(face)
        crop = warp_face(frame, affine, size)
        direction = np.clip(np.array([age, age + self.options.amount], np.float32) / 100.0, 0.0, 1.0)
        (result, *_) = self.model.session.run({io.input: to_tensor(crop[None], io), "direction": direction})
        aged = from_tensor(np.asarray(result), io)[0]
        if aged.shape[:2] != (size, size):
            aged = cv2.resize(aged, (size, size), interpolation=cv2.INTER_CUBIC)
        return paste_back(frame, aged, affine, box_mask(size, blur=self.options.mask_blur))

    def _styleganex(self, frame: Frame, face: Face) -> Frame:
        assert self.model is not None
        spec = self.model.spec
        io, size = spec.io, spec.input_size or 256
        target = warp_face(frame, estimate_affine(face.landmarks5, spec.template or "ffhq_512", size), size)
        affine, _ = self._crop(face)
        view = warp_face(frame, affine, VIEW_SIZE)
        direction = np.array(-self.options.amount / 100.0 * STYLEGANEX_SPAN, np.float32)
        inputs = {
            io.input: to_tensor(target[None], io),
            "target_with_background": to_tensor(view[None], io),
            "direction": direction,
        }
        (result, *_) = self.model.session.run(inputs)
        aged = from_tensor(np.asarray(result), io)[0]
        side = aged.shape[0]
        if aged.shape[:2] != (side, side):
            aged = cv2.resize(aged, (side, side), interpolation=cv2.INTER_CUBIC)
        # The output covers the wider view at its own resolution: the view's affine scaled to it.
        scaled = affine * (side / VIEW_SIZE)
        raw = cv2.resize(view, (side, side), interpolation=cv2.INTER_CUBIC)
        mask = box_mask(side, blur=self.options.mask_blur)
        matched = colour.transfer(aged, raw, mask)
        return paste_back(frame, matched, scaled, mask)
