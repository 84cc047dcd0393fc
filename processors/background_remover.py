"""Background remover: keeps the person (the foreground) and makes everything else transparent, or a solid
colour, by a matting or segmentation model's matte.

The frame is resized to the model's square input, normalised by its catalogue entry, and the model's output (one
plane in [0, 1], 1 = foreground) is resized back to the frame: the matte. `strength` scales what is removed:
alpha = 1 − strength·(1 − matte). Over a video the matte is held steady where it only wavers between frames
(engine/faces/temporal.py's SteadyPlanes) and follows at once where something moves, so edges do not shimmer.

- `background = "transparent"`: where the output can hold transparency (`engine.media.holds_alpha`: a PNG,
  WebP or TIFF image; a video in .mov (ProRes 4444), .webm or .mkv (VP9 with alpha), or a GIF's transparent
  colour) the pixels are kept as they are and the matte is the output's alpha plane (`alpha`, written by the
  pipeline with each frame). Where it cannot (an .mp4, whose H.264/HEVC hold none; a JPEG or BMP image; an
  encoder named that keeps no alpha) the frame is composited on `colour` instead, and the run's summary says so.
  The studio's preview shows transparency as a checkerboard.
- `background = "colour"`: composited on `colour` everywhere.
Pixels the matte keeps whole (alpha 1) are returned exactly as they came. Strength 0 runs nothing and returns
every frame as it was. Models: MODNet (default, Apache-2.0), BiRefNet general and portrait (MIT), ISNet (DIS,
Apache-2.0), RMBG 2.0 (BRIA, CC BY-NC 4.0: non-commercial), BEN2 (MIT); the facts and their sources: the entries'
comments in engine/models/manifest.toml.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
from pydantic import Field

from engine.core.options import Shown
from engine.core.types import Frame, Mask
from engine.faces.temporal import SteadyPlanes
from engine.job.processor import BoundJob, FrameContext, FrameProcessor, ProcessorOptions
from engine.media.commands import MUXERS
from engine.media.picture import alpha_advice, holds_alpha
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import from_planes, to_tensor

# How far (0–1) a pixel's matte may waver between frames and still be held steady, and over how many seconds.
STEADY_MATTE, STEADY_SECONDS = 0.15, 0.2
# Output frames before a call's first whose alpha is still kept (the pipeline reads a frame's right after its
# batch, which a processor out of memory gets in parts).
KEEP_ALPHAS = 64


class BackgroundRemoverOptions(ProcessorOptions):
    model: Annotated[
        Literal["modnet", "birefnet_general", "birefnet_portrait", "isnet_general", "rmbg_2_0", "ben_2"],
        Shown(models="background_remover"),
    ] = Field(default="modnet", description="modnet: fast portrait matting; the others: finer edges, slower (download)")
    background: Literal["transparent", "colour"] = Field(
        default="transparent",
        description="transparent: an alpha channel where the output holds one (PNG, WebP, TIFF; .mov, .webm, .mkv, "
        "GIF), else composited on the colour; colour: always on the colour",
    )
    colour: str = Field(
        default="#00b140",
        pattern=r"^#[0-9a-fA-F]{6}$",
        description="the background colour, #RRGGBB (also where transparency cannot be written)",
    )
    strength: Annotated[int, Shown(unit="%")] = Field(
        default=100, ge=0, le=100, description="how much of the background is removed (0: nothing runs)"
    )
    steady: bool = Field(default=True, description="video: hold the matte steady where it only wavers")


def rgb(colour: str) -> tuple[int, int, int]:
    """`#RRGGBB` as (R, G, B) 0–255."""
    value = colour.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def composite(frame: Frame, alpha: Mask, colour: tuple[int, int, int]) -> Frame:
    """`frame` (H×W×3 uint8 RGB) over a solid `colour` by `alpha` (H×W float32 in [0, 1], 1 = the frame): pixels
    with alpha 1 come back exactly as they were."""
    a = alpha[..., None]
    mixed = frame.astype(np.float32) * a + np.asarray(colour, np.float32) * (1.0 - a)
    return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)


class BackgroundRemover(FrameProcessor[BackgroundRemoverOptions]):
    """Removes the background of whole frames (see the module docstring)."""

    id: ClassVar[str] = "background_remover"
    title: ClassVar[str] = "Background remover"
    Options: ClassVar[type[ProcessorOptions]] = BackgroundRemoverOptions

    def __init__(self, options: BackgroundRemoverOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.model: LoadedModel | None = None
        self.writes_alpha = False
        self._steady = SteadyPlanes(STEADY_SECONDS, STEADY_MATTE) if options.steady else None
        self._alphas: dict[int, Mask] = {}
        if options.strength > 0:
            runtime.ensure([options.model], options.backend)
            self.model = runtime.load(options.model, options.backend)
            self.makes_alpha = options.background == "transparent"

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        return [options.model] if options.strength > 0 else []  # type: ignore[attr-defined]

    def bind_job(self, job: BoundJob) -> None:
        """Transparency is written where the output holds it (`media.holds_alpha`, as the pipeline asks); elsewhere
        the frames are composited on the colour, and the run's notes say so."""
        if self.model is None or self.options.background != "transparent":
            return
        self.writes_alpha = holds_alpha(job.output, job.video.encoder)
        if not self.writes_alpha:
            named = job.video.encoder if job.output.suffix.lower() in MUXERS and job.video.encoder != "auto" else ""
            what = named or job.output.suffix or "this output"
            self.notes = (
                f"background_remover: {what} holds no transparency, so the background was composited on "
                f"{self.options.colour} ({alpha_advice(job.output, job.video.encoder)} for an alpha channel)",
            )

    def describe(self) -> dict[str, Any]:
        return {
            "options": self.options.model_dump(mode="json"),
            "alpha": self.writes_alpha,
            **(self.model.describe() if self.model is not None else {}),
        }

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Each frame (H×W×3 uint8 RGB) with its background removed (see the module docstring)."""
        if self.model is None:
            return list(frames)
        out = []
        if self.writes_alpha and ctxs:
            # Kept until the pipeline has taken them, right after the batch: this call's and a few before.
            first = ctxs[0].index
            self._alphas = {i: a for i, a in self._alphas.items() if first - KEEP_ALPHAS <= i < first}
        for frame, ctx in zip(frames, ctxs, strict=True):
            alpha = 1.0 - (self.options.strength / 100.0) * (1.0 - self.matte(frame, ctx))
            alpha = alpha.astype(np.float32)
            if self.writes_alpha:
                self._alphas[ctx.index] = alpha
                out.append(frame)
            else:
                out.append(composite(frame, alpha, rgb(self.options.colour)))
        return out

    def alpha(self, index: int) -> Mask | None:
        """The alpha (H×W float32 in [0, 1], 1 = opaque) of output frame `index` of a recent batch, where the
        output holds transparency; None otherwise."""
        return self._alphas.get(index)

    def matte(self, frame: Frame, ctx: FrameContext) -> Mask:
        """The foreground matte of `frame` (H×W float32 in [0, 1], 1 = the person), held steady over a video."""
        assert self.model is not None
        spec = self.model.spec
        side = spec.input_size or 512
        small = cv2.resize(frame, (side, side), interpolation=cv2.INTER_AREA)
        (result, *_) = self.model.session.run({spec.io.input: to_tensor(small[None], spec.io)})
        plane = from_planes(np.asarray(result), spec.io)[0][:, :, 0]
        height, width = frame.shape[:2]
        matte = cv2.resize(plane, (width, height), interpolation=cv2.INTER_LINEAR).astype(np.float32)
        if self._steady is not None:
            matte = self._steady.smooth(ctx.index, ctx.time, matte[..., None])[:, :, 0]
        return np.clip(matte, 0.0, 1.0)
