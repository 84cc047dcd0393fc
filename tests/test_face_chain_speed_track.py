"""The default face chain's per-track savings: colour statistics measured once per tracked face and lighting (the
output within a stated tolerance of per-frame statistics, pixels outside the face region unchanged), coarse
re-detection on a downscaled copy (faces where the full-resolution detection puts them, on the demo media), and
triangle warps that accumulate in place (bit-identical to before)."""

from __future__ import annotations

from functools import partial

import cv2
import numpy as np
import pytest

from engine.core.types import Face, Frame
from engine.faces import colour, landmark_swap, warp
from engine.faces.embedded import EmbeddedAnalyser
from engine.faces.tracking import COARSE_FACE_PX, FULL_EVERY, NEWCOMER, FaceTracker
from engine.media import demo


@pytest.fixture(scope="module")
def source(analyser: EmbeddedAnalyser) -> tuple[Frame, Face]:
    photo = demo.frames(480, 360, 1)[0]
    (face,) = analyser.detect(photo)
    return photo, face


def _relit(frame: Frame, gain: float) -> Frame:
    return np.clip(frame.astype(np.float32) * gain, 0, 255).astype(np.uint8)


def _swaps(
    analyser: EmbeddedAnalyser, source: tuple[Frame, Face], frames: list[Frame], tracks: colour.TrackColours | None
) -> list[Frame]:
    photo, face = source
    out = []
    for index, frame in enumerate(frames):
        (target,) = analyser.detect(frame)
        recolour = None if tracks is None else partial(tracks.transfer, index, target)
        out.append(landmark_swap.swap(photo, face.landmarks68, frame, target.landmarks68, recolour=recolour))
    return out


def test_colour_statistics_are_measured_once_per_shot_and_stay_close_to_per_frame(
    analyser: EmbeddedAnalyser, source: tuple[Frame, Face]
) -> None:
    clip = demo.frames(320, 240, 24)
    # Three shots: the clip's first 8 frames, the next 8 with the light dimmed by a fifth, then the light back.
    frames = clip[:8] + [_relit(f, 0.8) for f in clip[8:16]] + clip[16:]
    tracks = colour.TrackColours("reinhard")
    reused = _swaps(analyser, source, frames, tracks)
    assert tracks.measured == 3
    per_frame = _swaps(analyser, source, frames, None)
    for before, fast, slow in zip(frames, reused, per_frame, strict=True):
        diff = np.abs(fast.astype(int) - slow.astype(int))
        changed = np.any(slow != before, axis=2) | np.any(fast != before, axis=2)
        # Pixels the swap does not touch stay the frame's, bit for bit, either way.
        assert np.array_equal(fast[~changed], before[~changed])
        # Measured: at most 5 levels on a pixel, 0.6 on average over the face, PSNR ≥ 49 dB against per-frame
        # statistics (the frames the statistics were measured on are identical).
        psnr = 10 * np.log10(255**2 / max(float((diff[changed] ** 2).mean()), 1e-12))
        assert diff.max() <= 6 and diff[changed].mean() <= 0.7 and psnr >= 45.0, (diff.max(), psnr)


def test_colour_statistics_are_measured_again_for_another_face_or_after_a_second(
    analyser: EmbeddedAnalyser, source: tuple[Frame, Face]
) -> None:
    clip = demo.frames(320, 240, 4)
    tracks = colour.TrackColours("histogram")
    (target,) = analyser.detect(clip[0])
    photo, face = source
    texture = landmark_swap.swap(photo, face.landmarks68, clip[0], target.landmarks68)
    mask = np.ones(clip[0].shape[:2], np.float32)
    for index in range(colour.REUSE_FRAMES + 1):
        tracks.transfer(index, target, texture, clip[0], mask)
    assert tracks.measured == 1
    tracks.transfer(colour.REUSE_FRAMES + 1, target, texture, clip[0], mask)
    assert tracks.measured == 2  # a second old
    moved = Face(box=tuple(v + 200.0 for v in target.box), landmarks5=target.landmarks5, score=0.9)  # type: ignore[arg-type]
    tracks.transfer(colour.REUSE_FRAMES + 2, moved, texture, clip[0], mask)
    assert tracks.measured == 3  # not the face of the frame before: a new track or a cut
    other = Face(box=target.box, landmarks5=target.landmarks5, score=0.9, person=2)
    tracks.transfer(colour.REUSE_FRAMES + 3, other, texture, clip[0], mask)
    assert tracks.measured == 4  # another person at that place


def test_match_with_given_statistics_reads_no_target_and_equals_transfer() -> None:
    frames = demo.frames(160, 120, 2)
    mask = np.zeros((120, 160), np.float32)
    mask[20:100, 40:120] = 0.7
    for method in ("reinhard", "histogram"):
        out, stats = colour.match(frames[0], frames[1], mask, method)
        assert stats is not None and np.array_equal(out, colour.transfer(frames[0], frames[1], mask, method))
        again, same = colour.match(frames[0], np.zeros_like(frames[1]), mask, method, stats)
        assert same is stats and np.array_equal(again, out)
    with pytest.raises(ValueError, match="reinhard's, not histogram's"):
        colour.match(frames[0], frames[1], mask, "histogram", colour.match(frames[0], frames[1], mask, "reinhard")[1])


def test_mean_lab_of_a_flat_patch_is_its_colour() -> None:
    image = np.zeros((64, 64, 3), np.uint8)
    image[8:40, 8:40] = (200, 120, 90)
    mask = np.zeros((64, 64), np.float32)
    mask[8:40, 8:40] = 1.0
    lab = colour.mean_lab(image, mask)
    expected = colour.mean_lab(np.full((4, 4, 3), (200, 120, 90), np.uint8), None)
    assert np.allclose(lab, expected, atol=1e-4) and 58.0 < lab[0] < 58.6  # L* of (200, 120, 90): 58.3


class _Spy:
    """The analyser, recording the size of every frame it is asked to detect on."""

    def __init__(self, inner: EmbeddedAnalyser) -> None:
        self.inner = inner
        self.sizes: list[tuple[int, int]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def detect(self, frame: Frame) -> list[Face]:
        self.sizes.append(frame.shape[:2])
        return self.inner.detect(frame)


def test_coarse_detection_lands_where_the_full_one_does(analyser: EmbeddedAnalyser) -> None:
    # The demo face at 720p is about 320 px: a coarse re-detection scans a copy about half the size (where a face
    # of half the tracked one's side is 80 px) and re-fits each face on the full frame.
    for frame in demo.frames(1280, 720, 30)[::10]:
        (full,) = analyser.detect(frame)
        spy = _Spy(analyser)
        tracker = FaceTracker(spy, coarse=True)  # type: ignore[arg-type]
        (coarse,) = tracker._detect(frame, [full])
        side = full.box[2] - full.box[0]
        ((height, width),) = spy.sizes
        assert abs(width - 1280 * COARSE_FACE_PX / (NEWCOMER * side)) <= 1 and tracker.stats.coarse == 1
        # Measured: the 5 landmarks (what the model swappers align by) 0.9 px apart on average (0.3 % of the face),
        # the 68 1.4 px; the box edges 18 px (HOG's boxes step with its pyramid, by about 9 %).
        assert np.linalg.norm(coarse.landmarks5 - full.landmarks5, axis=1).mean() <= 0.006 * side
        assert np.linalg.norm(coarse.landmarks68 - full.landmarks68, axis=1).mean() <= 0.01 * side
        assert np.abs(np.array(coarse.box) - np.array(full.box)).max() <= 0.25 * side


def test_scheduled_redetections_are_coarse_but_every_third_is_full(analyser: EmbeddedAnalyser) -> None:
    frames = demo.frames(1280, 720, 31)
    spy = _Spy(analyser)
    tracker = FaceTracker(spy, redetect_every=10, coarse=True)  # type: ignore[arg-type]
    for frame in frames:
        (track,) = tracker.update(frame)
        assert not track.filled
    # Frame 0 (no track yet): full; frames 10 and 20: coarse; frame 30, the FULL_EVERY-th scheduled one: full.
    assert FULL_EVERY == 3
    assert [size == (720, 1280) for size in spy.sizes] == [True, False, False, True]
    assert all(height < 400 for height, _ in spy.sizes[1:3])
    assert tracker.stats.coarse == 2 and tracker.stats.detections == 4


def test_small_faces_are_detected_on_the_full_frame(analyser: EmbeddedAnalyser) -> None:
    # At 180p the demo face is about 80 px: a copy that would find half of it at 80 px is larger than the frame.
    spy = _Spy(analyser)
    tracker = FaceTracker(spy, redetect_every=5, coarse=True)  # type: ignore[arg-type]
    for frame in demo.frames(320, 180, 11):
        tracker.update(frame)
    assert spy.sizes == [(180, 320)] * 3 and tracker.stats.coarse == 0


def _warp_as_before(src: Frame, src_pts: np.ndarray, shape: tuple[int, int], dst_pts: np.ndarray, tris: np.ndarray):  # noqa: ANN202
    """warp_triangles as it was before one remap (each triangle warped over its bounding rectangle, overlaps
    averaged by their coverage) and before it accumulated in place."""
    h, w = shape
    out, cover, src_f = np.zeros((h, w, 3), np.float32), np.zeros((h, w), np.float32), src.astype(np.float32)
    for tri in tris:
        s, d = src_pts[tri].astype(np.float32), dst_pts[tri].astype(np.float32)
        x, y, bw, bh = cv2.boundingRect(d)
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + bw, w), min(y + bh, h)
        if x1 <= x0 or y1 <= y0:
            continue
        local = d - np.float32([x0, y0])
        patch = cv2.warpAffine(src_f, cv2.getAffineTransform(s, local), (x1 - x0, y1 - y0),
                               flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)  # fmt: skip
        tri_mask = np.zeros((y1 - y0, x1 - x0), np.float32)
        cv2.fillConvexPoly(tri_mask, np.round(local).astype(np.int32), 1.0, lineType=cv2.LINE_AA)
        keep = cover[y0:y1, x0:x1]
        take = tri_mask * (1.0 - keep)
        out[y0:y1, x0:x1] += patch * take[..., None]
        cover[y0:y1, x0:x1] = keep + take
    out = np.where(cover[..., None] > 0, out / np.maximum(cover, 1e-6)[..., None], 0.0)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8), np.clip(cover, 0.0, 1.0)


def test_triangle_warps_match_warping_each_triangle(analyser: EmbeddedAnalyser, source: tuple[Frame, Face]) -> None:
    """The one-remap warp against each triangle warped on its own, on the swaps of 640×360 demo frames (whole and
    half out of the frame): the same coverage bit for bit; pixels at most one level apart, and few of them."""
    photo, face = source
    calls = []

    def record(*args: object) -> object:
        calls.append(args)
        return warp.warp_triangles(*args)

    swap = landmark_swap.warp_triangles
    landmark_swap.warp_triangles = record  # type: ignore[assignment]
    try:
        for frame in demo.frames(640, 360, 9)[::4]:
            (target,) = analyser.detect(frame)
            landmark_swap.swap(photo, face.landmarks68, frame, target.landmarks68)
            # The same face half out of the frame: triangles clipped at its edge.
            landmark_swap.swap(photo, face.landmarks68, frame, target.landmarks68 - [300.0, 0.0])
    finally:
        landmark_swap.warp_triangles = swap
    assert len(calls) == 12
    for args in calls:
        new, old = warp.warp_triangles(*args), _warp_as_before(*args)  # type: ignore[arg-type]
        assert np.array_equal(new[1], old[1])
        differ = np.abs(new[0].astype(int) - old[0].astype(int))
        assert differ.max() <= 1 and np.count_nonzero(differ) <= 1e-3 * differ.size
        assert not new[0][old[1] == 0].any()  # nothing drawn where no triangle is
