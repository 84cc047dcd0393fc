"""The only normalisation code: Frame pixels ↔ model tensors, driven by a model file's `IOSpec`.

Every model call in facestudio goes through `to_tensor` and `from_tensor`, so a colour-order or range mistake
can only live in one place.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from engine.models.manifest import IOSpec


def to_tensor(images: npt.NDArray[np.uint8], io: IOSpec) -> npt.NDArray[np.float32]:
    """N×H×W×3 uint8 RGB images → N×3×H×W float32 tensor `(pixel/255 - mean) / std` in `io.colour` order."""
    if images.ndim != 4 or images.shape[3] != 3 or images.dtype != np.uint8:
        raise TypeError(f"expected N×H×W×3 uint8 RGB images, got {images.shape} {images.dtype}")
    x = images.astype(np.float32) * np.float32(1.0 / 255.0)
    if io.colour == "BGR":
        x = x[..., ::-1]
    mean = np.asarray(io.mean, dtype=np.float32)
    std = np.asarray(io.std, dtype=np.float32)
    if np.any(mean != 0.0) or np.any(std != 1.0):
        x = (x - mean) / std
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def from_tensor(tensor: npt.NDArray[np.floating], io: IOSpec) -> npt.NDArray[np.uint8]:
    """N×3×H×W model output in `io.output_range` and `io.colour` order → N×H×W×3 uint8 RGB, clamped and rounded."""
    if tensor.ndim != 4 or tensor.shape[1] != 3:
        raise TypeError(f"expected an N×3×H×W tensor, got shape {tensor.shape}")
    lo, hi = io.output_range
    x = (tensor.astype(np.float32, copy=False) - np.float32(lo)) * np.float32(255.0 / (hi - lo))
    x = np.clip(x, 0.0, 255.0).transpose(0, 2, 3, 1)
    if io.colour == "BGR":
        x = x[..., ::-1]
    return np.ascontiguousarray(np.rint(x).astype(np.uint8))
