"""The offline landmark swapper: put the source's face, with its own proportions, into the target's pose.

Steps, all inside a region of interest around the target face (pixels outside it are never touched):
1. Geometry: the source's 68 landmarks are aligned to the target by a similarity transform fitted on the
   stable points (eye corners, nose), so jaw, brows and forehead keep the *source's* proportions; the eyes and
   mouth keep the *target's* shapes (re-centred and re-scaled), so blinks and speech still read.
2. Reshape: the target frame is warped piecewise-affinely from its own outline to that new outline, with a
   fixed ring of anchor points around the head, so a wider or narrower face does not leave the old jaw line
   showing and the warp fades out before the ring.
3. Texture: the source face (with its forehead) is warped triangle by triangle onto the new geometry,
   colour-matched to the target skin (Reinhard in LAB, or histogram), and blended with a feathered landmark mask
   (or Poisson-cloned); the inner mouth is kept from the target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import cv2
import numpy as np

from engine.core.types import Frame, Mask
from engine.faces import colour
from engine.faces.ibug68 import LEFT_EYE, MOUTH, RIGHT_EYE
from engine.faces.masks import landmark_mask
from engine.faces.warp import Points, delaunay, extend_with_forehead, warp_triangles

# A colour transfer: (texture, the target region under it, the blend mask) → the texture recoloured.
Recolour = Callable[[Frame, Frame, Mask], Frame]

# Points the alignment is fitted on: eye corners and the nose bridge/tip, which expressions barely move.
STABLE = np.array([36, 39, 42, 45, 27, 28, 29, 30, 31, 35])
# The anchor ring follows the face outline (jaw and forehead), this many times farther from the face's centre:
# the reshape warp fades to zero there, so nothing beyond it (hair, hats, collars, background) moves.
RING_SCALE = 1.25
# Jaw (0–16) then forehead (the extended points 68–77, right to left): the outline in order around the face.
OUTLINE = np.r_[np.arange(0, 17), np.arange(77, 67, -1)]


@dataclass(frozen=True)
class LandmarkSwapOptions:
    """blend: "feather" (alpha blend over a blurred mask) or "poisson" (seamless clone); colour: transfer method;
    keep_mouth: keep the target's inner mouth; reshape: move the target's outline to the source's proportions;
    feather: mask edge width as a fraction of the face size."""

    blend: Literal["feather", "poisson"] = "feather"
    colour: Literal["reinhard", "histogram", "none"] = "reinhard"
    keep_mouth: bool = True
    reshape: bool = True
    feather: float = 0.06


def face_size(landmarks68: Points) -> float:
    """A face's scale in pixels: the larger side of its landmark bounding box."""
    span = landmarks68.max(axis=0) - landmarks68.min(axis=0)
    return float(max(span[0], span[1], 1.0))


def target_geometry(source68: Points, target68: Points) -> Points:
    """68 points: the source's face shape in the target's pose, with the target's eye and mouth shapes."""
    src = np.asarray(source68, np.float32)
    dst = np.asarray(target68, np.float32)
    affine, _ = cv2.estimateAffinePartial2D(src[STABLE], dst[STABLE], method=cv2.LMEDS)
    if affine is None:  # degenerate landmarks: fall back to the target's own geometry
        return dst.copy()
    aligned = cv2.transform(src[None], affine)[0].astype(np.float32)
    for group in (MOUTH, LEFT_EYE, RIGHT_EYE):
        tgt = dst[group]
        new = aligned[group]
        scale = _spread(new) / max(_spread(tgt), 1e-3)
        aligned[group] = new.mean(axis=0) + (tgt - tgt.mean(axis=0)) * scale
    return aligned


def _spread(points: Points) -> float:
    return float(np.sqrt(((points - points.mean(axis=0)) ** 2).sum(axis=1).mean()))


def anchor_ring(old_ext: Points, new_ext: Points) -> Points:
    """Fixed anchors around a face: each outline point of the old or the new geometry (whichever lies farther
    from the centre) pushed out by RING_SCALE. Both geometries are 78×2 (`extend_with_forehead`)."""
    centre = old_ext[OUTLINE].mean(axis=0)
    old, new = old_ext[OUTLINE] - centre, new_ext[OUTLINE] - centre
    farther = np.where((np.linalg.norm(new, axis=1) > np.linalg.norm(old, axis=1))[:, None], new, old)
    return (centre + RING_SCALE * farther).astype(np.float32)


def swap(
    source: Frame,
    source68: Points,
    target: Frame,
    target68: Points,
    options: LandmarkSwapOptions = LandmarkSwapOptions(),
    recolour: Recolour | None = None,
) -> Frame:
    """Swap the source face (68 landmarks `source68` on `source`) onto the target face (`target68` on `target`).

    Images are H×W×3 uint8 RGB; landmarks 68×2 float pixels. Returns the new frame: only pixels inside the anchor
    ring around the face (the face outline pushed out by RING_SCALE) can differ from `target`. `recolour`: the
    colour transfer (texture, target region, mask → texture) when not `colour.transfer` with `options.colour`
    (a video's `colour.TrackColours`, which reuses a tracked face's statistics).
    """
    src68 = np.asarray(source68, np.float32)
    dst68 = np.asarray(target68, np.float32)
    new68 = target_geometry(src68, dst68) if options.reshape else dst68.copy()
    size = face_size(dst68)
    old_full, new_full = extend_with_forehead(dst68), extend_with_forehead(new68)
    ring = anchor_ring(old_full, new_full)
    h, w = target.shape[:2]
    x0, y0 = np.floor(np.maximum(ring.min(axis=0), 0)).astype(int)
    x1, y1 = np.ceil(np.minimum(ring.max(axis=0) + 1, [w, h])).astype(int)
    offset = np.float32([x0, y0])
    roi = target[y0:y1, x0:x1]
    rh, rw = roi.shape[:2]

    old_ext = old_full - offset
    new_ext = new_full - offset
    ring_local = ring - offset
    if options.reshape:
        ctrl_new = np.concatenate([new_ext, ring_local])
        ctrl_old = np.concatenate([old_ext, ring_local])
        tris = delaunay(ctrl_new, rw, rh)
        reshaped, cover = warp_triangles(roi, ctrl_old, (rh, rw), ctrl_new, tris)
        # Outside the ring (corners of the region) the warp is the identity: keep the original pixels.
        base = np.where(cover[..., None] > 0.999, reshaped, roi).astype(np.uint8)
    else:
        base = roi.copy()

    src_ext = extend_with_forehead(src68)
    face_tris = delaunay(new_ext, rw, rh)
    texture, covered = warp_triangles(source, src_ext, (rh, rw), new_ext, face_tris)
    mask = landmark_mask((rh, rw), new68 - offset, exclude_mouth=options.keep_mouth, blur_px=options.feather * size)
    # Only where the source texture was drawn: a degenerate triangle (a closed mouth's inner lips) or the edge
    # of the hull must show the target, not the black of an empty pixel.
    mask *= covered
    if options.colour != "none":
        texture = (recolour or partial(colour.transfer, method=options.colour))(texture, base, mask)
    if options.blend == "poisson":
        binary = (mask > 0.5).astype(np.uint8) * 255
        ys, xs = np.nonzero(binary)
        if len(xs):
            cx, cy = int((xs.min() + xs.max()) // 2), int((ys.min() + ys.max()) // 2)
            cloned = cv2.seamlessClone(
                cv2.cvtColor(texture, cv2.COLOR_RGB2BGR), cv2.cvtColor(base, cv2.COLOR_RGB2BGR), binary, (cx, cy),
                cv2.NORMAL_CLONE,
            )  # fmt: skip
            texture = cv2.cvtColor(cloned, cv2.COLOR_BGR2RGB)
    out = target.copy()
    out[y0:y1, x0:x1] = base
    # The blend m·texture + (1 − m)·base is base itself where m = 0: computed on the mask's box only.
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if len(rows):
        inner = np.s_[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
        m = mask[inner][..., None]
        blended = np.clip(np.rint(m * texture[inner] + (1.0 - m) * base[inner]), 0, 255).astype(np.uint8)
        out[y0 + rows[0] : y0 + rows[-1] + 1, x0 + cols[0] : x0 + cols[-1] + 1] = blended
    return out
