"""Image files: the one place image pixels are decoded and encoded (Pillow), and what each format can hold.

Every frame that leaves here is a `Frame` (H×W×3 uint8 RGB), upright (EXIF orientation applied), with its alpha
channel apart. Pillow's own warnings (a DecompressionBombWarning for a large valid image, …) go to the log, not
to the terminal: the size limit a job enforces is its own `runtime.max_pixels`, with a one-line error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps, PngImagePlugin, UnidentifiedImageError

from engine.core.errors import InvalidInput, MediaError
from engine.core.types import Frame, check_frame
from engine.media.children import write_error
from engine.media.headers import check_file
from engine.media.info import MediaInfo

logger = logging.getLogger(__name__)

# Output extension -> Pillow format. Reading decides by content; only these formats count as images.
IMAGE_FORMATS: Mapping[str, str] = {
    ".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".bmp": "BMP", ".tif": "TIFF", ".tiff": "TIFF",
}  # fmt: skip
# The largest width and height each format stores: libjpeg's JPEG_MAX_DIMENSION, WebP's 14-bit sizes, PNG's and
# BMP's signed 32-bit ones. TIFF over 4 GiB is written as BigTIFF.
MAX_SIDE: Mapping[str, int] = {"JPEG": 65500, "WEBP": 16383, "PNG": 2**31 - 1, "BMP": 2**31 - 1, "TIFF": 2**32 - 1}
# BMP keeps its file size in 32 bits.
_BMP_MAX_BYTES = 2**32 - 1
_TIFF_CLASSIC_BYTES = 2**32 - 2**20  # classic TIFF's 32-bit offsets, less room for its tags
# The image formats that hold an alpha channel.
ALPHA_FORMATS = frozenset({"PNG", "WEBP", "TIFF"})
_EXIF_METADATA_FORMATS = frozenset({"JPEG", "WEBP", "TIFF"})

_EXIF_ORIENTATION = 0x0112
_EXIF_IMAGE_DESCRIPTION = 0x010E
_EXIF_SOFTWARE = 0x0131
_EXIF_IFD = 0x8769
_GPS_IFD = 0x8825
_EXIF_USER_COMMENT = 0x9286
_EXIF_PIXEL_WIDTH, _EXIF_PIXEL_HEIGHT = 0xA002, 0xA003
_ASCII_COMMENT = b"ASCII\0\0\0"
# Formats whose saver takes each kind of kept metadata (Pillow's `icc_profile=`, `exif=`, `xmp=`, `comment=`).
_ICC_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "TIFF"})
_XMP_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "TIFF"})
# PNG text keys that are the file's structure (Pillow lists its chunks beside the text), not what a user wrote.
_PNG_NOT_TEXT = frozenset(
    {
        "icc_profile",
        "exif",
        "xmp",
        "XML:com.adobe.xmp",
        "dpi",
        "gamma",
        "transparency",
        "aspect",
        "srgb",
        "chromaticity",
        "duration",
        "loop",
        "default_image",
    }
)
# EXIF orientation -> the rotation part of the transform, counter-clockwise degrees (the mirroring part of
# orientations 2, 4, 5 and 7 is applied by `read_image` but has no rotation to report).
_EXIF_ROTATION = {1: 0, 2: 0, 3: 180, 4: 180, 5: 90, 6: 270, 7: 270, 8: 90}


def size_limit(image_format: str, width: int, height: int, alpha: bool = False) -> str | None:
    """Why a width×height image cannot be stored as `image_format` (a Pillow format name), or None when it can."""
    side = MAX_SIDE.get(image_format)
    if side is not None and max(width, height) > side:
        return f"{image_format} images are at most {side}×{side} pixels"
    row = ((width * (4 if alpha else 3) + 3) // 4) * 4  # BMP rows are padded to 4 bytes
    if image_format == "BMP" and row * height + 54 > _BMP_MAX_BYTES:
        return "BMP files hold at most 4 GiB of pixels"
    return None


@contextlib.contextmanager
def _pillow() -> Iterator[None]:
    """Pillow calls with their warnings logged instead of printed. (`catch_warnings` swaps the process's warning
    handler for the duration: a warning another thread raises meanwhile is logged too, never lost.)"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        logger.info("Pillow: %s", warning.message)


def open_image(path: Path) -> Image.Image | None:
    """The file opened with Pillow when its content is one of our image formats, else None (try ffmpeg)."""
    try:
        with _pillow():
            image = Image.open(path)
    except Image.DecompressionBombError as exc:
        raise InvalidInput(f"{path} is too large to process safely ({exc})") from exc
    except (UnidentifiedImageError, OSError, ValueError):
        return None
    if image.format not in IMAGE_FORMATS.values():
        image.close()
        return None
    return image


def _load(path: Path, image: Image.Image) -> None:
    try:
        with _pillow():
            image.load()
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} is a damaged or cut-short {image.format} image ({exc}): re-export it") from exc


def image_info(path: Path, image: Image.Image) -> MediaInfo:
    """`probe`'s answer for an image opened by `open_image` (decoded once, so damage is found here)."""
    _load(path, image)
    orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
    width, height = image.size
    if orientation in (5, 6, 7, 8):  # these orientations include a quarter turn: display size is transposed
        width, height = height, width
    return MediaInfo(
        path=path,
        kind="image",
        width=width,
        height=height,
        frame_count=1,
        fps=0.0,
        fps_rational="0/1",
        duration=0.0,
        rotation=_EXIF_ROTATION.get(orientation, 0),
        has_audio=False,
        audio_codec=None,
        vfr=False,
        video_codec=None,
        pix_fmt=image.mode,
        format_name=str(image.format),
        time_base=Fraction(0),
        timestamps=(0,),
    )


def _open_existing_image(path: Path) -> Image.Image:
    """Open `path` with Pillow after the file checks, or raise InvalidInput saying which formats are read."""
    check_file(path)
    image = open_image(path)
    if image is None:
        raise InvalidInput(f"{path} is not an image Pillow can read: give a PNG, JPEG, WebP, BMP or TIFF file")
    return image


def image_frame_count(path: Path) -> int:
    """How many frames an image file holds: more than 1 for an animated WebP, PNG (APNG) or a multi-page TIFF,
    of which `read_image` gives the first only. Reads the file's structure, not its pixels."""
    path = Path(path)
    with _open_existing_image(path) as image, _pillow():
        return int(getattr(image, "n_frames", 1))


def read_image(path: Path) -> tuple[Frame, npt.NDArray[np.uint8] | None]:
    """Decode an image to a Frame plus its alpha channel; the one place image pixels are normalised.

    Returns (frame, alpha): frame is H×W×3 uint8 RGB, upright (EXIF orientation applied); alpha is H×W uint8
    (255 = opaque) when the image has transparency (RGBA, LA, palette or colour-key transparency), else None.
    Palette, greyscale, 1-bit, CMYK (converted without colour management) and other modes become RGB;
    16-bit greyscale is scaled to 8 bits with rounding (65535 -> 255, 32768 -> 128), not clipped. Pillow
    reduces 16-bit colour PNGs to 8 bits itself. Multi-frame files (animated WebP, multi-page TIFF) give their
    first frame. Raises InvalidInput for anything that is not a readable PNG/JPEG/WebP/BMP/TIFF.
    """
    path = Path(path)
    image = _open_existing_image(path)
    with image:
        _load(path, image)
        with _pillow():
            upright = ImageOps.exif_transpose(image)
            return _normalise(upright)


def _normalise(image: Image.Image) -> tuple[Frame, npt.NDArray[np.uint8] | None]:
    mode = image.mode
    if mode.startswith("I;16") or mode == "I":
        # 16-bit greyscale (Pillow's "I" too holds 16-bit PNG samples): round to the nearest 8-bit level.
        wide = np.clip(np.asarray(image, dtype=np.int64), 0, 65535)
        grey = ((wide * 255 + 32767) // 65535).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2), None
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        mode in ("P", "L", "RGB", "1") and "transparency" in image.info
    )
    if has_alpha:
        rgba = np.asarray(image.convert("RGBA"))
        return np.ascontiguousarray(rgba[:, :, :3]), np.ascontiguousarray(rgba[:, :, 3])
    if mode == "F":  # float samples: Pillow converts to RGB through 8-bit greyscale, clipping to 0–255
        image = image.convert("L")
    return np.array(image.convert("RGB"), dtype=np.uint8), None


@dataclass(frozen=True)
class ImageMetadata:
    """What an image says about itself beyond its pixels, as an output keeps it (`kept_metadata`).

    icc: its ICC colour profile (bytes); exif: its EXIF (orientation reset: `read_image` turns the pixels upright);
    xmp: its XMP packet; text: its PNG text chunks; comment: its JPEG comment; dpi: its resolution."""

    icc: bytes | None = None
    exif: bytes | None = None
    xmp: bytes | None = None
    text: Mapping[str, str] = field(default_factory=dict)
    comment: bytes | None = None
    dpi: tuple[float, float] | None = None

    def describe(self) -> list[str]:
        """What is kept, in words ("ICC profile", "EXIF", "2 text chunks" …), for notes and tests."""
        kinds = [name for name, value in (("ICC profile", self.icc), ("EXIF", self.exif), ("XMP", self.xmp),
                                          ("comment", self.comment)) if value]  # fmt: skip
        return kinds + ([f"{len(self.text)} text chunk{'s' if len(self.text) > 1 else ''}"] if self.text else [])


def kept_metadata(path: Path) -> ImageMetadata:
    """What of the image at `path` an output keeps: its ICC profile, EXIF (the camera, dates, GPS … with the
    orientation reset to upright), XMP, PNG text chunks, JPEG comment and resolution."""
    path = Path(path)
    image = _open_existing_image(path)
    with image:
        _load(path, image)  # a PNG's chunks after the image data are only seen once it is read
        info = image.info
        exif = image.getexif()
        if len(exif):
            exif[_EXIF_ORIENTATION] = 1
            for ifd in (_EXIF_IFD, _GPS_IFD):
                exif.get_ifd(ifd)  # read while the file is open, so `tobytes` writes them
        text = getattr(image, "text", {}) if image.format == "PNG" else {}
        xmp = info.get("xmp") or info.get("XML:com.adobe.xmp")
        dpi = info.get("dpi")
        return ImageMetadata(
            icc=info.get("icc_profile") or None,
            exif=exif.tobytes() if len(exif) else None,
            xmp=xmp.encode("utf-8") if isinstance(xmp, str) else xmp or None,
            text={str(k): str(v) for k, v in text.items() if k not in _PNG_NOT_TEXT},
            comment=info.get("comment") or None,
            dpi=(float(dpi[0]), float(dpi[1])) if isinstance(dpi, tuple) and len(dpi) == 2 else None,
        )


def write_image(
    path: Path,
    frame: Frame,
    alpha: npt.NDArray[np.uint8] | None = None,
    metadata: Mapping[str, str] | None = None,
    keep: ImageMetadata | None = None,
) -> Path:
    """Encode `frame` (H×W×3 uint8 RGB) to `path`, in the format its extension names, atomically.

    alpha: H'×W' uint8 (255 = opaque), resized to H×W when it differs (e.g. the frame was upscaled); kept for
        PNG, WebP and TIFF, dropped for JPEG and BMP, which cannot hold it.
    metadata: string key/values, written as PNG text chunks, or for JPEG/WebP/TIFF as EXIF: ImageDescription
        holds them all as a JSON object (EXIF's UserComment, when `keep` has an ImageDescription of its own) and
        Software holds metadata["software"] (default "facestudio"; `keep`'s own Software stays). BMP has no place
        for them. `read_image_metadata` reads them back.
    keep: the target's metadata to keep (`kept_metadata`): ICC profile, EXIF, XMP, text chunks, comment and
        resolution, each where the format holds it; `metadata` is added to it, never instead of it.
    JPEG and WebP are written at quality 95; TIFF over 4 GiB as BigTIFF. The file is written to
    `.<stem>.partial<suffix>` and renamed. Returns `path`. Raises InvalidInput for a size the format cannot
    store (`size_limit`), DiskFull when the disk fills up, InvalidInput or MediaError for other refusals.
    """
    path = Path(path)
    image_format = IMAGE_FORMATS.get(path.suffix.lower())
    if image_format is None:
        raise InvalidInput(f"cannot write image {path}: the extension must be one of {', '.join(IMAGE_FORMATS)}")
    check_frame(frame)
    height, width = frame.shape[:2]
    keeps_alpha = alpha is not None and image_format in ALPHA_FORMATS
    limit = size_limit(image_format, width, height, keeps_alpha)
    if limit is not None:
        raise InvalidInput(f"cannot write {path}: {limit}, this one is {width}×{height}")
    image = Image.fromarray(np.ascontiguousarray(frame))
    if alpha is not None:
        if alpha.dtype != np.uint8 or alpha.ndim != 2:
            raise TypeError(f"alpha is H×W uint8, got shape {alpha.shape} dtype {alpha.dtype}")
        if keeps_alpha:
            mask = Image.fromarray(np.ascontiguousarray(alpha))
            if mask.size != (width, height):
                mask = mask.resize((width, height), Image.Resampling.BILINEAR)
            image.putalpha(mask)
        else:
            logger.info("%s cannot hold transparency; %s is written opaque", image_format, path)
    pixel_bytes = width * height * (4 if keeps_alpha else 3)
    options = _save_options(image_format, metadata, pixel_bytes, path, keep, (width, height))
    if not path.parent.is_dir():
        raise InvalidInput(f"cannot write {path}: the folder {path.parent} does not exist")
    partial = partial_path(path)
    try:
        with _pillow():
            image.save(partial, format=image_format, **options)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        if exc.errno is not None:
            raise write_error(exc.errno, path, f"the image {path.name}") from None
        raise MediaError(f"Pillow cannot encode {path} as {image_format}: {exc}") from None
    except ValueError as exc:
        partial.unlink(missing_ok=True)
        raise MediaError(f"Pillow cannot encode {path} as {image_format}: {exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


def _save_options(
    image_format: str,
    metadata: Mapping[str, str] | None,
    pixel_bytes: int,
    path: Path,
    keep: ImageMetadata | None = None,
    size: tuple[int, int] | None = None,
) -> dict[str, Any]:
    options: dict[str, Any] = {}
    keep = keep or ImageMetadata()
    if image_format in ("JPEG", "WEBP"):
        options["quality"] = 95
    if image_format == "TIFF" and pixel_bytes > _TIFF_CLASSIC_BYTES:
        options["big_tiff"] = True
    if keep.icc and image_format in _ICC_FORMATS:
        options["icc_profile"] = keep.icc
    if keep.xmp and image_format in _XMP_FORMATS:
        options["xmp"] = keep.xmp
    if keep.comment and image_format == "JPEG":
        options["comment"] = keep.comment
    if keep.dpi and image_format != "WEBP":
        options["dpi"] = keep.dpi
    exif = Image.Exif()
    if keep.exif is not None:
        exif.load(keep.exif)
        sub = exif.get_ifd(_EXIF_IFD)
        if size is not None and _EXIF_PIXEL_WIDTH in sub:  # the size it records is the picture's, now the output's
            sub[_EXIF_PIXEL_WIDTH], sub[_EXIF_PIXEL_HEIGHT] = size
    if image_format == "PNG":
        text = PngImagePlugin.PngInfo()
        for key, value in {**keep.text, **(metadata or {})}.items():
            text.add_text(key, value)  # falls back to an iTXt chunk for text Latin-1 cannot hold
        options["pnginfo"] = text
        if len(exif):
            options["exif"] = exif
    elif image_format in _EXIF_METADATA_FORMATS:
        if metadata:
            stored = json.dumps(dict(metadata))  # ASCII: EXIF text fields are ASCII
            if str(exif.get(_EXIF_IMAGE_DESCRIPTION, "")).strip():
                exif.get_ifd(_EXIF_IFD)[_EXIF_USER_COMMENT] = _ASCII_COMMENT + stored.encode("ascii")
            else:
                exif[_EXIF_IMAGE_DESCRIPTION] = stored
            exif.setdefault(_EXIF_SOFTWARE, metadata.get("software", "facestudio"))
        if len(exif):
            options["exif"] = exif
    elif metadata or keep.describe():
        logger.info("%s cannot hold metadata; %s is written without it", image_format, path)
    return options


def partial_path(output: Path) -> Path:
    """Temp name next to `output` (same folder, so the final rename is atomic), with the same extension so
    encoders and Pillow pick the same format; the `.partial` marker names it as unfinished."""
    return output.with_name(f".{output.stem}.partial{output.suffix}")


def read_image_metadata(path: Path) -> dict[str, str]:
    """Key/values stored in an image: PNG text chunks, or the JSON object `write_image` puts in EXIF
    ImageDescription; for other EXIF images, their ImageDescription and Software fields when present."""
    path = Path(path)
    image = _open_existing_image(path)
    with image:
        if image.format == "PNG":
            _load(path, image)  # text chunks after the image data are only seen once it is read
            return {str(k): str(v) for k, v in getattr(image, "text", {}).items()}
        exif = image.getexif()
        comment = exif.get_ifd(_EXIF_IFD).get(_EXIF_USER_COMMENT)
    description = exif.get(_EXIF_IMAGE_DESCRIPTION)
    software = exif.get(_EXIF_SOFTWARE)
    for text in (description, comment[len(_ASCII_COMMENT) :] if isinstance(comment, bytes) else comment):
        stored = _json_object(text)
        if stored is not None:
            return stored
    found = {"ImageDescription": description, "Software": software}
    return {k: str(v) for k, v in found.items() if v is not None}


def _json_object(text: object) -> dict[str, str] | None:
    """`text` (str or ASCII bytes) as a JSON object of strings, or None when it is not one."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    if not isinstance(text, str):
        return None
    try:
        stored = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(stored, dict) and all(isinstance(v, str) for v in stored.values()):
        return {str(k): v for k, v in stored.items()}
    return None
