"""The one normalisation path: exact values for each I/O convention."""

from __future__ import annotations

import numpy as np
import pytest

from engine.models.manifest import IOSpec
from engine.models.tensor import from_tensor, to_tensor


def test_unit_range_rgb_round_trip_is_exact() -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    io = IOSpec()
    x = to_tensor(images, io)
    assert x.shape == (2, 3, 5, 7) and x.dtype == np.float32
    assert x[1, 2, 3, 4] == np.float32(images[1, 3, 4, 2]) / np.float32(255)
    np.testing.assert_array_equal(from_tensor(x, io), images)


def test_symmetric_range_bgr() -> None:
    io = IOSpec(colour="BGR", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), output_range=(-1.0, 1.0))
    image = np.array([[[255, 0, 51]]], dtype=np.uint8)[None]
    x = to_tensor(image, io)
    np.testing.assert_allclose(x[0, :, 0, 0], [51 / 255 * 2 - 1, -1.0, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(from_tensor(x, io), image)


def test_outputs_are_clamped_and_rounded() -> None:
    y = np.array([-0.3, 0.5, 1.4], dtype=np.float32).reshape(1, 3, 1, 1)
    np.testing.assert_array_equal(from_tensor(y, IOSpec())[0, 0, 0], [0, 128, 255])


def test_wrong_shapes_are_type_errors() -> None:
    with pytest.raises(TypeError, match="N×H×W×3 uint8"):
        to_tensor(np.zeros((4, 4, 3), np.uint8), IOSpec())
    with pytest.raises(TypeError, match="N×3×H×W"):
        from_tensor(np.zeros((1, 4, 2, 2), np.float32), IOSpec())
