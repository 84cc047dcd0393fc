"""Media input and output: probe, frame reader and writer (ffmpeg pipes), audio mux, image read/write.

This module is the one choke point where files enter and leave the engine:
- `probe` validates a target or source before any work starts and describes it (`MediaInfo`).
- `select` turns a job's span and frame rate into the exact frames to read (`Span`).
- `FrameReader` streams the frames of a video (or of a `Span` of it) through an ffmpeg pipe; `FrameWriter` streams
  frames into an H.264 or HEVC file, muxes the original audio, and only renames the result into place once it is
  verified.
- `read_image` / `write_image` are the only places where image files are decoded and encoded.

Every frame that crosses this module is a `Frame`: H×W×3 uint8 RGB. Video frames come out upright (the
container's rotation is applied) and images come out with their EXIF orientation applied.

ffmpeg is found with `find_ffmpeg` (system FFmpeg ≥ 5.1, else the binary that imageio-ffmpeg ships). ffprobe is
optional: without it, `probe` gets the same answers from ffmpeg alone.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import json
import logging
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps, PngImagePlugin, UnidentifiedImageError

from engine import ffmpeg_commands as cmd
from engine.errors import FacestudioError, InvalidInput, MediaError, TruncatedInput
from engine.types import Frame, check_frame

logger = logging.getLogger(__name__)

# Output extension -> Pillow format. Reading decides by content; only these formats count as images.
IMAGE_FORMATS: Mapping[str, str] = {
    ".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".bmp": "BMP", ".tif": "TIFF", ".tiff": "TIFF",
}  # fmt: skip
_ALPHA_FORMATS = frozenset({"PNG", "WEBP", "TIFF"})
_EXIF_METADATA_FORMATS = frozenset({"JPEG", "WEBP", "TIFF"})

_EXIF_ORIENTATION = 0x0112
_EXIF_IMAGE_DESCRIPTION = 0x010E
_EXIF_SOFTWARE = 0x0131
# EXIF orientation -> the rotation part of the transform, counter-clockwise degrees (the mirroring part of
# orientations 2, 4, 5 and 7 is applied by `read_image` but has no rotation to report).
_EXIF_ROTATION = {1: 0, 2: 0, 3: 180, 4: 180, 5: 90, 6: 270, 7: 270, 8: 90}

# `-fps_mode` appeared in FFmpeg 5.1; older system builds (Ubuntu 22.04 ships 4.4) cannot run our commands.
_MIN_FFMPEG_VERSION = (5, 1)
# Frame rate assumed only for a video whose packets carry no timing at all (raw elementary streams).
_FALLBACK_FPS = Fraction(25)
# How long a child ffmpeg gets to exit after being asked to stop, before it is killed.
_STOP_TIMEOUT_S = 5.0
# Error lines of a child's stderr kept for messages; the rest is read and dropped so the pipe never fills.
_KEPT_STDERR_LINES = 20
# AV_PKT_FLAG_DISCARD in framecrc's `F=` column: the packet is demuxed but decoders drop its frame.
_PACKET_FLAG_DISCARD = 0x4
_NOPTS = -(2**63)


@dataclass(frozen=True)
class MediaInfo:
    """What `probe` found in a target or source file.

    path: the file probed.
    kind: "image" (decoded with Pillow) or "video" (decoded with ffmpeg).
    width, height: display size in pixels, i.e. the size of the frames `FrameReader` / `read_image` return,
        after the rotation below has been applied.
    frame_count: exact number of frames: the video stream's packets counted one by one (packets the container
        marks as discarded excluded); 1 for an image.
    fps: frame_count / duration, frames per second (0.0 for an image).
    fps_rational: the same rate as an exact rational string ("30000/1001", "25/1") for the encoder, so that
        re-encoding frame_count frames gives the same duration; for variable-rate input this is the average
        rate, and every frame is still written once ("0/1" for an image).
    duration: seconds from the first frame's presentation time to the end of the last frame, which is given the
        median gap between frames (so a constant-rate clip of N frames at R fps lasts exactly N/R) (0.0 for an
        image).
    rotation: counter-clockwise degrees (0, 90, 180, 270) the stored frames are turned for display: upright
        frame = `np.rot90(stored, rotation // 90)`. From the container's display matrix, or an image's EXIF
        orientation.
    has_audio, audio_codec: whether the file has an audio stream, and the first one's ffmpeg codec name.
    vfr: True when the gaps between frame timestamps vary by more than one tick of the stream's time base
        (one tick absorbs the rounding of e.g. 29.97 fps in a millisecond time base).
    video_codec: ffmpeg codec name of the video stream ("h264"); None for an image.
    pix_fmt: ffmpeg pixel format of the video stream ("yuv420p"); for an image, its Pillow mode ("RGB", "I;16").
    format_name: ffmpeg's container name ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"); for an image, its
        Pillow format ("PNG", "JPEG", "WEBP", "BMP", "TIFF").
    time_base: seconds per tick of the video stream's timestamps (1/12800, 1/1000 …; for a video whose packets
        carry no timing, 1/25 with one tick per frame); 0 for an image.
    timestamps: presentation time of each frame, in `time_base` ticks counted from the first frame, ascending
        (frame_count entries; `(0,)` for an image). `select` counts the frames of a span with them.
    color_transfer: ffmpeg's name of the video stream's transfer characteristic ("bt709", "smpte2084" for HDR10
        PQ, "arib-std-b67" for HLG); "unknown" when the file does not say, and for an image.
    """

    path: Path
    kind: Literal["image", "video"]
    width: int
    height: int
    frame_count: int
    fps: float
    fps_rational: str
    duration: float
    rotation: int
    has_audio: bool
    audio_codec: str | None
    vfr: bool
    video_codec: str | None
    pix_fmt: str
    format_name: str
    time_base: Fraction
    timestamps: tuple[int, ...] = field(repr=False)
    color_transfer: str = "unknown"


# ---------------------------------------------------------------------------------------------------------------
# Finding ffmpeg and ffprobe


def find_ffmpeg() -> str:
    """Path of the ffmpeg executable to run.

    `FACESTUDIO_FFMPEG` when set; else `ffmpeg` on PATH when it is FFmpeg 5.1 or newer (older builds lack
    `-fps_mode` and are skipped with a warning); else the binary bundled with the imageio-ffmpeg package.
    """
    override = os.environ.get("FACESTUDIO_FFMPEG")
    if override:
        return _executable_override("FACESTUDIO_FFMPEG", override)
    system = shutil.which("ffmpeg")
    if system is not None:
        version = _ffmpeg_version(system)
        if version is None or version >= _MIN_FFMPEG_VERSION:
            return system
        logger.warning("ignoring %s: FFmpeg %d.%d is older than 5.1; using imageio-ffmpeg's FFmpeg", system, *version)
    try:
        import imageio_ffmpeg  # imported here: only needed when the system has no usable ffmpeg

        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except (ImportError, RuntimeError) as exc:
        raise MediaError(
            "no usable ffmpeg found: install FFmpeg 5.1 or newer, `pip install imageio-ffmpeg`, "
            "or set FACESTUDIO_FFMPEG to an ffmpeg executable"
        ) from exc


def find_ffprobe(ffmpeg: str | None = None) -> str | None:
    """Path of the ffprobe executable, or None when there is none (then ffmpeg alone is used).

    `FACESTUDIO_FFPROBE` when set (the value `none` forces the ffmpeg-only path); else ffprobe in the folder of
    `ffmpeg` (the executable `find_ffmpeg` chose, looked up here when None); else ffprobe on PATH.
    """
    override = os.environ.get("FACESTUDIO_FFPROBE")
    if override:
        if override.lower() == "none":
            return None
        return _executable_override("FACESTUDIO_FFPROBE", override)
    chosen = Path(ffmpeg if ffmpeg is not None else find_ffmpeg())
    sibling = chosen.with_name("ffprobe.exe" if chosen.suffix.lower() == ".exe" else "ffprobe")
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return str(sibling)
    return shutil.which("ffprobe")


def available_encoders(ffmpeg: str) -> frozenset[str]:
    """Names of the encoders `ffmpeg` was built with ("libx264", "aac", …)."""
    try:
        done = _ask(ffmpeg, tuple(cmd.encoders_args(ffmpeg)))
    except OSError as exc:
        raise MediaError(f"cannot run {ffmpeg}: {exc.strerror}") from exc
    if done.returncode != 0:
        raise MediaError(f"{ffmpeg} -encoders failed: {_first_error(done.stderr, Path(ffmpeg))}")
    lines = done.stdout.splitlines()
    # The legend ends at a line of dashes; each line after it is "flags name description".
    start = next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("---")), len(lines))
    return frozenset(line.split()[1] for line in lines[start:] if len(line.split()) >= 2)


def check_encoder(encoder: str, ffmpeg: str | None = None) -> None:
    """Raise InvalidInput, naming the encoder and what to do, when `ffmpeg` (default: `find_ffmpeg()`) was built
    without the video encoder `encoder` (one of `ffmpeg_commands.VIDEO_ENCODERS`)."""
    ffmpeg = ffmpeg if ffmpeg is not None else find_ffmpeg()
    available = available_encoders(ffmpeg)
    if encoder in available:
        return
    others = [e for e in cmd.VIDEO_ENCODERS if e != encoder and e in available]
    instead = f", or choose video.encoder={others[0]}" if others else ""
    raise InvalidInput(
        f"the ffmpeg in use ({ffmpeg}) has no {encoder} encoder: install an FFmpeg built with {encoder} "
        f"(imageio-ffmpeg's has it) and point FACESTUDIO_FFMPEG at it{instead}"
    )


def _executable_override(variable: str, value: str) -> str:
    resolved = shutil.which(value)
    if resolved is None:
        raise InvalidInput(f"{variable}={value} is not an executable file: fix or unset {variable}")
    return resolved


def _ffmpeg_version(ffmpeg: str) -> tuple[int, int] | None:
    """(major, minor) from `ffmpeg -version`, or None when the build does not say (git builds: "N-…")."""
    try:
        out = _ask(ffmpeg, (ffmpeg, "-version"))
    except OSError:
        return None
    match = re.match(r"\S+ version n?(\d+)\.(\d+)", out.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _ask(executable: str, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """The output of `args`, a question about what `executable` can do (its version, its encoders), asked once
    per version of the file in this process: a run asks several times and each answer costs 80–130 ms."""
    stat = os.stat(executable)
    return _asked(args, stat.st_size, stat.st_mtime_ns)


# The one memo of this module: answers about executables, keyed by their arguments and the file's size and
# modification time (a replaced binary is asked again); it holds nothing of any job.
@functools.lru_cache(maxsize=32)
def _asked(args: tuple[str, ...], size: int, mtime_ns: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, errors="replace", check=False)


# ---------------------------------------------------------------------------------------------------------------
# Probing


@dataclass(frozen=True)
class _Stream:
    """One stream as ffprobe or `ffmpeg -i` describes it; rotation in counter-clockwise degrees, 0/90/180/270."""

    index: int
    kind: str
    codec: str
    pix_fmt: str
    width: int
    height: int
    rotation: int
    attached_pic: bool
    color_transfer: str = "unknown"


@dataclass(frozen=True)
class _Header:
    format_name: str
    tags: dict[str, str]
    streams: tuple[_Stream, ...]


@dataclass(frozen=True)
class _Packet:
    """A packet of the video stream: pts and duration in time-base ticks (pts None when unknown)."""

    pts: int | None
    duration: int
    discard: bool


def probe(path: Path) -> MediaInfo:
    """Validate a target or source file and describe it; the one place where input files are checked.

    Images (PNG, JPEG, WebP, BMP, TIFF, recognised by content, not extension) are probed with Pillow and fully
    decoded once. Anything else goes to ffprobe, or to ffmpeg alone when there is no ffprobe; both give the
    same `MediaInfo`. Frames are counted packet by packet, so `frame_count` is exact, not an estimate.

    Raises InvalidInput, with a one-line message naming the path, when the file is missing, empty, a folder,
    unreadable, not an image or video, or has no video stream (an audio file, say); TruncatedInput, naming the
    expected and present frame counts, for an MP4/MOV cut short (its index lists frames the file lacks).
    Damage that only decoding reveals is reported by `FrameReader`.
    """
    return _probe(Path(path), None)


def _probe(path: Path, ffmpeg: str | None) -> MediaInfo:
    """`probe`, reusing an ffmpeg path the caller has already found (finding one runs `ffmpeg -version`)."""
    _check_file(path)
    image = _open_image(path)
    if image is not None:
        with image:
            return _image_info(path, image)
    ffmpeg = ffmpeg if ffmpeg is not None else find_ffmpeg()
    ffprobe = find_ffprobe(ffmpeg)
    if ffprobe is not None:
        data = _run_ffprobe(cmd.ffprobe_probe_args(ffprobe, path), path)
        header = _header_from_ffprobe(data)
        video = _video_stream(path, header)
        packets, time_base = _packets_from_ffprobe(data, video.index)
    else:
        count = _run(cmd.ffmpeg_count_args(ffmpeg, path))
        header = _header_from_ffmpeg(count.stderr, path)
        video = _video_stream(path, header)
        if count.returncode != 0:
            raise InvalidInput(f"cannot read the video stream of {path}: {_first_error(count.stderr, path)}")
        packets, time_base = _packets_from_framecrc(count.stdout)
    return _video_info(path, header, video, packets, time_base)


def read_video_metadata(path: Path) -> dict[str, str]:
    """The container-level tags of a video ("title", custom keys written by `FrameWriter`, …), as strings.

    Keys are lower-cased: ffmpeg treats tag names case-insensitively, and Matroska stores them upper-case, so
    a key written as "synthetic" reads back as "synthetic" from MP4, MOV and MKV alike.
    """
    return {key.lower(): value for key, value in _read_header(Path(path), find_ffmpeg()).tags.items()}


def _check_file(path: Path) -> None:
    if not path.exists():
        raise InvalidInput(f"{path} does not exist: check the path")
    if path.is_dir():
        raise InvalidInput(f"{path} is a folder, not an image or video file")
    if not path.is_file():
        raise InvalidInput(f"{path} is not a regular file: give an image or video file")
    if path.stat().st_size == 0:
        raise InvalidInput(f"{path} is empty (0 bytes): re-export or re-download it")
    if not os.access(path, os.R_OK):
        raise InvalidInput(f"{path} cannot be read: check its permissions")


def _read_header(path: Path, ffmpeg: str) -> _Header:
    """Container and stream description without reading packets (fast even for long videos)."""
    _check_file(path)
    ffprobe = find_ffprobe(ffmpeg)
    if ffprobe is not None:
        return _header_from_ffprobe(_run_ffprobe(cmd.ffprobe_header_args(ffprobe, path), path))
    # ffmpeg with no output file always exits 1; whether it could read the input shows in what it printed.
    return _header_from_ffmpeg(_run(cmd.ffmpeg_header_args(ffmpeg, path)).stderr, path)


def _run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, errors="replace", check=False)
    except OSError as exc:
        raise MediaError(f"cannot run {args[0]}: {exc.strerror}") from exc


def _run_ffprobe(args: Sequence[str], path: Path) -> dict[str, Any]:
    done = _run(args)
    if done.returncode != 0:
        raise InvalidInput(_unreadable_message(path, _first_error(done.stderr, path)))
    try:
        data: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise MediaError(f"ffprobe printed invalid JSON for {path}: {exc}") from exc
    return data


def _unreadable_message(path: Path, reason: str) -> str:
    return f"cannot read {path} as an image or video ({reason}): check that the file is complete and is media"


_DUMP_LINE = re.compile(r"^(\s|Input #|Output #|Stream mapping:)")


def _first_error(stderr: str, path: Path) -> str:
    """First error line of an ffmpeg/ffprobe log, without the `[demuxer @ 0x…]` and `path:` prefixes; the
    stream description ffmpeg prints at its default log level is skipped."""
    for raw in stderr.splitlines():
        if _DUMP_LINE.match(raw):
            continue
        line = re.sub(r"^(\[[^]]*\]\s*)+", "", raw.strip()).removeprefix(f"{path}: ")
        if line:
            return line
    return "no error message"


def _rotation(angle: float) -> int:
    """Display-matrix angle (counter-clockwise degrees) -> 0/90/180/270; ffmpeg's autorotate, like this,
    ignores angles more than a degree away from a multiple of 90."""
    nearest = round(angle / 90) * 90
    return nearest % 360 if abs(angle - nearest) < 1 else 0


def _header_from_ffprobe(data: Mapping[str, Any]) -> _Header:
    streams = []
    for s in data.get("streams", []):
        rotation = next((float(sd["rotation"]) for sd in s.get("side_data_list", []) if "rotation" in sd), 0.0)
        streams.append(
            _Stream(
                index=int(s["index"]),
                kind=str(s.get("codec_type", "")),
                codec=str(s.get("codec_name", "none")),
                pix_fmt=str(s.get("pix_fmt", "none")),
                width=int(s.get("width", 0)),
                height=int(s.get("height", 0)),
                rotation=_rotation(rotation),
                attached_pic=bool(s.get("disposition", {}).get("attached_pic", 0)),
                color_transfer=str(s.get("color_transfer", "unknown")),
            )
        )
    fmt = data.get("format", {})
    tags = {str(k): str(v) for k, v in fmt.get("tags", {}).items()}
    return _Header(format_name=str(fmt.get("format_name", "")), tags=tags, streams=tuple(streams))


_INPUT_LINE = re.compile(r"^Input #0, (.+?), from '")
_STREAM_LINE = re.compile(r"^\s+Stream #0:(\d+)\S*: (\w+): (.*)$")
_SIZE = re.compile(r"^(\d+)x(\d+)\b")
_TAG_LINE = re.compile(r"^ {4}(\S.*?)\s*: ?(.*)$")
_TAG_CONTINUATION = re.compile(r"^ {4}\s+: ?(.*)$")
_ROTATION_LINE = re.compile(r"display ?matrix: rotation of (-?[\d.]+) degrees", re.IGNORECASE)


def _header_from_ffmpeg(stderr: str, path: Path) -> _Header:
    """Parse the `Input #0` section ffmpeg prints on stderr (the part ffprobe would give as JSON)."""
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if _INPUT_LINE.match(line)), None)
    if start is None:
        raise InvalidInput(_unreadable_message(path, _first_error(stderr, path)))
    format_name = _INPUT_LINE.match(lines[start]).group(1)  # type: ignore[union-attr]
    tags: dict[str, str] = {}
    streams: list[_Stream] = []
    in_container_tags = False  # inside the "  Metadata:" block at indent 2, which holds the container's tags
    last_key: str | None = None
    for line in lines[start + 1 :]:
        if not line.startswith(" "):  # "Stream mapping:", "Output #0", error lines: the input section is over
            break
        stream = _STREAM_LINE.match(line)
        if stream is not None:
            streams.append(_stream_from_ffmpeg(int(stream.group(1)), stream.group(2).lower(), stream.group(3)))
            continue
        rotation = _ROTATION_LINE.search(line)
        if rotation is not None and streams:
            streams[-1] = replace(streams[-1], rotation=_rotation(float(rotation.group(1))))
            continue
        if not line.startswith("   "):  # indent 2: a new block ("  Metadata:", "  Duration:", "  Chapters:", …)
            in_container_tags = line == "  Metadata:" and not streams
            last_key = None
            continue
        if not in_container_tags:
            continue
        # Tags sit at indent 4 as "key : value"; a multi-line value continues on lines with an empty key.
        continuation = _TAG_CONTINUATION.match(line)
        tag = _TAG_LINE.match(line)
        if continuation is not None and last_key is not None:
            tags[last_key] += "\n" + continuation.group(1)
        elif tag is not None:
            last_key = tag.group(1)
            tags[last_key] = tag.group(2)
    return _Header(format_name=format_name, tags=tags, streams=tuple(streams))


def _split_top_level(text: str) -> list[str]:
    """Split a stream description on ", " outside parentheses and brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0 and text[i + 1 : i + 2] == " ":
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _stream_from_ffmpeg(index: int, kind: str, description: str) -> _Stream:
    """`h264 (High) (avc1 / 0x31637661), yuv420p(progressive), 64x48 [SAR 1:1 DAR 4:3], 25 fps, … (default)`."""
    parts = _split_top_level(description)
    codec = parts[0].split()[0] if parts[0] else "none"
    width = height = 0
    pix_fmt = "none"
    transfer = "unknown"
    if kind == "video":
        sizes = [m for m in (_SIZE.match(p) for p in parts[1:]) if m is not None]
        if sizes:
            width, height = int(sizes[0].group(1)), int(sizes[0].group(2))
        if len(parts) > 1 and not _SIZE.match(parts[1]):
            pix_fmt = parts[1].split("(")[0].strip()
            transfer = _transfer_from_ffmpeg(parts[1])
    return _Stream(index, kind, codec, pix_fmt, width, height, 0, "(attached pic)" in description, transfer)


def _transfer_from_ffmpeg(pixel_format: str) -> str:
    """The transfer characteristic in `yuv420p10le(tv, bt2020nc/bt2020/smpte2084, progressive)`.

    ffmpeg writes the range (tv/pc), then colour space/primaries/transfer (one name when the three are equal),
    then the field order ("progressive", or words with spaces such as "top first")."""
    _, _, inside = pixel_format.partition("(")
    for item in inside.rstrip(")").split(", "):
        names = item.split("/")
        if len(names) == 3:
            return names[2]
        if item not in ("tv", "pc", "progressive") and " " not in item and item:
            return item
    return "unknown"


def _video_stream(path: Path, header: _Header) -> _Stream:
    video = next((s for s in header.streams if s.kind == "video" and not s.attached_pic), None)
    if video is None:
        if any(s.kind == "audio" for s in header.streams):
            raise InvalidInput(f"{path} has no video stream, only audio: give a video or an image")
        raise InvalidInput(f"{path} has no video stream: give a video or an image")
    return video


def _parse_rational(text: str) -> Fraction:
    num, _, den = text.strip().partition("/")
    return Fraction(int(num), int(den or 1))


def _packets_from_ffprobe(data: Mapping[str, Any], index: int) -> tuple[list[_Packet], Fraction]:
    stream = next(s for s in data["streams"] if int(s["index"]) == index)
    packets = [
        _Packet(
            pts=int(p["pts"]) if "pts" in p else None,
            duration=int(p.get("duration", 0)),
            discard="D" in str(p.get("flags", "")),
        )
        for p in data.get("packets", [])
        if int(p.get("stream_index", -1)) == index
    ]
    return packets, _parse_rational(stream["time_base"])


def _packets_from_framecrc(text: str) -> tuple[list[_Packet], Fraction]:
    """Parse `#tb 0: 1/12800` and `0, dts, pts, duration, size, crc[, F=0x…]` lines."""
    time_base: Fraction | None = None
    packets = []
    for line in text.splitlines():
        if line.startswith("#tb 0:"):
            time_base = _parse_rational(line.split(":", 1)[1])
        elif line and not line.startswith("#"):
            fields = [f.strip() for f in line.split(",")]
            flags = int(fields[6][2:], 16) if len(fields) > 6 and fields[6].startswith("F=") else 0
            pts = int(fields[2])
            packets.append(
                _Packet(pts=None if pts == _NOPTS else pts, duration=int(fields[3]),
                        discard=bool(flags & _PACKET_FLAG_DISCARD))
            )  # fmt: skip
    if time_base is None:
        raise MediaError("ffmpeg's framecrc output has no time base line")
    return packets, time_base


def _timing(packets: Sequence[_Packet], time_base: Fraction) -> tuple[Fraction, bool, tuple[int, ...], Fraction]:
    """(duration in seconds, variable frame rate?, frame timestamps, their time base) from the kept packets'
    presentation timestamps; the timestamps are ticks from the first frame, ascending (`MediaInfo.timestamps`).

    The last frame lasts the median gap between frames. Its own packet duration is not used: ffmpeg's stream
    copy rewrites packet durations from decode-order timestamps in some versions and not in others, which
    would make the ffprobe and ffmpeg-only answers differ for variable-rate files.
    """
    pts = sorted(p.pts for p in packets if p.pts is not None)
    if len(pts) == len(packets) and len(pts) >= 2:
        gaps = [b - a for a, b in itertools.pairwise(pts)]
        ticks = pts[-1] - pts[0] + round(statistics.median(gaps))
        if ticks > 0:
            return ticks * time_base, max(gaps) - min(gaps) > 1, tuple(t - pts[0] for t in pts), time_base
    elif len(packets) == 1 and packets[0].duration > 0:
        return packets[0].duration * time_base, False, (0,), time_base
    logger.warning("video packets carry no usable timing; assuming %s fps", _FALLBACK_FPS)
    # Frame i at i / 25 s: the timestamps that go with the duration assumed here.
    return len(packets) / _FALLBACK_FPS, False, tuple(range(len(packets))), 1 / _FALLBACK_FPS


def _video_info(
    path: Path, header: _Header, video: _Stream, packets: Sequence[_Packet], time_base: Fraction
) -> MediaInfo:
    if "mp4" in header.format_name.split(","):
        declared = _frames_declared_by_cut_mp4(path)
        if declared is not None and declared > len(packets):
            raise TruncatedInput(
                f"{path} is cut short (expected {declared} frames, the file holds {len(packets)}): "
                "re-export or re-download it"
            )
    kept = [p for p in packets if not p.discard]
    if not kept:
        raise InvalidInput(f"{path} has a video stream with no frames in it: re-export or re-download it")
    duration, vfr, timestamps, timestamp_base = _timing(kept, time_base)
    # Denominators up to 1001 hold every broadcast rate (24000/1001, 30000/1001 …) exactly; the error this
    # rounding adds to a variable-rate average is far below one frame over any realistic length.
    rate = (len(kept) / duration).limit_denominator(1001)
    audio = next((s for s in header.streams if s.kind == "audio"), None)
    quarter_turn = video.rotation in (90, 270)
    return MediaInfo(
        path=path,
        kind="video",
        width=video.height if quarter_turn else video.width,
        height=video.width if quarter_turn else video.height,
        frame_count=len(kept),
        fps=float(len(kept) / duration),
        fps_rational=f"{rate.numerator}/{rate.denominator}",
        duration=float(duration),
        rotation=video.rotation,
        has_audio=audio is not None,
        audio_codec=audio.codec if audio is not None else None,
        vfr=vfr,
        video_codec=video.codec,
        pix_fmt=video.pix_fmt,
        format_name=header.format_name,
        time_base=timestamp_base,
        timestamps=timestamps,
        color_transfer=video.color_transfer,
    )


def _frames_declared_by_cut_mp4(path: Path) -> int | None:
    """For an MP4/MOV file that ends before its last top-level box does (a cut download or copy), the sample
    count the index (`moov`) declares for its first video track; None when the file is whole or it is unknown.

    ffmpeg reads a cut file without failing: it just stops at the last complete frame. Comparing with the
    index is the only way to tell, and the same in the ffprobe and the ffmpeg-only path. Only a cut file is
    compared: in a whole one, an edit list may legitimately hide samples the index lists (a trimmed clip).
    """
    size = path.stat().st_size
    moov: bytes | None = None
    cut = False
    with path.open("rb") as f:
        offset = 0
        while offset + 8 <= size:
            f.seek(offset)
            head = f.read(16)
            box_size, box_type = struct.unpack(">I4s", head[:8])
            header = 8
            if box_size == 1:  # 64-bit size follows the type
                if len(head) < 16:
                    cut = True
                    break
                box_size, header = struct.unpack(">Q", head[8:16])[0], 16
            elif box_size == 0:  # the box runs to the end of the file
                box_size = size - offset
            if box_size < header:
                return None  # not a box structure we understand
            if offset + box_size > size:
                cut = True
                break
            if box_type == b"moov":
                f.seek(offset + header)
                moov = f.read(box_size - header)
            offset += box_size
    if not cut or moov is None:
        return None
    for trak in _boxes(moov, b"trak"):
        mdia = next(_boxes(trak, b"mdia"), b"")
        handler = next(_boxes(mdia, b"hdlr"), b"")
        if handler[8:12] != b"vide":  # hdlr: version/flags (4), pre_defined (4), handler_type (4)
            continue
        stbl = next(_boxes(next(_boxes(mdia, b"minf"), b""), b"stbl"), b"")
        sizes = next(_boxes(stbl, b"stsz"), None) or next(_boxes(stbl, b"stz2"), None)
        # stsz: version/flags, sample_size, sample_count; stz2: version/flags, reserved + field_size, sample_count
        return struct.unpack(">I", sizes[8:12])[0] if sizes is not None and len(sizes) >= 12 else None
    return None


def _boxes(data: bytes, wanted: bytes) -> Iterator[bytes]:
    """Payloads of the ISO BMFF boxes of type `wanted` directly inside `data`."""
    offset = 0
    while offset + 8 <= len(data):
        box_size, box_type = struct.unpack(">I4s", data[offset : offset + 8])
        header = 8
        if box_size == 1 and offset + 16 <= len(data):
            box_size, header = struct.unpack(">Q", data[offset + 8 : offset + 16])[0], 16
        elif box_size == 0:
            box_size = len(data) - offset
        if box_size < header:
            return
        if box_type == wanted:
            yield data[offset + header : offset + box_size]
        offset += box_size


# ---------------------------------------------------------------------------------------------------------------
# Spans: the part of a video a job reads, and its output rate


def output_rate(fps: float) -> Fraction:
    """The exact output rate, frames per second, for a rate given as a number (a setting, `--set video.fps=…`).

    Within 0.005 of an NTSC rate n·1000/1001 (23.976, 29.97, 59.94 …), and nearer it than n, it is that rate, as
    a user typing 29.97 means, so a 30000/1001 target is not resampled; otherwise the decimal as written
    (12.5 -> 25/2), its denominator kept to 1001 or less.
    """
    if not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"a frame rate must be a positive number, got {fps}")
    whole = round(fps * 1.001)
    ntsc = Fraction(whole * 1000, 1001)
    # Closer to the NTSC rate than to the whole number: at low rates the two are under 0.005 apart.
    if whole > 0 and abs(fps - ntsc) < min(0.005, abs(fps - whole)):
        return ntsc
    return Fraction(str(fps)).limit_denominator(1001)


@dataclass(frozen=True)
class Span:
    """Which frames of a video `FrameReader` yields and the rate they are written at; made by `select`.

    start, end: seconds from the video's first frame, end exclusive; end None = the span runs to the end of the
        video. Both lie on the video stream's time base (`start` is the first tick at or after the asked start).
    start_pts, end_pts: the same, in time-base ticks (`MediaInfo.timestamps` units).
    rate: output frames per second, exact; `fps_rational` writes it for the encoder ("12/1", "30000/1001").
    resample: whether the ffmpeg `fps` filter makes that rate. Without it every frame of the span comes out
        once; with it output frame k shows the frame on screen at start + k / rate.
    frames: how many frames the reader yields: exact, except for a resampled span that runs to the end of the
        video, where ffmpeg's idea of the last frame's duration decides and this assumes it lasts the median gap
        between frames (as `MediaInfo.duration` does).
    minimum: the fewest frames a complete input yields (= frames where that is exact); the reader raises
        TruncatedInput below it.
    """

    start: Fraction
    end: Fraction | None
    start_pts: int
    end_pts: int | None
    rate: Fraction
    resample: bool
    frames: int
    minimum: int

    @property
    def fps_rational(self) -> str:
        return f"{self.rate.numerator}/{self.rate.denominator}"


def select(info: MediaInfo, start: float = 0.0, end: float | None = None, fps: float | None = None) -> Span:
    """The span [start, end) of the video `info` describes, at `fps` frames per second.

    start, end: seconds from the first frame (end exclusive; None = to the end; an end past the last frame
        also runs to the end). fps: output rate (None = the video's own, every frame kept once); a rate equal to a
        constant-rate video's own keeps every frame too.
    Raises InvalidInput, naming the file, when the start is at or past the end of the video or the span holds no
    frame; ValueError for a negative start or an end not after the start (the job's validation refuses those).
    The whole video (the defaults) is `info.frame_count` frames at `info.fps_rational`. For an image: its frame.
    """
    if start < 0 or (end is not None and end <= start):
        raise ValueError(f"a span needs 0 ≤ start < end, got start={start}, end={end}")
    own = Fraction(info.fps_rational)
    if info.kind == "image":
        return Span(Fraction(0), None, 0, None, own, False, 1, 1)
    tb, stamps = info.time_base, info.timestamps
    # str() first: 0.1 means one tenth, not the binary float nearest to it, so boundaries land where users expect.
    start_pts = math.ceil(Fraction(str(start)) / tb)
    end_pts = None if end is None else math.ceil(Fraction(str(end)) / tb)
    if end_pts is not None and end_pts > stamps[-1]:
        end_pts = None  # no frame starts at or after the end: the span runs to the end of the video
    first = bisect.bisect_left(stamps, start_pts)
    stop = len(stamps) if end_pts is None else bisect.bisect_left(stamps, end_pts)
    if first >= stop:
        if start >= info.duration:
            raise InvalidInput(
                f"trim start {start:g} s is past the end of {info.path} ({info.duration:.3f} s long): "
                f"choose a start before {info.duration:.3f} s"
            )
        if first == len(stamps):
            last = float(stamps[-1] * tb)
            raise InvalidInput(
                f"trim start {start:g} s is after the last frame of {info.path} (at {last:.3f} s): "
                f"choose a start at or before {last:.3f} s"
            )
        raise InvalidInput(
            f"the span {start:g}–{end:g} s of {info.path} holds no frame (frames are "
            f"{info.duration / info.frame_count:.3f} s apart on average): widen it"
        )
    rate = own if fps is None else output_rate(fps)
    resample = fps is not None and (info.vfr or rate != own)
    span_start = start_pts * tb
    if not resample:
        # The frame count less the frames the timestamps place outside the span: for the whole video, exactly
        # the count probe made, which is what a cut file is measured against.
        frames = minimum = info.frame_count - first - (len(stamps) - stop)
    elif end_pts is not None:
        # Frames after the end still reach the fps filter, so every slot before the end is filled: exact.
        frames = minimum = math.ceil((end_pts * tb - span_start) * rate)
    else:
        # At the end of the video the last frame fills slots for as long as ffmpeg thinks it lasts; every slot
        # before it starts is certain.
        video_end = round(Fraction(info.duration) / tb) * tb
        frames = math.ceil((video_end - span_start) * rate)
        minimum = math.ceil((stamps[-1] * tb - span_start) * rate)
    return Span(
        start=span_start,
        end=None if end_pts is None else end_pts * tb,
        start_pts=start_pts,
        end_pts=end_pts,
        rate=rate,
        resample=resample,
        frames=frames,
        minimum=max(minimum, 1),
    )


# ---------------------------------------------------------------------------------------------------------------
# Child processes


class _StderrDrain:
    """Reads a child's stderr to the end on a thread, so a chatty child never blocks on a full pipe.

    Keeps the first lines (ffmpeg runs with `-v error`, so they are the errors that explain a failure).
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[str] = []
        self._stream = stream
        self._thread = threading.Thread(target=self._drain, name="ffmpeg-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        for raw in self._stream:
            line = raw.decode("utf-8", errors="replace").strip()
            if line and len(self.lines) < _KEPT_STDERR_LINES:
                self.lines.append(line)
        self._stream.close()

    def join(self) -> None:
        self._thread.join()

    def first_error(self, path: Path) -> str | None:
        return _first_error("\n".join(self.lines), path) if self.lines else None


def _stop(process: subprocess.Popen[bytes], drain: _StderrDrain) -> None:
    """Terminate `process` if still running, wait for it (no zombie, no orphan), and finish reading its stderr."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a broken pipe flushing stdin: the child is gone or going anyway
                pipe.close()
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    drain.join()


def _start(args: Sequence[str], stdin: int | None, stdout: int | None) -> tuple[subprocess.Popen[bytes], _StderrDrain]:
    # Children run in their own process group: a Ctrl-C in the terminal reaches facestudio alone, which then
    # stops its children itself, instead of racing them (a decoder killed first would look like a cut file).
    group: dict[str, Any] = (
        {"start_new_session": True}
        if os.name == "posix"
        else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    )
    try:
        process = subprocess.Popen(args, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, **group)
    except OSError as exc:
        raise MediaError(f"cannot run {args[0]}: {exc.strerror}") from exc
    assert process.stderr is not None
    return process, _StderrDrain(process.stderr)


# ---------------------------------------------------------------------------------------------------------------
# Reading frames


class FrameReader:
    """The frames of a video (or the single frame of an image), streamed through an ffmpeg pipe.

    Use as a context manager and iterate once:

        with FrameReader(path) as reader:
            for frame in reader:   # Frame: info.height × info.width × 3 uint8 RGB, upright
                ...

    Frames come in presentation order, rotated upright as the container's display matrix asks. Without a span,
    every frame comes once (variable frame rates are passed through, not resampled); with one, the frames of
    the span, resampled to its rate when `span.resample` says so. After the last frame, if fewer frames were
    decoded than the span holds (`span.minimum`; the whole video: `info.frame_count`), or ffmpeg reported errors
    while decoding (a cut or damaged file), the iteration raises TruncatedInput naming both counts. Leaving the
    `with` block, breaking out of the loop or an exception stops and reaps the ffmpeg child.
    """

    def __init__(self, path: Path, info: MediaInfo | None = None, span: Span | None = None, skip: int = 0) -> None:
        """path: the video or image; info: its `probe` result when the caller already has it (else probed here);
        span: the part to read and its rate, from `select(info, …)` (None: the whole video; images ignore it);
        skip: leave out the span's first `skip` output frames (a resumed job's finished segments). A span that is
        not resampled starts decoding at frame `skip` (ffmpeg still decodes the frames before it, but they cost no
        conversion, pipe or processing); a resampled one is read from its start and the frames are dropped here,
        since which frame fills a slot depends on the frames before it."""
        self.path = Path(path)
        self._ffmpeg = find_ffmpeg()
        self.info = info if info is not None else _probe(self.path, self._ffmpeg)
        self.span = span if span is not None else select(self.info)
        if not 0 <= skip < self.span.frames:
            raise ValueError(f"skip must be in 0–{self.span.frames - 1} (frames of the span), got {skip}")
        self._drop = 0
        if skip and self.span.resample:
            self._drop = skip
        elif skip:
            self.span = _skip(self.info, self.span, skip)
        self._iterated = False
        self._closed = False
        self._process: subprocess.Popen[bytes] | None = None
        self._drain: _StderrDrain | None = None

    def __enter__(self) -> FrameReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Frame]:
        if self._iterated:
            raise RuntimeError("a FrameReader can be iterated only once; open a new one")
        self._iterated = True
        if self.info.kind == "image":
            return iter([read_image(self.path)[0]])
        return self._frames()

    def close(self) -> None:
        """Stop the ffmpeg child if it is still running and wait for it. Safe to call more than once, and from
        another thread than the one iterating (that iteration then ends quietly)."""
        self._closed = True
        if self._process is not None and self._drain is not None:
            _stop(self._process, self._drain)
        self._process = None

    def _frames(self) -> Iterator[Frame]:
        width, height, span = self.info.width, self.info.height, self.span
        frame_bytes = width * height * 3
        # A span that ends before the video does stops ffmpeg at its last frame. A resampled one is not cut at
        # its end time but by count, so the frames after the end keep the fps filter filling its last slots.
        args = cmd.decode_args(
            self._ffmpeg, self.path, span.start_pts,
            end_pts=None if span.resample else span.end_pts,
            fps_rational=span.fps_rational if span.resample else None,
            max_frames=None if span.end_pts is None else span.frames,
        )  # fmt: skip
        process, drain = _start(args, subprocess.DEVNULL, subprocess.PIPE)
        self._process, self._drain = process, drain
        assert process.stdout is not None
        decoded = 0
        partial = False
        try:
            while True:
                buffer = bytearray(frame_bytes)  # a fresh, writable buffer per frame: callers may keep frames
                try:
                    got = _read_exactly(process.stdout, buffer)
                except ValueError:  # the pipe was closed by `close` on another thread: stop, nothing is wrong
                    if self._closed:
                        return
                    raise
                if got < frame_bytes:
                    partial = got > 0
                    break
                decoded += 1
                if decoded > self._drop:
                    yield np.frombuffer(buffer, dtype=np.uint8).reshape(height, width, 3)
            returncode = process.wait()
            drain.join()
            error = drain.first_error(self.path)
            if decoded < span.minimum or partial or returncode != 0 or error is not None:
                at_least = "at least " if span.minimum < span.frames else ""
                detail = f"expected {at_least}{span.minimum} frames, decoded {decoded}"
                if error is not None:
                    detail += f"; ffmpeg: {error}"
                raise TruncatedInput(f"{self.path} is damaged or cut short ({detail}): re-export or re-download it")
            if decoded > span.frames and not span.resample:
                logger.warning("%s decoded to %d frames, %d packets were counted", self.path, decoded, span.frames)
        finally:
            self.close()


def _skip(info: MediaInfo, span: Span, skip: int) -> Span:
    """The part of a span that is not resampled after its first `skip` frames: it starts at that frame's time."""
    first = bisect.bisect_left(info.timestamps, span.start_pts) + skip
    start_pts = info.timestamps[first]
    return replace(
        span,
        start=start_pts * info.time_base,
        start_pts=start_pts,
        frames=span.frames - skip,
        minimum=max(span.minimum - skip, 1),
    )


def _read_exactly(stream: IO[bytes], buffer: bytearray) -> int:
    """Fill `buffer` from `stream`; returns the bytes read, fewer than its size only at end of stream."""
    view = memoryview(buffer)
    got = 0
    while got < len(buffer):
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


# ---------------------------------------------------------------------------------------------------------------
# Writing video


def _partial_path(output: Path) -> Path:
    """Temp name next to `output` (same folder, so the final rename is atomic), with the same extension so
    encoders and Pillow pick the same format; the `.partial` marker lets a start-up sweep find orphans."""
    return output.with_name(f".{output.stem}.partial{output.suffix}")


class FrameWriter:
    """Encodes frames to an H.264 or HEVC (yuv420p) video with the audio of another file, written atomically.

    Use as a context manager:

        with FrameWriter(output, width, height, info.fps_rational, audio_from=target, metadata={...}) as writer:
            for frame in frames:
                writer.write(frame)    # Frame: height × width × 3 uint8 RGB

    Frames are encoded into `.<stem>.partial<suffix>` in the output folder. Leaving the block without an
    exception (or calling `close`) finishes the encode, checks that the file holds exactly the frames
    written, and renames it to `output`. An exception (or `abort`) kills ffmpeg and deletes the temp file,
    so a failed job never leaves a file that looks finished.

    Odd sizes: yuv420p stores colour at half resolution, so it needs an even width and height. A frame
    with an odd dimension is padded by one column/row that repeats its last column/row (edge replication);
    the video is then one pixel wider/taller than the frames, and no pixel of the frames is lost.
    """

    def __init__(
        self,
        output: Path,
        width: int,
        height: int,
        fps_rational: str,
        audio_from: Path | None,
        metadata: Mapping[str, str],
        crf: int = 18,
        preset: str = "medium",
        encoder: str = "libx264",
        audio_start: float = 0.0,
        audio_end: float | None = None,
    ) -> None:
        """output: .mp4, .m4v, .mov or .mkv path; its folder must exist.
        width, height: size of the frames that will be written, pixels.
        fps_rational: frame rate as an exact rational string, normally the target's `MediaInfo.fps_rational` or
            a `Span.fps_rational`.
        audio_from: file whose first audio stream (if any) is muxed in, copied when the container can hold
            its codec, else re-encoded to AAC; None for a silent video.
        metadata: container tags to write (custom keys included; readable with `read_video_metadata`).
        crf, preset: quality (0–51, lower is better) and speed preset of the encoder.
        encoder: "libx264" (H.264) or "libx265" (HEVC); InvalidInput here when the ffmpeg in use lacks it.
        audio_start, audio_end: the part of `audio_from`'s audio to keep, seconds (end exclusive; None = to its
            end), normally a `Span`'s start and end; a cut is sample-accurate and re-encodes the audio to AAC.
        """
        self.output = Path(output)
        self.width, self.height = width, height
        self.frames_written = 0
        # What the finished file holds, probed by `close` (a cut can leave no audio to mux, for one).
        self.written: MediaInfo | None = None
        if width < 1 or height < 1:
            raise ValueError(f"frame size must be positive, got {width}×{height}")
        cmd.muxer_for(self.output)  # an unsupported extension fails here, naming the path the caller gave
        if not self.output.parent.is_dir():
            raise InvalidInput(f"cannot write {self.output}: the folder {self.output.parent} does not exist")
        self._ffmpeg = find_ffmpeg()
        # Here, not at the first frame: ffmpeg would only fail once it had been sent one.
        check_encoder(encoder, self._ffmpeg)
        audio_codec = None
        if audio_from is not None:
            audio = next((s for s in _read_header(Path(audio_from), self._ffmpeg).streams if s.kind == "audio"), None)
            audio_codec = audio.codec if audio is not None else None
        self._partial = _partial_path(self.output)
        # Odd dimensions are padded to even ones (see the class docstring).
        self._pad = (height % 2, width % 2)
        self._args = cmd.encode_args(
            self._ffmpeg, self._partial, width + self._pad[1], height + self._pad[0], fps_rational,
            None if audio_from is None else Path(audio_from), audio_codec, metadata, crf, preset,
            encoder, audio_start, audio_end,
        )  # fmt: skip
        self._process: subprocess.Popen[bytes] | None = None
        self._drain: _StderrDrain | None = None
        self._state: Literal["open", "closed", "aborted"] = "open"

    def __enter__(self) -> FrameWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, frame: Frame) -> None:
        """Encode one frame: height × width × 3 uint8 RGB, the size given to the constructor."""
        if self._state != "open":
            raise RuntimeError(f"the writer of {self.output} is already {self._state}")
        check_frame(frame)
        if frame.shape[:2] != (self.height, self.width):
            got = f"{frame.shape[1]}×{frame.shape[0]}"
            raise ValueError(f"frame is {got}, this writer takes {self.width}×{self.height}")
        if any(self._pad):
            frame = np.pad(frame, ((0, self._pad[0]), (0, self._pad[1]), (0, 0)), mode="edge")
        if self._process is None:
            self._process, self._drain = _start(self._args, subprocess.PIPE, subprocess.DEVNULL)
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(np.ascontiguousarray(frame).data)
        except (BrokenPipeError, ValueError):  # ValueError: stdin closed by `abort` on another thread
            state: str = self._state  # re-read: another thread may have aborted the writer meanwhile
            if state == "aborted":
                raise MediaError(f"writing {self.output} was aborted") from None
            error = self._failure()
            self.abort()
            raise MediaError(f"ffmpeg stopped while encoding {self.output}: {error}") from None
        self.frames_written += 1

    def close(self) -> Path:
        """Finish encoding, verify the frame count, and move the file to `output`; returns `output`.

        Raises MediaError (after deleting the temp file) when ffmpeg fails or the file does not hold exactly
        the frames written.
        """
        if self._state == "closed":
            return self.output
        if self._state == "aborted":
            raise MediaError(f"writing {self.output} was aborted; nothing was written")
        try:
            if self._process is None or self._drain is None:
                raise MediaError(f"no frames were written to {self.output}")
            assert self._process.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # ffmpeg has exited already; its exit status says why
                self._process.stdin.close()
            returncode = self._process.wait()
            self._drain.join()
            if returncode != 0:
                raise MediaError(f"ffmpeg failed to encode {self.output}: {self._failure()}")
            try:
                written = _probe(self._partial, self._ffmpeg)
            except FacestudioError as exc:
                raise MediaError(f"the encoded {self.output} cannot be read back: {exc}") from exc
            if written.frame_count != self.frames_written:
                raise MediaError(
                    f"{self.output} holds {written.frame_count} frames, {self.frames_written} were written"
                )
            os.replace(self._partial, self.output)
            self.written = replace(written, path=self.output)
        except BaseException:
            self.abort()
            raise
        self._state = "closed"
        logger.info("wrote %s (%d frames)", self.output, self.frames_written)
        return self.output

    def abort(self) -> None:
        """Kill ffmpeg and delete the temp file, leaving nothing at `output`; a no-op after a successful `close`."""
        if self._state == "closed":
            return  # the output is finished and in place: there is nothing left to undo
        self._state = "aborted"
        if self._process is not None and self._drain is not None:
            if self._process.poll() is None:
                self._process.kill()
            _stop(self._process, self._drain)
        self._partial.unlink(missing_ok=True)

    def _failure(self) -> str:
        assert self._process is not None and self._drain is not None
        self._process.wait()
        self._drain.join()
        return self._drain.first_error(self._partial) or f"exit status {self._process.returncode}"


def join_segments(
    parts: Sequence[tuple[Path, int]],
    output: Path,
    rate: Fraction,
    script: Path,
    audio_from: Path | None,
    metadata: Mapping[str, str],
    encoder: str = "libx264",
    audio_start: float = 0.0,
    audio_end: float | None = None,
    finish: Callable[[Path], None] | None = None,
) -> MediaInfo:
    """Join video segments (path, frame count), played back to back at `rate` frames/s, into `output` without
    re-encoding them, muxing in the audio of `audio_from` once; returns what the finished file holds.

    script: where to write the concat demuxer's list (a job folder). audio_from, audio_start, audio_end, metadata:
    as for `FrameWriter`; encoder: the one the segments were encoded with. Like `FrameWriter`, the file is made
    under a temp name, checked to hold exactly the frames of the parts, and only then renamed to `output`; on any
    error or interruption ffmpeg is stopped and the temp file deleted (MediaError for a failure). `finish` is called
    with the checked temp file just before the rename (the pipeline signs it there); its errors abort the join.
    """
    output = Path(output)
    ffmpeg = find_ffmpeg()
    audio_codec = None
    if audio_from is not None:
        audio = next((s for s in _read_header(Path(audio_from), ffmpeg).streams if s.kind == "audio"), None)
        audio_codec = audio.codec if audio is not None else None
    script.write_text(cmd.concat_list(parts, rate), encoding="utf-8")
    partial = _partial_path(output)
    args = cmd.concat_args(ffmpeg, script, partial, audio_from, audio_codec, metadata, encoder, audio_start, audio_end)
    process, drain = _start(args, subprocess.DEVNULL, subprocess.DEVNULL)
    try:
        returncode = process.wait()
        drain.join()
        if returncode != 0:
            error = drain.first_error(partial) or f"exit status {returncode}"
            raise MediaError(f"ffmpeg failed to join the segments into {output}: {error}")
        try:
            written = _probe(partial, ffmpeg)
        except FacestudioError as exc:
            raise MediaError(f"the joined {output} cannot be read back: {exc}") from exc
        expected = sum(frames for _, frames in parts)
        if written.frame_count != expected:
            raise MediaError(f"{output} holds {written.frame_count} frames, its segments {expected}")
        if finish is not None:
            finish(partial)
        os.replace(partial, output)
    except BaseException:
        _stop(process, drain)
        partial.unlink(missing_ok=True)
        raise
    logger.info("joined %d segments into %s (%d frames)", len(parts), output, written.frame_count)
    return replace(written, path=output)


# ---------------------------------------------------------------------------------------------------------------
# Images


def _open_image(path: Path) -> Image.Image | None:
    """The file opened with Pillow when its content is one of our image formats, else None (try ffmpeg)."""
    try:
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
        image.load()
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} is a damaged or cut-short {image.format} image ({exc}): re-export it") from exc


def _image_info(path: Path, image: Image.Image) -> MediaInfo:
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
    _check_file(path)
    image = _open_image(path)
    if image is None:
        raise InvalidInput(f"{path} is not an image Pillow can read: give a PNG, JPEG, WebP, BMP or TIFF file")
    return image


def image_frame_count(path: Path) -> int:
    """How many frames an image file holds: more than 1 for an animated WebP, PNG (APNG) or a multi-page TIFF,
    of which `read_image` gives the first only. Reads the file's structure, not its pixels."""
    path = Path(path)
    with _open_existing_image(path) as image:
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


def write_image(
    path: Path,
    frame: Frame,
    alpha: npt.NDArray[np.uint8] | None = None,
    metadata: Mapping[str, str] | None = None,
    finish: Callable[[Path], None] | None = None,
) -> Path:
    """Encode `frame` (H×W×3 uint8 RGB) to `path`, in the format its extension names, atomically.

    alpha: H'×W' uint8 (255 = opaque), resized to H×W when it differs (e.g. the frame was upscaled); kept for
        PNG, WebP and TIFF, dropped for JPEG and BMP, which cannot hold it.
    metadata: string key/values, written as PNG text chunks, or for JPEG/WebP/TIFF as EXIF: ImageDescription
        holds them all as a JSON object and Software holds metadata["software"] (default "facestudio").
        BMP has no place for them. `read_image_metadata` reads them back.
    JPEG and WebP are written at quality 95. The file is written to `.<stem>.partial<suffix>` and renamed;
    `finish` is called with that temp file just before the rename (the pipeline signs it there; its errors leave
    nothing behind). Returns `path`.
    """
    path = Path(path)
    image_format = IMAGE_FORMATS.get(path.suffix.lower())
    if image_format is None:
        raise InvalidInput(f"cannot write image {path}: the extension must be one of {', '.join(IMAGE_FORMATS)}")
    check_frame(frame)
    height, width = frame.shape[:2]
    image = Image.fromarray(np.ascontiguousarray(frame))
    if alpha is not None:
        if alpha.dtype != np.uint8 or alpha.ndim != 2:
            raise TypeError(f"alpha is H×W uint8, got shape {alpha.shape} dtype {alpha.dtype}")
        if image_format in _ALPHA_FORMATS:
            mask = Image.fromarray(np.ascontiguousarray(alpha))
            if mask.size != (width, height):
                mask = mask.resize((width, height), Image.Resampling.BILINEAR)
            image.putalpha(mask)
        else:
            logger.info("%s cannot hold transparency; %s is written opaque", image_format, path)
    options: dict[str, Any] = {}
    if image_format in ("JPEG", "WEBP"):
        options["quality"] = 95
    if metadata:
        if image_format == "PNG":
            text = PngImagePlugin.PngInfo()
            for key, value in metadata.items():
                text.add_text(key, value)  # falls back to an iTXt chunk for text Latin-1 cannot hold
            options["pnginfo"] = text
        elif image_format in _EXIF_METADATA_FORMATS:
            exif = Image.Exif()
            exif[_EXIF_IMAGE_DESCRIPTION] = json.dumps(dict(metadata))  # ASCII: EXIF text fields are ASCII
            exif[_EXIF_SOFTWARE] = metadata.get("software", "facestudio")
            options["exif"] = exif
        else:
            logger.info("%s cannot hold metadata; %s is written without it", image_format, path)
    if not path.parent.is_dir():
        raise InvalidInput(f"cannot write {path}: the folder {path.parent} does not exist")
    partial = _partial_path(path)
    try:
        image.save(partial, format=image_format, **options)
        if finish is not None:
            finish(partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


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
    description = exif.get(_EXIF_IMAGE_DESCRIPTION)
    software = exif.get(_EXIF_SOFTWARE)
    if isinstance(description, str):
        try:
            stored = json.loads(description)
        except json.JSONDecodeError:
            stored = None
        if isinstance(stored, dict) and all(isinstance(v, str) for v in stored.values()):
            return {str(k): v for k, v in stored.items()}
    found = {"ImageDescription": description, "Software": software}
    return {k: str(v) for k, v in found.items() if v is not None}
