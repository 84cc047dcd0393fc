"""Time: when each frame is shown, which frames a job's span takes, and which audio goes with them.

Pure functions and values, nothing here runs a process or reads a file. Times are exact `Fraction`s of seconds;
timestamps are integer ticks of a time base, as containers store them.

- `frame_timing` turns a video stream's packet timestamps into the frame times `probe` reports.
- `FrameTimes` is when each frame of a sequence is shown, compressed into runs of equal gaps (a constant-rate
  clip is one run), and writes itself as an ffmpeg `setpts` expression so an encoder keeps every frame's time.
- `select` turns a job's trim and frame rate into a `Span`: the exact frames to read and the time of each.
- `audio_for` says which part of the target's audio plays with a span, on the file's own timeline.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

from engine.core.errors import InvalidInput
from engine.media.commands import Audio
from engine.media.info import MediaInfo

logger = logging.getLogger(__name__)

# Frame rate assumed only for a video whose packets carry no timing at all (raw elementary streams).
FALLBACK_FPS = Fraction(25)


@dataclass(frozen=True)
class Packet:
    """A packet of the video stream: pts and duration in time-base ticks (pts None when unknown), whether the
    container marks it discarded, and whether it is a keyframe."""

    pts: int | None
    duration: int
    discard: bool
    key: bool = True


@dataclass(frozen=True)
class Timing:
    """What the packets of a video stream say about its frames (see `MediaInfo` for each field).

    first_pts: the first frame's timestamp in ticks on the file's timeline; hidden: packets that are not frames;
    note: how the times were mended when the file's timestamps repeat or jump back (None when they ascend).
    """

    frames: int
    duration: Fraction
    vfr: bool
    timestamps: tuple[int, ...]
    time_base: Fraction
    first_pts: int
    hidden: int
    note: str | None = None


def frame_timing(packets: Sequence[Packet], time_base: Fraction, end: int | None = None) -> Timing:
    """The frames of a video stream from its packets (in file order) and their time base.

    A packet is a frame unless the container marks it discarded (before an edit list's start), or it is a picture
    no decoder can show: one before the first keyframe, or a leading picture of that keyframe's open GOP (shown
    before it, so it refers to frames a cut removed), which carries no timestamp or an earlier one than the
    keyframe's. The last frame lasts until `end` (the stream's end in ticks on the file's timeline, when the
    container says where it is: MP4's track duration, Matroska's DURATION tag), else its own packet's duration when
    the container stores one (a GIF's delays), else the median gap between frames: so a one-frame video keeps its
    frame's duration and a GIF its last delay; a duration within half the median gap of it is taken as the
    median (rounding, not a longer frame). A stream whose packets carry no timing at all is taken as 25 fps,
    frame i at i / 25 s.

    Timestamps that repeat or jump back (two recordings joined end to end, a muxer's mistake) cannot be put in
    order: the decoder gives such frames in file order. They are mended (`mend`) and the Timing says so in `note`.
    """
    # Discarded packets are decoded (as references) and hidden, so the first keyframe is found among all of them.
    kept = [p for p in _showable(list(packets)) if not p.discard]
    timed = [p for p in kept if p.pts is not None]
    hidden = len(packets) - len(kept)
    if len(timed) >= 2:
        hidden += len(kept) - len(timed)
        stamps, note = mend([p.pts for p in timed], [p.key for p in timed])  # type: ignore[misc]
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        median = round(statistics.median(gaps))
        last = max(timed, key=lambda p: p.pts)  # type: ignore[arg-type, return-value]
        own = 0
        if end is not None and note is None and end > last.pts:  # type: ignore[operator]
            own = end - last.pts  # type: ignore[operator]
        elif last.duration > 0 and note is None:
            own = last.duration
        # The container's own last duration where it is clearly the frame's own (a GIF's long last delay, a held
        # last frame); within half the usual gap of it, it is rounding (Matroska's milliseconds, an edit list's
        # cut), and the usual gap keeps a constant-rate clip at its exact rate.
        if abs(own - median) * 2 <= median:
            own = median
        ticks = stamps[-1] - stamps[0] + (own or median)
        if ticks > 0 and median > 0:
            relative = tuple(t - stamps[0] for t in stamps)
            vfr = max(gaps) - min(gaps) > 1
            return Timing(len(timed), ticks * time_base, vfr, relative, time_base, stamps[0], hidden, note)
    if len(kept) == 1 and kept[0].duration > 0:
        return Timing(1, kept[0].duration * time_base, False, (0,), time_base, kept[0].pts or 0, hidden)
    if len(kept) == 1 and end is not None and kept[0].pts is not None and end > kept[0].pts:
        return Timing(1, (end - kept[0].pts) * time_base, False, (0,), time_base, kept[0].pts, hidden)
    logger.warning("video packets carry no usable timing; assuming %s fps", FALLBACK_FPS)
    count = len(kept)
    return Timing(count, count / FALLBACK_FPS, False, tuple(range(count)), 1 / FALLBACK_FPS, 0, hidden)


# The most packets a decoder reorders (H.264's and HEVC's largest picture buffer is 16 frames).
_REORDER_WINDOW = 16


def mend(pts: Sequence[int], keys: Sequence[bool]) -> tuple[list[int], str | None]:
    """Presentation times (ticks, ascending, one per frame) for the timestamps `pts` of a stream's frames in file
    order (`keys`: which are keyframes), and a note when they had to be mended (else None).

    Timestamps normally ascend once B-frame reordering is undone: a keyframe is never shown before a frame stored
    ahead of it. One that is (an earlier timestamp than any before it) starts a new part: the file jumps back, as
    recordings joined end to end do. (Where every packet is marked a keyframe, so the marks say nothing, a jump is
    a timestamp earlier than one stored more than `_REORDER_WINDOW` packets before it: further than any decoder
    reorders.) Each part keeps its own gaps and is moved to start one gap after the part before it ends, so the
    frames are timed in the order the decoder gives them. Within a part, a timestamp shared by two frames times
    the part at its median gap.
    """
    marked = not all(keys)
    parts: list[list[int]] = [[]]
    highest: list[int] = []  # the highest timestamp of the current part up to each of its packets
    for stamp, key in zip(pts, keys, strict=True):
        if marked:
            jump = key and bool(highest) and stamp <= highest[-1]
        else:
            jump = len(highest) > _REORDER_WINDOW and stamp < highest[-_REORDER_WINDOW - 1]
        if jump:
            parts.append([])
            highest = []
        parts[-1].append(stamp)
        highest.append(max(stamp, highest[-1]) if highest else stamp)
    repeats = 0
    mended: list[int] = []
    for part in parts:
        ordered = sorted(part)
        gaps = [b - a for a, b in itertools.pairwise(ordered) if b > a]
        step = round(statistics.median(gaps)) if gaps else 1
        if len(set(ordered)) < len(ordered):
            repeats += len(ordered) - len(set(ordered))
            ordered = [ordered[0] + k * step for k in range(len(ordered))]
        shift = 0 if not mended else mended[-1] + step - ordered[0]
        mended += [t + shift for t in ordered]
    if len(parts) == 1 and not repeats:
        return mended, None
    what = []
    if len(parts) > 1:
        what.append(f"jump back {len(parts) - 1} time{'s' if len(parts) > 2 else ''} (recordings joined end to end)")
    if repeats:
        what.append(f"repeat for {repeats} frame{'s' if repeats > 1 else ''}")
    return mended, (
        f"timing: the target's timestamps {' and '.join(what)}; its frames are timed in file order, each part "
        "keeping its own frame gaps"
    )


def _showable(packets: list[Packet]) -> list[Packet]:
    """`packets` from the first keyframe on, less that keyframe's leading pictures (an earlier timestamp than
    its own); all of them for a stream that marks no keyframe, or whose first keyframe has no timestamp."""
    first = next((i for i, p in enumerate(packets) if p.key), None)
    if first is None or packets[first].pts is None:
        return packets
    start = packets[first].pts
    return [p for p in packets[first:] if p.pts is None or p.pts >= start]


# ---------------------------------------------------------------------------------------------------------------
# When frames are shown


@dataclass(frozen=True)
class Run:
    """Frames from `index` on, the first at `pts` ticks and each next one `step` ticks later (up to the next run)."""

    index: int
    pts: int
    step: int


@dataclass(frozen=True)
class FrameTimes:
    """When each frame of a sequence is shown: frame n at `ticks(n)` × `time_base` seconds.

    runs: ascending by index, the first at index 0; the last one goes on past the frames it was made from, so an
    open-ended sequence (a resampled span to the end of a video) has a time for every frame.
    """

    time_base: Fraction
    runs: tuple[Run, ...]

    @classmethod
    def constant(cls, rate: Fraction) -> FrameTimes:
        """Frame n at n / rate seconds (rate in frames per second)."""
        if rate <= 0:
            raise ValueError(f"a frame rate must be positive, got {rate}")
        return cls(1 / Fraction(rate), (Run(0, 0, 1),))

    @classmethod
    def of(cls, ticks: Sequence[int], time_base: Fraction) -> FrameTimes:
        """The times `ticks` (strictly ascending, at least one) of `time_base`, as runs of equal gaps."""
        if not ticks:
            raise ValueError("FrameTimes needs at least one frame")
        if any(b <= a for a, b in itertools.pairwise(ticks)):
            raise ValueError("frame times must be strictly ascending")
        runs: list[Run] = []
        i = 0
        while i < len(ticks) - 1:
            step = ticks[i + 1] - ticks[i]
            j = i + 1
            while j + 1 < len(ticks) and ticks[j + 1] - ticks[j] == step:
                j += 1
            runs.append(Run(i, ticks[i], step))  # frames i … j
            i = j + 1
        if i == len(ticks) - 1:  # a last frame on its own goes on at the gap before it
            runs.append(Run(i, ticks[i], runs[-1].step if runs else 1))
        return cls(Fraction(time_base), tuple(runs))

    def ticks(self, n: int) -> int:
        """Time of frame n (≥ 0) in ticks."""
        if n < 0:
            raise ValueError(f"frame numbers start at 0, got {n}")
        run = self.runs[bisect.bisect_right([r.index for r in self.runs], n) - 1]
        return run.pts + (n - run.index) * run.step

    def seconds(self, n: int) -> Fraction:
        """Time of frame n in seconds."""
        return self.ticks(n) * self.time_base

    def after(self, first: int) -> FrameTimes:
        """The frames from `first` on, renumbered from 0 and timed from 0 (frame `first` at 0), same time base."""
        origin = self.ticks(first)
        runs = [Run(0, 0, self.runs[bisect.bisect_right([r.index for r in self.runs], first) - 1].step)]
        runs += [Run(r.index - first, r.pts - origin, r.step) for r in self.runs if r.index > first]
        return FrameTimes(self.time_base, tuple(runs))

    def coarsest(self) -> FrameTimes:
        """The same times in the coarsest time base that holds each of them exactly (a resampled span's 1 / rate)."""
        scale = math.gcd(*(v for r in self.runs for v in (r.pts, r.step))) or 1
        return FrameTimes(
            self.time_base * scale, tuple(Run(r.index, r.pts // scale, r.step // scale) for r in self.runs)
        )

    def rate(self) -> Fraction:
        """Frames per second of the first run: the nominal rate an encoder is told (timing still follows runs)."""
        return 1 / (self.runs[0].step * self.time_base)

    def setpts(self) -> str:
        """ffmpeg `setpts` expression of the frame number N giving each frame's time in ticks (a binary search over
        the runs, so its depth grows with the log of their number)."""

        def node(runs: Sequence[Run]) -> str:
            if len(runs) == 1:
                r = runs[0]
                return f"{r.pts}+(N-{r.index})*{r.step}" if r.index else f"{r.pts}+N*{r.step}"
            mid = len(runs) // 2
            return f"if(lt(N,{runs[mid].index}),{node(runs[:mid])},{node(runs[mid:])})"

        return node(self.runs)


# ---------------------------------------------------------------------------------------------------------------
# Spans: the part of a video a job reads, and its output rate


def output_rate(fps: float) -> Fraction:
    """The exact output rate, frames per second, for a rate given as a number (a setting, `--set video.fps=…`).

    Within 0.005 of an NTSC rate n·1000/1001 (23.976, 29.97, 59.94 …), and nearer it than n, it is that rate, as
    a user typing 29.97 means, so a 30000/1001 target is not resampled; otherwise the decimal as written
    (12.5 -> 25/2), its denominator kept to 1001 or less.
    """
    if not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"a frame rate must be a positive number, got {fps}")
    whole = round(fps * 1.001)
    ntsc = Fraction(whole * 1000, 1001)
    # Closer to the NTSC rate than to the whole number: at low rates the two are under 0.005 apart.
    if whole > 0 and abs(fps - ntsc) < min(0.005, abs(fps - whole)):
        return ntsc
    return Fraction(str(fps)).limit_denominator(1001)


@dataclass(frozen=True)
class Span:
    """Which frames of a video `FrameReader` yields, and when each is shown; made by `select`.

    start: seconds from the video's first frame where the output's time 0 lies: the first frame kept (a span that
        is not resampled), or the first slot (a resampled one); on the video stream's time base.
    end: seconds from the first frame where the span ends (exclusive; None = the span runs to the end).
    start_pts, end_pts: the asked start (the first tick at or after it) and end in time-base ticks (`MediaInfo.
        timestamps` units): what the decoder selects frames with.
    rate: output frames per second, exact (for a span that is not resampled: the target's average rate).
    resample: whether the ffmpeg `fps` filter makes that rate. Without it every frame of the span comes out
        once, at its own time; with it output frame k shows the frame on screen at start + k / rate.
    frames: how many frames the reader yields: exact, except for a resampled span that runs to the end of the
        video, where ffmpeg's idea of the last frame's duration decides and this assumes it lasts the median gap
        between frames (as `MediaInfo.duration` does).
    minimum: the fewest frames a complete input yields (= frames where that is exact); the reader raises
        TruncatedInput below it.
    times: when output frame k is shown, in seconds from the video's first frame: `times.seconds(k)`.
    last: how long the span's last frame is shown, seconds (the video's median frame gap, or 1 / rate).
    """

    start: Fraction
    end: Fraction | None
    start_pts: int
    end_pts: int | None
    rate: Fraction
    resample: bool
    frames: int
    minimum: int
    times: FrameTimes
    last: Fraction

    @property
    def fps_rational(self) -> str:
        return f"{self.rate.numerator}/{self.rate.denominator}"

    def output_times(self, first: int = 0) -> FrameTimes:
        """When output frames from `first` on are shown, in seconds from frame `first` (the timing an encoder of
        those frames is given), in one time base for the whole span: segments in different time bases would not
        join at the right times."""
        return self.times.after(0).coarsest().after(first)


def select(info: MediaInfo, start: float = 0.0, end: float | None = None, fps: float | None = None) -> Span:
    """The span [start, end) of the video `info` describes, at `fps` frames per second.

    start, end: seconds from the first frame (end exclusive; None = to the end; an end past the last frame
        also runs to the end). fps: output rate (None = the video's own, every frame kept once at its own time);
        a rate equal to a constant-rate video's own keeps every frame too.
    Raises InvalidInput, naming the file, when the start is at or past the end of the video or the span holds no
    frame; ValueError for a negative start or an end not after the start (the job's validation refuses those).
    The whole video (the defaults) is `info.frame_count` frames at their own times. For an image: its frame.
    """
    if start < 0 or (end is not None and end <= start):
        raise ValueError(f"a span needs 0 ≤ start < end, got start={start}, end={end}")
    own = Fraction(info.fps_rational)
    if info.kind == "image":
        return Span(Fraction(0), None, 0, None, own, False, 1, 1, FrameTimes.constant(Fraction(1)), Fraction(0))
    tb, stamps = info.time_base, info.timestamps
    # str() first: 0.1 means one tenth, not the binary float nearest to it, so boundaries land where users expect.
    start_pts = math.ceil(Fraction(str(start)) / tb)
    end_pts = None if end is None else math.ceil(Fraction(str(end)) / tb)
    if end_pts is not None and end_pts > stamps[-1]:
        end_pts = None  # no frame starts at or after the end: the span runs to the end of the video
    first = bisect.bisect_left(stamps, start_pts)
    stop = len(stamps) if end_pts is None else bisect.bisect_left(stamps, end_pts)
    if first >= stop:
        _refuse_empty(info, start, end, first)
    rate = own if fps is None else output_rate(fps)
    resample = fps is not None and (info.vfr or rate != own)
    gap = Fraction(info.duration) / info.frame_count if info.frame_count else 1 / rate
    video_gap = round(Fraction(info.duration) / tb) * tb - stamps[-1] * tb  # the last frame's duration
    if not resample:
        # The frame count less the frames the timestamps place outside the span: for the whole video, exactly
        # the count probe made, which is what a cut file is measured against.
        frames = info.frame_count - first - (len(stamps) - stop)
        times = FrameTimes.of(stamps[first:stop], tb)
        last = video_gap if stop == len(stamps) else (stamps[stop] - stamps[stop - 1]) * tb
        return Span(stamps[first] * tb, _end(end_pts, tb), start_pts, end_pts, rate, False, frames, frames,
                    times, last or gap)  # fmt: skip
    span_start = start_pts * tb
    if end_pts is not None:
        # Frames after the end still reach the fps filter, so every slot before the end is filled: exact.
        frames = minimum = math.ceil((end_pts * tb - span_start) * rate)
    else:
        # At the end of the video the last frame fills slots for as long as ffmpeg thinks it lasts; every slot
        # before it starts is certain.
        video_end = round(Fraction(info.duration) / tb) * tb
        frames = math.ceil((video_end - span_start) * rate)
        minimum = math.ceil((stamps[-1] * tb - span_start) * rate)
    # Slot k at span_start + k / rate, in a time base that holds both the stream's ticks and the slots.
    fine = _common_base(tb, 1 / rate)
    times = FrameTimes(fine, (Run(0, int(span_start / fine), int(1 / rate / fine)),))
    return Span(span_start, _end(end_pts, tb), start_pts, end_pts, rate, True, frames, max(minimum, 1), times,
                1 / rate)  # fmt: skip


def skip_frames(info: MediaInfo, span: Span, frames: int) -> Span:
    """The part of a span that is not resampled after its first `frames` frames: it starts at that frame's time
    (its frame times are still counted from the span's first frame)."""
    first = bisect.bisect_left(info.timestamps, span.start_pts) + frames
    start_pts = info.timestamps[first]
    return replace(
        span,
        start=start_pts * info.time_base,
        start_pts=start_pts,
        frames=span.frames - frames,
        minimum=max(span.minimum - frames, 1),
    )


def _end(end_pts: int | None, tb: Fraction) -> Fraction | None:
    return None if end_pts is None else end_pts * tb


def _common_base(a: Fraction, b: Fraction) -> Fraction:
    """The largest time base of which both `a` and `b` are whole multiples."""
    return Fraction(math.gcd(a.numerator * b.denominator, b.numerator * a.denominator), a.denominator * b.denominator)


def _refuse_empty(info: MediaInfo, start: float, end: float | None, first: int) -> None:
    if start >= info.duration:
        raise InvalidInput(
            f"trim start {start:g} s is past the end of {info.path} ({info.duration:.3f} s long): "
            f"choose a start before {info.duration:.3f} s"
        )
    if first == len(info.timestamps):
        last = float(info.timestamps[-1] * info.time_base)
        raise InvalidInput(
            f"trim start {start:g} s is after the last frame of {info.path} (at {last:.3f} s): "
            f"choose a start at or before {last:.3f} s"
        )
    raise InvalidInput(
        f"the span {start:g}–{end:g} s of {info.path} holds no frame (frames are "
        f"{info.duration / info.frame_count:.3f} s apart on average): widen it"
    )


# ---------------------------------------------------------------------------------------------------------------
# The audio that goes with a span


def audio_for(info: MediaInfo, span: Span, source: Path | None = None, codec: str | None = None) -> Audio | None:
    """The audio of `source` (default: the probed file) that plays with `span`'s frames, or None when the file
    has none: from the output's time 0 (`span.start`, i.e. `info.start_time + span.start` on the file's own
    timeline, so a video that starts after its audio stays in sync) to the span's end.

    It is cut (decoded and re-encoded, sample-accurate) when the span is trimmed or the audio starts more than a
    frame before the first picture (a stream start offset: the sound there has no picture); otherwise it is
    copied with its timing shifted, a later start kept as a delay.
    """
    if not info.has_audio or info.kind != "video":
        return None
    return source_for(info, span, source, codec)


def source_for(info: MediaInfo, span: Span, source: Path | None = None, codec: str | None = None) -> Audio:
    """The target as the join's second input, timed to `span` as `audio_for` times its audio (for its audio
    tracks, subtitles and chapters; a file without audio too)."""
    start = info.start_time + span.start
    end = None if span.end is None else info.start_time + span.end
    gap = Fraction(info.duration) / info.frame_count
    early = info.audio_start is not None and info.audio_start < start - gap
    cut = span.start > 0 or end is not None or early
    return Audio(source or info.path, codec or info.audio_codec, start, end, cut)
