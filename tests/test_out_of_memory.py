"""Out of memory: backends raise the typed error, the pipeline halves its batch for the rest of the run, and the
frame enhancer falls back to fewer windows per call and then to smaller tiles, with the same pixels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytest

from engine.backends.onnx import is_out_of_memory
from engine.core.errors import OutOfMemory
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.runtime import Runtime
from engine.run.chain import BatchLimit, process_batch
from processors.frame_enhancer import FrameEnhancer, FrameEnhancerOptions


class Picky(FrameProcessor[ProcessorOptions]):
    """Adds 1 to every pixel; 'runs out of memory' on more than `fits` frames per call."""

    id: ClassVar[str] = "picky"
    title: ClassVar[str] = "picky"
    Options: ClassVar[type[ProcessorOptions]] = ProcessorOptions
    fits = 2

    def __init__(self) -> None:
        self.calls: list[int] = []

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        self.calls.append(len(frames))
        if len(frames) > self.fits:
            raise OutOfMemory("CPUExecutionProvider: Failed to allocate memory")
        return [f + 1 for f in frames]


def test_pipeline_halves_the_batch_and_keeps_it_halved() -> None:
    picky = Picky()
    frames = [np.full((4, 4, 3), i, np.uint8) for i in range(8)]
    ctxs = [FrameContext(index=i) for i in range(8)]
    limit = BatchLimit(8)
    out = process_batch([picky], frames, ctxs, limit)
    assert [int(f[0, 0, 0]) for f in out] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert picky.calls == [8, 4, 2, 2, 2, 2] and limit.size == 2
    # The next batch of the run starts at the size that fitted.
    picky.calls.clear()
    process_batch([picky], frames, ctxs, limit)
    assert picky.calls == [2, 2, 2, 2]


def test_one_frame_that_does_not_fit_is_a_typed_error() -> None:
    picky = Picky()
    picky.fits = 0
    with pytest.raises(OutOfMemory, match="picky does not fit in memory even for one frame"):
        process_batch([picky], [np.zeros((4, 4, 3), np.uint8)] * 2, [FrameContext(index=0)] * 2)


@pytest.mark.parametrize(
    "message",
    [
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory for requested buffer of size 123",
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "std::bad_alloc",
    ],
)
def test_allocation_failures_are_recognised(message: str) -> None:
    assert is_out_of_memory(RuntimeError(message))
    assert not is_out_of_memory(RuntimeError("Invalid input name: x"))


def test_onnx_session_raises_the_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Runtime(RuntimeSettings(device="cpu", backend="onnx"))
    session = runtime.load("realesr_animevideov3").session

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Failed to allocate memory for requested buffer of size 1073741824")

    monkeypatch.setattr(session._session, "run", failing)  # type: ignore[attr-defined]
    with pytest.raises(OutOfMemory, match="CPUExecutionProvider: Failed to allocate memory"):
        session.run({"input": np.zeros((1, 3, 8, 8), np.float32)})


def test_frame_enhancer_falls_back_to_fewer_windows_then_smaller_tiles() -> None:
    runtime = Runtime(RuntimeSettings(device="cpu", batch=4))
    frames = demo.frames(width=128, height=96, count=2)
    ctxs = [FrameContext(index=i) for i in range(2)]
    expected = FrameEnhancer(FrameEnhancerOptions(), runtime).process(frames, ctxs)

    enhancer = FrameEnhancer(FrameEnhancerOptions(), runtime)
    real_run = enhancer.loaded.session.run
    seen: list[tuple[int, ...]] = []

    def small_only(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        (x,) = inputs.values()
        seen.append(x.shape)
        # Only one window of at most 80×80 pixels "fits" (a 32-px tile with its 20 px of context is 72 wide).
        if x.shape[0] > 1 or x.shape[2] * x.shape[3] > 80 * 80:
            raise OutOfMemory("CPUExecutionProvider: Failed to allocate memory")
        return real_run(inputs)

    enhancer.loaded.session.run = small_only  # type: ignore[method-assign]
    out = enhancer.process(frames, ctxs)
    assert enhancer.batch == 1 and 0 < enhancer.tile_for(128, 96) < 96
    # Tiles carry the model's whole receptive field, so the result is the whole-frame result (float rounding).
    for a, b in zip(out, expected, strict=True):
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1
