"""Colour transfer: make a swapped face's colours match the face it replaces.

Both methods measure statistics inside a mask (weighted by it) and blend the corrected image with the original by
the same mask, so pixels where the mask is 0 come back bit-identical.
"""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from engine.types import Frame, Mask, check_frame

ColourMethod = Literal["reinhard", "histogram"]

# A channel with a spread under this (LAB units) is treated as flat: scaling by target/source spread would blow up.
_MIN_STD = 1e-3


def transfer(source: Frame, target: Frame, mask: Mask | None = None, method: ColourMethod = "reinhard") -> Frame:
    """`source` (H×W×3 uint8 RGB) with its colours made to match `target`'s (same shape) inside `mask`.

    mask: H×W float32 in [0, 1] (None = everywhere). Statistics of both images are weighted by it, and the result
    is m·corrected + (1 − m)·source, so pixels with m = 0 are returned unchanged.
    method: "reinhard" shifts and scales each CIE L*a*b* channel to the target's mean and standard deviation
    (Reinhard et al. 2001); "histogram" maps each RGB channel through the target's cumulative histogram (exact
    CDF matching on the 256 levels), which also matches skew and contrast curves.
    """
    check_frame(source)
    check_frame(target)
    if source.shape != target.shape:
        raise ValueError(f"source and target must have the same shape, got {source.shape} and {target.shape}")
    weights = np.ones(source.shape[:2], dtype=np.float32) if mask is None else np.asarray(mask, dtype=np.float32)
    if weights.shape != source.shape[:2]:
        raise ValueError(f"mask must be {source.shape[:2]}, got {weights.shape}")
    weights = np.clip(weights, 0.0, 1.0)
    if float(weights.sum()) <= 0.0:
        return source.copy()
    if method == "reinhard":
        corrected = _reinhard(source, target, weights)
    elif method == "histogram":
        corrected = _histogram(source, target, weights)
    else:
        raise ValueError(f"unknown colour transfer method {method!r}; known: reinhard, histogram")
    m = weights[..., None]
    blended = m * corrected + (1.0 - m) * source.astype(np.float32)
    return np.clip(np.rint(blended), 0, 255).astype(np.uint8)


def _reinhard(source: Frame, target: Frame, weights: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Corrected source as float32 RGB in 0–255."""
    # OpenCV's float conversion takes RGB in [0, 1] and gives L in 0–100, a and b in about −127…127.
    src = cv2.cvtColor(source.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    tgt = cv2.cvtColor(target.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    src_mean, src_std = _weighted_stats(src, weights)
    tgt_mean, tgt_std = _weighted_stats(tgt, weights)
    gain = np.where(src_std > _MIN_STD, tgt_std / np.maximum(src_std, _MIN_STD), 1.0).astype(np.float32)
    lab = (src - src_mean) * gain + tgt_mean
    rgb = cv2.cvtColor(lab.astype(np.float32), cv2.COLOR_LAB2RGB)
    return np.clip(rgb, 0.0, 1.0) * 255.0


def _histogram(source: Frame, target: Frame, weights: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Corrected source as float32 RGB in 0–255."""
    levels = np.arange(256, dtype=np.float64)
    flat_weights = weights.ravel().astype(np.float64)
    out = np.empty(source.shape, dtype=np.float32)
    for channel in range(3):
        src_counts, src_mid = _quantiles(source[..., channel].ravel(), flat_weights)
        tgt_counts, tgt_mid = _quantiles(target[..., channel].ravel(), flat_weights)
        # Each source level goes to the target level at the same quantile (mid-step of the weighted CDF);
        # only levels the target has are interpolation nodes, so the nodes strictly increase.
        present = tgt_counts > 0
        lut = np.interp(src_mid, tgt_mid[present], levels[present])
        out[..., channel] = lut[source[..., channel]]
    return out


def _quantiles(
    values: npt.NDArray[np.uint8], weights: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Weighted count of each of the 256 levels, and each level's mid-step cumulative fraction."""
    counts = np.bincount(values, weights=weights, minlength=256)
    fractions = counts / counts.sum()
    return counts, np.cumsum(fractions) - fractions / 2


def _weighted_stats(
    image: npt.NDArray[np.float32], weights: npt.NDArray[np.float32]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    w = weights[..., None].astype(np.float64)
    total = w.sum()
    mean = (image * w).sum(axis=(0, 1)) / total
    var = (((image - mean) ** 2) * w).sum(axis=(0, 1)) / total
    return mean.astype(np.float32), np.sqrt(var).astype(np.float32)
