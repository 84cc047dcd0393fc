"""Frame colourizer: colours black-and-white footage (or gives colour footage new colours), frame by frame.

Each frame's lightness is kept exactly and only its colour is the model's: the frame is reduced to its CIE L*
(grey), resized to the render size, run, and the model's colour — as a*b* chroma — is resized back and joined to
the frame's own L*. The models (their facts and sources: the entries' comments in engine/models/manifest.toml):
- `ddcolor` (default) and `ddcolor_artistic` (DDColor, Apache-2.0): the grey frame as RGB in [0, 1] in, the a*b*
  planes out;
- `deoldify`, `deoldify_artistic`, `deoldify_stable` (DeOldify, MIT): the grey frame as RGB 0–255 in, an RGB
  picture 0–255 out, whose a*b* is taken.
Over a video the chroma is held steady where it only wavers (engine/faces/temporal.py's SteadyPlanes: a still
wall keeps one colour), and follows at once where it changes more. `blend` mixes the result over the frame as it
came; blend 0 runs nothing and returns every frame as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import Field

from engine.core.options import Shown
from engine.core.types import Frame
from engine.faces.temporal import SteadyPlanes
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import from_planes, from_tensor, to_tensor

# Chroma a frame's colour may waver by (CIE a*b* units) and still be held steady, and over how many seconds.
STEADY_CHROMA, STEADY_SECONDS = 6.0, 0.25


class FrameColourizerOptions(ProcessorOptions):
    model: Annotated[
        Literal["ddcolor", "ddcolor_artistic", "deoldify", "deoldify_artistic", "deoldify_stable"],
        Shown(models="frame_colourizer"),
    ] = Field(
        default="ddcolor", description="ddcolor: natural colours; artistic: bolder; deoldify: DeOldify (download)"
    )
    size: Annotated[Literal[192, 256, 384, 512], Shown(unit="px")] = Field(
        default=256, description="the square size the model colours at: larger is finer and slower"
    )
    blend: Annotated[int, Shown(unit="%")] = Field(
        default=100, ge=0, le=100, description="% of the coloured frame over the frame as it came (0: nothing runs)"
    )
    steady: bool = Field(default=True, description="video: hold colours steady where they only waver between frames")


def lightness(frame: Frame) -> npt.NDArray[np.float32]:
    """CIE L* (0–100) of each pixel of `frame` (H×W×3 uint8 RGB), as H×W float32."""
    return cv2.cvtColor(frame.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)[:, :, 0]


def grey(light: npt.NDArray[np.float32]) -> Frame:
    """The neutral grey picture (H×W×3 uint8 RGB) of lightness `light` (H×W, L* 0–100)."""
    lab = np.dstack([light, np.zeros_like(light), np.zeros_like(light)]).astype(np.float32)
    return np.clip(np.rint(cv2.cvtColor(lab, cv2.COLOR_LAB2RGB) * 255.0), 0, 255).astype(np.uint8)


def join(light: npt.NDArray[np.float32], chroma: npt.NDArray[np.float32]) -> Frame:
    """The picture (H×W×3 uint8 RGB) of lightness `light` (H×W, L*) and colour `chroma` (H×W×2, a*b*)."""
    lab = np.dstack([light, chroma]).astype(np.float32)
    return np.clip(np.rint(cv2.cvtColor(lab, cv2.COLOR_LAB2RGB) * 255.0), 0, 255).astype(np.uint8)


class FrameColourizer(FrameProcessor[FrameColourizerOptions]):
    """Colours whole frames (see the module docstring)."""

    id: ClassVar[str] = "frame_colourizer"
    title: ClassVar[str] = "Frame colourizer"
    Options: ClassVar[type[ProcessorOptions]] = FrameColourizerOptions

    def __init__(self, options: FrameColourizerOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.model: LoadedModel | None = None
        self._steady = SteadyPlanes(STEADY_SECONDS, STEADY_CHROMA) if options.steady else None
        if options.blend > 0:
            runtime.ensure([options.model], options.backend)
            self.model = runtime.load(options.model, options.backend)

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        return [options.model] if options.blend > 0 else []  # type: ignore[attr-defined]

    def describe(self) -> dict[str, Any]:
        return {
            "options": self.options.model_dump(mode="json"),
            **(self.model.describe() if self.model is not None else {}),
        }

    def frame_memory(self, width: int, height: int) -> int:
        """The frame in float32 Lab twice over and the model's render-size tensors (they are small)."""
        return width * height * 3 * 4 * 3 + self.options.size**2 * 3 * 4 * 64

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Each frame (H×W×3 uint8 RGB) coloured; blend 0 gives them back as they were."""
        if self.model is None:
            return list(frames)
        return [self._colour(frame, ctx) for frame, ctx in zip(frames, ctxs, strict=True)]

    def chroma(self, frame: Frame) -> npt.NDArray[np.float32]:
        """The model's colour for `frame` (H×W×3 uint8 RGB): H×W×2 float32 CIE a*b*, at the frame's size."""
        assert self.model is not None
        io = self.model.spec.io
        side = self.options.size
        small = cv2.resize(grey(lightness(frame)), (side, side), interpolation=cv2.INTER_AREA)
        (result, *_) = self.model.session.run({io.input: to_tensor(small[None], io)})
        result = np.asarray(result, np.float32)
        if result.shape[1] == 2:  # a*b* planes
            planes = from_planes(result, io)[0]
        else:  # an RGB picture: its a*b*
            picture = from_tensor(result, io)[0].astype(np.float32) / 255.0
            planes = cv2.cvtColor(picture, cv2.COLOR_RGB2LAB)[:, :, 1:]
        height, width = frame.shape[:2]
        return cv2.resize(planes, (width, height), interpolation=cv2.INTER_LINEAR).reshape(height, width, 2)

    def _colour(self, frame: Frame, ctx: FrameContext) -> Frame:
        chroma = self.chroma(frame)
        if self._steady is not None:
            chroma = self._steady.smooth(ctx.index, ctx.time, chroma)
        coloured = join(lightness(frame), chroma)
        if self.options.blend >= 100:
            return coloured
        a = self.options.blend / 100.0
        return np.clip(np.rint(frame * (1.0 - a) + coloured * a), 0, 255).astype(np.uint8)
