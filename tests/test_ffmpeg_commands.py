"""The ffmpeg/ffprobe command lines, pinned with exact list equality (no process is run)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from engine.core.errors import InvalidInput
from engine.media import commands as cmd

FF = "/opt/ff/ffmpeg"
PROBE = "/opt/ff/ffprobe"
CLIP = Path("/media/in put.mp4")


def test_ffprobe_header_args() -> None:
    assert cmd.ffprobe_header_args(PROBE, CLIP) == [
        PROBE, "-v", "error", "-print_format", "json", "-show_format", "-show_streams", "file:/media/in put.mp4",
    ]  # fmt: skip


def test_ffprobe_probe_args_list_every_packet() -> None:
    assert cmd.ffprobe_probe_args(PROBE, CLIP) == [
        PROBE, "-v", "error", "-print_format", "json=compact=1", "-show_format", "-show_streams", "-show_chapters",
        "-show_entries", "packet=stream_index,pts,duration,flags", "file:/media/in put.mp4",
    ]  # fmt: skip
    # What a target's content id is made of: each packet's size and a CRC32 of its bytes.
    assert cmd.ffprobe_probe_args(PROBE, CLIP, identify=True)[-4:] == [
        "CRC32", "-show_entries", "packet=stream_index,pts,duration,flags,size,data_hash", "file:/media/in put.mp4",
    ]  # fmt: skip


def test_ffmpeg_header_args() -> None:
    assert cmd.ffmpeg_header_args(FF, CLIP) == [FF, "-nostdin", "-hide_banner", "-i", "file:/media/in put.mp4"]


def test_ffmpeg_count_args_copy_first_video_stream_to_framecrc() -> None:
    assert cmd.ffmpeg_count_args(FF, CLIP) == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-i", "file:/media/in put.mp4",
        "-map", "0:V:0", "-map", "0:a:0?", "-c", "copy", "-copyinkf", "-f", "framecrc", "pipe:1",
    ]  # fmt: skip


def test_decode_args_pass_timing_through_and_never_use_vsync() -> None:
    args = cmd.decode_args(FF, CLIP)
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-reinit_filter", "0",
        "-i", "file:/media/in put.mp4", "-map", "0:V:0", "-fps_mode", "passthrough", "-enc_time_base", "demux",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1",
    ]  # fmt: skip
    assert "-vsync" not in args


@pytest.mark.parametrize(
    ("name", "muxer"),
    [("a.mp4", "mp4"), ("a.M4V", "mp4"), ("a.mov", "mov"), ("a.mkv", "matroska"), ("a.webm", "webm")],
)
def test_muxer_for_extension(name: str, muxer: str) -> None:
    assert cmd.muxer_for(Path(name)) == muxer


@pytest.mark.parametrize("name", ["a.avi", "a", "a.png"])
def test_muxer_for_rejects_containers_not_offered(name: str) -> None:
    with pytest.raises(InvalidInput, match=r"\.mp4, \.m4v, \.mov, \.mkv, \.webm"):
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


TIMING = cmd.VideoTiming("30000/1001", "1001/30000", "0+N*1")
VIDEO_TAIL = [
    "-vf", "settb=1001/30000,setpts='0+N*1',scale=out_color_matrix=bt709:out_range=tv,format=yuv420p",
    "-fps_mode", "passthrough", "-enc_time_base", "1001/30000",
    "-c:v", "libx264", "-preset", "medium", "-crf", "18", "-pix_fmt", "yuv420p",
    "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
]  # fmt: skip


def _audio(path: str, codec: str | None, start: float = 0, end: float | None = None, cut: bool = False) -> cmd.Audio:
    return cmd.Audio(Path(path), codec, Fraction(str(start)), None if end is None else Fraction(str(end)), cut)


def test_file_url_keeps_a_path_from_being_read_as_an_option_or_a_protocol() -> None:
    assert [cmd.file_url(Path(p)) for p in ("-x.mp4", "concat:a|b", "/m/a b.mp4")] == [
        "file:-x.mp4", "file:concat:a|b", "file:/m/a b.mp4",
    ]  # fmt: skip


def test_encode_args_with_audio_and_metadata() -> None:
    args = cmd.encode_args(FF, Path("/out/.x.partial.mp4"), 64, 48, TIMING, _audio("/media/t.mp4", "aac"), {"k": "v"})
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "64x48", "-r", "30000/1001", "-i", "pipe:0",
        "-seek_timestamp", "1", "-i", "file:/media/t.mp4",
        "-map", "0:v:0", "-map", "1:a:0?", "-c:a", "copy",
        *VIDEO_TAIL,
        "-metadata", "k=v", "-movflags", "+use_metadata_tags",
        "-f", "mp4", "file:/out/.x.partial.mp4",
    ]  # fmt: skip


def test_encode_args_time_each_frame_in_the_timings_base() -> None:
    timing = cmd.VideoTiming("12/1", "1/12", "if(lt(N,6),0+N*1,6+(N-6)*6)")
    args = cmd.encode_args(FF, Path("o.mkv"), 2, 2, timing, None, {}, crf=23, preset="ultrafast")
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "2x2", "-r", "12/1", "-i", "pipe:0",
        "-map", "0:v:0",
        "-vf", "settb=1/12,setpts='if(lt(N,6),0+N*1,6+(N-6)*6)',scale=out_color_matrix=bt709:out_range=tv,"
        "format=yuv420p",
        "-fps_mode", "passthrough", "-enc_time_base", "1/12",
        "-c:v", "libx264", "-preset", "ultrafast", "-crf", "23", "-pix_fmt", "yuv420p",
        "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
        "-f", "matroska", "file:o.mkv",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("major", "option"), [(5, "-filter_script:v"), (6, "-filter_script:v"), (7, "-/vf"), (9, "-/vf")]
)
def test_encode_args_read_a_long_filter_from_a_file(major: int, option: str) -> None:
    timing = cmd.VideoTiming("12/1", "1/12", "N", Path("/j/.seg.filter"), major)
    args = cmd.encode_args(FF, Path("o.mp4"), 2, 2, timing, None, {})
    assert args[args.index("0:v:0") + 1 : args.index("-fps_mode")] == [option, "/j/.seg.filter"]
    assert cmd.encode_filter(timing) == "settb=1/12,setpts='N',scale=out_color_matrix=bt709:out_range=tv,format=yuv420p"


def test_encode_args_the_lossless_intermediate_keeps_rgb_at_any_size() -> None:
    args = cmd.encode_args(FF, Path("s.mp4"), 63, 47, TIMING, None, {}, preset="ultrafast",
                           encoder=cmd.INTERMEDIATE_ENCODER)  # fmt: skip
    assert args[args.index("0:v:0") + 1 :] == [
        "-vf", "settb=1001/30000,setpts='0+N*1'", "-fps_mode", "passthrough", "-enc_time_base", "1001/30000",
        "-c:v", "libx264rgb", "-preset", "ultrafast", "-qp", "0", "-pix_fmt", "rgb24",
        "-movflags", "+use_metadata_tags", "-f", "mp4", "file:s.mp4",
    ]  # fmt: skip


def test_encode_args_reencode_audio_the_container_cannot_hold() -> None:
    args = cmd.encode_args(FF, Path("o.mp4"), 64, 48, TIMING, _audio("t.avi", "pcm_s16le"), {})
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
    timing = cmd.VideoTiming(fps, "1/25", "N")
    with pytest.raises(ValueError, match=message):
        cmd.encode_args(FF, Path("o.mp4"), width, height, timing, None, {}, crf=crf, preset=preset)


def test_encoders_args() -> None:
    assert cmd.encoders_args(FF) == [FF, "-nostdin", "-hide_banner", "-encoders"]


DECODE_HEAD = [
    FF,
    "-nostdin",
    "-hide_banner",
    "-nostats",
    "-v",
    "error",
    "-reinit_filter",
    "0",
    "-i",
    "file:/media/in put.mp4",
    "-map",
    "0:V:0",
]
DECODE_TAIL = ["-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"]


def test_decode_args_span_shift_timestamps_then_trim_by_integer_ticks() -> None:
    assert cmd.decode_args(FF, CLIP, start_pts=6144, end_pts=18432, max_frames=24) == [
        *DECODE_HEAD,
        "-vf", "setpts=PTS-STARTPTS-6144,trim=start_pts=0:end_pts=12288",
        "-fps_mode", "passthrough", "-enc_time_base", "demux", "-frames:v", "24",
        *DECODE_TAIL,
    ]  # fmt: skip
    assert cmd.decode_args(FF, CLIP, start_pts=512) == [
        *DECODE_HEAD, "-vf", "setpts=PTS-STARTPTS-512,trim=start_pts=0", "-fps_mode", "passthrough",
        "-enc_time_base", "demux", *DECODE_TAIL,
    ]  # fmt: skip
    assert cmd.decode_args(FF, CLIP, end_pts=100)[12:14] == ["-vf", "setpts=PTS-STARTPTS,trim=start_pts=0:end_pts=100"]


def test_decode_args_resample_with_the_fps_filter_sample_and_hold() -> None:
    assert cmd.decode_args(FF, CLIP, fps_rational="30000/1001") == [
        *DECODE_HEAD,
        "-vf", "setpts=PTS-STARTPTS,fps=fps=30000/1001:start_time=0:round=up",
        "-fps_mode", "passthrough", "-enc_time_base", "demux",
        *DECODE_TAIL,
    ]  # fmt: skip
    args = cmd.decode_args(FF, CLIP, start_pts=6144, fps_rational="12/1", max_frames=12)
    assert args[12:20] == [
        "-vf", "setpts=PTS-STARTPTS-6144,trim=start_pts=0,fps=fps=12/1:start_time=0:round=up",
        "-fps_mode", "passthrough", "-enc_time_base", "demux", "-frames:v", "12",
    ]  # fmt: skip
    assert cmd.decode_args(FF, CLIP, major=5)[-7:-5] == ["-enc_time_base", "-1"]
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
    assert cmd.seconds_arg(Fraction(1, 3)) == "0.333333"


def test_encode_args_x265_in_mp4_is_tagged_hvc1_and_logs_errors_only() -> None:
    args = cmd.encode_args(FF, Path("o.mp4"), 64, 48, TIMING, None, {}, crf=20, preset="fast", encoder="libx265")
    assert args[args.index("-c:v") : args.index("-colorspace")] == [
        "-c:v", "libx265", "-preset", "fast", "-crf", "20", "-x265-params", "log-level=error", "-tag:v", "hvc1",
        "-pix_fmt", "yuv420p",
    ]  # fmt: skip
    mkv = cmd.encode_args(FF, Path("o.mkv"), 64, 48, TIMING, None, {}, encoder="libx265")
    assert "-tag:v" not in mkv and mkv[mkv.index("-c:v") + 1] == "libx265"


def test_audio_is_timed_on_its_files_own_timeline() -> None:
    """`-seek_timestamp 1`: times are the file's own (not counted from its earliest stream); a copy is shifted,
    a cut is seeked, read for the span's length and trimmed at the output's time 0."""

    def audio_args(audio: cmd.Audio) -> list[str]:
        args = cmd.encode_args(FF, Path("o.mp4"), 64, 48, TIMING, audio, {})
        return args[args.index("pipe:0") + 1 : args.index("-vf")]

    # Copied, the video's first frame 1 s into the file: shifted by -1 s.
    assert audio_args(_audio("t.mp4", "aac", start=1.0)) == [
        "-seek_timestamp", "1", "-itsoffset", "-1", "-i", "file:t.mp4", "-map", "0:v:0", "-map", "1:a:0?",
        "-c:a", "copy",
    ]  # fmt: skip
    # Cut to [0.5, 1.5): seeked there, read for 1 s, re-encoded, so that it falls on the exact sample.
    assert audio_args(_audio("t.mp4", "aac", start=0.5, end=1.5, cut=True)) == [
        "-seek_timestamp", "1", "-ss", "0.5", "-t", "1", "-i", "file:t.mp4", "-map", "0:v:0", "-map", "1:a:0?",
        "-af", "atrim=start=0", "-c:a", "aac", "-b:a", "192k",
    ]  # fmt: skip
    # A first frame before the file's zero: shifted forward instead, what came before trimmed away.
    assert audio_args(_audio("t.mkv", "flac", start=-0.25, cut=True))[:5] == [
        "-seek_timestamp",
        "1",
        "-itsoffset",
        "0.25",
        "-i",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"encoder": "libvpx"}, "encoder must be one of libx264, libx265"),
        ({"encoder": "libx265", "width": 14, "height": 14}, "libx265 needs a frame size of at least 16×16"),
        ({"encoder": "hevc_nvenc", "width": 128, "height": 720}, "hevc_nvenc needs a frame size of at least 132×129"),
        ({"audio": cmd.Audio(Path("t.mp4"), "aac", Fraction(1), Fraction(1), True)}, "audio must end after it starts"),
    ],
)
def test_encode_args_validate_encoder_and_cut(kwargs: dict, message: str) -> None:
    size = {"width": kwargs.pop("width", 64), "height": kwargs.pop("height", 48)}
    audio = kwargs.pop("audio", None)
    with pytest.raises(ValueError, match=message):
        cmd.encode_args(FF, Path("o.mp4"), size["width"], size["height"], TIMING, audio, {}, **kwargs)


def test_concat_list_durations_run_from_joint_to_joint() -> None:
    text = cmd.concat_list(
        [(Path("/j/seg-00000.mp4"), Fraction(0)), (Path("/j/it's/seg-00001.mp4"), Fraction(1, 2)),
         (Path("/j/seg-00002.mp4"), Fraction(3, 2))],
        Fraction(5, 3),
    )  # fmt: skip
    assert text == (
        "ffconcat version 1.0\n"
        "file '/j/seg-00000.mp4'\nduration 0.500000\n"
        "file '/j/it'\\''s/seg-00001.mp4'\nduration 1.000000\n"
        "file '/j/seg-00002.mp4'\nduration 0.166667\n"
    )
    # A rate whose frame time is not a whole number of microseconds: joints are rounded, never drift.
    many = cmd.concat_list([(Path(f"/j/{i}.mp4"), Fraction(i * 1001, 24000)) for i in range(3000)],
                           Fraction(3000 * 1001, 24000))  # fmt: skip
    total = sum(float(line.split()[1]) for line in many.splitlines() if line.startswith("duration"))
    assert abs(total - 3000 * 1001 / 24000) < 1e-6
    with pytest.raises(ValueError, match="ascend"):
        cmd.concat_list([(Path("/j/a.mp4"), Fraction(0)), (Path("/j/b.mp4"), Fraction(0))], Fraction(1))


def test_concat_args_copy_video_and_mux_the_cut_audio_once() -> None:
    args = cmd.concat_args(FF, Path("/j/concat.txt"), Path("/o/.out.partial.mp4"),
                           _audio("/v/in.mp4", "aac", 0.5, 1.5, cut=True), {"k": "v"})  # fmt: skip
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", "file:/j/concat.txt",
        "-seek_timestamp", "1", "-ss", "0.5", "-t", "1", "-i", "file:/v/in.mp4",
        "-map", "0:v:0", "-map", "1:a:0?", "-af", "atrim=start=0", "-c:a", "aac", "-b:a", "192k",
        "-c:v", "copy",
        "-metadata", "k=v", "-movflags", "+use_metadata_tags",
        "-f", "mp4", "file:/o/.out.partial.mp4",
    ]  # fmt: skip


def test_concat_args_without_audio_hevc_mkv_and_mov() -> None:
    assert cmd.concat_args(FF, Path("c.txt"), Path("o.mkv"), None, {}, encoder="libx265") == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", "file:c.txt", "-map", "0:v:0", "-c:v", "copy", "-f", "matroska",
        "file:o.mkv",
    ]  # fmt: skip
    mov = cmd.concat_args(FF, Path("c.txt"), Path("o.mov"), _audio("a.mov", "pcm_s16le"), {}, encoder="libx265")
    assert mov[mov.index("1:a:0?") + 1 :] == [
        "-c:a", "copy", "-c:v", "copy", "-tag:v", "hvc1", "-movflags", "+use_metadata_tags", "-f", "mov",
        "file:o.mov",
    ]  # fmt: skip


def test_gif_args_give_each_frame_its_palette_and_keep_the_delays() -> None:
    assert cmd.gif_args(FF, Path("c.txt"), Path("o.gif")) == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", "file:c.txt", "-map", "0:v:0",
        "-filter_complex", "split[a][b];[a]palettegen=stats_mode=single[p];[b][p]paletteuse=new=1",
        "-fps_mode", "passthrough", "-enc_time_base", "1/100", "-c:v", "gif", "-loop", "0", "-f", "gif",
        "file:o.gif",
    ]  # fmt: skip
