"""The frame enhancer on real embedded weights: sizes, seamless tiles, scale below native, blend, batching."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.runtime import Runtime
from processors.frame_enhancer import FrameEnhancer, FrameEnhancerOptions


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    return Runtime(RuntimeSettings(device="cpu", batch=3))


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return demo.frames(width=70, height=46, count=2)


def enhance(runtime: Runtime, frames: list[np.ndarray], **options: object) -> list[np.ndarray]:
    processor = FrameEnhancer(FrameEnhancerOptions(**options), runtime)
    return processor.process(frames, [FrameContext(index=i) for i in range(len(frames))])


def test_native_scale_and_inputs_untouched(runtime: Runtime, frames: list[np.ndarray]) -> None:
    before = [f.copy() for f in frames]
    out = enhance(runtime, frames)
    assert [o.shape for o in out] == [(184, 280, 3)] * 2
    for f, b in zip(frames, before, strict=True):
        np.testing.assert_array_equal(f, b)


def test_tiles_leave_no_seams(runtime: Runtime, frames: list[np.ndarray]) -> None:
    # animevideov3's receptive field is 18 px and tiles carry 20 px of context, so tiling changes nothing but
    # float rounding: at most 1 of 255 anywhere, in particular along the tile borders (x = 32·4, y = 32·4).
    whole = enhance(runtime, frames, tile=0)
    tiled = enhance(runtime, frames, tile=32)
    for a, b in zip(whole, tiled, strict=True):
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1


def test_scale_below_native_is_a_resize_of_the_native_output(runtime: Runtime, frames: list[np.ndarray]) -> None:
    native = enhance(runtime, frames[:1])[0]
    (half,) = enhance(runtime, frames[:1], scale=2)
    assert half.shape == (92, 140, 3)
    np.testing.assert_array_equal(half, cv2.resize(native, (140, 92), interpolation=cv2.INTER_AREA))
    (odd,) = enhance(runtime, frames[:1], scale=1.5)
    assert odd.shape == (69, 105, 3)


def test_blend(runtime: Runtime, frames: list[np.ndarray]) -> None:
    (plain,) = enhance(runtime, frames[:1], scale=2, blend=0)
    np.testing.assert_array_equal(plain, cv2.resize(frames[0], (140, 92), interpolation=cv2.INTER_CUBIC))
    (full,) = enhance(runtime, frames[:1], scale=2, blend=100)
    (half,) = enhance(runtime, frames[:1], scale=2, blend=50)
    expected = np.rint(plain * 0.5 + full * 0.5)
    assert np.abs(half.astype(int) - expected.astype(int)).max() == 0


def test_batch_equals_one_by_one(runtime: Runtime, frames: list[np.ndarray]) -> None:
    batched = enhance(runtime, frames, tile=32)
    single = [enhance(runtime, [f], tile=32)[0] for f in frames]
    for a, b in zip(batched, single, strict=True):
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 1


def test_mixed_frame_sizes_in_one_batch(runtime: Runtime, frames: list[np.ndarray]) -> None:
    small = frames[0][:20, :30].copy()
    out = enhance(runtime, [frames[0], small], scale=2)
    assert out[0].shape == (92, 140, 3) and out[1].shape == (40, 60, 3)
