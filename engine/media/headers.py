"""A media file's container and stream description, from ffprobe's JSON or from what ffmpeg prints on stderr.

Both give the same `Header`; `read_header` is the fast path (no packets are read), used for a file's tags and
for the audio stream of a file being muxed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from engine.core.errors import InvalidInput, MediaError
from engine.media import children
from engine.media import commands as cmd
from engine.media.tools import find_ffprobe

_INPUT_LINE = re.compile(r"^Input #0, (.+?), from '")
_STREAM_LINE = re.compile(r"^\s+Stream #0:(\d+)\S*: (\w+): (.*)$")
_SIZE = re.compile(r"^(\d+)x(\d+)\b")
_TAG_LINE = re.compile(r"^ {4}(\S.*?)\s*: ?(.*)$")
_TAG_CONTINUATION = re.compile(r"^ {4}\s+: ?(.*)$")
_ROTATION_LINE = re.compile(r"display ?matrix: rotation of (-?[\d.]+) degrees", re.IGNORECASE)
_START = re.compile(r"^  Duration: .*?, start: (-?[\d.]+)")
_SAR = re.compile(r"\bSAR (\d+):(\d+)")
_LANGUAGE = re.compile(r"^\s+Stream #0:\d+(?:\[0x[0-9a-f]+\])?\(([^)]+)\)")
_TBN = re.compile(r"\b([\d.]+)(k?) tbn\b")
_HERTZ = re.compile(r"^(\d+) Hz$")
_CHANNELS = re.compile(r"^(\d+) channels")
# Channel counts of the layout names ffmpeg prints for an audio stream.
_LAYOUT_CHANNELS = {
    "mono": 1, "stereo": 2, "2.1": 3, "3.0": 3, "3.0(back)": 3, "4.0": 4, "quad": 4, "quad(side)": 4, "3.1": 4,
    "5.0": 5, "5.0(side)": 5, "4.1": 5, "5.1": 6, "5.1(side)": 6, "6.0": 6, "6.0(front)": 6, "hexagonal": 6,
    "6.1": 7, "6.1(back)": 7, "6.1(front)": 7, "7.0": 7, "7.0(front)": 7, "7.1": 8, "7.1(wide)": 8,
    "7.1(wide-side)": 8, "octagonal": 8, "hexadecagonal": 16, "downmix": 2, "22.2": 24,
}  # fmt: skip


@dataclass(frozen=True)
class Stream:
    """One stream as ffprobe or `ffmpeg -i` describes it; rotation in counter-clockwise degrees, 0/90/180/270;
    start: its start time in seconds on the file's timeline when ffprobe says (None from ffmpeg alone).

    Video: color_space (the YCbCr matrix), color_primaries, color_transfer, color_range ("tv", "pc"): ffmpeg's
    names, "unknown" where the file does not say; sar: the sample (pixel) aspect ratio as stored, 1 when unknown.
    Audio: sample_rate (Hz), channels, channel_layout (ffmpeg's name: "stereo", "5.1", "12 channels"; "" unknown).
    tags: the stream's own tags (language, title, handler_name, alpha_mode …), keys lower-cased.
    time_base: seconds per tick of its timestamps (None when not said)."""

    index: int
    kind: str
    codec: str
    pix_fmt: str
    width: int
    height: int
    rotation: int
    attached_pic: bool
    color_transfer: str = "unknown"
    start: Fraction | None = None
    color_space: str = "unknown"
    color_primaries: str = "unknown"
    color_range: str = "unknown"
    sar: Fraction = Fraction(1)
    sample_rate: int = 0
    channels: int = 0
    channel_layout: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    time_base: Fraction | None = None


@dataclass(frozen=True)
class Header:
    """The container: its ffmpeg format name, tags, streams, and start time (seconds; the earliest stream's)."""

    format_name: str
    tags: dict[str, str]
    streams: tuple[Stream, ...]
    start: Fraction = Fraction(0)

    def audio(self) -> Stream | None:
        return next((s for s in self.streams if s.kind == "audio"), None)

    def of_kind(self, kind: str) -> tuple[Stream, ...]:
        """Every stream of `kind` ("audio", "subtitle", "data", "attachment"), in file order."""
        return tuple(s for s in self.streams if s.kind == kind)


def check_file(path: Path) -> None:
    """Raise InvalidInput, naming `path` and what to do, when it is not a readable, non-empty regular file."""
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


def read_header(path: Path, ffmpeg: str) -> Header:
    """Container and stream description without reading packets (fast even for long videos)."""
    check_file(path)
    ffprobe = find_ffprobe(ffmpeg)
    if ffprobe is not None:
        return from_ffprobe(run_ffprobe(cmd.ffprobe_header_args(ffprobe, path), path))
    # ffmpeg with no output file always exits 1; whether it could read the input shows in what it printed.
    return from_ffmpeg(children.run(cmd.ffmpeg_header_args(ffmpeg, path)).stderr, path)


def run_ffprobe(args: Sequence[str], path: Path) -> dict[str, Any]:
    done = children.run(args)
    if done.returncode != 0:
        raise InvalidInput(unreadable_message(path, children.first_error(done.stderr, path)))
    try:
        data: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise MediaError(f"ffprobe printed invalid JSON for {path}: {exc}") from exc
    return data


def unreadable_message(path: Path, reason: str) -> str:
    return f"cannot read {path} as an image or video ({reason}): check that the file is complete and is media"


def parse_rational(text: str) -> Fraction:
    num, _, den = text.strip().partition("/")
    return Fraction(int(num), int(den or 1))


def rotation(angle: float) -> int:
    """Display-matrix angle (counter-clockwise degrees) -> 0/90/180/270; ffmpeg's autorotate, like this,
    ignores angles more than a degree away from a multiple of 90."""
    nearest = round(angle / 90) * 90
    return nearest % 360 if abs(angle - nearest) < 1 else 0


def _seconds(value: Any) -> Fraction | None:
    try:
        return Fraction(str(value))
    except (TypeError, ValueError):
        return None


def _ratio(text: Any) -> Fraction:
    """A sample aspect ratio ("32:27"); 1 for one that is absent or unknown ("0:1", "N/A")."""
    num, _, den = str(text or "").partition(":")
    try:
        value = Fraction(int(num), int(den))
    except (ValueError, ZeroDivisionError):
        return Fraction(1)
    return value if value > 0 else Fraction(1)


def from_ffprobe(data: Mapping[str, Any]) -> Header:
    streams = []
    for s in data.get("streams", []):
        angle = next((float(sd["rotation"]) for sd in s.get("side_data_list", []) if "rotation" in sd), 0.0)
        streams.append(
            Stream(
                index=int(s["index"]),
                kind=str(s.get("codec_type", "")),
                codec=str(s.get("codec_name", "none")),
                pix_fmt=str(s.get("pix_fmt", "none")),
                width=int(s.get("width", 0)),
                height=int(s.get("height", 0)),
                rotation=rotation(angle),
                attached_pic=bool(s.get("disposition", {}).get("attached_pic", 0)),
                color_transfer=str(s.get("color_transfer", "unknown")),
                start=_seconds(s.get("start_time")),
                color_space=str(s.get("color_space", "unknown")),
                color_primaries=str(s.get("color_primaries", "unknown")),
                color_range=str(s.get("color_range", "unknown")),
                sar=_ratio(s.get("sample_aspect_ratio")),
                sample_rate=int(s.get("sample_rate", 0) or 0),
                channels=int(s.get("channels", 0) or 0),
                channel_layout=str(s.get("channel_layout", "")),
                tags={str(k).lower(): str(v) for k, v in s.get("tags", {}).items()},
                time_base=parse_rational(s["time_base"]) if s.get("time_base") else None,
            )
        )
    fmt = data.get("format", {})
    tags = {str(k): str(v) for k, v in fmt.get("tags", {}).items()}
    start = _seconds(fmt.get("start_time")) or Fraction(0)
    return Header(format_name=str(fmt.get("format_name", "")), tags=tags, streams=tuple(streams), start=start)


def from_ffmpeg(stderr: str, path: Path) -> Header:
    """Parse the `Input #0` section ffmpeg prints on stderr (the part ffprobe would give as JSON)."""
    lines = stderr.splitlines()
    first = next((i for i, line in enumerate(lines) if _INPUT_LINE.match(line)), None)
    if first is None:
        raise InvalidInput(unreadable_message(path, children.first_error(stderr, path)))
    format_name = _INPUT_LINE.match(lines[first]).group(1)  # type: ignore[union-attr]
    tags: dict[str, str] = {}
    streams: list[Stream] = []
    start = Fraction(0)
    in_container_tags = False  # inside the "  Metadata:" block at indent 2, which holds the container's tags
    in_stream_tags = False  # inside the "    Metadata:" block of the last stream
    last_key: str | None = None
    for line in lines[first + 1 :]:
        if not line.startswith(" "):  # "Stream mapping:", "Output #0", error lines: the input section is over
            break
        stream = _STREAM_LINE.match(line)
        if stream is not None:
            parsed = _stream_from_ffmpeg(int(stream.group(1)), stream.group(2).lower(), stream.group(3))
            language = _LANGUAGE.match(line)
            if language is not None:
                parsed = replace(parsed, tags={"language": language.group(1)})
            streams.append(parsed)
            in_stream_tags = False
            continue
        if streams and line == "    Metadata:":
            in_stream_tags = True
            continue
        if in_stream_tags:
            tag = re.match(r"^ {6}(\S.*?)\s*: ?(.*)$", line)
            if tag is not None:
                streams[-1] = replace(streams[-1], tags={**streams[-1].tags, tag.group(1).lower(): tag.group(2)})
                continue
            in_stream_tags = False
        angle = _ROTATION_LINE.search(line)
        if angle is not None and streams:
            streams[-1] = replace(streams[-1], rotation=rotation(float(angle.group(1))))
            continue
        started = _START.match(line)
        if started is not None and not streams:
            start = Fraction(started.group(1))
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
    return Header(format_name=format_name, tags=tags, streams=tuple(streams), start=start)


def _split_top_level(text: str) -> list[str]:
    """Split a stream description on ", " outside parentheses and brackets."""
    parts: list[str] = []
    depth = 0
    begin = 0
    for i, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0 and text[i + 1 : i + 2] == " ":
            parts.append(text[begin:i].strip())
            begin = i + 1
    parts.append(text[begin:].strip())
    return parts


def _stream_from_ffmpeg(index: int, kind: str, description: str) -> Stream:
    """`h264 (High) (avc1 / 0x31637661), yuv420p(progressive), 64x48 [SAR 1:1 DAR 4:3], 25 fps, … (default)`;
    `aac (LC) (mp4a / 0x6134706D), 48000 Hz, stereo, fltp, 128 kb/s (default)`."""
    parts = _split_top_level(description)
    codec = parts[0].split()[0] if parts[0] else "none"
    stream = Stream(index, kind, codec, "none", 0, 0, 0, "(attached pic)" in description)
    if kind == "video":
        sizes = [m for m in (_SIZE.match(p) for p in parts[1:]) if m is not None]
        if sizes:
            stream = replace(stream, width=int(sizes[0].group(1)), height=int(sizes[0].group(2)))
        if len(parts) > 1 and not _SIZE.match(parts[1]):
            stream = replace(stream, pix_fmt=parts[1].split("(")[0].strip(), **_colour_from_ffmpeg(parts[1]))
        ticks = _TBN.search(description)
        if ticks is not None:
            scale = 1000 if ticks.group(2) else 1
            stream = replace(stream, time_base=1 / (Fraction(ticks.group(1)) * scale))
        sar = _SAR.search(description)
        if sar is not None:
            stream = replace(stream, sar=_ratio(f"{sar.group(1)}:{sar.group(2)}"))
    elif kind == "audio" and len(parts) > 2:
        hertz = _HERTZ.match(parts[1])
        layout = parts[2]
        channels = _CHANNELS.match(layout)
        count = int(channels.group(1)) if channels else _LAYOUT_CHANNELS.get(layout, 0)
        stream = replace(stream, sample_rate=int(hertz.group(1)) if hertz else 0, channels=count,
                         channel_layout=layout)  # fmt: skip
    return stream


def _colour_from_ffmpeg(pixel_format: str) -> dict[str, str]:
    """The colour description in `yuv420p10le(tv, bt2020nc/bt2020/smpte2084, progressive)`, as Stream fields.

    ffmpeg writes the range (tv/pc), then colour space/primaries/transfer (one name when the three are equal),
    then the field order ("progressive", or words with spaces such as "top first")."""
    _, _, inside = pixel_format.partition("(")
    found: dict[str, str] = {}
    for item in inside.rstrip(")").split(", "):
        names = item.split("/")
        if item in ("tv", "pc"):
            found["color_range"] = item
        elif len(names) == 3:
            found.update(color_space=names[0], color_primaries=names[1], color_transfer=names[2])
        elif item not in ("progressive",) and " " not in item and item and len(names) == 1:
            found.update(color_space=item, color_primaries=item, color_transfer=item)
    return found
