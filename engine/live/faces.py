"""Face tracking for a live stream: the tracker re-made for the rate frames are processed at, and detection sized
for a camera.

A full detection costs several frames' worth of re-fits (dlib HOG finds 40 px faces by doubling the frame first:
≈ 180 ms at 640×480 against ≈ 55 ms on the frame halved, measured on 2 loaded CPU cores), and in a live stream
that frame's result comes out that much later: the spikes set the latency's 95th percentile. In front of a
webcam faces are large, so a live tracker's detections run on the frame scaled to `DETECT_SIDE` px on its long
side — finding faces at least 80 px wide in a 640×480 frame (an eighth of its width) — and each face found is
re-fitted on the full frame (≈ 15 ms), which puts its landmarks where a full-size detection would (0.5 px apart
on the demo clip, against 0.8 px for the halved detection alone). Only the embedded (dlib) analyser is wrapped:
buffalo_l's detector runs at a fixed input size, so scaling saves it nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import cv2
import numpy as np

from engine.faces import FaceAnalyser
from engine.faces.tracking import FaceTracker
from engine.service import FrameRenderer
from engine.types import Face, Frame

# Long side (px) of the frame a live detection runs on.
DETECT_SIDE = 320


class CameraDetector:
    """`analyser` with `detect` on the frame scaled to `side` px on its long side (frames no larger are detected
    as they are), each face found re-fitted on the full frame; every other call is the analyser's own."""

    def __init__(self, analyser: FaceAnalyser, side: int = DETECT_SIDE) -> None:
        self._inner = analyser
        self.side = side

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def detect(self, frame: Frame) -> list[Face]:
        scale = self.side / max(frame.shape[:2])
        if scale >= 1:
            return self._inner.detect(frame)
        small = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        faces = []
        for face in self._inner.detect(small):
            full = _scaled(face, 1 / scale)
            faces.append(self._inner.refit(frame, full) or full)
        return faces

    def refit(self, frame: Frame, face: Face) -> Face | None:
        return self._inner.refit(frame, face)

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        return self._inner.embed(frame, faces)

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return self._inner.distance(a, b)


def _scaled(face: Face, factor: float) -> Face:
    """`face` with its box and landmarks multiplied by `factor` (found on a scaled frame, put on the full one)."""
    return replace(
        face,
        box=(face.box[0] * factor, face.box[1] * factor, face.box[2] * factor, face.box[3] * factor),
        landmarks5=(face.landmarks5 * factor).astype(np.float32),
        landmarks68=None if face.landmarks68 is None else (face.landmarks68 * factor).astype(np.float32),
    )


def track_live(renderer: FrameRenderer, fps: float) -> None:
    """Give a live renderer a new tracker for `fps` processed frames per second (smoothing and gaps are in
    seconds), detecting as a camera needs (CameraDetector, for the embedded analyser). Faces are detected afresh
    on the next frame. Call it between renders, from the thread that renders."""
    if renderer.faces is None:
        return
    stage = renderer.faces.stage
    analyser = stage.analyser
    detector: Any = CameraDetector(analyser) if stage.settings.analyser == "embedded" else analyser
    stage.tracker = FaceTracker(detector, redetect_every=stage.settings.redetect_every, fps=fps)
