"""Segments of a video job: the plan (which output frames go in which file), the job's identity, and what it needs
on disk. Pure data and pure functions: nothing here reads media, runs a process or touches the filesystem.

A video job is rendered as consecutive segments of its span's output frames, each encoded to its own file in the
job's folder (`engine.run.jobdir`) and verified before it counts as done; the output is the segments joined without
re-encoding, with the audio muxed once. A killed job resumes at its first missing segment. Each segment is
independent of the others' files, so the same plan can be handed out to several workers; only face tracking and
identity QA carry state from one segment to the next when one process renders them in order.

Frame numbers here are output frames of the job's span: 0 is the span's first frame (`media.Span`), whatever the
trim start and rate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

# Runtime settings that change how fast a job runs, never which pixels it makes: a resume may change them.
SCHEDULING_SETTINGS = frozenset({"batch", "threads", "offline"})
# Estimated H.264/HEVC bits per pixel at crf 18, generous for camera footage (noise costs bits); every 6 crf
# halves or doubles it, as x264's rate factor is defined.
_BITS_PER_PIXEL_AT_CRF18 = 0.3
# Bits per second of audio in the output (AAC at ffmpeg_commands.AAC_BITRATE, or a copied stream, rarely more).
_AUDIO_BITS_PER_SECOND = 320_000
# Room for the containers, the job's manifest and the filesystem's own rounding.
_DISK_MARGIN_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Segment:
    """Output frames [start, stop) of the span, rendered into the file `name` of the job folder (`suffix`: its
    container, `media.OutputPicture.suffix`)."""

    index: int
    start: int
    stop: int
    suffix: str = ".mp4"

    @property
    def frames(self) -> int:
        return self.stop - self.start

    @property
    def name(self) -> str:
        return segment_name(self.index, self.suffix)


def segment_name(index: int, suffix: str = ".mp4") -> str:
    """File name of segment `index` in the job folder: MP4 where the encoder's video goes in it, because it keeps
    exact frame times (its time base follows the rate); MOV for ProRes, Matroska for VP9 with alpha."""
    return f"seg-{index:05d}{suffix}"


@dataclass(frozen=True)
class Plan:
    """How a span of `frames` output frames is cut into segments of `segment_frames` (the last one up to 1.5×).

    open_end: `frames` is ffmpeg's expected count, not an exact one (a resampled span that runs to the end of the
    video, `media.Span.frames`), so the last segment takes whatever frames the decoder still gives.
    suffix: the segments' container.
    """

    frames: int
    segment_frames: int
    segments: tuple[Segment, ...]
    open_end: bool = False
    suffix: str = ".mp4"

    def to_raw(self) -> dict[str, Any]:
        raw = {"frames": self.frames, "segment_frames": self.segment_frames, "open_end": self.open_end}
        return raw if self.suffix == ".mp4" else {**raw, "suffix": self.suffix}


def plan(frames: int, segment_frames: int, open_end: bool = False, suffix: str = ".mp4") -> Plan:
    """Cut `frames` output frames into consecutive segments of `segment_frames`.

    A remainder shorter than half a segment joins the last full segment instead of making a short file of its
    own (so an estimate that is one frame high never leaves an empty last segment). frames ≥ 1, segment_frames ≥ 1.
    """
    if frames < 1 or segment_frames < 1:
        raise ValueError(f"a plan needs at least one frame and one frame per segment, got {frames}, {segment_frames}")
    starts = list(range(0, frames, segment_frames))
    if len(starts) > 1 and frames - starts[-1] < segment_frames / 2:
        starts.pop()
    stops = [*starts[1:], frames]
    segments = tuple(Segment(i, a, b, suffix) for i, (a, b) in enumerate(zip(starts, stops, strict=True)))
    return Plan(frames, segment_frames, segments, open_end, suffix)


def missing(plan: Plan, done: Collection[int]) -> list[Segment]:
    """The segments of `plan` still to render, in order; `done` holds the indexes of finished ones."""
    return [s for s in plan.segments if s.index not in done]


def job_key(output: str) -> str:
    """The job folder's name: a job rendered to the same output (absolute path) always gets the same folder, so
    `--resume` finds it; 16 hex digits.

    The target is deliberately not part of it, nor the settings: its content and the settings are recorded in the
    folder (`resumable_settings`, with the target's content id), so a resume whose target changed (other frames
    behind the same name, size and modification time) or whose settings did finds the folder and is refused
    (`differences`) instead of reusing segments of another picture or silently starting over.
    """
    return hashlib.sha256(json.dumps([output]).encode("utf-8")).hexdigest()[:16]


def resumable_settings(raw_job: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed job must share with the interrupted one: the raw job (`Job.to_raw()`, paths absolute) less
    the runtime settings that only change speed (batch, threads, offline)."""
    settings = {k: v for k, v in raw_job.items() if k not in ("target", "output")}
    runtime = settings.get("runtime")
    if isinstance(runtime, Mapping):
        settings["runtime"] = {k: v for k, v in runtime.items() if k not in SCHEDULING_SETTINGS}
    return settings


def fingerprint(settings: Mapping[str, Any]) -> str:
    """sha256 of the settings in canonical JSON (sorted keys), 64 hex digits."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two settings mappings (`frame_enhancer.scale`), sorted."""
    flat_a, flat_b = _flatten(a), _flatten(b)
    return sorted(k for k in flat_a.keys() | flat_b.keys() if flat_a.get(k, _ABSENT) != flat_b.get(k, _ABSENT))


_ABSENT = object()


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping):
            out.update(_flatten(item, f"{name}."))
        else:
            out[name] = item
    return out


def estimate_video_bytes(width: int, height: int, frames: int, rate: float, crf: int, audio: bool) -> int:
    """A generous estimate of the bytes `frames` frames of width×height pixels at `rate` frames/s take as H.264 or
    HEVC at `crf` (plus audio when `audio`), for the disk-space check before a run: better to refuse a job that
    would have fitted than to fill the disk hours into one."""
    bits = width * height * frames * _BITS_PER_PIXEL_AT_CRF18 * 2 ** ((18 - crf) / 6)
    if audio and rate > 0:
        bits += frames / rate * _AUDIO_BITS_PER_SECOND
    return int(bits / 8) + _DISK_MARGIN_BYTES
