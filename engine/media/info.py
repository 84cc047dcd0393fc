"""`MediaInfo`: what `probe` found in a target or source file (plain data, no I/O)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal

# Pixel formats whose names end in a number that is not their bit depth, and those with an alpha plane.
_DEPTH_BY_NAME = {"rgb48": 16, "bgr48": 16, "rgba64": 16, "bgra64": 16, "ya16": 16, "y210": 10, "nv20": 10}
_ALPHA_FORMAT = re.compile(r"^(yuva|gbrap|ya\d|argb|abgr|rgba|bgra|ayuv)")


def pixel_depth(pix_fmt: str) -> int:
    """Bits per sample of an ffmpeg pixel format: 8 for yuv420p, rgb24, nv12; 10 for yuv420p10le, p010le; 16 for
    rgb48le, gray16be …"""
    base = re.sub(r"(le|be)$", "", pix_fmt)
    for name, depth in _DEPTH_BY_NAME.items():
        if base.startswith(name):
            return depth
    if base.startswith("nv"):
        return 8
    digits = re.search(r"(\d+)$", base)
    depth = int(digits.group(1)) if digits and not base.startswith(("rgb", "bgr")) else 8
    return depth if 9 <= depth <= 16 else 8


def has_alpha_plane(pix_fmt: str) -> bool:
    """Whether frames of the ffmpeg pixel format carry an alpha plane (yuva420p, argb, bgra, rgba64le …). A GIF
    decodes to bgra whether or not it is transparent: `probe` asks the GIF itself."""
    return bool(_ALPHA_FORMAT.match(pix_fmt))


@dataclass(frozen=True)
class Picture:
    """What a video's pictures are beyond their pixels, as the file describes them (ffmpeg's names).

    pix_fmt: the stream's pixel format; depth: its bits per sample (8, 10, 12 …).
    matrix: the YCbCr matrix ("bt709", "bt2020nc", "smpte170m" …), primaries, transfer, range ("tv" limited,
        "pc" full): "unknown" where the file does not say (players then guess from the size).
    sar: sample aspect ratio of the frames as `FrameReader` gives them (upright: inverted for a quarter turn), 1
        for square pixels; display width = width × sar.
    alpha: the frames have a transparency plane the output can keep; alpha_decoder: the ffmpeg decoder that reads
        it (libvpx-vp9 for VP9 with alpha: ffmpeg's own VP9 decoder drops it), None for the default one.
    """

    pix_fmt: str = "yuv420p"
    depth: int = 8
    matrix: str = "unknown"
    primaries: str = "unknown"
    transfer: str = "unknown"
    range: str = "unknown"
    sar: Fraction = Fraction(1)
    alpha: bool = False
    alpha_decoder: str | None = None

    @property
    def rgb(self) -> bool:
        """Whether the frames are stored as RGB (or grey), not YCbCr: no matrix applies."""
        return self.pix_fmt.startswith(("gbr", "rgb", "bgr", "argb", "abgr", "0rgb", "0bgr", "x2rgb", "x2bgr", "pal8",
                                        "gray", "ya"))  # fmt: skip


@dataclass(frozen=True)
class AudioTrack:
    """One audio stream of a file: its position among the file's audio streams (`number`, 0-based), ffmpeg codec
    name, channels, channel layout ("stereo", "5.1", "12 channels"; "" unknown), sample rate (Hz) and tags
    (language, title, handler_name …, keys lower-cased)."""

    number: int
    codec: str
    channels: int
    layout: str
    sample_rate: int
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def language(self) -> str | None:
        language = self.tags.get("language")
        return None if language in (None, "", "und") else language


@dataclass(frozen=True)
class MediaInfo:
    """What `probe` found in a target or source file.

    path: the file probed.
    kind: "image" (decoded with Pillow) or "video" (decoded with ffmpeg).
    width, height: display size in pixels, i.e. the size of the frames `FrameReader` / `read_image` return,
        after the rotation below has been applied.
    frame_count: exact number of frames: the video stream's packets counted one by one, less the packets the
        container marks as discarded and those that carry no timestamp (`hidden`); 1 for an image.
    fps: frame_count / duration, frames per second (0.0 for an image).
    fps_rational: the same rate as an exact rational string ("30000/1001", "25/1"); for variable-rate input this
        is the average rate ("0/1" for an image). Output timing follows `timestamps`, not this.
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
    format_name: ffmpeg's container name ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "gif"); for an image, its
        Pillow format ("PNG", "JPEG", "WEBP", "BMP", "TIFF").
    time_base: seconds per tick of the video stream's timestamps (1/12800, 1/1000, 1/100 …; for a video whose
        packets carry no timing, 1/25 with one tick per frame); 0 for an image.
    timestamps: presentation time of each frame, in `time_base` ticks counted from the first frame, ascending
        (frame_count entries; `(0,)` for an image). Frame i of a decode is at timestamps[i].
    color_transfer: ffmpeg's name of the video stream's transfer characteristic ("bt709", "smpte2084" for HDR10
        PQ, "arib-std-b67" for HLG); "unknown" when the file does not say, and for an image.
    start_time: presentation time of the first frame in seconds on the file's own timeline (the one its demuxer
        gives every stream, so the audio's times compare with it): 1.0 for a video that starts a second after
        its audio; 0 for an image.
    audio_start: the same for the first audio packet (None without audio).
    hidden: packets of the video stream that are not frames: discarded by an edit list, or without a timestamp
        (the leading pictures of an open GOP cut off from their references). The decoder still receives them.
    picture: colour description, bit depth, sample aspect ratio and alpha (`Picture`; an image's is the default).
    audio_tracks: every audio stream (`AudioTrack`), in file order; has_audio and audio_codec describe the first.
    other_streams: (kind, codec) of the streams that are neither the video nor audio: subtitles, data (a camera's
        telemetry, timecode), attachments, further video streams.
    tags: the container's tags as stored (title, creation_time, comment, location …; keys lower-cased).
    video_tags: the video stream's own tags (language, title, handler_name …).
    chapters: how many chapters the file has.
    sizes: the display sizes (width, height) of the video's keyframes, in order of appearance, when they are not
        all the same (a stream whose resolution changes mid-way); () when they are.
    timing_note: how the frames' times were mended when the file's timestamps repeat or jump back (two
        recordings joined end to end), None when they ascend.
    content_id: a hash of every packet of every stream (their timestamps, sizes and a checksum of their bytes):
        the same id means the same content, whatever the file's name, size or modification time; None when not
        asked for (`probe(identify=True)`).
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
    start_time: Fraction = Fraction(0)
    audio_start: Fraction | None = None
    hidden: int = 0
    picture: Picture = field(default_factory=Picture)
    audio_tracks: tuple[AudioTrack, ...] = ()
    other_streams: tuple[tuple[str, str], ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    video_tags: Mapping[str, str] = field(default_factory=dict)
    chapters: int = 0
    sizes: tuple[tuple[int, int], ...] = ()
    timing_note: str | None = None
    content_id: str | None = None
