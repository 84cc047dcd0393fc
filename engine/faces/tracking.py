"""Tracking faces across video frames: link by IoU, smooth landmarks over time, fill short gaps.

Running the detector on every frame is expensive (dlib HOG on a 720p frame: ≈ 110 ms at its native scale,
≈ 470 ms with the one upsampling that finds 40 px faces; measured on 2 CPU cores) and its landmarks jitter from
frame to frame, which makes a swapped face shimmer. `FaceTracker` detects every `redetect_every` frames,
re-fits each tracked face's landmarks in between (≈ 15 ms a face: two landmark fits and a HOG check on a small
crop), keeps a face alive through a few frames where nothing finds it, and smooths every track: landmarks in the
face's own frame (`ShapeSmoother`), the box with a one-euro filter.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from engine.faces import FaceAnalyser
from engine.faces.boxes import iou
from engine.types import Face, Frame, check_frame

logger = logging.getLogger(__name__)


class OneEuroFilter:
    """The one-euro filter of Casiez, Roussel and Vogel, "1 € Filter: A Simple Speed-based Low-pass Filter for
    Noisy Input in Interactive Systems" (CHI 2012), applied element-wise to an array of coordinates.

    A first-order low-pass filter whose cutoff rises with the signal's speed: cutoff = min_cutoff + beta·|speed|.
    Slow motion, where jitter is what the eye sees, is smoothed hard; fast motion, where lag would show, lightly.

    Units: time is whatever unit the `dt` passed to each call is in (FaceTracker uses seconds). `min_cutoff` and
    `d_cutoff` are frequencies in cycles per that time unit (Hz for seconds); `beta` is in cycles per time unit per
    (coordinate unit per time unit), e.g. Hz per px/s. Every element has its own speed and cutoff.
    """

    def __init__(self, min_cutoff: float, beta: float, d_cutoff: float = 1.0) -> None:
        if min_cutoff <= 0 or d_cutoff <= 0 or beta < 0:
            raise ValueError(
                f"one-euro filter needs min_cutoff > 0, d_cutoff > 0 and beta ≥ 0, "
                f"got min_cutoff={min_cutoff}, d_cutoff={d_cutoff}, beta={beta}"
            )
        self.min_cutoff = min_cutoff
        self.beta = beta
        self.d_cutoff = d_cutoff
        self._value: npt.NDArray[np.float64] | None = None
        self._speed: npt.NDArray[np.float64] | None = None
        self._last_input: npt.NDArray[np.float64] | None = None

    def reset(self) -> None:
        """Forget the past: the next call returns its input unchanged."""
        self._value = self._speed = self._last_input = None

    def __call__(self, x: npt.ArrayLike, dt: float) -> npt.NDArray[np.float64]:
        """Filter one sample `x` (any shape, the same on every call) taken `dt` time units after the previous one.

        Returns the filtered sample, float64, same shape as `x`. A gap of several frames is one call with a larger
        `dt`: the filter then follows the new sample more closely, as it should after time without data.
        """
        sample = np.array(x, dtype=np.float64)
        if self._value is None or self._speed is None or self._last_input is None:
            self._value, self._speed, self._last_input = sample.copy(), np.zeros_like(sample), sample.copy()
            return sample
        if sample.shape != self._value.shape:
            raise ValueError(f"one-euro filter was fed shape {self._value.shape}, now {sample.shape}")
        if dt <= 0:
            raise ValueError(f"one-euro filter needs a positive time step, got dt={dt}")
        # The speed is taken from consecutive raw samples, as in the authors' reference code (the paper's
        # pseudo-code uses the previous filtered value, which overstates the speed while the filter lags).
        raw_speed = (sample - self._last_input) / dt
        self._speed = self._speed + _alpha(self.d_cutoff, dt) * (raw_speed - self._speed)
        cutoff = self.min_cutoff + self.beta * np.abs(self._speed)
        self._value = self._value + _alpha(cutoff, dt) * (sample - self._value)
        self._last_input = sample
        return self._value.copy()


def _alpha(cutoff: float | npt.NDArray[np.float64], dt: float) -> npt.NDArray[np.float64]:
    """Smoothing factor of an exponential filter with `cutoff` (cycles per time unit) sampled every `dt`."""
    tau = 1.0 / (2.0 * math.pi * np.asarray(cutoff, dtype=np.float64))
    return 1.0 / (1.0 + tau / dt)


@dataclass(frozen=True)
class Track:
    """One tracked face on one frame.

    track_id: stable across frames for as long as the tracker follows the face; never reused.
    face: the face with the track's smoothed box and landmarks (frame pixels).
    filled: True when nothing found the face on this frame and `face` is extrapolated from the track's motion.
    """

    track_id: int
    face: Face
    filled: bool


@dataclass(frozen=True)
class TrackerStats:
    """Work a FaceTracker has done since it was made.

    frames: frames passed to `update`. detections: `analyser.detect` calls. refits: `analyser.refit` calls.
    filled: Track outputs with `filled=True`, counted per face and frame.
    """

    frames: int
    detections: int
    refits: int
    filled: int


class ShapeSmoother:
    """Smooths a face's landmarks in the face's own frame, so the face's motion is not smoothed (no lag).

    Each observation is split into a pose (centroid, RMS size, rotation against the track's first shape, fitted
    over all points, so its noise is about 1/√N of one point's) and a normalised shape. Only the shape is
    low-passed (one-euro filter, in normalised units: min_cutoff in Hz, beta in Hz per unit/s): it holds the
    per-point detector noise and changes only with expression; the pose is used as measured, so a moving or
    scaling face is followed without delay.
    """

    # beta 3: a lip moving 6 px at 4 Hz keeps ~80 % of its swing (beta 1: ~50 %), while still-face jitter stays
    # under half the detector's (measured on the demo clip and a synthetic mouth, 24 fps).
    def __init__(self, min_cutoff: float = 1.0, beta: float = 3.0) -> None:
        self.filter = OneEuroFilter(min_cutoff, beta)
        self.reference: npt.NDArray[np.float64] | None = None

    def reset(self) -> None:
        self.filter.reset()
        self.reference = None

    def __call__(
        self, points: npt.ArrayLike, dt: float, pose_points: npt.ArrayLike | None = None
    ) -> npt.NDArray[np.float32]:
        """Smoothed N×2 points (pixels) for this observation, `dt` seconds after the previous one.

        pose_points: more points of the same face (the 68 landmarks, for the 5) to measure the pose on: a pose
        fitted on 5 noisy points would carry their noise into every point.
        """
        pts = np.asarray(points, dtype=np.float64)
        basis = pts if pose_points is None else np.asarray(pose_points, dtype=np.float64)
        centre = basis.mean(axis=0)
        size = float(np.sqrt(((basis - centre) ** 2).sum(axis=1).mean())) or 1.0
        normalised = (basis - centre) / size
        if self.reference is None or self.reference.shape != normalised.shape:
            self.reference = normalised
            self.filter.reset()
        # Procrustes: the rotation that best maps the reference shape onto this one.
        u, _, vt = np.linalg.svd(self.reference.T @ normalised)
        if np.linalg.det(u @ vt) < 0:
            u[:, -1] *= -1
        rotation = u @ vt
        shape = ((pts - centre) / size) @ rotation.T
        smoothed = self.filter(shape, dt)
        return (smoothed @ rotation * size + centre).astype(np.float32)


class _TrackState:
    """The tracker's memory of one face: its smoothing filters, recent motion, and the frame it was last seen on."""

    def __init__(
        self, track_id: int, face: Face, frame_index: int, filters: tuple[float, float, float], history: int
    ) -> None:
        self.track_id = track_id
        self.box_filter = OneEuroFilter(*filters)
        # 5 points alone carry too little to measure a pose on: without 68 landmarks (buffalo_l) they are
        # filtered in pixels instead, which lags a little behind fast motion.
        self.landmarks5_filter = ShapeSmoother()
        self.landmarks5_pixels = OneEuroFilter(*filters)
        self.landmarks68_filter = ShapeSmoother()
        # (frame index, centre x, centre y, size) of the raw 5-point landmarks of the last few observations.
        self.motion: deque[tuple[int, float, float, float]] = deque(maxlen=history)
        self.last_seen = frame_index
        self.face = face  # the last smoothed output of a frame where the face was found

    def observe(self, face: Face, frame_index: int, frame_seconds: float) -> Face:
        """Feed the face found on `frame_index` through the filters; return it with smoothed box and landmarks."""
        dt = (frame_index - self.last_seen) * frame_seconds
        box = self.box_filter(face.box, dt)
        if face.landmarks68 is not None:
            landmarks5 = self.landmarks5_filter(face.landmarks5, dt, pose_points=face.landmarks68)
            self.landmarks5_pixels.reset()
        else:
            landmarks5 = self.landmarks5_pixels(face.landmarks5, dt)
            self.landmarks5_filter.reset()
        landmarks68 = None
        if face.landmarks68 is None:
            # The 68-point history no longer describes the face once a frame lacks it; restart from the next fit.
            self.landmarks68_filter.reset()
        else:
            landmarks68 = self.landmarks68_filter(face.landmarks68, dt)
        centre, size = _centre_and_size(face.landmarks5)
        self.motion.append((frame_index, float(centre[0]), float(centre[1]), size))
        self.last_seen = frame_index
        self.face = replace(
            face,
            box=(float(box[0]), float(box[1]), float(box[2]), float(box[3])),
            landmarks5=landmarks5.astype(np.float32),
            landmarks68=landmarks68,
        )
        return self.face

    def predict(self, frame_index: int) -> Face:
        """The last smoothed face moved and scaled to where the face's recent motion puts it on `frame_index`.

        The motion is a straight-line fit, over the last few observations, of the 5-point landmarks' centre and
        size against the frame index: a least-squares line averages the detector's noise out of the velocity
        without the delay of a low-pass filter, and placing the face on the line (not on the smoothed face, which
        trails a moving face) keeps a filled face on the true one. With one observation the face stays put.
        """
        frames, cx, cy, size = (np.array(column, dtype=np.float64) for column in zip(*self.motion, strict=True))
        target = np.array([cx[-1], cy[-1], size[-1]])
        if len(frames) > 1:
            slope, intercept = np.polyfit(frames, np.stack([cx, cy, size], axis=1), 1)
            target = intercept + slope * frame_index
        centre, current_size = _centre_and_size(self.face.landmarks5)
        # A shrinking face extrapolated through a gap must not collapse to an empty or inverted face.
        scale = max(float(target[2]), current_size / 2) / current_size

        def move(points: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
            return (target[:2] + (points - centre) * scale).astype(np.float32)

        corners = move(np.reshape(np.array(self.face.box, dtype=np.float32), (2, 2)))
        return replace(
            self.face,
            box=(float(corners[0, 0]), float(corners[0, 1]), float(corners[1, 0]), float(corners[1, 1])),
            landmarks5=move(self.face.landmarks5),
            landmarks68=None if self.face.landmarks68 is None else move(self.face.landmarks68),
        )


def _centre_and_size(points: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float64], float]:
    """Centroid (x, y) and RMS distance from it of N×2 points, in pixels."""
    centre = points.astype(np.float64).mean(axis=0)
    return centre, float(np.sqrt(np.mean(np.sum((points - centre) ** 2, axis=1))))


def _link(
    anchors: Mapping[int, Face], detections: Sequence[Face], threshold: float
) -> tuple[dict[int, Face], list[Face]]:
    """Pair tracks (by their anchor face) with detections greedily, highest IoU first, each pair ≥ `threshold`.

    Returns the detection linked to each track that got one, and the detections left over.
    """
    pairs = sorted(
        (
            (overlap, track_id, index)
            for track_id, anchor in anchors.items()
            for index, detection in enumerate(detections)
            if (overlap := iou(anchor.box, detection.box)) >= threshold
        ),
        key=lambda pair: -pair[0],
    )
    linked: dict[int, Face] = {}
    used: set[int] = set()
    for _, track_id, index in pairs:
        if track_id not in linked and index not in used:
            linked[track_id] = detections[index]
            used.add(index)
    return linked, [detection for index, detection in enumerate(detections) if index not in used]


class FaceTracker:
    """Follows faces through a video: one `update(frame)` per frame, in order.

    Detection (`analyser.detect`) runs on the first frame, every `redetect_every` frames, whenever there is no
    live track, and on any frame where a track's re-fit fails. In between (and for a track the detector missed),
    each track's landmarks are re-fitted (`analyser.refit`) around its predicted position: the last face moved
    along a straight-line fit of its centre and size over its last `motion_history` observations. Detections
    are linked to tracks by box IoU ≥ `iou_threshold` (greedily, best overlap first, against each track's
    prediction); detections linked to no track start new ones. A track that
    neither detection nor re-fit finds is kept for up to `max_gap` frames, reported with its extrapolated face and
    `filled=True`, and dropped after.

    Each track's landmarks are smoothed in the face's own frame (`ShapeSmoother`: the pose as measured, the shape
    low-passed, so motion is not delayed); its box — and its 5 landmarks when there are no 68 to measure a pose
    on — with a one-euro filter whose `min_cutoff` and `d_cutoff` are in Hz and `beta` in Hz per (px/s). Filters
    restart with every new track. Time is in seconds: `fps` is the video's frame rate.
    """

    def __init__(
        self,
        analyser: FaceAnalyser,
        *,
        redetect_every: int = 10,
        max_gap: int = 5,
        iou_threshold: float = 0.3,
        motion_history: int = 5,
        fps: float = 30.0,
        min_cutoff: float = 1.0,
        beta: float = 0.07,
        d_cutoff: float = 1.0,
    ) -> None:
        if redetect_every < 1:
            raise ValueError(f"redetect_every must be ≥ 1, got {redetect_every}")
        if max_gap < 0:
            raise ValueError(f"max_gap must be ≥ 0, got {max_gap}")
        if not 0 < iou_threshold <= 1:
            raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold}")
        if motion_history < 1:
            raise ValueError(f"motion_history must be ≥ 1, got {motion_history}")
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        OneEuroFilter(min_cutoff, beta, d_cutoff)  # validates the smoothing parameters now rather than per track
        self.analyser = analyser
        self.redetect_every = redetect_every
        self.max_gap = max_gap
        self.iou_threshold = iou_threshold
        self.motion_history = motion_history
        self._frame_seconds = 1.0 / fps
        self._filters = (min_cutoff, beta, d_cutoff)
        self._tracks: list[_TrackState] = []
        self._next_id = 0
        self._frames = 0
        self._detections = 0
        self._refits = 0
        self._filled = 0

    def reset(self) -> None:
        """Start over as if the next frame were the first of a video (a worker starting a segment of one alone):
        no tracks, detection on the next frame and every `redetect_every` after it, stats from zero. Track ids keep
        counting up, so an id is never reused within a tracker."""
        self._tracks = []
        self._frames = self._detections = self._refits = self._filled = 0

    @property
    def stats(self) -> TrackerStats:
        """Counts of frames seen, detections and re-fits run, and faces filled so far."""
        return TrackerStats(self._frames, self._detections, self._refits, self._filled)

    def update(self, frame: Frame) -> list[Track]:
        """Track faces onto the next frame (H×W×3 uint8 RGB) of the video.

        Returns one Track per live face, ordered by track_id; box and landmarks in frame pixels, smoothed.
        """
        check_frame(frame)
        index = self._frames
        self._frames += 1
        predicted = {track.track_id: track.predict(index) for track in self._tracks}

        detections: list[Face] | None = None
        found: dict[int, Face] = {}
        if index % self.redetect_every == 0 or not self._tracks:
            detections = self._detect(frame)
            found, _ = _link(predicted, detections, self.iou_threshold)
        for track_id, face in predicted.items():
            if track_id not in found and (refitted := self._refit(frame, face)) is not None:
                found[track_id] = refitted
        if detections is None and len(found) < len(self._tracks):
            detections = self._detect(frame)

        new_faces: list[Face] = []
        if detections is not None:
            # Link against what each track is now known to be (its detection or re-fit, else its prediction):
            # a detection of a face already re-fitted is that face, not a new one.
            anchors = {track_id: found.get(track_id, face) for track_id, face in predicted.items()}
            linked, new_faces = _link(anchors, detections, self.iou_threshold)
            for track_id, face in linked.items():
                found.setdefault(track_id, face)

        outputs: list[Track] = []
        alive: list[_TrackState] = []
        for track in self._tracks:
            if track.track_id in found:
                outputs.append(
                    Track(track.track_id, track.observe(found[track.track_id], index, self._frame_seconds), False)
                )
            elif index - track.last_seen <= self.max_gap:
                outputs.append(Track(track.track_id, predicted[track.track_id], True))
                self._filled += 1
            else:
                logger.debug(
                    "frame %d: track %d dropped, unseen for %d frames", index, track.track_id, index - track.last_seen
                )
                continue
            alive.append(track)
        for face in new_faces:
            track = _TrackState(self._next_id, face, index, self._filters, self.motion_history)
            self._next_id += 1
            outputs.append(Track(track.track_id, track.observe(face, index, self._frame_seconds), False))
            alive.append(track)
            logger.debug("frame %d: track %d started", index, track.track_id)
        self._tracks = alive
        return outputs

    def _detect(self, frame: Frame) -> list[Face]:
        self._detections += 1
        return self.analyser.detect(frame)

    def _refit(self, frame: Frame, face: Face) -> Face | None:
        self._refits += 1
        return self.analyser.refit(frame, face)
