"""Running frames through a chain of processors: batches, out-of-memory halving, identity QA's place in the chain,
and how many frames a call takes. The path of every batch of a run and of every preview."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from engine.core import metrics
from engine.core.errors import OutOfMemory
from engine.core.types import Face, Frame
from engine.job.processor import FrameContext, FrameProcessor
from engine.job.settings import Job
from engine.media.picture import holds_alpha
from engine.models.runtime import Runtime

log = logging.getLogger(__name__)

# Identity QA of one processed frame: (frame index, input frame, output frame, the faces found on the input).
QualityCheck = Callable[[int, Frame, Frame, tuple[Face, ...]], None]


@dataclass
class BatchLimit:
    """Frames per processor call in a run: starts at `runtime.batch`, halved for the rest of the run whenever a
    call runs out of memory."""

    size: int


def process_batch(
    chain: Sequence[FrameProcessor],
    frames: Sequence[Frame],
    ctxs: Sequence[FrameContext],
    limit: BatchLimit | None = None,
) -> list[Frame]:
    """Run a batch of frames (H×W×3 uint8 RGB) through the chain, processor by processor (each batches its own
    model calls).

    A processor that runs out of memory gets the batch again in halves, down to one frame at a time; `limit`
    remembers the size that fitted."""
    limit = limit or BatchLimit(len(frames))
    out = list(frames)
    for processor in chain:
        out = _process_halving(processor, out, list(ctxs), limit)
    return out


def process_checked(
    chain: Sequence[FrameProcessor],
    check: QualityCheck | None,
    frames: list[Frame],
    ctxs: list[FrameContext],
    limit: BatchLimit | None = None,
) -> list[Frame]:
    """Run a batch through the chain; identity QA (`check`) looks at the frames right after the last face
    processor (a later processor, such as an upscaler, changes the size QA compares at; one that only draws, the
    face debugger, would have QA measure its drawing)."""
    changing = [i for i, p in enumerate(chain) if p.needs_faces and not p.draws_only]
    if check is None or not changing:
        return process_batch(chain, frames, ctxs, limit)
    split = changing[-1] + 1
    swapped = process_batch(chain[:split], frames, ctxs, limit)
    for before, after, ctx in zip(frames, swapped, ctxs, strict=True):
        check(ctx.index, before, after, ctx.faces)
    return process_batch(chain[split:], swapped, ctxs, limit)


def _process_halving(
    processor: FrameProcessor, frames: list[Frame], ctxs: list[FrameContext], limit: BatchLimit
) -> list[Frame]:
    if len(frames) > limit.size:
        step = limit.size  # fixed for this split; a failure inside lowers the limit for later calls
        return [
            out
            for at in range(0, len(frames), step)
            for out in _process_halving(processor, frames[at : at + step], ctxs[at : at + step], limit)
        ]
    try:
        started = time.perf_counter()
        out = processor.process(frames, ctxs)
        # The one metrics hook of the chain: per-processor frames and latency, whoever runs it.
        seconds = time.perf_counter() - started
        metrics.record_frames(processor.id, processor.describe().get("provider"), len(out), seconds)
        return out
    except (OutOfMemory, MemoryError) as exc:
        if len(frames) == 1:
            raise OutOfMemory(
                f"{processor.id} does not fit in memory even for one frame ({exc}); lower the resolution, set a "
                "smaller tile, or use a smaller model"
            ) from exc
        limit.size = len(frames) // 2
        log.warning("%s ran out of memory on %d frames; %d per call from now on", processor.id, len(frames), limit.size)
        return _process_halving(processor, frames, ctxs, limit)


def makes_alpha(chain: Sequence[FrameProcessor], job: Job) -> bool:
    """Whether a processor of `chain` makes `job`'s frames transparent and its output holds it (`media.holds_alpha`,
    the question each such processor asks in `bind_job`): the output then gets an alpha plane (`chain_alpha`),
    else the processor composites."""
    return any(p.makes_alpha for p in chain) and holds_alpha(job.output, job.video.encoder)


def chain_alpha(
    chain: Sequence[FrameProcessor], index: int, alpha: npt.NDArray[np.uint8] | None = None
) -> npt.NDArray[np.uint8] | None:
    """The alpha channel of output frame `index` after its latest batch: the input's own (`alpha`, H×W uint8, 255 =
    opaque; None: none) times the transparency each processor gave it (`FrameProcessor.alpha`), at the size of the
    first of them; None when none has any."""
    weights = [a for a in (p.alpha(index) for p in chain) if a is not None]
    if alpha is None and not weights:
        return None
    out: npt.NDArray[np.float32] | None = None if alpha is None else alpha.astype(np.float32) / 255.0
    for weight in weights:
        if out is None:
            out = weight.astype(np.float32)
            continue
        if weight.shape != out.shape:
            weight = cv2.resize(weight, (out.shape[1], out.shape[0]), interpolation=cv2.INTER_LINEAR)
        out = out * weight
    assert out is not None
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)


def frame_memory(chain: Sequence[FrameProcessor], width: int, height: int) -> int:
    """Bytes of working memory one width×height input frame takes through the chain's model calls (the largest
    processor's share: they run one after another)."""
    most = 0
    for processor in chain:
        most = max(most, processor.frame_memory(width, height))
        width, height = processor.output_size(width, height)
    return most


def batch_size(chain: Sequence[FrameProcessor], runtime: Runtime, width: int, height: int) -> int:
    """Frames per processor call for width×height frames: `runtime.batch`, or "auto" sized from free memory."""
    return runtime.batch_for(frame_memory(chain, width, height))
