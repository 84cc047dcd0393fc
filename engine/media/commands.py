"""ffmpeg and ffprobe command lines, as pure functions returning argument lists.

Nothing here runs a process or touches the filesystem: `engine/media/` runs these lists, and
`tests/test_ffmpeg_commands.py` pins them with exact list equality. Every list starts with the executable
path it was given, so the same functions serve a system ffmpeg and the one bundled with imageio-ffmpeg.

Conventions shared by all commands:
- Every file path is passed as a `file:` URL (`file_url`): a path that starts with `-` is never read as an option,
  and one that looks like a protocol (`concat:a|b`, `http:x`) is never opened as one.
- The video stream is selected with the specifier `V:0`: the first video stream that is not an attached
  picture (cover art), so an audio file with artwork is never mistaken for a video.
- Frame timing is passed through (`-fps_mode passthrough`): `-vsync` is not used because FFmpeg 9 removed it,
  and any constant-rate mode would drop or duplicate frames of variable-rate input. A job that asks for another
  rate gets it from the `fps` filter at decode, where which frame fills each output slot is defined exactly.
- Raw frames cross pipes as `rgb24`: H×W×3 uint8 RGB, row-major, no padding, the layout of a `Frame`. Their
  times do not cross the pipe: a decoder gives each frame once in presentation order (the probe knows their
  times), and an encoder is told every frame's time by a `setpts` expression in a time base of its own
  (`VideoTiming`), so variable-rate input stays variable-rate and a GIF keeps its delays.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from engine.core.errors import InvalidInput

# Output extension -> ffmpeg muxer. WebM holds VP9 (and AV1) only: a video there is VP9, with its alpha if it has one.
MUXERS: Mapping[str, str] = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska", ".webm": "webm"}
# An animated GIF output: its segments are encoded losslessly (INTERMEDIATE_ENCODER) and only the join makes GIF.
GIF_SUFFIX = ".gif"
# GIF frame delays are whole hundredths of a second.
GIF_TIME_BASE = "1/100"
# Every extension a video target can be written to.
VIDEO_SUFFIXES = (*MUXERS, GIF_SUFFIX)

# Audio codecs (ffmpeg codec names) each muxer stores as they are; anything else is re-encoded to AAC.
_LOSSY_AUDIO = frozenset({"aac", "mp3", "ac3", "eac3"})
_PCM_AUDIO = frozenset({"pcm_s16le", "pcm_s24le", "pcm_f32le"})
COPYABLE_AUDIO: Mapping[str, frozenset[str]] = {
    "mp4": _LOSSY_AUDIO | {"alac", "opus"},
    "mov": _LOSSY_AUDIO | _PCM_AUDIO | {"alac", "pcm_s16be"},
    "matroska": _LOSSY_AUDIO | _PCM_AUDIO | {"alac", "opus", "vorbis", "flac", "dts", "truehd"},
    "webm": frozenset({"opus", "vorbis"}),
}
# The audio encoder for what a container cannot copy (with its bitrate), and the most channels it takes.
AUDIO_ENCODER: Mapping[str, str] = {"mp4": "aac", "mov": "aac", "matroska": "aac", "webm": "libopus"}
AUDIO_MAX_CHANNELS: Mapping[str, int] = {"aac": 8, "libopus": 8}
# AAC's highest sample rate; Opus runs at 48 kHz only. Audio above (a recorder's 192 kHz) is resampled to 48 kHz.
AUDIO_MAX_RATE: Mapping[str, int] = {"aac": 96000, "libopus": 48000}
# Subtitle codecs each muxer stores as they are; text subtitles go into MP4/MOV as mov_text.
COPYABLE_SUBTITLES: Mapping[str, frozenset[str]] = {
    "mp4": frozenset({"mov_text"}), "mov": frozenset({"mov_text"}),
    "matroska": frozenset({"subrip", "ass", "ssa", "webvtt", "mov_text", "hdmv_pgs_subtitle", "dvd_subtitle",
                           "dvb_subtitle"}),
    "webm": frozenset({"webvtt"}),
}  # fmt: skip
TEXT_SUBTITLES = frozenset({"subrip", "ass", "ssa", "webvtt", "mov_text", "text"})

# AAC bitrate when the source audio has to be re-encoded: transparent for stereo speech and music; Opus's (WebM).
AAC_BITRATE = "192k"
OPUS_BITRATE = "160k"

X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")

# NVIDIA's hardware encoders (NVENC): H.264, HEVC and (Ada and newer GPUs) AV1, fed the same yuv420p frames.
NVENC_ENCODERS = ("h264_nvenc", "hevc_nvenc", "av1_nvenc")
# Video encoders a job can name; libx265 takes the same crf scale and preset names as libx264, and NVENC gets both
# mapped onto its own (`nvenc_quality_args`, NVENC_PRESETS); VP9 (WebM, or alpha in Matroska) and ProRes (MOV, and
# ProRes 4444 for alpha) get theirs too (`video_codec_args`).
VIDEO_ENCODERS = ("libx264", "libx265", *NVENC_ENCODERS, "libvpx-vp9", "prores_ks")
# What `video.encoder` accepts: an encoder, or `auto` (NVENC where it is proven to work here, else libx264:
# engine.media.encode.choose_encoder).
ENCODER_CHOICES = ("auto", *VIDEO_ENCODERS)
# What `auto` takes on a machine whose NVENC works, and otherwise.
AUTO_HARDWARE, AUTO_SOFTWARE = "h264_nvenc", "libx264"
# Lossless RGB H.264 for segments that are only an intermediate (of a GIF output): no colour conversion, no loss.
INTERMEDIATE_ENCODER = "libx264rgb"
# The same for a GIF of a target with transparency: QuickTime Animation keeps RGBA losslessly.
GIF_ALPHA_ENCODER = "qtrle"
# The largest width and height each encoder accepts: x264's 16384; x265, ProRes and QuickTime Animation are bounded
# by the MOV/MP4 headers' 16-bit size fields; libvpx's VP9 by 16384 (measured); NVENC by its hardware (4096 for
# H.264, 8192 for HEVC and AV1); a GIF by its lossless x264 segments.
MAX_SIDE: Mapping[str, int] = {
    "libx264": 16384, "libx264rgb": 16384, "libx265": 65535, "gif": 16384, "qtrle": 65535, "prores_ks": 65535,
    "libvpx-vp9": 16384, "h264_nvenc": 4096, "hevc_nvenc": 8192, "av1_nvenc": 8192,
}  # fmt: skip
# The smallest width and height each encoder accepts, where it has a floor: x265 refuses frames under 16×16 ("Image
# size is too small"); NVENC's are the largest NVIDIA reports across its GPU generations (not measured here).
MIN_SIZE: Mapping[str, tuple[int, int]] = {
    "libx265": (16, 16), "h264_nvenc": (146, 145), "hevc_nvenc": (132, 129), "av1_nvenc": (128, 128),
}  # fmt: skip
# Which containers (muxers) each encoder's video goes into, where not all of them.
CONTAINERS: Mapping[str, frozenset[str]] = {
    "libx264": frozenset({"mp4", "mov", "matroska"}), "libx265": frozenset({"mp4", "mov", "matroska"}),
    "h264_nvenc": frozenset({"mp4", "mov", "matroska"}), "hevc_nvenc": frozenset({"mp4", "mov", "matroska"}),
    "av1_nvenc": frozenset({"mp4", "matroska", "webm"}), "libvpx-vp9": frozenset({"mp4", "matroska", "webm"}),
    "prores_ks": frozenset({"mov", "matroska"}),
}  # fmt: skip
# x264 preset → NVENC preset (p1 fastest … p7 best; FFmpeg's default is p4, which `medium` maps to).
NVENC_PRESETS: Mapping[str, str] = {
    "ultrafast": "p1", "superfast": "p1", "veryfast": "p2", "faster": "p3", "fast": "p3",
    "medium": "p4", "slow": "p5", "slower": "p6", "veryslow": "p7",
}  # fmt: skip
# NVDEC (`-hwaccel cuda`): the codecs it decodes, with the largest side each takes, and the pixel formats (8- and
# 10-bit 4:2:0; HEVC, VP9 and AV1 only for 10-bit). Anything else is decoded on the CPU.
NVDEC_CODECS: Mapping[str, int] = {
    "h264": 4096, "hevc": 8192, "av1": 8192, "vp9": 8192, "vp8": 4096, "mpeg2video": 4080, "vc1": 2048,
}  # fmt: skip
NVDEC_8BIT = frozenset({"yuv420p", "yuvj420p", "nv12"})
NVDEC_10BIT = frozenset({"yuv420p10le", "p010le"})
# Below this side NVDEC refuses some codecs; such small frames decode on a CPU in no time anyway.
NVDEC_MIN_SIDE = 128
# ffmpeg's messages when NVDEC cannot take a stream after all: it then decodes it on the CPU, frames intact.
NVDEC_FALLBACK = re.compile(r"nvdec|cuvid|hwaccel|Hardware is lacking|Failed setup for format cuda", re.IGNORECASE)
_RATIONAL = re.compile(r"^[1-9][0-9]*(/[1-9][0-9]*)?$")


def file_url(path: Path) -> str:
    """`path` as ffmpeg's `file:` URL: read as a file whatever its name (`-x.mp4`, `concat:a|b`, `a:b.mp4`)."""
    return f"file:{path}"


@dataclass(frozen=True)
class Audio:
    """The audio to mux: the first audio stream of `path` (`codec`: its ffmpeg codec name, None when unknown).

    start, end: seconds on that file's own timeline (its demuxer's timestamps, the ones the video's
    `MediaInfo.start_time` is on) where the output's audio begins and ends (end exclusive; None = to the end of
    the audio). Output time 0 is `start`, so audio that starts later than that keeps its delay.
    cut: decode and re-encode to AAC, trimmed sample-accurately to [start, end); otherwise the packets are copied
    (or re-encoded, when the container cannot hold the codec) with their times shifted by -start.
    """

    path: Path
    codec: str | None
    start: Fraction
    end: Fraction | None
    cut: bool


@dataclass(frozen=True)
class VideoTiming:
    """How an encoder times the frames it reads: `rate` (frames/s, exact rational string) is what the raw input is
    declared at; `time_base` ("1/12800") the encoder's ticks; `setpts` an expression of the frame number N giving
    each frame's time in those ticks (`FrameTimes.setpts`); `script`: read the filter graph from this file
    instead of the command line (an expression too long for one argument), with the option FFmpeg `major` has."""

    rate: str
    time_base: str
    setpts: str
    script: Path | None = None
    major: int = 7


def ffprobe_header_args(ffprobe: str, path: Path) -> list[str]:
    """ffprobe printing the container and every stream as JSON (`format`, `streams`), without reading packets."""
    return [ffprobe, "-v", "error", "-print_format", "json", "-show_format", "-show_streams", file_url(path)]


def ffprobe_probe_args(ffprobe: str, path: Path, identify: bool = False) -> list[str]:
    """ffprobe printing the container, every stream, its chapters and every packet as JSON.

    Each packet carries `stream_index`, `pts`, `duration` (in its stream's `time_base`) and `flags` (`D` marks
    a packet the demuxer asks decoders to discard, e.g. before an edit list's start). Counting the packets
    of the video stream that are not discarded gives the exact frame count, and their timestamps give the
    exact duration and whether the frame rate varies. Compact JSON keeps one packet per line. Streams carry
    `start_time`, so the audio's start can be compared with the first frame's. With `identify`, each packet
    also carries its `size` and a CRC32 of its bytes (`data_hash`): what the content's identity is made of.
    """
    entries = "packet=stream_index,pts,duration,flags" + (",size,data_hash" if identify else "")
    hashing = ["-show_data_hash", "CRC32"] if identify else []
    return [
        ffprobe, "-v", "error", "-print_format", "json=compact=1", "-show_format", "-show_streams", "-show_chapters",
        *hashing, "-show_entries", entries, file_url(path),
    ]  # fmt: skip


def ffprobe_keyframe_sizes_args(ffprobe: str, path: Path) -> list[str]:
    """ffprobe decoding only the keyframes of the first video stream and printing each one's stored size as
    `width,height` lines: a stream's resolution can only change at a keyframe (a new sequence header)."""
    return [
        ffprobe, "-v", "error", "-select_streams", "V:0", "-skip_frame", "nokey", "-show_entries",
        "frame=width,height", "-of", "csv=p=0", file_url(path),
    ]  # fmt: skip


def ffmpeg_keyframe_sizes_args(ffmpeg: str, path: Path) -> list[str]:
    """ffmpeg decoding only the keyframes of the first video stream, as stored (no rotation), each described by
    the `showinfo` filter on stderr (`… s:64x48 …`): `ffprobe_keyframe_sizes_args` without ffprobe."""
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-skip_frame", "nokey", "-noautorotate", "-i", file_url(path),
        "-map", "0:V:0", "-vf", "showinfo", "-f", "null", "-",
    ]  # fmt: skip


def gif_alpha_args(ffmpeg: str, path: Path, frames: int) -> list[str]:
    """ffmpeg decoding the first `frames` frames of a GIF to their alpha planes (gray, a byte a pixel) on stdout."""
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-i", file_url(path), "-map", "0:V:0",
        "-frames:v", str(frames), "-vf", "format=rgba,alphaextract", "-f", "rawvideo", "-pix_fmt", "gray", "pipe:1",
    ]  # fmt: skip


def ffmpeg_identify_args(ffmpeg: str, path: Path) -> list[str]:
    """ffmpeg copying every stream's packets, undecoded, to the `framecrc` muxer on stdout (a line per packet with
    its size and an Adler-32 of its bytes): the content's identity without ffprobe."""
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-i", file_url(path),
        "-map", "0", "-c", "copy", "-copyinkf", "-f", "framecrc", "pipe:1",
    ]  # fmt: skip


def ffmpeg_header_args(ffmpeg: str, path: Path) -> list[str]:
    """ffmpeg opening `path` with no output: it prints the container and streams to stderr and exits 1.

    Used where ffprobe is absent, to read stream details and container tags.
    """
    return [ffmpeg, "-nostdin", "-hide_banner", "-i", file_url(path)]


def ffmpeg_count_args(ffmpeg: str, path: Path) -> list[str]:
    """ffmpeg copying the first video stream's packets (stream 0 of the output), undecoded, and those of the first
    audio stream if there is one (stream 1), to the `framecrc` muxer on stdout.

    Stdout gets one line per packet (`stream, dts, pts, duration, size, crc[, F=flags]`, after `#tb` and other
    `#` header lines); stderr gets the same stream description as `ffmpeg_header_args`. This is the
    ffprobe-free way to count packets and read their timestamps exactly (shifted by the container's start time,
    which the header says). `-copyinkf` keeps packets before the first keyframe, which stream copy would
    otherwise drop and ffprobe would count.
    """
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-i", file_url(path),
        "-map", "0:V:0", "-map", "0:a:0?", "-c", "copy", "-copyinkf", "-f", "framecrc", "pipe:1",
    ]  # fmt: skip


def encoders_args(ffmpeg: str) -> list[str]:
    """ffmpeg listing the encoders it was built with on stdout: a legend, a `------` line, then one encoder a line
    (`flags name description`)."""
    return [ffmpeg, "-nostdin", "-hide_banner", "-encoders"]


def encoder_help_args(ffmpeg: str, encoder: str) -> list[str]:
    """ffmpeg describing `encoder` on stdout, with a `Supported pixel formats: …` line."""
    return [ffmpeg, "-nostdin", "-hide_banner", "-h", f"encoder={encoder}"]


def encoder_test_args(ffmpeg: str, encoder: str) -> list[str]:
    """ffmpeg encoding one black 256×256 frame with `encoder` and discarding it: exit status 0 when the encoder
    really works here (a hardware encoder such as h264_nvenc can be built in and still lack its GPU or driver)."""
    return [ffmpeg, "-nostdin", "-hide_banner", "-v", "error", "-f", "lavfi", "-i", "color=c=black:s=256x256:r=25",
            "-frames:v", "1", "-c:v", encoder, "-f", "null", "-"]  # fmt: skip


@dataclass(frozen=True)
class Decoding:
    """How a decode turns the stored pictures into frames, beyond `decode_args`' span (all optional):

    size: (width, height) every frame comes out at, the probed display size, so a frame of another size (a
        resolution that changes mid-way) can never break the pipe; letterbox: fit such frames inside that size
        with their aspect kept, on black, instead of scaling them to it.
    matrix, range: the YCbCr matrix (swscale's name: bt709, smpte170m, bt2020 …) and range ("tv", "pc") to convert
        to RGB with (None: what the frames say, or swscale's default).
    convert: a filter that comes first (the `colorspace` filter that takes a GIF's frames to sRGB).
    decoder: the ffmpeg decoder to use (libvpx-vp9 for VP9 with alpha), None for ffmpeg's choice.
    retime: (time base, setpts expression) giving frame N its time, for a file whose own timestamps repeat or jump
        back: a trim or resample then selects by the probed times, not the file's.
    alpha: decode the alpha plane instead (one byte a pixel, 255 = opaque, `gray`).
    """

    size: tuple[int, int] | None = None
    letterbox: bool = False
    matrix: str | None = None
    range: str | None = None
    convert: str | None = None
    decoder: str | None = None
    retime: tuple[str, str] | None = None
    alpha: bool = False


def decode_args(
    ffmpeg: str,
    path: Path,
    start_pts: int = 0,
    end_pts: int | None = None,
    fps_rational: str | None = None,
    max_frames: int | None = None,
    major: int = 7,
    hwaccel: bool = False,
    how: Decoding = Decoding(),
) -> list[str]:
    """ffmpeg decoding the first video stream of `path` to raw rgb24 frames on stdout (or, with `how.alpha`,
    their alpha planes as gray).

    Frames come out in presentation order, upright (ffmpeg's default autorotate applies the display matrix,
    so their size is the display size) and each exactly once (`-fps_mode passthrough`). Only errors are
    logged on stderr, so anything there means the input is damaged. The filter graph is never rebuilt
    (`-reinit_filter 0`): a frame of another size goes through the same filters, and `how.size` brings it back.

    start_pts, end_pts: keep only the frames whose presentation time, counted from the first frame in the video
        stream's time base, is in [start_pts, end_pts) (end_pts None: to the end). Integers, so the selection is
        exact: the `trim` filter compares them with the frames' own integer timestamps.
    fps_rational: resample to this rate ("12/1", "30000/1001"): output frame k stands for the time
        start_pts + k / rate and shows the last kept frame that started at or before it (the first kept frame for
        a slot before it). Slots run until the input ends; end a shorter span with max_frames, not end_pts.
    max_frames: stop after this many output frames (the span's frame count, so ffmpeg stops decoding there).
    major: the FFmpeg major version. The raw frames are timed in the input's own time base (`-enc_time_base`,
        spelt `demux` from FFmpeg 7, `-1` before): in the default, 1 / the guessed frame rate, two frames of a
        variable-rate video can fall on one tick, which ffmpeg reports as an error.
    hwaccel: decode on the GPU (NVDEC, `-hwaccel cuda`; only where `nvdec_allows` the stream and the machine's
        CUDA device works): the decoded pictures come back to the host and are converted there as usual, so the
        frames and their order are those of a CPU decode.
    how: size, colour conversion, decoder, retiming and alpha (`Decoding`).
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
    filters: list[str] = [how.convert] if how.convert else []
    if how.retime is not None:
        filters.append(f"settb={how.retime[0]},setpts='{how.retime[1]}'")
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
    filters += _conversion(how)
    args = [ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error"]
    if hwaccel:
        args += ["-hwaccel", "cuda"]
    if how.decoder is not None:
        args += ["-c:v", how.decoder]
    # One filter graph for the whole stream: rebuilt at a change of frame size, it would restart the frame count
    # and the start time that the retiming, trim and resampling filters hold (the `scale` filter takes the change).
    args += ["-reinit_filter", "0", "-i", file_url(path), "-map", "0:V:0"]
    if filters:
        args += ["-vf", ",".join(filters)]
    args += ["-fps_mode", "passthrough", "-enc_time_base", "demux" if major >= 7 else "-1"]
    if max_frames is not None:
        args += ["-frames:v", str(max_frames)]
    return [*args, "-f", "rawvideo", "-pix_fmt", "gray" if how.alpha else "rgb24", "pipe:1"]


def _conversion(how: Decoding) -> list[str]:
    """The filters that bring each frame to the decode's size and colour (none when nothing is asked)."""
    options = []
    if how.size is not None:
        width, height = how.size
        options.append(f"w={width}:h={height}")
        if how.letterbox:
            options.append("force_original_aspect_ratio=decrease")
    if how.matrix is not None:
        options.append(f"in_color_matrix={how.matrix}")
    if how.range is not None:
        options.append(f"in_range={how.range}")
    filters = [f"scale={':'.join(options)}"] if options else []
    if how.letterbox and how.size is not None:
        # Re-evaluated at every frame: a frame of another size comes to the same filters (`-reinit_filter 0`).
        filters.append(f"pad={how.size[0]}:{how.size[1]}:-1:-1:color=black@0:eval=frame")
    if how.alpha:
        filters += ["format=rgba", "alphaextract"]
    return filters


def nvdec_allows(codec: str | None, pix_fmt: str, width: int, height: int) -> bool:
    """Whether NVDEC decodes a video stream of ffmpeg codec `codec`, pixel format `pix_fmt` and width × height
    pixels (the codecs, formats and sizes of NVDEC_CODECS, NVDEC_8BIT and NVDEC_10BIT)."""
    if codec not in NVDEC_CODECS or min(width, height) < NVDEC_MIN_SIDE or max(width, height) > NVDEC_CODECS[codec]:
        return False
    return pix_fmt in NVDEC_8BIT or (pix_fmt in NVDEC_10BIT and codec in ("hevc", "vp9", "av1"))


def hwaccel_test_args(ffmpeg: str) -> list[str]:
    """ffmpeg opening a CUDA device and moving one frame onto it and back: exit status 0 when `-hwaccel cuda` can
    work here (libcuda loads and the GPU answers)."""
    return [ffmpeg, "-nostdin", "-hide_banner", "-v", "error", "-init_hw_device", "cuda=gpu", "-filter_hw_device",
            "gpu", "-f", "lavfi", "-i", "color=c=black:s=256x256:r=25", "-frames:v", "1",
            "-vf", "format=nv12,hwupload,hwdownload,format=nv12", "-f", "null", "-"]  # fmt: skip


def muxer_for(output: Path) -> str:
    """The ffmpeg muxer for an output path, from its extension; InvalidInput for a container not offered."""
    muxer = MUXERS.get(output.suffix.lower())
    if muxer is None:
        raise InvalidInput(f"cannot write video to {output}: the extension must be one of {', '.join(MUXERS)}")
    return muxer


def check_container(output: Path, encoder: str) -> None:
    """InvalidInput when `output`'s container cannot hold what `encoder` makes (AV1 and VP9: not MOV; H.264 and
    HEVC: not WebM; ProRes: MOV or MKV)."""
    muxer = muxer_for(output)
    holds = CONTAINERS.get(encoder)
    if holds is not None and muxer not in holds:
        endings = ", ".join(suffix for suffix, m in MUXERS.items() if m in holds and suffix != ".m4v")
        raise InvalidInput(
            f"cannot write {encoder} video to {output.name}: {muxer.upper()} cannot hold it; use {endings}"
            + (", or video.encoder=auto (VP9)" if muxer == "webm" else "")
        )


def seconds_arg(seconds: float | Fraction) -> str:
    """A time for ffmpeg options (`-ss`, `-t`): decimal seconds to the microsecond, ffmpeg's own resolution."""
    if seconds < 0:
        raise ValueError(f"a time must be ≥ 0 s, got {seconds}")
    return f"{float(seconds):.6f}".rstrip("0").rstrip(".")


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


def nvenc_quality_args(encoder: str, crf: int) -> list[str]:
    """NVENC's constant-quality mode for a CRF (0–51): `-rc vbr -cq Q -b:v 0` (quality target, no bitrate cap).

    H.264 and HEVC take the number as it is: NVENC's CQ is a QP-like scale like x264's CRF (at the same number it
    spends somewhat more bits); AV1's scale runs 0–63, so the number is scaled by 63/51 (rounded, at least 1).
    CQ 0 means "automatic" to NVENC, so CRF 0 (lossless) is the encoder's lossless tuning instead."""
    if encoder not in NVENC_ENCODERS:
        raise ValueError(f"{encoder} is not an NVENC encoder ({', '.join(NVENC_ENCODERS)})")
    if not 0 <= crf <= 51:
        raise ValueError(f"crf must be in 0–51, got {crf}")
    if crf == 0:
        return ["-tune", "lossless"]
    cq = max(1, round(crf * 63 / 51)) if encoder == "av1_nvenc" else crf
    return ["-rc", "vbr", "-cq", str(cq), "-b:v", "0"]


def _hevc(encoder: str) -> bool:
    return encoder in ("libx265", "hevc_nvenc")


# x264 preset → libvpx's `-cpu-used` at `-deadline good` (0 slowest and best … 5 fastest).
_VP9_SPEED: Mapping[str, int] = {
    "ultrafast": 5, "superfast": 5, "veryfast": 4, "faster": 4, "fast": 3, "medium": 2, "slow": 1, "slower": 1,
    "veryslow": 0,
}  # fmt: skip


def video_codec_args(muxer: str, encoder: str, crf: int, preset: str, alpha: bool = False) -> list[str]:
    """`-c:v` and its quality settings. libx265 logs only errors (its own info lines would otherwise fill stderr,
    which is kept for error messages); HEVC is tagged `hvc1` in MP4/MOV, the tag Apple players require. NVENC gets
    the x264 preset as its own (NVENC_PRESETS) and the CRF as its constant quality (`nvenc_quality_args`); VP9 its
    constant quality on its 0–63 scale (crf × 63/51) and the preset as its speed; ProRes is HQ, or 4444 with
    `alpha` (its quality follows its profile); QuickTime Animation is lossless."""
    if encoder == INTERMEDIATE_ENCODER:
        return ["-c:v", encoder, "-preset", preset, "-qp", "0"]
    if encoder == GIF_ALPHA_ENCODER:
        return ["-c:v", encoder]
    if encoder == "prores_ks":
        return ["-c:v", encoder, "-profile:v", "4444" if alpha else "hq", "-vendor", "apl0"]
    if encoder == "libvpx-vp9":
        return ["-c:v", encoder, "-crf", str(round(crf * 63 / 51)), "-b:v", "0", "-deadline", "good",
                "-cpu-used", str(_VP9_SPEED[preset]), "-row-mt", "1"]  # fmt: skip
    if encoder in NVENC_ENCODERS:
        args = ["-c:v", encoder, "-preset", NVENC_PRESETS[preset], *nvenc_quality_args(encoder, crf)]
    else:
        args = ["-c:v", encoder, "-preset", preset, "-crf", str(crf)]
    if encoder == "libx265":
        args += ["-x265-params", "log-level=error"]
    if _hevc(encoder) and muxer in ("mp4", "mov"):
        args += ["-tag:v", "hvc1"]
    return args


@dataclass(frozen=True)
class OutputPicture:
    """How frames are encoded so the output shows what the target showed (`engine.media.picture.plan` decides it
    per job; the default is H.264 BT.709 limited-range yuv420p with square pixels).

    encoder: the ffmpeg encoder; pix_fmt: what it is given ("yuv420p", "yuv420p10le", "p010le", "yuva444p10le",
        "argb", "rgb24" …).
    matrix, range: swscale's matrix name and "tv"/"pc" for the RGB → YCbCr conversion (matrix None for an RGB
        encoder); colorspace, primaries, transfer: the tags written (ffmpeg's names; the range is tagged too).
    sar: the sample aspect ratio written (1 for square pixels); alpha: frames arrive with their alpha plane (RGBA).
    convert: a filter the target's frames are decoded through first (a GIF's: its colours to sRGB).
    notes: what the run's summary says about these choices (a depth or an alpha that could not be kept …).
    """

    encoder: str = "libx264"
    pix_fmt: str = "yuv420p"
    matrix: str | None = "bt709"
    range: str = "tv"
    colorspace: str = "bt709"
    primaries: str = "bt709"
    transfer: str = "bt709"
    sar: Fraction = Fraction(1)
    alpha: bool = False
    notes: tuple[str, ...] = ()
    convert: str | None = None

    @property
    def suffix(self) -> str:
        """The container its segments are written in: MP4 (exact frame times) for what MP4 holds, MOV for ProRes
        and QuickTime Animation, Matroska for VP9 (its alpha travels in Matroska's BlockAdditions)."""
        if self.encoder in ("prores_ks", GIF_ALPHA_ENCODER):
            return ".mov"
        return ".mkv" if self.encoder == "libvpx-vp9" else ".mp4"

    @property
    def pad(self) -> tuple[int, int]:
        """(rows, columns) an odd frame size needs added for the pixel format's chroma subsampling: 4:2:0 halves
        both sides, 4:2:2 the width; 4:4:4 and RGB take any size."""
        if self.matrix is None or "444" in self.pix_fmt:
            return (0, 0)
        return (0, 1) if "422" in self.pix_fmt else (1, 1)

    def colour_args(self) -> list[str]:
        """The encoder's colour tags (`-colorspace …`), none for an RGB encoder."""
        if self.matrix is None:
            return []
        return ["-colorspace", self.colorspace, "-color_primaries", self.primaries, "-color_trc", self.transfer,
                "-color_range", self.range]  # fmt: skip


def encode_args(
    ffmpeg: str,
    output: Path,
    width: int,
    height: int,
    timing: VideoTiming,
    audio: Audio | None,
    metadata: Mapping[str, str],
    crf: int = 18,
    preset: str = "medium",
    encoder: str = "libx264",
    picture: OutputPicture | None = None,
) -> list[str]:
    """ffmpeg encoding raw frames read from stdin (rgb24, or rgba for a picture with alpha) to `output`, as
    `picture` says (default: H.264 BT.709 yuv420p), with audio from `audio`.

    width, height: frame size in pixels; for 4:2:0 both must be even (it halves the chroma planes), and each
        encoder has its least size (MIN_SIZE: libx265 16×16).
    timing: when each frame is shown (`VideoTiming`): the frames are retimed to it by `settb` and `setpts` and
        encoded with that time base, every frame once (`-fps_mode passthrough`), so variable frame rates are kept.
    audio: the audio to mux (`Audio`; None for no audio), copied when the container can hold its codec and it
        needs no cut, else re-encoded to AAC.
    metadata: container tags (`metadata_args`).
    crf: constant rate factor, 0–51 (lower is better; for x264 18 is visually lossless and 0 lossless); NVENC's
        constant quality from it (`nvenc_quality_args`).
    preset: an x264/x265 preset, `ultrafast` … `veryslow` (NVENC: the matching p1–p7, NVENC_PRESETS).
    encoder: one of VIDEO_ENCODERS, INTERMEDIATE_ENCODER or GIF_ALPHA_ENCODER (`picture.encoder` when given).

    The RGB frames are converted to YCbCr with the picture's matrix and range and tagged with its colour
    description (by default limited-range BT.709, what players assume for untagged HD video), and its sample
    aspect ratio, so what a viewer sees is not shifted or squeezed.
    """
    if picture is None:
        rgb = encoder in (INTERMEDIATE_ENCODER, GIF_ALPHA_ENCODER)
        picture = OutputPicture(encoder, "rgb24", None, "pc") if rgb else OutputPicture(encoder)
    encoder = picture.encoder
    rows, columns = picture.pad
    if width < 1 or height < 1 or (rows and height % 2) or (columns and width % 2):
        raise ValueError(f"{picture.pix_fmt} needs an even frame size, got {width}×{height}")
    if not _RATIONAL.match(timing.rate):
        raise ValueError(f"the rate must be a positive rational like '30000/1001', got {timing.rate!r}")
    if not 0 <= crf <= 51:
        raise ValueError(f"crf must be in 0–51, got {crf}")
    if preset not in X264_PRESETS:
        raise ValueError(f"preset must be one of {', '.join(X264_PRESETS)}, got {preset!r}")
    if encoder not in (*VIDEO_ENCODERS, INTERMEDIATE_ENCODER, GIF_ALPHA_ENCODER):
        raise ValueError(f"encoder must be one of {', '.join(VIDEO_ENCODERS)}, got {encoder!r}")
    least = MIN_SIZE.get(encoder)
    if least is not None and (width < least[0] or height < least[1]):
        raise ValueError(f"{encoder} needs a frame size of at least {least[0]}×{least[1]}, got {width}×{height}")
    muxer = muxer_for(output)
    args = [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgba" if picture.alpha else "rgb24", "-s", f"{width}x{height}",
        "-r", timing.rate, "-i", "pipe:0",
    ]  # fmt: skip
    args += _audio_input_args(audio)
    args += ["-map", "0:v:0", *_audio_map_args(muxer, audio)]
    args += _filter_args(encode_filter(timing, picture), timing)
    args += ["-fps_mode", "passthrough", "-enc_time_base", timing.time_base]
    args += [*video_codec_args(muxer, encoder, crf, preset, picture.alpha), "-pix_fmt", picture.pix_fmt]
    args += picture.colour_args()
    return [*args, *metadata_args(muxer, metadata), "-f", muxer, file_url(output)]


def encode_filter(timing: VideoTiming, picture: OutputPicture | bool = False) -> str:
    """The encoder's video filter graph: frames retimed to `timing`, then converted to the picture's YCbCr (its
    matrix, range and pixel format) and given its sample aspect ratio; an RGB encoder's frames only to its pixel
    format. `picture` True stands for the lossless RGB intermediate, False for the default picture."""
    if isinstance(picture, bool):
        picture = OutputPicture(INTERMEDIATE_ENCODER, "rgb24", None, "pc") if picture else OutputPicture()
    graph = f"settb={timing.time_base},setpts='{timing.setpts}'"
    if picture.matrix is None:
        return graph if picture.pix_fmt == "rgb24" else f"{graph},format={picture.pix_fmt}"
    graph += f",scale=out_color_matrix={picture.matrix}:out_range={picture.range},format={picture.pix_fmt}"
    if picture.encoder == "prores_ks":
        # ProRes writes the frames' own colour description, not the encoder's options: give the frames the tags.
        graph += (
            f",setparams=colorspace={picture.colorspace}:color_primaries={picture.primaries}:"
            f"color_trc={picture.transfer}:range={picture.range}"
        )
    if picture.sar != 1:
        graph += f",setsar={picture.sar.numerator}/{picture.sar.denominator}"
    return graph


def _filter_args(graph: str, timing: VideoTiming) -> list[str]:
    """The video filter, inline or (`timing.script`, whose content is `graph`) from a file: FFmpeg 7 reads an
    option's value from a file with the `-/` prefix, older builds with `-filter_script`."""
    if timing.script is None:
        return ["-vf", graph]
    return ["-/vf" if timing.major >= 7 else "-filter_script:v", str(timing.script)]


def _audio_input_args(audio: Audio | None) -> list[str]:
    """The second input (`1`), timed so that its output time 0 is `audio.start` on the file's own timeline.

    `-seek_timestamp 1` makes `-ss` an absolute time on that timeline (not one counted from the container's start,
    which the earliest stream sets); a start before 0 (a video whose first frame has a negative timestamp) is an
    `-itsoffset` instead. A copy is only shifted; a cut seeks there and reads `end - start` seconds.
    """
    if audio is None:
        return []
    if audio.end is not None and audio.end <= audio.start:
        raise ValueError(f"the audio must end after it starts ({float(audio.start)} s), not at {float(audio.end)} s")
    args = ["-seek_timestamp", "1"]
    if audio.cut and audio.start > 0:
        args += ["-ss", seconds_arg(audio.start)]
    elif audio.start:
        args += ["-itsoffset", _signed_seconds(-audio.start)]
    if audio.cut and audio.end is not None:
        args += ["-t", seconds_arg(audio.end - audio.start)]
    return [*args, "-i", file_url(audio.path)]


def _signed_seconds(seconds: Fraction) -> str:
    return ("-" if seconds < 0 else "") + seconds_arg(abs(seconds))


def _audio_map_args(muxer: str, audio: Audio | None) -> list[str]:
    """Map input 1's first audio stream if it has one; a cut is re-encoded (a copy cuts only at packets) and
    trimmed at the output's time 0, which drops what lies before it when the start was an `-itsoffset`."""
    if audio is None:
        return []
    if audio.cut:
        return ["-map", "1:a:0?", "-af", "atrim=start=0", "-c:a", "aac", "-b:a", AAC_BITRATE]
    return ["-map", "1:a:0?", *audio_codec_args(muxer, audio.codec)]


def concat_list(segments: Sequence[tuple[Path, Fraction]], end: Fraction) -> str:
    """The concat demuxer's script for `segments` (path, start in seconds from the output's time 0, ascending,
    the first at 0) played back to back, the last one ending at `end` seconds.

    Each file gets an explicit `duration` (the time to the next one's start): without it the demuxer takes the
    MP4's own duration, which an edit list (B-frames) lengthens by a few ticks, leaving a gap at every joint, and a
    variable-rate video would drift. Durations are the differences of the joints' times rounded to the
    microsecond (the demuxer's resolution), so rounding never accumulates. Paths are absolute (the script is read
    with `-safe 0`) and quoted for the demuxer.
    """
    lines = ["ffconcat version 1.0"]
    joints = [start for _, start in segments] + [end]
    if joints[0] != 0 or any(b <= a for a, b in zip(joints, joints[1:], strict=False)):
        raise ValueError(f"segment starts must begin at 0 and ascend to the end, got {[str(j) for j in joints]}")
    micros = [round(j * 1_000_000) for j in joints]
    for (path, _), a, b in zip(segments, micros, micros[1:], strict=False):
        quoted = str(path).replace("'", "'\\''")
        lines += [f"file '{quoted}'", f"duration {(b - a) // 1_000_000}.{(b - a) % 1_000_000:06d}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Track:
    """A stream of the source (the second input) that a join takes, besides the video: its kind ("a" audio, "s"
    subtitles), its number among the source's streams of that kind, and how: codec None copies it, else the
    encoder ("aac", "libopus", "mov_text"); sample_rate (Hz) resamples audio to it when not None."""

    kind: str
    number: int
    codec: str | None = None
    sample_rate: int | None = None


@dataclass(frozen=True)
class Ending:
    """Where a joined video's last frame ends, so its duration survives the stream copy (the concat demuxer gives
    reordered H.264/HEVC packets from MP4 no duration): `last` the last frame's time and `end` the video's end, in
    ticks from the first frame of the time base the output's muxer writes (MP4 and MOV: the segments' own;
    Matroska: milliseconds)."""

    last: int
    end: int

    def bsf(self) -> list[str]:
        """The `setts` bitstream filter that gives the last frame shown that duration (the muxers, MP4's edit list
        and Matroska's duration alike, end a track at its latest packet's time plus duration). setts sees the
        packets in the muxer's time base; their times and decode times are left as they are."""
        duration = f"if(gte(PTS-STARTPTS,{self.last}),{self.end - self.last},DURATION)"
        return ["-bsf:v", f"setts=pts=PTS:dts=DTS:duration='{duration}'"]


def concat_args(
    ffmpeg: str,
    script: Path,
    output: Path,
    audio: Audio | None,
    metadata: Mapping[str, str],
    encoder: str = "libx264",
    *,
    tracks: Sequence[Track] | None = None,
    chapters: bool = False,
    video_tags: Mapping[str, str] | None = None,
    ending: Ending | None = None,
) -> list[str]:
    """ffmpeg joining the segments a `concat_list` script names into `output`, video copied (not re-encoded),
    with the streams of the source `audio` names muxed in once (timed as for `encode_args`).

    metadata: container tags (`metadata_args`). encoder: the one the segments were made with; HEVC (libx265 or
    hevc_nvenc) in MP4/MOV is tagged `hvc1` again, since a stream copy does not carry the tag over.
    tracks: the source's streams to take (`Track`); None takes its first audio stream, copied where the container
    holds its codec, else AAC. chapters: take the source's chapters (timed like its audio). video_tags: the video
    stream's tags (language, title, timecode …). ending: the last frame's duration to keep (`Ending`).
    A cut (`audio.cut`) re-encodes every audio track, trimmed at the output's time 0.
    """
    muxer = muxer_for(output)
    args = [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", file_url(script),
        *_audio_input_args(audio),
        "-map", "0:v:0",
    ]  # fmt: skip
    if tracks is None:
        args += _audio_map_args(muxer, audio)
    elif audio is not None:
        args += _track_args(tracks, audio.cut)
    args += ["-c:v", "copy"]
    if _hevc(encoder) and muxer in ("mp4", "mov"):
        args += ["-tag:v", "hvc1"]
    if ending is not None:
        args += ending.bsf()
    # Tags come from `metadata` and `video_tags`; the source's streams bring their own (an audio track's language).
    if chapters and audio is not None:
        args += ["-map_chapters", "1"]
    for key, value in (video_tags or {}).items():
        args += ["-metadata:s:v:0", f"{key}={value}"]
    return [*args, *metadata_args(muxer, metadata), "-f", muxer, file_url(output)]


def _track_args(tracks: Sequence[Track], cut: bool) -> list[str]:
    """`-map` and codec options for each track, numbered as the output's streams of its kind. A cut audio track is
    re-encoded and trimmed at the output's time 0 (a copy cuts only at packets)."""
    args: list[str] = []
    count = {"a": 0, "s": 0}
    for track in tracks:
        out = f"{track.kind}:{count[track.kind]}"
        count[track.kind] += 1
        args += ["-map", f"1:{track.kind}:{track.number}"]
        codec = "aac" if cut and track.kind == "a" and track.codec is None else track.codec
        if codec is None:
            args += [f"-c:{out}", "copy"]
            continue
        args += [f"-c:{out}", codec]
        if track.kind == "a":
            args += [f"-b:{out}", OPUS_BITRATE if codec == "libopus" else AAC_BITRATE]
            if track.sample_rate is not None:
                args += [f"-ar:{out}", str(track.sample_rate)]
            if cut:
                args += [f"-filter:{out}", "atrim=start=0"]
    return args


def gif_args(
    ffmpeg: str,
    script: Path,
    output: Path,
    *,
    alpha: bool = False,
    sar: Fraction = Fraction(1),
    last: Fraction = Fraction(0),
) -> list[str]:
    """ffmpeg joining lossless segments (a `concat_list` script) into an animated GIF that loops.

    Each frame gets its own 256-colour palette (`palettegen=stats_mode=single`, `paletteuse=new=1`), so no frame is
    held back for a whole-video palette. Frame times are kept, rounded to GIF's hundredths of a second; `last`
    (seconds) is how long the last frame shows. alpha: the segments carry an alpha plane, kept as the GIF's
    transparent colour (pixels under half opacity). sar: the frames' sample aspect ratio; a GIF's pixels are
    square to its players, so frames are scaled to the width they are shown at.
    """
    graph = "split[a][b];[a]palettegen=stats_mode=single[p];[b][p]paletteuse=new=1"
    if alpha:
        graph = (
            "split[a][b];[a]palettegen=stats_mode=single:reserve_transparent=1[p];"
            "[b][p]paletteuse=new=1:alpha_threshold=128"
        )
    if sar != 1:
        graph = f"scale=w='trunc(iw*{sar.numerator}/{sar.denominator}+0.5)':h=ih,setsar=1,{graph}"
    delay = ["-final_delay", str(max(1, round(last * 100)))] if last > 0 else []
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", file_url(script), "-map", "0:v:0", "-filter_complex", graph,
        "-fps_mode", "passthrough", "-enc_time_base", GIF_TIME_BASE, "-c:v", "gif", "-loop", "0", *delay,
        "-f", "gif", file_url(output),
    ]  # fmt: skip
