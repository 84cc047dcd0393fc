"""Pictures of faces for people to look at: square thumbnails with the whole face, and numbered boxes drawn on a
frame. Nothing here feeds a model (models take aligned crops: engine/faces/align.py)."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from engine.core.types import Face, Frame

# Detector boxes run from the brows to the chin; a square 1.9× the larger side shows the forehead, hair line,
# ears and chin too. The centre moves up a little for the same reason.
_MARGIN = 1.9
_LIFT = 0.12
_PAD = (40, 40, 40)  # RGB grey beyond the frame's edge: a thumbnail of a face at the edge stays square and centred


def thumbnail(frame: Frame, box: tuple[float, float, float, float], size: int = 192) -> Frame:
    """A size×size (pixels) picture of the face whose detector box (x1, y1, x2, y2, frame pixels) is given: a
    square around it with a margin, the whole face visible, grey where the square leaves the frame.
    `frame` is H×W×3 uint8 RGB; so is the result."""
    x1, y1, x2, y2 = box
    side = max(x2 - x1, y2 - y1) * _MARGIN
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2 - (y2 - y1) * _LIFT
    scale = size / side
    # One affine warp: crop, scale and pad in a single resampling (area-like quality from INTER_AREA when small).
    affine = np.array([[scale, 0, size / 2 - cx * scale], [0, scale, size / 2 - cy * scale]], np.float64)
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    return cv2.warpAffine(
        frame, affine, (size, size), flags=interpolation, borderMode=cv2.BORDER_CONSTANT, borderValue=_PAD
    )


def face_label(number: int, face: Face) -> str:
    """What a face of a frame is called on a preview: `P3` for a face known as person 3 (the numbers `faces scan`
    and the people panel use, from 0), else its place `number` on the frame (1, 2, …)."""
    return f"P{face.person}" if face.person is not None else str(number)


def draw_numbers(frame: Frame, faces: Sequence[Face], chosen: Sequence[Face] = ()) -> Frame:
    """A copy of `frame` (H×W×3 uint8 RGB) with each face's box and label drawn (`face_label`: its person, else its
    number 1, 2, … in the order given); faces in `chosen` (the ones a job would process) in orange, the others in
    white. Line width and text size follow the frame's size, so labels stay readable on a 4K frame shown small."""
    out = np.ascontiguousarray(frame.copy())
    picked = {id(f) for f in chosen}
    boxes_of_chosen = [tuple(round(v) for v in f.box) for f in chosen]
    thickness = max(1, round(max(frame.shape[:2]) / 400))
    font_scale = max(0.5, max(frame.shape[:2]) / 900)
    for number, face in enumerate(faces, 1):
        box = tuple(round(v) for v in face.box)
        is_chosen = id(face) in picked or box in boxes_of_chosen
        colour = (255, 140, 0) if is_chosen else (255, 255, 255)
        x1, y1, x2, y2 = box
        cv2.rectangle(out, (x1, y1), (x2 - 1, y2 - 1), (0, 0, 0), thickness + 2)
        cv2.rectangle(out, (x1, y1), (x2 - 1, y2 - 1), colour, thickness)
        label = face_label(number, face)
        (tw, th), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, font_scale, thickness + 1)
        top = max(y1 - th - base - 2 * thickness, 0)
        cv2.rectangle(out, (x1, top), (x1 + tw + 4 * thickness, top + th + base + 2 * thickness), colour, -1)
        cv2.putText(
            out, label, (x1 + 2 * thickness, top + th + thickness), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (0, 0, 0),
            thickness + 1, cv2.LINE_AA,
        )  # fmt: skip
    return out
