"""Piecewise-affine (Delaunay) warping between two sets of corresponding points, and the extended 68-point
face geometry the landmark swapper warps with.

All points are (x, y) float32 in pixels. Triangles are computed once on the destination points and each is
warped with its own affine map, so a face can be reshaped (jaw, brows, forehead) and not only re-textured.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from engine.core.types import Frame
from engine.faces.ibug68 import BROWS, CHIN, NOSE_BRIDGE_TOP

Points = npt.NDArray[np.float32]


# Forehead points are raised from the brows along the face's chin→brow axis by this fraction of the
# chin-to-nose-bridge height: enough to cover the brows and the lower forehead, where identity also lives.
FOREHEAD_RISE = 0.24


def extend_with_forehead(landmarks68: Points) -> Points:
    """68 landmarks + 10 forehead points (one above each brow point), shape 78×2 float32 pixels.

    Built the same way on every face, so the extra points correspond between a source and a target face.
    """
    pts = np.asarray(landmarks68, np.float32)
    up = pts[NOSE_BRIDGE_TOP] - pts[CHIN]
    height = float(np.linalg.norm(up)) or 1.0
    up = up / height
    forehead = pts[BROWS] + up * (FOREHEAD_RISE * height)
    return np.concatenate([pts, forehead.astype(np.float32)], axis=0)


def delaunay(points: Points, width: int, height: int) -> npt.NDArray[np.int32]:
    """Delaunay triangles of `points` as T×3 indices into `points` (OpenCV Subdiv2D over the given canvas)."""
    rect = (0, 0, int(width), int(height))
    subdiv = cv2.Subdiv2D(rect)
    clipped = np.clip(points, [0, 0], [width - 1e-3, height - 1e-3]).astype(np.float32)
    for x, y in clipped:
        subdiv.insert((float(x), float(y)))
    index = {(round(float(x), 2), round(float(y), 2)): i for i, (x, y) in enumerate(clipped)}
    triangles = []
    for t in subdiv.getTriangleList().reshape(-1, 3, 2):
        ids = [index.get((round(float(x), 2), round(float(y), 2))) for x, y in t]
        if None not in ids and len(set(ids)) == 3:
            triangles.append(ids)
    return np.asarray(triangles, np.int32).reshape(-1, 3)


def warp_triangles(
    src: Frame, src_pts: Points, dst_shape: tuple[int, int], dst_pts: Points, triangles: npt.NDArray[np.int32]
) -> tuple[Frame, npt.NDArray[np.float32]]:
    """Warp `src` so that each triangle of `src_pts` lands on the same triangle of `dst_pts`.

    Returns (image of dst_shape (h, w) with the warped pixels, 0 where no triangle was drawn; coverage mask h×w
    float32 in [0, 1]: 1 where a triangle was drawn, anti-aliased at the edges of the triangles, each pixel taken
    from the first triangle that covers it and topped up by the next).

    One `cv2.remap` for the whole image: each pixel gets its triangle (rasterised in order, the first on top) and
    that triangle's inverse affine map. Against warping each triangle over its bounding rectangle and averaging
    the overlaps by their coverage (as this did before, 1.5× slower at 720p), pixels differ by at most one
    level, along the triangles' shared edges.
    """
    h, w = dst_shape
    cover = np.zeros((h, w), np.float32)
    owner = np.full((h, w), -1, np.int32)
    # Per triangle, the inverse map x_src = c0·x + c1·y + c2, y_src = c3·x + c4·y + c5 (x, y: output pixels).
    coefficients = np.zeros((6, max(len(triangles), 1)), np.float32)
    drawn = []
    for t, tri in enumerate(triangles):
        d = dst_pts[tri].astype(np.float32)
        x, y, bw, bh = cv2.boundingRect(d)
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + bw, w), min(y + bh, h)
        if x1 <= x0 or y1 <= y0:
            continue
        local = d - np.float32([x0, y0])
        inverse = cv2.invertAffineTransform(cv2.getAffineTransform(src_pts[tri].astype(np.float32), local))
        inverse[:, 2] -= inverse[:, 0] * x0 + inverse[:, 1] * y0
        coefficients[:, t] = inverse.reshape(6)
        corners = np.round(local).astype(np.int32)
        # Anti-aliased fill over what is there: cover += coverage · (1 − cover).
        cv2.fillConvexPoly(cover[y0:y1, x0:x1], corners, 1.0, lineType=cv2.LINE_AA)
        drawn.append((t, x0, y0, x1, y1, corners))
    # With integer corners, the 8-connected fill reaches every pixel the anti-aliased one touches.
    for t, x0, y0, x1, y1, corners in reversed(drawn):
        cv2.fillConvexPoly(owner[y0:y1, x0:x1], corners, t, lineType=cv2.LINE_8)
    out = np.zeros((h, w, 3), np.uint8)
    drawn_pixels = owner >= 0
    rows, cols = np.flatnonzero(drawn_pixels.any(axis=1)), np.flatnonzero(drawn_pixels.any(axis=0))
    if len(rows):
        r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        which = np.maximum(owner[r0:r1, c0:c1], 0)
        xs = np.arange(c0, c1, dtype=np.float32)[None, :]
        ys = np.arange(r0, r1, dtype=np.float32)[:, None]
        c = [np.take(row, which) for row in coefficients]
        region = cv2.remap(
            src, c[0] * xs + c[1] * ys + c[2], c[3] * xs + c[4] * ys + c[5], cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_REFLECT_101,
        )  # fmt: skip
        region[~drawn_pixels[r0:r1, c0:c1]] = 0
        out[r0:r1, c0:c1] = region
    return out, np.clip(cover, 0.0, 1.0)
