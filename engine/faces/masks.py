"""Blend masks for pasting processed faces back: a feathered box in crop coordinates, or a face-shaped mask from
68 landmarks. Every mask is H×W float32 in [0, 1], 1 = take the processed pixel, exactly 0 outside its support."""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from engine.core.types import Mask
from engine.faces.ibug68 import BROWS, CHIN, INNER_MOUTH, JAW, MOUTH_LEFT, MOUTH_RIGHT

# The landmarks stop at the brows; the hull's brow points are moved this fraction of the brow-to-chin distance
# further up the face (along the chin → brow axis, so roll is followed) to take in the lower forehead, where a
# swap's brows and skin would otherwise end in a visible line.
FOREHEAD_RAISE = 0.2
# The inner-mouth hole is grown by this fraction of the mouth's width so lips' inner edges stay the target's.
MOUTH_DILATION = 0.08
# Fixed-point bits for sub-pixel polygon filling (cv2 `shift`).
SUBPIXEL_BITS = 4


def box_mask(size: int, padding: tuple[float, float, float, float] = (0, 0, 0, 0), blur: float = 0.3) -> Mask:
    """A size×size float32 mask in [0, 1] for a square face crop: 0 within `padding` (top, right, bottom, left,
    each in % of size) of the edges, then a smooth (smoothstep) ramp up to 1 over `blur`·size/2 pixels.

    blur in [0, 1]: 0 = hard edge. The ramp starts at the padded edge and runs inward, so the mask is exactly 0 at
    the crop's border and a pasted crop never shows its square outline."""
    if size < 1:
        raise ValueError(f"size must be ≥ 1, got {size}")
    if not 0.0 <= blur <= 1.0:
        raise ValueError(f"blur must be in [0, 1], got {blur}")
    if len(padding) != 4 or not all(0.0 <= p <= 100.0 for p in padding):
        raise ValueError(f"padding is (top, right, bottom, left) in % of the size, each 0–100, got {padding}")
    top, right, bottom, left = (p * size / 100.0 for p in padding)
    feather = blur * size / 2.0
    rows = _profile(size, top, bottom, feather)
    cols = _profile(size, left, right, feather)
    return np.outer(rows, cols).astype(np.float32)


def landmark_mask(
    shape: tuple[int, int], landmarks68: npt.ArrayLike, *, exclude_mouth: bool = False, blur_px: float = 0.0
) -> Mask:
    """An H×W float32 mask in [0, 1] covering the face outlined by 68 landmarks (iBUG numbering, pixels of an
    image of `shape` (H, W)).

    The region is the convex hull of the jaw (points 0–16) and the brows (17–26), the brows raised by
    FOREHEAD_RAISE (0.2) of the brow-to-chin distance along the face's axis to cover the lower forehead. With
    `exclude_mouth`, the inner-mouth polygon (60–67), grown by MOUTH_DILATION (8 %) of the mouth's width, is cut
    out, so teeth and tongue stay the target's. `blur_px` is the width of the feather (the ramp from about
    0.02 to 0.98): the hull is shrunk and the mouth hole grown by blur_px / 2, then both are Gaussian-blurred
    (sigma = blur_px / 4), so the ramp lies almost entirely inside the face and outside the mouth: the inner
    mouth stays ≈ 0, the mask is already low on the hull's outline (≤ 0.08 for an 8 px feather) and exactly 0
    from about blur_px / 4 beyond it."""
    height, width = shape
    points = np.asarray(landmarks68, dtype=np.float64)
    if points.shape != (68, 2):
        raise ValueError(f"landmarks68 must be 68×2, got shape {points.shape}")
    if blur_px < 0:
        raise ValueError(f"blur_px must be ≥ 0, got {blur_px}")
    jaw, brows = points[JAW], points[BROWS]
    up = brows.mean(axis=0) - points[CHIN]
    raised = brows + FOREHEAD_RAISE * up
    face = _fill(height, width, cv2.convexHull(np.concatenate([jaw, raised]).astype(np.float32))[:, 0])
    if blur_px > 0:
        face = _grow(face, -blur_px / 2)
    mask = face.astype(np.float32)
    if blur_px > 0:
        mask = _blur(mask, blur_px / 4)
    if exclude_mouth:
        mouth = points[INNER_MOUTH]
        mouth_width = float(np.linalg.norm(points[MOUTH_RIGHT] - points[MOUTH_LEFT]))
        hole = _grow(_fill(height, width, mouth), MOUTH_DILATION * mouth_width + blur_px / 2).astype(np.float32)
        if blur_px > 0:
            hole = _blur(hole, blur_px / 4)
        mask *= 1.0 - hole
    return np.clip(mask, 0.0, 1.0).astype(np.float32)


def _profile(size: int, start_pad: float, end_pad: float, feather: float) -> npt.NDArray[np.float64]:
    """1-D mask along one axis: 0 in the pads, smoothstep ramps of `feather` px, 1 between. Distances are counted
    from the first and last pixel (not from the crop's outer edge) so those pixels are exactly 0 when feathered."""
    index = np.arange(size, dtype=np.float64)
    from_edge = np.minimum(index - start_pad, size - 1 - index - end_pad)
    if feather <= 0:
        return (from_edge >= 0).astype(np.float64)
    t = np.clip(from_edge / feather, 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _fill(height: int, width: int, polygon: npt.NDArray[np.floating]) -> npt.NDArray[np.bool_]:
    canvas = np.zeros((height, width), dtype=np.uint8)
    fixed = np.rint(np.asarray(polygon, dtype=np.float64) * (1 << SUBPIXEL_BITS)).astype(np.int32)
    cv2.fillPoly(canvas, [fixed], 1, lineType=cv2.LINE_8, shift=SUBPIXEL_BITS)
    return canvas.astype(bool)


def _grow(region: npt.NDArray[np.bool_], pixels: float) -> npt.NDArray[np.bool_]:
    """Dilate (pixels > 0) or erode (pixels < 0) a region with a disc of radius |pixels|.

    Only the region's bounding box, grown by the radius and a pixel, is computed (the same result: nothing outside
    it can change, and every pixel that reads the box's edge is outside the region, so it stays 0 either way)."""
    radius = round(abs(pixels))
    if radius == 0:
        return region
    rows, cols = np.flatnonzero(region.any(axis=1)), np.flatnonzero(region.any(axis=0))
    if not len(rows):
        return region
    height, width = region.shape
    y0, y1 = max(int(rows[0]) - radius - 1, 0), min(int(rows[-1]) + radius + 2, height)
    x0, x1 = max(int(cols[0]) - radius - 1, 0), min(int(cols[-1]) + radius + 2, width)
    disc = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    op = cv2.dilate if pixels > 0 else cv2.erode
    out = np.zeros_like(region)
    out[y0:y1, x0:x1] = op(region[y0:y1, x0:x1].astype(np.uint8), disc).astype(bool)
    return out


def _blur(mask: npt.NDArray[np.float32], sigma: float) -> npt.NDArray[np.float32]:
    # The kernel is cut at 3 sigma so the support stays finite: beyond it the mask is exactly 0.
    radius = max(1, int(np.ceil(3 * sigma)))
    return cv2.GaussianBlur(mask, (2 * radius + 1, 2 * radius + 1), sigma, borderType=cv2.BORDER_CONSTANT)


def crop_mask(
    size: int,
    landmarks68: npt.ArrayLike | None,
    *,
    kind: Literal["box", "face", "face_no_mouth"],
    padding: float = 0.0,
    blur: float = 0.3,
) -> Mask:
    """The paste-back mask of an aligned size×size face crop: a feathered box (`padding` % of the size on every
    side, `blur` as in `box_mask`), cut to the face outline unless `kind` is "box" or the face has no 68
    landmarks. `landmarks68` are in crop coordinates."""
    box = box_mask(size, (padding,) * 4, blur)
    if kind == "box" or landmarks68 is None:
        return box
    points = np.asarray(landmarks68, dtype=np.float32)
    span = points.max(axis=0) - points.min(axis=0)
    feather = blur * 0.2 * float(max(span[0], span[1], 1.0))
    shaped = landmark_mask((size, size), points, exclude_mouth=kind == "face_no_mouth", blur_px=feather)
    return np.minimum(box, shaped)
