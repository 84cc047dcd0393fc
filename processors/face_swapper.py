"""Face swapper: put the source person's face on the chosen target faces.

Models: `landmark_warp` (embedded, offline: reshapes and re-textures the face from 68 landmarks) and every
`face_swapper` entry of the model catalogue — InSwapper, HyperSwap, GHOST, SimSwap, HifiFace, BlendSwap,
UniFace and whatever a catalogue adds — all through one path (engine/faces/swapper.py) driven by the entry's
template, size, normalisation and identity source. A crop at k× the model's size ("pixel boost") runs as k×k
interleaved model-size crops for a sharper face.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator, model_validator

from engine.core.errors import InvalidJob
from engine.core.options import Shown
from engine.core.types import Face, Frame, Mask
from engine.faces import colour, masker, swapper
from engine.faces.align import estimate_affine, transform_points, warp_face
from engine.faces.landmark_swap import LandmarkSwapOptions
from engine.faces.landmark_swap import face_size as landmark_face_size
from engine.faces.landmark_swap import swap as landmark_swap
from engine.faces.masker import Masker, MaskKinds, Regions
from engine.faces.masks import landmark_mask
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.executor import executor_for
from engine.models.manifest import Manifest, ModelSpec
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import run_images
from engine.run.face_stage import SourceIdentity

LANDMARK_WARP = "landmark_warp"
# landmark_warp's occlusion and region masks are made on this crop of the target face: the whole head.
LANDMARK_MASK_TEMPLATE, LANDMARK_MASK_SIZE = "ffhq_512", 256
# Earlier releases named the mask by one word; a sidecar or preset of theirs still reads as it meant.
_LEGACY_MASKS = {"box": (("box",), False), "face": (("box", "face"), False), "face_no_mouth": (("box", "face"), True)}


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
    # landmark_warp's warp is the face outline (its triangles): the face mask is part of it, not a choice.
    mask: Annotated[MaskKinds, Shown(implied={"face": {"model": (LANDMARK_WARP,)}})] = Field(
        default=("box", "face"),
        description="paste-back masks, multiplied: feathered box, face outline (68 landmarks), occlusion (what "
        "covers the face stays: XSeg, download), region (only the chosen parts of the face)",
    )
    keep_mouth: Annotated[bool, Shown(when={"mask": ("face",)})] = Field(
        default=True, description="cut the inner mouth out of the face outline: teeth and tongue stay the target's"
    )
    mask_padding: Annotated[float, Shown(when={"mask": ("box",)}, unit="%")] = Field(
        default=0.0, ge=0.0, le=40.0, description="box mask padding, % of the crop"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="mask feather, fraction of the face size")
    mask_regions: Annotated[Regions, Shown(when={"mask": ("region",)})] = Field(
        default=masker.REGIONS, description="region mask: the parts of the face that take the swap"
    )
    occluder: Annotated[Literal[masker.OCCLUDERS], Shown(when={"mask": ("occlusion",)}, models="face_occluder")] = (  # type: ignore[valid-type]
        Field(default="xseg_1", description="occlusion mask: the XSeg model (GPL-3.0, download)")
    )
    parser: Annotated[Literal["auto", *masker.PARSERS], Shown(when={"mask": ("region",)})] = Field(  # type: ignore[valid-type]
        default="auto",
        description="region mask: the BiSeNet face parser (download); auto: one already here, else the landmarks",
    )
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

    secondary: Annotated[str | None, Shown(unless={"model": (LANDMARK_WARP,)}, models="face_swapper")] = Field(
        default=None,
        description="a second swapper blended with the first: it gets the same aligned crop and the two swapped "
        "faces are mixed before paste-back (a model of the same crop template); empty: none",
    )
    secondary_blend: Annotated[int, Shown(unless={"model": (LANDMARK_WARP,)}, unit="%")] = Field(
        default=50, ge=0, le=100, description="% of the second swapper's face in the mix"
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_mask(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and isinstance(raw.get("mask"), str) and raw["mask"] in _LEGACY_MASKS:
            kinds, mouth = _LEGACY_MASKS[raw["mask"]]
            raw = {**raw, "mask": kinds}
            raw.setdefault("keep_mouth", mouth)
        return raw

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in _model_ids():
            raise ValueError(f"unknown face_swapper model {value!r}; known: {', '.join(_model_ids())}")
        return value

    @field_validator("secondary")
    @classmethod
    def _known_secondary(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        known = [m for m in _model_ids() if m != LANDMARK_WARP]
        if value not in known:
            raise ValueError(f"unknown second face_swapper model {value!r}; known: {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def _blendable(self) -> FaceSwapperOptions:
        """A second swapper takes the first's aligned crop: it must be cut on the same template."""
        if self.secondary is None or self.model == LANDMARK_WARP:
            return self
        catalogue = Manifest.load()
        first, second = catalogue.get(self.model), catalogue.get(self.secondary)
        if self.secondary == self.model:
            raise ValueError(f"the second swapper is the first one ({self.model}); choose another or none")
        if first.template != second.template:
            same = [
                m.id for m in catalogue.for_task("face_swapper") if m.template == first.template and m.id != self.model
            ]
            raise ValueError(
                f"{self.secondary} cuts faces on {second.template}, {self.model} on {first.template}: the two must "
                f"share the crop; with {self.model} choose {', '.join(same) or 'none'}"
            )
        return self

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


def _load_swapper(
    runtime: Runtime, model_id: str, backend: str | None
) -> tuple[LoadedModel, LoadedModel | None, LoadedModel | None]:
    """(the swapper, its recogniser, its converter) loaded; InvalidJob when the entry is not a swapper's."""
    loaded = runtime.load(model_id, backend)
    swap = loaded.spec.swap
    if swap is None or loaded.spec.io.source is None:
        raise InvalidJob(f"{model_id}'s catalogue entry names no identity input, so it is not a face swapper")
    recogniser = runtime.load(swap.recogniser, backend) if swap.recogniser is not None else None
    converter = runtime.load(swap.converter, backend) if swap.converter is not None else None
    return loaded, recogniser, converter


def _convert(converter: LoadedModel, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """A converter model's map of one 1×512 vector."""
    (out, *_) = converter.session.run({converter.spec.io.input: vector})
    return np.asarray(out, np.float32).reshape(1, -1)


def boost_sizes(spec: ModelSpec) -> tuple[int, ...]:
    """The face sizes in px a swapper runs at: its catalogue's list (multiples of its size), else its own size."""
    return (spec.swap.pixel_boost if spec.swap else ()) or (spec.input_size or 0,)


class FaceSwapper(FrameProcessor[FaceSwapperOptions]):
    """Swaps the job's source face (or, where people are mapped, each person's own) onto the faces the face
    stage chose on each frame."""

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
        # Each source identity's `source` input, made once per job and swapper: (the identity, its latent) by
        # (swapper, identity id).
        self._latents: dict[tuple[str, int], tuple[SourceIdentity, npt.NDArray[np.float32]]] = {}
        # The second swapper blended with the first (its swapper, recogniser, converter), if any.
        self.second: tuple[LoadedModel, LoadedModel | None, LoadedModel | None] | None = None
        # Colour statistics per tracked face, reused while its lighting holds (colour.TrackColours).
        self._colours = None if options.colour == "none" else colour.TrackColours(options.colour)
        self.masker = Masker(
            runtime, self.id, options.mask, padding=options.mask_padding, blur=options.mask_blur,
            keep_mouth=options.keep_mouth, regions=options.mask_regions, occluder=options.occluder,
            parser=options.parser, backend=options.backend,
        )  # fmt: skip
        self.notes = self.masker.notes
        self.needs_landmarks68 = options.model == LANDMARK_WARP or self.masker.needs_landmarks68
        if options.model == LANDMARK_WARP:
            return
        # Every file of the chain checked first, so one error names everything that is missing.
        needed = [m.id for m in runtime.manifest.chain(options.model)]
        if options.secondary is not None:
            needed += [m.id for m in runtime.manifest.chain(options.secondary) if m.id not in needed]
        runtime.ensure(needed, options.backend)
        self.swapper, self.recogniser, self.converter = _load_swapper(runtime, options.model, options.backend)
        if options.secondary is not None:
            self.second = _load_swapper(runtime, options.secondary, options.backend)

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        opts: FaceSwapperOptions = options  # type: ignore[assignment]
        masks = masker.model_ids(opts.mask, opts.occluder, opts.parser)
        swap = [] if opts.model == LANDMARK_WARP else [m.id for m in Manifest.load().chain(opts.model)]
        if opts.secondary is not None and opts.model != LANDMARK_WARP:
            swap += [m.id for m in Manifest.load().chain(opts.secondary) if m.id not in swap]
        return swap + masks

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"options": self.options.model_dump(mode="json"), "masks": self.masker.describe()}
        if self.swapper is None:
            info.update(model=LANDMARK_WARP, backend="opencv", provider="CPU")
            return info
        info.update(self.swapper.describe())
        for role, loaded in (("recogniser", self.recogniser), ("converter", self.converter)):
            if loaded is not None:
                info[role] = loaded.describe()
        if self.second is not None:
            second, recogniser, converter = self.second
            info["secondary"] = {
                **second.describe(),
                **{role: m.describe() for role, m in (("recogniser", recogniser), ("converter", converter)) if m},
            }
        return info

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Swap every face in `ctx.faces` of each frame (H×W×3 uint8 RGB), each with its own source identity
        (`ctx.source_for`); frames without faces come back as is."""
        if self.swapper is None:
            return self._landmark(frames, ctxs)
        return self._model_swap(frames, ctxs)

    def frame_masks(self, frame: Frame, faces: Sequence[Face]) -> list[Mask]:
        """Each face's paste-back mask on `frame` (H×W float32 in [0, 1]: how much of the swap a pixel takes), as
        `process` makes it (for the face debugger). landmark_warp's outline is drawn on the target's landmarks
        (the swap moves it to the source's proportions)."""
        if not faces:
            return []
        weight = self.options.blend / 100.0
        if self.swapper is None:
            affines = [estimate_affine(f.landmarks5, LANDMARK_MASK_TEMPLATE, LANDMARK_MASK_SIZE) for f in faces]
            crops = np.stack([warp_face(frame, m, LANDMARK_MASK_SIZE) for m in affines])
            points = [
                None if f.landmarks68 is None else transform_points(f.landmarks68, m)
                for f, m in zip(faces, affines, strict=True)
            ]
            outer = self.masker.restrictions(crops, points)
            out = []
            for face, affine, mask in zip(faces, affines, outer, strict=True):
                shape = np.ones(frame.shape[:2], np.float32)
                if face.landmarks68 is not None:
                    feather = max(self.options.mask_blur * 0.2, 0.01) * landmark_face_size(face.landmarks68)
                    shape = landmark_mask(
                        frame.shape[:2], face.landmarks68, exclude_mouth=self.options.keep_mouth, blur_px=feather
                    )
                out.append(shape * masker.to_frame(mask, affine, frame.shape, outside=1.0) * weight)
            return out
        spec = self.swapper.spec
        assert spec.input_size is not None and spec.template is not None
        size = self.options.pixel_boost or spec.input_size
        affines = [estimate_affine(f.landmarks5, spec.template, size) for f in faces]
        crops = np.stack([warp_face(frame, m, size) for m in affines])
        points = [
            None if f.landmarks68 is None else transform_points(f.landmarks68, m)
            for f, m in zip(faces, affines, strict=True)
        ]
        return [
            masker.to_frame(m, a, frame.shape) * weight
            for m, a in zip(self.masker(crops, points), affines, strict=True)
        ]

    # -- landmark_warp ----------------------------------------------------------------------------------------
    def _landmark(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        out = list(frames)
        jobs = [(i, face, ctx.source_for(face)) for i, ctx in enumerate(ctxs) for face in ctx.faces]
        if not jobs:
            return out
        if any(f.landmarks68 is None or s.faces[0].face.landmarks68 is None for _, f, s in jobs):
            raise InvalidJob("landmark_warp needs 68-point landmarks: use faces.analyser=embedded")
        opts = LandmarkSwapOptions(
            blend="poisson" if self.options.poisson else "feather",
            colour=self.options.colour,
            keep_mouth=self.options.keep_mouth,
            reshape=self.options.reshape,
            feather=max(self.options.mask_blur * 0.2, 0.01),
        )
        restricted = "occlusion" in self.options.mask or "region" in self.options.mask
        # Occlusion and region masks are made on each target face before anything is swapped, all in one call.
        affines = [estimate_affine(f.landmarks5, LANDMARK_MASK_TEMPLATE, LANDMARK_MASK_SIZE) for _, f, _ in jobs]
        masks: list[Any] = [None] * len(jobs)
        if restricted:
            crops = np.stack(
                [warp_face(frames[i], m, LANDMARK_MASK_SIZE) for (i, _, _), m in zip(jobs, affines, strict=True)]
            )
            points = [transform_points(f.landmarks68, m) for (_, f, _), m in zip(jobs, affines, strict=True)]
            masks = list(self.masker.restrictions(crops, points))
        for (i, face, identity), affine, mask in zip(jobs, affines, masks, strict=True):
            source = identity.faces[0]
            recolour = None if self._colours is None else partial(self._colours.transfer, ctxs[i].index, face)
            swapped = landmark_swap(source.image, source.face.landmarks68, out[i], face.landmarks68, opts, recolour)
            out[i] = swapped if mask is None else masker.blend(out[i], swapped, mask, affine)
        return [self._blend(before, after) for before, after in zip(frames, out, strict=True)]

    def _blend(self, original: Frame, swapped: Frame) -> Frame:
        if self.options.blend >= 100:
            return swapped
        a = self.options.blend / 100.0
        return np.rint(original * (1.0 - a) + swapped * a).astype(np.uint8)

    # -- the model swappers -----------------------------------------------------------------------------------
    def _identity(self, identity: SourceIdentity, second: bool = False) -> npt.NDArray[np.float32]:
        """The `source` input of the swapper (the second one with `second`) for one source identity: computed once
        per job, swapper and identity."""
        assert self.swapper is not None
        loaded, recogniser, converter = self.second if second and self.second else (
            self.swapper, self.recogniser, self.converter
        )  # fmt: skip
        key = (loaded.spec.id, id(identity))
        kept = self._latents.get(key)
        if kept is None:
            assert loaded.spec.swap is not None
            swap = loaded.spec.swap
            faces = identity.faces
            if swap.source == "image":
                # One crop is the identity: the first source image's face (as landmark_warp takes its texture).
                latent = swapper.source_image(swap, faces[0].image, faces[0].face.landmarks5)
            else:
                assert recogniser is not None
                rec = recogniser.spec
                embeddings = swapper.embed(
                    recogniser.session, rec.io, rec.template or "arcface_112", rec.input_size or 112,
                    [(s.image, s.face.landmarks5) for s in faces],
                )  # fmt: skip
                emap = swapper.emap_from_onnx(self.runtime.local_path(loaded.file)) if swap.emap else None
                convert = None if converter is None else partial(_convert, converter)
                latent = swapper.latent(swap, embeddings, convert=convert, emap=emap)
            kept = self._latents[key] = (identity, latent)
        return kept[1]

    def _blend_second(
        self, crops: npt.NDArray[np.uint8], swapped: npt.NDArray[np.uint8], identity: SourceIdentity
    ) -> npt.NDArray[np.uint8]:
        """The first swapper's faces (N×S×S×3 uint8 RGB) mixed with the second's, which gets the same aligned crops
        (resized to its own size, its output resized back): secondary_blend % of the second's."""
        assert self.second is not None
        second = self.second[0]
        own = second.spec.input_size or crops.shape[1]
        size = crops.shape[1]
        resized = (
            np.stack([cv2.resize(c, (own, own), interpolation=cv2.INTER_AREA) for c in crops]) if own != size else crops
        )
        out = run_images(second.session, second.spec.io, resized, per_item={
            str(second.spec.io.source): self._identity(identity, second=True)
        })  # fmt: skip
        if own != size:
            out = np.stack([cv2.resize(o, (size, size), interpolation=cv2.INTER_CUBIC) for o in out])
        w = self.options.secondary_blend / 100.0
        return np.clip(np.rint(swapped * (1.0 - w) + out * w), 0, 255).astype(np.uint8)

    def _model_swap(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        assert self.swapper is not None
        spec = self.swapper.spec
        jobs: list[tuple[int, Face, SourceIdentity]] = [
            (i, face, ctx.source_for(face)) for i, ctx in enumerate(ctxs) for face in ctx.faces
        ]
        if not jobs:
            return list(frames)
        assert spec.input_size is not None and spec.template is not None  # the catalogue requires both of a swapper
        size = self.options.pixel_boost or spec.input_size
        k = size // spec.input_size
        affines = [estimate_affine(face.landmarks5, spec.template, size) for _, face, _ in jobs]
        placed = [(i, affine) for (i, _, _), affine in zip(jobs, affines, strict=True)]
        # On the device the swapper runs on, when it can take tensors there (engine.models.executor).
        executor = executor_for(self.runtime, self.swapper.session)
        batch = executor.load(frames)
        crops = batch.cut(placed, size)
        # The masks of every face of the batch in one call, on the faces as they are.
        points = [
            None if f.landmarks68 is None else transform_points(f.landmarks68, m)
            for (_, f, _), m in zip(jobs, affines, strict=True)
        ]
        masks = self.masker(self.masker.crops_from(lambda: executor.host(crops), len(placed), size), points)
        # One swapper call per identity: every face, or each mapped person's faces together.
        groups: dict[int, list[int]] = {}
        for n, (_, _, identity) in enumerate(jobs):
            groups.setdefault(id(identity), []).append(n)
        for members in groups.values():
            group = [placed[n] for n in members]
            cut = crops if len(groups) == 1 else batch.cut(group, size)
            source = self._identity(jobs[members[0]][2])
            subs = executor.infer(
                self.swapper.session, spec.io, executor.split(cut, k), per_item={spec.io.source: source}
            )
            swapped = executor.weave(subs, k)
            if self.second is not None:
                # Both swappers' faces of the same crops, mixed on the host before paste-back.
                mixed = self._blend_second(executor.host(cut), executor.host(swapped), jobs[members[0]][2])
                swapped = executor.images(mixed)
            kept = [masks[n] for n in members]
            if self._colours is not None:
                # Colour transfer runs on the host, on the crops alone (a few kilobytes each).
                pairs = zip(executor.host(swapped), executor.host(cut), kept, [jobs[n] for n in members], strict=True)
                matched = [self._colours.transfer(ctxs[i].index, f, r, c, m) for r, c, m, (i, f, _) in pairs]
                swapped = executor.images(np.stack(matched))
            batch.paste(group, swapped, [mask * (self.options.blend / 100.0) for mask in kept])
        return batch.result()
