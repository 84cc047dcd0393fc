"""A video job in segments: its plan and job folder, the disk-space check, the join, and what is kept when it stops.

`video_job` opens the job's folder (`engine.run.jobdir`) for a render and closes it: removed when the job succeeds or
fails with an error; kept, for `run --resume`, when it is cancelled, refused for lack of disk space, or a disk
fills up mid-render, provided some segment was finished. In those cases the error says what is kept, how much
space to free, and to run again with `--resume`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.errors import Cancelled, DiskFull, InsufficientDiskSpace, MediaError
from engine.core.progress import Progress
from engine.media import MediaInfo, StreamsPlan, audio_for, join_segments, probe, source_for
from engine.media.probe import file_hash
from engine.run import jobdir, segments
from engine.run.render import SegmentRenderer, VideoRender
from engine.run.segments import Plan
from engine.run.sidecar import absolute_raw, synthetic_metadata

log = logging.getLogger(__name__)

_ELSEWHERE = "free some space, write the output to another disk, or set FACESTUDIO_JOBS to a folder on another disk"


@dataclass
class VideoJob:
    """A video job's plan and folder while it renders (made by `video_job`)."""

    render: VideoRender
    plan: Plan
    folder: jobdir.JobFolder
    reused: list[int]

    def check_disk_space(self) -> None:
        """Refuse a job whose missing segments (in the job folder) and output (next to it) will not fit."""
        jobdir.check_disk_space(self._needs(), _ELSEWHERE)

    def render_missing(self, renderer: SegmentRenderer, progress: Progress) -> None:
        """Render the segments the folder does not hold yet (`renderer`: in order here, or on a cluster)."""
        done = self.folder.done
        progress.stage("frames", self.render.span.frames)
        progress.advance(sum(r["frames"] for r in done.values()))
        todo = segments.missing(self.plan, done)
        if todo:
            renderer(self.render, self.folder, self.plan, todo, progress)

    def join(self, output: Path, streams: StreamsPlan | None = None) -> MediaInfo:
        """Join the finished segments, with what `streams` takes from the target (its audio tracks, subtitles,
        chapters and tags, `media.plan_streams`; None: its first audio track and our tags) for the span, into
        `output` (a staged file)."""
        job, info, span = self.render.job, self.render.info, self.render.span
        done = self.folder.done
        parts = [(self.folder.segment_path(s), done[s.index]["frames"]) for s in self.plan.segments]
        if streams is None:
            source = audio_for(info, span) if job.video.keep_audio else None
            tracks, chapters, tags, video_tags = None, False, synthetic_metadata(job), None
        else:
            source = source_for(info, span) if streams.takes_source else None
            tracks, chapters, tags, video_tags = streams.tracks, streams.chapters, streams.tags, streams.video_tags
        try:
            return join_segments(
                parts, output, span.output_times(), span.last, self.folder.path / "concat.txt", source, tags,
                self.render.encoder, tracks=tracks, chapters=chapters, video_tags=video_tags,
                picture=self.render.picture,
            )  # fmt: skip
        except DiskFull as exc:  # named as the user knows it, not by its temp name
            raise DiskFull(f"the disk of {exc.folder} is full (writing {job.output.name})", exc.folder) from None
        except MediaError as exc:  # a joined output that fails its check (its last segment is checked there too)
            raise MediaError(str(exc).replace(str(output), str(job.output))) from None

    def summary(self) -> dict[str, Any]:
        """The report's `segments` (and the face counts of the whole output, finished segments included)."""
        done = self.folder.done
        faces = self.render.faces
        if faces is not None:
            faces.faces = sum(r.get("faces", 0) for r in done.values())
            faces.empty_frames = sum(r.get("empty", 0) for r in done.values())
        summary: dict[str, Any] = {
            "count": len(self.plan.segments),
            "segment_frames": self.plan.segment_frames,
            "reused": self.reused,
            "frames_processed": sum(r["frames"] for i, r in done.items() if i not in self.reused),
        }
        here = {i: r for i, r in done.items() if i not in self.reused and "worker" in r}
        if here:
            summary["cluster"] = {str(i): {"worker": r["worker"], "attempts": r["attempts"]} for i, r in here.items()}
        return summary

    def _needs(self) -> Mapping[Path, int]:
        """Bytes still to be written: the missing segments into the job folder, the output next to its file."""
        job, info, span, size = self.render.job, self.render.info, self.render.span, self.render.size
        audio = job.video.keep_audio and info.has_audio
        todo = segments.missing(self.plan, self.folder.done)

        def estimate(frames: int) -> int:
            return segments.estimate_video_bytes(size[0], size[1], frames, float(span.rate), job.video.crf, audio)

        return {
            self.folder.path: estimate(sum(s.frames for s in todo)),
            job.output.resolve().parent: estimate(self.plan.frames),
        }

    def stopped(self, exc: BaseException) -> BaseException:
        """The error a run that stopped with `exc` (Ctrl-C, a disk-space refusal, a full disk) ends with; the
        folder is kept when it holds finished segments, removed otherwise."""
        done = self.folder.done
        if not done:
            self.folder.remove()
            if isinstance(exc, KeyboardInterrupt):
                return Cancelled("cancelled by the user; nothing was written")
            return _with_room(exc, self._needs(), "") if isinstance(exc, DiskFull) else exc
        self.folder.release()
        frames = sum(r["frames"] for r in done.values())
        kept = (
            f"{len(done)} of {len(self.plan.segments)} segments ({frames} of {self.render.span.frames} frames) are "
            f"kept in {self.folder.path}"
        )
        if isinstance(exc, KeyboardInterrupt):
            return Cancelled(f"cancelled by the user; {kept}: run again with --resume to continue")
        if isinstance(exc, DiskFull):
            return _with_room(exc, self._needs(), f"; {kept}", "--resume")
        return InsufficientDiskSpace(f"{exc}; {kept}: once there is room, run again with --resume")


def _with_room(exc: DiskFull, needs: Mapping[Path, int], kept: str, flag: str = "") -> DiskFull:
    """`exc` with how much to free on the disk that filled up (what the rest of the job needs there, less what is
    free now) and how to go on."""
    need = jobdir.shortfall(needs, exc.folder)
    again = f"run again with {flag}" if flag else "run it again"
    return DiskFull(f"{exc}{kept}: free at least {jobdir.size_text(need)} on that disk and {again}", exc.folder)


@contextmanager
def video_job(render: VideoRender, resume: bool) -> Iterator[VideoJob]:
    """The job folder of `render`'s job for as long as the block runs (see the module docstring for when it is
    kept); with `resume`, the segments an interrupted run of the same job finished are reused."""
    job, span, runtime = render.job, render.span, render.runtime
    # A resampled span that runs to the end of the video has an expected, not exact, frame count.
    open_end = span.resample and span.end is None
    plan = segments.plan(span.frames, job.video.segment_frames, open_end, render.picture.suffix)
    root = jobdir.jobs_root(runtime.folders.cache).absolute()
    jobdir.sweep(root)
    target, output = job.target.resolve(), job.output.resolve()
    key = segments.job_key(str(output))
    settings = segments.resumable_settings(absolute_raw(job))
    # The target by its content (every packet hashed), not its name, size or time: a file replaced by other frames
    # of the same size and time is another target, and its segments do not fit.
    settings["target_content"] = render.info.content_id or probe(target, identify=True).content_id
    # An edited source image changes every swapped frame: finished segments made from the old one do not fit.
    references = [*job.sources, *([job.faces.reference_image] if job.faces.reference_image else [])]
    settings["source_files"] = [[str(p), file_hash(p)] for p in references]
    describe = {"target": str(target), "output": str(output)}
    folder = jobdir.JobFolder.open(root, key, settings, plan, describe, resume)
    video = VideoJob(render, plan, folder, sorted(folder.done))
    try:
        yield video
    except (KeyboardInterrupt, InsufficientDiskSpace) as exc:
        raise video.stopped(exc) from None
    except BaseException:
        folder.remove()
        raise
    folder.remove()
