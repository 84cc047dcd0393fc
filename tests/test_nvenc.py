"""NVENC and NVDEC: the exact ffmpeg argument lists, the CRF → constant-quality mapping, what `video.encoder=auto`
takes and the one note it leaves in a run's summary when it falls back to libx264 (as it does on this CPU-only
machine), NVDEC's stream rules and its fallback messages, and what `doctor` reports of both."""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import imageio_ffmpeg
import pytest

import cli
from engine import media
from engine.core.errors import BackendUnavailable, InvalidInput
from engine.media import commands as cmd
from engine.media import decode, demo, encode, tools
from engine.tools import doctor

TIMING = cmd.VideoTiming("30/1", "1/30", "N")
COLOUR = ["-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv"]


@pytest.mark.parametrize(
    ("encoder", "crf", "quality"),
    [
        ("h264_nvenc", 18, ["-rc", "vbr", "-cq", "18", "-b:v", "0"]),
        ("hevc_nvenc", 28, ["-rc", "vbr", "-cq", "28", "-b:v", "0"]),
        # AV1's constant quality runs 0–63: CRF 18 → round(18 · 63/51) = 22; the finest CRF 1 → 1.
        ("av1_nvenc", 18, ["-rc", "vbr", "-cq", "22", "-b:v", "0"]),
        ("av1_nvenc", 51, ["-rc", "vbr", "-cq", "63", "-b:v", "0"]),
        ("av1_nvenc", 1, ["-rc", "vbr", "-cq", "1", "-b:v", "0"]),
        # CQ 0 is "automatic" to NVENC: CRF 0 (lossless) is its lossless tuning.
        ("h264_nvenc", 0, ["-tune", "lossless"]),
    ],
)
def test_crf_maps_onto_nvenc_constant_quality(encoder: str, crf: int, quality: list[str]) -> None:
    assert cmd.nvenc_quality_args(encoder, crf) == quality


def test_nvenc_quality_refuses_what_is_not_nvenc_or_out_of_range() -> None:
    with pytest.raises(ValueError, match="libx264 is not an NVENC encoder"):
        cmd.nvenc_quality_args("libx264", 18)
    with pytest.raises(ValueError, match="crf must be in 0–51"):
        cmd.nvenc_quality_args("h264_nvenc", 52)


def test_every_x264_preset_has_an_nvenc_preset() -> None:
    assert set(cmd.NVENC_PRESETS) == set(cmd.X264_PRESETS)
    assert [cmd.NVENC_PRESETS[p] for p in cmd.X264_PRESETS] == ["p1", "p1", "p2", "p3", "p3", "p4", "p5", "p6", "p7"]


def test_h264_nvenc_encode_command(tmp_path: Path) -> None:
    out = tmp_path / "o.mp4"
    args = cmd.encode_args("ffmpeg", out, 1920, 1080, TIMING, None, {}, crf=20, preset="slow", encoder="h264_nvenc")
    assert args == [
        "ffmpeg", "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "1920x1080", "-r", "30/1", "-i", "pipe:0",
        "-map", "0:v:0", "-vf", "settb=1/30,setpts='N',scale=out_color_matrix=bt709:out_range=tv,format=yuv420p",
        "-fps_mode", "passthrough", "-enc_time_base", "1/30",
        "-c:v", "h264_nvenc", "-preset", "p5", "-rc", "vbr", "-cq", "20", "-b:v", "0", "-pix_fmt", "yuv420p",
        *COLOUR, "-movflags", "+use_metadata_tags", "-f", "mp4", f"file:{out}",
    ]  # fmt: skip


def test_hevc_from_nvenc_is_tagged_hvc1_in_mp4_and_mov_and_when_joined(tmp_path: Path) -> None:
    assert cmd.video_codec_args("mov", "hevc_nvenc", 18, "medium") == [
        "-c:v", "hevc_nvenc", "-preset", "p4", "-rc", "vbr", "-cq", "18", "-b:v", "0", "-tag:v", "hvc1",
    ]  # fmt: skip
    assert cmd.video_codec_args("matroska", "hevc_nvenc", 18, "medium")[-2:] == ["-b:v", "0"]
    assert cmd.video_codec_args("mp4", "av1_nvenc", 30, "fast") == [
        "-c:v", "av1_nvenc", "-preset", "p3", "-rc", "vbr", "-cq", "37", "-b:v", "0",
    ]  # fmt: skip
    joined = cmd.concat_args("ffmpeg", tmp_path / "list.txt", tmp_path / "o.mp4", None, {}, "hevc_nvenc")
    assert joined[joined.index("-c:v") : joined.index("-c:v") + 4] == ["-c:v", "copy", "-tag:v", "hvc1"]


def test_av1_cannot_go_into_mov(tmp_path: Path) -> None:
    refusal = r"^cannot write av1_nvenc video to o.mov: MOV cannot hold it; use .mp4, .mkv, .webm$"
    with pytest.raises(InvalidInput, match=refusal):
        cmd.check_container(tmp_path / "o.mov", "av1_nvenc")
    cmd.check_container(tmp_path / "o.mp4", "av1_nvenc")
    cmd.check_container(tmp_path / "o.mov", "hevc_nvenc")


def test_decode_on_the_gpu_adds_hwaccel_before_the_input(tmp_path: Path) -> None:
    path = tmp_path / "in.mp4"
    assert cmd.decode_args("ffmpeg", path, hwaccel=True) == [
        "ffmpeg", "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-hwaccel", "cuda",
        "-reinit_filter", "0", "-i", f"file:{path}",
        "-map", "0:V:0", "-fps_mode", "passthrough", "-enc_time_base", "demux", "-f", "rawvideo", "-pix_fmt", "rgb24",
        "pipe:1",
    ]  # fmt: skip
    assert "-hwaccel" not in cmd.decode_args("ffmpeg", path)


def test_hwaccel_test_command() -> None:
    assert cmd.hwaccel_test_args("ffmpeg") == [
        "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-init_hw_device", "cuda=gpu", "-filter_hw_device", "gpu",
        "-f", "lavfi", "-i", "color=c=black:s=256x256:r=25", "-frames:v", "1",
        "-vf", "format=nv12,hwupload,hwdownload,format=nv12", "-f", "null", "-",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("codec", "pix_fmt", "size", "allowed"),
    [
        ("h264", "yuv420p", (1920, 1080), True),
        ("h264", "yuvj420p", (640, 360), True),
        ("h264", "yuv420p", (4096, 2160), True),
        ("h264", "yuv420p", (7680, 4320), False),  # beyond NVDEC's H.264
        ("hevc", "yuv420p", (7680, 4320), True),
        ("hevc", "yuv420p10le", (3840, 2160), True),
        ("h264", "yuv420p10le", (1920, 1080), False),  # 10-bit H.264: not on NVDEC
        ("h264", "yuv422p", (1920, 1080), False),
        ("h264", "yuv444p", (1920, 1080), False),
        ("prores", "yuv422p10le", (1920, 1080), False),
        ("h264", "yuv420p", (64, 48), False),  # tiny: the CPU
        (None, "rgb24", (640, 480), False),
    ],
)
def test_nvdec_takes_only_the_streams_it_decodes(codec: str | None, pix_fmt: str, size: tuple, allowed: bool) -> None:
    assert cmd.nvdec_allows(codec, pix_fmt, *size) is allowed


class _Drain:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines


def test_nvdec_saying_it_cannot_take_a_stream_is_not_an_error_but_damage_still_is(tmp_path: Path) -> None:
    clip = demo.make_clip(tmp_path / "c.mp4", width=160, height=128, count=4, fps=10)
    reader = media.FrameReader(clip, hwaccel=True)
    fallback = ["[h264 @ 0x1] Hardware is lacking required capabilities", "[h264 @ 0x1] Failed setup for format cuda"]
    assert reader._first_error(_Drain(fallback)) is None  # type: ignore[arg-type]
    damage = "[h264 @ 0x1] error while decoding MB 3 4, bytestream -5"
    assert reader._first_error(_Drain([*fallback, damage])) == "error while decoding MB 3 4, bytestream -5"  # type: ignore[arg-type]
    on_cpu = media.FrameReader(clip, hwaccel=False)
    assert on_cpu._first_error(_Drain(fallback)) is not None  # type: ignore[arg-type]


def test_nvdec_is_used_only_where_the_stream_allows_a_gpu_is_visible_and_cuda_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = demo.make_clip(tmp_path / "c.mp4", width=160, height=128, count=4, fps=10)
    assert media.FrameReader(clip).hwaccel is False  # no GPU here
    monkeypatch.setattr(decode, "gpu_visible", lambda: True)
    monkeypatch.setattr(decode, "hwaccel_works", lambda ffmpeg: (False, "Cannot load libcuda.so.1"))
    assert media.FrameReader(clip).hwaccel is False
    monkeypatch.setattr(decode, "hwaccel_works", lambda ffmpeg: (True, None))
    assert media.FrameReader(clip).hwaccel is True
    tiny = demo.make_clip(tmp_path / "t.mp4", width=64, height=48, count=2, fps=10)
    assert media.FrameReader(tiny).hwaccel is False


def test_auto_is_libx264_with_the_reason_on_a_machine_without_a_gpu() -> None:
    encoder, note = media.choose_encoder("auto", 1920, 1080)
    assert encoder == "libx264"
    assert note == (
        "encoder: libx264 on the CPU, since no NVIDIA GPU is visible (video.encoder=auto takes NVENC where it works)"
    )
    # An encoder named is itself, with nothing to say.
    assert media.choose_encoder("hevc_nvenc", 1920, 1080) == ("hevc_nvenc", None)


def test_auto_takes_nvenc_only_once_it_encodes_a_test_frame_here(monkeypatch: pytest.MonkeyPatch) -> None:
    ffmpeg = media.find_ffmpeg()
    monkeypatch.setattr(encode, "gpu_visible", lambda: True)
    monkeypatch.setattr(encode, "available_encoders", lambda path: frozenset({"libx264"}))
    assert "since this ffmpeg has no h264_nvenc" in str(media.choose_encoder("auto", 1920, 1080, ffmpeg)[1])
    monkeypatch.setattr(encode, "available_encoders", lambda path: frozenset({"libx264", "h264_nvenc"}))
    # The real test frame: this machine's ffmpeg may list h264_nvenc, but without a GPU it fails to encode.
    encoder, note = media.choose_encoder("auto", 1920, 1080, ffmpeg)
    assert encoder == "libx264" and "h264_nvenc failed its test frame (" in str(note)
    monkeypatch.setattr(encode, "encoder_works", lambda name, path: (True, None))
    assert media.choose_encoder("auto", 1920, 1080, ffmpeg) == ("h264_nvenc", None)
    encoder, note = media.choose_encoder("auto", 7680, 4320, ffmpeg)
    assert encoder == "libx264" and "7680×4320 frames are beyond h264_nvenc's 4096×4096" in str(note)


def test_a_run_with_auto_notes_the_fallback_once_and_records_the_encoder_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = demo.make_clip(tmp_path / "clip.mp4", width=64, height=48, count=6, fps=12)
    out = tmp_path / "out.mp4"
    code = cli.main([
        "run", "--target", str(clip), "--output", str(out), "--processors", "frame_enhancer",
        "--set", "frame_enhancer.scale=1", "--yes",
    ])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("done: 6 frames")
    notes = [line for line in lines if line.startswith("encoder: ")]
    assert notes == ["encoder: libx264 on the CPU, since no NVIDIA GPU is visible (video.encoder=auto takes NVENC "
                     "where it works)"]  # fmt: skip
    assert media.probe(out).video_codec == "h264"
    sidecar = json.loads(Path(f"{out}.job.json").read_text())
    assert sidecar["job"]["video"]["encoder"] == "libx264"  # what was used, so a replay encodes the same way


def test_an_encoder_named_gives_no_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clip = demo.make_clip(tmp_path / "clip.mp4", width=64, height=48, count=4, fps=12)
    code = cli.main([
        "run", "--target", str(clip), "--output", str(tmp_path / "o.mkv"), "--processors", "frame_enhancer",
        "--set", "frame_enhancer.scale=1", "--set", "video.encoder=libx264", "--yes",
    ])  # fmt: skip
    assert code == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("encoder: ")]


def test_av1_into_mov_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clip = demo.make_clip(tmp_path / "clip.mp4", width=64, height=48, count=4, fps=12)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = cli.main([
        "run", "--target", str(clip), "--output", str(out_dir / "o.mov"), "--processors", "frame_enhancer",
        "--set", "video.encoder=av1_nvenc", "--yes",
    ])  # fmt: skip
    assert code == 2
    refusal = "error: cannot write av1_nvenc video to o.mov: MOV cannot hold it; use .mp4, .mkv, .webm\n"
    assert capsys.readouterr().err == refusal
    assert list(out_dir.iterdir()) == []


def test_doctor_reports_nvdec_and_what_auto_takes() -> None:
    data, problems = doctor.check_ffmpeg()
    assert [e["name"] for e in data["encoders"]] == ["libx264", "libx265", "h264_nvenc", "hevc_nvenc", "av1_nvenc"]
    assert data["nvdec"] == {"works": None, "error": None}  # not tried without a GPU
    assert data["auto_encoder"] == "libx264" and "no NVIDIA GPU is visible" in data["auto_note"]
    assert not [p for p in problems if "nvenc" in p.message.lower() or "cuda device" in p.message]


def _nvenc_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's ffmpeg as if it listed every NVENC encoder (Debian's lacks av1_nvenc; any build here lacks a
    GPU, so the real test frame fails whether the encoder is built in or not)."""
    listed = frozenset({"libx264", "libx265", *cmd.NVENC_ENCODERS})
    monkeypatch.setattr(tools, "available_encoders", lambda path: listed)


@pytest.mark.parametrize("encoder", cmd.NVENC_ENCODERS)
def test_an_nvenc_encoder_named_that_cannot_open_here_is_one_typed_line(
    encoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nvenc_listed(monkeypatch)
    monkeypatch.setattr(tools, "encoder_works", lambda name, path: (False, "Cannot load libcuda.so.1"))
    with pytest.raises(BackendUnavailable) as caught:
        media.check_encoder(encoder)
    assert str(caught.value) == (
        f"video.encoder={encoder} cannot encode here (Cannot load libcuda.so.1): NVENC needs an NVIDIA GPU and its "
        "driver (in a container, NVIDIA_DRIVER_CAPABILITIES with video); choose video.encoder=auto or libx264"
    )
    monkeypatch.setattr(tools, "encoder_works", lambda name, path: (True, None))
    media.check_encoder(encoder)  # proven: no error


def test_the_test_frame_failure_is_ffmpegs_line_without_its_prefix() -> None:
    works, error = tools.encoder_works("h264_nvenc", media.find_ffmpeg())
    assert works is False  # no GPU here
    assert error and not error.startswith("[") and "\n" not in error


def test_a_run_naming_h264_nvenc_without_a_gpu_stops_before_any_work_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _nvenc_listed(monkeypatch)
    # Above NVENC's smallest frame (146×145 for H.264), so the GPU test is what refuses.
    clip = demo.make_clip(tmp_path / "clip.mp4", width=160, height=160, count=4, fps=12)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = cli.main([
        "run", "--target", str(clip), "--output", str(out_dir / "o.mp4"), "--processors", "frame_enhancer",
        "--set", "frame_enhancer.scale=1", "--set", "video.encoder=h264_nvenc", "--yes",
    ])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: video.encoder=h264_nvenc cannot encode here (")
    assert err.endswith("choose video.encoder=auto or libx264\n")
    assert list(out_dir.iterdir()) == []


def test_a_writer_asked_for_nvenc_refuses_before_the_first_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nvenc_listed(monkeypatch)
    with pytest.raises(BackendUnavailable, match=r"^video.encoder=hevc_nvenc cannot encode here \("):
        media.FrameWriter(tmp_path / "o.mp4", 160, 160, media.FrameTimes.constant(Fraction(12)), encoder="hevc_nvenc")
    assert list(tmp_path.iterdir()) == []


_OPTION_ERRORS = ("Error setting option", "Unable to parse", "out of range", "Unrecognized option")


@pytest.mark.parametrize("encoder", cmd.NVENC_ENCODERS)
def test_ffmpeg_accepts_every_nvenc_quality_and_preset_we_build(encoder: str) -> None:
    """imageio-ffmpeg's build has all three NVENC encoders: it parses and range-checks the encoder's options before it
    looks for the GPU, so without one it gets as far as loading CUDA, and fails there, not on an option."""
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    if encoder not in media.available_encoders(ffmpeg):
        pytest.skip(f"this imageio-ffmpeg has no {encoder}")
    for crf, preset in [(0, "medium"), (1, "ultrafast"), (18, "slow"), (28, "fast"), (51, "veryslow")]:
        args = cmd.video_codec_args("mp4", encoder, crf, preset)
        done = subprocess.run(
            [ffmpeg, "-nostdin", "-hide_banner", "-v", "error", "-f", "lavfi", "-i", "color=s=256x256:r=25",
             "-frames:v", "1", *args, "-f", "null", "-"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        if done.returncode == 0:
            continue  # a machine whose NVENC works
        assert not [e for e in _OPTION_ERRORS if e in done.stderr], (args, done.stderr)
        assert "libcuda" in done.stderr or "nvenc" in done.stderr.lower(), (args, done.stderr)
