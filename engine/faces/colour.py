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
# Pixels per row when a list of pixels is converted as an image.
_ROW = 1024


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
    # Only pixels with weight > 0 count in the statistics and change: the work is done on those alone (each
    # pixel's conversion and correction is its own), and the others are copied.
    inside = weights > 0.0
    if not inside.any():
        return source.copy()
    pixels, w = source[inside], weights[inside]
    if method == "reinhard":
        corrected = _reinhard(pixels, target[inside], w)
    elif method == "histogram":
        corrected = _histogram(pixels, target[inside], w)
    else:
        raise ValueError(f"unknown colour transfer method {method!r}; known: reinhard, histogram")
    m = w[:, None]
    blended = m * corrected + (1.0 - m) * pixels.astype(np.float32)
    out = source.copy()
    out[inside] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return out


def _convert(pixels: npt.NDArray[np.float32], code: int) -> npt.NDArray[np.float32]:
    """cv2.cvtColor of K×3 float32 pixels, laid out as rows of _ROW pixels (OpenCV splits work by rows: one
    pixel per row would run it on one core, with a call per pixel row)."""
    count = len(pixels)
    rows = np.zeros((-(-count // _ROW) * _ROW, 3), np.float32)
    rows[:count] = pixels
    return cv2.cvtColor(rows.reshape(-1, _ROW, 3), code).reshape(-1, 3)[:count]


def _reinhard(
    source: npt.NDArray[np.uint8], target: npt.NDArray[np.uint8], weights: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Corrected source as float32 RGB in 0–255. source, target: K×3 uint8 RGB pixels; weights: K."""
    # OpenCV's float conversion takes RGB in [0, 1] and gives L in 0–100, a and b in about −127…127.
    src = _convert(source.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    tgt = _convert(target.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    src_mean, src_std = _weighted_stats(src, weights)
    tgt_mean, tgt_std = _weighted_stats(tgt, weights)
    gain = np.where(src_std > _MIN_STD, tgt_std / np.maximum(src_std, _MIN_STD), 1.0).astype(np.float32)
    lab = (src - src_mean) * gain + tgt_mean
    rgb = _convert(lab.astype(np.float32), cv2.COLOR_LAB2RGB)
    return np.clip(rgb, 0.0, 1.0) * 255.0


def _histogram(
    source: npt.NDArray[np.uint8], target: npt.NDArray[np.uint8], weights: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Corrected source as float32 RGB in 0–255. source, target: K×3 uint8 RGB pixels; weights: K."""
    levels = np.arange(256, dtype=np.float64)
    flat_weights = weights.astype(np.float64)
    out = np.empty(source.shape, dtype=np.float32)
    for channel in range(3):
        src_counts, src_mid = _quantiles(source[:, channel], flat_weights)
        tgt_counts, tgt_mid = _quantiles(target[:, channel], flat_weights)
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
    values: npt.NDArray[np.float32], weights: npt.NDArray[np.float32]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Weighted mean and standard deviation of K×3 `values` (weights: K), accumulated in float64."""
    w = weights.astype(np.float64)
    total = w.sum()
    mean = (w @ values) / total
    centred = values - mean
    var = (w @ (centred * centred)) / total
    return mean.astype(np.float32), np.sqrt(var).astype(np.float32)
