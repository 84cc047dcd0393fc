"""`probe`: the one place a target or source file is checked and described before any work (`MediaInfo`).

Images (recognised by content) are probed with Pillow and decoded once. Anything else goes to ffprobe, or to
ffmpeg alone when there is no ffprobe; both give the same `MediaInfo`. A video's frames are counted packet by
packet, so `frame_count` is exact, and their timestamps say when each is shown.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from engine.core.errors import InvalidInput, MediaError, TruncatedInput
from engine.media import children, headers, images
from engine.media import commands as cmd
from engine.media.headers import Header, Stream
from engine.media.info import MediaInfo
from engine.media.timing import Packet, frame_timing
from engine.media.tools import find_ffmpeg, find_ffprobe

# AV_PKT_FLAG_KEY and AV_PKT_FLAG_DISCARD in framecrc's `F=` column (discarded: demuxed, but decoders drop it).
_PACKET_FLAG_KEY = 0x1
_PACKET_FLAG_DISCARD = 0x4
_NOPTS = -(2**63)


def probe(path: Path, ffmpeg: str | None = None) -> MediaInfo:
    """Validate a target or source file and describe it; the one place where input files are checked.

    ffmpeg: the executable `find_ffmpeg` chose, when the caller has it already (finding one runs `ffmpeg -version`).
    Raises InvalidInput, with a one-line message naming the path, when the file is missing, empty, a folder,
    unreadable, not an image or video, or has no video stream (an audio file, say); TruncatedInput, naming the
    expected and present frame counts, for an MP4/MOV cut short (its index lists frames the file lacks).
    Damage that only decoding reveals is reported by `FrameReader`.
    """
    path = Path(path)
    headers.check_file(path)
    image = images.open_image(path)
    if image is not None:
        with image:
            return images.image_info(path, image)
    ffmpeg = ffmpeg if ffmpeg is not None else find_ffmpeg()
    ffprobe = find_ffprobe(ffmpeg)
    if ffprobe is not None:
        data = headers.run_ffprobe(cmd.ffprobe_probe_args(ffprobe, path), path)
        header = headers.from_ffprobe(data)
        video = _video_stream(path, header)
        packets, time_base = _packets_from_ffprobe(data, video.index)
        audio = header.audio()
        audio_start = None
        if audio is not None:
            sound, sound_base = _packets_from_ffprobe(data, audio.index)
            audio_start = _first_time(sound, sound_base)
    else:
        count = children.run(cmd.ffmpeg_count_args(ffmpeg, path))
        header = headers.from_ffmpeg(count.stderr, path)
        video = _video_stream(path, header)
        if count.returncode != 0:
            raise InvalidInput(f"cannot read the video stream of {path}: {children.first_error(count.stderr, path)}")
        streams = _packets_from_framecrc(count.stdout)
        packets, time_base = streams[0]
        # framecrc's timestamps are counted from the container's start time: put them back on the file's timeline.
        shift = round(header.start / time_base)
        packets = [Packet(None if p.pts is None else p.pts + shift, p.duration, p.discard) for p in packets]
        first_audio = _first_time(*streams[1]) if 1 in streams else None
        audio_start = None if first_audio is None else first_audio + header.start
    return _video_info(path, header, video, packets, time_base, audio_start)


def read_video_metadata(path: Path) -> dict[str, str]:
    """The container-level tags of a video ("title", custom keys written by `FrameWriter`, …), as strings.

    Keys are lower-cased: ffmpeg treats tag names case-insensitively, and Matroska stores them upper-case, so
    a key written as "synthetic" reads back as "synthetic" from MP4, MOV and MKV alike.
    """
    return {key.lower(): value for key, value in headers.read_header(Path(path), find_ffmpeg()).tags.items()}


def _video_stream(path: Path, header: Header) -> Stream:
    video = next((s for s in header.streams if s.kind == "video" and not s.attached_pic), None)
    if video is None:
        if any(s.kind == "audio" for s in header.streams):
            raise InvalidInput(f"{path} has no video stream, only audio: give a video or an image")
        raise InvalidInput(f"{path} has no video stream: give a video or an image")
    return video


def _packets_from_ffprobe(data: Mapping[str, Any], index: int) -> tuple[list[Packet], Fraction]:
    stream = next(s for s in data["streams"] if int(s["index"]) == index)
    packets = [
        Packet(
            pts=int(p["pts"]) if "pts" in p else None,
            duration=int(p.get("duration", 0)),
            discard="D" in str(p.get("flags", "")),
            key="K" in str(p.get("flags", "")),
        )
        for p in data.get("packets", [])
        if int(p.get("stream_index", -1)) == index
    ]
    return packets, headers.parse_rational(stream["time_base"])


def _packets_from_framecrc(text: str) -> dict[int, tuple[list[Packet], Fraction]]:
    """Parse `#tb N: 1/12800` and `N, dts, pts, duration, size, crc[, F=0x…]` lines: each output stream's packets
    and time base (0: the video stream; 1: the first audio stream, when there is one)."""
    bases: dict[int, Fraction] = {}
    packets: dict[int, list[Packet]] = {}
    for line in text.splitlines():
        if line.startswith("#tb "):
            stream, _, rational = line[4:].partition(":")
            bases[int(stream)] = headers.parse_rational(rational)
        elif line and not line.startswith("#"):
            fields = [f.strip() for f in line.split(",")]
            # framecrc writes the flags only when they are not just "keyframe".
            flags = int(fields[6][2:], 16) if len(fields) > 6 and fields[6].startswith("F=") else _PACKET_FLAG_KEY
            pts = int(fields[2])
            packets.setdefault(int(fields[0]), []).append(
                Packet(pts=None if pts == _NOPTS else pts, duration=int(fields[3]),
                       discard=bool(flags & _PACKET_FLAG_DISCARD), key=bool(flags & _PACKET_FLAG_KEY))
            )  # fmt: skip
    if 0 not in bases:
        raise MediaError("ffmpeg's framecrc output has no time base line")
    return {stream: (packets.get(stream, []), base) for stream, base in bases.items()}


def _first_time(packets: Sequence[Packet], time_base: Fraction) -> Fraction | None:
    """Seconds of the earliest packet a decoder keeps (not discarded, e.g. an AAC encoder's priming), or None."""
    times = [p.pts for p in packets if p.pts is not None and not p.discard]
    return min(times) * time_base if times else None


def _video_info(
    path: Path,
    header: Header,
    video: Stream,
    packets: Sequence[Packet],
    time_base: Fraction,
    audio_start: Fraction | None,
) -> MediaInfo:
    if "mp4" in header.format_name.split(","):
        declared = _frames_declared_by_cut_mp4(path)
        if declared is not None and declared > len(packets):
            raise TruncatedInput(
                f"{path} is cut short (expected {declared} frames, the file holds {len(packets)}): "
                "re-export or re-download it"
            )
    if not any(not p.discard for p in packets):
        raise InvalidInput(f"{path} has a video stream with no frames in it: re-export or re-download it")
    timing = frame_timing(packets, time_base)
    frames, duration = timing.frames, timing.duration
    # Denominators up to 1001 hold every broadcast rate (24000/1001, 30000/1001 …) exactly; the error this
    # rounding adds to a variable-rate average is far below one frame over any realistic length.
    rate = (frames / duration).limit_denominator(1001)
    audio = header.audio()
    quarter_turn = video.rotation in (90, 270)
    return MediaInfo(
        path=path,
        kind="video",
        width=video.height if quarter_turn else video.width,
        height=video.width if quarter_turn else video.height,
        frame_count=frames,
        fps=float(frames / duration),
        fps_rational=f"{rate.numerator}/{rate.denominator}",
        duration=float(duration),
        rotation=video.rotation,
        has_audio=audio is not None,
        audio_codec=audio.codec if audio is not None else None,
        vfr=timing.vfr,
        video_codec=video.codec,
        pix_fmt=video.pix_fmt,
        format_name=header.format_name,
        time_base=timing.time_base,
        timestamps=timing.timestamps,
        color_transfer=video.color_transfer,
        start_time=timing.first_pts * timing.time_base,
        audio_start=audio_start if audio is not None else None,
        hidden=timing.hidden,
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
