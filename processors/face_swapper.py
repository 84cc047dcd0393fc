"""Face swapper: put the source person's face on the chosen target faces.

Models: `landmark_warp` (embedded, offline: reshapes and re-textures the face from 68 landmarks) and every
`face_swapper` entry of the model catalogue — InSwapper, HyperSwap, GHOST, SimSwap, HifiFace, BlendSwap,
UniFace and whatever a catalogue adds — all through one path (engine/faces/swapper.py) driven by the entry's
template, size, normalisation and identity source. A crop at k× the model's size ("pixel boost") runs as k×k
interleaved model-size crops for a sharper face.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator, model_validator

from engine.errors import InvalidJob
from engine.faces import colour, swapper
from engine.faces.align import estimate_affine, transform_points
from engine.faces.landmark_swap import LandmarkSwapOptions
from engine.faces.landmark_swap import swap as landmark_swap
from engine.faces.masks import crop_mask
from engine.models.executor import executor_for
from engine.models.manifest import Manifest, ModelSpec
from engine.models.runtime import LoadedModel, Runtime
from engine.options import Shown
from engine.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.types import Frame

LANDMARK_WARP = "landmark_warp"


def _model_ids() -> list[str]:
    """landmark_warp (code: valid whatever the catalogue) and the face_swapper models of the active catalogue
    (read when asked: the catalogue can be swapped)."""
    return list(dict.fromkeys([LANDMARK_WARP, *(m.id for m in Manifest.load().for_task("face_swapper"))]))


class FaceSwapperOptions(ProcessorOptions):
    model: Annotated[str, Shown(models="face_swapper")] = Field(
        default=LANDMARK_WARP,
        description="landmark_warp: embedded, offline; the others download (see `models list` for each licence)",
        json_schema_extra=lambda schema: schema.update(enum=_model_ids()),
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
    poisson: Annotated[bool, Shown(when={"model": (LANDMARK_WARP,)})] = Field(
        default=False, description="landmark_warp: Poisson (seamless) blend instead of feather"
    )
    reshape: Annotated[bool, Shown(when={"model": (LANDMARK_WARP,)})] = Field(
        default=True, description="landmark_warp: move jaw and brows to the source's proportions"
    )
    pixel_boost: Annotated[
        int | None, Shown(unless={"model": (LANDMARK_WARP,)}, unit="px", suggest=(128, 256, 384, 512, 768, 1024))
    ] = Field(
        default=None,
        ge=1,
        le=1024,
        description="size of the swapped face: a multiple of the model's own size (k×k interleaved model runs); "
        "empty: the model's size",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in _model_ids():
            raise ValueError(f"unknown face_swapper model {value!r}; known: {', '.join(_model_ids())}")
        return value

    @model_validator(mode="after")
    def _offered_boost(self) -> FaceSwapperOptions:
        if self.pixel_boost is not None and self.model != LANDMARK_WARP:
            offered = boost_sizes(Manifest.load().get(self.model))
            if self.pixel_boost not in offered:
                raise ValueError(
                    f"pixel_boost {self.pixel_boost} is not offered by {self.model}; choose "
                    f"{', '.join(map(str, offered))}"
                )
        return self


def boost_sizes(spec: ModelSpec) -> tuple[int, ...]:
    """The face sizes in px a swapper runs at: its catalogue's list (multiples of its size), else its own size."""
    return (spec.swap.pixel_boost if spec.swap else ()) or (spec.input_size or 0,)


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
        self.converter: LoadedModel | None = None
        self._source: npt.NDArray[np.float32] | None = None
        self.needs_landmarks68 = options.model == LANDMARK_WARP
        if options.model == LANDMARK_WARP:
            if options.mask == "box":
                raise InvalidJob("face_swapper.mask=box is for the model swappers; landmark_warp follows the outline")
            return
        # Every file of the chain checked first, so one error names everything that is missing.
        runtime.ensure([m.id for m in runtime.manifest.chain(options.model)], options.backend)
        self.swapper = runtime.load(options.model, options.backend)
        swap = self.swapper.spec.swap
        if swap is None or self.swapper.spec.io.source is None:
            raise InvalidJob(f"{options.model}'s catalogue entry names no identity input, so it is not a face swapper")
        if swap.recogniser is not None:
            self.recogniser = runtime.load(swap.recogniser, options.backend)
        if swap.converter is not None:
            self.converter = runtime.load(swap.converter, options.backend)

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        model: str = options.model  # type: ignore[attr-defined]
        return [] if model == LANDMARK_WARP else [m.id for m in Manifest.load().chain(model)]

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"options": self.options.model_dump(mode="json")}
        if self.swapper is None:
            info.update(model=LANDMARK_WARP, backend="opencv", provider="CPU")
            return info
        info.update(self.swapper.describe())
        for role, loaded in (("recogniser", self.recogniser), ("converter", self.converter)):
            if loaded is not None:
                info[role] = loaded.describe()
        return info

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Swap every face in `ctx.faces` of each frame (H×W×3 uint8 RGB); frames without faces come back as is."""
        if self.swapper is None:
            return [self._landmark(frame, ctx) for frame, ctx in zip(frames, ctxs, strict=True)]
        return self._model_swap(frames, ctxs)

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

    # -- the model swappers -----------------------------------------------------------------------------------
    def _identity(self, ctx: FrameContext) -> npt.NDArray[np.float32]:
        """The swapper's `source` input for the job's source person: computed once per job."""
        if self._source is None:
            assert self.swapper is not None and self.swapper.spec.swap is not None
            swap = self.swapper.spec.swap
            faces = ctx.source.faces
            if swap.source == "image":
                # One crop is the identity: the first source image's face (as landmark_warp takes its texture).
                self._source = swapper.source_image(swap, faces[0].image, faces[0].face.landmarks5)
            else:
                assert self.recogniser is not None
                rec = self.recogniser.spec
                embeddings = swapper.embed(
                    self.recogniser.session, rec.io, rec.template or "arcface_112", rec.input_size or 112,
                    [(s.image, s.face.landmarks5) for s in faces],
                )  # fmt: skip
                emap = swapper.emap_from_onnx(self.runtime.local_path(self.swapper.file)) if swap.emap else None
                self._source = swapper.latent(swap, embeddings, convert=self._convert, emap=emap)
        return self._source

    def _convert(self, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        assert self.converter is not None
        io = self.converter.spec.io
        (out, *_) = self.converter.session.run({io.input: vector})
        return np.asarray(out, np.float32).reshape(1, -1)

    def _model_swap(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        assert self.swapper is not None
        spec = self.swapper.spec
        jobs = [(i, face) for i, ctx in enumerate(ctxs) for face in ctx.faces]
        if not jobs:
            return list(frames)
        source = self._identity(next(c for c in ctxs if c.faces))
        assert spec.input_size is not None and spec.template is not None  # the catalogue requires both of a swapper
        size = self.options.pixel_boost or spec.input_size
        k = size // spec.input_size
        affines = [estimate_affine(face.landmarks5, spec.template, size) for _, face in jobs]
        placed = [(i, affine) for (i, _), affine in zip(jobs, affines, strict=True)]
        # On the device the swapper runs on, when it can take tensors there (engine.models.executor).
        executor = executor_for(self.runtime, self.swapper.session)
        batch = executor.load(frames)
        crops = batch.cut(placed, size)
        subs = executor.infer(
            self.swapper.session, spec.io, executor.split(crops, k), per_item={spec.io.source: source}
        )
        swapped = executor.weave(subs, k)
        masks = [
            crop_mask(
                size, None if face.landmarks68 is None else transform_points(face.landmarks68, affine),
                kind=self.options.mask, padding=self.options.mask_padding, blur=self.options.mask_blur,
            )
            for (_, face), affine in zip(jobs, affines, strict=True)
        ]  # fmt: skip
        if self.options.colour != "none":
            # Colour transfer runs on the host, on the crops alone (a few kilobytes each).
            pairs = zip(executor.host(swapped), executor.host(crops), masks, strict=True)
            swapped = executor.images(np.stack([colour.transfer(r, c, m, self.options.colour) for r, c, m in pairs]))
        batch.paste(placed, swapped, [mask * (self.options.blend / 100.0) for mask in masks])
        return batch.result()
