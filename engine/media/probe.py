"""`probe`: the one place a target or source file is checked and described before any work (`MediaInfo`).

Images (recognised by content) are probed with Pillow and decoded once. Anything else goes to ffprobe, or to
ffmpeg alone when there is no ffprobe; both give the same `MediaInfo`. A video's frames are counted packet by
packet, so `frame_count` is exact, and their timestamps say when each is shown.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import struct
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from engine.core.errors import InvalidInput, MediaError, TruncatedInput
from engine.media import children, headers, images
from engine.media import commands as cmd
from engine.media.headers import Header, Stream
from engine.media.info import AudioTrack, MediaInfo, Picture, has_alpha_plane, pixel_depth
from engine.media.timing import Packet, frame_timing
from engine.media.tools import find_ffmpeg, find_ffprobe

# AV_PKT_FLAG_KEY and AV_PKT_FLAG_DISCARD in framecrc's `F=` column (discarded: demuxed, but decoders drop it).
_PACKET_FLAG_KEY = 0x1
_PACKET_FLAG_DISCARD = 0x4
_NOPTS = -(2**63)
# Decoders that decode every frame when asked for keyframes only, and the longest stream looked at with them.
_DECODE_EVERY_FRAME = frozenset({"vp8", "vp9", "av1"})
_LONGEST_FULL_LOOK = 1500


def probe(path: Path, ffmpeg: str | None = None, identify: bool = False) -> MediaInfo:
    """Validate a target or source file and describe it; the one place where input files are checked.

    ffmpeg: the executable `find_ffmpeg` chose, when the caller has it already (finding one runs `ffmpeg -version`).
    identify: also hash every packet (`MediaInfo.content_id`) and decode the video's keyframes to find a
    resolution that changes mid-way (`MediaInfo.sizes`; not for VP8, VP9 or AV1 over 1500 frames, whose decoders
    would decode every frame): what a job's target needs, not a file just written.
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
            info = images.image_info(path, image)
        return replace(info, content_id=file_hash(path)) if identify else info
    ffmpeg = ffmpeg if ffmpeg is not None else find_ffmpeg()
    ffprobe = find_ffprobe(ffmpeg)
    if not identify:
        return _video(path, ffmpeg, ffprobe, None, None)
    # Identifying takes children of its own, which run beside the probe's: the keyframes' decode and, without
    # ffprobe, the packets' hashes (ffprobe's probe hashes them itself). Each child's start-up (most of a short
    # file's probe) and reading then overlap the others'.
    with contextlib.ExitStack() as beside:
        keyframes = beside.enter_context(children.Beside(_keyframe_sizes_args(path, ffmpeg, ffprobe)))
        hashes = None if ffprobe else beside.enter_context(children.Beside(cmd.ffmpeg_identify_args(ffmpeg, path)))
        return _video(path, ffmpeg, ffprobe, keyframes, hashes)


def _video(
    path: Path, ffmpeg: str, ffprobe: str | None, keyframes: children.Beside | None, hashes: children.Beside | None
) -> MediaInfo:
    """`probe` of a file that is not an image. keyframes: the child listing its keyframes' sizes, when the file is
    identified (`probe`'s `identify`; None: not identified); hashes: the child listing its packets' hashes, when it
    is identified without ffprobe."""
    identify = keyframes is not None
    content_id = None
    if ffprobe is not None:
        data = headers.run_ffprobe(cmd.ffprobe_probe_args(ffprobe, path, identify), path)
        header = headers.from_ffprobe(data)
        video = _video_stream(path, header)
        packets, time_base = _packets_from_ffprobe(data, video.index)
        audio = header.audio()
        audio_start = None
        if audio is not None:
            sound, sound_base = _packets_from_ffprobe(data, audio.index)
            audio_start = _first_time(sound, sound_base)
        if identify:
            content_id = _identity(
                f"{p.get('stream_index')},{p.get('pts')},{p.get('size')},{p.get('data_hash')}"
                for p in data.get("packets", [])
            )
        chapters = len(data.get("chapters", []))
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
        packets = [replace(p, pts=None if p.pts is None else p.pts + shift) for p in packets]
        first_audio = _first_time(*streams[1]) if 1 in streams else None
        audio_start = None if first_audio is None else first_audio + header.start
        if hashes is not None:
            done = hashes.result()
            content_id = _identity(line for line in done.stdout.splitlines() if line and not line.startswith("#"))
        chapters = len(re.findall(r"^    Chapter #", count.stderr, re.MULTILINE))
    # An MP4's or MOV's index says where its video ends (Matroska's and others' ends are rounded or count other
    # streams: their packets say it where they can) and, for a cut file, how many frames it should hold.
    mov = bool({"mp4", "mov"} & set(header.format_name.split(",")))
    moov, cut = _read_moov(path) if mov else (None, False)
    ends = _video_track_end(moov)
    end = None if ends is None else round(ends / time_base)
    info = _video_info(
        path, header, video, packets, time_base, audio_start, end, _frames_declared_by_cut_mp4(moov, cut)
    )
    # Keyframes only: where the decoder honours that (H.264, HEVC …) it costs little; VP8's, VP9's and AV1's decode
    # every frame regardless, so a long one is not looked at (its child is stopped unread; its frames are still
    # scaled to the first size).
    everything = video.codec in _DECODE_EVERY_FRAME and info.frame_count > _LONGEST_FULL_LOOK
    sizes = () if keyframes is None or everything else _keyframe_sizes(keyframes.result(), ffprobe is not None,
                                                                       video.rotation)  # fmt: skip
    if len(set(sizes)) > 1:
        # The stream's size, as the demuxer reports it, may be any of them: every frame is fitted into the first.
        info = replace(info, width=sizes[0][0], height=sizes[0][1])
    return replace(
        info,
        picture=_picture(path, header, video, ffmpeg),
        chapters=chapters,
        content_id=content_id,
        sizes=sizes if len(set(sizes)) > 1 else (),
    )


def read_video_metadata(path: Path) -> dict[str, str]:
    """The container-level tags of a video ("title", custom keys written by `FrameWriter`, …), as strings.

    Keys are lower-cased: ffmpeg treats tag names case-insensitively, and Matroska stores them upper-case, so
    a key written as "synthetic" reads back as "synthetic" from MP4, MOV and MKV alike.
    """
    return {key.lower(): value for key, value in headers.read_header(Path(path), find_ffmpeg()).tags.items()}


def _identity(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "replace") + b"\n")
    return digest.hexdigest()[:32]


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes (an image, a source photo: small enough to read whole), 32 hex digits."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:32]


def _keyframe_sizes_args(path: Path, ffmpeg: str, ffprobe: str | None) -> list[str]:
    """The child that decodes the video stream's keyframes only and prints each one's size."""
    if ffprobe is not None:
        return cmd.ffprobe_keyframe_sizes_args(ffprobe, path)
    return cmd.ffmpeg_keyframe_sizes_args(ffmpeg, path)


def _keyframe_sizes(
    done: subprocess.CompletedProcess[str], by_ffprobe: bool, rotation: int
) -> tuple[tuple[int, int], ...]:
    """The display size of each keyframe of the video stream, in order, from what the `_keyframe_sizes_args` child
    printed (`by_ffprobe`: ffprobe's lines, else ffmpeg's showinfo log)."""
    if by_ffprobe:
        found = [tuple(int(v) for v in line.split(",")[:2]) for line in done.stdout.split() if line.count(",") >= 1]
    else:
        found = [(int(w), int(h)) for w, h in re.findall(r"\bs:(\d+)x(\d+)\b", done.stderr)]
    quarter = rotation in (90, 270)
    return tuple((h, w) if quarter else (w, h) for w, h in found)  # type: ignore[misc]


def _picture(path: Path, header: Header, video: Stream, ffmpeg: str) -> Picture:
    """The video stream's `Picture`: its pixel format's depth, colour description, upright SAR and alpha."""
    sar = video.sar if video.rotation not in (90, 270) else 1 / video.sar
    alpha_mode = video.tags.get("alpha_mode") == "1" and video.codec in ("vp8", "vp9")
    gif = header.format_name == "gif"
    alpha = _gif_is_transparent(path, ffmpeg) if gif else has_alpha_plane(video.pix_fmt) or alpha_mode
    return Picture(
        pix_fmt=video.pix_fmt,
        depth=pixel_depth(video.pix_fmt),
        matrix=video.color_space,
        primaries=video.color_primaries,
        transfer=video.color_transfer,
        range=video.color_range,
        sar=sar,
        alpha=alpha,
        alpha_decoder=f"lib{'vpx' if video.codec == 'vp8' else 'vpx-vp9'}" if alpha_mode else None,
    )


def _gif_is_transparent(path: Path, ffmpeg: str) -> bool:
    """Whether a GIF shows transparent pixels. ffmpeg decodes every GIF to bgra, and encoders mark a colour
    transparent in later frames to leave the pixels of the one before (ffmpeg's own does): only a GIF whose frames
    mark one at all (a Graphic Control Extension's flag; its blocks walked, pictures not decoded) has its first
    frames' alpha decoded, and is transparent when a pixel of them is."""
    if not _gif_marks_transparency(path):
        return False
    done = children.run_bytes(cmd.gif_alpha_args(ffmpeg, path, _GIF_ALPHA_FRAMES))
    return done.returncode == 0 and bool(done.stdout) and min(done.stdout) < 255


# How many frames of a GIF that marks a transparent colour are decoded to see whether any pixel is.
_GIF_ALPHA_FRAMES = 100


def _gif_marks_transparency(path: Path) -> bool:
    """Whether any frame of a GIF marks a colour transparent (a Graphic Control Extension's flag)."""
    data = path.read_bytes()
    if len(data) < 13 or not data.startswith(b"GIF"):
        return False
    packed = data[10]
    at = 13 + (3 * 2 ** ((packed & 0x07) + 1) if packed & 0x80 else 0)
    while at < len(data):
        block = data[at]
        if block == 0x3B:  # trailer
            return False
        if block == 0x21:  # extension: label, then sub-blocks
            if data[at + 1 : at + 2] == b"\xf9" and at + 3 < len(data) and data[at + 3] & 0x01:
                return True
            at += 2
        elif block == 0x2C:  # image: descriptor, local colour table, LZW code size, then sub-blocks
            local = data[at + 9] if at + 9 < len(data) else 0
            at += 10 + (3 * 2 ** ((local & 0x07) + 1) if local & 0x80 else 0) + 1
        else:
            return False
        while at < len(data) and data[at]:  # sub-blocks, each its length then its bytes, ended by a 0
            at += data[at] + 1
        at += 1
    return False


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
    end: int | None = None,
    declared: int | None = None,
) -> MediaInfo:
    if declared is not None and declared > len(packets):
        raise TruncatedInput(
            f"{path} is cut short (expected {declared} frames, the file holds {len(packets)}): "
            "re-export or re-download it"
        )
    if not any(not p.discard for p in packets):
        raise InvalidInput(f"{path} has a video stream with no frames in it: re-export or re-download it")
    timing = frame_timing(packets, time_base, end)
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
        audio_tracks=tuple(
            AudioTrack(n, s.codec, s.channels, _layout(s), s.sample_rate, s.tags)
            for n, s in enumerate(header.of_kind("audio"))
        ),
        other_streams=tuple(
            (s.kind, s.codec) for s in header.streams if s.kind not in ("audio",) and s.index != video.index
        ),
        tags={key.lower(): value for key, value in header.tags.items()},
        video_tags=dict(video.tags),
        timing_note=timing.note,
    )


# ffmpeg's default layout for a channel count: what it prints for a stream whose file names none (ffprobe: "").
_DEFAULT_LAYOUTS = {1: "mono", 2: "stereo", 3: "2.1", 4: "4.0", 5: "5.0", 6: "5.1", 7: "6.1", 8: "7.1"}


def _layout(stream: Stream) -> str:
    """The channel layout as ffmpeg names it, the same from ffprobe and from ffmpeg alone ("" for a count with no
    layout of its own: "12 channels")."""
    layout = stream.channel_layout
    if not layout or re.match(r"\d+ channels\b", layout):  # "12 channels (FL+FR+…)": a count, not a named layout
        return _DEFAULT_LAYOUTS.get(stream.channels, "")
    return layout


def _read_moov(path: Path) -> tuple[bytes | None, bool]:
    """An MP4/MOV file's index (its `moov` box's payload, None when there is none) and whether the file ends before
    its last top-level box does (a cut download or copy)."""
    size = path.stat().st_size
    moov: bytes | None = None
    with path.open("rb") as f:
        offset = 0
        while offset + 8 <= size:
            f.seek(offset)
            head = f.read(16)
            box_size, box_type = struct.unpack(">I4s", head[:8])
            header = 8
            if box_size == 1:  # 64-bit size follows the type
                if len(head) < 16:
                    return moov, True
                box_size, header = struct.unpack(">Q", head[8:16])[0], 16
            elif box_size == 0:  # the box runs to the end of the file
                box_size = size - offset
            if box_size < header:
                return None, False  # not a box structure we understand
            if offset + box_size > size:
                return moov, True
            if box_type == b"moov":
                f.seek(offset + header)
                moov = f.read(box_size - header)
            offset += box_size
    return moov, False


def mp4_video_time_base(path: Path) -> Fraction | None:
    """Seconds per tick of an MP4's or MOV's first video track, from its index: its `mdhd` time scale, which is
    ffmpeg's time base of the stream (1/12288 …), read without starting a child; None where the index has none."""
    moov, _ = _read_moov(path)
    trak = _video_trak(moov) if moov is not None else None
    mdhd = next(_boxes(next(_boxes(trak, b"mdia"), b""), b"mdhd"), b"") if trak is not None else b""
    # mdhd: version/flags, creation and modification (4 or 8 each, by version), time scale (4)
    at = 20 if mdhd[:1] == b"\x01" else 12
    scale = struct.unpack(">I", mdhd[at : at + 4])[0] if len(mdhd) >= at + 4 else 0
    return Fraction(1, scale) if scale else None


def _video_trak(moov: bytes) -> bytes | None:
    """The first video track (`trak` whose handler is `vide`) of an index."""
    for trak in _boxes(moov, b"trak"):
        mdia = next(_boxes(trak, b"mdia"), b"")
        handler = next(_boxes(mdia, b"hdlr"), b"")
        if handler[8:12] == b"vide":  # hdlr: version/flags (4), pre_defined (4), handler_type (4)
            return trak
    return None


def _frames_declared_by_cut_mp4(moov: bytes | None, cut: bool) -> int | None:
    """For an MP4/MOV file that ends before its last top-level box does (a cut download or copy), the sample
    count the index (`moov`) declares for its first video track; None when the file is whole or it is unknown.

    ffmpeg reads a cut file without failing: it just stops at the last complete frame. Comparing with the
    index is the only way to tell, and the same in the ffprobe and the ffmpeg-only path. Only a cut file is
    compared: in a whole one, an edit list may legitimately hide samples the index lists (a trimmed clip).
    """
    trak = _video_trak(moov) if cut and moov is not None else None
    if trak is None:
        return None
    mdia = next(_boxes(trak, b"mdia"), b"")
    stbl = next(_boxes(next(_boxes(mdia, b"minf"), b""), b"stbl"), b"")
    sizes = next(_boxes(stbl, b"stsz"), None) or next(_boxes(stbl, b"stz2"), None)
    # stsz: version/flags, sample_size, sample_count; stz2: version/flags, reserved + field_size, sample_count
    return struct.unpack(">I", sizes[8:12])[0] if sizes is not None and len(sizes) >= 12 else None


def _video_track_end(moov: bytes | None) -> Fraction | None:
    """Where an MP4/MOV file's first video track ends on its presentation timeline, seconds: its `tkhd` duration
    (its edits' total, in the `mvhd` time scale), which players show it for. ffprobe's stream duration is the
    samples' decode-time total instead, short of the end by a reordered last frame's offset. None where the index
    says none (a fragmented MP4)."""
    if moov is None:
        return None
    mvhd = next(_boxes(moov, b"mvhd"), b"")
    trak = _video_trak(moov)
    tkhd = next(_boxes(trak, b"tkhd"), b"") if trak is not None else b""
    if len(mvhd) < 20 or len(tkhd) < 28:
        return None
    # mvhd: version/flags, creation and modification (4 or 8 each), time scale (4), duration; tkhd: version/flags,
    # creation and modification (4 or 8 each), track id (4), reserved (4), duration (4 or 8).
    scale = struct.unpack(">I", mvhd[20:24] if mvhd[0] == 1 else mvhd[12:16])[0]
    if tkhd[0] == 1:
        duration = struct.unpack(">Q", tkhd[28:36])[0] if len(tkhd) >= 36 else 0
    else:
        duration = struct.unpack(">I", tkhd[20:24])[0]
    if not scale or not duration or duration in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return Fraction(duration, scale)


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
