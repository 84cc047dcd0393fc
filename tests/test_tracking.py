"""FaceTracker and OneEuroFilter against a fake analyser that sees synthetic faces with known true positions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest

from engine.core.types import Face, Frame
from engine.faces.tracking import FaceTracker, OneEuroFilter, Track, iou

NOISE_PX = 1.5
FRAME: Frame = np.zeros((480, 640, 3), np.uint8)  # the fake analyser never looks at pixels

# Landmark layouts in units of the face's box size, relative to the box centre.
TEMPLATE5 = np.array([[-0.2, -0.1], [0.2, -0.1], [0.0, 0.05], [-0.15, 0.25], [0.15, 0.25]])
TEMPLATE68 = np.random.default_rng(68).uniform(-0.45, 0.45, (68, 2))


@dataclass(frozen=True)
class TrueFace:
    """Ground truth of one face on one frame: centre and box side in pixels."""

    cx: float
    cy: float
    size: float

    @property
    def box(self) -> tuple[float, float, float, float]:
        half = self.size / 2
        return (self.cx - half, self.cy - half, self.cx + half, self.cy + half)

    def landmarks5(self) -> npt.NDArray[np.float64]:
        return np.array([self.cx, self.cy]) + TEMPLATE5 * self.size

    def landmarks68(self) -> npt.NDArray[np.float64]:
        return np.array([self.cx, self.cy]) + TEMPLATE68 * self.size


Scene = Callable[[int], list[TrueFace]]  # frame index -> the faces on that frame


@dataclass
class FakeAnalyser:
    """Sees the scene's true faces with Gaussian noise on box and landmarks (σ = NOISE_PX).

    `t` is the index of the frame being analysed (the test's loop sets it). `blind` frames return nothing from
    detect and refit. refit finds the true face its predicted box overlaps best, when that overlap is ≥ 0.3, as a
    landmark fit that starts far from the face fails. `raw` keeps, per frame, what was returned (true face → noisy).
    """

    scene: Scene
    blind: frozenset[int] = frozenset()
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    t: int = 0
    detect_calls: list[int] = field(default_factory=list)
    refit_calls: list[int] = field(default_factory=list)
    raw: dict[int, list[tuple[TrueFace, Face]]] = field(default_factory=dict)

    id = "fake"
    recogniser = "fake"
    threshold = 0.6

    def _observe(self, truth: TrueFace) -> Face:
        noise = self.rng.normal(0.0, NOISE_PX, 4 + 10 + 136)
        face = Face(
            box=tuple(float(v) for v in np.array(truth.box) + noise[:4]),  # type: ignore[arg-type]
            landmarks5=(truth.landmarks5() + noise[4:14].reshape(5, 2)).astype(np.float32),
            landmarks68=(truth.landmarks68() + noise[14:].reshape(68, 2)).astype(np.float32),
            score=0.9,
        )
        self.raw.setdefault(self.t, []).append((truth, face))
        return face

    def detect(self, frame: Frame) -> list[Face]:
        self.detect_calls.append(self.t)
        if self.t in self.blind:
            return []
        faces = [self._observe(truth) for truth in self.scene(self.t)]
        # Detector output order says nothing about identity: linking must go by position.
        return [faces[i] for i in self.rng.permutation(len(faces))]

    def refit(self, frame: Frame, face: Face) -> Face | None:
        self.refit_calls.append(self.t)
        truths = self.scene(self.t)
        if self.t in self.blind or not truths:
            return None
        best = max(truths, key=lambda truth: iou(truth.box, face.box))
        return self._observe(best) if iou(best.box, face.box) >= 0.3 else None

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        raise NotImplementedError

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        raise NotImplementedError


def moving_face(t: int) -> TrueFace:
    """One face drifting right and down with a sway (up to ≈ 2 px/frame) and growing from 120 to ≈ 170 px."""
    return TrueFace(cx=200 + 1.2 * t + 25 * np.sin(t / 12), cy=220 + 0.6 * t, size=120 + 0.6 * t)


def run(tracker: FaceTracker, analyser: FakeAnalyser, frames: int) -> list[list[Track]]:
    outputs = []
    for t in range(frames):
        analyser.t = t
        outputs.append(tracker.update(FRAME))
    return outputs


def jitter(points: npt.NDArray[np.float64], truth: npt.NDArray[np.float64]) -> float:
    """RMS frame-to-frame change of the error (points − truth), px: the motion removed, what the eye sees shake.

    points, truth: frames × N × 2 in pixels.
    """
    return float(np.sqrt(np.mean(np.diff(points - truth, axis=0) ** 2)))


def mean_error(points: npt.NDArray[np.float64], truth: npt.NDArray[np.float64]) -> float:
    """Mean euclidean distance of points from truth, px."""
    return float(np.mean(np.linalg.norm(points - truth, axis=-1)))


def test_one_euro_filter_smooths_noise_and_follows_motion_per_element() -> None:
    rng = np.random.default_rng(1)
    still = OneEuroFilter(min_cutoff=1.0, beta=0.0)
    noisy = 10.0 + rng.normal(0.0, 1.0, (300, 3, 2))
    smoothed = np.array([still(sample, 1 / 30) for sample in noisy])
    assert smoothed.shape == noisy.shape
    assert np.std(smoothed[30:]) < 0.4 * np.std(noisy)

    # On a ramp a plain low-pass lags; beta raises the cutoff with speed and shrinks the lag.
    ramp = np.arange(100, dtype=np.float64)[:, None] * np.array([3.0, 0.0])  # 3 px/frame along x, still along y
    lags = {}
    for beta in (0.0, 0.1):
        f = OneEuroFilter(min_cutoff=1.0, beta=beta)
        lags[beta] = ramp[-1] - [f(sample, 1 / 30) for sample in ramp][-1]
    assert lags[0.0][0] > 10 and lags[0.1][0] < 0.3 * lags[0.0][0]
    assert lags[0.0][1] == lags[0.1][1] == 0.0

    still.reset()
    assert np.array_equal(still([5.0, 6.0], 1 / 30), [5.0, 6.0])
    with pytest.raises(ValueError, match="shape"):
        still([1.0, 2.0, 3.0], 1 / 30)
    with pytest.raises(ValueError, match="positive time step"):
        still([1.0, 2.0], 0.0)


def test_smoothing_halves_jitter_with_bounded_lag() -> None:
    frames = 90
    analyser = FakeAnalyser(lambda t: [moving_face(t)])
    outputs = run(FaceTracker(analyser, fps=30.0), analyser, frames)

    assert [len(tracks) for tracks in outputs] == [1] * frames
    assert {tracks[0].track_id for tracks in outputs} == {0}
    assert not any(tracks[0].filled for tracks in outputs)
    truths = [moving_face(t) for t in range(frames)]
    raw = [analyser.raw[t][0][1] for t in range(frames)]
    smooth = [tracks[0].face for tracks in outputs]

    points: dict[str, Callable[[Face], object]] = {
        "landmarks5": lambda face: face.landmarks5,
        "landmarks68": lambda face: face.landmarks68,
        "box": lambda face: np.reshape(face.box, (2, 2)),
    }
    true_points: dict[str, Callable[[TrueFace], object]] = {
        "landmarks5": TrueFace.landmarks5,
        "landmarks68": TrueFace.landmarks68,
        "box": lambda truth: np.reshape(truth.box, (2, 2)),
    }
    for name, of in points.items():
        truth = np.array([true_points[name](tf) for tf in truths], np.float64)
        raw_arr = np.array([of(face) for face in raw], np.float64)
        smooth_arr = np.array([of(face) for face in smooth], np.float64)
        ratio = jitter(smooth_arr, truth) / jitter(raw_arr, truth)
        lag = mean_error(smooth_arr, truth) - mean_error(raw_arr, truth)
        assert ratio <= 0.5, f"{name}: smoothed jitter is {ratio:.2f} of the detector's"
        assert lag <= 1.0, f"{name}: smoothing adds {lag:.2f} px of mean error (lag)"


def test_detection_runs_every_n_frames_and_refit_in_between() -> None:
    analyser = FakeAnalyser(lambda t: [moving_face(t)])
    tracker = FaceTracker(analyser, redetect_every=10)
    run(tracker, analyser, 60)

    assert analyser.detect_calls == [0, 10, 20, 30, 40, 50]
    assert analyser.refit_calls == [t for t in range(60) if t % 10]
    stats = tracker.stats
    assert (stats.frames, stats.detections, stats.refits, stats.filled) == (60, 6, 54, 0)


def test_short_gap_is_filled_near_the_true_face() -> None:
    analyser = FakeAnalyser(lambda t: [moving_face(t)], blind=frozenset({30, 31, 32}))
    tracker = FaceTracker(analyser, max_gap=5)
    outputs = run(tracker, analyser, 60)

    assert all(len(tracks) == 1 and tracks[0].track_id == 0 for tracks in outputs)
    assert [t for t, tracks in enumerate(outputs) if tracks[0].filled] == [30, 31, 32]
    # The detector itself is off by 1.9 px on average (σ = 1.5 px per coordinate); a filled face extrapolated
    # three frames stays within about twice that, on a face 140 px wide that moves ≈ 1 px a frame here.
    for t in (30, 31, 32):
        filled = outputs[t][0].face
        assert mean_error(filled.landmarks5, moving_face(t).landmarks5()) < 4.0
        assert filled.landmarks68 is not None
        assert mean_error(filled.landmarks68, moving_face(t).landmarks68()) < 4.0
        assert iou(filled.box, moving_face(t).box) > 0.9
    # A failed re-fit asks the detector at once, on each blind frame.
    assert {30, 31, 32} <= set(analyser.detect_calls)
    assert tracker.stats.filled == 3


def test_gap_longer_than_max_gap_ends_the_track_and_a_new_one_starts_afresh() -> None:
    analyser = FakeAnalyser(lambda t: [moving_face(t)], blind=frozenset(range(30, 40)))
    tracker = FaceTracker(analyser, max_gap=5)
    outputs = run(tracker, analyser, 50)

    assert [t for t, tracks in enumerate(outputs) if tracks and tracks[0].filled] == [30, 31, 32, 33, 34]
    assert all(tracks == [] for tracks in outputs[35:40])
    assert {tracks[0].track_id for tracks in outputs[40:]} == {1}
    # The new track's filter starts from its first observation, not from the old track's history.
    assert np.array_equal(outputs[40][0].face.landmarks5, analyser.raw[40][0][1].landmarks5)


def test_crossing_faces_keep_their_identities() -> None:
    # A moves right, B moves left, 60 px apart vertically: their boxes overlap at most IoU 0.25 when they cross.
    def scene(t: int) -> list[TrueFace]:
        return [TrueFace(100 + 6.5 * t, 200, 100), TrueFace(500 - 6.5 * t, 260, 100)]

    analyser = FakeAnalyser(scene)
    outputs = run(FaceTracker(analyser, redetect_every=5), analyser, 60)

    assert all(len(tracks) == 2 and not any(track.filled for track in tracks) for tracks in outputs)
    # Whichever id started on a face stays on it through the crossing (frames 30–31).
    first = {track.track_id: track.face for track in outputs[0]}
    id_a = min(first, key=lambda i: abs(first[i].box[0] - scene(0)[0].box[0]))
    id_b = 1 - id_a
    for t, tracks in enumerate(outputs):
        by_id = {track.track_id: track.face for track in tracks}
        a, b = scene(t)
        assert by_id.keys() == {0, 1}
        assert iou(by_id[id_a].box, a.box) > 0.7, t
        assert iou(by_id[id_b].box, b.box) > 0.7, t


def test_face_appearing_between_detections_is_picked_up_at_the_next_detection() -> None:
    def scene(t: int) -> list[TrueFace]:
        return [moving_face(t)] + ([TrueFace(520, 120, 90)] if t >= 13 else [])

    analyser = FakeAnalyser(scene)
    outputs = run(FaceTracker(analyser, redetect_every=10), analyser, 30)

    assert [len(tracks) for tracks in outputs] == [1] * 20 + [2] * 10
    assert analyser.detect_calls == [0, 10, 20]
    newcomer = [track for track in outputs[20] if track.track_id == 1]
    assert len(newcomer) == 1 and iou(newcomer[0].face.box, TrueFace(520, 120, 90).box) > 0.9


def test_shape_smoothing_keeps_speech() -> None:
    """A lower lip moving ±6 px at 4 Hz on a ~100 px face (speech) keeps most of its swing; still points lose most
    of their noise."""
    from engine.faces.tracking import ShapeSmoother

    rng = np.random.default_rng(0)
    angles = np.linspace(0, 2 * np.pi, 68, endpoint=False)
    face = np.stack([200 + 40 * np.cos(angles), 200 + 50 * np.sin(angles)], axis=1)
    smoother = ShapeSmoother()
    swing, truth_swing, still = [], [], []
    for i in range(96):
        truth = face.copy()
        truth[57:60, 1] += 6 * np.sin(2 * np.pi * 4 * i / 24)
        noisy = truth + rng.normal(0, 0.7, truth.shape)
        out = smoother(noisy, 1 / 24)
        swing.append(out[58, 1] - face[58, 1])
        truth_swing.append(truth[58, 1] - face[58, 1])
        still.append((out[:17] - truth[:17], noisy[:17] - truth[:17]))
    assert np.abs(swing[24:]).max() >= 0.7 * np.abs(truth_swing[24:]).max()
    smoothed_noise = np.diff(np.array([s for s, _ in still[24:]]), axis=0).std()
    raw_noise = np.diff(np.array([r for _, r in still[24:]]), axis=0).std()
    assert smoothed_noise <= 0.5 * raw_noise
