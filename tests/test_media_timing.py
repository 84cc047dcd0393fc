"""engine/media/timing.py: frame times, spans and the audio that goes with them (pure: probed clips only as input)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import pytest
from mediakit import H, W, quadrants, single_line_error
from PIL import Image

from engine.core.errors import InvalidInput
from engine.media import FrameTimes, MediaInfo, Span, audio_for, output_rate, probe, select
from engine.media.timing import Packet, Run, frame_timing

pytest_plugins = ["mediafixtures"]


def _info(stamps: tuple[int, ...], base: Fraction, **changes: object) -> MediaInfo:
    """A probed video with these frame times (and an audio stream), without a file."""
    duration = (stamps[-1] + (stamps[-1] - stamps[-2])) * base
    info = MediaInfo(
        Path("t.mp4"), "video", W, H, len(stamps), float(len(stamps) / duration), "25/1", float(duration), 0, True,
        "aac", len({b - a for a, b in zip(stamps, stamps[1:], strict=False)}) > 1, "h264", "yuv420p", "mp4", base,
        stamps,
    )  # fmt: skip
    return dataclasses.replace(info, **changes)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# FrameTimes


def test_frame_times_compress_equal_gaps_into_runs_and_give_every_time_back() -> None:
    ticks = [0, 1, 2, 3, 10, 20, 30, 31]
    times = FrameTimes.of(ticks, Fraction(1, 12))
    assert times.runs == (Run(0, 0, 1), Run(4, 10, 10), Run(7, 31, 10))
    assert [times.ticks(n) for n in range(len(ticks))] == ticks
    assert times.seconds(5) == Fraction(20, 12)
    assert times.ticks(9) == 51  # past the frames it was made of, the last run goes on


def test_frame_times_of_a_constant_rate_are_one_run() -> None:
    times = FrameTimes.constant(Fraction(30000, 1001))
    assert times.runs == (Run(0, 0, 1),) and times.time_base == Fraction(1001, 30000)
    assert times.seconds(30) == Fraction(1001, 1000)
    assert times.rate() == Fraction(30000, 1001)
    assert FrameTimes.of(list(range(0, 50, 2)), Fraction(1, 50)).runs == (Run(0, 0, 2),)


def test_frame_times_after_renumber_from_zero_and_coarsest_finds_the_exact_base() -> None:
    times = FrameTimes.of([0, 512, 1024, 2560, 4096, 5632], Fraction(1, 12800))
    later = times.after(2)
    assert later.time_base == Fraction(1, 12800)
    assert [later.seconds(n) for n in range(4)] == [times.seconds(n) - times.seconds(2) for n in range(2, 6)]
    coarse = later.coarsest()
    assert coarse.time_base == Fraction(512, 12800)  # every remaining time is a multiple of 512 ticks
    assert [coarse.seconds(n) for n in range(4)] == [later.seconds(n) for n in range(4)]


def test_every_segment_of_a_span_is_timed_in_the_same_base() -> None:
    """Segments in different time bases are joined at the wrong times by ffmpeg's concat demuxer."""
    span = select(_info((0, 1, 2, 3, 4, 5, 6, 12, 18, 24, 30, 36), Fraction(1, 12)))
    assert {span.output_times(first).time_base for first in (0, 4, 8)} == {Fraction(1, 12)}
    assert span.output_times(8).seconds(1) == Fraction(1, 2)


def test_frame_times_refuse_times_that_do_not_ascend() -> None:
    with pytest.raises(ValueError, match="ascending"):
        FrameTimes.of([0, 2, 2], Fraction(1, 25))


def test_setpts_is_a_binary_search_over_the_runs() -> None:
    assert FrameTimes.constant(Fraction(25)).setpts() == "0+N*1"
    times = FrameTimes.of([0, 1, 2, 3, 10, 20, 30, 31], Fraction(1, 12))
    assert times.setpts() == "if(lt(N,4),0+N*1,if(lt(N,7),10+(N-4)*10,31+(N-7)*10))"


# ---------------------------------------------------------------------------------------------------------------
# frame_timing: what packets say about frames


def test_packets_without_a_timestamp_among_timed_ones_are_not_frames() -> None:
    # An open-GOP cut: the keyframe, two leading pictures the demuxer could not time, then the GOP.
    packets = [Packet(0, 40, False), Packet(None, 40, False), Packet(None, 40, False),
               *(Packet(t, 40, False) for t in (160, 80, 40, 120))]  # fmt: skip
    timing = frame_timing(packets, Fraction(1, 1000))
    assert (timing.frames, timing.hidden, timing.timestamps) == (5, 2, (0, 40, 80, 120, 160))
    assert timing.duration == Fraction(200, 1000)


def test_discarded_packets_are_not_frames_and_the_first_kept_one_starts_the_clock() -> None:
    packets = [Packet(-1024, 512, True), Packet(12800, 512, False), Packet(13312, 512, False)]
    timing = frame_timing(packets, Fraction(1, 12800))
    assert (timing.frames, timing.hidden, timing.timestamps, timing.first_pts) == (2, 1, (0, 512), 12800)


def test_a_stream_without_timing_is_taken_as_25_fps() -> None:
    timing = frame_timing([Packet(None, 0, False)] * 4, Fraction(1, 90000))
    assert (timing.frames, timing.time_base, timing.timestamps, timing.hidden) == (4, Fraction(1, 25), (0, 1, 2, 3), 0)


# ---------------------------------------------------------------------------------------------------------------
# select


def test_select_whole_video_and_spans(clips: dict[str, Path]) -> None:
    info = probe(clips["cfr.mp4"])  # 25 frames, 1/25 s apart, time base 1/12800
    whole = select(info)
    assert whole == Span(Fraction(0), None, 0, None, Fraction(25), False, 25, 25,
                         FrameTimes(Fraction(1, 12800), (Run(0, 0, 512),)), Fraction(1, 25))  # fmt: skip
    assert whole.fps_rational == "25/1"
    trim = select(info, 0.2, 0.6)
    assert (trim.start, trim.end, trim.start_pts, trim.end_pts, trim.frames) == (
        Fraction(1, 5), Fraction(3, 5), 2560, 7680, 10,
    )  # fmt: skip
    assert select(info, 0.2, 60.0) == select(info, 0.2)  # an end past the last frame: to the end
    # The output's time 0 is the first frame kept (at 0.04 s), not the asked start.
    assert (select(info, 0.01).start, select(info, 0.01).start_pts) == (Fraction(1, 25), 128)
    assert select(info, 0.01).frames == 24
    assert not select(info, fps=25).resample  # the video's own constant rate: every frame once
    halved = select(info, fps=12.5)
    assert (halved.resample, halved.fps_rational, halved.frames, halved.minimum) == (True, "25/2", 13, 12)
    assert select(info, 0.2, 0.6, fps=10).frames == 4


def test_a_span_times_each_frame_as_the_target_shows_it() -> None:
    stamps = (0, 1, 2, 3, 4, 5, 6, 12, 18, 24)  # ticks of 1/12 s: 12 fps, then 2 fps
    info = _info(stamps, Fraction(1, 12))
    span = select(info, 0.2)
    assert [span.times.seconds(k) for k in range(span.frames)] == [Fraction(t, 12) for t in stamps[3:]]
    assert span.start == Fraction(3, 12)
    out = span.output_times()
    assert [out.seconds(k) for k in range(span.frames)] == [Fraction(t - 3, 12) for t in stamps[3:]]
    assert span.last == Fraction(6, 12)  # the last frame lasts the gap before it


def test_a_resampled_span_has_a_slot_every_one_over_rate_from_its_start() -> None:
    info = _info((0, 1, 2, 3, 4, 5, 6, 12, 18, 24), Fraction(1, 12))
    span = select(info, 0.25, fps=10)
    assert span.resample and span.start == Fraction(1, 4)
    assert [span.times.seconds(k) for k in range(4)] == [Fraction(1, 4) + Fraction(k, 10) for k in range(4)]
    assert span.output_times().time_base == Fraction(1, 10) and span.last == Fraction(1, 10)


def test_select_resamples_vfr_even_at_its_average_rate(clips: dict[str, Path]) -> None:
    info = probe(clips["vfr.mp4"])  # last frame at 52/25 s; with the median gap the video ends at 55/25 s
    assert select(info, fps=float(Fraction(info.fps_rational))).resample
    ten = select(info, fps=10)
    assert (ten.frames, ten.minimum) == (22, 21)


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (1.0, None, r"trim start 1 s is past the end of .*cfr\.mp4 \(1\.000 s long\): choose a start before 1\.000"),
        (5.0, 6.0, r"trim start 5 s is past the end"),
        (0.97, None, r"trim start 0\.97 s is after the last frame of .*cfr\.mp4 \(at 0\.960 s\)"),
        (0.41, 0.42, r"the span 0\.41–0\.42 s of .*cfr\.mp4 holds no frame \(frames are 0\.040 s apart on average\)"),
    ],
)
def test_select_refuses_spans_without_frames(
    clips: dict[str, Path], start: float, end: float | None, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        select(probe(clips["cfr.mp4"]), start, end)
    assert type(caught.value) is InvalidInput
    single_line_error(caught.value, clips["cfr.mp4"])


def test_select_ignores_spans_for_an_image(tmp_path: Path) -> None:
    path = tmp_path / "still.png"
    Image.fromarray(quadrants(H, W)).save(path)
    span = select(probe(path), 5.0, 6.0, fps=12)
    assert (span.frames, span.resample, span.times.seconds(0)) == (1, False, 0)


@pytest.mark.parametrize(
    ("fps", "rate"),
    [
        (29.97, Fraction(30000, 1001)),
        (23.976, Fraction(24000, 1001)),
        (59.94, Fraction(60000, 1001)),
        (24.0, Fraction(24)),
        (1.0, Fraction(1)),  # 1000/1001 is within 0.005 of 1, but 1 is closer
        (12.5, Fraction(25, 2)),
        (240, Fraction(240)),
    ],
)
def test_output_rate(fps: float, rate: Fraction) -> None:
    assert output_rate(fps) == rate


# ---------------------------------------------------------------------------------------------------------------
# audio_for


def test_audio_of_a_video_that_starts_after_it_is_cut_at_the_first_frame() -> None:
    info = _info(tuple(range(0, 25 * 512, 512)), Fraction(1, 12800), start_time=Fraction(1), audio_start=Fraction(0))
    audio = audio_for(info, select(info))
    assert audio is not None
    assert (audio.start, audio.end, audio.cut) == (Fraction(1), None, True)


def test_audio_that_starts_after_the_video_is_copied_with_its_delay() -> None:
    info = _info(tuple(range(0, 25 * 512, 512)), Fraction(1, 12800), audio_start=Fraction(1, 2))
    audio = audio_for(info, select(info))
    assert audio is not None and (audio.start, audio.cut) == (0, False)


def test_an_encoders_priming_before_the_first_frame_is_no_reason_to_cut() -> None:
    # Matroska with AAC: the video starts 23 ms after the audio's priming samples, less than a frame.
    info = _info(tuple(range(0, 25 * 40, 40)), Fraction(1, 1000), start_time=Fraction(23, 1000),
                 audio_start=Fraction(0))  # fmt: skip
    audio = audio_for(info, select(info))
    assert audio is not None and (audio.start, audio.cut) == (Fraction(23, 1000), False)


def test_the_audio_of_a_trimmed_span_is_cut_on_the_files_own_timeline() -> None:
    info = _info(tuple(range(0, 25 * 512, 512)), Fraction(1, 12800), start_time=Fraction(2), audio_start=Fraction(2))
    audio = audio_for(info, select(info, 0.2, 0.6))
    assert audio is not None
    assert (audio.start, audio.end, audio.cut) == (Fraction(11, 5), Fraction(13, 5), True)
    assert audio_for(dataclasses.replace(info, has_audio=False), select(info)) is None


def test_pictures_before_the_first_keyframe_or_leading_it_are_not_frames() -> None:
    # A cut that starts mid-GOP (two pictures before the keyframe), then the keyframe at 253 ticks and a leading
    # picture of its open GOP that the muxer gave an earlier time (170), then the GOP.
    before = [Packet(100, 83, False, key=False), Packet(183, 83, False, key=False)]
    gop = [Packet(t, 83, False, key=False) for t in (170, 420, 336, 503)]
    packets = [*before, Packet(253, 83, False), *gop]
    timing = frame_timing(packets, Fraction(1, 1000))
    assert (timing.frames, timing.hidden, timing.first_pts) == (4, 3, 253)
    assert timing.timestamps == (0, 83, 167, 250)
    # A stream that marks no keyframe keeps every timed packet.
    unmarked = [Packet(t, 40, False, key=False) for t in (0, 40, 80)]
    assert frame_timing(unmarked, Fraction(1, 1000)).frames == 3
