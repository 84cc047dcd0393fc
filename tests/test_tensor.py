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


@pytest.mark.parametrize(
    "io",
    [
        IOSpec(),
        IOSpec(colour="BGR", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), output_range=(-1.0, 1.0)),
        IOSpec(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    ],
)
def test_both_directions_match_the_formula_for_every_convention(io: IOSpec) -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (3, 33, 17, 3), dtype=np.uint8)
    rgb = images.astype(np.float64) / 255
    if io.colour == "BGR":
        rgb = rgb[..., ::-1]
    want = ((rgb - np.array(io.mean)) / np.array(io.std)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(to_tensor(images, io), want, atol=1e-6)
    # The output side against the float32 formula: scale, clamp, round to nearest.
    lo, hi = io.output_range
    y = rng.uniform(lo - 0.5, hi + 0.5, (2, 3, 31, 9)).astype(np.float32)
    scaled = (y - np.float32(lo)) * np.float32(255.0 / (hi - lo))
    want_u8 = np.rint(np.clip(scaled, 0, 255)).astype(np.uint8).transpose(0, 2, 3, 1)
    if io.colour == "BGR":
        want_u8 = want_u8[..., ::-1]
    np.testing.assert_array_equal(from_tensor(y, io), want_u8)
