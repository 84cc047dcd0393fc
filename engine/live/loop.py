"""The live render loop and its drop policy (see engine/live/__init__.py): a newest-wins mailbox in front of one
render thread, rolling figures, and sinks on threads of their own behind mailboxes of their own."""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from engine.core.errors import FacestudioError, InvalidInput
from engine.core.types import Frame
from engine.live.faces import stop_live, track_live
from engine.serve.model_lock import ModelLock
from engine.serve.service import FrameRenderer

log = logging.getLogger(__name__)

# Seconds the loop leaves the model lock free after each frame, so that a thread waiting for it gets it.
COURTESY_S = 0.003
# How long the loop waits for the model lock before it says it is waiting (seconds).
_LOCK_POLL_S = 0.25
# The tracker is re-timed when the processed rate and the rate it assumes differ by more than this factor.
RETIME_RATIO = 1.5
# Seconds of recent frames the figures are taken over.
WINDOW_S = 3.0


@dataclass(frozen=True)
class Captured:
    """One camera frame as it arrived. `data`: the frame (H×W×3 uint8 RGB), or what `convert` turns into one (a
    decoded WebRTC frame is converted only if it is processed: most may be dropped). `arrived`: `time.monotonic()`
    when it reached us (s); `pts`: the source's own timestamp, if it has one."""

    data: Any
    arrived: float
    pts: int | None = None
    convert: Callable[[Any], Frame] | None = None

    def frame(self) -> Frame:
        return self.convert(self.data) if self.convert is not None else self.data


class LatestFrame:
    """A one-place mailbox between producers and one consumer thread: `put` replaces what is waiting (the older
    item is dropped and counted), `take` waits for the next item. Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item: Any = None
        self._closed = False
        self.offered = 0
        self.dropped = 0

    def put(self, item: Any) -> bool:
        """Offer `item` (not None); False once closed."""
        with self._cond:
            if self._closed:
                return False
            self.offered += 1
            if self._item is not None:
                self.dropped += 1
            self._item = item
            self._cond.notify()
            return True

    def take(self, timeout: float | None = None) -> Any:
        """The waiting item (the box is empty again); None after `timeout` seconds, or once it is closed and
        empty (an item put before `close` is still taken)."""
        with self._cond:
            self._cond.wait_for(lambda: self._item is not None or self._closed, timeout)
            item, self._item = self._item, None
            return item

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


@dataclass(frozen=True)
class Processed:
    """One frame out of the loop. `frame`: the result, H×W×3 uint8 RGB; `index`: its number among processed frames
    (from 0); `pts`, `arrived`: its input's (see Captured); `started`, `done`: `time.monotonic()` when its render
    started and ended (s); `waited_ms`: how long it waited for the model lock; `faces_ms`, `chain_ms`: the face
    stage's and the processors' time; `faces`: how many faces were changed on it."""

    frame: Frame
    index: int
    pts: int | None
    arrived: float
    started: float
    done: float
    waited_ms: float
    faces_ms: float
    chain_ms: float
    faces: int

    @property
    def processing_ms(self) -> float:
        return self.faces_ms + self.chain_ms

    @property
    def latency_ms(self) -> float:
        """From the input's arrival to the result: waiting in the mailbox, for the model, and processing."""
        return (self.done - self.arrived) * 1000


@dataclass(frozen=True)
class Figures:
    """A stream's figures over the last `WINDOW_S` seconds: processed frames per second, frames offered per
    second, the share of all frames offered so far that were dropped, processing time (median, ms), arrival →
    result (median and p95, ms), the loop's `state` ("starting", "running", "waiting for the model: …",
    "stopped", "failed: …"), and the counts so far."""

    fps: float
    input_fps: float
    dropped: float
    processing_ms: float
    latency_ms: float
    latency_p95_ms: float
    state: str
    frames: int
    offered: int


class LiveStats:
    """Rolling figures of one stream, and every frame's processing and latency for a summary (thread-safe).
    `clock`: seconds, the clock the frames' times are given in (`time.monotonic`)."""

    def __init__(self, window: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.clock = clock
        self._lock = threading.Lock()
        self._done: deque[tuple[float, float, float]] = deque()  # (done, processing ms, latency ms)
        self._offered: deque[float] = deque()
        self.frames = 0
        self.offered = 0
        self.processing: list[float] = []
        self.latency: list[float] = []

    def offer(self, now: float) -> None:
        with self._lock:
            self.offered += 1
            self._offered.append(now)
            self._trim(now)

    def done(self, out: Processed) -> None:
        with self._lock:
            self.frames += 1
            self._done.append((out.done, out.processing_ms, out.latency_ms))
            self.processing.append(out.processing_ms)
            self.latency.append(out.latency_ms)
            self._trim(out.done)

    def _trim(self, now: float) -> None:
        while self._done and now - self._done[0][0] > self.window:
            self._done.popleft()
        while self._offered and now - self._offered[0] > self.window:
            self._offered.popleft()

    def input_rate(self, now: float | None = None) -> float:
        """Frames offered per second over the window (0 before two have been offered)."""
        now = self.clock() if now is None else now
        with self._lock:
            self._trim(now)
            offered = list(self._offered)
        span = offered[-1] - offered[0] if len(offered) > 1 else 0.0
        return (len(offered) - 1) / span if span > 0 else 0.0

    def figures(self, state: str, now: float | None = None) -> Figures:
        now = self.clock() if now is None else now
        with self._lock:
            self._trim(now)
            done, offered = list(self._done), len(self._offered)
            frames, total = self.frames, self.offered
        span = done[-1][0] - done[0][0] if len(done) > 1 else 0.0
        latency = [d[2] for d in done]
        return Figures(
            fps=(len(done) - 1) / span if span > 0 else 0.0,
            input_fps=offered / self.window,
            dropped=(total - frames) / total if total else 0.0,
            processing_ms=statistics.median(d[1] for d in done) if done else 0.0,
            latency_ms=statistics.median(latency) if latency else 0.0,
            latency_p95_ms=percentile(latency, 95) if latency else 0.0,
            state=state,
            frames=frames,
            offered=total,
        )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) of `values`, linearly interpolated (numpy's default)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


class LiveLoop:
    """One stream's render thread: takes the newest frame `submit`ted, renders it through `renderer` under
    `model_lock` with the face tracker kept from frame to frame, and hands each result to `emit` (on the loop's
    thread: put a `SinkThread` in front of anything slow). `replace` switches to another renderer (the face
    settings changed) from the next frame. A render that fails stops the loop; `state` and `error` say why.

    `fps`: the rate the renderer's tracker was made for; `max_pixels`: the largest frame (width × height) it
    renders, as for a run; `clock`: seconds, the clock `Captured.arrived` is given in (`time.monotonic`)."""

    def __init__(
        self,
        renderer: FrameRenderer,
        model_lock: ModelLock | threading.Lock,
        emit: Callable[[Processed], None],
        *,
        fps: float = 30.0,
        max_pixels: int | None = None,
        name: str = "live",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.renderer = renderer
        self.model_lock = model_lock
        self.emit = emit
        self.fps = fps
        self.max_pixels = max_pixels
        self.inbox = LatestFrame()
        self.clock = clock
        self.stats = LiveStats(clock=clock)
        self.state = "starting"
        self.error: BaseException | None = None
        self._replacement: FrameRenderer | None = None
        self._retrack = False  # the tracker is re-made for `fps` before the next frame
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"facestudio-{name}", daemon=True)

    def start(self) -> LiveLoop:
        self._thread.start()
        return self

    def submit(self, captured: Captured) -> None:
        """Offer a camera frame (newest wins; never blocks)."""
        if not self.inbox.closed:
            self.stats.offer(captured.arrived)
            self.inbox.put(captured)

    def replace(self, renderer: FrameRenderer) -> None:
        self._replacement = renderer

    def figures(self) -> Figures:
        return self.stats.figures(self.state)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def drain(self) -> None:
        """No more frames will come (the camera ended): render the one waiting, if any, then stop."""
        self.inbox.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the frame being rendered, if any (waits up to `timeout` seconds for it)."""
        self._stop.set()
        self.inbox.close()
        self.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        index = 0
        try:
            while not self._stop.is_set():
                captured = self.inbox.take(timeout=0.2)
                if captured is None:
                    if self.inbox.closed:
                        break
                    continue
                out = self._render(self._fresher(captured), index)
                if out is None:
                    break
                index += 1
                self.stats.done(out)
                self.emit(out)
                self._retime()
            stop_live(self.renderer)
            self.state = "stopped"
        except BaseException as exc:  # reported through `state` and `error`: the stream's owner shows it
            self.error = exc
            text = str(exc) if isinstance(exc, FacestudioError) else f"internal error: {type(exc).__name__}: {exc}"
            self.state = f"failed: {text.splitlines()[0] if text else type(exc).__name__}"
            if not isinstance(exc, FacestudioError):
                log.error("live stream failed", exc_info=exc)

    def _render(self, captured: Captured, index: int) -> Processed | None:
        asked = self.clock()
        while not self.model_lock.acquire(timeout=_LOCK_POLL_S):
            self.state = "waiting for the model: a job is using it (the stream goes on when it is done)"
            if self._stop.is_set():
                return None
        try:
            # A newer frame may have come while this one waited for the model: that one is rendered instead.
            captured = self.inbox.take(0) or captured
            frame = captured.frame()
            if self.max_pixels is not None and frame.shape[0] * frame.shape[1] > self.max_pixels:
                raise InvalidInput(
                    f"the camera sends {frame.shape[1]}×{frame.shape[0]} frames, above runtime.max_pixels="
                    f"{self.max_pixels}: choose a smaller camera resolution, or raise runtime.max_pixels"
                )
            # A new tracker (a new renderer, or the processed rate changed) under the lock: it may load models.
            if index == 0 or self._replacement is not None or self._retrack:
                self.renderer = self._replacement or self.renderer
                self._replacement, self._retrack = None, False
                track_live(self.renderer, self.fps)
            started = self.clock()
            self.state = "running"
            rendered = self.renderer.render(frame, index, track=True)
        finally:
            self.model_lock.release()
        done = self.clock()
        time.sleep(COURTESY_S)
        return Processed(
            rendered.after, index, captured.pts, captured.arrived, started, done, (started - asked) * 1000,
            rendered.faces_ms, rendered.chain_ms, len(rendered.chosen),
        )  # fmt: skip

    def _fresher(self, captured: Captured) -> Captured:
        """`captured`, or the camera's next frame when that one is due sooner than `captured` has waited: a frame
        that waited more than half the camera's interval is older than the next will be by the time it comes, so
        the loop waits for the next (up to a quarter interval past when it is due, then renders `captured`). The
        frame rendered is then at most about half an interval old instead of up to one, for an idle eighth of an
        interval per frame on average."""
        rate = self.stats.input_rate()
        if rate <= 0:
            return captured
        interval = 1.0 / rate
        waited = self.clock() - captured.arrived
        if waited <= interval / 2:
            return captured
        return self.inbox.take(timeout=max(interval - waited, 0.0) + interval / 4) or captured

    def _retime(self) -> None:
        """Re-time the tracker to the processed rate when the one it assumes is off by more than RETIME_RATIO
        (once enough frames have been processed to measure it)."""
        figures = self.stats.figures(self.state)
        if self.stats.frames < 8 or figures.fps <= 0:
            return
        if max(figures.fps / self.fps, self.fps / figures.fps) > RETIME_RATIO:
            log.debug("live: tracker re-timed from %.1f to %.1f fps", self.fps, figures.fps)
            self.fps = figures.fps
            self._retrack = True


class Sink(Protocol):
    """Where processed frames go. `send` may block: it runs on its own thread (SinkThread). A sink may name itself
    for the session's summary with a class attribute `label` ("the window")."""

    def send(self, out: Processed) -> None: ...

    def close(self) -> None: ...


class SinkThread:
    """A sink on its own thread behind a newest-wins mailbox: a slow sink skips frames instead of slowing the loop
    or building a queue. A sink that fails stops; `error` keeps why (the other sinks go on)."""

    def __init__(self, sink: Sink, name: str = "sink") -> None:
        self.sink = sink
        self.inbox = LatestFrame()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"facestudio-{name}", daemon=True)
        self._thread.start()

    def send(self, out: Processed) -> None:
        self.inbox.put(out)

    def _run(self) -> None:
        try:
            while (out := self.inbox.take()) is not None:
                self.sink.send(out)
        except BaseException as exc:  # kept for the owner to report
            self.error = exc
            log.info("live sink %s stopped: %s", type(self.sink).__name__, exc)

    def close(self) -> None:
        """Send what is waiting, then close the sink."""
        self.inbox.close()
        self._thread.join(30)
        self.sink.close()
