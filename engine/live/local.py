"""A local camera through the live loop into local sinks (`launch.py live`)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.live.devices import Camera
from engine.live.faces import track_live
from engine.live.loop import Captured, Figures, LiveLoop, Processed, Sink, SinkThread, percentile
from engine.live.record import Recorder, Recording
from engine.serve.model_lock import ModelLock
from engine.serve.service import FrameRenderer


@dataclass(frozen=True)
class Summary:
    """How a local live session went: frames the camera gave, frames processed, seconds, processed frames per
    second, processing time and arrival → result latency (median; latency also p95; ms), the recording, and the
    processed frames each slower sink skipped (its label, how many: a sink shows the newest frame, not a queue)."""

    captured: int
    processed: int
    seconds: float
    fps: float
    processing_ms: float
    latency_ms: float
    latency_p95_ms: float
    recording: Recording | None = None
    skipped: tuple[tuple[str, int], ...] = ()

    @property
    def dropped(self) -> int:
        return self.captured - self.processed

    def line(self) -> str:
        share = self.dropped / self.captured if self.captured else 0.0
        return (
            f"live: {self.processed} of {self.captured} camera frames processed ({share:.0%} dropped) in "
            f"{self.seconds:.1f} s: {self.fps:.1f} fps, processing {self.processing_ms:.0f} ms, arrival → out "
            f"{self.latency_ms:.0f} ms median, {self.latency_p95_ms:.0f} ms p95"
            + "".join(f"; {label} skipped {n} of them (slower than the stream)" for label, n in self.skipped)
        )


class _Capture:
    """The camera read on its own thread into the loop's mailbox; `error` keeps a failure for `run_camera`."""

    def __init__(self, camera: Camera, loop: LiveLoop, stop: threading.Event) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(camera, loop, stop), name="facestudio-capture",
                                       daemon=True)  # fmt: skip
        self.thread.start()

    def _run(self, camera: Camera, loop: LiveLoop, stop: threading.Event) -> None:
        try:
            for frame, pts in camera.frames():
                if stop.is_set():
                    return
                loop.submit(Captured(frame, time.monotonic(), pts))
        except BaseException as exc:  # raised by run_camera once everything has stopped
            self.error = exc
        finally:
            loop.drain()


def run_camera(
    camera: Camera,
    renderer: FrameRenderer,
    model_lock: ModelLock | threading.Lock,
    sinks: Sequence[Sink],
    *,
    recorder: Recorder | None = None,
    stop: threading.Event | None = None,
    seconds: float | None = None,
    frames: int | None = None,
    on_figures: Callable[[Figures], None] | None = None,
) -> Summary:
    """Stream `camera` through `renderer` into `sinks` and `recorder` (each on its own thread, newest wins) until
    the camera ends, `stop` is set, `seconds` have passed or `frames` have been processed; then finish the
    recording. `on_figures` is told the stream's figures every second. A failure of the camera, the loop or a sink
    is raised here, after everything has stopped (the recording is then discarded)."""
    stop = stop or threading.Event()
    outputs = [SinkThread(sink, f"sink-{type(sink).__name__}") for sink in sinks]
    if recorder is not None:
        outputs.append(SinkThread(recorder, "recorder"))
    enough = threading.Event()

    def emit(out: Processed) -> None:
        if enough.is_set():
            return  # rendered after the last frame asked for
        for output in outputs:
            output.send(out)
        if frames is not None and out.index + 1 >= frames:
            enough.set()

    with model_lock:
        track_live(renderer, camera.fps)  # loads the live detections' analyser before the camera plays
    loop = LiveLoop(renderer, model_lock, emit, fps=camera.fps, max_pixels=renderer.job.runtime.max_pixels).start()
    started = time.monotonic()
    capture = _Capture(camera, loop, stop)
    failure: BaseException | None = None
    try:
        reported = started
        while not (stop.is_set() or enough.is_set()) and loop.running:
            if seconds is not None and time.monotonic() - started >= seconds:
                break
            failure = next((o.error for o in outputs if o.error is not None), None)
            if failure is not None:
                break
            if on_figures is not None and time.monotonic() - reported >= 1.0:
                on_figures(loop.figures())
                reported = time.monotonic()
            stop.wait(0.05)
    except BaseException as exc:  # Ctrl-C included: everything is stopped below, then it is raised
        failure = exc
    finally:
        stop.set()
        camera.close()
        loop.stop(timeout=60)
        capture.thread.join(10)
        for output in outputs:
            output.close()
    elapsed = time.monotonic() - started
    failure = failure or capture.error or loop.error or next((o.error for o in outputs if o.error), None)
    if failure is not None:
        if recorder is not None:
            recorder.abort()
        raise failure
    stats = loop.stats
    skipped = tuple(
        (getattr(output.sink, "label", type(output.sink).__name__), output.inbox.dropped)
        for output in outputs[: len(sinks)]
        if output.inbox.dropped
    )
    # A frame rendered after the last one asked for was not delivered: not counted.
    processed = stats.frames if frames is None else min(stats.frames, frames)
    return Summary(
        captured=stats.offered,
        processed=processed,
        seconds=elapsed,
        fps=processed / elapsed if elapsed > 0 else 0.0,
        processing_ms=statistics.median(stats.processing) if stats.processing else 0.0,
        latency_ms=statistics.median(stats.latency) if stats.latency else 0.0,
        latency_p95_ms=percentile(stats.latency, 95) if stats.latency else 0.0,
        recording=recorder.finish() if recorder is not None else None,
        skipped=skipped,
    )
