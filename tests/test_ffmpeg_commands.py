"""The ffmpeg/ffprobe command lines, pinned with exact list equality (no process is run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import ffmpeg_commands as cmd
from engine.errors import InvalidInput

FF = "/opt/ff/ffmpeg"
PROBE = "/opt/ff/ffprobe"
CLIP = Path("/media/in put.mp4")


def test_ffprobe_header_args() -> None:
    assert cmd.ffprobe_header_args(PROBE, CLIP) == [
        PROBE, "-v", "error", "-print_format", "json", "-show_format", "-show_streams", "/media/in put.mp4",
    ]  # fmt: skip


def test_ffprobe_probe_args_list_every_packet() -> None:
    assert cmd.ffprobe_probe_args(PROBE, CLIP) == [
        PROBE, "-v", "error", "-print_format", "json=compact=1", "-show_format", "-show_streams",
        "-show_entries", "packet=stream_index,pts,duration,flags", "/media/in put.mp4",
    ]  # fmt: skip


def test_ffmpeg_header_args() -> None:
    assert cmd.ffmpeg_header_args(FF, CLIP) == [FF, "-nostdin", "-hide_banner", "-i", "/media/in put.mp4"]


def test_ffmpeg_count_args_copy_first_video_stream_to_framecrc() -> None:
    assert cmd.ffmpeg_count_args(FF, CLIP) == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-i", "/media/in put.mp4",
        "-map", "0:V:0", "-c", "copy", "-copyinkf", "-f", "framecrc", "pipe:1",
    ]  # fmt: skip


def test_decode_args_pass_timing_through_and_never_use_vsync() -> None:
    args = cmd.decode_args(FF, CLIP)
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-i", "/media/in put.mp4",
        "-map", "0:V:0", "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1",
    ]  # fmt: skip
    assert "-vsync" not in args


@pytest.mark.parametrize(
    ("name", "muxer"),
    [("a.mp4", "mp4"), ("a.M4V", "mp4"), ("a.mov", "mov"), ("a.mkv", "matroska")],
)
def test_muxer_for_extension(name: str, muxer: str) -> None:
    assert cmd.muxer_for(Path(name)) == muxer


@pytest.mark.parametrize("name", ["a.webm", "a.avi", "a", "a.png"])
def test_muxer_for_rejects_containers_without_h264(name: str) -> None:
    with pytest.raises(InvalidInput, match=r"\.mp4, \.m4v, \.mov, \.mkv"):
        cmd.muxer_for(Path(name))


@pytest.mark.parametrize(
    ("muxer", "codec", "expected"),
    [
        ("mp4", "aac", ["-c:a", "copy"]),
        ("mp4", "opus", ["-c:a", "copy"]),
        ("mp4", "pcm_s16le", ["-c:a", "aac", "-b:a", "192k"]),
        ("mp4", "vorbis", ["-c:a", "aac", "-b:a", "192k"]),
        ("mov", "pcm_s16le", ["-c:a", "copy"]),
        ("matroska", "vorbis", ["-c:a", "copy"]),
        ("matroska", "flac", ["-c:a", "copy"]),
        ("mp4", None, ["-c:a", "aac", "-b:a", "192k"]),
    ],
)
def test_audio_is_copied_only_when_the_container_takes_it(muxer: str, codec: str | None, expected: list[str]) -> None:
    assert cmd.audio_codec_args(muxer, codec) == expected


def test_metadata_args_mp4_keep_custom_keys() -> None:
    assert cmd.metadata_args("mp4", {"title": "a b", "facestudio_job": "x=1"}) == [
        "-metadata", "title=a b", "-metadata", "facestudio_job=x=1", "-movflags", "+use_metadata_tags",
    ]  # fmt: skip
    assert cmd.metadata_args("mov", {}) == ["-movflags", "+use_metadata_tags"]


def test_metadata_args_matroska_need_no_movflags() -> None:
    assert cmd.metadata_args("matroska", {"k": "v"}) == ["-metadata", "k=v"]


@pytest.mark.parametrize("key", ["", "a=b"])
def test_metadata_args_reject_bad_keys(key: str) -> None:
    with pytest.raises(ValueError, match="metadata key"):
        cmd.metadata_args("mp4", {key: "v"})


VIDEO_TAIL = [
    "-vf", "scale=out_color_matrix=bt709:out_range=tv,format=yuv420p",
    "-c:v", "libx264", "-preset", "medium", "-crf", "18", "-pix_fmt", "yuv420p",
    "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
]  # fmt: skip


def test_encode_args_with_audio_and_metadata() -> None:
    args = cmd.encode_args(
        FF, Path("/out/.x.partial.mp4"), 64, 48, "30000/1001", Path("/media/t.mp4"), "aac", {"k": "v"}
    )
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "64x48", "-r", "30000/1001", "-i", "pipe:0",
        "-i", "/media/t.mp4",
        "-map", "0:v:0", "-map", "1:a:0?", "-c:a", "copy",
        *VIDEO_TAIL,
        "-metadata", "k=v", "-movflags", "+use_metadata_tags",
        "-f", "mp4", "/out/.x.partial.mp4",
    ]  # fmt: skip


def test_encode_args_without_audio_mkv_reencodes_nothing() -> None:
    args = cmd.encode_args(FF, Path("o.mkv"), 2, 2, "25", None, None, {}, crf=23, preset="ultrafast")
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "2x2", "-r", "25", "-i", "pipe:0",
        "-map", "0:v:0",
        "-vf", "scale=out_color_matrix=bt709:out_range=tv,format=yuv420p",
        "-c:v", "libx264", "-preset", "ultrafast", "-crf", "23", "-pix_fmt", "yuv420p",
        "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
        "-f", "matroska", "o.mkv",
    ]  # fmt: skip


def test_encode_args_reencode_audio_the_container_cannot_hold() -> None:
    args = cmd.encode_args(FF, Path("o.mp4"), 64, 48, "24/1", Path("t.avi"), "pcm_s16le", {})
    assert args[args.index("1:a:0?") + 1 :][:4] == ["-c:a", "aac", "-b:a", "192k"]


@pytest.mark.parametrize(
    ("width", "height", "fps", "crf", "preset", "message"),
    [
        (63, 48, "25", 18, "medium", "even frame size"),
        (64, 47, "25", 18, "medium", "even frame size"),
        (0, 0, "25", 18, "medium", "even frame size"),
        (64, 48, "29.97", 18, "medium", "rational"),
        (64, 48, "0/1", 18, "medium", "rational"),
        (64, 48, "30000/0", 18, "medium", "rational"),
        (64, 48, "25", 52, "medium", "crf"),
        (64, 48, "25", 18, "fastest", "preset"),
    ],
)
def test_encode_args_validate(width: int, height: int, fps: str, crf: int, preset: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cmd.encode_args(FF, Path("o.mp4"), width, height, fps, None, None, {}, crf=crf, preset=preset)


def test_encoders_args() -> None:
    assert cmd.encoders_args(FF) == [FF, "-nostdin", "-hide_banner", "-encoders"]


DECODE_HEAD = [FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-i", "/media/in put.mp4", "-map", "0:V:0"]
DECODE_TAIL = ["-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"]


def test_decode_args_span_shift_timestamps_then_trim_by_integer_ticks() -> None:
    assert cmd.decode_args(FF, CLIP, start_pts=6144, end_pts=18432, max_frames=24) == [
        *DECODE_HEAD,
        "-vf", "setpts=PTS-STARTPTS-6144,trim=start_pts=0:end_pts=12288",
        "-fps_mode", "passthrough", "-frames:v", "24",
        *DECODE_TAIL,
    ]  # fmt: skip
    assert cmd.decode_args(FF, CLIP, start_pts=512) == [
        *DECODE_HEAD, "-vf", "setpts=PTS-STARTPTS-512,trim=start_pts=0", "-fps_mode", "passthrough", *DECODE_TAIL,
    ]  # fmt: skip
    assert cmd.decode_args(FF, CLIP, end_pts=100)[10:12] == ["-vf", "setpts=PTS-STARTPTS,trim=start_pts=0:end_pts=100"]


def test_decode_args_resample_with_the_fps_filter_sample_and_hold() -> None:
    assert cmd.decode_args(FF, CLIP, fps_rational="30000/1001") == [
        *DECODE_HEAD,
        "-vf", "setpts=PTS-STARTPTS,fps=fps=30000/1001:start_time=0:round=up",
        "-fps_mode", "passthrough",
        *DECODE_TAIL,
    ]  # fmt: skip
    args = cmd.decode_args(FF, CLIP, start_pts=6144, fps_rational="12/1", max_frames=12)
    assert args[10:16] == [
        "-vf", "setpts=PTS-STARTPTS-6144,trim=start_pts=0,fps=fps=12/1:start_time=0:round=up",
        "-fps_mode", "passthrough", "-frames:v", "12",
    ]  # fmt: skip
    assert "-vsync" not in args


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_pts": -1}, "start_pts must be ≥ 0"),
        ({"start_pts": 10, "end_pts": 10}, "end_pts must be after start_pts"),
        ({"fps_rational": "29.97"}, "rational"),
        ({"max_frames": 0}, "max_frames must be ≥ 1"),
        ({"end_pts": 10, "fps_rational": "12/1"}, "end a resampled span with max_frames"),
    ],
)
def test_decode_args_validate(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cmd.decode_args(FF, CLIP, **kwargs)


@pytest.mark.parametrize(("seconds", "text"), [(0.5, "0.5"), (1.0, "1"), (0.0, "0"), (12.3456789, "12.345679")])
def test_seconds_arg_is_plain_decimal_to_the_microsecond(seconds: float, text: str) -> None:
    assert cmd.seconds_arg(seconds) == text


def test_encode_args_x265_in_mp4_is_tagged_hvc1_and_logs_errors_only() -> None:
    args = cmd.encode_args(FF, Path("o.mp4"), 64, 48, "24/1", None, None, {}, crf=20, preset="fast", encoder="libx265")
    assert args[args.index("-c:v") : args.index("-colorspace")] == [
        "-c:v", "libx265", "-preset", "fast", "-crf", "20", "-x265-params", "log-level=error", "-tag:v", "hvc1",
        "-pix_fmt", "yuv420p",
    ]  # fmt: skip
    mkv = cmd.encode_args(FF, Path("o.mkv"), 64, 48, "24/1", None, None, {}, encoder="libx265")
    assert "-tag:v" not in mkv and mkv[mkv.index("-c:v") + 1] == "libx265"


def test_encode_args_cut_audio_seek_on_input_and_reencode() -> None:
    args = cmd.encode_args(FF, Path("o.mp4"), 64, 48, "12/1", Path("t.mp4"), "aac", {}, audio_start=0.5, audio_end=1.5)
    # AAC would be copied uncut; a cut re-encodes it, so that it falls on the exact sample.
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "64x48", "-r", "12/1", "-i", "pipe:0",
        "-ss", "0.5", "-t", "1", "-i", "t.mp4",
        "-map", "0:v:0", "-map", "1:a:0?", "-c:a", "aac", "-b:a", "192k",
        *VIDEO_TAIL,
        "-movflags", "+use_metadata_tags",
        "-f", "mp4", "o.mp4",
    ]  # fmt: skip
    open_end = cmd.encode_args(FF, Path("o.mkv"), 64, 48, "12/1", Path("t.mkv"), "flac", {}, audio_start=2.0)
    assert open_end[open_end.index("pipe:0") :][:5] == ["pipe:0", "-ss", "2", "-i", "t.mkv"]
    assert "-t" not in open_end and open_end[open_end.index("1:a:0?") + 1 :][:2] == ["-c:a", "aac"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"encoder": "libvpx-vp9"}, "encoder must be one of libx264, libx265"),
        ({"encoder": "libx265", "width": 14, "height": 14}, "libx265 needs a frame size of at least 16×16"),
        ({"audio_start": 1.0, "audio_end": 1.0}, "audio_end must be after audio_start"),
    ],
)
def test_encode_args_validate_encoder_and_cut(kwargs: dict, message: str) -> None:
    size = {"width": kwargs.pop("width", 64), "height": kwargs.pop("height", 48)}
    with pytest.raises(ValueError, match=message):
        cmd.encode_args(FF, Path("o.mp4"), size["width"], size["height"], "25", Path("t.mp4"), "aac", {}, **kwargs)
