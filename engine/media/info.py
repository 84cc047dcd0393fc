"""`MediaInfo`: what `probe` found in a target or source file (plain data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal


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
