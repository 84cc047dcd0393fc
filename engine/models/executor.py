"""Where a processor's pixel work runs: on the host (numpy and OpenCV) or on the device its model runs on.

A face or frame processor does the same steps whatever the backend: cut aligned crops (or windows) out of its
frames, run them through a model by its I/O spec (normalise, run, de-normalise), paste the results back under
masks (or place them into new frames), and hand frames on. An `Executor` carries those steps out:

- `HOST`: numpy and OpenCV (`engine.faces.align`, `engine.models.tensor`), the reference behaviour, bit for bit
  what the processors always did.
- `engine.backends.device.DeviceExecutor`: PyTorch ops on the device where the model runs (CUDA), so each frame
  crosses to the GPU once as uint8 and comes back once as uint8 (only the part that changed), and crops, model
  tensors and masks stay there. It follows the same spec (`engine.models.tensor.input_transform` /
  `output_transform`, the same templates and paste-back rule); tests/test_device_frames.py checks that both give
  the same tensors and nearly the same pixels.

`executor_for(runtime, session)` picks one: the device executor when the session can take device tensors (it says
so with `frames_device`), else `HOST`. Processors only see this protocol and never import torch.
Images handed between the steps are opaque (`Images`): N×H×W×3 uint8 RGB, where the executor keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from engine.backends import Session
from engine.core.types import Affine, Frame, Mask
from engine.faces import swapper
from engine.faces.align import paste_back, warp_face
from engine.models.manifest import IOSpec
from engine.models.runtime import Runtime
from engine.models.tensor import run_images

# (x0, y0, x1, y1) in pixels, end exclusive.
Rect = tuple[int, int, int, int]
# N×H×W×3 uint8 RGB images where an executor keeps them (a numpy array on the host, a tensor on a device).
Images = Any


class Frames(Protocol):
    """A batch of frames an executor works on. Frames are never changed in place: `result` gives new frames where
    something was pasted or placed, and the very same objects where nothing was."""

    def cut(self, jobs: Sequence[tuple[int, Affine]], size: int) -> Images:
        """For each (frame index, affine frame → crop pixels): the size×size crop it cuts (`align.warp_face`)."""
        ...

    def windows(self, jobs: Sequence[tuple[int, Rect]]) -> Images:
        """For each (frame index, rect): that rectangle of the frame; all rects of one call have one size."""
        ...

    def paste(self, jobs: Sequence[tuple[int, Affine]], images: Images, masks: Sequence[Mask]) -> None:
        """Blend image k back into frame jobs[k][0] under masks[k] (S×S float32 in [0, 1], crop pixels), in order
        (`align.paste_back`)."""
        ...

    def place(self, jobs: Sequence[tuple[int, Rect, Rect]], images: Images) -> None:
        """For each (frame index, destination rect in the frame, source rect in image k): copy that part of
        image k into the frame (rects of equal size)."""
        ...

    def result(self) -> list[Frame]:
        """The frames (H×W×3 uint8 RGB) as they are now, on the host."""
        ...


class Executor(Protocol):
    """Carries out a processor's pixel work (see the module docstring). `name`: "host" or the torch device."""

    name: str

    def load(self, frames: Sequence[Frame]) -> Frames:
        """The frames (H×W×3 uint8 RGB) to work on."""
        ...

    def blank(self, count: int, width: int, height: int) -> Frames:
        """`count` new frames of width × height whose every pixel a caller will `place`."""
        ...

    def images(self, array: npt.NDArray[np.uint8]) -> Images:
        """N×H×W×3 uint8 RGB images from the host."""
        ...

    def host(self, images: Images) -> npt.NDArray[np.uint8]:
        """The images as an N×H×W×3 uint8 RGB numpy array."""
        ...

    def split(self, images: Images, k: int) -> Images:
        """Pixel boost: `engine.faces.swapper.split`."""
        ...

    def weave(self, images: Images, k: int) -> Images:
        """The inverse of `split` (`engine.faces.swapper.weave`)."""
        ...

    def infer(
        self,
        session: Session,
        io: IOSpec,
        images: Images,
        *,
        name: str | None = None,
        per_call: Mapping[str, npt.NDArray[np.generic]] | None = None,
        per_item: Mapping[str, npt.NDArray[np.float32]] | None = None,
    ) -> Images:
        """Images through an image model by its spec: `engine.models.tensor.run_images`, same arguments."""
        ...


class _HostFrames:
    def __init__(self, frames: Sequence[Frame]) -> None:
        self.frames = list(frames)

    def cut(self, jobs: Sequence[tuple[int, Affine]], size: int) -> npt.NDArray[np.uint8]:
        return np.stack([warp_face(self.frames[i], affine, size) for i, affine in jobs])

    def windows(self, jobs: Sequence[tuple[int, Rect]]) -> npt.NDArray[np.uint8]:
        return np.stack([self.frames[i][y0:y1, x0:x1] for i, (x0, y0, x1, y1) in jobs])

    def paste(self, jobs: Sequence[tuple[int, Affine]], images: npt.NDArray[np.uint8], masks: Sequence[Mask]) -> None:
        for (i, affine), image, mask in zip(jobs, images, masks, strict=True):
            self.frames[i] = paste_back(self.frames[i], image, affine, mask)

    def place(self, jobs: Sequence[tuple[int, Rect, Rect]], images: npt.NDArray[np.uint8]) -> None:
        for (i, (x0, y0, x1, y1), (u0, v0, u1, v1)), image in zip(jobs, images, strict=True):
            self.frames[i][y0:y1, x0:x1] = image[v0:v1, u0:u1]

    def result(self) -> list[Frame]:
        return list(self.frames)


class HostExecutor:
    """The reference executor: numpy and OpenCV on the host (what every processor did before executors)."""

    name = "host"

    def load(self, frames: Sequence[Frame]) -> Frames:
        return _HostFrames(frames)

    def blank(self, count: int, width: int, height: int) -> Frames:
        return _HostFrames([np.empty((height, width, 3), np.uint8) for _ in range(count)])

    def images(self, array: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        return array

    def host(self, images: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        return images

    def split(self, images: npt.NDArray[np.uint8], k: int) -> npt.NDArray[np.uint8]:
        return swapper.split(images, k)

    def weave(self, images: npt.NDArray[np.uint8], k: int) -> npt.NDArray[np.uint8]:
        return swapper.weave(images, k)

    def infer(
        self,
        session: Session,
        io: IOSpec,
        images: npt.NDArray[np.uint8],
        *,
        name: str | None = None,
        per_call: Mapping[str, npt.NDArray[np.generic]] | None = None,
        per_item: Mapping[str, npt.NDArray[np.float32]] | None = None,
    ) -> npt.NDArray[np.uint8]:
        return run_images(session, io, images, name=name, per_call=per_call, per_item=per_item)


HOST = HostExecutor()


def executor_for(runtime: Runtime, session: Session) -> Executor:
    """The device executor for the device `session` takes tensors on (`frames_device`, e.g. "cuda:0"; one per
    device, kept warm by `runtime` with the frames it holds), else `HOST`."""
    device: str | None = getattr(session, "frames_device", None)
    if device is None:
        return HOST
    from engine.backends.device import DeviceExecutor

    return runtime.warm(("device-executor", device), lambda: DeviceExecutor(device))
