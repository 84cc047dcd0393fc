"""Rendering frames: the face stage of a run, and a video job's segments, each processed and encoded to its file.

Every frame is handed to the chain with its `FrameContext`: its output frame number, its faces and its time
(`Span.times`). One process renders the missing segments in order from one decoder (`render_missing`), with face
analysis and identity QA on their own threads; a worker given one segment alone decodes from that segment's first
frame (`render_alone`, what `engine.serve.cluster` runs).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.core.errors import InvalidInput, InvalidJob, MediaError
from engine.core.progress import NullProgress, Progress
from engine.core.types import Frame
from engine.faces.qa import IdentityQA
from engine.job.processor import FrameContext, FrameProcessor
from engine.job.settings import Job
from engine.media import (
    FrameReader,
    FrameTimes,
    FrameWriter,
    MediaInfo,
    OutputPicture,
    Span,
    encoder_pixel_formats,
    plan_picture,
)
from engine.media import commands as cmd
from engine.models.runtime import Runtime
from engine.provenance import watermark
from engine.run import jobdir, segments, workers
from engine.run.chain import BatchLimit, QualityCheck, batch_size, chain_alpha, makes_alpha, process_checked
from engine.run.face_stage import FaceStage
from engine.run.segments import Segment


@dataclass
class Faces:
    """The face stage of a run, its identity QA and its counters."""

    stage: FaceStage
    qa: IdentityQA | None
    faces: int = 0
    empty_frames: int = 0

    def annotate(
        self, frames: Iterable[Frame], start: int = 0, times: FrameTimes | None = None
    ) -> Iterator[tuple[Frame, FrameContext]]:
        """Each frame with its faces; frames are numbered from `start` (the output frame of the first one) and
        timed by `times` (output frame n at `times.seconds(n)`; None: no time)."""
        for index, (frame, found) in enumerate(self.stage.annotate(frames), start):
            yield (
                frame,
                FrameContext(
                    index=index,
                    faces=found,
                    source=self.stage.source,
                    time=_time(times, index),
                    original=frame,
                    people=self.stage.cast,
                ),  # fmt: skip
            )

    def count(self, ctxs: Iterable[FrameContext]) -> None:
        """Count the faces of frames being processed (not when found: analysis runs ahead of processing)."""
        for ctx in ctxs:
            self.faces += len(ctx.faces)
            self.empty_frames += not ctx.faces


def _time(times: FrameTimes | None, index: int) -> float | None:
    return None if times is None else float(times.seconds(index))


def face_stage(
    job: Job, chain: Sequence[FrameProcessor], runtime: Runtime, info: MediaInfo, span: Span
) -> Faces | None:
    """The face stage when a processor of the chain needs faces (sources checked before any frame is read)."""
    if not any(p.needs_faces for p in chain):
        return None
    for i, processor in enumerate(chain):
        resizing = [p.id for p in chain[:i] if p.output_size(info.width, info.height) != (info.width, info.height)]
        if processor.needs_faces and resizing and not processor.draws_only:
            raise InvalidJob(
                f"{processor.id} must come before {', '.join(resizing)}: faces are found on the input frame"
            )
    if any(p.needs_source for p in chain) and not job.sources:
        names = ", ".join(p.id for p in chain if p.needs_source)
        raise InvalidInput(f"{names} needs a source face: add --source IMAGE")
    if job.faces.analyser == "buffalo_l" and any(p.needs_landmarks68 for p in chain):
        names = ", ".join(p.id for p in chain if p.needs_landmarks68)
        raise InvalidJob(
            f"{names} needs 68-point landmarks, which buffalo_l does not give: use faces.analyser=embedded"
        )
    # Tracking smooths over seconds, so it needs the rate of the frames it sees: the output rate.
    people = any(p.needs_people for p in chain)
    stage = FaceStage.create(job.faces, runtime, job.sources, job.target, fps=float(span.rate), people=people)
    qa = None
    if (stage.source is not None or stage.cast) and job.faces.qa_every > 0:
        source = stage.source.embedding if stage.source is not None else None
        cast = {person: identity.embedding for person, identity in stage.cast.items()}
        qa = IdentityQA(stage.analyser, source, every=job.faces.qa_every, people=cast)
    return Faces(stage, qa)


def annotated(
    faces: Faces | None, frames: Iterable[Frame], start: int = 0, times: FrameTimes | None = None
) -> Iterator[tuple[Frame, FrameContext]]:
    """Each frame with its context (faces only when a face stage runs), numbered from `start`, timed by `times`."""
    if faces is None:
        return ((frame, FrameContext(index=i, time=_time(times, i))) for i, frame in enumerate(frames, start))
    return faces.annotate(frames, start, times)


@dataclass
class VideoRender:
    """Everything a video job's segments are rendered with: the job, its chain and runtime, the probed target and
    its span, the output frame size (pixels, before the writer pads odd sizes), the face stage (None when no
    processor needs faces), the frames per processor call and the batch limit, shared so that an out-of-memory
    halving lasts the whole run. `check` is identity QA (None: off); a run replaces the synchronous check with one
    that hands frames to its QA thread. `picture`: how segments are encoded (`media.plan_picture`, as validation
    decided it, the chain's transparency included; planned the same way here when not given, as on a cluster's
    worker). `started`: the span's reader from its first frame, started already (`span_reader`), which `reader(0)`
    hands out once."""

    job: Job
    chain: Sequence[FrameProcessor]
    runtime: Runtime
    info: MediaInfo
    span: Span
    size: tuple[int, int]
    faces: Faces | None
    batch: int
    limit: BatchLimit
    check: QualityCheck | None = None
    picture: OutputPicture | None = None
    started: FrameReader | None = None

    def __post_init__(self) -> None:
        if self.check is None and self.faces is not None and self.faces.qa is not None:
            self.check = self.faces.qa.check
        if self.picture is None:
            gif = self.job.output.suffix.lower() == cmd.GIF_SUFFIX
            muxer = "gif" if gif else cmd.muxer_for(self.job.output)
            self.picture = plan_picture(self.info, self.job.video.encoder, muxer, alpha=self.job.video.alpha,
                                        formats=encoder_pixel_formats(self.job.video.encoder),
                                        made_alpha=makes_alpha(self.chain, self.job))  # fmt: skip

    @property
    def target_alpha(self) -> bool:
        """Whether the output keeps the target's own alpha planes (read beside its frames)."""
        assert self.picture is not None
        return self.picture.alpha and self.info.picture.alpha and self.job.video.alpha == "keep"

    @property
    def encoder(self) -> str:
        """What segments are encoded with: the job's encoder, or losslessly for a GIF (made when joining)."""
        assert self.picture is not None
        return self.picture.encoder

    def last(self, segment: Segment, last: bool) -> Fraction:
        """How long `segment`'s last frame is shown, seconds: until the next segment's first frame, or for the
        plan's last segment (`last`) the span's last frame's duration."""
        times = self.span.times
        return self.span.last if last else times.seconds(segment.stop) - times.seconds(segment.stop - 1)

    def reader(self, skip: int, alpha: bool = False) -> FrameReader:
        """The target's frames of the span from output frame `skip` on (`alpha`: their alpha planes)."""
        assert self.picture is not None
        if skip == 0 and not alpha and self.started is not None:
            started, self.started = self.started, None
            return started
        return span_reader(self.job, self.info, self.span, self.picture, skip, alpha)


def span_reader(
    job: Job, info: MediaInfo, span: Span, picture: OutputPicture, skip: int = 0, alpha: bool = False
) -> FrameReader:
    """A reader of the target's frames of `span` from output frame `skip` on (`alpha`: their alpha planes), as
    segments encoded per `picture` take them."""
    return FrameReader(job.target, info, span, skip=skip, alpha=alpha, convert=picture.convert)


# Renders the missing segments (the last argument) of a job into its folder, recording each as it is finished.
SegmentRenderer = Callable[[VideoRender, jobdir.JobFolder, segments.Plan, Sequence[Segment], Progress], None]


@dataclass(frozen=True)
class SegmentResult:
    """What rendering one segment on its own made: the frames written, the face counts of its frames (`faces`,
    `empty`; none when no processor needs faces), and its identity QA records (frame, distance before, after)."""

    frames: int
    counts: dict[str, int]
    identity: list[tuple[int, float, float]]


def render_segment(
    render: VideoRender,
    segment: Segment,
    frames: Iterable[tuple[Frame, FrameContext]],
    path: Path,
    progress: Progress | None = None,
    last: bool = False,
    joined_next: bool = False,
) -> int:
    """Process one segment of a video job into the file `path` (.mp4, no audio, no tags: those come when the
    segments are joined); returns the frames written, checked to be in the file at their times.

    frames: the segment's input frames (H×W×3 uint8 RGB, the target's size) with their contexts, numbered by output
    frame of the span: `segment.frames` of them (the last segment of a plan takes every frame the decoder still
    gives, since an open-ended plan's count is an estimate). Processing overlaps encoding through a bounded queue;
    on any error the encoder is stopped and nothing is left at `path`. last: the plan's last segment (its last
    frame lasts the span's last duration). joined_next: the job's segments are joined right after this one (the
    plan's last, rendered by the job's own process), and the join's check of the joined output stands for this
    segment's own (`FrameWriter.checked_later`). A picture that keeps alpha gives each frame its alpha plane: the
    target's own (read alongside by a second decoder) times what the chain made transparent (`chain_alpha`),
    taken right after the frame's batch.
    """
    progress = progress or NullProgress()
    video = render.job.video
    encoded: queue.Queue[Any] = queue.Queue(maxsize=2 * render.batch)
    stop = threading.Event()
    times = render.span.output_times(segment.start)
    # The watermark goes into each output frame as it is encoded (here, so Ray workers mark their segments too).
    mark = watermark.marker(video.watermark)
    picture = render.picture
    assert picture is not None
    # The target's alpha planes come from a second decoder (only for a target whose transparency is kept).
    planes = render.reader(segment.start, alpha=True) if render.target_alpha else contextlib.nullcontext(None)
    with (
        planes as alpha,
        FrameWriter(
            path,
            *render.size,
            times,
            crf=video.crf,
            preset=video.preset,
            picture=picture,
            last=render.last(segment, last),
            checked_later=joined_next,
        ) as writer,
    ):
        encode = workers.Worker("encode", lambda: workers.consume(encoded, lambda item: writer.write(*item), stop))
        targets = iter(alpha) if alpha is not None else None
        try:
            for chunk in workers.chunks(frames, render.batch):
                batch_frames = [frame for frame, _ in chunk]
                ctxs = [ctx for _, ctx in chunk]
                if render.faces is not None:
                    render.faces.count(ctxs)
                done = process_checked(render.chain, render.check, batch_frames, ctxs, render.limit)
                for out, ctx in zip(done, ctxs, strict=True):
                    plane = _alpha_plane(render, ctx.index, targets) if picture.alpha else None
                    workers.put(encoded, (mark(out), plane), stop, encode)
                progress.advance(len(chunk))
            workers.put(encoded, workers.END, stop, encode)
            encode.join()
        except BaseException:
            stop.set()
            raise
        finally:
            stop.set()
            encode.thread.join(timeout=5)
    return writer.frames_written


def _alpha_plane(
    render: VideoRender, index: int, targets: Iterator[npt.NDArray[np.uint8]] | None
) -> npt.NDArray[np.uint8]:
    """Output frame `index`'s alpha plane (H×W uint8, 255 = opaque): the target's next one (`targets`, None where
    its transparency is not kept) times the chain's; opaque where neither has any."""
    own = None
    if targets is not None:
        own = next(targets, None)
        if own is None:
            raise MediaError(f"the alpha planes of {render.job.target} ended before its frames")
    plane = chain_alpha(render.chain, index, own)
    return plane if plane is not None else np.full(render.size[::-1], 255, np.uint8)


def segment_render(
    job: Job, chain: Sequence[FrameProcessor], runtime: Runtime, info: MediaInfo, span: Span, size: tuple[int, int]
) -> VideoRender:
    """What a worker renders segments of `job` with (`render_alone`): `info`, `span` and the output `size`
    (pixels) as the job's driver found them; the face stage (source analysed once) and the batch are its own."""
    faces = face_stage(job, chain, runtime, info, span)
    batch = batch_size(chain, runtime, info.width, info.height)
    return VideoRender(job, chain, runtime, info, span, size, faces, batch, BatchLimit(batch))


def render_alone(render: VideoRender, segment: Segment, last: bool, path: Path) -> SegmentResult:
    """Render `segment` of the job on its own into `path`, decoding the target from the segment's first frame
    (`FrameReader(skip=segment.start)`); `last`: the plan's last segment, which takes every frame left.

    Face tracking starts afresh at the segment's first frame (no track or chosen face carries over from whatever
    this process rendered before). Raises MediaError when a segment other than the last gets too few frames."""
    faces = render.faces
    before = face_counts(faces)
    checked = 0
    if faces is not None:
        faces.stage.restart()
        checked = len(faces.qa.records) if faces.qa is not None else 0
    with render.reader(segment.start) as reader:
        stream = annotated(faces, reader, segment.start, render.span.times)
        frames = stream if last else itertools.islice(stream, segment.frames)
        written = render_segment(render, segment, frames, path, last=last)
    if not last and written != segment.frames:
        path.unlink(missing_ok=True)
        raise MediaError(
            f"{render.job.target} gave {written} frames for output frames {segment.start}–{segment.stop - 1}, "
            f"expected {segment.frames}"
        )
    after = face_counts(faces)
    identity = faces.qa.records[checked:] if faces is not None and faces.qa is not None else []
    return SegmentResult(written, {k: after[k] - before[k] for k in after}, list(identity))


# Cores from which face analysis runs ahead of processing on a thread of its own (`render_missing`).
AHEAD_CORES = 4


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the platform tells, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def render_missing(
    render: VideoRender, folder: jobdir.JobFolder, plan: segments.Plan, todo: Sequence[Segment], progress: Progress
) -> None:
    """Render `todo` in order from one decoder that starts at the first of them; frames of finished segments in
    between (segments finished elsewhere) are decoded and dropped.

    The encoder (ffmpeg) runs in its own process. The plan's last segment is not read back on its own: the job
    joins the segments right after this returns and checks the joined output's every frame and time (one ffprobe
    fewer per job). With AHEAD_CORES cores or more, the faces of the next frames are found on another thread while
    a batch is processed (a lock keeps the analyser's own calls one at a time), and identity QA measures finished
    frames on a thread of its own. On fewer, both run on this thread — the faces just before their batch, QA just
    after it: two cores are then shared by the processors and the encoder, and a thread beside this one only adds
    contention for the interpreter lock, which dlib's landmark and embedding calls hold for tens of milliseconds
    (this thread then waits inside its own short OpenCV calls). Measured on 2 cores (benchmarks/face_overhead.py,
    `launch.py benchmark`): faces ahead gave more CPU time per frame and fewer frames per second; QA on its own
    thread 7.04–7.45 fps against 7.71–7.81 on this one."""
    batch = render.batch
    decoded: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
    stop = threading.Event()
    first = todo[0].start
    last = plan.segments[-1]
    faces = render.faces
    times = render.span.times
    with render.reader(first) as reader:
        decode = workers.Worker("decode", lambda: workers.produce(iter(reader), decoded, stop))
        running = [decode]
        try:
            source = workers.drain(decoded, decode, stop)
            ahead = faces is not None and usable_cores() >= AHEAD_CORES
            stream = annotated(None if ahead else faces, source, first, times)
            if faces is not None and ahead:
                found: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
                analyse = workers.Worker(
                    "faces", lambda: workers.produce(faces.annotate(source, first, times), found, stop)
                )
                running.append(analyse)
                stream = workers.drain(found, analyse, stop)
            qa = None
            if render.check is not None and ahead:
                qa = workers.HandOff("qa", render.check, 2 * batch, stop)
                render.check = qa.put
                running.append(qa.worker)
            position = first
            for segment in todo:
                for _ in itertools.islice(stream, segment.start - position):
                    pass
                # The last segment takes every frame that is left: an open-ended plan's count is an estimate.
                frames = stream if segment is last else itertools.islice(stream, segment.frames)
                before = face_counts(render.faces)
                written = render_segment(render, segment, frames, folder.work_path(segment), progress,
                                         segment is last, joined_next=segment is last)  # fmt: skip
                if segment is not last and written != segment.frames:
                    raise MediaError(
                        f"{render.job.target} gave {written} frames for output frames {segment.start}–"
                        f"{segment.stop - 1}, expected {segment.frames}"
                    )
                after = face_counts(render.faces)
                folder.finish(segment, written, {k: after[k] - before[k] for k in after})
                position = segment.start + written
            if qa is not None:
                qa.finish()
            # The decoder may still hold frames of finished segments after the last one rendered here.
            stop.set()
            for worker in running:
                worker.join()
        except BaseException:
            stop.set()
            raise
        finally:
            stop.set()
            for worker in running:
                worker.thread.join(timeout=5)


def face_counts(faces: Faces | None) -> dict[str, int]:
    return {} if faces is None else {"faces": faces.faces, "empty": faces.empty_frames}
