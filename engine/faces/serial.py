"""One face analyser shared by a run's threads, its model calls made one at a time."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser


class SerialAnalyser:
    """A FaceAnalyser whose model calls run one at a time.

    A video run finds faces on one thread while identity QA embeds faces on another, both with the job's one
    analyser; dlib's and ONNX Runtime's objects are not documented as safe for concurrent calls on one object.
    Every other attribute (threshold, recogniser, …) is the wrapped analyser's."""

    def __init__(self, inner: FaceAnalyser) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def detect(self, frame: Frame) -> list[Face]:
        with self._lock:
            return self._inner.detect(frame)

    def refit(self, frame: Frame, face: Face) -> Face | None:
        with self._lock:
            return self._inner.refit(frame, face)

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        with self._lock:
            return self._inner.embed(frame, faces)

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return self._inner.distance(a, b)
