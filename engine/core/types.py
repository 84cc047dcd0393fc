"""The conventions every module shares, written down once (ARCHITECTURE.md §2).

- `Frame`: numpy array H×W×3, dtype uint8, **RGB** order, values 0–255. The only image type that crosses
  module boundaries; BGR exists only inside a function that calls OpenCV.
- `Mask`: numpy array H×W, float32 in [0, 1]; 1 means "take the processed pixel".
- `Affine`: numpy array 2×3 float64, maps source pixel coordinates (x, y, 1) to destination pixels.
- `Face`: one detected face in frame pixel coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Frame = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.float32]
Affine = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Face:
    """A face found on a frame.

    box: (x1, y1, x2, y2) in frame pixels, x2/y2 exclusive.
    landmarks5: 5×2 float32 (eyes, nose tip, mouth corners) in frame pixels; always present.
    landmarks68: 68×2 float32 in frame pixels when a 68-point landmarker ran, else None.
    score: detector confidence in [0, 1].
    embedding: the recogniser's identity vector (ArcFace: L2-normalised 512-d; dlib: its raw 128-d descriptor,
        whose euclidean metric and 0.6 threshold are defined on raw vectors), or None when no recogniser ran.
    recogniser: id of the model that produced `embedding`; embeddings of different recognisers are never compared.
    person: the person number the face stage gave the face (faces of one person across a video share it; the
        numbers `faces scan` lists), or None where faces are not grouped into people.
    """

    box: tuple[float, float, float, float]
    landmarks5: npt.NDArray[np.float32]
    score: float
    landmarks68: npt.NDArray[np.float32] | None = None
    embedding: npt.NDArray[np.float32] | None = None
    recogniser: str | None = None
    person: int | None = None


def check_frame(frame: object) -> Frame:
    """Return `frame` if it is a valid `Frame` (H×W×3 uint8, H, W ≥ 1), else raise TypeError naming what is wrong."""
    if not isinstance(frame, np.ndarray):
        raise TypeError(f"a Frame is a numpy array, got {type(frame).__name__}")
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3 or 0 in frame.shape:
        raise TypeError(f"a Frame is H×W×3 uint8 RGB, got shape {frame.shape} dtype {frame.dtype}")
    return frame
