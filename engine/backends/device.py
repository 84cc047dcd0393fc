"""The device executor: a processor's pixel work in PyTorch ops on the device its model runs on.

The second executor of the one normalisation spec (`engine.models.tensor.input_transform` / `output_transform`;
the first is `to_tensor` / `from_tensor`) and of the crop and paste-back rules of `engine.faces.align`: the same
templates, the same footprint, edge pixels repeated where a crop reaches past the frame, bilinear sampling,
out = m·crop + (1 − m)·frame rounded to nearest. Pixels can differ from the host's by a level or two (OpenCV
samples at 1/32 px with fixed-point weights; this samples exactly), never outside a crop's footprint.

What crosses between host and device, per frame: the uint8 frame once (on its first cut, and not at all when a
previous step of the chain left this very frame object here), the uint8 rectangle that pastes changed once back
(a frame nothing was pasted into comes back as the same object, a blank canvas whole), plus a face's mask as
float16 and anything a caller asks for with `host` / `images`. `uploaded` and `downloaded` count those bytes.

Used from one thread (the chain's); imported only when a session on a device asks for it (`executor_for`).
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from engine.core.errors import OutOfMemory
from engine.core.types import Affine, Frame, Mask
from engine.faces.align import footprint
from engine.models.manifest import IOSpec
from engine.models.tensor import ChannelMap, input_transform, output_transform

log = logging.getLogger(__name__)
T = TypeVar("T")

Rect = tuple[int, int, int, int]
# Frames kept on the device after a step, for the next step of the chain to find (a batch of 16 frames at 4K is
# about 400 MB of device memory; the oldest go first).
RESIDENT_FRAMES = 64


def normalise(images: torch.Tensor, spec: ChannelMap) -> torch.Tensor:
    """N×H×W×3 uint8 RGB images → N×3×H×W float32 `pixel · scale + offset`, model channel c from RGB channel
    `spec.rgb[c]` (the device side of `to_tensor`)."""
    x = images.permute(0, 3, 1, 2)[:, list(spec.rgb)].float()
    scale = torch.tensor(spec.scale, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    offset = torch.tensor(spec.offset, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    return torch.addcmul(offset, x, scale).contiguous()


def denormalise(tensor: torch.Tensor, spec: ChannelMap) -> torch.Tensor:
    """N×3×H×W model output → N×H×W×3 uint8 RGB: `value · scale + offset` rounded to nearest (ties to even) and
    clamped to 0–255 (the device side of `from_tensor`)."""
    if tensor.dim() != 4 or tensor.shape[1] != 3:
        raise TypeError(f"expected an N×3×H×W tensor, got shape {tuple(tensor.shape)}")
    t = tensor.float()
    scale = torch.tensor(spec.scale, dtype=torch.float32, device=t.device).view(1, 3, 1, 1)
    offset = torch.tensor(spec.offset, dtype=torch.float32, device=t.device).view(1, 3, 1, 1)
    pixels = torch.addcmul(offset, t, scale).round_().clamp_(0, 255).to(torch.uint8)
    # Model channel c holds RGB channel spec.rgb[c]; both orders are their own inverses, so this puts them back.
    return pixels[:, list(spec.rgb)].permute(0, 2, 3, 1).contiguous()


def _sample(image: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, zero_outside: bool) -> torch.Tensor:
    """Bilinear samples of `image` (H×W×C, any dtype) at float coordinates x, y (same shape; pixel centres at
    integers) → (*shape, C) float32. Outside the image: its edge pixels repeated, or 0 (`zero_outside`)."""
    height, width = image.shape[:2]
    x0, y0 = torch.floor(x), torch.floor(y)
    fx, fy = (x - x0).unsqueeze(-1), (y - y0).unsqueeze(-1)
    x0, y0 = x0.long(), y0.long()
    out = torch.zeros((*x.shape, image.shape[2]), dtype=torch.float32, device=image.device)
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            xi, yi = x0 + dx, y0 + dy
            value = image[yi.clamp(0, height - 1), xi.clamp(0, width - 1)].float()
            if zero_outside:
                inside = (xi >= 0) & (xi < width) & (yi >= 0) & (yi < height)
                value = value * inside.unsqueeze(-1)
            out += wx * wy * value
    return out


def _grid(affine: npt.NDArray[np.float64], width: int, height: int, origin: tuple[int, int], device: torch.device):
    """Where each pixel (x, y) of a width×height grid, offset by `origin`, lands under the 2×3 `affine`."""
    a = torch.tensor(np.asarray(affine, np.float64), dtype=torch.float64, device=device)
    ys, xs = torch.meshgrid(
        torch.arange(height, dtype=torch.float64, device=device) + origin[1],
        torch.arange(width, dtype=torch.float64, device=device) + origin[0],
        indexing="ij",
    )
    return (a[0, 0] * xs + a[0, 1] * ys + a[0, 2]).float(), (a[1, 0] * xs + a[1, 1] * ys + a[1, 2]).float()


def warp(frame: torch.Tensor, affine: Affine, size: int) -> torch.Tensor:
    """The size×size×3 uint8 crop `affine` (frame → crop pixels) cuts from `frame` (H×W×3 uint8): the device side
    of `align.warp_face` (bilinear, edge pixels repeated past the frame, rounded)."""
    inverse = np.linalg.inv(np.vstack([np.asarray(affine, np.float64), [0.0, 0.0, 1.0]]))[:2]
    x, y = _grid(inverse, size, size, (0, 0), frame.device)
    return _sample(frame, x, y, zero_outside=False).round_().clamp_(0, 255).to(torch.uint8)


def paste(frame: torch.Tensor, crop: torch.Tensor, affine: Affine, mask: torch.Tensor) -> Rect | None:
    """Blend `crop` (S×S×3 uint8, cut by `affine`) back into `frame` (H×W×3 uint8, changed in place) under `mask`
    (S×S float): the device side of `align.paste_back`, over the same footprint. Returns the rectangle changed."""
    height, width = frame.shape[:2]
    size = crop.shape[0]
    rect = footprint(affine, size, width, height)
    if rect is None:
        return None
    x1, y1, x2, y2 = rect
    x, y = _grid(np.asarray(affine, np.float64), x2 - x1, y2 - y1, (x1, y1), frame.device)
    # As OpenCV warps a uint8 crop: to uint8 values; the mask stays fractional, 0 beyond the crop.
    pixels = _sample(crop, x, y, zero_outside=False).round_().clamp_(0, 255)
    weight = _sample(mask.unsqueeze(-1), x, y, zero_outside=True).clamp_(0.0, 1.0)
    under = frame[y1:y2, x1:x2].float()
    blended = weight * pixels + (1.0 - weight) * under
    frame[y1:y2, x1:x2] = blended.round_().clamp_(0, 255).to(torch.uint8)
    return rect


def _union(a: Rect | None, b: Rect) -> Rect:
    if a is None:
        return b
    return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])


class DeviceFrames:
    """Frames on the device (uploaded on first use), the rectangles changed in each, and blank canvases."""

    def __init__(self, executor: DeviceExecutor, frames: Sequence[Frame | None], shape: tuple[int, int] | None = None):
        self.executor = executor
        self.host = list(frames)
        self.device: list[torch.Tensor | None] = [None] * len(frames)
        self.changed: list[Rect | None] = [None] * len(frames)
        if shape is not None:  # blank canvases: made here, and downloaded whole
            height, width = shape
            self.device = [torch.empty((height, width, 3), dtype=torch.uint8, device=executor.device) for _ in frames]
            self.changed = [(0, 0, width, height)] * len(frames)

    def _frame(self, index: int) -> torch.Tensor:
        tensor = self.device[index]
        if tensor is None:
            frame = self.host[index]
            assert frame is not None
            tensor = self.executor.resident(frame)
            self.device[index] = tensor
        return tensor

    def cut(self, jobs: Sequence[tuple[int, Affine]], size: int) -> torch.Tensor:
        return self.executor.guard(lambda: torch.stack([warp(self._frame(i), affine, size) for i, affine in jobs]))

    def windows(self, jobs: Sequence[tuple[int, Rect]]) -> torch.Tensor:
        return self.executor.guard(lambda: torch.stack([self._frame(i)[y0:y1, x0:x1] for i, (x0, y0, x1, y1) in jobs]))

    def paste(self, jobs: Sequence[tuple[int, Affine]], images: torch.Tensor, masks: Sequence[Mask]) -> None:
        def run() -> None:
            for (i, affine), image, mask in zip(jobs, images, masks, strict=True):
                frame = self._frame(i)
                if self.changed[i] is None:
                    # The first change: a copy, so the resident original (another step's input) stays as it was.
                    frame = self.device[i] = frame.clone()
                rect = paste(frame, image, affine, self.executor.upload(np.asarray(mask, np.float16)))
                if rect is not None:
                    self.changed[i] = _union(self.changed[i], rect)

        self.executor.guard(run)

    def place(self, jobs: Sequence[tuple[int, Rect, Rect]], images: torch.Tensor) -> None:
        for (i, (x0, y0, x1, y1), (u0, v0, u1, v1)), image in zip(jobs, images, strict=True):
            target = self.device[i]
            assert target is not None, "place writes into blank canvases"
            target[y0:y1, x0:x1] = image[v0:v1, u0:u1]

    def result(self) -> list[Frame]:
        out: list[Frame] = []
        for i, rect in enumerate(self.changed):
            tensor = self.device[i]
            if rect is None or tensor is None:
                frame = self.host[i]
                assert frame is not None
                out.append(frame)
                continue
            x0, y0, x1, y1 = rect
            height, width = tensor.shape[:2]
            whole = self.host[i] is None or rect == (0, 0, width, height)
            frame = np.empty((height, width, 3), np.uint8) if whole else np.array(self.host[i], copy=True)
            frame[y0:y1, x0:x1] = self.executor.download(tensor[y0:y1, x0:x1])
            self.executor.keep(frame, tensor)
            out.append(frame)
        return out


class DeviceExecutor:
    """The `engine.models.executor.Executor` on a torch device ("cuda:0"; "cpu" runs the same ops on the host, which
    is how the tests compare the two executors)."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.name = f"torch:{self.device}"
        self.uploaded = 0
        self.downloaded = 0
        # id(host frame) → (a weak reference to it, its device copy): frames a step left here for the next one.
        self._resident: OrderedDict[int, tuple[weakref.ref[Any], torch.Tensor]] = OrderedDict()

    # -- transfers --------------------------------------------------------------------------------------------
    def upload(self, array: npt.NDArray[Any]) -> torch.Tensor:
        """A host array on the device (counted in `uploaded`)."""
        self.uploaded += array.nbytes
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def download(self, tensor: torch.Tensor) -> npt.NDArray[Any]:
        """A device tensor on the host (counted in `downloaded`)."""
        array = tensor.contiguous().cpu().numpy()
        self.downloaded += array.nbytes
        return array

    def resident(self, frame: Frame) -> torch.Tensor:
        """The device copy of `frame`: the one kept from an earlier step when it is this very object, else an
        upload (kept for the next step)."""
        found = self._resident.get(id(frame))
        if found is not None and found[0]() is frame:
            self._resident.move_to_end(id(frame))
            return found[1]
        tensor = self.upload(frame)
        self.keep(frame, tensor)
        return tensor

    def keep(self, frame: Frame, tensor: torch.Tensor) -> None:
        """Remember that `tensor` holds `frame`'s pixels (frames are never changed in place: processor contract)."""
        self._resident[id(frame)] = (weakref.ref(frame), tensor)
        self._resident.move_to_end(id(frame))
        while len(self._resident) > RESIDENT_FRAMES or (
            self._resident and next(iter(self._resident.values()))[0]() is None
        ):
            self._resident.popitem(last=False)

    def guard(self, work: Callable[[], T]) -> T:
        """Run device work, turning the device's out-of-memory error into OutOfMemory (callers retry smaller)."""
        try:
            return work()
        except torch.OutOfMemoryError as exc:
            self._resident.clear()
            raise OutOfMemory(f"{self.name}: {exc}".splitlines()[0]) from exc

    # -- the Executor protocol --------------------------------------------------------------------------------
    def load(self, frames: Sequence[Frame]) -> DeviceFrames:
        return DeviceFrames(self, frames)

    def blank(self, count: int, width: int, height: int) -> DeviceFrames:
        return self.guard(lambda: DeviceFrames(self, [None] * count, shape=(height, width)))

    def images(self, array: npt.NDArray[np.uint8]) -> torch.Tensor:
        return self.upload(array)

    def host(self, images: torch.Tensor) -> npt.NDArray[np.uint8]:
        return self.download(images)

    def split(self, images: torch.Tensor, k: int) -> torch.Tensor:
        return torch.cat([images[:, y::k, x::k] for y in range(k) for x in range(k)]).contiguous()

    def weave(self, images: torch.Tensor, k: int) -> torch.Tensor:
        n = len(images) // (k * k)
        size = images.shape[1] * k
        out = torch.empty((n, size, size, 3), dtype=torch.uint8, device=images.device)
        for j, (y, x) in enumerate((y, x) for y in range(k) for x in range(k)):
            out[:, y::k, x::k] = images[j * n : (j + 1) * n]
        return out

    def infer(
        self,
        session: Any,
        io: IOSpec,
        images: torch.Tensor,
        *,
        name: str | None = None,
        per_call: Mapping[str, npt.NDArray[np.generic]] | None = None,
        per_item: Mapping[str, npt.NDArray[np.float32]] | None = None,
    ) -> torch.Tensor:
        """`run_images` on the device: `session.run_device` between `normalise` and `denormalise`."""
        n = len(images)
        if n == 0:
            return images.clone()
        step = io.batch or n
        into, back = input_transform(io), output_transform(io)

        def run() -> torch.Tensor:
            rows = {
                k: self.upload(np.repeat(np.asarray(v, np.float32), step, axis=0)) for k, v in (per_item or {}).items()
            }
            constants = {k: self.upload(np.asarray(v)) for k, v in (per_call or {}).items()}
            out = []
            for start in range(0, n, step):
                chunk = images[start : start + step]
                if len(chunk) < step:
                    pad = torch.zeros((step - len(chunk), *chunk.shape[1:]), dtype=torch.uint8, device=chunk.device)
                    chunk = torch.cat([chunk, pad])
                (result, *_) = session.run_device({name or io.input: normalise(chunk, into), **rows, **constants})
                out.append(denormalise(result, back))
            return torch.cat(out)[:n]

        return self.guard(run)
