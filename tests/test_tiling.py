"""Tile plans: cores partition the frame, windows carry context only where the frame has pixels, whole frames
run without any, and the automatic tile size follows the memory budget."""

from __future__ import annotations

import numpy as np
import pytest

from processors.frame_enhancer import auto_tile, plan_tiles


@pytest.mark.parametrize(
    ("width", "height", "tile", "pad"),
    [(100, 50, 32, 4), (320, 180, 512, 20), (320, 180, 0, 20), (97, 33, 32, 10), (64, 64, 64, 0), (33, 200, 32, 36)],
)
def test_cores_partition_the_frame(width: int, height: int, tile: int, pad: int) -> None:
    tiles = plan_tiles(width, height, tile, pad)
    cover = np.zeros((height, width), np.int32)
    for t in tiles:
        x0, y0, x1, y1 = t.core
        cover[y0:y1, x0:x1] += 1
        wx0, wy0, wx1, wy1 = t.window
        assert 0 <= wx0 <= x0 and x1 <= wx1 <= width and 0 <= wy0 <= y0 and y1 <= wy1 <= height
        # `pad` pixels of context on every side that has them, and none invented beyond the frame.
        assert x0 - wx0 == min(pad, x0) and wx1 - x1 == min(pad, width - x1)
        assert y0 - wy0 == min(pad, y0) and wy1 - y1 == min(pad, height - y1)
        assert t.offset == (x0 - wx0, y0 - wy0)
    assert (cover == 1).all()


def test_whole_frame_is_one_tile_without_padding() -> None:
    (t,) = plan_tiles(320, 180, 0, 20)
    assert t.window == (0, 0, 320, 180) and t.core == (0, 0, 320, 180) and t.offset == (0, 0)


def test_tiles_are_balanced_not_a_full_tile_plus_a_sliver() -> None:
    # 640 px with tile 512: two cores of 320 (computing 2 × 340 columns), not 512 + 128.
    tiles = plan_tiles(640, 360, 512, 20)
    assert [t.core for t in tiles] == [(0, 0, 320, 360), (320, 0, 640, 360)]
    assert [t.window for t in tiles] == [(0, 0, 340, 360), (300, 0, 640, 360)]


def test_fixed_grid_waste_versus_ours() -> None:
    # 1080p in 512-px tiles with 20 px of context: 4 × 3 cores of 480 × 360, context on inner sides only.
    tiles = plan_tiles(1920, 1080, 512, 20)
    computed = sum((t.window[2] - t.window[0]) * (t.window[3] - t.window[1]) for t in tiles)
    assert len(tiles) == 12 and computed / (1920 * 1080) == pytest.approx((1920 + 120) * (1080 + 80) / (1920 * 1080))
    assert computed / (1920 * 1080) < 1.15


def test_auto_tile_is_the_whole_frame_when_it_fits() -> None:
    assert auto_tile(1920, 1080, 20, 1920 * 1080) == 0
    # Else the largest square window within the budget, less its context on both sides.
    assert auto_tile(1920, 1080, 20, 512 * 512) == 512 - 40
    assert auto_tile(1920, 1080, 20, 10) == 32
