"""The cheaper default face chain leaves the picture as it was: colour transfer on the mask's pixels equals the
whole-frame computation; identity QA, which does not touch the
picture, samples frames yet lists every frame of a failed stretch, and reuses the embeddings it has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import cv2
import numpy as np
import pytest

from engine.core.types import Face, Frame
from engine.faces import colour
from engine.faces.qa import IdentityQA
from engine.media import demo


def _whole_frame_reinhard(source: Frame, target: Frame, weights: np.ndarray) -> Frame:
    """The transfer as it was before: LAB of every pixel of both images, statistics weighted by the mask."""
    src = cv2.cvtColor(source.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    tgt = cv2.cvtColor(target.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)

    def stats(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = weights[..., None].astype(np.float64)
        mean = (image * w).sum(axis=(0, 1)) / w.sum()
        var = (((image - mean) ** 2) * w).sum(axis=(0, 1)) / w.sum()
        return mean.astype(np.float32), np.sqrt(var).astype(np.float32)

    (sm, ss), (tm, ts) = stats(src), stats(tgt)
    gain = np.where(ss > 1e-3, ts / np.maximum(ss, 1e-3), 1.0).astype(np.float32)
    rgb = cv2.cvtColor(((src - sm) * gain + tm).astype(np.float32), cv2.COLOR_LAB2RGB)
    m = weights[..., None]
    blended = m * (np.clip(rgb, 0.0, 1.0) * 255.0) + (1.0 - m) * source.astype(np.float32)
    return np.clip(np.rint(blended), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def pair() -> tuple[Frame, Frame, np.ndarray]:
    """Two differently lit 200×180 crops of the demo clip and a feathered elliptical mask (weights 0–1)."""
    frames = demo.frames(320, 240, 2)
    source = np.ascontiguousarray(frames[0][20:220, 60:240])
    target = np.ascontiguousarray(np.clip(frames[1][20:220, 60:240] * 0.7 + 40, 0, 255).astype(np.uint8))
    mask = np.zeros((200, 180), np.float32)
    cv2.ellipse(mask, (90, 100), (60, 80), 0, 0, 360, 1.0, -1)
    return source, target, cv2.GaussianBlur(mask, (0, 0), 6)


def test_reinhard_on_mask_pixels_equals_the_whole_frame_computation(pair: tuple[Frame, Frame, np.ndarray]) -> None:
    source, target, mask = pair
    out = colour.transfer(source, target, mask, "reinhard")
    old = _whole_frame_reinhard(source, target, mask)
    # Bit-identical here; a BLAS that adds the weighted statistics (float64 in both) in another order could round
    # a mean differently in float32, so one level on a few pixels is allowed.
    diff = np.abs(out.astype(int) - old.astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.001
    assert np.array_equal(out[mask == 0], source[mask == 0])
    assert not np.array_equal(out[mask > 0.5], source[mask > 0.5])  # it did correct something


def test_histogram_on_mask_pixels_is_the_whole_frame_result(pair: tuple[Frame, Frame, np.ndarray]) -> None:
    source, target, mask = pair
    # The whole-frame result: pixels with weight 0 count nowhere (weights) and keep their value (blend), so
    # computing on a padded frame whose extra pixels have weight 0 must not change any pixel of the original.
    padded = np.zeros((200, 260, 3), np.uint8)
    padded[:, :180] = source
    tpad = np.full((200, 260, 3), 255, np.uint8)
    tpad[:, :180] = target
    mpad = np.zeros((200, 260), np.float32)
    mpad[:, :180] = mask
    assert np.array_equal(colour.transfer(padded, tpad, mpad, "histogram")[:, :180],
                          colour.transfer(source, target, mask, "histogram"))  # fmt: skip


class _Analyser:
    """A stand-in recogniser: a face's embedding is the mean brightness of its box / 255 (1-d), the source's is 1;
    distance |a − b|, threshold 0.5. Counts embeddings made."""

    recogniser = "fake"
    threshold = 0.5

    def __init__(self) -> None:
        self.embedded = 0

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        self.embedded += len(faces)
        out = []
        for f in faces:
            x0, y0, x1, y1 = (int(v) for v in f.box)
            value = float(frame[y0:y1, x0:x1].mean()) / 255.0
            out.append(replace(f, embedding=np.array([value], np.float32), recogniser=self.recogniser))
        return out

    def refit(self, frame: Frame, face: Face) -> Face:
        return face

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(abs(float(a[0]) - float(b[0])))


def _face(x: float) -> Face:
    return Face(box=(x, 10.0, x + 20.0, 30.0), landmarks5=np.zeros((5, 2), np.float32), score=0.9)


def _run_qa(failed: range, frames: int = 40, every: int = 5) -> tuple[IdentityQA, _Analyser]:
    """Frames whose output face is the source (white) except on `failed` (grey: distance 0.6 ≥ 0.5, flagged);
    the input face is black (distance 1). The face drifts 1 px every 4 frames (the same tracked face)."""
    analyser = _Analyser()
    qa = IdentityQA(analyser, np.array([1.0], np.float32), every=every)  # type: ignore[arg-type]
    before = np.zeros((40, 80, 3), np.uint8)
    for i in range(frames):
        after = np.full((40, 80, 3), 102 if i in failed else 255, np.uint8)
        qa.check(i, before, after, [_face(float(i // 4))])
    return qa, analyser


@pytest.mark.parametrize("failed", [range(12, 18), range(7, 12), range(21, 40), range(5, 10)])
def test_sampled_qa_lists_every_frame_of_a_failed_stretch(failed: range) -> None:
    every_frame, _ = _run_qa(failed, every=1)
    sampled, _ = _run_qa(failed, every=5)
    assert sampled.summary()["flagged_frames"] == every_frame.summary()["flagged_frames"] == list(failed)
    # The worst output and the flagged frames are the same as measuring every frame.
    assert sampled.summary()["worst_distance_after"] == every_frame.summary()["worst_distance_after"]


def test_sampled_qa_embeds_a_fraction_and_reuses_the_original_face() -> None:
    sampled, analyser = _run_qa(range(0), frames=40, every=5)
    assert sampled.summary()["faces_checked"] == 8  # frames 0, 5, …, 35
    # Output faces: 8; the original face: on frame 0, reused up to 30 frames later, embedded again on frame 35.
    assert analyser.embedded == 8 + 2
    assert sampled.summary()["mean_distance_before"] == 1.0 and sampled.summary()["mean_distance_after"] == 0.0
    _, every_frame = _run_qa(range(0), frames=40, every=1)
    assert every_frame.embedded == 40 + 2  # the original on frames 0 and 31


def test_a_face_elsewhere_is_embedded_not_reused() -> None:
    analyser = _Analyser()
    qa = IdentityQA(analyser, np.array([1.0], np.float32), every=1)  # type: ignore[arg-type]
    frame = np.zeros((40, 80, 3), np.uint8)
    qa.check(0, frame, frame, [_face(0.0)])
    qa.check(1, frame, frame, [_face(50.0)])  # no overlap with the face of frame 0
    assert analyser.embedded == 4
