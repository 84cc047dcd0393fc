"""Lip syncer: moves each face's mouth to the speech of the target's own audio or of a given audio file (Wav2Lip).

Per face (MODELS.md §11; FaceFusion 3.8.1 lip_syncer/core.py L183-288): the face is cut on `ffhq_512` at 512 px;
the box of its 68 landmarks in that crop is warped to the model's 96×96 input (no padding, aspect not kept); the
model gets that crop with its lower half blanked beside the whole crop (BGR/255, 6 channels) and the mel window
of the frame's time (engine/media/speech.py); its 96 px mouth goes back through the inverse warps and is pasted under
a feathered lower-face mask (the hull of the jaw from landmark 3 to 13 and the nostrils, 31–35). Frames and
audio are matched by the frame's presentation time, not its index, so trimmed, resampled or variable-rate
targets stay in sync. Non-commercial weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import cv2
import numpy as np
from pydantic import Field, field_validator

from engine.core.errors import InvalidJob
from engine.core.options import Shown
from engine.core.types import Face, Frame, Mask
from engine.faces.align import estimate_affine, paste_back, transform_points, warp_face
from engine.job.processor import BoundJob, FrameContext, FrameProcessor, ProcessorOptions
from engine.media import speech
from engine.models.manifest import Manifest
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import from_tensor, to_tensor

if TYPE_CHECKING:
    pass

CROP = 512
TEMPLATE = "ffhq_512"
# iBUG 68-point indices whose hull is the lower face: the jaw from below the cheekbones round the chin, and the
# nostrils' base (what the mouth and jaw move).
LOWER_FACE = (*range(3, 14), *range(31, 36))


def _model_ids() -> list[str]:
    return [m.id for m in Manifest.load().for_task("lip_syncer")]


class LipSyncerOptions(ProcessorOptions):
    model: Annotated[str, Shown(models="lip_syncer")] = Field(
        default="wav2lip_gan_96",
        description="Wav2Lip model (download, non-commercial); the GAN one gives the better-looking mouth",
        json_schema_extra=lambda schema: schema.update(enum=_model_ids()),
    )
    audio: Annotated[Path | None, Shown(file="audio")] = Field(
        default=None, description="speech to sync the lips to (any file ffmpeg reads); empty: the target's own audio"
    )
    blend: Annotated[int, Shown(unit="%")] = Field(
        default=100, ge=0, le=100, description="% of the synced mouth over the original"
    )
    mask_blur: float = Field(default=0.3, ge=0.0, le=1.0, description="lower-face mask feather, fraction of its size")

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in _model_ids():
            raise ValueError(f"unknown lip_syncer model {value!r}; known: {', '.join(_model_ids())}")
        return value


class LipSyncer(FrameProcessor[LipSyncerOptions]):
    """Re-draws the mouth of every face in `ctx.faces` to match the audio at `ctx.time`."""

    id: ClassVar[str] = "lip_syncer"
    title: ClassVar[str] = "Lip syncer (Wav2Lip)"
    Options: ClassVar[type[ProcessorOptions]] = LipSyncerOptions
    needs_faces: ClassVar[bool] = True
    needs_video: ClassVar[bool] = True
    needs_landmarks68: bool = True

    def __init__(self, options: LipSyncerOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.loaded: LoadedModel = runtime.load(options.model, options.backend)
        self.audio_path: Path | None = options.audio
        self._mel: speech.Mel | None = None

    def bind_job(self, job: BoundJob) -> None:
        if self.audio_path is None:
            self.audio_path = job.target

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        return [options.model]  # type: ignore[attr-defined]

    def describe(self) -> dict[str, Any]:
        return {
            **self.loaded.describe(),
            "audio": None if self.audio_path is None else str(self.audio_path),
            "options": self.options.model_dump(mode="json"),
        }

    def mel(self) -> speech.Mel:
        """The audio's mel spectrogram, decoded on first use (once per job)."""
        if self._mel is None:
            if self.audio_path is None:
                raise InvalidJob("lip_syncer has no audio: set lip_syncer.audio=FILE")
            self._mel = speech.load(self.audio_path)
        return self._mel

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Sync the mouths of the faces of every frame (H×W×3 uint8 RGB) to the audio at each frame's time."""
        out = list(frames)
        for i, ctx in enumerate(ctxs):
            if not ctx.faces:
                continue
            if ctx.time is None:
                raise InvalidJob("lip_syncer needs a video target: an image has no time to take the audio at")
            source = speech.window(self.mel(), ctx.time)
            for face in ctx.faces:
                out[i] = self._sync(out[i], face, source)
        return out

    def _sync(self, frame: Frame, face: Face, source: np.ndarray) -> Frame:
        if face.landmarks68 is None:
            raise InvalidJob("lip_syncer needs 68-point landmarks: use faces.analyser=embedded")
        spec = self.loaded.spec
        io = spec.io
        size = spec.input_size or 96
        affine = estimate_affine(face.landmarks5, TEMPLATE, CROP)
        crop = warp_face(frame, affine, CROP)
        points = transform_points(face.landmarks68, affine)
        (x1, y1), (x2, y2) = points.min(axis=0), points.max(axis=0)
        box = cv2.getAffineTransform(
            np.float32([[x1, y1], [x2, y1], [x1, y2]]), np.float32([[0, 0], [size, 0], [0, size]])
        )
        shrink = x2 - x1 > size or y2 - y1 > size
        area = cv2.warpAffine(crop, box, (size, size), flags=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        masked = area.copy()
        masked[size // 2 :] = 0
        target = np.concatenate([to_tensor(masked[None], io), to_tensor(area[None], io)], axis=1)
        (result, *_) = self.loaded.session.run({io.input: target, str(io.source): source})
        mouth = from_tensor(result, io)[0]
        synced = cv2.warpAffine(mouth, cv2.invertAffineTransform(box), (CROP, CROP), borderMode=cv2.BORDER_REPLICATE)
        mask = lower_face_mask(points, self.options.mask_blur) * (self.options.blend / 100.0)
        return paste_back(frame, synced, affine, mask)


def lower_face_mask(points: np.ndarray, blur: float) -> Mask:
    """CROP×CROP float32 mask in [0, 1]: the hull of the LOWER_FACE landmarks (68×2, crop pixels), shrunk by half
    its feather and then feathered (Gaussian, sigma a quarter of it, cut at 3 sigma), so the ramp lies almost all
    inside the hull and the mask is exactly 0 from a quarter of the feather beyond it. The feather is `blur`·0.2
    of the hull's larger side."""
    hull = cv2.convexHull(np.asarray(points, np.float32)[list(LOWER_FACE)])[:, 0]
    mask = np.zeros((CROP, CROP), np.uint8)
    cv2.fillConvexPoly(mask, np.rint(hull).astype(np.int32), 1)
    span = hull.max(axis=0) - hull.min(axis=0)
    feather = blur * 0.2 * float(max(span.max(), 1.0))
    radius = round(feather / 2)
    if radius:
        mask = cv2.erode(mask, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1)))
    out = mask.astype(np.float32)
    sigma = feather / 4
    if sigma > 0:
        k = max(1, int(np.ceil(3 * sigma)))
        out = cv2.GaussianBlur(out, (2 * k + 1, 2 * k + 1), sigma, borderType=cv2.BORDER_CONSTANT)
    return np.clip(out, 0.0, 1.0)
