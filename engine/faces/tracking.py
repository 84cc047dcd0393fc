"""Tracking faces across video frames: link by motion and appearance, smooth landmarks over time, fill short gaps.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import cv2
import numpy as np
import numpy.typing as npt

from engine.core.types import Face, Frame, check_frame
from engine.faces import FaceAnalyser
from engine.faces.assignment import assign
from engine.faces.boxes import iou

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
    face: the face with the track's smoothed box and landmarks (frame pixels), and as `embedding` the track's
        identity (see `embedding`).
    filled: True when nothing found the face on this frame and `face` is extrapolated from the track's motion.
    """

    track_id: int
    face: Face
    filled: bool

    @property
    def embedding(self) -> npt.NDArray[np.float32] | None:
        """The track's identity: the running mean of its face's embeddings (`analyser.recogniser`'s space), None
        until the tracker embedded the face (`FaceTracker(appearance=…, embed_new=…)`). Same as `face.embedding`."""
        return self.face.embedding


@dataclass(frozen=True)
class TrackerStats:
    """Work a FaceTracker has done since it was made.

    frames: frames passed to `update`. detections: `analyser.detect` calls. refits: `analyser.refit` calls.
    filled: Track outputs with `filled=True`, counted per face and frame. embeddings: faces embedded. coarse: the
    detections that ran on a downscaled copy (each face found there re-fitted once; not counted in `refits`).
    """

    frames: int
    detections: int
    refits: int
    filled: int
    embeddings: int = 0
    coarse: int = 0


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


class Motion:
    """A constant-velocity Kalman filter (OpenCV's `cv2.KalmanFilter`) of a face's centre and size, per frame.

    State: centre x, y and size s (pixels: the 5 landmarks' centroid and RMS distance from it), and their
    velocities (pixels per frame). Noise is relative to the face's size, as in DeepSORT, so a large close face and
    a small distant one are followed alike: measurement σ = s/40, process σ = s/50 (position) and s/60 (velocity)
    per frame: responsive enough that a face carried through a blind frame of the swaying, zooming demo clip
    lands within a pixel of the true one, steady enough that 3 blind frames of a face seen with 1.5 px of noise
    keep its box at IoU > 0.9 (tests/test_tracking.py, tests/test_face_swapper.py). `predict` advances one frame
    (once per video frame, whether or not the face is seen); `correct` feeds what was seen on that frame.
    """

    MEASUREMENT = 1 / 40
    POSITION = 1 / 50
    VELOCITY = 1 / 60

    def __init__(self, centre: npt.ArrayLike, size: float) -> None:
        self._kf = cv2.KalmanFilter(6, 3)
        transition = np.eye(6, dtype=np.float32)
        transition[0:3, 3:6] = np.eye(3, dtype=np.float32)
        self._kf.transitionMatrix = transition
        self._kf.measurementMatrix = np.eye(3, 6, dtype=np.float32)
        x, y = (float(v) for v in np.asarray(centre, np.float64))
        self._kf.statePost = np.array([[x], [y], [size], [0], [0], [0]], np.float32)
        # Position as measured; velocity unknown (a face may already move fast when first seen).
        spread = np.array([self.MEASUREMENT] * 3 + [0.2] * 3, np.float32) * max(size, 1.0)
        self._kf.errorCovPost = np.diag(spread**2).astype(np.float32)

    @property
    def state(self) -> npt.NDArray[np.float64]:
        """(x, y, s, vx, vy, vs) after the last predict or correct."""
        return np.asarray(self._kf.statePost, np.float64).ravel()

    def predict(self) -> npt.NDArray[np.float64]:
        """Advance one frame; returns the predicted (x, y, s)."""
        size = max(float(self._kf.statePost[2, 0]), 1.0)
        noise = np.array([self.POSITION] * 3 + [self.VELOCITY] * 3, np.float32) * size
        self._kf.processNoiseCov = np.diag(noise**2).astype(np.float32)
        predicted = np.asarray(self._kf.predict(), np.float64).ravel()
        # OpenCV leaves statePost at the previous correction until the next one: a missed frame carries on from
        # the prediction.
        self._kf.statePost = self._kf.statePre.copy()
        self._kf.errorCovPost = self._kf.errorCovPre.copy()
        return predicted[:3]

    def correct(self, centre: npt.ArrayLike, size: float) -> None:
        self._kf.measurementNoiseCov = np.eye(3, dtype=np.float32) * np.float32(
            (self.MEASUREMENT * max(size, 1.0)) ** 2
        )
        x, y = (float(v) for v in np.asarray(centre, np.float64))
        self._kf.correct(np.array([[x], [y], [size]], np.float32))


class _TrackState:
    """The tracker's memory of one face: its smoothing filters, its motion, its appearance, and the frame it was
    last seen on."""

    def __init__(self, track_id: int, face: Face, frame_index: int, filters: tuple[float, float, float]) -> None:
        self.track_id = track_id
        self.box_filter = OneEuroFilter(*filters)
        # 5 points alone carry too little to measure a pose on: without 68 landmarks (buffalo_l) they are
        # filtered in pixels instead, which lags a little behind fast motion.
        self.landmarks5_filter = ShapeSmoother()
        self.landmarks5_pixels = OneEuroFilter(*filters)
        self.landmarks68_filter = ShapeSmoother()
        self.motion: Motion | None = None  # made from the first observation
        self.last_seen = frame_index
        self.face = face  # the last smoothed output of a frame where the face was found
        self.embedding: npt.NDArray[np.float32] | None = None
        self.recogniser: str | None = None
        self.embedded = 0  # observations averaged into `embedding`

    def observe(self, face: Face, frame_index: int, frame_seconds: float) -> Face:
        """Feed the face found on `frame_index` through the filters; return it with smoothed box and landmarks."""
        dt = max(frame_index - self.last_seen, 1) * frame_seconds
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
        if self.motion is None:
            self.motion = Motion(centre, size)
        else:
            self.motion.correct(centre, size)
        self.last_seen = frame_index
        if face.embedding is not None:
            self.remember(face)
        self.face = replace(
            face,
            box=(float(box[0]), float(box[1]), float(box[2]), float(box[3])),
            landmarks5=landmarks5.astype(np.float32),
            landmarks68=landmarks68,
            embedding=self.embedding,
            recogniser=self.recogniser,
        )
        return self.face

    def remember(self, face: Face) -> None:
        """Average the embedding of `face` (this track's face on some frame) into the track's: the mean of the
        first few, then a running mean over about APPEARANCE_MEMORY observations, which follows slow changes of
        light and pose."""
        assert face.embedding is not None
        vector = np.asarray(face.embedding, np.float32)
        self.embedded += 1
        self.recogniser = face.recogniser
        if self.embedding is None:
            self.embedding = vector.copy()
            return
        weight = max(1.0 / APPEARANCE_MEMORY, 1.0 / self.embedded)
        self.embedding = ((1.0 - weight) * self.embedding + weight * vector).astype(np.float32)

    def predict(self) -> Face:
        """The last smoothed face moved and scaled to where the motion filter puts it on the next frame (call once
        per frame, before that frame's observation). A shrinking face extrapolated through a gap never collapses
        below half its size."""
        assert self.motion is not None, "a track is observed on the frame it starts"
        x, y, size = self.motion.predict()
        centre, current_size = _centre_and_size(self.face.landmarks5)
        scale = max(float(size), current_size / 2) / current_size
        target = np.array([x, y])

        def move(points: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
            return (target + (points - centre) * scale).astype(np.float32)

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
    return centre, max(float(np.sqrt(np.mean(np.sum((points - centre) ** 2, axis=1)))), 1e-3)


# Tracks whose predicted boxes overlap more than this are crowded: their faces may cross or hide each other, so a
# landmark re-fit could land on the wrong one. They are found by detection on every such frame instead, linked by
# motion and appearance.
CROWD_IOU = 0.1
# Two tracks whose faces on one frame overlap more than this hold one face: only one keeps it.
DUPLICATE_IOU = 0.5
# A detection overlapping a track's box this much is a candidate for it (ambiguity is judged on candidates).
CANDIDATE_IOU = 0.1
# A track lost behind another face is found again by appearance within this many of its sizes (box sides) of
# where its motion puts it, even when the boxes no longer overlap.
RELINK_REACH = 1.5
# The weight of the appearance term (distance / threshold) against the motion term (1 − IoU) of a link's cost.
APPEARANCE_WEIGHT = 0.5
# Coarse re-detection (`coarse`): a scheduled re-detection runs on a copy scaled so that a face NEWCOMER times the
# smallest tracked face's box side is COARSE_FACE_PX wide (HOG finds 50 px faces without upsampling), when that
# copy is no larger than the frame; every FULL_EVERY-th scheduled re-detection runs on the full frame, so a face
# smaller than that is still found within FULL_EVERY · redetect_every frames.
COARSE_FACE_PX = 80.0
NEWCOMER = 0.5
FULL_EVERY = 3
# A track's embedding is a running mean over about this many observations.
APPEARANCE_MEMORY = 10


class FaceTracker:
    """Follows faces through a video: one `update(frame)` per frame, in order.

    Detection (`analyser.detect`) runs on the first frame, every `redetect_every` frames, whenever there is no
    live track, on any frame where a track's re-fit fails, and on every frame where tracks are crowded (their
    predicted boxes overlap: faces crossing or passing behind each other). With `coarse`, the scheduled
    re-detections where the tracked faces are large run on a downscaled copy (COARSE_FACE_PX). In between, each
    track's landmarks are re-fitted (`analyser.refit`) around its predicted position, the motion filter's
    (`Motion`: a Kalman filter of centre and size with their velocities).

    Detections are linked to tracks in the manner of DeepSORT/ByteTrack: one optimal assignment (Hungarian,
    `assignment.assign`) over a cost of motion — 1 − IoU of the detection with the track's
    prediction (a pair needs IoU ≥ `iou_threshold`) — plus, with `appearance`, the distance of their embeddings
    over the analyser's same-person threshold; a pair whose embeddings are farther apart than that threshold
    never links, and a lost track is found again by appearance near where its motion puts it. Embeddings are
    computed only where they decide something (a detection that could belong to two tracks or a track that could
    take two detections, a track entering a crowd, a lost track's candidates) and, with `embed_new`, for every
    new track: each track keeps the running mean of its face's embeddings (`Track.face.embedding`, in
    `analyser.recogniser`'s space), for whatever needs its identity. Detections linked to no track start new
    ones. A track that neither detection nor re-fit finds is kept for up to `max_gap` frames, reported with its
    predicted face and `filled=True`, and dropped after.

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
        fps: float = 30.0,
        min_cutoff: float = 1.0,
        beta: float = 0.07,
        d_cutoff: float = 1.0,
        appearance: bool = False,
        embed_new: bool = False,
        coarse: bool = False,
    ) -> None:
        if redetect_every < 1:
            raise ValueError(f"redetect_every must be ≥ 1, got {redetect_every}")
        if max_gap < 0:
            raise ValueError(f"max_gap must be ≥ 0, got {max_gap}")
        if not 0 < iou_threshold <= 1:
            raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold}")
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        OneEuroFilter(min_cutoff, beta, d_cutoff)  # validates the smoothing parameters now rather than per track
        self.analyser = analyser
        self.redetect_every = redetect_every
        self.max_gap = max_gap
        self.iou_threshold = iou_threshold
        self.appearance = appearance or embed_new
        self.embed_new = embed_new
        self.coarse = coarse
        self._frame_seconds = 1.0 / fps
        self._filters = (min_cutoff, beta, d_cutoff)
        self._tracks: list[_TrackState] = []
        self._next_id = 0
        self._frames = 0
        self._detections = 0
        self._refits = 0
        self._filled = 0
        self._embedded = 0
        self._scheduled = 0  # scheduled re-detections with live tracks so far (every FULL_EVERY-th is full)
        self._coarse = 0

    def reset(self) -> None:
        """Start over as if the next frame were the first of a video (a worker starting a segment of one alone):
        no tracks, detection on the next frame and every `redetect_every` after it, stats from zero. Track ids keep
        counting up, so an id is never reused within a tracker."""
        self._tracks = []
        self._frames = self._detections = self._refits = self._filled = self._embedded = 0
        self._scheduled = self._coarse = 0

    @property
    def stats(self) -> TrackerStats:
        """Counts of frames seen, detections, re-fits and embeddings run, and faces filled so far."""
        return TrackerStats(self._frames, self._detections, self._refits, self._filled, self._embedded, self._coarse)

    def update(self, frame: Frame) -> list[Track]:
        """Track faces onto the next frame (H×W×3 uint8 RGB) of the video.

        Returns one Track per live face, ordered by track_id; box and landmarks in frame pixels, smoothed.
        """
        check_frame(frame)
        index = self._frames
        self._frames += 1
        states = {track.track_id: track for track in self._tracks}
        predicted = {tid: track.predict() for tid, track in states.items()}
        crowded = _crowded(predicted)
        if self.appearance:
            self._embed_tracks(frame, [states[tid] for tid in crowded if states[tid].embedding is None], predicted)

        detections: list[Face] | None = None
        found: dict[int, Face] = {}
        if index % self.redetect_every == 0 or not self._tracks or crowded:
            scheduled = bool(self._tracks) and not crowded
            detections = self._detect(frame, list(predicted.values()) if scheduled else None)
            found, _ = self._link(frame, states, predicted, detections, index)
        for track_id, face in predicted.items():
            if track_id not in found and track_id not in crowded:
                refitted = self._refit(frame, face)
                if refitted is not None:
                    found[track_id] = refitted
        found = self._one_track_per_face(frame, states, predicted, found)
        if detections is None and len(found) < len(self._tracks):
            detections = self._detect(frame)

        new_faces: list[Face] = []
        if detections is not None:
            # Link against what each track is now known to be (its detection or re-fit, else its prediction):
            # a detection of a face already re-fitted is that face, not a new one.
            anchors = {track_id: found.get(track_id, face) for track_id, face in predicted.items()}
            linked, new_faces = self._link(frame, states, anchors, detections, index, taken=found)
            for track_id, face in linked.items():
                found.setdefault(track_id, face)
            if self.embed_new:
                new_faces = self._embedded_faces(frame, new_faces)

        outputs: list[Track] = []
        alive: list[_TrackState] = []
        for track in self._tracks:
            if track.track_id in found:
                face = track.observe(found[track.track_id], index, self._frame_seconds)
                outputs.append(Track(track.track_id, face, False))
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
            track = _TrackState(self._next_id, face, index, self._filters)
            self._next_id += 1
            outputs.append(Track(track.track_id, track.observe(face, index, self._frame_seconds), False))
            alive.append(track)
            logger.debug("frame %d: track %d started", index, track.track_id)
        self._tracks = alive
        return outputs

    # -- association --------------------------------------------------------------------------------------------
    def _link(
        self,
        frame: Frame,
        states: Mapping[int, _TrackState],
        anchors: Mapping[int, Face],
        detections: list[Face],
        index: int,
        taken: Mapping[int, Face] | None = None,
    ) -> tuple[dict[int, Face], list[Face]]:
        """Assign detections to tracks (each at most one), by motion and appearance.

        anchors: where each track is on this frame (its prediction, or the face already found for it).
        `taken`: tracks already found this frame; a detection linked to one of them is that face (so it is
        neither new nor another track's). Returns the detection linked to each other track, and the detections
        linked to none. Detections that need an embedding to decide get one: `detections` is updated in place, so
        a second call on the same frame does not embed them again.
        """
        taken = taken or {}
        ids = list(anchors)
        if not ids or not detections:
            return {}, list(detections)
        overlap = np.array([[iou(anchors[t].box, d.box) for d in detections] for t in ids])
        lost = [states[t].last_seen < index - 1 for t in ids]
        if self.appearance:
            candidates = overlap >= CANDIDATE_IOU
            reach = np.array([[lost[r] and _near(anchors[t], d) for d in detections] for r, t in enumerate(ids)])
            candidates |= reach
            ambiguous = (candidates.sum(axis=0) > 1) | (candidates & (candidates.sum(axis=1, keepdims=True) > 1)).any(
                axis=0
            )
            ambiguous |= (candidates & np.array(lost)[:, None]).any(axis=0)
            wanted = [j for j in range(len(detections)) if ambiguous[j] and detections[j].embedding is None]
            if wanted and any(states[t].embedding is not None for t in ids):
                for j, face in zip(wanted, self._embed(frame, [detections[j] for j in wanted]), strict=True):
                    detections[j] = face
        cost = np.full(overlap.shape, np.inf)
        for r, track_id in enumerate(ids):
            known = states[track_id].embedding
            for j, detection in enumerate(detections):
                distance = None
                if known is not None and detection.embedding is not None:
                    distance = self.analyser.distance(known, detection.embedding)
                    if distance >= self.analyser.threshold:
                        continue  # another person: never the same track, however well the boxes agree
                moves = overlap[r, j] >= self.iou_threshold
                found_again = distance is not None and lost[r] and _near(anchors[track_id], detection)
                if not (moves or found_again):
                    continue
                looks = 0.5 if distance is None else distance / self.analyser.threshold
                cost[r, j] = (1.0 - overlap[r, j]) + APPEARANCE_WEIGHT * looks
        linked: dict[int, Face] = {}
        used: set[int] = set()
        for r, j in assign(cost):
            used.add(j)
            if ids[r] not in taken:
                linked[ids[r]] = detections[j]
        return linked, [d for j, d in enumerate(detections) if j not in used]

    def _one_track_per_face(
        self,
        frame: Frame,
        states: Mapping[int, _TrackState],
        predicted: Mapping[int, Face],
        found: dict[int, Face],
    ) -> dict[int, Face]:
        """`found` with at most one track per face: when two tracks' faces overlap (a re-fit slid onto the other
        face), the track the face looks like (by embedding) keeps it, else the one whose motion put it nearest;
        the other is not found on this frame."""
        ids = sorted(found)
        out = dict(found)
        for a_pos, a in enumerate(ids):
            for b in ids[a_pos + 1 :]:
                if a not in out or b not in out or iou(out[a].box, out[b].box) <= DUPLICATE_IOU:
                    continue
                face = out[a]
                keep = max((a, b), key=lambda t: iou(predicted[t].box, face.box))
                known = {t: states[t].embedding for t in (a, b) if states[t].embedding is not None}
                if self.appearance and len(known) == 2:
                    (face,) = self._embed(frame, [face]) if face.embedding is None else (face,)
                    assert face.embedding is not None
                    keep = min(known, key=lambda t: self.analyser.distance(known[t], face.embedding))
                out[keep] = face
                del out[b if keep == a else a]
                logger.debug("tracks %d and %d held one face; %d keeps it", a, b, keep)
        return out

    def _embed_tracks(self, frame: Frame, tracks: Sequence[_TrackState], predicted: Mapping[int, Face]) -> None:
        """Give tracks entering a crowd an embedding from their face on this frame, while it is still theirs."""
        if tracks:
            for track, face in zip(tracks, self._embed(frame, [predicted[t.track_id] for t in tracks]), strict=True):
                track.remember(face)

    def _embedded_faces(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        missing = [f for f in faces if f.embedding is None]
        done = iter(self._embed(frame, missing))
        return [f if f.embedding is not None else next(done) for f in faces]

    def _embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        if not faces:
            return []
        self._embedded += len(faces)
        return self.analyser.embed(frame, faces)

    def _detect(self, frame: Frame, tracked: Sequence[Face] | None = None) -> list[Face]:
        """The faces on `frame`. `tracked`: the tracks' predicted faces on a scheduled re-detection, which may then
        run coarse (see COARSE_FACE_PX): on a downscaled copy, each face found there re-fitted on the full frame
        (`analyser.refit`: landmarks fitted at full resolution, checked by the detector on a crop), and the full
        frame's detection after all if any re-fit fails."""
        self._detections += 1
        scale = self._coarse_scale(frame, tracked)
        if scale is None:
            return self.analyser.detect(frame)
        small = cv2.resize(frame, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        faces = []
        for face in self.analyser.detect(small):
            refitted = self.analyser.refit(frame, scaled_face(face, 1.0 / scale))
            if refitted is None:
                logger.debug("coarse detection: a face found at %.2f× does not re-fit; detecting at full size", scale)
                return self.analyser.detect(frame)
            faces.append(refitted)
        self._coarse += 1
        return faces

    def _coarse_scale(self, frame: Frame, tracked: Sequence[Face] | None) -> float | None:
        """The scale of a coarse re-detection's copy (< 1), or None for the full frame."""
        if not self.coarse or not tracked:
            return None
        self._scheduled += 1
        if self._scheduled % FULL_EVERY == 0:
            return None
        smallest = min(min(f.box[2] - f.box[0], f.box[3] - f.box[1]) for f in tracked)
        scale = COARSE_FACE_PX / (NEWCOMER * smallest)
        # A copy that is too small to hold a detection window is no help either.
        return scale if scale <= 1.0 and min(frame.shape[:2]) * scale >= COARSE_FACE_PX else None

    def _refit(self, frame: Frame, face: Face) -> Face | None:
        self._refits += 1
        refitted = self.analyser.refit(frame, face)
        # A re-fit is a new measurement of the face: the embedding of an earlier frame does not describe it.
        return None if refitted is None else replace(refitted, embedding=None, recogniser=None)


def scaled_face(face: Face, factor: float) -> Face:
    """`face` with its box and landmarks multiplied by `factor` (found on a scaled frame, put on the full one)."""
    return replace(
        face,
        box=(face.box[0] * factor, face.box[1] * factor, face.box[2] * factor, face.box[3] * factor),
        landmarks5=(face.landmarks5 * factor).astype(np.float32),
        landmarks68=None if face.landmarks68 is None else (face.landmarks68 * factor).astype(np.float32),
    )


def _crowded(faces: Mapping[int, Face]) -> set[int]:
    """Ids whose boxes overlap another's by more than CROWD_IOU."""
    ids = list(faces)
    return {t for i, t in enumerate(ids) for u in ids[i + 1 :] + ids[:i] if iou(faces[t].box, faces[u].box) > CROWD_IOU}


def _near(anchor: Face, detection: Face) -> bool:
    """Whether `detection`'s box centre lies within RELINK_REACH box sides of `anchor`'s."""
    ax, ay = (anchor.box[0] + anchor.box[2]) / 2, (anchor.box[1] + anchor.box[3]) / 2
    dx, dy = (detection.box[0] + detection.box[2]) / 2, (detection.box[1] + detection.box[3]) / 2
    side = max(anchor.box[2] - anchor.box[0], anchor.box[3] - anchor.box[1], 1.0)
    return math.hypot(dx - ax, dy - ay) <= RELINK_REACH * side
