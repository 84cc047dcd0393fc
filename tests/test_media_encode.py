"""engine/media/encode.py: FrameWriter against real ffmpeg: frames at their times, audio, tags, failures."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import ffmpeg_children
from mediakit import H, W, audio_seconds, ffmpeg, gradient, pattern, rate, read_all, seconds, sine, x264

from engine import media
from engine.core.errors import DiskFull, InvalidInput, MediaError
from engine.media import FrameTimes, FrameWriter, audio_for, encode, probe, select

pytest_plugins = ["mediafixtures"]


def test_writer_round_trip(clips: dict[str, Path], tmp_path: Path, probe_path: str) -> None:
    target = clips["cfr.mp4"]
    info = probe(target)
    output = tmp_path / "result.mp4"
    metadata = {"facestudio_job": '{"processors": ["face_swapper"]}', "comment": "made by a test"}
    span = select(info)
    with FrameWriter(output, info.width, info.height, span.output_times(), audio_for(info, span), metadata) as writer:
        for frame in read_all(target):
            writer.write(frame)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.mp4"]  # the temp file is gone
    result = probe(output)
    assert (result.frame_count, result.width, result.height, result.fps_rational) == (25, W, H, "25/1")
    assert (result.has_audio, result.audio_codec) == (True, "aac")
    assert abs(audio_seconds(output) - audio_seconds(target)) <= 1 / info.fps
    tags = media.read_video_metadata(output)
    assert {k: tags[k] for k in metadata} == metadata


def test_writer_keeps_pixels(tmp_path: Path, probe_path: str) -> None:
    output = tmp_path / "smooth.mkv"
    frames = list(gradient(10))
    with FrameWriter(output, W, H, rate(25), None, {"synthetic": "true"}, crf=10) as writer:
        for frame in frames:
            writer.write(frame)
    back = read_all(output)
    assert len(back) == 10
    assert not probe(output).has_audio
    assert media.read_video_metadata(output)["synthetic"] == "true"  # Matroska stores it as SYNTHETIC
    error = np.abs(np.stack(back).astype(int) - np.stack(frames).astype(int)).mean()
    assert error < 3


@pytest.mark.parametrize(
    ("suffix", "tick"), [(".mp4", Fraction(0)), (".mov", Fraction(0)), (".mkv", Fraction(1, 1000))]
)
@pytest.mark.parametrize("clip", ["vfr.mp4", "vfr12.mp4", "uneven.gif"])
def test_writer_keeps_every_frame_at_its_own_time(
    clips: dict[str, Path], tmp_path: Path, ffmpeg_build: str, clip: str, suffix: str, tick: Fraction
) -> None:
    """A variable-rate target's frames, written with its own times, come back at those times, frame by frame:
    exactly in MP4 and MOV, to Matroska's millisecond."""
    info = probe(clips[clip])
    output = tmp_path / f"out{suffix}"
    with FrameWriter(output, info.width, info.height, select(info).output_times()) as writer:
        for frame in read_all(clips[clip], info):
            writer.write(frame)
    written = probe(output)
    assert written.frame_count == info.frame_count and written.vfr
    for n, (got, want) in enumerate(zip(seconds(written), seconds(info), strict=True)):
        assert abs(got - want) <= tick, f"frame {n}: {float(got)} s, not {float(want)} s"


def test_writer_times_many_irregular_frames_through_a_filter_file(
    tmp_path: Path, ffmpeg_build: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Times that make a long expression go to ffmpeg in a file (the option for it differs between versions)."""
    monkeypatch.setattr(encode, "INLINE_FILTER_CHARS", 40)
    ticks = [0, 3, 5, 9, 10, 14, 15, 21, 22, 30]  # every gap different: one run per frame pair
    times = FrameTimes.of(ticks, Fraction(1, 30))
    output = tmp_path / "jittery.mp4"
    with FrameWriter(output, W, H, times) as writer:
        for frame in gradient(len(ticks)):
            writer.write(frame)
    assert seconds(probe(output)) == [Fraction(t, 30) for t in ticks]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jittery.mp4"]  # the filter file is gone too


def test_writer_checks_the_times_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose frames are not at the times asked for is refused, not delivered."""
    times = FrameTimes.of([0, 1, 2, 5], Fraction(1, 10))
    real = media.encode.cmd.encode_filter
    monkeypatch.setattr(media.encode.cmd, "encode_filter", lambda timing, rgb=False: real(
        media.encode.cmd.VideoTiming(timing.rate, timing.time_base, "N"), rgb))  # fmt: skip
    with (
        pytest.raises(MediaError, match=r"shows frame 3 at 0\.300000 s, not at 0\.500000 s"),
        FrameWriter(tmp_path / "x.mp4", W, H, times) as writer,
    ):
        for frame in gradient(4):
            writer.write(frame)
    assert list(tmp_path.iterdir()) == []


def test_a_writer_checked_later_does_not_read_its_file_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`checked_later` (a job's last segment, checked in the joined output): the same frames in place, unread."""

    def unread(path: Path, *args: object) -> None:
        raise AssertionError(f"{path} was read back")

    monkeypatch.setattr(media.encode, "probe", unread)
    with FrameWriter(tmp_path / "x.mp4", W, H, rate(25), checked_later=True) as writer:
        for frame in gradient(4):
            writer.write(frame)
    monkeypatch.undo()
    assert writer.written is None and [p.name for p in tmp_path.iterdir()] == ["x.mp4"]
    info = probe(tmp_path / "x.mp4")
    assert (info.frame_count, seconds(info)) == (4, [Fraction(n, 25) for n in range(4)])


def test_writer_pads_odd_sizes_by_edge_replication(tmp_path: Path) -> None:
    output = tmp_path / "odd.mp4"
    frames = list(gradient(5, width=W - 1, height=H - 1))
    with FrameWriter(output, W - 1, H - 1, rate(25), None, {}, crf=10) as writer:
        for frame in frames:
            writer.write(frame)
    info = probe(output)
    assert (info.width, info.height, info.frame_count) == (W, H, 5)
    padded = np.stack([np.pad(f, ((0, 1), (0, 1), (0, 0)), mode="edge") for f in frames]).astype(int)
    assert np.abs(np.stack(read_all(output)).astype(int) - padded).mean() < 3


def test_the_lossless_intermediate_keeps_every_pixel_at_any_size(tmp_path: Path) -> None:
    output = tmp_path / "lossless.mp4"
    frames = [np.random.default_rng(i).integers(0, 256, (H - 1, W - 1, 3), dtype=np.uint8) for i in range(3)]
    with FrameWriter(output, W - 1, H - 1, rate(10), encoder=media.encode.cmd.INTERMEDIATE_ENCODER) as writer:
        for frame in frames:
            writer.write(frame)
    for got, want in zip(read_all(output), frames, strict=True):
        np.testing.assert_array_equal(got, want)


def test_writer_reencodes_audio_mp4_cannot_hold(clips: dict[str, Path], tmp_path: Path) -> None:
    info = probe(clips["pcm.avi"])
    output = tmp_path / "from_avi.mp4"
    span = select(info)
    with FrameWriter(output, info.width, info.height, span.output_times(), audio_for(info, span)) as writer:
        for frame in gradient(info.frame_count):
            writer.write(frame)
    result = probe(output)
    assert (result.frame_count, result.audio_codec, result.fps_rational) == (24, "aac", "24/1")
    assert abs(audio_seconds(output) - audio_seconds(clips["pcm.avi"])) <= 1 / info.fps


def test_writer_cuts_audio_to_the_span(clips: dict[str, Path], tmp_path: Path, probe_path: str) -> None:
    target = clips["cfr.mp4"]  # 1 s of AAC
    info = probe(target)
    span = select(info, 0.2, 0.6)
    output = tmp_path / "cut.mp4"
    with FrameWriter(output, W, H, span.output_times(), audio_for(info, span)) as writer:
        for frame in read_all(target, info, span):
            writer.write(frame)
    result = probe(output)
    assert (result.frame_count, result.duration, result.audio_codec) == (10, 0.4, "aac")
    assert abs(audio_seconds(output) - 0.4) <= 1024 / 48000  # one AAC frame
    assert writer.written is not None and writer.written.has_audio


def test_writer_cut_after_the_audio_ends_writes_no_audio(tmp_path: Path) -> None:
    short = tmp_path / "short_audio.mp4"
    ffmpeg(*pattern(duration="2"), *sine(duration="0.5"), *x264(), "-c:a", "aac", str(short))
    info = probe(short)
    span = select(info, 1.0, 1.5)
    with FrameWriter(tmp_path / "silent.mp4", W, H, span.output_times(), audio_for(info, span)) as writer:
        for frame in read_all(short, info, span):
            writer.write(frame)
    assert writer.written is not None
    assert (writer.written.frame_count, writer.written.has_audio) == (13, False)


def test_writer_exception_leaves_nothing(tmp_path: Path) -> None:
    output = tmp_path / "failed.mp4"
    with pytest.raises(KeyError), FrameWriter(output, W, H, rate(25)) as writer:
        for frame in gradient(3):
            writer.write(frame)
        raise KeyError("processor failed")
    assert list(tmp_path.iterdir()) == []
    assert ffmpeg_children() == []


def test_writer_cannot_be_closed_after_abort(tmp_path: Path) -> None:
    writer = FrameWriter(tmp_path / "aborted.mp4", W, H, rate(25))
    writer.write(next(gradient(1)))
    writer.abort()
    with pytest.raises(MediaError, match="aborted"):
        writer.close()
    assert list(tmp_path.iterdir()) == []
    assert ffmpeg_children() == []


def test_writer_without_frames_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="no frames"), FrameWriter(tmp_path / "empty.mp4", W, H, rate(25)):
        pass
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_wrong_frames(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="takes 64×48"), FrameWriter(tmp_path / "x.mp4", W, H, rate(25)) as w:
        w.write(np.zeros((H, W + 2, 3), np.uint8))
    with pytest.raises(TypeError, match="uint8"), FrameWriter(tmp_path / "x.mp4", W, H, rate(25)) as w:
        w.write(np.zeros((H, W, 3), np.float32))
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_unsupported_output_and_oversized_frames(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"x\.webm"):
        FrameWriter(tmp_path / "x.webm", W, H, rate(25))
    with pytest.raises(InvalidInput, match="does not exist"):
        FrameWriter(tmp_path / "missing" / "x.mp4", W, H, rate(25))
    with pytest.raises(InvalidInput, match=r"libx264 encodes frames of at most 16384×16384 pixels, not 16386×2"):
        FrameWriter(tmp_path / "x.mp4", 16386, 2, rate(25))
    assert list(tmp_path.iterdir()) == []


def test_writer_takes_an_output_name_that_looks_like_an_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with FrameWriter(Path("-y.mp4"), W, H, rate(25)) as writer:
        for frame in gradient(2):
            writer.write(frame)
    assert probe(tmp_path / "-y.mp4").frame_count == 2


def test_a_full_disk_is_disk_full_naming_the_folder_and_leaves_nothing(full_disk: Path) -> None:
    output = full_disk / "big.mp4"
    noise = np.random.default_rng(0)
    with (
        pytest.raises(DiskFull, match=f"the disk of {full_disk} is full") as caught,
        FrameWriter(output, 256, 256, rate(25), crf=0) as writer,
    ):
        for _ in range(200):
            writer.write(noise.integers(0, 256, (256, 256, 3), dtype=np.uint8))
    assert caught.value.folder == full_disk and caught.value.exit_code == 2
    assert list(full_disk.iterdir()) == []
    assert ffmpeg_children() == []


def test_missing_encoder_is_refused_before_ffmpeg_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "ffmpeg"
    script.write_text("#!/bin/sh\ncat <<'EOF'\nEncoders:\n ------\n V....D libx264 H.264\nEOF\n")
    script.chmod(0o755)
    monkeypatch.setenv("FACESTUDIO_FFMPEG", str(script))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InvalidInput, match="has no libx265 encoder"):
        FrameWriter(out / "x.mp4", W, H, rate(25), encoder="libx265")
    assert list(out.iterdir()) == []


def test_writer_x265_round_trip(tmp_path: Path, probe_path: str) -> None:
    if "libx265" not in media.available_encoders(media.find_ffmpeg()):
        pytest.skip(f"the ffmpeg in use ({media.find_ffmpeg()}) was built without libx265")
    output = tmp_path / "hevc.mp4"
    frames = list(gradient(10))
    with FrameWriter(output, W, H, rate(25), None, {"synthetic": "true"}, crf=10, encoder="libx265") as writer:
        for frame in frames:
            writer.write(frame)
    info = probe(output)
    assert (info.video_codec, info.frame_count, info.width, info.height) == ("hevc", 10, W, H)
    assert writer.written == info
    assert media.read_video_metadata(output)["synthetic"] == "true"
    assert np.abs(np.stack(read_all(output)).astype(int) - np.stack(frames).astype(int)).mean() < 3


def test_a_refused_write_without_a_real_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same refusal where no tmpfs can be mounted: ffmpeg writes to /dev/full, which fails with ENOSPC."""
    partial = tmp_path / ".full.partial.mp4"
    partial.symlink_to("/dev/full")
    monkeypatch.setattr(encode, "partial_path", lambda output: partial)
    with (
        pytest.raises(DiskFull, match=f"the disk of {tmp_path} is full"),
        FrameWriter(tmp_path / "full.mp4", W, H, rate(25)) as writer,
    ):
        for frame in gradient(3):
            writer.write(frame)
    assert not (tmp_path / "full.mp4").exists() and not partial.is_symlink()
