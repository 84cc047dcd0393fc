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
from pydantic import Field

from engine.faces.align import estimate_affine, transform_points
from engine.faces.masks import crop_mask
from engine.models.executor import Executor, Frames, Images, executor_for
from engine.models.runtime import LoadedModel, Runtime
from engine.options import Shown
from engine.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.types import Face, Frame

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
    mask: Literal["box", "face"] = Field(default="face", description="feathered box, or cut to the face outline")
    mask_padding: Annotated[float, Shown(when={"mask": ("box",)}, unit="%")] = Field(
        default=0.0, ge=0.0, le=40.0, description="box padding, % of the crop"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="mask feather, fraction of the crop")
    batch: Annotated[int, Shown(unit="faces", advanced=True)] = Field(
        default=4, ge=1, le=64, description="faces per model call"
    )


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
        return [cls.weights_id(opts, model)]

    def describe(self) -> dict[str, Any]:
        return {**self.loaded.describe(), "enhancer": self.model_id, "options": self.options.model_dump(mode="json")}

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Restore the faces of every frame (H×W×3 uint8 RGB); faces of all frames go through the model together,
        on the device the model runs on (`engine.models.executor`)."""
        jobs = [(i, face) for i, ctx in enumerate(ctxs) for face in ctx.faces]
        if not jobs:
            return list(frames)
        executor = executor_for(self.runtime, self.loaded.session)
        batch = executor.load(frames)
        step = self.loaded.spec.io.batch or self.options.batch
        for start in range(0, len(jobs), step):
            chunk = jobs[start : start + step]
            affines, restored, size = self._restore(executor, batch, chunk)
            masks = []
            for (_, face), affine in zip(chunk, affines, strict=True):
                points = None if face.landmarks68 is None else transform_points(face.landmarks68, affine)
                mask = crop_mask(
                    size, points, kind=self.options.mask, padding=self.options.mask_padding,
                    blur=self.options.mask_blur,
                )  # fmt: skip
                masks.append(mask * (self.options.blend / 100.0))
            batch.paste([(i, affine) for (i, _), affine in zip(chunk, affines, strict=True)], restored, masks)
        return batch.result()

    def _restore(
        self, executor: Executor, batch: Frames, chunk: list[tuple[int, Face]]
    ) -> tuple[list[np.ndarray], Images, int]:
        """(affines mapping frame pixels to the model's aligned crops, the restored crops, their size S): S×S×3
        uint8 RGB crops where the executor keeps them, S the model's size on its template (the embedded model: 512
        px on ffhq_512, restored from a 128 px crop)."""
        spec = self.loaded.spec
        embedded = self.model_id == EMBEDDED
        template = EMBEDDED_TEMPLATE if embedded else spec.template or EMBEDDED_TEMPLATE
        size = EMBEDDED_SIZE if embedded else spec.input_size or EMBEDDED_SIZE
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
