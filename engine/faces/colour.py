"""Colour transfer: make a swapped face's colours match the face it replaces.

Both methods measure statistics inside a mask (weighted by it) and blend the corrected image with the original by
the same mask, so pixels where the mask is 0 come back bit-identical. `TrackColours` does a video's faces: each
tracked face's statistics are measured once and reused while its lighting holds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Literal

import cv2
import numpy as np
import numpy.typing as npt

from engine.core.types import Face, Frame, Mask, check_frame
from engine.faces.boxes import iou

ColourMethod = Literal["reinhard", "histogram"]

# A channel with a spread under this (LAB units) is treated as flat: scaling by target/source spread would blow up.
_MIN_STD = 1e-3
# Pixels per row when a list of pixels is converted as an image.
_ROW = 1024
# A face's lighting is measured on one pixel in LIGHTING_STRIDE²: on the demo faces (180p–720p) the mean colour of
# those is within 0.001 ΔE of all the pixels' (every 4th pixel of every 4th row: up to 0.34 ΔE).
LIGHTING_STRIDE = 2


@dataclass(frozen=True)
class Stats:
    """What a transfer maps colours with, measured on one source/target pair: for "reinhard", the weighted means and
    standard deviations of both images' CIE L*a*b* channels (3 each, float32; L 0–100, a and b about ±127); for
    "histogram", each RGB channel's 256-entry map from source level to target level (3×256 float64, 0–255)."""

    method: ColourMethod
    values: tuple[npt.NDArray[Any], ...]


def transfer(source: Frame, target: Frame, mask: Mask | None = None, method: ColourMethod = "reinhard") -> Frame:
    """`source` (H×W×3 uint8 RGB) with its colours made to match `target`'s (same shape) inside `mask`.

    mask: H×W float32 in [0, 1] (None = everywhere). Statistics of both images are weighted by it, and the result
    is m·corrected + (1 − m)·source, so pixels with m = 0 are returned unchanged.
    method: "reinhard" shifts and scales each CIE L*a*b* channel to the target's mean and standard deviation
    (Reinhard et al. 2001); "histogram" maps each RGB channel through the target's cumulative histogram (exact
    CDF matching on the 256 levels), which also matches skew and contrast curves.
    """
    return match(source, target, mask, method)[0]


def match(
    source: Frame, target: Frame, mask: Mask | None, method: ColourMethod, stats: Stats | None = None
) -> tuple[Frame, Stats | None]:
    """`transfer`, with the statistics it used: measured on this pair, or `stats` (of `method`) where given, and
    then `target`'s pixels are not read. Returns (the corrected source, the statistics; None where the mask is 0
    everywhere and nothing was measured)."""
    check_frame(source)
    check_frame(target)
    if source.shape != target.shape:
        raise ValueError(f"source and target must have the same shape, got {source.shape} and {target.shape}")
    if method not in ("reinhard", "histogram"):
        raise ValueError(f"unknown colour transfer method {method!r}; known: reinhard, histogram")
    if stats is not None and stats.method != method:
        raise ValueError(f"the statistics are {stats.method}'s, not {method}'s")
    weights = _weights(mask, source.shape[:2])
    # Only pixels with weight > 0 count in the statistics and change: the work is done on those alone (each
    # pixel's conversion and correction is its own), and the others are copied.
    inside = weights > 0.0
    if not inside.any():
        return source.copy(), stats
    pixels, w = source[inside], weights[inside]
    tgt = None if stats is not None else target[inside]
    if method == "reinhard":
        corrected, stats = _reinhard(pixels, tgt, w, stats)
    else:
        corrected, stats = _histogram(pixels, tgt, w, stats)
    m = w[:, None]
    blended = m * corrected + (1.0 - m) * pixels.astype(np.float32)
    out = source.copy()
    out[inside] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return out, stats


def mean_lab(image: Frame, mask: Mask | None) -> npt.NDArray[np.float32]:
    """The CIE L*a*b* colour (3, float32) of `image`'s (H×W×3 uint8 RGB) mean RGB colour weighted by `mask` (H×W
    in [0, 1]; None = everywhere), from every LIGHTING_STRIDE-th pixel of every LIGHTING_STRIDE-th row: what a
    face's lighting is compared by (ΔE, CIE76). Black where the mask is 0."""
    if mask is not None and np.shape(mask) != image.shape[:2]:
        raise ValueError(f"mask must be {image.shape[:2]}, got {np.shape(mask)}")
    sample = image[::LIGHTING_STRIDE, ::LIGHTING_STRIDE]
    weights = _weights(None if mask is None else mask[::LIGHTING_STRIDE, ::LIGHTING_STRIDE], sample.shape[:2])
    inside = weights > 0.0
    if not inside.any():
        return np.zeros(3, np.float32)
    w = weights[inside].astype(np.float64)
    mean = (w @ sample[inside].astype(np.float64)) / w.sum()
    return _convert(mean[None].astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)[0]


def _weights(mask: Mask | None, shape: tuple[int, ...]) -> npt.NDArray[np.float32]:
    weights = np.ones(shape, dtype=np.float32) if mask is None else np.asarray(mask, dtype=np.float32)
    if weights.shape != shape:
        raise ValueError(f"mask must be {shape}, got {weights.shape}")
    return np.clip(weights, 0.0, 1.0)


def _convert(pixels: npt.NDArray[np.float32], code: int) -> npt.NDArray[np.float32]:
    """cv2.cvtColor of K×3 float32 pixels, laid out as rows of _ROW pixels (OpenCV splits work by rows: one
    pixel per row would run it on one core, with a call per pixel row)."""
    count = len(pixels)
    rows = np.zeros((-(-count // _ROW) * _ROW, 3), np.float32)
    rows[:count] = pixels
    return cv2.cvtColor(rows.reshape(-1, _ROW, 3), code).reshape(-1, 3)[:count]


def _reinhard(
    source: npt.NDArray[np.uint8],
    target: npt.NDArray[np.uint8] | None,
    weights: npt.NDArray[np.float32],
    stats: Stats | None,
) -> tuple[npt.NDArray[np.float32], Stats]:
    """Corrected source as float32 RGB in 0–255, and the statistics. source, target: K×3 uint8 RGB pixels (target
    None: `stats` given); weights: K."""
    # OpenCV's float conversion takes RGB in [0, 1] and gives L in 0–100, a and b about −127…127.
    src = _convert(source.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    if stats is None:
        assert target is not None
        tgt = _convert(target.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
        stats = Stats("reinhard", (*_weighted_stats(src, weights), *_weighted_stats(tgt, weights)))
    src_mean, src_std, tgt_mean, tgt_std = stats.values
    gain = np.where(src_std > _MIN_STD, tgt_std / np.maximum(src_std, _MIN_STD), 1.0).astype(np.float32)
    lab = (src - src_mean) * gain + tgt_mean
    rgb = _convert(lab.astype(np.float32), cv2.COLOR_LAB2RGB)
    return np.clip(rgb, 0.0, 1.0) * 255.0, stats


def _histogram(
    source: npt.NDArray[np.uint8],
    target: npt.NDArray[np.uint8] | None,
    weights: npt.NDArray[np.float32],
    stats: Stats | None,
) -> tuple[npt.NDArray[np.float32], Stats]:
    """Corrected source as float32 RGB in 0–255, and the statistics (each channel's level map). source, target:
    K×3 uint8 RGB pixels (target None: `stats` given); weights: K."""
    if stats is None:
        assert target is not None
        levels = np.arange(256, dtype=np.float64)
        flat_weights = weights.astype(np.float64)
        luts = []
        for channel in range(3):
            src_counts, src_mid = _quantiles(source[:, channel], flat_weights)
            tgt_counts, tgt_mid = _quantiles(target[:, channel], flat_weights)
            # Each source level goes to the target level at the same quantile (mid-step of the weighted CDF);
            # only levels the target has are interpolation nodes, so the nodes strictly increase.
            present = tgt_counts > 0
            luts.append(np.interp(src_mid, tgt_mid[present], levels[present]))
        stats = Stats("histogram", tuple(luts))
    out = np.empty(source.shape, dtype=np.float32)
    for channel, lut in enumerate(stats.values):
        out[..., channel] = lut[source[..., channel]]
    return out, stats


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


# A tracked face's colour statistics are reused on its next frames while the face stays where it was (box IoU with
# its box on the last frame it was seen ≥ SAME_FACE_IOU, seen again within SAME_FACE_GAP frames), its target
# pixels' mean colour stays within RELIGHT_DELTA_E (CIE76 ΔE, L*a*b* units: 1 is about a just-noticeable
# difference) of the one they were measured at, and for at most REUSE_FRAMES frames.
SAME_FACE_IOU = 0.5
SAME_FACE_GAP = 5
RELIGHT_DELTA_E = 1.0
REUSE_FRAMES = 30


@dataclass
class _Measured:
    person: int | None
    box: tuple[float, float, float, float]
    seen: int
    measured: int
    lab: npt.NDArray[np.float32]
    stats: Stats


class TrackColours:
    """Colour transfer of a video's faces, with statistics measured once per tracked face and lighting instead of
    on every frame.

    A face's statistics are measured again when the lighting moves (its target pixels' mean colour drifts by more
    than RELIGHT_DELTA_E from where they were measured: a light switched, a shadow crossing, a new shot with
    other light), when it is not the face of the previous frames at that place (a new track, a cut that moves the
    face), and at the latest after REUSE_FRAMES frames (pose and expression change which skin the statistics
    see). In between, a frame costs the source's conversion and the correction, not the statistics of both images.
    Safe to call from several threads (one lock around the records); frames are numbered by their index."""

    def __init__(self, method: ColourMethod) -> None:
        self.method = method
        self.measured = 0  # times statistics were measured
        self._faces: list[_Measured] = []
        self._lock = threading.Lock()

    def transfer(self, index: int, face: Face, source: Frame, target: Frame, mask: Mask | None) -> Frame:
        """`transfer(source, target, mask, method)` for `face` (its box in frame pixels; its person, where people
        are numbered) on frame `index`, with the statistics of that tracked face where they still hold (see the
        class)."""
        lab = mean_lab(target, mask)
        with self._lock:
            self._faces = [f for f in self._faces if abs(index - f.seen) <= REUSE_FRAMES]
            kept = next((f for f in self._faces if self._holds(f, index, face, lab)), None)
        out, stats = match(source, target, mask, self.method, kept.stats if kept is not None else None)
        with self._lock:
            if kept is not None:
                kept.box, kept.seen = face.box, index
            elif stats is not None:
                self.measured += 1
                self._faces.append(_Measured(face.person, face.box, index, index, lab, stats))
        return out

    @staticmethod
    def _holds(known: _Measured, index: int, face: Face, lab: npt.NDArray[Any]) -> bool:
        return (
            known.person == face.person
            and abs(index - known.seen) <= SAME_FACE_GAP
            and abs(index - known.measured) <= REUSE_FRAMES
            and iou(known.box, face.box) >= SAME_FACE_IOU
            and float(np.linalg.norm(lab - known.lab)) <= RELIGHT_DELTA_E
        )
