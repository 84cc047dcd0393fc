"""Segment planning (pure), and reading a span from a later frame on (what a resumed job or a worker does)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import media as video
from engine.media import demo
from engine.run import segments
from engine.run.segments import Segment

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


def test_job_key_is_deterministic_and_changes_with_the_output() -> None:
    """The folder is the output's: the target is told apart by its content id in the folder's settings (a resume
    whose target changed finds the folder and is refused), not by its name, size or time."""
    key = segments.job_key("/o/out.mp4")
    assert key == segments.job_key("/o/out.mp4")
    assert len(key) == 16 and int(key, 16) >= 0
    assert key != segments.job_key("/o/out.mkv")


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


def test_a_segment_is_a_plain_value() -> None:
    assert Segment(2, 30, 45).frames == 15 and Segment(2, 30, 45).name == "seg-00002.mp4"
