"""State carried from frame to frame of a video so that per-frame estimates do not flicker: a value per tracked
face (an estimated age, an eye's opening), and whole planes (a background matte, a colourizer's chroma).

Both smooth exponentially over time: a new estimate moves the kept one by `1 − exp(−Δt / time_constant)` of the
way, Δt in seconds between the two frames (their `FrameContext.time`; 1/25 s per frame where no time is known).
A value belongs to the tracked face at the same place (box IoU ≥ SAME_FACE_IOU, the same person where faces are
numbered) seen at most GAP_FRAMES frames before; a new face, or one back after longer, starts from its own
estimate. Planes follow only consecutive frames of one size, and only where they changed a little: a pixel whose
new value differs from the kept one by more than `gate` takes the new one at once (something moved there; holding
the old one would leave a trail), so only the small frame-to-frame wobble of a still region is averaged out.
A single frame (an image, a preview) is its own estimate. Safe to call from several threads (one lock each).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.core.types import Face
from engine.faces.boxes import iou

SAME_FACE_IOU = 0.3
GAP_FRAMES = 12
FRAME_SECONDS = 1 / 25


def _step(dt: float, time_constant: float) -> float:
    """How far (0–1) a new estimate `dt` seconds after the kept one moves it: 1 when nothing is smoothed."""
    if time_constant <= 0.0 or dt <= 0.0:
        return 1.0
    return 1.0 - math.exp(-dt / time_constant)


def _seconds(index: int, time: float | None) -> float:
    return float(time) if time is not None else index * FRAME_SECONDS


@dataclass
class _Kept:
    person: int | None
    box: tuple[float, float, float, float]
    index: int
    seconds: float
    value: npt.NDArray[np.float64]


class TrackedValues:
    """A value (any shape, float) per tracked face, smoothed over `time_constant` seconds (see the module)."""

    def __init__(self, time_constant: float) -> None:
        self.time_constant = time_constant
        self._faces: list[_Kept] = []
        self._lock = threading.Lock()

    def smooth(self, index: int, time: float | None, face: Face, value: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The smoothed value of `face` on frame `index` (shown at `time` seconds), given this frame's estimate."""
        estimate = np.asarray(value, dtype=np.float64)
        seconds = _seconds(index, time)
        with self._lock:
            self._faces = [f for f in self._faces if 0 <= index - f.index <= GAP_FRAMES]
            kept = max(
                (
                    f
                    for f in self._faces
                    if f.person == face.person and f.value.shape == estimate.shape and f.index < index
                ),
                key=lambda f: iou(f.box, face.box),
                default=None,
            )
            if kept is None or iou(kept.box, face.box) < SAME_FACE_IOU:
                self._faces.append(_Kept(face.person, face.box, index, seconds, estimate))
                return estimate
            kept.value = kept.value + _step(seconds - kept.seconds, self.time_constant) * (estimate - kept.value)
            kept.box, kept.index, kept.seconds = face.box, index, seconds
            return kept.value.copy()


class SteadyPlanes:
    """Whole-frame planes (H×W×C float32) held steady over `time_constant` seconds where they barely change
    (|new − kept| ≤ `gate`, in the planes' own units), passed through at once where they change more."""

    def __init__(self, time_constant: float, gate: float) -> None:
        self.time_constant = time_constant
        self.gate = gate
        self._kept: tuple[int, float, npt.NDArray[np.float32]] | None = None
        self._lock = threading.Lock()

    def smooth(self, index: int, time: float | None, planes: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The planes to use for frame `index` (shown at `time` seconds), given this frame's own."""
        seconds = _seconds(index, time)
        with self._lock:
            kept = self._kept
            if kept is None or index != kept[0] + 1 or kept[2].shape != planes.shape:
                self._kept = (index, seconds, planes)
                return planes
            previous = kept[2]
            step = np.float32(_step(seconds - kept[1], self.time_constant))
            blended = previous + step * (planes - previous)
            out = np.where(np.abs(planes - previous) <= self.gate, blended, planes).astype(np.float32)
            self._kept = (index, seconds, out)
            return out
