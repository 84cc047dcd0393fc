"""Face enhancer: restore detail on the faces the face stage found, after a swap or in any footage.

Models: `real_esrgan_face` (embedded, offline: an embedded Real-ESRGAN ×4 model restores the aligned face from a
128 px crop to 512 px), and, downloaded, GFPGAN v1.4 / v1.3, CodeFormer (with its fidelity weight; our export
of the official weights or FaceFusion's published ONNX), RestoreFormer and GPEN-BFR at 256, 512, 1024 and 2048
px. Each model's crop (template and size) and normalisation come from its catalogue entry. `auto` takes GFPGAN
v1.4 when its file is present and otherwise the embedded model, so the enhancer works on a fresh machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from engine.core.options import Shown
from engine.core.types import Face, Frame, Mask
from engine.faces import masker
from engine.faces.align import estimate_affine, transform_points, warp_face
from engine.faces.masker import Masker, MaskKinds, Regions
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.executor import Executor, Frames, Images, executor_for
from engine.models.runtime import LoadedModel, Runtime

EMBEDDED = "real_esrgan_face"
# The aligned crop the embedded model restores: 128 px in, ×4 out = 512 px on the ffhq_512 template.
DETAIL_INPUT = 128
EMBEDDED_SIZE = 512
EMBEDDED_TEMPLATE = "ffhq_512"


class FaceEnhancerOptions(ProcessorOptions):
    model: Annotated[
        Literal[
            "auto",
            "real_esrgan_face",
            "gfpgan_1_4",
            "gfpgan_1_3",
            "codeformer",
            "restoreformer",
            "gpen_bfr_256",
            "gpen_bfr_512",
            "gpen_bfr_1024",
            "gpen_bfr_2048",
        ],
        Shown(models="face_enhancer"),
    ] = Field(default="auto", description="auto: GFPGAN v1.4 when downloaded, else the embedded real_esrgan_face")
    fidelity: Annotated[float, Shown(when={"model": ("codeformer",)})] = Field(
        default=0.5, ge=0.0, le=1.0, description="codeformer: 0 = strongest restoration, 1 = closest to the input"
    )
    detail_model: Annotated[
        Literal["realesr_animevideov3", "real_esrgan_x4plus", "real_esrgan_x4plus_anime_6b"],
        Shown(when={"model": ("auto", "real_esrgan_face")}, models="frame_enhancer"),
    ] = Field(default="realesr_animevideov3", description="real_esrgan_face: the embedded ×4 model it runs")
    blend: Annotated[int, Shown(unit="%")] = Field(
        default=80, ge=0, le=100, description="% of the restored face over the original"
    )
    mask: MaskKinds = Field(
        default=("box", "face"),
        description="paste-back masks, multiplied: feathered box, face outline (68 landmarks), occlusion (what "
        "covers the face stays: XSeg, download), region (only the chosen parts of the face)",
    )
    mask_padding: Annotated[float, Shown(when={"mask": ("box",)}, unit="%")] = Field(
        default=0.0, ge=0.0, le=40.0, description="box padding, % of the crop"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="mask feather, fraction of the crop")
    mask_regions: Annotated[Regions, Shown(when={"mask": ("region",)})] = Field(
        default=masker.REGIONS, description="region mask: the parts of the face that are restored"
    )
    occluder: Annotated[Literal[masker.OCCLUDERS], Shown(when={"mask": ("occlusion",)}, models="face_occluder")] = (  # type: ignore[valid-type]
        Field(default="xseg_1", description="occlusion mask: the XSeg model (GPL-3.0, download)")
    )
    parser: Annotated[Literal["auto", *masker.PARSERS], Shown(when={"mask": ("region",)})] = Field(  # type: ignore[valid-type]
        default="auto",
        description="region mask: the BiSeNet face parser (download); auto: one already here, else the landmarks",
    )
    batch: Annotated[int, Shown(unit="faces", advanced=True)] = Field(
        default=4, ge=1, le=64, description="faces per model call"
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_mask(cls, raw: Any) -> Any:
        """Earlier releases named the mask by one word: "box", or "face" (the box cut to the outline)."""
        if isinstance(raw, dict) and isinstance(raw.get("mask"), str) and raw["mask"] in ("box", "face"):
            raw = {**raw, "mask": ("box",) if raw["mask"] == "box" else ("box", "face")}
        return raw


class FaceEnhancer(FrameProcessor[FaceEnhancerOptions]):
    """Restores every face in `ctx.faces` (found once per frame by the pipeline) and pastes it back."""

    id: ClassVar[str] = "face_enhancer"
    title: ClassVar[str] = "Face enhancer"
    Options: ClassVar[type[ProcessorOptions]] = FaceEnhancerOptions
    needs_faces: ClassVar[bool] = True

    def __init__(self, options: FaceEnhancerOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.model_id = self.resolve(options, runtime)
        self.loaded: LoadedModel = runtime.load(self.weights_id(options, self.model_id), options.backend)
        self.masker = Masker(
            runtime, self.id, options.mask, padding=options.mask_padding, blur=options.mask_blur,
            regions=options.mask_regions, occluder=options.occluder, parser=options.parser, backend=options.backend,
        )  # fmt: skip
        self.notes = self.masker.notes
        self.needs_landmarks68 = self.masker.needs_landmarks68

    @staticmethod
    def resolve(options: FaceEnhancerOptions, runtime: Runtime) -> str:
        """The model `auto` stands for: GFPGAN v1.4 when one of its files is present here, else the embedded one."""
        if options.model != "auto":
            return options.model
        present = any(runtime.is_present(f) for f in runtime.manifest.get("gfpgan_1_4").files)
        return "gfpgan_1_4" if present else EMBEDDED

    @staticmethod
    def weights_id(options: FaceEnhancerOptions, model_id: str) -> str:
        return options.detail_model if model_id == EMBEDDED else model_id

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        opts: FaceEnhancerOptions = options  # type: ignore[assignment]
        model = EMBEDDED if opts.model == "auto" else opts.model
        return [cls.weights_id(opts, model), *masker.model_ids(opts.mask, opts.occluder, opts.parser)]

    def describe(self) -> dict[str, Any]:
        return {
            **self.loaded.describe(),
            "enhancer": self.model_id,
            "options": self.options.model_dump(mode="json"),
            "masks": self.masker.describe(),
        }

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Restore the faces of every frame (H×W×3 uint8 RGB); faces of all frames go through the model together,
        on the device the model runs on (`engine.models.executor`), and so do their masks (one call per chunk)."""
        jobs = [(i, face) for i, ctx in enumerate(ctxs) for face in ctx.faces]
        if not jobs:
            return list(frames)
        executor = executor_for(self.runtime, self.loaded.session)
        batch = executor.load(frames)
        step = self.loaded.spec.io.batch or self.options.batch
        for start in range(0, len(jobs), step):
            chunk = jobs[start : start + step]
            affines, restored, size = self._restore(executor, batch, chunk)
            placed = [(i, affine) for (i, _), affine in zip(chunk, affines, strict=True)]
            # The masks are made on the faces as they are (the paste-back crop of the input), all in one call.
            originals = self.masker.crops_from(
                lambda jobs=placed, side=size: executor.host(batch.cut(jobs, side)), len(placed), size
            )
            points = [
                None if face.landmarks68 is None else transform_points(face.landmarks68, affine)
                for (_, face), affine in zip(chunk, affines, strict=True)
            ]
            masks = [mask * (self.options.blend / 100.0) for mask in self.masker(originals, points)]
            batch.paste(placed, restored, masks)
        return batch.result()

    def frame_masks(self, frame: Frame, faces: Sequence[Face]) -> list[Mask]:
        """Each face's paste-back mask on `frame` (H×W float32 in [0, 1]: how much of the restored face a pixel
        takes), as `process` makes it (for the face debugger)."""
        if not faces:
            return []
        template, size = self._crop()
        affines = [estimate_affine(f.landmarks5, template, size) for f in faces]
        crops = np.stack([warp_face(frame, m, size) for m in affines])
        points = [
            None if f.landmarks68 is None else transform_points(f.landmarks68, m)
            for f, m in zip(faces, affines, strict=True)
        ]
        weight = self.options.blend / 100.0
        return [
            masker.to_frame(m, a, frame.shape) * weight
            for m, a in zip(self.masker(crops, points), affines, strict=True)
        ]

    def _crop(self) -> tuple[str, int]:
        """The template and size (px) of the crop the restored face is pasted back from."""
        if self.model_id == EMBEDDED:
            return EMBEDDED_TEMPLATE, EMBEDDED_SIZE
        return self.loaded.spec.template or EMBEDDED_TEMPLATE, self.loaded.spec.input_size or EMBEDDED_SIZE

    def _restore(
        self, executor: Executor, batch: Frames, chunk: list[tuple[int, Face]]
    ) -> tuple[list[np.ndarray], Images, int]:
        """(affines mapping frame pixels to the model's aligned crops, the restored crops, their size S): S×S×3
        uint8 RGB crops where the executor keeps them, S the model's size on its template (the embedded model: 512
        px on ffhq_512, restored from a 128 px crop)."""
        spec = self.loaded.spec
        embedded = self.model_id == EMBEDDED
        template, size = self._crop()
        affines = [estimate_affine(face.landmarks5, template, size) for _, face in chunk]
        if embedded:
            # Restore from a 128 px crop: the ×4 model brings it to 512 px with detail it synthesises.
            small = [estimate_affine(face.landmarks5, template, DETAIL_INPUT) for _, face in chunk]
            crops = batch.cut([(i, m) for (i, _), m in zip(chunk, small, strict=True)], DETAIL_INPUT)
        else:
            crops = batch.cut([(i, m) for (i, _), m in zip(chunk, affines, strict=True)], size)
        io = spec.io
        # A downloaded graph's inputs are checked by name; a converted or exported one is fed in its input order.
        names = (io.input, io.fidelity) if io.inputs else (*self.loaded.session.input_names, None)[:2]
        per_call = {}
        if io.fidelity is not None:
            # CodeFormer's weight: float32 in our exports, float64 in FaceFusion's (as the file declares).
            per_call[names[1]] = np.array([self.options.fidelity], dtype=io.input_type(io.fidelity))
        restored = executor.infer(self.loaded.session, io, crops, name=names[0], per_call=per_call)
        if tuple(restored.shape[1:3]) != (size, size):
            raise RuntimeError(f"{spec.id} returned {tuple(restored.shape[1:3])} crops, expected {size}×{size}")
        return affines, restored, size
