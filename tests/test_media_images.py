"""engine/media/images.py: decoding and encoding images with Pillow, their limits, and their warnings."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from mediakit import H, W, quadrants
from PIL import Image

from engine import media
from engine.core.errors import DiskFull, InvalidInput
from engine.media import probe
from engine.media.images import size_limit

pytest_plugins = ["mediafixtures"]


def test_read_image_applies_exif_orientation(tmp_path: Path) -> None:
    path = tmp_path / "phone.jpg"
    stored = quadrants(32, 48)  # 48 wide, 32 high as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    Image.fromarray(stored).save(path, quality=95, exif=exif)
    frame, alpha = media.read_image(path)
    assert frame.shape == (48, 32, 3)
    assert alpha is None
    assert np.abs(frame.astype(int) - np.rot90(stored, -1)).mean() < 4
    info = probe(path)
    assert (info.kind, info.width, info.height, info.rotation, info.format_name) == ("image", 32, 48, 270, "JPEG")


def test_read_image_cmyk_jpeg(tmp_path: Path) -> None:
    path = tmp_path / "print.jpg"
    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(path, quality=95)  # no cyan or black: red
    frame, alpha = media.read_image(path)
    assert frame.dtype == np.uint8 and frame.shape == (16, 16, 3)
    assert np.abs(frame.astype(int) - [255, 0, 0]).max() <= 3
    assert alpha is None


def test_read_image_16_bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    path = tmp_path / "deep.png"
    Image.fromarray(np.array([[65535, 32768, 257, 0]], dtype=np.uint16)).save(path)
    frame, _ = media.read_image(path)
    np.testing.assert_array_equal(frame[0, :, 0], [255, 128, 1, 0])
    np.testing.assert_array_equal(frame[..., 0], frame[..., 2])


def test_read_image_palette_png(tmp_path: Path) -> None:
    path = tmp_path / "palette.png"
    image = Image.new("P", (4, 2))
    image.putpalette([10, 20, 30, 200, 100, 50])
    image.putdata([0, 1, 0, 1, 1, 0, 1, 0])
    image.save(path)
    frame, alpha = media.read_image(path)
    assert alpha is None
    assert frame[0, 0].tolist() == [10, 20, 30]
    assert frame[0, 1].tolist() == [200, 100, 50]


def test_read_image_palette_transparency_gives_alpha(tmp_path: Path) -> None:
    path = tmp_path / "palette_alpha.png"
    image = Image.new("P", (2, 1))
    image.putpalette([10, 20, 30, 200, 100, 50])
    image.putdata([0, 1])
    image.save(path, transparency=0)
    frame, alpha = media.read_image(path)
    assert alpha is not None and alpha.tolist() == [[0, 255]]
    assert frame[0, 1].tolist() == [200, 100, 50]


@pytest.mark.parametrize("mode", ["L", "LA", "1"])
def test_read_image_greyscale_becomes_rgb(tmp_path: Path, mode: str) -> None:
    path = tmp_path / f"grey_{mode}.png"
    Image.new(mode, (3, 2), 1 if mode == "1" else (200 if mode == "L" else (200, 77))).save(path)
    frame, alpha = media.read_image(path)
    grey = 255 if mode == "1" else 200
    assert frame.shape == (2, 3, 3) and (frame == grey).all()
    assert (alpha is not None) == (mode == "LA")


def test_rgba_png_alpha_survives_a_round_trip(tmp_path: Path) -> None:
    source = tmp_path / "logo.png"
    rgba = np.random.default_rng(2).integers(0, 256, (H, W, 4), dtype=np.uint8)
    Image.fromarray(rgba).save(source)
    frame, alpha = media.read_image(source)
    assert alpha is not None
    np.testing.assert_array_equal(frame, rgba[..., :3])
    np.testing.assert_array_equal(alpha, rgba[..., 3])
    output = tmp_path / "out.png"
    media.write_image(output, frame, alpha)
    frame2, alpha2 = media.read_image(output)
    np.testing.assert_array_equal(frame2, frame)
    assert alpha2 is not None
    np.testing.assert_array_equal(alpha2, alpha)


def test_write_image_resizes_alpha_to_the_frame(tmp_path: Path) -> None:
    output = tmp_path / "upscaled.webp"
    frame = np.full((2 * H, 2 * W, 3), 90, np.uint8)
    media.write_image(output, frame, np.full((H, W), 200, np.uint8))
    back, alpha = media.read_image(output)
    assert back.shape == frame.shape
    assert alpha is not None and alpha.shape == (2 * H, 2 * W) and np.abs(alpha.astype(int) - 200).max() <= 2


def test_write_image_drops_alpha_for_jpeg(tmp_path: Path) -> None:
    output = tmp_path / "flat.jpg"
    media.write_image(output, np.full((H, W, 3), 90, np.uint8), np.zeros((H, W), np.uint8))
    assert media.read_image(output)[1] is None


@pytest.mark.parametrize("extension", [".png", ".jpg", ".jpeg", ".webp", ".tif"])
def test_image_metadata_round_trip(tmp_path: Path, extension: str) -> None:
    output = tmp_path / f"result{extension}"
    metadata = {"software": "facestudio 0.1", "facestudio_job": '{"seed": 1}', "note": "café"}
    media.write_image(output, np.full((H, W, 3), 90, np.uint8), metadata=metadata)
    assert media.read_image_metadata(output) == metadata
    assert probe(output).format_name == media.IMAGE_FORMATS[extension]
    assert [p.name for p in tmp_path.iterdir()] == [output.name]  # no temp file left


def test_write_image_bmp_has_no_metadata(tmp_path: Path) -> None:
    output = tmp_path / "plain.bmp"
    media.write_image(output, np.full((H, W, 3), 90, np.uint8), metadata={"k": "v"})
    assert media.read_image_metadata(output) == {}
    assert media.read_image(output)[0].shape == (H, W, 3)


def test_write_image_rejects_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"result\.gif"):
        media.write_image(tmp_path / "result.gif", np.zeros((H, W, 3), np.uint8))
    assert list(tmp_path.iterdir()) == []


def test_a_large_valid_image_warns_nobody(tmp_path: Path) -> None:
    """Pillow warns of a "decompression bomb" above 89 million pixels; the warning is logged, never shown."""
    path = tmp_path / "huge.png"
    Image.new("1", (9500, 9500)).save(path)  # 90 million pixels, 1 bit each: a small file, a valid image
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        info = probe(path)
        assert media.image_frame_count(path) == 1
    assert (info.width, info.height) == (9500, 9500)
    assert [str(w.message) for w in shown] == []


@pytest.mark.parametrize(
    ("image_format", "size", "reason"),
    [
        ("WEBP", (16384, 16), "WEBP images are at most 16383×16383 pixels"),
        ("JPEG", (16, 65501), "JPEG images are at most 65500×65500 pixels"),
        ("BMP", (40000, 40000), "BMP files hold at most 4 GiB of pixels"),
    ],
)
def test_size_limit_names_what_the_format_cannot_hold(image_format: str, size: tuple[int, int], reason: str) -> None:
    assert size_limit(image_format, *size) == reason
    assert size_limit(image_format, 16, 16) is None
    assert size_limit("PNG", 100_000, 16) is None and size_limit("TIFF", 70_000, 70_000) is None


def test_write_image_refuses_a_size_its_format_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"WEBP images are at most 16383×16383 pixels, this one is 16384×2"):
        media.write_image(tmp_path / "wide.webp", np.zeros((2, 16384, 3), np.uint8))
    assert list(tmp_path.iterdir()) == []


def test_an_image_onto_a_full_disk_is_disk_full_and_leaves_nothing(full_disk: Path) -> None:
    noise = np.random.default_rng(0).integers(0, 256, (800, 800, 3), dtype=np.uint8)  # 1.9 MB, barely compressible
    with pytest.raises(DiskFull, match=f"the disk of {full_disk} is full") as caught:
        media.write_image(full_disk / "noise.png", noise)
    assert caught.value.folder == full_disk
    assert list(full_disk.iterdir()) == []
