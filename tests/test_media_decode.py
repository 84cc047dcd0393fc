"""engine/media/decode.py: FrameReader against real ffmpeg (whole videos, spans, damage, open GOPs, children)."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import ffmpeg_children
from mediakit import H, W, ffmpeg, flash_and_beep, read_all, seconds, single_line_error
from PIL import Image

from engine import media
from engine.core.errors import TruncatedInput
from engine.media import FrameReader, MediaInfo, probe, select

pytest_plugins = ["mediafixtures"]


def test_reader_reads_every_frame(clips: dict[str, Path]) -> None:
    frames = read_all(clips["cfr.mp4"])
    assert len(frames) == 25
    assert all(f.shape == (H, W, 3) and f.dtype == np.uint8 for f in frames)
    assert frames[0].flags.writeable
    assert not np.array_equal(frames[0], frames[-1])  # testsrc2 moves: these are distinct frames


@pytest.mark.parametrize(("clip", "count"), [("vfr.mp4", 25), ("vfr12.mp4", 12), ("ntsc.mkv", 30), ("uneven.gif", 6)])
def test_reader_reads_every_frame_of_variable_rate_and_other_clips(
    clips: dict[str, Path], clip: str, count: int
) -> None:
    assert len(read_all(clips[clip])) == count == probe(clips[clip]).frame_count


def test_reader_applies_rotation(clips: dict[str, Path]) -> None:
    info = probe(clips["rotated.mp4"])
    rotated = read_all(clips["rotated.mp4"], info)
    upright = read_all(clips["cfr.mp4"])
    assert rotated[0].shape == (W, H, 3)
    # Stream copy: same compressed pixels, so the decoded frames are exact quarter turns of each other.
    for stored, shown in zip(upright, rotated, strict=True):
        np.testing.assert_array_equal(shown, np.rot90(stored, info.rotation // 90))


@pytest.mark.parametrize("clip", ["open_gop_cut.mkv", "open_gop_cut.mp4"])
def test_an_open_gop_cut_decodes_every_frame_without_being_called_damaged(
    clips: dict[str, Path], ffmpeg_build: str, clip: str
) -> None:
    """The leading pictures whose references the cut removed cannot be decoded (ffmpeg says so); every frame that
    has a time decodes, so the file is not damaged."""
    info = probe(clips[clip])
    frames = read_all(clips[clip], info)
    assert len(frames) == info.frame_count
    # The cut's frames are the source's frames from 2.5 s on (bit-identical: same stream, same decoder).
    source = read_all(clips["open_gop.mp4"])
    start = len(source) - info.frame_count
    for k in (0, info.frame_count // 2, info.frame_count - 1):
        np.testing.assert_array_equal(frames[k], source[start + k])


def test_an_hevc_open_gop_cut_decodes_every_frame(tmp_path: Path) -> None:
    if "libx265" not in media.available_encoders(media.find_ffmpeg()):
        pytest.skip("the ffmpeg in use has no libx265")
    source = tmp_path / "hevc.mp4"
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={W}x{H}:rate=25:duration=4", "-c:v", "libx265", "-preset", "fast",
           "-x265-params", "log-level=error:keyint=25:min-keyint=25:open-gop=1:bframes=3:scenecut=0",
           str(source))  # fmt: skip
    cut = tmp_path / "hevc_cut.mkv"
    ffmpeg("-ss", "2.5", "-i", str(source), "-c", "copy", str(cut))
    info = probe(cut)
    assert len(read_all(cut, info)) == info.frame_count
    assert seconds(info) == [Fraction(k, 25) for k in range(info.frame_count)]


def test_reader_damaged_clip(clips: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(clips["cfr.mp4"].read_bytes())
    middle = len(data) // 2
    data[middle : middle + 600] = bytes((i * 37) % 256 for i in range(600))  # garbage inside the frame data
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    assert probe(damaged).frame_count == 25  # the container is intact: only decoding finds the damage
    with pytest.raises(TruncatedInput, match=r"expected 25 frames, decoded \d+; ffmpeg: ") as caught:
        read_all(damaged)
    single_line_error(caught.value, damaged)
    assert ffmpeg_children() == []


def test_reader_fewer_frames_than_counted(clips: dict[str, Path]) -> None:
    info = dataclasses.replace(probe(clips["cfr.mp4"]), frame_count=30)
    with pytest.raises(TruncatedInput, match="expected 30 frames, decoded 25"):
        read_all(clips["cfr.mp4"], info)


def test_a_clip_with_hidden_packets_still_refuses_missing_frames(clips: dict[str, Path]) -> None:
    """Decoder complaints are forgiven for the pictures that are not frames, never a frame that is missing."""
    info = probe(clips["open_gop_cut.mkv"])
    claimed = dataclasses.replace(info, frame_count=info.frame_count + 3)
    with pytest.raises(TruncatedInput, match=f"expected {info.frame_count + 3} frames, decoded {info.frame_count}"):
        read_all(clips["open_gop_cut.mkv"], claimed)


def test_reader_abandoned_in_with_block_leaves_no_child(clips: dict[str, Path]) -> None:
    with FrameReader(clips["cfr.mp4"]) as reader:
        frames = iter(reader)
        next(frames)
        assert len(ffmpeg_children()) == 1
    assert ffmpeg_children() == []


def test_reader_abandoned_loop_leaves_no_child(clips: dict[str, Path]) -> None:
    for _ in FrameReader(clips["cfr.mp4"]):
        break
    assert ffmpeg_children() == []


def test_reader_exception_leaves_no_child(clips: dict[str, Path]) -> None:
    with pytest.raises(KeyError), FrameReader(clips["cfr.mp4"]) as reader:
        for _ in reader:
            raise KeyError("boom")
    assert ffmpeg_children() == []


def test_reader_closed_mid_stream_ends_quietly(clips: dict[str, Path]) -> None:
    # What the pipeline does when it stops: close() from one thread while the decode thread holds the iterator.
    reader = FrameReader(clips["cfr.mp4"])
    frames = iter(reader)
    next(frames)
    reader.close()
    assert list(frames) == []
    assert ffmpeg_children() == []


def test_reader_iterates_once(clips: dict[str, Path]) -> None:
    with FrameReader(clips["cfr.mp4"]) as reader:
        list(reader)
        with pytest.raises(RuntimeError, match="only once"):
            iter(reader)


def test_reader_of_an_image_gives_its_frame(tmp_path: Path) -> None:
    path = tmp_path / "still.png"
    pixels = np.random.default_rng(1).integers(0, 256, (H, W, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    frames = read_all(path)
    assert len(frames) == 1
    np.testing.assert_array_equal(frames[0], pixels)


def test_reader_takes_paths_that_look_like_options(clips: dict[str, Path], tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "-i.mp4").write_bytes(clips["cfr.mp4"].read_bytes())
    monkeypatch.chdir(tmp_path)
    assert len(read_all(Path("-i.mp4"))) == 25


# ---------------------------------------------------------------------------------------------------------------
# Spans: trimming and resampling at decode


def _expected_source(info: MediaInfo, start: float, end: float | None, fps: float | None, k: int) -> int:
    """Index, in the full decode, of output frame `k` of a span, from the definition (the tests' starts and ends
    lie on the clips' time bases): the k-th frame in [start, end), or for a rate R the frame on screen at
    start + k/R (the first frame of the span before that one appears)."""
    times = seconds(info)
    lo, hi = Fraction(str(start)), None if end is None else Fraction(str(end))
    kept = [i for i, t in enumerate(times) if t >= lo and (hi is None or t < hi)]
    if fps is None:
        return kept[k]
    on_screen = [i for i in kept if times[i] <= lo + k / media.output_rate(fps)]
    return on_screen[-1] if on_screen else kept[0]


def _certain_count(info: MediaInfo, start: float, end: float | None, fps: float | None) -> int:
    """Frames a span certainly holds: every frame in it, or for a rate R every slot before its end; at the end of
    the video, every slot before the last frame starts (how long ffmpeg shows the last frame decides the rest)."""
    times = seconds(info)
    lo, hi = Fraction(str(start)), None if end is None else Fraction(str(end))
    if fps is None:
        return sum(1 for t in times if t >= lo and (hi is None or t < hi))
    stop = hi if hi is not None and hi <= times[-1] else times[-1]
    return math.ceil((stop - lo) * media.output_rate(fps))


SPANS = [
    pytest.param(0.2, 0.6, None, id="trim"),
    pytest.param(0.2, None, None, id="trim-start"),
    pytest.param(0.2, None, 10.0, id="10fps-to-end"),
    pytest.param(0.0, 0.6, 60.0, id="60fps-trimmed"),
    pytest.param(0.2, 0.7, 29.97, id="ntsc-trimmed"),
]


@pytest.mark.parametrize(("start", "end", "fps"), SPANS)
@pytest.mark.parametrize("clip", ["cfr.mp4", "vfr.mp4", "ntsc.mkv", "rotated.mp4"])
def test_reader_span_yields_the_defined_frames(  # type: ignore[no-untyped-def]
    clips: dict[str, Path], ffmpeg_build: str, clip: str, start, end, fps
) -> None:
    info = probe(clips[clip])
    full = read_all(clips[clip], info)
    span = select(info, start, end, fps)
    got = read_all(clips[clip], info, span)
    if not span.resample:  # the clip's own constant rate (29.97 on the NTSC clip): every frame once
        fps = None
    assert len(got) >= _certain_count(info, start, end, fps) == span.minimum
    if not (span.resample and span.end_pts is None):  # all but a resampled run to the end are exact
        assert len(got) == span.frames
    # Same decoder, so a selected frame is bit-identical to the same frame of a full decode.
    for k, frame in enumerate(got):
        np.testing.assert_array_equal(frame, full[_expected_source(info, start, end, fps, k)], err_msg=f"frame {k}")


def test_a_new_rate_picks_the_frames_of_a_variable_rate_clip_by_time(clips: dict[str, Path]) -> None:
    """At 4 fps, slot k (at k/4 s) shows the frame on screen then: frames 0–5 are 1/12 s apart, then 1/2 s."""
    info = probe(clips["vfr12.mp4"])
    full = read_all(clips["vfr12.mp4"], info)
    span = select(info, fps=4)
    got = read_all(clips["vfr12.mp4"], info, span)
    times = seconds(info)
    for k, frame in enumerate(got):
        shown = max(i for i, t in enumerate(times) if t <= Fraction(k, 4))
        np.testing.assert_array_equal(frame, full[shown], err_msg=f"slot {k}")
    assert [span.times.seconds(k) for k in range(3)] == [0, Fraction(1, 4), Fraction(1, 2)]


def _claiming_more(info: MediaInfo, extra: int) -> MediaInfo:
    """`info` as an index would describe the file if `extra` more frames, at the same spacing, followed."""
    gap = info.timestamps[1] - info.timestamps[0]
    stamps = info.timestamps + tuple(info.timestamps[-1] + gap * (i + 1) for i in range(extra))
    duration = info.duration + float(extra * gap * info.time_base)
    return dataclasses.replace(info, frame_count=info.frame_count + extra, timestamps=stamps, duration=duration)


@pytest.mark.parametrize(
    ("start", "end", "fps", "message"),
    [
        (0.2, None, None, "expected 25 frames, decoded 20"),
        (0.2, 1.1, None, "expected 23 frames, decoded 20"),
        (0.2, None, 10.0, "expected 10 frames, decoded 8"),
        (0.2, 1.1, 10.0, "expected 9 frames, decoded 8"),
    ],
)
def test_reader_span_detects_missing_frames(  # type: ignore[no-untyped-def]
    clips: dict[str, Path], ffmpeg_build: str, start, end, fps, message: str
) -> None:
    # The index claims 1.2 s (30 frames); the stream ends at 1.0 s: each span falls short of its count.
    info = _claiming_more(probe(clips["cfr.mp4"]), 5)
    with pytest.raises(TruncatedInput, match=message) as caught:
        read_all(clips["cfr.mp4"], info, select(info, start, end, fps))
    single_line_error(caught.value, clips["cfr.mp4"])
    assert ffmpeg_children() == []


def test_reader_span_of_a_damaged_clip(clips: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(clips["cfr.mp4"].read_bytes())
    middle = len(data) // 2
    data[middle : middle + 600] = bytes((i * 37) % 256 for i in range(600))
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    info = probe(damaged)
    with pytest.raises(TruncatedInput, match=r"; ffmpeg: "):
        read_all(damaged, info, select(info, 0.2, fps=10))


def test_a_variable_rate_matroska_file_decodes_without_complaint(tmp_path: Path, ffmpeg_build: str) -> None:
    """Matroska guesses a frame rate below the frames' own (here 16/3 fps for frames 1/12 s apart): raw frames timed
    at that rate would collide, which ffmpeg reports as an error; the decoder keeps the input's time base."""
    source = flash_and_beep(tmp_path / "src.mp4", 2.5, vfr=True)
    info = probe(source)
    span = select(info)
    out = tmp_path / "vfr.mkv"
    with media.FrameWriter(out, W, H, span.output_times(), media.audio_for(info, span)) as writer:
        for frame in read_all(source, info):
            writer.write(frame)
    assert len(read_all(out)) == 12


def test_a_reader_started_early_gives_the_same_frames_and_is_reaped_unread(clips: dict[str, Path]) -> None:
    """`start` runs ffmpeg before the first frame is asked for; the frames are the same as a reader started by its
    first frame, and a started reader closed unread leaves no child."""
    with media.FrameReader(clips["cfr.mp4"]) as reader:
        assert reader.start() is reader and len(ffmpeg_children()) == 1
        early = list(reader)
    assert np.array_equal(np.stack(early), np.stack(read_all(clips["cfr.mp4"]))) and len(early) == 25
    with media.FrameReader(clips["cfr.mp4"]).start():
        assert len(ffmpeg_children()) == 1
    assert ffmpeg_children() == []
