"""Face swapper: put the source person's face on the chosen target faces.

Models: `landmark_warp` (embedded, offline: reshapes and re-textures the face from 68 landmarks) and InSwapper
(`inswapper_128`, `inswapper_128_fp16`: downloaded, non-commercial; an ArcFace-conditioned generator on
128 px aligned crops, optionally run on k×k interleaved sub-crops — "pixel boost" — for a 256/512 px result).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from engine.errors import InvalidJob
from engine.faces import colour, inswapper
from engine.faces.align import estimate_affine, paste_back, transform_points, warp_face
from engine.faces.landmark_swap import LandmarkSwapOptions
from engine.faces.landmark_swap import swap as landmark_swap
from engine.faces.masks import crop_mask
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import to_tensor
from engine.options import Shown
from engine.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.types import Frame

INSWAPPER_SIZE = 128
# The ArcFace recogniser InSwapper's latent space was trained with; it embeds the source, whatever analyser runs.
ARCFACE = "buffalo_l_w600k_r50"


class FaceSwapperOptions(ProcessorOptions):
    model: Annotated[Literal["landmark_warp", "inswapper_128", "inswapper_128_fp16"], Shown(models="face_swapper")] = (
        Field(
            default="landmark_warp", description="landmark_warp: embedded, offline; inswapper: download, non-commercial"
        )
    )
    blend: Annotated[int, Shown(unit="%")] = Field(
        default=100, ge=0, le=100, description="% of the swapped face over the original"
    )
    mask: Literal["box", "face", "face_no_mouth"] = Field(
        default="face_no_mouth", description="paste-back mask: feathered box, face outline, or face without mouth"
    )
    mask_padding: Annotated[float, Shown(when={"mask": ("box",)}, unit="%")] = Field(
        default=0.0, ge=0.0, le=40.0, description="box mask padding, % of the crop"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="mask feather, fraction of the face size")
    colour: Literal["reinhard", "histogram", "none"] = Field(default="reinhard", description="colour transfer")
    poisson: Annotated[bool, Shown(when={"model": ("landmark_warp",)})] = Field(
        default=False, description="landmark_warp: Poisson (seamless) blend instead of feather"
    )
    reshape: Annotated[bool, Shown(when={"model": ("landmark_warp",)})] = Field(
        default=True, description="landmark_warp: move jaw and brows to the source's proportions"
    )
    pixel_boost: Annotated[Literal[128, 256, 512], Shown(unless={"model": ("landmark_warp",)}, unit="px")] = Field(
        default=128, description="inswapper: output size of the swapped face (k×k interleaved model runs)"
    )


class FaceSwapper(FrameProcessor[FaceSwapperOptions]):
    """Swaps the job's source face onto the faces the face stage chose on each frame."""

    id: ClassVar[str] = "face_swapper"
    title: ClassVar[str] = "Face swapper"
    Options: ClassVar[type[ProcessorOptions]] = FaceSwapperOptions
    needs_faces: ClassVar[bool] = True
    needs_source: ClassVar[bool] = True

    def __init__(self, options: FaceSwapperOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.swapper: LoadedModel | None = None
        self.recogniser: LoadedModel | None = None
        self._latent: npt.NDArray[np.float32] | None = None
        self.needs_landmarks68 = options.model == "landmark_warp"
        if options.model == "landmark_warp" and options.mask == "box":
            raise InvalidJob("face_swapper.mask=box is for InSwapper; landmark_warp blends along the face outline")
        if options.model != "landmark_warp":
            # Both files checked first, so one error names everything that is missing.
            runtime.ensure(self.model_ids(options), options.backend)
            self.swapper = runtime.load(options.model, options.backend)
            self.recogniser = runtime.load(ARCFACE, options.backend)

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        model = options.model  # type: ignore[attr-defined]
        return [] if model == "landmark_warp" else [model, ARCFACE]

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"options": self.options.model_dump(mode="json")}
        if self.swapper is not None and self.recogniser is not None:
            info.update(self.swapper.describe())
            info["recogniser"] = self.recogniser.describe()
        else:
            info.update(model="landmark_warp", backend="opencv", provider="CPU")
        return info

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Swap every face in `ctx.faces` of each frame (H×W×3 uint8 RGB); frames without faces come back as is."""
        if self.options.model == "landmark_warp":
            return [self._landmark(frame, ctx) for frame, ctx in zip(frames, ctxs, strict=True)]
        return self._inswapper(frames, ctxs)

    # -- landmark_warp ----------------------------------------------------------------------------------------
    def _landmark(self, frame: Frame, ctx: FrameContext) -> Frame:
        if not ctx.faces:
            return frame
        source = ctx.source.faces[0]
        if source.face.landmarks68 is None or any(f.landmarks68 is None for f in ctx.faces):
            raise InvalidJob("landmark_warp needs 68-point landmarks: use faces.analyser=embedded")
        opts = LandmarkSwapOptions(
            blend="poisson" if self.options.poisson else "feather",
            colour=self.options.colour,
            keep_mouth=self.options.mask == "face_no_mouth",
            reshape=self.options.reshape,
            feather=max(self.options.mask_blur * 0.2, 0.01),
        )
        out = frame
        for face in ctx.faces:
            out = landmark_swap(source.image, source.face.landmarks68, out, face.landmarks68, opts)
        return self._blend(frame, out)

    def _blend(self, original: Frame, swapped: Frame) -> Frame:
        if self.options.blend >= 100:
            return swapped
        a = self.options.blend / 100.0
        return np.rint(original * (1.0 - a) + swapped * a).astype(np.uint8)

    # -- InSwapper --------------------------------------------------------------------------------------------
    def _source_latent(self, ctx: FrameContext) -> npt.NDArray[np.float32]:
        """ArcFace embedding of the source faces (averaged), times InSwapper's emap: computed once per job."""
        if self._latent is None:
            assert self.swapper is not None and self.recogniser is not None
            spec = self.recogniser.spec
            template, size = spec.template or "arcface_112", spec.input_size or 112
            crops = np.stack(
                [warp_face(s.image, estimate_affine(s.face.landmarks5, template, size), size) for s in ctx.source.faces]
            )
            io = self.recogniser.spec.io
            (emb,) = self.recogniser.session.run({io.input: to_tensor(crops, io)})[:1]
            emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
            mean = emb.mean(axis=0)
            emap = inswapper.emap_from_onnx(self.runtime.local_path(self.swapper.file))
            self._latent = inswapper.source_latent(mean / np.linalg.norm(mean), emap)
        return self._latent

    def _inswapper(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        assert self.swapper is not None
        jobs = [(i, face) for i, ctx in enumerate(ctxs) for face in ctx.faces]
        if not jobs:
            return list(frames)
        latent = self._source_latent(next(c for c in ctxs if c.faces))
        k = self.options.pixel_boost // INSWAPPER_SIZE
        size = INSWAPPER_SIZE * k
        affines = [estimate_affine(face.landmarks5, "arcface_128", size) for _, face in jobs]
        crops = np.stack([warp_face(frames[i], m, size) for (i, _), m in zip(jobs, affines, strict=True)])
        # Pixel boost: k×k interleaved sub-crops of 128 px each go through the model and are woven back.
        subs = np.concatenate([crops[:, y::k, x::k] for y in range(k) for x in range(k)])
        swapped_subs = inswapper.swap(self.swapper.session, self.swapper.spec.io, np.ascontiguousarray(subs), latent)
        swapped = np.empty_like(crops)
        n = len(jobs)
        for j, (y, x) in enumerate((y, x) for y in range(k) for x in range(k)):
            swapped[:, y::k, x::k] = swapped_subs[j * n : (j + 1) * n]
        out = list(frames)
        for (i, face), affine, crop, result in zip(jobs, affines, crops, swapped, strict=True):
            points = None if face.landmarks68 is None else transform_points(face.landmarks68, affine)
            mask = crop_mask(
                size, points, kind=self.options.mask, padding=self.options.mask_padding, blur=self.options.mask_blur
            )
            if self.options.colour != "none":
                result = colour.transfer(result, crop, mask, self.options.colour)
            out[i] = paste_back(out[i], result, affine, mask * (self.options.blend / 100.0))
        return out
