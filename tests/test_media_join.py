"""engine/media/join.py: segments joined into one file at their frames' times, with the audio in sync; GIF output."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from mediakit import H, W, beep_time, ffmpeg, flash_and_beep, flash_time, rate, read_all, seconds

from engine import media
from engine.core.errors import DiskFull
from engine.media import FrameWriter, MediaInfo, Span, audio_for, demo, join_segments, probe, select
from engine.media.commands import INTERMEDIATE_ENCODER
from engine.run import segments

pytest_plugins = ["mediafixtures"]


def _segments(
    tmp_path: Path, info: MediaInfo, span: Span, segment_frames: int, encoder: str = "libx264"
) -> list[tuple[Path, int]]:
    """The span of `info.path` re-encoded in segments, as a run renders them (no processor)."""
    frames = read_all(info.path, info, span)
    parts = []
    for segment in segments.plan(len(frames), segment_frames).segments:
        path = tmp_path / segment.name
        with FrameWriter(path, info.width, info.height, span.output_times(segment.start), encoder=encoder) as w:
            for frame in frames[segment.start : segment.stop]:
                w.write(frame)
        parts.append((path, segment.frames))
    return parts


def test_segments_joined_play_as_one_constant_rate_video(tmp_path: Path) -> None:
    frames = demo.frames(48, 32, 20)
    plan = segments.plan(20, 6)
    times = rate("30000/1001")
    parts = []
    for segment in plan.segments:
        path = tmp_path / segment.name
        with FrameWriter(path, 48, 32, times.after(segment.start)) as writer:
            for frame in frames[segment.start : segment.stop]:
                writer.write(frame)
        parts.append((path, segment.frames))
    clip = demo.make_clip(tmp_path / "clip.mp4", width=48, height=32, count=36, fps=24)
    source = probe(clip)
    audio = audio_for(source, select(source, 0, 0.5))
    out = tmp_path / "joined.mp4"
    info = join_segments(parts, out, times, times.seconds(1), tmp_path / "c.txt", audio, {"synthetic": "true"})
    assert (info.frame_count, info.fps_rational, info.vfr, info.has_audio) == (20, "30000/1001", False, True)
    assert probe(out).duration == pytest.approx(20 * 1001 / 30000, abs=1e-3)
    assert media.read_video_metadata(out)["synthetic"] == "true"
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name) == []


@pytest.mark.parametrize("clip", ["vfr.mp4", "vfr12.mp4", "uneven.gif"])
def test_a_variable_rate_video_keeps_every_frames_time_across_the_joints(
    clips: dict[str, Path], tmp_path: Path, clip: str
) -> None:
    info = probe(clips[clip])
    span = select(info)
    parts = _segments(tmp_path, info, span, 4)
    out = tmp_path / "joined.mp4"
    join_segments(parts, out, span.output_times(), span.last, tmp_path / "c.txt", None, {})
    assert seconds(probe(out)) == seconds(info)


def test_a_gif_output_keeps_the_gifs_delays_and_is_tagged(clips: dict[str, Path], tmp_path: Path) -> None:
    info = probe(clips["uneven.gif"])  # delays 10, 20, 30, 40, 10 hundredths of a second
    span = select(info)
    parts = _segments(tmp_path, info, span, 2, INTERMEDIATE_ENCODER)
    out = tmp_path / "out.gif"
    written = join_segments(parts, out, span.output_times(), span.last, tmp_path / "c.txt", None,
                            {"synthetic": "true", "generator": "facestudio"})  # fmt: skip
    assert written.format_name == "gif" and written.timestamps == info.timestamps
    assert "synthetic=true" in media.read_video_metadata(out).get("comment", "")
    # GIF has 256 colours a frame: the frames come back close to what went in.
    for got, want in zip(read_all(out), read_all(clips["uneven.gif"]), strict=True):
        assert np.abs(got.astype(int) - want.astype(int)).mean() < 6


@pytest.mark.parametrize(
    ("offset", "vfr"), [(1.0, False), (0.0, False), (0.5, True)], ids=["video-after-audio", "aligned", "vfr-offset"]
)
def test_the_joined_audio_plays_with_the_picture_within_a_frame(
    tmp_path: Path, probe_path: str, offset: float, vfr: bool
) -> None:
    """A flash and a beep at the same moment of the source are at the same moment of the output (±1 frame),
    whether the video stream starts after the audio or not, and whatever the frame rate does."""
    clip = flash_and_beep(tmp_path / "src.mp4", 1.0, video_offset=offset, vfr=vfr)
    info = probe(clip)
    span = select(info)
    parts = _segments(tmp_path, info, span, 7)
    out = tmp_path / "joined.mp4"
    join_segments(parts, out, span.output_times(), span.last, tmp_path / "c.txt", audio_for(info, span), {})
    frame = Fraction(info.duration) / info.frame_count
    assert abs(flash_time(clip) - beep_time(clip)) <= frame  # the source is in sync
    assert abs(flash_time(out) - beep_time(out)) <= min(frame, Fraction(1, 25))
    assert probe(out).start_time == 0  # the output starts with its first picture


def test_a_trimmed_span_of_an_offset_video_keeps_its_sync(tmp_path: Path) -> None:
    clip = flash_and_beep(tmp_path / "src.mp4", 1.2, video_offset=1.0)
    info = probe(clip)
    span = select(info, 0.5, 1.6)
    parts = _segments(tmp_path, info, span, 10)
    out = tmp_path / "trimmed.mp4"
    join_segments(parts, out, span.output_times(), span.last, tmp_path / "c.txt", audio_for(info, span), {})
    # The output starts with the first frame at or after 0.5 s (0.52 s): the flash, 1.2 s into the picture, is
    # 0.68 s into it.
    assert span.start == Fraction(13, 25) and abs(flash_time(out) - 0.68) < 0.001
    assert abs(beep_time(out) - flash_time(out)) <= 0.04


def test_a_full_output_disk_is_disk_full_and_leaves_no_partial_file(
    clips: dict[str, Path], tmp_path: Path, full_disk: Path
) -> None:
    noise = np.random.default_rng(5)
    parts = []
    for index in range(2):
        path = tmp_path / f"seg-{index}.mp4"
        with FrameWriter(path, 256, 256, rate(25).after(index * 40), crf=0) as writer:
            for _ in range(40):
                writer.write(noise.integers(0, 256, (256, 256, 3), dtype=np.uint8))
        parts.append((path, 40))
    with pytest.raises(DiskFull, match=f"the disk of {full_disk} is full"):
        join_segments(parts, full_disk / "out.mp4", rate(25), Fraction(1, 25), tmp_path / "c.txt", None, {})
    assert list(full_disk.iterdir()) == []


def test_gif_comment_goes_after_the_global_colour_table(tmp_path: Path) -> None:
    gif = tmp_path / "a.gif"
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={W}x{H}:rate=10:duration=0.3", "-loop", "0", str(gif))
    before = read_all(gif)
    media.join._comment_gif(gif, "x" * 300)  # more than one 255-byte sub-block
    assert media.read_video_metadata(gif)["comment"] == "x" * 300
    for got, want in zip(read_all(gif), before, strict=True):
        np.testing.assert_array_equal(got, want)
    assert len(before) == 3
