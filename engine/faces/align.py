"""Alignment of faces to model templates, and pasting processed crops back.

A template is the position of the 5 landmarks (eye centres, nose tip, mouth corners; image-left first) in a
model's square input crop, as fractions of the crop size. `estimate_affine` finds the similarity transform
(rotation, uniform scale, translation) taking a face's 5 landmarks onto a template at a given size; `warp_face`
cuts that crop; `paste_back` puts a processed crop back, touching only the region the crop covers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import cv2
import numpy as np
import numpy.typing as npt

from engine.core.types import Affine, Frame, Mask, check_frame

_ARCFACE_112 = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]]
)

TEMPLATES: Mapping[str, npt.NDArray[np.float64]] = MappingProxyType(
    {
        # ArcFace recognisers' 112 px crop (insightface `arcface_dst`).
        "arcface_112": _ARCFACE_112 / 112.0,
        # insightface `estimate_norm` at 128 px (InSwapper): 128 is not a multiple of 112, so it takes the "128"
        # branch, ratio 128/128 = 1, and shifts the 112 px template right by 8 px. Equals FaceFusion's `arcface_128`.
        "arcface_128": (_ARCFACE_112 + [8.0, 0.0]) / 128.0,
        # FaceFusion's name for the same 112 px ArcFace crop (face_helper.py L20-27; MODELS.md §6).
        "arcface_112_v2": _ARCFACE_112 / 112.0,
        # FFHQ-aligned 512 px crop (GFPGAN via facexlib; FaceFusion `ffhq_512`).
        "ffhq_512": np.array([[192.98, 239.95], [318.90, 240.19], [256.63, 314.02], [201.26, 371.41], [313.09, 371.15]])
        / 512.0,
        # FaceFusion face_helper.py L12-19 (GHOST, SimSwap; MODELS.md §8 "Extra warp templates").
        "arcface_112_v1": np.array(
            [
                [0.35473214, 0.45658929],
                [0.64526786, 0.45658929],
                [0.50000000, 0.61154464],
                [0.37913393, 0.77687500],
                [0.62086607, 0.77687500],
            ]
        ),  # fmt: skip
        # FaceFusion face_helper.py L36-42: DeepFaceLab's whole-face crop, as DeepFaceLive's `.dfm` models take it.
        "dfl_whole_face": np.array(
            [
                [0.35342266, 0.39285716],
                [0.62797622, 0.39285716],
                [0.48660713, 0.54017860],
                [0.38839287, 0.68750011],
                [0.59821427, 0.68750011],
            ]
        ),  # fmt: skip
        # FaceFusion face_helper.py L60-66 (MODELS.md §8): StyleGANEX's crop with the background around the face.
        "styleganex_384": np.array(
            [
                [0.42353745, 0.52289879],
                [0.57725008, 0.52319972],
                [0.50123859, 0.61331904],
                [0.43364461, 0.68337652],
                [0.57015325, 0.68306005],
            ]
        ),  # fmt: skip
        # FaceFusion face_helper.py L52-59 (HifiFace).
        "mtcnn_512": np.array(
            [
                [0.36562865, 0.46733799],
                [0.63305391, 0.46585885],
                [0.50019127, 0.61942959],
                [0.39032951, 0.77598822],
                [0.61178945, 0.77476328],
            ]
        ),  # fmt: skip
    }
)


def estimate_affine(landmarks5: npt.ArrayLike, template: str, size: int) -> Affine:
    """The 2×3 float64 similarity transform mapping frame pixels to pixels of a `size`×`size` crop so that
    `landmarks5` (5×2, frame pixels, template order) land on `TEMPLATES[template]`·size, least squares.

    Umeyama's closed form (as skimage's SimilarityTransform.estimate), without reflection."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; known: {', '.join(TEMPLATES)}")
    src = np.asarray(landmarks5, dtype=np.float64)
    if src.shape != (5, 2):
        raise ValueError(f"landmarks5 must be 5×2, got shape {src.shape}")
    return _umeyama(src, TEMPLATES[template] * float(size))


def scaled_landmarks(landmarks5: npt.ArrayLike, scale: float) -> npt.NDArray[np.float64]:
    """The 5 landmarks (5×2, frame pixels) moved `scale` times as far from the nose tip (landmark 2): a crop on
    them shows a wider (scale > 1) or closer (scale < 1) view of the face on the same template."""
    points = np.asarray(landmarks5, dtype=np.float64)
    return (points - points[2]) * scale + points[2]


def warp_face(frame: Frame, affine: Affine, size: int) -> Frame:
    """The `size`×`size`×3 uint8 RGB crop that `affine` (frame → crop pixels) cuts from `frame`; bilinear, with
    the frame's edge pixels repeated where the crop reaches past the frame (a black border would look like part
    of the face to a model)."""
    check_frame(frame)
    return cv2.warpAffine(
        frame,
        np.asarray(affine, dtype=np.float64),
        (size, size),
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_REPLICATE,
    )


def paste_back(frame: Frame, face_crop: Frame, affine: Affine, mask: Mask) -> Frame:
    """A new frame with `face_crop` (S×S×3 uint8 RGB, cut from `frame` by `affine`, then processed) blended back
    under `mask` (S×S float32 in [0, 1], crop coordinates): out = m·crop + (1 − m)·frame per pixel, where m is
    the mask warped back into the frame (0 outside the crop).

    Only the bounding rectangle of the crop's footprint in the frame is warped and blended, so the cost follows
    the face's size, not the frame's. Pixels where the warped mask is 0 are returned bit-identical."""
    check_frame(frame)
    check_frame(face_crop)
    size = face_crop.shape[0]
    if face_crop.shape[:2] != (size, size) or mask.shape != (size, size):
        raise ValueError(f"face_crop must be square and mask its size, got {face_crop.shape} and {mask.shape}")
    height, width = frame.shape[:2]
    out = frame.copy()
    rect = footprint(affine, size, width, height)
    if rect is None:
        return out
    x1, y1, x2, y2 = rect
    # The inverse transform, expressed relative to the sub-rectangle's top-left corner.
    local = cv2.invertAffineTransform(np.asarray(affine, dtype=np.float64))
    local[:, 2] -= (x1, y1)
    region = (x2 - x1, y2 - y1)
    crop = cv2.warpAffine(face_crop, local, region, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    weight = cv2.warpAffine(
        np.ascontiguousarray(mask, dtype=np.float32),
        local,
        region,
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=0.0,
    )
    weight = np.clip(weight, 0.0, 1.0)[..., None]
    under = frame[y1:y2, x1:x2].astype(np.float32)
    # (1 − 0)·frame + 0·crop is exactly frame in float32, so untouched pixels round back to themselves.
    blended = weight * crop.astype(np.float32) + (1.0 - weight) * under
    out[y1:y2, x1:x2] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return out


def footprint(affine: Affine, size: int, width: int, height: int) -> tuple[int, int, int, int] | None:
    """The rectangle (x1, y1, x2, y2; frame pixels, end exclusive) of a width×height frame that a size×size crop
    cut by `affine` (frame → crop pixels) covers: the bounding box of its corners, clipped to the frame; None when
    it misses the frame. `paste_back` touches nothing outside it."""
    inverse = cv2.invertAffineTransform(np.asarray(affine, dtype=np.float64))
    corners = np.array([[0, 0, 1], [size, 0, 1], [0, size, 1], [size, size, 1]], dtype=np.float64) @ inverse.T
    x1 = max(0, math.floor(corners[:, 0].min()))
    y1 = max(0, math.floor(corners[:, 1].min()))
    x2 = min(width, math.ceil(corners[:, 0].max()))
    y2 = min(height, math.ceil(corners[:, 1].max()))
    return None if x2 <= x1 or y2 <= y1 else (x1, y1, x2, y2)


def transform_points(points: npt.ArrayLike, affine: Affine) -> npt.NDArray[np.float64]:
    """Apply a 2×3 affine to N×2 points (x, y); returns N×2 float64."""
    pts = np.asarray(points, dtype=np.float64)
    return pts @ np.asarray(affine, dtype=np.float64)[:, :2].T + np.asarray(affine, dtype=np.float64)[:, 2]


def _umeyama(src: npt.NDArray[np.float64], dst: npt.NDArray[np.float64]) -> Affine:
    """Least-squares similarity transform src → dst (Umeyama 1991, eq. 40–43), as a 2×3 matrix."""
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_c, dst_c = src - src_mean, dst - dst_mean
    covariance = dst_c.T @ src_c / len(src)
    u, singular, vt = np.linalg.svd(covariance)
    # Forbid a reflection: a mirrored face is not the same face.
    d = np.ones(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        d[1] = -1.0
    rotation = u @ np.diag(d) @ vt
    variance = src_c.var(axis=0).sum()
    scale = float((singular * d).sum() / variance) if variance > 0 else 1.0
    affine = np.empty((2, 3), dtype=np.float64)
    affine[:, :2] = scale * rotation
    affine[:, 2] = dst_mean - affine[:, :2] @ src_mean
    return affine
