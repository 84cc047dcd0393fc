"""Face analysis: detect, landmarks, embed, select, align, mask, paste back, colour transfer, tracking.

One `FaceAnalyser` interface with two implementations, chosen by the job's `faces.analyser` setting:
`embedded` (dlib, offline; `engine/faces/embedded.py`) and `buffalo_l` (InsightFace SCRFD + ArcFace, downloaded;
`engine/faces/buffalo.py`). Everything works on `Frame` (H×W×3 uint8 RGB) and `Face` (engine/core/types.py).

Embeddings of different recognisers live in different spaces: `Face.recogniser` names the one that produced an
embedding, and `distance` refuses to compare embeddings of two recognisers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from engine.core.types import Face, Frame


class FaceAnalyser(Protocol):
    """Finds faces and describes them.

    id: "embedded" or "buffalo_l". recogniser: id of the embedding model ("dlib_resnet_v1" 128-d, euclidean;
    "arcface_w600k_r50" 512-d, cosine). threshold: the distance under which two faces are the same person for
    this recogniser (dlib: 0.6).
    """

    id: str
    recogniser: str
    threshold: float

    def detect(self, frame: Frame) -> list[Face]:
        """All faces on the frame: box, 5 landmarks (eye centres, nose tip, mouth corners, image-left first),
        score, and 68 landmarks where the analyser has a 68-point model. No embedding."""
        ...

    def refit(self, frame: Frame, face: Face) -> Face | None:
        """Re-fit the landmarks of a face tracked from a previous frame (its box is the prediction) on this frame;
        None when the fit says there is no face there any more. Cheap: used between detections."""
        ...

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        """The same faces with `embedding` (L2-normalised float32) and `recogniser` set."""
        ...

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        """Identity distance between two embeddings of this recogniser (0 = same)."""
        ...
