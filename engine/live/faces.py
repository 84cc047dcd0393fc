"""Face tracking for a live stream: the tracker re-made for the rate frames are processed at, detection sized for
a camera, and detections off the render thread.

A full detection costs several frames' worth of re-fits (dlib HOG finds 40 px faces by doubling the frame first:
≈ 180 ms at 640×480 against ≈ 55 ms on the frame halved, measured on 2 loaded CPU cores), and in a live stream
that frame's result comes out that much later: the spikes set the latency's 95th percentile. In front of a
webcam faces are large, so a live tracker's detections run on the frame scaled to `DETECT_SIDE` px on its long
side — finding faces at least 80 px wide in a 640×480 frame (an eighth of its width) — and each face found is
re-fitted on the full frame (≈ 15 ms), which puts its landmarks where a full-size detection would (0.5 px apart
on the demo clip, against 0.8 px for the halved detection alone). Where the job sets `faces.min_face` (the
smallest face to find, frame pixels), live detection honours it as a run does: on the full frame, with analysers
of that smallest face, at a run's cost.

With the embedded (dlib) analyser no frame waits for a detection at all (`BackgroundDetector`): the render thread
re-fits the tracked faces on every frame while a detection runs on a thread of its own on a recent frame (dlib
releases the GIL while it scans), and its faces, re-fitted on the frame being rendered, join the tracker on the
first frame after it finishes. buffalo_l's detector runs at a fixed input size (scaling saves it nothing) and
shares its analyser's lock and device with the re-fits: it is left as it is.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser
from engine.faces.boxes import iou
from engine.faces.serial import SerialAnalyser
from engine.faces.tracking import CROWD_IOU, FaceTracker, scaled_face
from engine.serve.service import FrameRenderer

# Long side (px) of the frame a live detection runs on.
DETECT_SIDE = 320
# The niceness of a live detection's thread (Linux): below the render thread's and the transport's priority.
DETECT_NICE = 10
# A detection is the face a failed re-fit lost when their boxes overlap by this much (the tracker's own link IoU).
LOST_IOU = 0.3
# … or when its centre lies within this many of the lost face's box sides (the tracker's reach for a lost track).
LOST_REACH = 1.5


class CameraDetector:
    """`analyser` with `detect` on the frame scaled to `side` px on its long side (frames no larger, or every frame
    with `side` None, are detected as they are), each face found re-fitted on the full frame; every other call is
    the analyser's own."""

    def __init__(self, analyser: FaceAnalyser, side: int | None = DETECT_SIDE) -> None:
        self._inner = analyser
        self.side = side

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def detect(self, frame: Frame) -> list[Face]:
        small, scale = _camera_sized(frame, self.side)
        faces = []
        for face in self._inner.detect(small):
            full = scaled_face(face, 1 / scale)
            faces.append(self._inner.refit(frame, full) or full)
        return faces

    def refit(self, frame: Frame, face: Face) -> Face | None:
        return self._inner.refit(frame, face)

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        return self._inner.embed(frame, faces)

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return self._inner.distance(a, b)


class BackgroundDetector:
    """A live tracker's analyser whose `detect` never makes the frame wait for a detection (only a face that its
    re-fit lost is looked for on its own frame: `refit`).

    The tracker calls `detect` on every frame (made with `redetect_every=1`); this decides when a detection runs:
    on a thread of its own, with `detector` (an analyser of its own: the tracker's re-fits on the render thread
    go on meanwhile through `analyser`, whose lock the detection does not hold), on the frame scaled to `side` px
    on its long side (None: the frame as it is), every `every` frames — and on the next frame whenever the last
    one found no face, found faces crowding each other (the tracker re-fits no crowded face: only detections follow
    them), or a re-fit failed since (a face may be leaving). `detect` returns the faces of a detection that finished
    since the last call, each re-fitted on this frame (one that no longer fits is left out: it moved away or left),
    or none; the very first call detects on its frame and waits, so a stream starts with its faces. A detection's
    error is raised by the next `detect`. Every other call is `analyser`'s own. One detection at most is in flight."""

    def __init__(
        self,
        analyser: FaceAnalyser,
        detector: FaceAnalyser,
        *,
        every: int,
        side: int | None = DETECT_SIDE,
        nice: int = 0,
    ) -> None:
        self._inner = analyser
        self.nice = nice
        self._detector = detector
        self.every = every
        self.side = side
        self._lock = threading.Lock()
        self._running: threading.Thread | None = None
        self._done: list[Face] | BaseException | None = None
        self._since = 0  # frames since the last detection started
        self._again = True  # the next frame should start a detection
        self._first = True
        self._now: tuple[Frame, list[Face]] | None = None  # the frame detected on the render thread, its faces
        self.runs = 0  # detections run (the first, waited for, included)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def detect(self, frame: Frame) -> list[Face]:
        """Faces of a detection finished since the last call, re-fitted on `frame` (H×W×3 uint8 RGB), or []."""
        if self._first:
            self._first = False
            faces = self._detect_now(frame)
            self._settle(faces)
            return faces
        with self._lock:
            done, self._done = self._done, None
            idle = self._running is None or not self._running.is_alive()
        if isinstance(done, BaseException):
            raise done
        if done is not None:
            self._settle(done)
        self._since += 1
        if idle and (self._again or self._since >= self.every):
            self._start(frame)
        return [] if done is None else [f for f in (self._inner.refit(frame, face) for face in done) if f is not None]

    def refit(self, frame: Frame, face: Face) -> Face | None:
        """The tracked `face` re-fitted on `frame`; where that fails (a fast move, the face turning), the face a
        detection on this frame finds nearest to where it was — overlapping it (IoU ≥ `LOST_IOU`), else with its
        centre within `LOST_REACH` of the face's box sides — waited for: the face stays swapped rather than
        vanishing until a background detection finds it again (frames come several camera frames apart: a face
        can move farther between two than its re-fit follows). None when no face is there."""
        refitted = self._inner.refit(frame, face)
        if refitted is not None:
            return refitted
        self._again = True
        if self._now is None or self._now[0] is not frame:
            self._now = (frame, self._detect_now(frame))
        side = max(face.box[2] - face.box[0], face.box[3] - face.box[1], 1.0)
        near = [f for f in self._now[1] if iou(f.box, face.box) >= LOST_IOU or _apart(f, face) <= LOST_REACH * side]
        return min(near, key=lambda f: (-iou(f.box, face.box), _apart(f, face))) if near else None

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        return self._inner.embed(frame, faces)

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return self._inner.distance(a, b)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the detection in flight, if any (its result is still merged by the next `detect`)."""
        running = self._running
        if running is not None:
            running.join(timeout)

    def _detect_now(self, frame: Frame) -> list[Face]:
        """A detection on the render thread, with its analyser (free there: the thread's may be busy)."""
        self.runs += 1
        return CameraDetector(self._inner, self.side).detect(frame)

    def _settle(self, faces: Sequence[Face]) -> None:
        """What the next detection waits for, after one that found `faces`."""
        crowded = any(iou(a.box, b.box) > CROWD_IOU for i, a in enumerate(faces) for b in faces[i + 1 :])
        self._again = not faces or crowded

    def _start(self, frame: Frame) -> None:
        # The thread gets its own scaled copy: the frame is the render's, and may be reused once it is done.
        small, scale = _camera_sized(frame, self.side)
        if small is frame:
            small = frame.copy()
        self._since, self._again = 0, False
        self.runs += 1
        self._running = threading.Thread(target=self._work, args=(small, scale), name="facestudio-live-detect")
        self._running.daemon = True
        self._running.start()

    def _work(self, small: Frame, scale: float) -> None:
        if self.nice and sys.platform == "linux":
            # Linux gives each thread its own niceness (this one only): the render thread and the transport get the
            # CPU first, and the detection the time they leave.
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        try:
            result: list[Face] | BaseException = [scaled_face(f, 1 / scale) for f in self._detector.detect(small)]
        except BaseException as exc:  # handed to the render thread, whose loop reports it
            result = exc
        with self._lock:
            self._done = result


def _apart(a: Face, b: Face) -> float:
    """The distance between the centres of two faces' boxes (px)."""
    return math.dist(
        ((a.box[0] + a.box[2]) / 2, (a.box[1] + a.box[3]) / 2), ((b.box[0] + b.box[2]) / 2, (b.box[1] + b.box[3]) / 2)
    )


def _camera_sized(frame: Frame, side: int | None) -> tuple[Frame, float]:
    """`frame` scaled to `side` px on its long side (a frame no larger, or any with `side` None, as it is), and the
    factor it was scaled by."""
    if side is None:
        return frame, 1.0
    scale = side / max(frame.shape[:2])
    if scale >= 1:
        return frame, 1.0
    return cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA), scale


def track_live(renderer: FrameRenderer, fps: float) -> None:
    """Give a live renderer a new tracker for `fps` processed frames per second (smoothing and gaps are in
    seconds), detecting as a camera needs: for the embedded analyser a `BackgroundDetector` (with a detection
    analyser of its own, loaded once per runtime; on frames scaled to `DETECT_SIDE`, or with `faces.min_face` set,
    on the full frame for faces of that size), else the analyser itself every `faces.redetect_every` frames.
    The tracker follows identities as the job's would (appearance, embedding new faces). Faces are detected
    afresh on the next frame. Call it between renders, from the thread that renders, holding the model lock
    (it may load models)."""
    if renderer.faces is None:
        return
    stage = renderer.faces.stage
    old, settings = stage.tracker, stage.settings
    if isinstance(old.analyser, BackgroundDetector):
        old.analyser.wait()  # its last detection is not left running beside the new tracker's
    identity = {"appearance": old.appearance, "embed_new": old.embed_new}
    if settings.analyser != "embedded":
        stage.tracker = FaceTracker(stage.analyser, redetect_every=settings.redetect_every, fps=fps, **identity)
        return
    from engine.faces.embedded import EmbeddedAnalyser

    # The detections' own analyser (its own dlib objects: they are not documented as safe for concurrent calls),
    # shared by the live streams of this runtime one detection at a time.
    own = renderer.runtime.warm(
        ("live_face_detector", settings.detector, settings.min_face),
        lambda: SerialAnalyser(EmbeddedAnalyser(settings.detector, min_face=settings.min_face)),
    )
    # The stage's analyser finds faces of faces.min_face px when it is set: on the frame as it is, as a run does.
    side = DETECT_SIDE if settings.min_face is None else None
    detector = BackgroundDetector(stage.analyser, own, every=settings.redetect_every, side=side, nice=DETECT_NICE)
    stage.tracker = FaceTracker(detector, redetect_every=1, fps=fps, **identity)


def stop_live(renderer: FrameRenderer) -> None:
    """Wait for a live tracker's background detection in flight, if any (a stream ending leaves no thread)."""
    tracker = renderer.faces.stage.tracker if renderer.faces is not None else None
    if tracker is not None and isinstance(tracker.analyser, BackgroundDetector):
        tracker.analyser.wait(10)
