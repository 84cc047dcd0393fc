"""Face editor: moves parts of each chosen face with LivePortrait — brows, eyes open or closed, gaze, mouth open
or closed, smile — and turns the head, by sliders.

Per face (the LivePortrait facts: MODELS.md §10 and the entries' comments in engine/models/manifest.toml):
1. the face is cut on `ffhq_512` at 512 px around its 5 landmarks drawn out ×1.5 about the nose tip (the whole
   head), and resized to LivePortrait's 256 px, RGB/255;
2. the feature extractor reads its appearance (a feature volume), the motion extractor its pose (pitch, yaw,
   roll in degrees; scale; translation), expression and canonical keypoints (21×3);
3. its own points are `scale·(keypoints·Rᵀ + expression) + translation`, R = Rotation.from_euler("xyz",
   [pitch, yaw, roll]); the driving points are the same with the sliders' keypoint offsets (EDITS, linear in
   each slider) added to the expression and the head angles added to the pose;
4. eyes: the eye retargeter takes the own points (63 values), both eyes' opening (68-landmark height ÷ width)
   and the opening wanted, and gives a 63-value offset for the driving points; mouth: the lip retargeter alike
   with the lips' opening. The measured openings are smoothed per tracked face (engine/faces/temporal.py) so
   the offsets do not flicker over a video;
5. the stitcher fits the driving points to the own ones (the face's outline stays where it is);
6. the generator warps the feature volume from the own points to the driving ones; its 512 px output (RGB in
   [0, 1]) is pasted back under a feathered box.
Every slider at 0 runs nothing and returns every frame as it was. The keypoint offsets are facestudio's own
calibration of which LivePortrait keypoints move a part (learned from FaceFusion's face editor, values not taken
from it); what each looks like on the real weights has not been seen here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import Field

from engine.core.errors import InvalidJob
from engine.core.options import Shown
from engine.core.types import Face, Frame, Mask
from engine.faces import masker
from engine.faces.align import estimate_affine, paste_back, scaled_landmarks, warp_face
from engine.faces.masks import box_mask
from engine.faces.temporal import TrackedValues
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import from_tensor, to_tensor

FEATURES, MOTION, GENERATOR = (
    "live_portrait_feature_extractor",
    "live_portrait_motion_extractor",
    "live_portrait_generator",
)
EYES, LIPS, STITCHER = "live_portrait_eye_retargeter", "live_portrait_lip_retargeter", "live_portrait_stitcher"
CROP, INPUT, TEMPLATE, HEAD_SCALE = 512, 256, "ffhq_512", 1.5
PITCH, YAW, ROLL, SCALE, TRANSLATION, EXPRESSION, KEYPOINTS = range(7)
# Expression offsets at +100 % of a slider: (keypoint, axis x/y/z, offset), linear in the slider's value.
EDITS: dict[str, tuple[tuple[int, int, float], ...]] = {
    "eyebrows": ((1, 1, 0.02), (2, 1, -0.02)),
    "gaze_horizontal": ((11, 0, 0.02), (15, 0, 0.02)),
    "gaze_vertical": ((11, 1, -0.01), (13, 1, -0.005), (15, 1, -0.01), (16, 1, -0.005)),
    "smile": ((3, 1, -0.005), (7, 1, -0.005), (14, 1, -0.02), (17, 1, 0.01), (20, 1, -0.02)),
}
# The opening (height ÷ width, 68 landmarks) an eye or the mouth is retargeted to at +100 %; at −100 %, 0 (shut).
EYES_WIDE, MOUTH_WIDE = 0.5, 0.9
# Seconds over which a tracked face's measured openings settle.
OPENING_SECONDS = 0.2


def _slider(description: str) -> Any:
    return Field(default=0, ge=-100, le=100, description=description)


def _degrees(limit: int, description: str) -> Any:
    return Field(default=0, ge=-limit, le=limit, description=description)


class FaceEditorOptions(ProcessorOptions):
    eyebrows: Annotated[int, Shown(unit="%")] = _slider("brows lowered (−) or raised (+)")
    eyes: Annotated[int, Shown(unit="%")] = _slider("eyes closed (−100: shut) or opened wide (+)")
    gaze_horizontal: Annotated[int, Shown(unit="%")] = _slider("gaze to one side (−) or the other (+)")
    gaze_vertical: Annotated[int, Shown(unit="%")] = _slider("gaze down (−) or up (+)")
    mouth: Annotated[int, Shown(unit="%")] = _slider("mouth closed (−100: shut) or opened (+)")
    smile: Annotated[int, Shown(unit="%")] = _slider("frown (−) or smile (+)")
    head_pitch: Annotated[int, Shown(unit="°")] = _degrees(20, "degrees added to the head's pitch (nod)")
    head_yaw: Annotated[int, Shown(unit="°")] = _degrees(30, "degrees added to the head's yaw (turn)")
    head_roll: Annotated[int, Shown(unit="°")] = _degrees(20, "degrees added to the head's roll (tilt)")
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="box mask feather, fraction of the crop")

    def edits(self) -> bool:
        """Whether any slider moves anything."""
        return any(
            getattr(self, name) != 0 for name in (*EDITS, "eyes", "mouth", "head_pitch", "head_yaw", "head_roll")
        )


def opening(landmarks68: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """(left eye, right eye, mouth) opening of a face: each lid-to-lid (lip-to-lip) height over its corner-to-corner
    width, from 68 iBUG landmarks (frame pixels); about 0.3 for an open eye, 0 for a shut one or closed lips."""
    p = np.asarray(landmarks68, dtype=np.float64)

    def ratio(tops: tuple[int, ...], bottoms: tuple[int, ...], left: int, right: int) -> float:
        height = np.mean([np.linalg.norm(p[t] - p[b]) for t, b in zip(tops, bottoms, strict=True)])
        return float(height / max(np.linalg.norm(p[left] - p[right]), 1e-6))

    return np.array([ratio((37, 38), (41, 40), 36, 39), ratio((43, 44), (47, 46), 42, 45), ratio((62,), (66,), 48, 54)])


def wanted(current: float, slider: int, wide: float) -> float:
    """The opening a slider asks for: from the current one towards 0 (−100 %) or towards `wide` (+100 %)."""
    s = slider / 100.0
    return current * (1.0 + s) if s < 0 else current + s * (wide - current)


class FaceEditor(FrameProcessor[FaceEditorOptions]):
    """Edits every face in `ctx.faces` (see the module docstring)."""

    id: ClassVar[str] = "face_editor"
    title: ClassVar[str] = "Face editor (LivePortrait)"
    Options: ClassVar[type[ProcessorOptions]] = FaceEditorOptions
    needs_faces: ClassVar[bool] = True

    def __init__(self, options: FaceEditorOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.models: dict[str, LoadedModel] = {}
        self.needs_landmarks68 = options.eyes != 0 or options.mouth != 0
        self._openings = TrackedValues(OPENING_SECONDS)
        ids = self.model_ids(options)
        if ids:
            runtime.ensure(ids, options.backend)
            self.models = {m: runtime.load(m, options.backend) for m in ids}
        offsets = np.zeros((21, 3), np.float32)
        for name, moves in EDITS.items():
            for keypoint, axis, offset in moves:
                offsets[keypoint, axis] += offset * getattr(options, name) / 100.0
        self.offsets = offsets[None]

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        opts: FaceEditorOptions = options  # type: ignore[assignment]
        if not opts.edits():
            return []
        parts = [EYES] if opts.eyes else []
        parts += [LIPS] if opts.mouth else []
        return [FEATURES, MOTION, *parts, STITCHER, GENERATOR]

    def describe(self) -> dict[str, Any]:
        main = self.models[GENERATOR].describe() if self.models else {}
        return {
            **main,
            "models": {m: loaded.describe() for m, loaded in self.models.items()},
            "options": self.options.model_dump(mode="json"),
        }

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Each frame (H×W×3 uint8 RGB) with its faces edited; frames without faces, or no slider moved, as they
        were."""
        if not self.models:
            return list(frames)
        out = list(frames)
        for i, ctx in enumerate(ctxs):
            for face in ctx.faces:
                out[i] = self._edit(out[i], face, ctx)
        return out

    def frame_masks(self, frame: Frame, faces: Sequence[Face]) -> list[Mask]:
        """Each face's paste-back mask on `frame` (H×W float32 in [0, 1]), as `process` uses it (face debugger);
        all 0 when no slider moves (nothing is pasted)."""
        if not self.models:
            return [np.zeros(frame.shape[:2], np.float32) for _ in faces]
        mask = box_mask(CROP, blur=self.options.mask_blur)
        return [masker.to_frame(mask, self._affine(face), frame.shape) for face in faces]

    @staticmethod
    def _affine(face: Face) -> npt.NDArray[np.float64]:
        return estimate_affine(scaled_landmarks(face.landmarks5, HEAD_SCALE), TEMPLATE, CROP)

    def _run(self, model_id: str, inputs: dict[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        return [np.asarray(o, np.float32) for o in self.models[model_id].session.run(inputs)]

    def _edit(self, frame: Frame, face: Face, ctx: FrameContext) -> Frame:
        opts = self.options
        affine = self._affine(face)
        crop = warp_face(frame, affine, CROP)
        small = cv2.resize(crop, (INPUT, INPUT), interpolation=cv2.INTER_AREA)
        (volume, *_) = self._run(
            FEATURES, {self.models[FEATURES].spec.io.input: to_tensor(small[None], self.models[FEATURES].spec.io)}
        )
        motion = self._run(
            MOTION, {self.models[MOTION].spec.io.input: to_tensor(small[None], self.models[MOTION].spec.io)}
        )
        pose = np.array([float(np.ravel(motion[k])[0]) for k in (PITCH, YAW, ROLL)])
        scale = motion[SCALE].reshape(-1, 1, 1)
        shift = motion[TRANSLATION].reshape(-1, 1, 3)
        keypoints, expression = motion[KEYPOINTS].reshape(1, 21, 3), motion[EXPRESSION].reshape(1, 21, 3)
        own = (scale * (keypoints @ _rotation(pose).T + expression) + shift).astype(np.float32)
        turned = pose + (opts.head_pitch, opts.head_yaw, opts.head_roll)
        driving = (scale * (keypoints @ _rotation(turned).T + expression + self.offsets) + shift).astype(np.float32)
        if opts.eyes or opts.mouth:
            if face.landmarks68 is None:
                raise InvalidJob("face_editor's eyes and mouth need 68-point landmarks: use faces.analyser=embedded")
            left, right, lips = self._openings.smooth(ctx.index, ctx.time, face, opening(face.landmarks68))
            flat = own.reshape(1, -1)
            if opts.eyes:
                want = wanted((left + right) / 2.0, opts.eyes, EYES_WIDE)
                (delta, *_) = self._run(EYES, {"input": np.hstack([flat, [[left, right, want]]]).astype(np.float32)})
                driving = driving + delta.reshape(1, 21, 3)
            if opts.mouth:
                want = wanted(lips, opts.mouth, MOUTH_WIDE)
                (delta, *_) = self._run(LIPS, {"input": np.hstack([flat, [[lips, want]]]).astype(np.float32)})
                driving = driving + delta.reshape(1, 21, 3)
        (stitched, *_) = self._run(STITCHER, {"source": driving.astype(np.float32), "target": own})
        driving = stitched.reshape(1, 21, 3).astype(np.float32)
        (image, *_) = self._run(GENERATOR, {"feature_volume": volume, "source": driving, "target": own})
        edited = from_tensor(image, self.models[GENERATOR].spec.io)[0]
        if edited.shape[:2] != (CROP, CROP):
            edited = cv2.resize(edited, (CROP, CROP), interpolation=cv2.INTER_CUBIC)
        return paste_back(frame, edited, affine, box_mask(CROP, blur=opts.mask_blur))


def _rotation(pose: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """The rotation matrix of (pitch, yaw, roll) in degrees, as LivePortrait composes them ("xyz", extrinsic)."""
    from scipy.spatial.transform import Rotation

    return Rotation.from_euler("xyz", np.asarray(pose, np.float64), degrees=True).as_matrix().astype(np.float32)
