"""The only normalisation code: Frame pixels ↔ model tensors, driven by a model file's `IOSpec`.

Every model call in facestudio goes through `to_tensor` and `from_tensor`, so a colour-order or range mistake
can only live in one place.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from engine.models.manifest import IOSpec

# OpenCV does the per-pixel arithmetic: one pass per channel plane, in its thread pool, with exact rounding and
# saturation into uint8. The equivalent numpy expression (scale, clip, rint, astype, transpose) makes five passes on
# one core and measured about 9× slower on a 4K frame, which on a GPU is most of the time per frame.


def _channel_order(io: IOSpec) -> tuple[int, int, int]:
    """For each model channel, the RGB channel it holds."""
    return (2, 1, 0) if io.colour == "BGR" else (0, 1, 2)


def to_tensor(images: npt.NDArray[np.uint8], io: IOSpec) -> npt.NDArray[np.float32]:
    """N×H×W×3 uint8 RGB images → N×3×H×W float32 tensor `(pixel/255 - mean) / std` in `io.colour` order."""
    if images.ndim != 4 or images.shape[3] != 3 or images.dtype != np.uint8:
        raise TypeError(f"expected N×H×W×3 uint8 RGB images, got {images.shape} {images.dtype}")
    n, h, w, _ = images.shape
    out = np.empty((n, 3, h, w), np.float32)
    for i in range(n):
        planes = cv2.split(np.ascontiguousarray(images[i]))
        for c, rgb in enumerate(_channel_order(io)):
            scale = 1.0 / (255.0 * io.std[c])
            cv2.addWeighted(
                planes[rgb], scale, planes[rgb], 0.0, -io.mean[c] / io.std[c], dst=out[i, c], dtype=cv2.CV_32F
            )
    return out


def from_tensor(tensor: npt.NDArray[np.floating], io: IOSpec) -> npt.NDArray[np.uint8]:
    """N×3×H×W model output in `io.output_range` and `io.colour` order → N×H×W×3 uint8 RGB, clamped and rounded
    (to nearest, ties to even)."""
    if tensor.ndim != 4 or tensor.shape[1] != 3:
        raise TypeError(f"expected an N×3×H×W tensor, got shape {tensor.shape}")
    lo, hi = io.output_range
    scale = 255.0 / (hi - lo)
    t = np.ascontiguousarray(tensor, dtype=np.float32)
    n, _, h, w = t.shape
    out = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        # A uint8 destination makes OpenCV round and saturate (clamp to 0–255) in the same pass.
        planes = [
            cv2.addWeighted(t[i, c], scale, t[i, c], 0.0, -lo * scale, dtype=cv2.CV_8U) for c in _channel_order(io)
        ]
        out[i] = cv2.merge(planes)
    return out
