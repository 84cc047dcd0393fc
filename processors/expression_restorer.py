"""Expression restorer: after a swap, gives each swapped face back the target's own expression (LivePortrait).

Per face (MODELS.md §10; FaceFusion 3.8.1 expression_restorer/core.py L158-262), both the frame before the chain
(`ctx.original`) and the swapped frame are cut on `arcface_128` at 512 px and resized to LivePortrait's 256 px
input, RGB/255. Then, in this order:
1. the feature extractor reads the swapped face's appearance (a feature volume);
2. the motion extractor reads the original face's expression;
3. the motion extractor reads the swapped face's pose (pitch, yaw, roll in degrees; scale; translation), its
   expression and its canonical keypoints (21×3);
4. the chosen parts of the expression move toward the original's: expression = s·original + (1 − s)·swapped on
   the parts' keypoints (eyes: 1, 2, 6, 10–13, 15, 16; lips: 3, 7, 14, 17–20; keypoints 0, 4, 5, 8, 9 always stay
   the swapped face's), s = strength / 100;
5. the generator warps the feature volume from the swapped face's own keypoints to the driving ones, both
   scale·(keypoints·Rᵀ + expression) + translation with R = Rotation.from_euler("xyz", [pitch, yaw, roll]);
6. its 512 px output (RGB in [0, 1]) is pasted back under a feathered box.
Strength runs 0–100 onto 0–1: FaceFusion maps it onto 0–1.2 and clips the extrapolated expression to fixed
per-keypoint tables of its own; without extrapolation the mix stays between two real expressions and needs no
limits. At strength 0 nothing is run and every frame comes back as it was. MIT-licensed weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import Field

from engine.core.errors import InvalidJob
from engine.core.options import Shown
from engine.core.types import Face, Frame
from engine.faces.align import estimate_affine, paste_back, warp_face
from engine.faces.masks import box_mask
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import from_tensor, to_tensor

FEATURES, MOTION, GENERATOR = (
    "live_portrait_feature_extractor",
    "live_portrait_motion_extractor",
    "live_portrait_generator",
)
CROP = 512
INPUT = 256
TEMPLATE = "arcface_128"
# LivePortrait's 21 implicit keypoints, by the face part they move (FaceFusion expression_restorer/core.py).
PARTS = {"eyes": (1, 2, 6, 10, 11, 12, 13, 15, 16), "lips": (3, 7, 14, 17, 18, 19, 20)}
# The motion extractor's outputs, in graph order.
PITCH, YAW, ROLL, SCALE, TRANSLATION, EXPRESSION, KEYPOINTS = range(7)


class ExpressionRestorerOptions(ProcessorOptions):
    strength: Annotated[int, Shown(unit="%")] = Field(
        default=80, ge=0, le=100, description="how far the expression moves back to the target's own (0: not at all)"
    )
    parts: Literal["whole", "eyes", "lips"] = Field(
        default="whole", description="which parts of the expression to restore: eyes and brows, lips and jaw, or both"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="box mask feather, fraction of the crop")


class ExpressionRestorer(FrameProcessor[ExpressionRestorerOptions]):
    """Restores the expression of every face in `ctx.faces` from the frame as it was before the chain."""

    id: ClassVar[str] = "expression_restorer"
    title: ClassVar[str] = "Expression restorer (LivePortrait)"
    Options: ClassVar[type[ProcessorOptions]] = ExpressionRestorerOptions
    needs_faces: ClassVar[bool] = True

    def __init__(self, options: ExpressionRestorerOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.models: dict[str, LoadedModel] = {}
        if options.strength > 0:
            runtime.ensure(self.model_ids(options), options.backend)
            self.models = {m: runtime.load(m, options.backend) for m in self.model_ids(options)}
        keep = [i for part in ("eyes", "lips") if options.parts in (part, "whole") for i in PARTS[part]]
        self.restored = np.zeros(21, bool)
        self.restored[keep] = True

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        return [FEATURES, MOTION, GENERATOR] if options.strength > 0 else []  # type: ignore[attr-defined]

    def describe(self) -> dict[str, Any]:
        return {
            "models": {m: loaded.describe() for m, loaded in self.models.items()},
            "options": self.options.model_dump(mode="json"),
        }

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Restore the expression of the faces of every frame (H×W×3 uint8 RGB) from `ctx.original`."""
        if not self.models:
            return list(frames)
        out = list(frames)
        for i, ctx in enumerate(ctxs):
            if ctx.faces and ctx.original is None:
                raise InvalidJob("expression_restorer needs each frame as it was before the swap, which was not given")
            for face in ctx.faces:
                out[i] = self._restore(ctx.original, out[i], face)  # type: ignore[arg-type]
        return out

    def _run(self, model_id: str, inputs: dict[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        return self.models[model_id].session.run(inputs)

    def _tensor(self, model_id: str, crop: Frame) -> dict[str, npt.NDArray[np.float32]]:
        io = self.models[model_id].spec.io
        small = cv2.resize(crop, (INPUT, INPUT), interpolation=cv2.INTER_AREA)
        return {io.input: to_tensor(small[None], io)}

    def _restore(self, original: Frame, swapped: Frame, face: Face) -> Frame:
        affine = estimate_affine(face.landmarks5, TEMPLATE, CROP)
        before, after = warp_face(original, affine, CROP), warp_face(swapped, affine, CROP)
        (volume, *_) = self._run(FEATURES, self._tensor(FEATURES, after))
        target_expression = self._run(MOTION, self._tensor(MOTION, before))[EXPRESSION]
        motion = self._run(MOTION, self._tensor(MOTION, after))
        own = motion[EXPRESSION]
        s = self.options.strength / 100.0
        mixed = np.where(self.restored[None, :, None], s * target_expression + (1.0 - s) * own, own)
        pose = [float(np.ravel(motion[k])[0]) for k in (PITCH, YAW, ROLL)]
        from scipy.spatial.transform import Rotation

        rotation = Rotation.from_euler("xyz", pose, degrees=True).as_matrix().astype(np.float32)
        scale = np.asarray(motion[SCALE], np.float32).reshape(-1, 1, 1)
        shift = np.asarray(motion[TRANSLATION], np.float32).reshape(-1, 1, 3)
        keypoints = motion[KEYPOINTS] @ rotation.T
        driving = (scale * (keypoints + mixed) + shift).astype(np.float32)
        current = (scale * (keypoints + own) + shift).astype(np.float32)
        (image, *_) = self._run(GENERATOR, {"feature_volume": volume, "source": driving, "target": current})
        restored = from_tensor(image, self.models[GENERATOR].spec.io)[0]
        if restored.shape[:2] != (CROP, CROP):
            restored = cv2.resize(restored, (CROP, CROP), interpolation=cv2.INTER_CUBIC)
        return paste_back(swapped, restored, affine, box_mask(CROP, blur=self.options.mask_blur))
