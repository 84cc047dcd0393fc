"""ffmpeg and ffprobe command lines, as pure functions returning argument lists.

Nothing here runs a process or touches the filesystem: `engine/video.py` runs these lists, and
`tests/test_ffmpeg_commands.py` pins them with exact list equality. Every list starts with the executable
path it was given, so the same functions serve a system ffmpeg and the one bundled with imageio-ffmpeg.

Conventions shared by all commands:
- The video stream is selected with the specifier `V:0`: the first video stream that is not an attached
  picture (cover art), so an audio file with artwork is never mistaken for a video.
- Frame timing is passed through (`-fps_mode passthrough`): `-vsync` is not used because FFmpeg 9 removed it,
  and any constant-rate mode would drop or duplicate frames of variable-rate input. A job that asks for another
  rate gets it from the `fps` filter at decode, where which frame fills each output slot is defined exactly.
- Raw frames cross pipes as `rgb24`: H×W×3 uint8 RGB, row-major, no padding, the layout of a `Frame`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path

from engine.errors import InvalidInput

# Output extension -> ffmpeg muxer. Only containers that can hold H.264 and HEVC are offered: WebM, for one, cannot.
MUXERS: Mapping[str, str] = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska"}

# Audio codecs (ffmpeg codec names) each muxer stores as they are; anything else is re-encoded to AAC.
_LOSSY_AUDIO = frozenset({"aac", "mp3", "ac3", "eac3"})
_PCM_AUDIO = frozenset({"pcm_s16le", "pcm_s24le", "pcm_f32le"})
COPYABLE_AUDIO: Mapping[str, frozenset[str]] = {
    "mp4": _LOSSY_AUDIO | {"alac", "opus"},
    "mov": _LOSSY_AUDIO | _PCM_AUDIO | {"alac", "pcm_s16be"},
    "matroska": _LOSSY_AUDIO | _PCM_AUDIO | {"alac", "opus", "vorbis", "flac", "dts", "truehd"},
}

# AAC bitrate when the source audio has to be re-encoded: transparent for stereo speech and music.
AAC_BITRATE = "192k"

X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")

# Video encoders a job can choose; libx265 takes the same crf scale and preset names as libx264.
VIDEO_ENCODERS = ("libx264", "libx265")
# libx265 refuses smaller frames ("Image size is too small").
_X265_MIN_SIZE = 16

_RATIONAL = re.compile(r"^[1-9][0-9]*(/[1-9][0-9]*)?$")


def ffprobe_header_args(ffprobe: str, path: Path) -> list[str]:
    """ffprobe printing the container and every stream as JSON (`format`, `streams`), without reading packets."""
    return [ffprobe, "-v", "error", "-print_format", "json", "-show_format", "-show_streams", str(path)]


def ffprobe_probe_args(ffprobe: str, path: Path) -> list[str]:
    """ffprobe printing the container, every stream and every packet as JSON.

    Each packet carries `stream_index`, `pts`, `duration` (in its stream's `time_base`) and `flags` (`D` marks
    a packet the demuxer asks decoders to discard, e.g. before an edit list's start). Counting the packets
    of the video stream that are not discarded gives the exact frame count, and their timestamps give the
    exact duration and whether the frame rate varies. Compact JSON keeps one packet per line.
    """
    return [
        ffprobe, "-v", "error", "-print_format", "json=compact=1", "-show_format", "-show_streams",
        "-show_entries", "packet=stream_index,pts,duration,flags", str(path),
    ]  # fmt: skip


def ffmpeg_header_args(ffmpeg: str, path: Path) -> list[str]:
    """ffmpeg opening `path` with no output: it prints the container and streams to stderr and exits 1.

    Used where ffprobe is absent, to read stream details and container tags.
    """
    return [ffmpeg, "-nostdin", "-hide_banner", "-i", str(path)]


def ffmpeg_count_args(ffmpeg: str, path: Path) -> list[str]:
    """ffmpeg copying the first video stream's packets, undecoded, to the `framecrc` muxer on stdout.

    Stdout gets one line per packet (`stream, dts, pts, duration, size, crc[, F=flags]`, after `#tb` and other
    `#` header lines); stderr gets the same stream description as `ffmpeg_header_args`. This is the
    ffprobe-free way to count packets and read their timestamps exactly. `-copyinkf` keeps packets before the
    first keyframe, which stream copy would otherwise drop and ffprobe would count.
    """
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-i", str(path),
        "-map", "0:V:0", "-c", "copy", "-copyinkf", "-f", "framecrc", "pipe:1",
    ]  # fmt: skip


def encoders_args(ffmpeg: str) -> list[str]:
    """ffmpeg listing the encoders it was built with on stdout: a legend, a `------` line, then one encoder a line
    (`flags name description`)."""
    return [ffmpeg, "-nostdin", "-hide_banner", "-encoders"]


def encoder_test_args(ffmpeg: str, encoder: str) -> list[str]:
    """ffmpeg encoding one black 256×256 frame with `encoder` and discarding it: exit status 0 when the encoder
    really works here (a hardware encoder such as h264_nvenc can be built in and still lack its GPU or driver)."""
    return [ffmpeg, "-nostdin", "-hide_banner", "-v", "error", "-f", "lavfi", "-i", "color=c=black:s=256x256:r=25",
            "-frames:v", "1", "-c:v", encoder, "-f", "null", "-"]  # fmt: skip


def decode_args(
    ffmpeg: str,
    path: Path,
    start_pts: int = 0,
    end_pts: int | None = None,
    fps_rational: str | None = None,
    max_frames: int | None = None,
) -> list[str]:
    """ffmpeg decoding the first video stream of `path` to raw rgb24 frames on stdout.

    Frames come out in presentation order, upright (ffmpeg's default autorotate applies the display matrix,
    so their size is the display size) and each exactly once (`-fps_mode passthrough`). Only errors are
    logged on stderr, so anything there means the input is damaged.

    start_pts, end_pts: keep only the frames whose presentation time, counted from the first frame in the video
        stream's time base, is in [start_pts, end_pts) (end_pts None: to the end). Integers, so the selection is
        exact: the `trim` filter compares them with the frames' own integer timestamps.
    fps_rational: resample to this rate ("12/1", "30000/1001"): output frame k stands for the time
        start_pts + k / rate and shows the last kept frame that started at or before it (the first kept frame for
        a slot before it). Slots run until the input ends; end a shorter span with max_frames, not end_pts.
    max_frames: stop after this many output frames (the span's frame count, so ffmpeg stops decoding there).
    """
    if start_pts < 0:
        raise ValueError(f"start_pts must be ≥ 0, got {start_pts}")
    if end_pts is not None and end_pts <= start_pts:
        raise ValueError(f"end_pts must be after start_pts ({start_pts}), got {end_pts}")
    if fps_rational is not None and not _RATIONAL.match(fps_rational):
        raise ValueError(f"fps_rational must be a positive rational like '30000/1001', got {fps_rational!r}")
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be ≥ 1, got {max_frames}")
    if fps_rational is not None and end_pts is not None:
        # After an end cut, how many slots the last kept frame fills depends on the duration ffmpeg gives it,
        # which varies with the container; ending by frame count (max_frames) is exact.
        raise ValueError("end a resampled span with max_frames, not end_pts")
    filters: list[str] = []
    if start_pts or end_pts is not None or fps_rational is not None:
        # Timestamps are counted from the first frame, then shifted so the span starts at 0: `trim` and `fps`
        # then work on that timeline whatever the container's start time is.
        filters.append(f"setpts=PTS-STARTPTS-{start_pts}" if start_pts else "setpts=PTS-STARTPTS")
        if start_pts or end_pts is not None:
            filters.append("trim=start_pts=0" + ("" if end_pts is None else f":end_pts={end_pts - start_pts}"))
    if fps_rational is not None:
        # round=up maps a frame to the first slot at or after its start, so a slot shows the frame on screen at
        # its time (sample and hold); start_time=0 puts slot 0 at the span's start.
        filters.append(f"fps=fps={fps_rational}:start_time=0:round=up")
    args = [ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-i", str(path), "-map", "0:V:0"]
    if filters:
        args += ["-vf", ",".join(filters)]
    args += ["-fps_mode", "passthrough"]
    if max_frames is not None:
        args += ["-frames:v", str(max_frames)]
    return [*args, "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"]


def muxer_for(output: Path) -> str:
    """The ffmpeg muxer for an output path, from its extension; InvalidInput for one that cannot hold H.264."""
    muxer = MUXERS.get(output.suffix.lower())
    if muxer is None:
        raise InvalidInput(
            f"cannot write video to {output}: the extension must be one of {', '.join(MUXERS)} (H.264/HEVC output)"
        )
    return muxer


def seconds_arg(seconds: float) -> str:
    """A time for ffmpeg options (`-ss`, `-t`): decimal seconds to the microsecond, ffmpeg's own resolution."""
    if seconds < 0:
        raise ValueError(f"a time must be ≥ 0 s, got {seconds}")
    return f"{seconds:.6f}".rstrip("0").rstrip(".")


def audio_codec_args(muxer: str, audio_codec: str | None) -> list[str]:
    """Copy the source audio when `muxer` can store `audio_codec` as it is, else re-encode it to AAC.

    `audio_codec` is the ffmpeg codec name of the first audio stream of the source (None when it has none;
    the AAC arguments then apply to no stream and are harmless).
    """
    if audio_codec is not None and audio_codec in COPYABLE_AUDIO[muxer]:
        return ["-c:a", "copy"]
    return ["-c:a", "aac", "-b:a", AAC_BITRATE]


def metadata_args(muxer: str, metadata: Mapping[str, str]) -> list[str]:
    """`-metadata key=value` per entry, in the mapping's order; for MP4/MOV also `-movflags +use_metadata_tags`,
    without which the muxer keeps only its fixed set of keys (title, comment, …) and drops custom ones."""
    args: list[str] = []
    for key, value in metadata.items():
        if not key or "=" in key:
            raise ValueError(f"metadata key {key!r} must be non-empty and contain no '='")
        args += ["-metadata", f"{key}={value}"]
    if muxer in ("mp4", "mov"):
        args += ["-movflags", "+use_metadata_tags"]
    return args


def video_codec_args(muxer: str, encoder: str, crf: int, preset: str) -> list[str]:
    """`-c:v` and its quality settings. libx265 logs only errors (its own info lines would otherwise fill stderr,
    which is kept for error messages) and is tagged `hvc1` in MP4/MOV, the tag Apple players require for HEVC."""
    args = ["-c:v", encoder, "-preset", preset, "-crf", str(crf)]
    if encoder == "libx265":
        args += ["-x265-params", "log-level=error"]
        if muxer in ("mp4", "mov"):
            args += ["-tag:v", "hvc1"]
    return args


def encode_args(
    ffmpeg: str,
    output: Path,
    width: int,
    height: int,
    fps_rational: str,
    audio_from: Path | None,
    audio_codec: str | None,
    metadata: Mapping[str, str],
    crf: int = 18,
    preset: str = "medium",
    encoder: str = "libx264",
    audio_start: float = 0.0,
    audio_end: float | None = None,
) -> list[str]:
    """ffmpeg encoding raw rgb24 frames read from stdin to H.264 or HEVC yuv420p in `output`, with audio from
    `audio_from`.

    width, height: frame size in pixels; both must be even (yuv420p halves the chroma planes), and at least
        16 for libx265.
    fps_rational: the frame rate as an exact rational string ("30000/1001", "25"), given to `-r` so that
        frame timing carries no rounding; every frame written is encoded once.
    audio_from: file whose first audio stream, if it has one (`-map 1:a:0?`), is muxed in; None for no audio.
    audio_codec: ffmpeg codec name of that audio stream, deciding copy or AAC (`audio_codec_args`).
    metadata: container tags (`metadata_args`).
    crf: constant rate factor, 0–51 (lower is better; for x264 18 is visually lossless and 0 lossless).
    preset: an x264/x265 preset, `ultrafast` … `veryslow`.
    encoder: one of VIDEO_ENCODERS.
    audio_start, audio_end: the part of `audio_from` to keep, in seconds of its timeline (end exclusive; None =
        to its end). The cut is sample-accurate: the audio is decoded from `audio_start` (`-ss` before `-i`) and
        re-encoded to AAC, since a copied stream can only be cut at packet boundaries.

    The RGB frames are converted to limited-range BT.709 YUV and tagged as such, the colour space players
    assume for untagged HD video, so colours are not shifted on playback.
    """
    if width < 2 or height < 2 or width % 2 or height % 2:
        raise ValueError(f"yuv420p needs an even frame size of at least 2×2, got {width}×{height}")
    if not _RATIONAL.match(fps_rational):
        raise ValueError(f"fps_rational must be a positive rational like '30000/1001', got {fps_rational!r}")
    if not 0 <= crf <= 51:
        raise ValueError(f"crf must be in 0–51, got {crf}")
    if preset not in X264_PRESETS:
        raise ValueError(f"preset must be one of {', '.join(X264_PRESETS)}, got {preset!r}")
    if encoder not in VIDEO_ENCODERS:
        raise ValueError(f"encoder must be one of {', '.join(VIDEO_ENCODERS)}, got {encoder!r}")
    if encoder == "libx265" and min(width, height) < _X265_MIN_SIZE:
        least = f"{_X265_MIN_SIZE}×{_X265_MIN_SIZE}"
        raise ValueError(f"libx265 needs a frame size of at least {least}, got {width}×{height}")
    if audio_end is not None and audio_end <= audio_start:
        raise ValueError(f"audio_end must be after audio_start ({audio_start} s), got {audio_end} s")
    muxer = muxer_for(output)
    args = [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", fps_rational, "-i", "pipe:0",
    ]  # fmt: skip
    args += _audio_input_args(audio_from, audio_start, audio_end)
    args += ["-map", "0:v:0", *_audio_map_args(muxer, audio_from, audio_codec, audio_start, audio_end)]
    args += [
        "-vf", "scale=out_color_matrix=bt709:out_range=tv,format=yuv420p",
        *video_codec_args(muxer, encoder, crf, preset), "-pix_fmt", "yuv420p",
        "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
        *metadata_args(muxer, metadata),
        "-f", muxer, str(output),
    ]  # fmt: skip
    return args


def _audio_input_args(audio_from: Path | None, audio_start: float, audio_end: float | None) -> list[str]:
    """The second input (`1`): the part [audio_start, audio_end) of `audio_from`, seeked on input."""
    if audio_from is None:
        return []
    args: list[str] = []
    if audio_start > 0:
        args += ["-ss", seconds_arg(audio_start)]
    if audio_end is not None:
        args += ["-t", seconds_arg(audio_end - audio_start)]
    return [*args, "-i", str(audio_from)]


def _audio_map_args(
    muxer: str, audio_from: Path | None, audio_codec: str | None, audio_start: float, audio_end: float | None
) -> list[str]:
    """Map input 1's first audio stream if it has one; a cut is re-encoded (a copy cuts only at packets)."""
    if audio_from is None:
        return []
    cut = audio_start > 0 or audio_end is not None
    codec = ["-c:a", "aac", "-b:a", AAC_BITRATE] if cut else audio_codec_args(muxer, audio_codec)
    return ["-map", "1:a:0?", *codec]


def concat_list(segments: Sequence[tuple[Path, int]], rate: Fraction) -> str:
    """The concat demuxer's script for `segments` (path, frame count), played back to back at `rate` frames/s.

    Each file gets an explicit `duration`: without it the demuxer takes the MP4's own duration, which an edit
    list (B-frames) lengthens by a few ticks, leaving a gap at every joint. Durations are the differences of the
    joints' times rounded to the microsecond (the demuxer's resolution), so rounding never accumulates.
    Paths are absolute (the script is read with `-safe 0`) and quoted for the demuxer.
    """
    lines = ["ffconcat version 1.0"]
    done = 0
    for path, frames in segments:
        if frames < 1:
            raise ValueError(f"a segment holds at least one frame, {path} has {frames}")
        start, done = round(done / rate * 1_000_000), done + frames
        micros = round(done / rate * 1_000_000) - start
        quoted = str(path).replace("'", "'\\''")
        lines += [f"file '{quoted}'", f"duration {micros // 1_000_000}.{micros % 1_000_000:06d}"]
    return "\n".join(lines) + "\n"


def concat_args(
    ffmpeg: str,
    script: Path,
    output: Path,
    audio_from: Path | None,
    audio_codec: str | None,
    metadata: Mapping[str, str],
    encoder: str = "libx264",
    audio_start: float = 0.0,
    audio_end: float | None = None,
) -> list[str]:
    """ffmpeg joining the segments a `concat_list` script names into `output`, video copied (not re-encoded),
    with the audio of `audio_from` muxed in once.

    audio_from, audio_codec, audio_start, audio_end: as for `encode_args` (the audio of the whole span).
    metadata: container tags (`metadata_args`). encoder: the one the segments were made with; HEVC in MP4/MOV is
        tagged `hvc1` again, since a stream copy does not carry the tag over.
    """
    if audio_end is not None and audio_end <= audio_start:
        raise ValueError(f"audio_end must be after audio_start ({audio_start} s), got {audio_end} s")
    muxer = muxer_for(output)
    args = [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", str(script),
        *_audio_input_args(audio_from, audio_start, audio_end),
        "-map", "0:v:0", *_audio_map_args(muxer, audio_from, audio_codec, audio_start, audio_end),
        "-c:v", "copy",
    ]  # fmt: skip
    if encoder == "libx265" and muxer in ("mp4", "mov"):
        args += ["-tag:v", "hvc1"]
    return [*args, *metadata_args(muxer, metadata), "-f", muxer, str(output)]
