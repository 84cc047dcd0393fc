"""Segment planning (pure), the concat command lines, and reading a span from a later frame on."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from engine import demo, segments, video
from engine import ffmpeg_commands as cmd
from engine.segments import Segment

FF = "/opt/ff/ffmpeg"


def test_plan_cuts_consecutive_segments() -> None:
    plan = segments.plan(90, 15)
    assert [(s.index, s.start, s.stop) for s in plan.segments] == [(i, 15 * i, 15 * i + 15) for i in range(6)]
    assert [s.name for s in plan.segments[:2]] == ["seg-00000.mp4", "seg-00001.mp4"]
    assert plan.to_raw() == {"frames": 90, "segment_frames": 15, "open_end": False}


def test_a_short_tail_joins_the_last_segment_and_a_long_one_stands_alone() -> None:
    assert [(s.start, s.stop) for s in segments.plan(97, 15).segments][-1] == (75, 97)  # 7 < 7.5: joined
    assert [(s.start, s.stop) for s in segments.plan(98, 15).segments][-1] == (90, 98)  # 8 ≥ 7.5: its own
    assert [(s.start, s.stop) for s in segments.plan(5, 15).segments] == [(0, 5)]
    assert [(s.start, s.stop) for s in segments.plan(3, 1).segments] == [(0, 1), (1, 2), (2, 3)]


def test_plan_validates() -> None:
    with pytest.raises(ValueError, match="at least one frame"):
        segments.plan(0, 15)
    with pytest.raises(ValueError, match="at least one frame"):
        segments.plan(10, 0)


def test_missing_keeps_order_and_skips_done() -> None:
    plan = segments.plan(90, 15)
    assert [s.index for s in segments.missing(plan, {0, 1, 3})] == [2, 4, 5]
    assert segments.missing(plan, set(range(6))) == []


def test_job_key_is_deterministic_and_changes_with_the_target_file_or_output() -> None:
    key = segments.job_key("/v/in.mp4", 1000, 123, "/o/out.mp4")
    assert key == segments.job_key("/v/in.mp4", 1000, 123, "/o/out.mp4")
    assert len(key) == 16 and int(key, 16) >= 0
    others = {
        segments.job_key("/v/in2.mp4", 1000, 123, "/o/out.mp4"),
        segments.job_key("/v/in.mp4", 1001, 123, "/o/out.mp4"),
        segments.job_key("/v/in.mp4", 1000, 124, "/o/out.mp4"),
        segments.job_key("/v/in.mp4", 1000, 123, "/o/out.mkv"),
    }
    assert key not in others and len(others) == 4


def test_resumable_settings_ignore_scheduling_and_paths_and_differences_name_keys() -> None:
    raw = {
        "processors": ["frame_enhancer"],
        "frame_enhancer": {"scale": 2},
        "runtime": {"backend": "onnx", "batch": 4, "threads": 0, "offline": False},
        "target": "/v/in.mp4",
        "output": "/o/out.mp4",
    }
    a = segments.resumable_settings(raw)
    assert a == {"processors": ["frame_enhancer"], "frame_enhancer": {"scale": 2}, "runtime": {"backend": "onnx"}}
    faster = segments.resumable_settings({**raw, "runtime": {**raw["runtime"], "batch": 16}})
    assert segments.fingerprint(faster) == segments.fingerprint(a)
    b = segments.resumable_settings({**raw, "frame_enhancer": {"scale": 3}, "video": {"crf": 20}})
    assert segments.fingerprint(b) != segments.fingerprint(a)
    assert segments.differences(a, b) == ["frame_enhancer.scale", "video.crf"]


def test_disk_estimate_grows_with_pixels_and_quality() -> None:
    small = segments.estimate_video_bytes(640, 360, 300, 30.0, 18, audio=False)
    assert segments.estimate_video_bytes(1280, 720, 300, 30.0, 18, audio=False) > small
    # Six crf steps lower doubles the video part (x264's rate factor).
    margin = segments.estimate_video_bytes(2, 2, 0, 30.0, 18, audio=False)
    assert segments.estimate_video_bytes(640, 360, 300, 30.0, 12, audio=False) - margin == 2 * (small - margin)
    with_audio = segments.estimate_video_bytes(640, 360, 300, 30.0, 18, audio=True)
    assert with_audio - small == 10 * 320_000 // 8  # 10 s of audio


def test_concat_list_durations_add_up_exactly() -> None:
    text = cmd.concat_list(
        [(Path("/j/seg-00000.mp4"), 15), (Path("/j/it's/seg-00001.mp4"), 15), (Path("/j/seg-00002.mp4"), 7)],
        Fraction(30000, 1001),
    )
    assert text == (
        "ffconcat version 1.0\n"
        "file '/j/seg-00000.mp4'\nduration 0.500500\n"
        "file '/j/it'\\''s/seg-00001.mp4'\nduration 0.500500\n"
        "file '/j/seg-00002.mp4'\nduration 0.233567\n"
    )
    # A rate whose frame time is not a whole number of microseconds: joints are rounded, never drift.
    many = cmd.concat_list([(Path(f"/j/{i}.mp4"), 1) for i in range(3000)], Fraction(24000, 1001))
    total = sum(float(line.split()[1]) for line in many.splitlines() if line.startswith("duration"))
    assert abs(total - 3000 * 1001 / 24000) < 1e-6
    with pytest.raises(ValueError, match="at least one frame"):
        cmd.concat_list([(Path("/j/a.mp4"), 0)], Fraction(25))


def test_concat_args_copy_video_and_mux_the_cut_audio_once() -> None:
    args = cmd.concat_args(
        FF, Path("/j/concat.txt"), Path("/o/.out.partial.mp4"), Path("/v/in.mp4"), "aac", {"k": "v"},
        audio_start=0.5, audio_end=1.5,
    )  # fmt: skip
    assert args == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", "/j/concat.txt",
        "-ss", "0.5", "-t", "1", "-i", "/v/in.mp4",
        "-map", "0:v:0", "-map", "1:a:0?", "-c:a", "aac", "-b:a", "192k",
        "-c:v", "copy",
        "-metadata", "k=v", "-movflags", "+use_metadata_tags",
        "-f", "mp4", "/o/.out.partial.mp4",
    ]  # fmt: skip


def test_concat_args_without_audio_hevc_mkv_and_mov() -> None:
    assert cmd.concat_args(FF, Path("c.txt"), Path("o.mkv"), None, None, {}, encoder="libx265") == [
        FF, "-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y",
        "-f", "concat", "-safe", "0", "-i", "c.txt", "-map", "0:v:0", "-c:v", "copy", "-f", "matroska", "o.mkv",
    ]  # fmt: skip
    mov = cmd.concat_args(FF, Path("c.txt"), Path("o.mov"), Path("a.mov"), "pcm_s16le", {}, encoder="libx265")
    assert mov[mov.index("1:a:0?") + 1 :] == [
        "-c:a", "copy", "-c:v", "copy", "-tag:v", "hvc1", "-movflags", "+use_metadata_tags", "-f", "mov", "o.mov",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo.make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", width=48, height=32, count=36, fps=24)


def _read(clip: Path, span: video.Span, skip: int = 0) -> np.ndarray:
    with video.FrameReader(clip, video.probe(clip), span, skip=skip) as reader:
        return np.stack(list(reader))


@pytest.mark.parametrize(("trim", "fps"), [((0.0, None), None), ((0.25, 1.2), None), ((0.0, None), 10.0)])
def test_reader_skip_gives_the_same_frames_as_the_whole_span(
    clip: Path, trim: tuple[float, float | None], fps: float | None
) -> None:
    info = video.probe(clip)
    span = video.select(info, *trim, fps)
    whole = _read(clip, span)
    assert len(whole) == span.frames
    for skip in (1, 7, span.frames - 1):
        np.testing.assert_array_equal(_read(clip, span, skip), whole[skip:])


def test_reader_skip_must_leave_a_frame(clip: Path) -> None:
    info = video.probe(clip)
    with pytest.raises(ValueError, match="skip must be in 0–35"):
        video.FrameReader(clip, info, skip=36)


def test_segments_joined_play_as_one_constant_rate_video(clip: Path, tmp_path: Path) -> None:
    frames = demo.frames(48, 32, 20)
    plan = segments.plan(20, 6)
    parts = []
    for segment in plan.segments:
        path = tmp_path / segment.name
        with video.FrameWriter(path, 48, 32, "30000/1001", audio_from=None, metadata={}) as writer:
            for frame in frames[segment.start : segment.stop]:
                writer.write(frame)
        parts.append((path, segment.frames))
    out = tmp_path / "joined.mp4"
    info = video.join_segments(
        parts, out, Fraction(30000, 1001), tmp_path / "c.txt", clip, {"synthetic": "true"}, audio_end=0.5
    )
    assert (info.frame_count, info.fps_rational, info.vfr, info.has_audio) == (20, "30000/1001", False, True)
    assert video.probe(out).duration == pytest.approx(20 * 1001 / 30000, abs=1e-3)
    assert video.read_video_metadata(out)["synthetic"] == "true"
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name) == []


def test_a_segment_is_a_plain_value() -> None:
    assert Segment(2, 30, 45).frames == 15 and Segment(2, 30, 45).name == "seg-00002.mp4"
