"""Live mode, engine side (engine/live, engine/serve/service.py's live renderers) and `launch.py live`: newest-wins
dropping, the model lock shared fairly, camera-sized detection, recordings tagged synthetic with their sidecar,
and a video file played as the camera into the test sink."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

import cli
from engine import media as video
from engine.core.errors import InvalidInput
from engine.core.types import Face
from engine.faces.embedded import EmbeddedAnalyser
from engine.job.settings import Job
from engine.live import testcard
from engine.live.devices import FileCamera, FolderSink, VirtualCameraSink, open_camera
from engine.live.faces import BackgroundDetector, CameraDetector, track_live
from engine.live.local import Summary, run_camera
from engine.live.loop import Captured, LatestFrame, LiveLoop, Processed, SinkThread
from engine.live.record import Recorder
from engine.media import demo
from engine.provenance import verify
from engine.serve.model_lock import ModelLock
from engine.serve.service import LIVE_OUTPUT, LIVE_TARGET, Rendered, Service
from processors import REGISTRY
from tests.conftest import Clock, audio_seconds

SWAP = {"processors": ["face_swapper"]}


# -- the mailbox and the loop ------------------------------------------------------------------------------------
def test_the_mailbox_keeps_only_the_newest_item_and_counts_the_dropped() -> None:
    box = LatestFrame()
    for n in range(5):
        assert box.put(n)
    assert (box.take(0), box.offered, box.dropped) == (4, 5, 4)
    assert box.take(0.01) is None  # empty again
    box.put(9)
    box.close()
    assert box.take(0) == 9  # put before close: still taken
    assert box.take(0) is None and not box.put(10)


@dataclass
class SteppedRenderer:
    """A renderer whose every render waits for the test to let it go, recording which frame it was given."""

    gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    started: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    given: list[int] = field(default_factory=list)
    job: Any = None
    faces: Any = None  # no face processor in its chain

    def __post_init__(self) -> None:
        self.job = Job.parse({"processors": ["face_swapper"], "target": "camera", "output": "x.mp4"}, REGISTRY)

    def render(self, frame: np.ndarray, index: int, *, track: bool = False) -> Rendered:
        self.given.append(int(frame[0, 0, 0]))
        self.started.release()
        self.gate.acquire()
        return Rendered(frame, frame, (), (), 1.0, 2.0)


def frame_of(n: int) -> np.ndarray:
    return np.full((4, 4, 3), n, np.uint8)


class Emitted(list[Processed]):
    """The loop's results as it emits them (its `emit`); `wait(n)` returns once n have come."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()

    def __call__(self, out: Processed) -> None:
        with self._cond:
            self.append(out)
            self._cond.notify_all()

    def wait(self, n: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self) >= n, timeout=10), f"{len(self)} of {n} frames came"


def test_frames_that_arrive_while_one_renders_are_dropped_and_the_newest_goes_next() -> None:
    renderer = SteppedRenderer()
    out = Emitted()
    loop = LiveLoop(renderer, threading.Lock(), out).start()  # type: ignore[arg-type]
    try:
        loop.submit(Captured(frame_of(0), time.monotonic(), 0))
        assert renderer.started.acquire(timeout=10)  # frame 0 is rendering
        for n in range(1, 6):
            loop.submit(Captured(frame_of(n), time.monotonic(), n))
        renderer.gate.release()
        assert renderer.started.acquire(timeout=10)  # the next render: the newest of 1–5
        renderer.gate.release()
        out.wait(2)
    finally:
        renderer.gate.release()
        loop.stop()
    assert renderer.given == [0, 5]
    assert [o.pts for o in out] == [0, 5] and [o.index for o in out] == [0, 1]
    assert (loop.stats.offered, loop.stats.frames, loop.inbox.dropped) == (6, 2, 4)
    assert loop.state == "stopped"


def test_a_frame_that_waited_over_half_the_cameras_interval_gives_way_to_the_next() -> None:
    """On the loop's own clock, stopped at 100 s, with its mailbox answering what the test says (no real time)."""
    clock = Clock(100.0)
    now = clock.now
    loop = LiveLoop(SteppedRenderer(), threading.Lock(), lambda out: None, clock=clock)  # type: ignore[arg-type]
    for k in range(10):
        loop.stats.offer(now - 0.5 + k * 0.05)  # a camera at 20 fps: a frame every 50 ms
    assert loop.stats.input_rate() == pytest.approx(20)
    waits: list[float | None] = []
    coming: list[Captured | None] = []

    def take(timeout: float | None = None) -> Captured | None:
        waits.append(timeout)
        return coming.pop(0)

    loop.inbox.take = take  # type: ignore[method-assign]
    fresh = Captured(frame_of(1), now - 0.01)
    assert loop._fresher(fresh) is fresh and waits == []  # 10 ms old: rendered as it is, at once
    stale = Captured(frame_of(2), now - 0.04)  # 40 ms old: the next is due in 10 ms
    newer = Captured(frame_of(3), now)
    coming.append(newer)
    assert loop._fresher(stale) is newer  # the next came while it waited: rendered instead
    coming.append(None)
    assert loop._fresher(Captured(frame_of(4), now - 0.04)).frame()[0, 0, 0] == 4  # none came: rendered
    # Each waited for the next frame until a quarter interval past when it was due: 10 + 12.5 ms.
    assert waits == pytest.approx([0.0225, 0.0225])


def test_while_a_job_holds_the_model_the_stream_waits_says_so_and_goes_on_with_the_newest_frame() -> None:
    renderer = SteppedRenderer()
    lock = threading.Lock()
    out = Emitted()
    loop = LiveLoop(renderer, lock, out).start()  # type: ignore[arg-type]
    try:
        with lock:  # a job runs
            for n in range(3):
                loop.submit(Captured(frame_of(n), time.monotonic(), n))
            deadline = time.monotonic() + 10
            while not loop.state.startswith("waiting for the model") and time.monotonic() < deadline:
                time.sleep(0.02)
            assert loop.state.startswith("waiting for the model: a job is using it")
            loop.submit(Captured(frame_of(7), time.monotonic(), 7))
        renderer.gate.release()
        assert renderer.started.acquire(timeout=10)
    finally:
        renderer.gate.release()
        loop.stop()
    # Not the frame it had taken before it waited: the newest one, which came while the job ran.
    assert renderer.given == [7]
    out.wait(1)
    assert out[0].pts == 7 and out[0].waited_ms > 0


class CountingRenderer:
    """Renders in a few milliseconds, counting its renders (the live stream of the fairness test)."""

    def __init__(self) -> None:
        self.job = SteppedRenderer().job
        self.faces = None
        self.renders = 0

    def render(self, frame: np.ndarray, index: int, *, track: bool = False) -> Rendered:
        self.renders += 1
        time.sleep(0.005)
        return Rendered(frame, frame, (), (), 5.0, 0.0)


def test_a_preview_waiting_for_the_model_gets_it_between_two_live_frames() -> None:
    renderer = CountingRenderer()
    lock = ModelLock()
    stop = threading.Event()
    loop = LiveLoop(renderer, lock, lambda out: None).start()  # type: ignore[arg-type]

    def camera() -> None:
        n = 0
        while not stop.is_set():
            loop.submit(Captured(frame_of(n % 250), time.monotonic(), n))
            n += 1
            time.sleep(0.001)

    feeder = threading.Thread(target=camera, daemon=True)
    feeder.start()
    try:
        while renderer.renders < 3:
            time.sleep(0.005)
        waits = []
        for _ in range(20):  # twenty previews, each asking for the lock while the stream renders
            before = renderer.renders
            with lock.brief():
                waits.append(renderer.renders - before)
    finally:
        stop.set()
        feeder.join()
        loop.stop()
    # Each preview got the model after at most the frame being rendered when it asked (brief work goes first).
    assert max(waits) <= 1, waits


def test_a_failing_render_stops_the_stream_and_says_why() -> None:
    class Failing(CountingRenderer):
        def render(self, frame: np.ndarray, index: int, *, track: bool = False) -> Rendered:
            raise InvalidInput("the source face is gone")

    loop = LiveLoop(Failing(), threading.Lock(), lambda out: None).start()  # type: ignore[arg-type]
    loop.submit(Captured(frame_of(1), time.monotonic(), 1))
    loop.join(10)
    assert not loop.running and loop.state == "failed: the source face is gone"


def test_frames_over_max_pixels_stop_the_stream_with_the_limit_named() -> None:
    loop = LiveLoop(CountingRenderer(), threading.Lock(), lambda out: None, max_pixels=10).start()  # type: ignore[arg-type]
    loop.submit(Captured(frame_of(1), time.monotonic(), 1))
    loop.join(10)
    assert loop.state == (
        "failed: the camera sends 4×4 frames, above runtime.max_pixels=10: choose a smaller camera resolution, "
        "or raise runtime.max_pixels"
    )


def test_a_slow_sink_skips_frames_instead_of_holding_the_stream() -> None:
    sending, release = threading.Event(), threading.Event()
    got: list[int] = []

    class Slow:
        def send(self, out: Processed) -> None:
            sending.set()
            assert release.wait(10), "a send to the sink waited for the sink"
            got.append(out.index)

        def close(self) -> None:
            pass

    sink = SinkThread(Slow())
    sink.send(Processed(frame_of(0), 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0))
    assert sending.wait(10)  # the sink is busy with frame 0 …
    for i in range(1, 6):
        sink.send(Processed(frame_of(i), i, i, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0))  # … and each send returns at once
    release.set()
    sink.close()
    assert got == [0, 5] and sink.error is None  # the one it was sending, then the newest
    assert sink.inbox.dropped == 4  # what the session's summary says this sink skipped


def test_the_summary_says_what_each_slower_sink_skipped() -> None:
    summary = Summary(captured=45, processed=36, seconds=3.0, fps=12.0, processing_ms=47.0, latency_ms=53.0,
                      latency_p95_ms=80.0, skipped=(("the frames folder", 1),))  # fmt: skip
    assert summary.line() == (
        "live: 36 of 45 camera frames processed (20% dropped) in 3.0 s: 12.0 fps, processing 47 ms, arrival → out "
        "53 ms median, 80 ms p95; the frames folder skipped 1 of them (slower than the stream)"
    )


# -- live renderers ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def card() -> list[np.ndarray]:
    return testcard.frames(640, 480, 12)


def test_two_live_renderers_never_share_their_tracker(card: list[np.ndarray]) -> None:
    service = Service(REGISTRY)
    a = service.live_renderer(SWAP, [demo.source_photo()])
    b = service.live_renderer(SWAP, [demo.source_photo()])
    assert a is not b and a.faces.stage.tracker is not b.faces.stage.tracker
    for i, frame in enumerate(card[:4]):
        a.render(frame, i, track=True)
    assert a.faces.stage.tracker.stats.frames == 4 and b.faces.stage.tracker.stats.frames == 0


def test_a_live_reference_needs_a_reference_image() -> None:
    raw = {**SWAP, "faces": {"selector": "reference"}}
    with pytest.raises(InvalidInput, match=r"^live: faces.selector=reference needs a reference image"):
        Service(REGISTRY).live_renderer(raw, [demo.source_photo()])


def test_an_option_change_keeps_the_tracker_a_face_setting_change_rebuilds_it(card: list[np.ndarray]) -> None:
    service = Service(REGISTRY)
    renderer = service.live_renderer(SWAP, [demo.source_photo()])
    tracker = renderer.faces.stage.tracker
    same = service.live_update(renderer, {**SWAP, "face_swapper": {"blend": 0}}, [demo.source_photo()])
    assert same is renderer and renderer.faces.stage.tracker is tracker
    # blend 0 puts the camera's face back: the new chain renders from the next frame.
    rendered = renderer.render(card[0], 0, track=True)
    assert len(rendered.chosen) == 1 and np.array_equal(rendered.after, card[0])
    other = service.live_update(renderer, {**SWAP, "faces": {"redetect_every": 3}}, [demo.source_photo()])
    assert other is not renderer and other.job.faces.redetect_every == 3


def test_live_detection_runs_on_a_smaller_frame_and_lands_where_a_full_one_does(card: list[np.ndarray]) -> None:
    analyser = EmbeddedAnalyser("hog")
    seen: list[tuple[int, ...]] = []

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(analyser, name)

        def detect(self, frame: np.ndarray) -> list[Any]:
            seen.append(frame.shape)
            return analyser.detect(frame)

    (face,) = CameraDetector(Spy()).detect(card[3])  # type: ignore[arg-type]
    (full,) = analyser.detect(card[3])
    assert seen == [(240, 320, 3)]
    assert np.abs(face.landmarks68 - full.landmarks68).mean() < 1.5  # px on the 640×480 frame
    assert abs((face.box[2] - face.box[0]) - (full.box[2] - full.box[0])) < 0.1 * (full.box[2] - full.box[0])


def small_face_frames() -> list[np.ndarray]:
    """A 640×480 grey frame, then three with the astronaut shrunk to a face about 25 px wide: below what a camera
    detection finds (an eighth of the width), above faces.min_face=20."""
    small = cv2.resize(demo.photo(), None, fx=0.25, fy=0.25, interpolation=cv2.INTER_AREA)
    frame = np.full((480, 640, 3), 120, np.uint8)
    frame[200 : 200 + small.shape[0], 300 : 300 + small.shape[1]] = small
    return [np.full((480, 640, 3), 120, np.uint8), frame, frame.copy(), frame.copy()]


@pytest.mark.parametrize("min_face", [None, 20.0])
def test_live_detection_honours_faces_min_face_as_a_run_does(min_face: float | None) -> None:
    raw = {**SWAP, "faces": {"min_face": min_face}}
    renderer = Service(REGISTRY).live_renderer(raw, [demo.source_photo()], fps=30.0)
    track_live(renderer, 30.0)
    detector = renderer.faces.stage.tracker.analyser
    frames = small_face_frames()
    # Frame 0 has no face: the detection waited for finds none, so frame 1 starts one in the background; its
    # faces join on frame 2.
    first = [renderer.render(frames[i], i, track=True) for i in (0, 1)]
    detector.wait()
    later = [renderer.render(frames[i], i, track=True) for i in (2, 3)]
    assert [len(r.chosen) for r in first] == [0, 0]
    run = EmbeddedAnalyser("hog", min_face=min_face).detect(frames[2])  # what a run finds on the frame
    assert [len(r.chosen) for r in later] == [len(run)] * 2 == [0 if min_face is None else 1] * 2
    if run:
        assert np.abs(np.subtract(later[0].chosen[0].box, run[0].box)).max() < 3  # px


def test_a_live_renderer_is_retimed_to_the_rate_it_processes_at(card: list[np.ndarray]) -> None:
    renderer = Service(REGISTRY).live_renderer(SWAP, [demo.source_photo()], fps=30.0)
    track_live(renderer, 6.0)
    tracker = renderer.faces.stage.tracker
    detector = tracker.analyser
    # The tracker asks on every frame; the detector runs one every faces.redetect_every frames, off the render.
    assert isinstance(detector, BackgroundDetector) and detector.every == 10 and tracker.redetect_every == 1
    rendered = [renderer.render(frame, i, track=True) for i, frame in enumerate(card)]
    assert all(len(r.chosen) == 1 for r in rendered)
    # Far fewer detections than frames: the first, every 10th, and one where a re-fit lost the face (the card's
    # frames are spread over the clip: its face moves far between two).
    assert detector.runs <= 4 and tracker.stats.frames == len(card)


def face_at(x: float) -> Face:
    """A face whose box starts at `x` (px), 100 px wide."""
    points = np.array([[x + 30, 40], [x + 70, 40], [x + 50, 60], [x + 35, 80], [x + 65, 80]], np.float32)
    return Face(box=(x, 0.0, x + 100, 100.0), landmarks5=points, score=0.9)


def scaled_to(faces: list[Face], frame: np.ndarray) -> list[Face]:
    """`faces` (placed on a 640 px wide frame) as a detection on `frame` finds them."""
    factor = frame.shape[1] / 640
    return [replace(f, box=tuple(v * factor for v in f.box), landmarks5=f.landmarks5 * factor) for f in faces]


class HeldDetector:
    """The background detections' analyser: each detection waits for the test (`release`), then finds `faces`;
    `finished` counts the detections that got past the wait."""

    def __init__(self, faces: list[Face]) -> None:
        self.faces = faces
        self.release = threading.Event()
        self.shapes: list[tuple[int, ...]] = []
        self.fail: Exception | None = None
        self.finished = 0

    def detect(self, frame: np.ndarray) -> list[Face]:
        self.shapes.append(frame.shape)
        assert self.release.wait(10)
        self.finished += 1
        if self.fail is not None:
            raise self.fail
        return scaled_to(self.faces, frame)


class Refits:
    """The render thread's analyser: detections find `faces`; re-fits move a face 1 px right, and faces left of
    `gone` no longer fit."""

    threshold, recogniser = 0.6, "test"

    def __init__(self, faces: list[Face]) -> None:
        self.faces = faces
        self.gone = -1.0
        self.detections = 0

    def detect(self, frame: np.ndarray) -> list[Face]:
        self.detections += 1
        return scaled_to(self.faces, frame)

    def refit(self, frame: np.ndarray, face: Face) -> Face | None:
        return None if face.box[0] < self.gone else replace(face, box=(face.box[0] + 1, *face.box[1:]))

    def embed(self, frame: np.ndarray, faces: Sequence[Face]) -> list[Face]:
        return list(faces)

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return 0.0


def test_no_frame_waits_for_a_live_detection_and_its_faces_join_on_the_next_frame() -> None:
    held, refits = HeldDetector([face_at(100)]), Refits([face_at(100)])
    detector = BackgroundDetector(refits, held, every=3)  # type: ignore[arg-type]
    frame = np.zeros((480, 640, 3), np.uint8)
    # The first detection is waited for (on the render thread): the stream starts with its faces.
    (first,) = detector.detect(frame)
    assert refits.detections == 1 and held.shapes == [] and first.box[0] == pytest.approx(101)  # re-fitted
    # Every `every` frames a detection starts on a thread; meanwhile each frame is answered at once, empty.
    assert [detector.detect(frame) for _ in range(3)] == [[], [], []] and detector.runs == 2
    assert held.shapes == [(240, 320, 3)]  # on the frame scaled for a camera
    held.faces = [face_at(100), face_at(400)]  # a second face came
    assert detector.detect(frame) == [] and held.finished == 0  # answered while the detection is held: not waiting
    held.release.set()
    detector.wait(10)
    # The frame after it finished gets its faces, re-fitted on that frame.
    assert [f.box[0] for f in detector.detect(frame)] == pytest.approx([101, 401])
    assert detector.detect(frame) == []


def test_a_live_detection_runs_again_at_once_after_a_failed_refit_or_none_found_and_drops_faces_gone() -> None:
    held, refits = HeldDetector([]), Refits([])
    held.release.set()
    detector = BackgroundDetector(refits, held, every=100)  # type: ignore[arg-type]
    frame = np.zeros((480, 640, 3), np.uint8)
    assert detector.detect(frame) == []
    assert detector.detect(frame) == [] and detector.runs == 2  # none found: the next frame looks again
    detector.wait(10)
    held.faces = [face_at(100), face_at(400)]
    assert detector.detect(frame) == [] and detector.runs == 3  # that one found none either: again
    detector.wait(10)
    refits.gone = 200  # the face at 100 has gone by the frame its detection is merged on
    assert [f.box[0] for f in detector.detect(frame)] == pytest.approx([401])
    assert detector.detect(frame) == [] and detector.runs == 3  # faces found: back to every 100 frames
    assert detector.refit(frame, face_at(100)) is None  # a tracked face's re-fit fails, none is there …
    assert detector.runs == 4 and refits.detections == 2  # (looked for on that frame, waited for)
    assert detector.detect(frame) == [] and detector.runs == 5  # … and the next frame starts a detection


def test_a_face_whose_refit_fails_is_found_by_a_detection_on_that_frame() -> None:
    refits = Refits([face_at(100), face_at(400)])
    detector = BackgroundDetector(refits, HeldDetector([]), every=100)  # type: ignore[arg-type]
    frame = np.zeros((480, 640, 3), np.uint8)
    detector.detect(frame)
    refits.gone, refits.faces = 500, [face_at(120), face_at(420)]  # both moved 20 px: no re-fit holds
    assert detector.refit(frame, face_at(100)).box[0] == pytest.approx(120)  # type: ignore[union-attr]
    assert detector.refit(frame, face_at(400)).box[0] == pytest.approx(420)  # type: ignore[union-attr]
    assert refits.detections == 2  # the first frame's, and one for this frame's two lost faces
    refits.faces = [face_at(520)]  # moved 120 px (re-fitted: 521), past overlapping where it was, within reach
    assert detector.refit(np.zeros_like(frame), face_at(400)).box[0] == pytest.approx(521)  # type: ignore[union-attr]
    assert detector.refit(np.zeros_like(frame), face_at(300)) is None  # 220 px away: another face, not this one


def test_a_failed_live_detection_is_raised_on_the_render_thread() -> None:
    held = HeldDetector([face_at(100)])
    detector = BackgroundDetector(Refits([face_at(100)]), held, every=1)  # type: ignore[arg-type]
    frame = np.zeros((480, 640, 3), np.uint8)
    detector.detect(frame)
    held.fail = InvalidInput("the detector broke")
    held.release.set()
    detector.detect(frame)
    detector.wait(10)
    with pytest.raises(InvalidInput, match="the detector broke"):
        detector.detect(frame)


# -- recording ---------------------------------------------------------------------------------------------------
COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30)]


def test_a_recording_keeps_the_stream_timing_the_microphone_and_says_it_is_synthetic(tmp_path: Path) -> None:
    job = Job.parse({**SWAP, "target": str(LIVE_TARGET), "output": str(LIVE_OUTPUT),
                     "sources": [str(demo.source_photo())]}, REGISTRY)  # fmt: skip
    clock = Clock()
    recorder = Recorder(
        tmp_path / "take.mp4", 10.0, job, "camera 0", {"face_swapper": {"model": "landmark_warp"}}, clock=clock
    )
    start = recorder.start
    # Four processed frames whose inputs arrived at 0.0, 0.3, 0.5 and 0.9 s: at 10 fps, slots 0–2 show the
    # first, 3–4 the second, 5–8 the third, then the fourth to the end.
    for i, (colour, at) in enumerate(zip(COLOURS, (0.0, 0.3, 0.5, 0.9), strict=True)):
        frame = np.full((120, 160, 3), colour, np.uint8)
        recorder.send(Processed(frame, i, i, start + at, 0.0, 0.0, 0.0, 5.0, 5.0, 1))
    tone = (0.3 * 32767 * np.sin(np.arange(4800) / 48000 * 2 * np.pi * 440)).astype(np.int16)
    for k in range(10):  # a second of microphone, 0.1 s a time, arriving in real time
        recorder.add_audio(tone, start + 0.1 * (k + 1))
    clock.now = start + 1.0  # it stops one second after it started
    recording = recorder.finish()
    assert recording.output == tmp_path / "take.mp4" and recording.audio and recording.size == (160, 120)
    with video.FrameReader(recording.output) as reader:
        colours = [tuple(int(v) for v in f[60, 80]) for f in reader]
    assert len(colours) == recording.frames >= 10

    def nearest(c: tuple[int, ...]) -> int:
        return int(np.argmin([sum(abs(a - b) for a, b in zip(c, k, strict=True)) for k in COLOURS]))

    assert [nearest(c) for c in colours[:10]] == [0, 0, 0, 1, 1, 2, 2, 2, 2, 3]
    assert set(map(nearest, colours[10:])) <= {3}
    tags = video.read_video_metadata(recording.output)
    assert tags["synthetic"] == "true" and "face_swapper" in tags["comment"]
    assert abs(audio_seconds(recording.output) - 1.0) < 0.15
    sidecar = json.loads(recording.sidecar.read_text())
    assert sidecar["synthetic"] is True and sidecar["job"]["processors"] == ["face_swapper"]
    assert sidecar["live"]["camera"] == "camera 0" and sidecar["live"]["frames_processed"] == 4
    assert sidecar["output"]["frames"] == recording.frames and sidecar["output"]["audio"] is True
    assert sidecar["processors"] == {"face_swapper": {"model": "landmark_warp"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["take.mp4", "take.mp4.job.json"]
    # Signed Content Credentials, as every output has: made by facestudio from the source, AI-generated.
    checked = verify.inspect(recording.output)
    assert checked.credentials == "valid" and checked.mine and checked.source_type == "AI-generated"
    assert checked.actions == ("c2pa.created",) and checked.processors == ("face_swapper",)
    assert [i["title"] for i in checked.ingredients] == ["source 1"]
    assert checked.facestudio is not None and checked.facestudio["live"] == {"camera": "camera 0"}
    assert sidecar["provenance"]["credentials"]["signed"] is True
    assert sidecar["provenance"]["ingredients"][0]["sha256"] == checked.ingredients[0]["sha256"]


def test_a_recording_with_the_watermark_on_carries_it(tmp_path: Path) -> None:
    job = Job.parse({**SWAP, "target": "camera", "output": "live.mp4", "sources": [str(demo.source_photo())],
                     "video": {"watermark": True}}, REGISTRY)  # fmt: skip
    clock = Clock()
    recorder = Recorder(tmp_path / "take.mp4", 10.0, job, "camera 0", {}, clock=clock)
    for i, frame in enumerate(testcard.frames(640, 480, 10)):
        recorder.send(Processed(frame, i, i, recorder.start + 0.1 * i, 0, 0, 0, 5, 5, 1))
    clock.now = recorder.start + 1.0
    checked = verify.inspect(recorder.finish().output)
    assert checked.credentials == "valid" and checked.watermark is not None and checked.watermark["found"]
    assert checked.facestudio is not None and checked.facestudio["watermark"] is True


def test_a_recording_with_nothing_processed_or_aborted_leaves_nothing(tmp_path: Path) -> None:
    job = Job.parse({**SWAP, "target": "camera", "output": "live.mp4"}, REGISTRY)
    empty = Recorder(tmp_path / "a.mp4", 30.0, job, "camera 0", {})
    with pytest.raises(InvalidInput, match="^nothing was recorded: no frame was processed while recording$"):
        empty.finish()
    aborted = Recorder(tmp_path / "b.mp4", 30.0, job, "camera 0", {})
    aborted.send(Processed(np.zeros((8, 8, 3), np.uint8), 0, 0, aborted.start, 0, 0, 0, 1, 1, 0))
    aborted.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidInput, match=r"cannot write video to .*c\.gif: the extension must be one of"):
        Recorder(tmp_path / "c.gif", 30.0, job, "camera 0", {})


# -- local cameras, sinks and launch.py live --------------------------------------------------------------------
@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return testcard.write(tmp_path_factory.mktemp("live") / "camera.mp4", 320, 240, 12, count=36)


def test_a_video_file_plays_as_a_camera_in_real_time(clip: Path) -> None:
    camera = FileCamera(clip)
    assert (camera.width, camera.height, camera.fps) == (320, 240, 12.0)
    started = time.monotonic()
    got = [(pts, testcard.read_counter(frame)) for frame, pts in camera.frames()]
    elapsed = time.monotonic() - started
    assert got == [(i, i) for i in range(36)]
    assert elapsed >= 35 / 12  # delivered at the file's rate, not as fast as it decodes


def test_a_camera_that_is_not_there_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"^camera 9 cannot be opened: no such camera, or another program"):
        open_camera("9")
    with pytest.raises(InvalidInput, match=r"^--camera nothing\.mp4: not a camera number, and no such video file$"):
        open_camera("nothing.mp4")
    photo = tmp_path / "photo.png"
    video.write_image(photo, demo.photo())
    with pytest.raises(InvalidInput, match="is an image; --camera takes a camera number or a video file"):
        open_camera(str(photo))


def test_a_missing_virtual_camera_driver_is_said_in_one_line() -> None:
    pytest.importorskip("pyvirtualcam")
    if Path("/dev/video0").exists():
        pytest.skip("this machine has a video device")
    with pytest.raises(InvalidInput, match=r"^no virtual camera: .*; load the v4l2loopback kernel module"):
        VirtualCameraSink(30.0).open(320, 240)


def test_run_camera_streams_a_file_into_the_test_sink_and_a_recording(clip: Path, tmp_path: Path) -> None:
    service = Service(REGISTRY)
    with service.model_lock:
        renderer = service.live_renderer(SWAP, [demo.source_photo()], fps=12.0)
    job = renderer.job
    recorder = Recorder(tmp_path / "rec.mp4", 12.0, job, clip.name, {p.id: p.describe() for p in renderer.chain})
    summary = run_camera(FileCamera(clip), renderer, service.model_lock, [FolderSink(tmp_path / "frames")],
                         recorder=recorder)  # fmt: skip
    lines = [json.loads(line) for line in (tmp_path / "frames" / "frames.jsonl").read_text().splitlines()]
    # A sink behind the loop skips frames rather than queue them (newest wins), as a loaded machine's disk makes
    # this one do now and then: it writes at most what was processed, and the last of it.
    assert summary.captured == 36 and 3 <= len(lines) <= summary.processed
    assert [line["index"] for line in lines] == list(range(len(lines)))
    assert all(line["faces"] == 1 for line in lines)
    # The frames written are the camera's own, in order (counters increasing), each one swapped.
    counters = [line["pts"] for line in lines]
    assert counters == sorted(counters) and counters[-1] == 35  # the last frame given is rendered
    assert summary.recording is not None and summary.recording.frames >= 30


def swapped_towards_source(frame: np.ndarray, camera_frame: np.ndarray, analyser: EmbeddedAnalyser) -> bool:
    """The face on `frame` is closer to the source (Grace Hopper) than to the camera's face (the astronaut)."""
    source_image = video.read_image(demo.source_photo())[0]
    (source,) = analyser.embed(source_image, analyser.detect(source_image)[:1])
    (original,) = analyser.embed(camera_frame, analyser.detect(camera_frame)[:1])
    (result,) = analyser.embed(frame, analyser.detect(frame)[:1])
    return analyser.distance(result.embedding, source.embedding) < analyser.distance(
        result.embedding, original.embedding
    )


def run_cli(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(
        [sys.executable, str(root / "launch.py"), *args],
        capture_output=True, text=True, timeout=600, cwd=cwd,
    )  # fmt: skip


def test_launch_live_with_a_video_file_as_the_camera_writes_swapped_frames_to_the_sink(tmp_path: Path) -> None:
    clip = testcard.write(tmp_path / "camera.mp4", 640, 480, 15, count=45)
    sink = tmp_path / "frames"
    args = ["--camera", str(clip), "--source", str(demo.source_photo()), "--no-window", "--sink", f"frames:{sink}",
            "--record", str(tmp_path / "take.mp4"), "--yes"]  # fmt: skip
    result = run_cli(["live", *args], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in (sink / "frames.jsonl").read_text().splitlines()]
    assert lines and all(line["faces"] == 1 for line in lines)
    # Every processed frame reached the folder, or the summary says how many it skipped (a sink shows the newest).
    said = re.match(r"live: (\d+) of 45 camera frames processed \(", result.stdout)
    skipped = re.search(r"; the frames folder skipped (\d+) of them \(slower than the stream\)", result.stdout)
    assert said, result.stdout
    assert int(said[1]) - (int(skipped[1]) if skipped else 0) == len(lines), result.stdout
    assert "recorded:" in result.stdout and (tmp_path / "take.mp4.job.json").is_file()
    analyser = EmbeddedAnalyser("hog")
    card = testcard.frames(640, 480, 45)
    last = lines[-1]
    frame = video.read_image(sink / f"frame-{last['index']:06d}.png")[0]
    assert testcard.read_counter(frame) == last["pts"] == 44
    assert swapped_towards_source(frame, card[last["pts"]], analyser)


def test_launch_live_stops_after_the_frames_asked_for_and_refuses_what_it_cannot_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process (cli.main is what launch.py calls; the test above runs launch.py itself).
    clip = testcard.write(tmp_path / "camera.mp4", 320, 240, 24, count=240)
    source = str(demo.source_photo())
    sink = tmp_path / "frames"
    done = cli.main(["live", "--camera", str(clip), "--source", source, "--no-window", "--sink", f"frames:{sink}",
                     "--frames", "3", "--yes"])  # fmt: skip
    assert done == 0, capsys.readouterr().err
    assert sorted(p.name for p in sink.iterdir()) == ["frame-000000.png", "frame-000001.png", "frame-000002.png",
                                                      "frames.jsonl"]  # fmt: skip
    assert capsys.readouterr().out.startswith("live: 3 of ")
    refused = {
        "no source": (["--camera", str(clip), "--no-window", "--yes"], "face_swapper needs a source face"),
        "no camera": (["--camera", "7", "--source", source, "--yes"], "camera 7 cannot be opened"),
        "bad sink": (["--camera", str(clip), "--sink", "png:x", "--yes"], "--sink takes frames:FOLDER"),
        "no consent": (["--camera", str(clip), "--source", source], "acknowledge the responsible-use notice"),
    }
    for name, (args, message) in refused.items():
        code = cli.main(["live", *args])
        err = capsys.readouterr().err
        assert code == 2, (name, err)
        assert err.startswith("error: ") and message in err, (name, err)
        assert err.count("\n") == 1, (name, err)
