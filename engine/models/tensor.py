"""The only normalisation code: Frame pixels ↔ model tensors, driven by a model file's `IOSpec`.

The spec is `input_transform` and `output_transform`: per model channel, which RGB channel it holds and the
linear map between pixel values and tensor values. Two executors carry it out: `to_tensor` / `from_tensor` here
(numpy and OpenCV, on the host) and `engine.backends.device` (PyTorch ops, where the model runs: frames stay on
the GPU). Both read these two functions, so a colour-order or range mistake can only live in one place;
`tests/test_device_frames.py` checks that both give the same tensors. `run_images` is the host executor's whole
model call: uint8 images in, uint8 images out, batched as the graph allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import cv2
import numpy as np
import numpy.typing as npt

from engine.models.manifest import IOSpec

if TYPE_CHECKING:
    from engine.backends import Session

# OpenCV does the per-pixel arithmetic: one pass per channel plane, in its thread pool, with exact rounding and
# saturation into uint8. The equivalent numpy expression (scale, clip, rint, astype, transpose) makes five passes on
# one core and measured about 9× slower on a 4K frame, which on a GPU is most of the time per frame.


@dataclass(frozen=True)
class ChannelMap:
    """Per model channel c: `rgb[c]`, the Frame channel it holds, and `scale[c]`, `offset[c]` of the linear map
    `to = from · scale + offset` (input side: from pixel 0–255 to tensor; output side: from tensor to pixel, then
    rounded to nearest, ties to even, and clamped to 0–255)."""

    rgb: tuple[int, int, int]
    scale: tuple[float, float, float]
    offset: tuple[float, float, float]


def _channel_order(io: IOSpec) -> tuple[int, int, int]:
    """For each model channel, the RGB channel it holds."""
    return (2, 1, 0) if io.colour == "BGR" else (0, 1, 2)


def input_transform(io: IOSpec) -> ChannelMap:
    """Pixels (0–255) → the model's input tensor: `(pixel/255 - mean) / std` per channel, in `io.colour` order."""
    scale = tuple(1.0 / (255.0 * io.std[c]) for c in range(3))
    offset = tuple(-io.mean[c] / io.std[c] for c in range(3))
    return ChannelMap(_channel_order(io), scale, offset)  # type: ignore[arg-type]


def output_transform(io: IOSpec) -> ChannelMap:
    """The model's output tensor (values in `io.output_range`, `io.colour` order) → pixels 0–255 (then rounded and
    clamped by the executor)."""
    lo, hi = io.output_range
    scale = 255.0 / (hi - lo)
    return ChannelMap(_channel_order(io), (scale,) * 3, (-lo * scale,) * 3)


def to_tensor(images: npt.NDArray[np.uint8], io: IOSpec) -> npt.NDArray[np.float32]:
    """N×H×W×3 uint8 RGB images → N×3×H×W float32 tensor `(pixel/255 - mean) / std` in `io.colour` order."""
    if images.ndim != 4 or images.shape[3] != 3 or images.dtype != np.uint8:
        raise TypeError(f"expected N×H×W×3 uint8 RGB images, got {images.shape} {images.dtype}")
    spec = input_transform(io)
    n, h, w, _ = images.shape
    out = np.empty((n, 3, h, w), np.float32)
    for i in range(n):
        planes = cv2.split(np.ascontiguousarray(images[i]))
        for c, rgb in enumerate(spec.rgb):
            cv2.addWeighted(
                planes[rgb], spec.scale[c], planes[rgb], 0.0, spec.offset[c], dst=out[i, c], dtype=cv2.CV_32F
            )
    return out


def from_tensor(
    tensor: npt.NDArray[np.floating], io: IOSpec, layout: Literal["NCHW", "NHWC"] = "NCHW"
) -> npt.NDArray[np.uint8]:
    """N×3×H×W model output (N×H×W×3 where `layout` says so: a DeepFaceLive graph's) in `io.output_range` and
    `io.colour` order → N×H×W×3 uint8 RGB, clamped and rounded (to nearest, ties to even)."""
    if layout == "NHWC" and tensor.ndim == 4:
        tensor = np.transpose(tensor, (0, 3, 1, 2))
    if tensor.ndim != 4 or tensor.shape[1] != 3:
        raise TypeError(f"expected an N×3×H×W tensor, got shape {tensor.shape}")
    spec = output_transform(io)
    t = np.ascontiguousarray(tensor, dtype=np.float32)
    n, _, h, w = t.shape
    out = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        # A uint8 destination makes OpenCV round and saturate (clamp to 0–255) in the same pass. The planes are
        # produced in model-channel order; model channel c holds RGB channel spec.rgb[c], and the order maps are
        # their own inverses (identity or reversal), so listing them by spec.rgb puts them back in RGB order.
        planes = [
            cv2.addWeighted(t[i, c], spec.scale[c], t[i, c], 0.0, spec.offset[c], dtype=cv2.CV_8U) for c in spec.rgb
        ]
        out[i] = cv2.merge(planes)
    return out


def from_planes(
    tensor: npt.NDArray[np.floating], io: IOSpec, layout: Literal["NCHW", "NHWC"] = "NCHW"
) -> npt.NDArray[np.float32]:
    """A model's non-image output — a matte, chroma planes, a face mask — channels last: N×C×H×W (N×H×W×C where
    `layout` says so; N×H×W: one plane) → N×H×W×C float32, each value as the model gives it, clamped to
    `io.output_range` (a matte's [0, 1]; DDColor's a*b* in CIE L*a*b* units). Nothing is rescaled: what the planes
    mean is the caller's (it is not a picture)."""
    t = np.asarray(tensor, dtype=np.float32)
    if t.ndim == 3:
        t = t[:, None] if layout == "NCHW" else t[..., None]
    if t.ndim != 4:
        raise TypeError(f"expected an N×C×H×W (or N×H×W) tensor, got shape {t.shape}")
    if layout == "NCHW":
        t = np.transpose(t, (0, 2, 3, 1))
    low, high = io.output_range
    return np.clip(t, low, high).astype(np.float32)


def run_images(
    session: Session,
    io: IOSpec,
    images: npt.NDArray[np.uint8],
    *,
    name: str | None = None,
    per_call: Mapping[str, npt.NDArray[np.generic]] | None = None,
    per_item: Mapping[str, npt.NDArray[np.float32]] | None = None,
) -> npt.NDArray[np.uint8]:
    """N×H×W×3 uint8 RGB images through an image model: normalised (`to_tensor`) into its input `name` (default
    `io.input`), run, and its first output mapped back (`from_tensor`) to N×H'×W'×3 uint8 RGB.

    `per_call`: further inputs given as they are to every call (CodeFormer's fidelity weight); `per_item`: inputs
    of one row (1×…) that go with every image, repeated to each call's batch (a swapper's identity). All N images
    go in one call unless the graph fixes its batch (`io.batch`): then that many at a time, the last call padded
    with black images whose outputs are dropped.
    """
    n = images.shape[0]
    if n == 0:
        return images.copy()
    step = io.batch or n
    rows = {key: np.repeat(np.asarray(value, np.float32), step, axis=0) for key, value in (per_item or {}).items()}
    out = []
    for start in range(0, n, step):
        chunk = images[start : start + step]
        if len(chunk) < step:
            # A fixed batch size must be met exactly: pad the last chunk with blank images, dropped below.
            chunk = np.concatenate([chunk, np.zeros((step - len(chunk), *chunk.shape[1:]), np.uint8)])
        (result, *_) = session.run({name or io.input: to_tensor(chunk, io), **rows, **(per_call or {})})
        out.append(from_tensor(result, io))
    return np.concatenate(out, axis=0)[:n]
