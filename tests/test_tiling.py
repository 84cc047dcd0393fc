"""Tile plans: cores partition the frame, windows are equal (batchable) and stay inside the padded frame."""

from __future__ import annotations

import numpy as np
import pytest

from processors.frame_enhancer import plan_tiles


@pytest.mark.parametrize(
    ("width", "height", "tile", "pad"),
    [(100, 50, 32, 4), (320, 180, 512, 20), (320, 180, 0, 20), (97, 33, 32, 10), (64, 64, 64, 0), (33, 200, 32, 36)],
)
def test_cores_partition_the_frame(width: int, height: int, tile: int, pad: int) -> None:
    tiles = plan_tiles(width, height, tile, pad)
    cover = np.zeros((height, width), np.int32)
    sizes = set()
    for t in tiles:
        x0, y0, x1, y1 = t.core
        cover[y0:y1, x0:x1] += 1
        wx0, wy0, wx1, wy1 = t.window
        sizes.add((wx1 - wx0, wy1 - wy0))
        assert wx0 >= 0 and wx1 <= width + 2 * pad and wy0 >= 0 and wy1 <= height + 2 * pad
        ox, oy = t.offset
        # the core sits inside its window with at least `pad` pixels of context where the frame has them
        assert wx0 + ox == x0 + pad and wy0 + oy == y0 + pad
        assert ox >= pad and oy >= pad and wx1 - (wx0 + ox + x1 - x0) >= 0
    assert (cover == 1).all()
    assert len(sizes) == 1


def test_whole_frame_is_one_tile() -> None:
    (t,) = plan_tiles(320, 180, 0, 20)
    assert t.window == (0, 0, 360, 220) and t.core == (0, 0, 320, 180) and t.offset == (20, 20)


def test_tiles_are_balanced_not_a_full_tile_plus_a_sliver() -> None:
    # 640 px with tile 512: two cores of 320 (computing 2 × 360 columns), not 512 + 128 (2 × 552 columns).
    tiles = plan_tiles(640, 360, 512, 20)
    assert [t.core for t in tiles] == [(0, 0, 320, 360), (320, 0, 640, 360)]
    assert [t.window for t in tiles] == [(0, 0, 360, 400), (320, 0, 680, 400)]
