"""The pipeline's stage threads (decode → faces → …) all end once a run stops, wherever they are waiting."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

from engine.run import workers


def _frames_then_stall(stop: threading.Event) -> Iterator[int]:
    """Six frames, then nothing until the run stops (a decoder whose frames are all read, waiting on its pipe)."""
    yield from range(6)
    stop.wait()


def _hold_back(items: Iterable[int]) -> Iterator[int]:
    """Like the face stage: pulls a few items ahead of what it yields."""
    held: list[int] = []
    for item in items:
        held.append(item)
        if len(held) > 3:
            yield held.pop(0)
    yield from held


def test_stopping_mid_stream_ends_the_decoder_and_the_analysis_thread() -> None:
    stop = threading.Event()
    decoded: queue.Queue[object] = queue.Queue(maxsize=2)
    annotated: queue.Queue[object] = queue.Queue(maxsize=2)
    decode = workers.Worker("decode", lambda: workers.produce(_frames_then_stall(stop), decoded, stop))
    source = workers.drain(decoded, decode, stop)
    analyse = workers.Worker("faces", lambda: workers.produce(_hold_back(source), annotated, stop))
    stream = workers.drain(annotated, analyse, stop)
    assert [next(stream) for _ in range(2)] == [0, 1]
    # The analysis thread has pulled every frame and waits for more; the run ends with the stream not exhausted
    # (a resume whose plan's last segment was already done).
    stop.set()
    for worker in (decode, analyse):
        worker.join()  # no timeout: a thread left waiting for items would hang this test
        assert not worker.thread.is_alive()
    assert len(list(stream)) <= annotated.maxsize  # what was queued before the stop, then it ends
