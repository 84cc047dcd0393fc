"""Frame enhancer: Real-ESRGAN upscaling of whole frames; a frame that fits in memory runs whole, a larger one in
the largest tiles that fit, each with the context the model needs on its inner edges (no seams, little waste)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import cv2
import numpy as np
from pydantic import Field, field_validator

from engine.backends.memory import available_memory
from engine.core.errors import InvalidJob, OutOfMemory
from engine.core.options import Shown
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.models.executor import executor_for
from engine.models.manifest import Manifest
from engine.models.runtime import LoadedModel, Runtime

log = logging.getLogger(__name__)


def _model_ids() -> list[str]:
    """The frame_enhancer models of the active catalogue (read when asked: the catalogue can be swapped)."""
    return [m.id for m in Manifest.load().for_task("frame_enhancer")]


class FrameEnhancerOptions(ProcessorOptions):
    model: Annotated[str, Shown(models="frame_enhancer")] = Field(
        default="realesr_animevideov3",
        description="Real-ESRGAN model (all embedded ones work offline)",
        json_schema_extra=lambda schema: schema.update(enum=_model_ids()),
    )
    scale: Annotated[float | None, Shown(unit="× input")] = Field(
        default=None,
        ge=1.0,
        le=4.0,
        description="output size ÷ input size; default the model's native scale; below it the output is resized down",
    )
    blend: Annotated[int, Shown(unit="%")] = Field(
        default=100, ge=0, le=100, description="% of the enhanced frame over a plain bicubic resize"
    )
    tile: Annotated[int, Shown(unit="px", advanced=True)] = Field(
        default=0,
        ge=0,
        description="tile edge in input pixels; 0 = automatic: the whole frame when it fits in memory, else the "
        "largest tiles that do",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in _model_ids():
            raise ValueError(f"unknown frame_enhancer model {value!r}; known: {', '.join(_model_ids())}")
        return value

    @field_validator("tile")
    @classmethod
    def _tile_size(cls, value: int) -> int:
        if 0 < value < 32:
            raise ValueError("tile must be 0 (automatic) or at least 32 pixels")
        return value


@dataclass(frozen=True)
class Tile:
    """One tile of a frame, all in frame pixels (x0, y0, x1, y1). `window`: what the model sees, the core grown by
    the context pad where the frame has pixels; `core`: what the tile contributes; `offset`: core's (x, y) in
    the window."""

    window: tuple[int, int, int, int]
    core: tuple[int, int, int, int]
    offset: tuple[int, int]


def _tile_len(length: int, tile: int) -> int:
    """Core length along one axis: the frame split into the fewest tiles of at most `tile`, made equal.

    Equal cores avoid computing a nearly empty last tile at full size (640 px with tile 512 → two cores of 320,
    not 512 + 128) and keep inner windows the same size, so they batch.
    """
    if tile <= 0 or tile >= length:
        return length
    count = -(-length // tile)
    return -(-length // count)


def _axis(length: int, size: int, pad: int) -> list[tuple[int, int, int, int]]:
    """(window start, core start, core end, window end) along one axis for cores of `size`.

    Windows reach `pad` pixels past their core into neighbouring pixels only: at the frame's edge the model pads
    by itself, exactly as it does for a whole frame, so tiled and whole-frame outputs agree.
    """
    return [
        (max(start - pad, 0), start, min(start + size, length), min(start + size + pad, length))
        for start in range(0, length, size)
    ]


def plan_tiles(width: int, height: int, tile: int, pad: int) -> list[Tile]:
    """Split a width×height frame into cores of at most `tile` pixels (0: one core) that partition it, each in a
    window with `pad` pixels of context on its inner sides."""
    tw, th = _tile_len(width, tile), _tile_len(height, tile)
    return [
        Tile((wx0, wy0, wx1, wy1), (x0, y0, x1, y1), (x0 - wx0, y0 - wy0))
        for wy0, y0, y1, wy1 in _axis(height, th, pad)
        for wx0, x0, x1, wx1 in _axis(width, tw, pad)
    ]


def _windows(chunk: Sequence[tuple[int, Tile]]) -> list[tuple[int, tuple[int, int, int, int]]]:
    return [(fi, t.window) for fi, t in chunk]


def auto_tile(width: int, height: int, pad: int, budget_pixels: int) -> int:
    """The tile edge for a frame when at most `budget_pixels` input pixels may go through the model at once:
    0 (whole frame) when it fits, else the largest square window that does, less its context."""
    if width * height <= budget_pixels:
        return 0
    return max(32, int(budget_pixels**0.5) - 2 * pad)


class FrameEnhancer(FrameProcessor[FrameEnhancerOptions]):
    """Upscales every frame with a Real-ESRGAN model; output size = round(scale × input size)."""

    id: ClassVar[str] = "frame_enhancer"
    title: ClassVar[str] = "Frame enhancer (Real-ESRGAN)"
    Options: ClassVar[type[ProcessorOptions]] = FrameEnhancerOptions

    def __init__(self, options: FrameEnhancerOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.native = runtime.manifest.get(options.model).scale
        # Checked before loading, so a bad combination is reported without downloading anything.
        if options.scale is not None and options.scale > self.native:
            raise InvalidJob(
                f"frame_enhancer.scale {options.scale:g} is above {options.model}'s native ×{self.native}; "
                f"use a ×4 model or a scale ≤ {self.native}"
            )
        self.loaded: LoadedModel = runtime.load(options.model, options.backend)
        self.scale = options.scale if options.scale is not None else float(self.native)
        # Windows per model call; "auto" sizes it for windows of up to 256×256 input pixels.
        self.batch = runtime.batch_for(self.loaded.spec.bytes_per_pixel * 256 * 256)
        # Half of the memory free now, for the model's working tensors (the rest for the pipeline's queues).
        self.memory_budget = available_memory(runtime.settings.device) // 2

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        return [options.model]  # type: ignore[attr-defined]

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        return round(width * self.scale), round(height * self.scale)

    def describe(self) -> dict[str, Any]:
        return {**self.loaded.describe(), "options": self.options.model_dump(mode="json")}

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Upscale frames (H×W×3 uint8 RGB) to `output_size`; tiles of all frames of one size are batched."""
        out: list[Frame | None] = [None] * len(frames)
        by_size: dict[tuple[int, ...], list[int]] = {}
        for i, frame in enumerate(frames):
            by_size.setdefault(frame.shape, []).append(i)
        for indices in by_size.values():
            native = self._upscale_native([frames[i] for i in indices])
            for i, up in zip(indices, native, strict=True):
                out[i] = self._finish(frames[i], up)
        return out  # type: ignore[return-value]

    def tile_for(self, width: int, height: int) -> int:
        """The tile edge used for width×height frames: the option, or the automatic choice from the memory
        free for one model call of `batch` windows."""
        if self.options.tile:
            return self.options.tile
        per_pixel = self.loaded.spec.bytes_per_pixel * self.batch
        return auto_tile(width, height, self.loaded.spec.tile_pad, self.memory_budget // per_pixel)

    def frame_memory(self, width: int, height: int) -> int:
        # The model's tensors over every window of the frame, plus the float32 output.
        out_w, out_h = self.output_size(width, height)
        return self.loaded.spec.bytes_per_pixel * self.computed_pixels(width, height) + out_w * out_h * 3 * 4

    def computed_pixels(self, width: int, height: int) -> int:
        tiles = plan_tiles(width, height, self.tile_for(width, height), self.loaded.spec.tile_pad)
        return sum((x1 - x0) * (y1 - y0) for x0, y0, x1, y1 in (t.window for t in tiles))

    def _upscale_native(self, frames: list[Frame]) -> list[Frame]:
        """Run the model on same-size frames; returns frames at exactly `native` × their size.

        Out of memory, it retries with half the windows per call, then (automatic tiles) with tiles of half the
        edge, until one 32-px tile per call; the smaller setting stays for the rest of the run."""
        h, w = frames[0].shape[:2]
        while True:
            try:
                return self._upscale_tiles(frames)
            except OutOfMemory:
                if self.batch > 1:
                    self.batch //= 2
                elif not self.options.tile and self.tile_for(w, h) != 32:
                    self.memory_budget //= 4
                else:
                    raise
                log.warning("frame_enhancer ran out of memory: now %d windows per call, tile %d px (0 = whole)",
                            self.batch, self.tile_for(w, h))  # fmt: skip

    def _upscale_tiles(self, frames: list[Frame]) -> list[Frame]:
        spec = self.loaded.spec
        h, w = frames[0].shape[:2]
        tiles = plan_tiles(w, h, self.tile_for(w, h), spec.tile_pad)
        s = self.native
        # On the device the model runs on, when it can take tensors there (engine.models.executor).
        executor = executor_for(self.runtime, self.loaded.session)
        source = executor.load(frames)
        results = executor.blank(len(frames), w * s, h * s)
        # Windows of one size batch together (edge windows are smaller than inner ones).
        groups: dict[tuple[int, int], list[tuple[int, Tile]]] = {}
        for fi in range(len(frames)):
            for t in tiles:
                groups.setdefault((t.window[2] - t.window[0], t.window[3] - t.window[1]), []).append((fi, t))
        for jobs in groups.values():
            for start in range(0, len(jobs), self.batch):
                chunk = jobs[start : start + self.batch]
                windows = source.windows(_windows(chunk))
                up = executor.infer(self.loaded.session, spec.io, windows, name=self.loaded.session.input_names[0])
                placed = []
                for fi, t in chunk:
                    x0, y0, x1, y1 = t.core
                    ox, oy = t.offset
                    core = (ox * s, oy * s, (ox + x1 - x0) * s, (oy + y1 - y0) * s)
                    placed.append((fi, (x0 * s, y0 * s, x1 * s, y1 * s), core))
                results.place(placed, up)
        return results.result()

    def _finish(self, frame: Frame, native: Frame) -> Frame:
        """Resize the native output to the requested scale and blend it over a plain bicubic resize."""
        h, w = frame.shape[:2]
        size = self.output_size(w, h)
        if (native.shape[1], native.shape[0]) != size:
            # Area averaging is the alias-free way down, as Real-ESRGAN's own `outscale` resize intends.
            native = cv2.resize(native, size, interpolation=cv2.INTER_AREA)
        if self.options.blend >= 100:
            return native
        base = cv2.resize(frame, size, interpolation=cv2.INTER_CUBIC)
        a = self.options.blend / 100.0
        return np.rint(base * (1.0 - a) + native * a).astype(np.uint8)
