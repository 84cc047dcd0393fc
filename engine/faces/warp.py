"""Piecewise-affine (Delaunay) warping between two sets of corresponding points, and the extended 68-point
face geometry the landmark swapper warps with.

All points are (x, y) float32 in pixels. Triangles are computed once on the destination points and each is
warped with its own affine map, so a face can be reshaped (jaw, brows, forehead) and not only re-textured.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from engine.faces.ibug68 import BROWS, CHIN, NOSE_BRIDGE_TOP
from engine.types import Frame

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

    Returns (image of dst_shape (h, w) with the warped pixels, coverage mask h×w float32 in [0, 1]: 1 where a
    triangle was drawn). Each triangle is warped only over its bounding rectangle.
    """
    h, w = dst_shape
    out = np.zeros((h, w, 3), np.float32)
    cover = np.zeros((h, w), np.float32)
    src_f = src.astype(np.float32)
    for tri in triangles:
        s = src_pts[tri].astype(np.float32)
        d = dst_pts[tri].astype(np.float32)
        x, y, bw, bh = cv2.boundingRect(d)
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + bw, w), min(y + bh, h)
        if x1 <= x0 or y1 <= y0:
            continue
        local = d - np.float32([x0, y0])
        affine = cv2.getAffineTransform(s, local)
        patch = cv2.warpAffine(
            src_f, affine, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101
        )
        take = np.zeros((y1 - y0, x1 - x0), np.float32)
        cv2.fillConvexPoly(take, np.round(local).astype(np.int32), 1.0, lineType=cv2.LINE_AA)
        keep = cover[y0:y1, x0:x1]
        # Triangles share edges: take each pixel from the first triangle that covers it fully (take = the
        # triangle's coverage · (1 − keep); out += patch · take; cover += take), in place.
        np.multiply(take, 1.0 - keep, out=take)
        np.multiply(patch, take[..., None], out=patch)
        region = out[y0:y1, x0:x1]
        np.add(region, patch, out=region)
        np.add(keep, take, out=keep)
    # Where nothing was drawn out is 0, and stays 0.
    np.divide(out, np.maximum(cover, 1e-6)[..., None], out=out)
    np.rint(out, out=out)
    return np.clip(out, 0, 255, out=out).astype(np.uint8), np.clip(cover, 0.0, 1.0)
