"""The only orchestration: validate, decode → process → encode (overlapped), mux audio, write provenance.

`run` is what the CLI and the UI call; `process_frame` is the single-frame path the UI preview uses, so a preview
and a full run can never differ.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import jobdir, metrics, segments, video
from engine.errors import Cancelled, InsufficientDiskSpace, InvalidInput, InvalidJob, MediaError, OutOfMemory
from engine.faces.qa import IdentityQA
from engine.faces.stage import FaceStage
from engine.job import Job
from engine.models.runtime import Runtime
from engine.processor import FrameContext, FrameProcessor
from engine.progress import NullProgress, Progress
from engine.provenance import keys, seal, watermark
from engine.segments import Segment
from engine.types import Face, Frame
from engine.validate import validate

log = logging.getLogger(__name__)

VERSION = "0.1.0"
_END = object()


@dataclass(frozen=True)
class RunReport:
    """What a finished run did. Sizes in pixels, `seconds` wall time of the whole run."""

    output: Path
    sidecar: Path
    kind: str
    frames: int
    input_size: tuple[int, int]
    output_size: tuple[int, int]
    seconds: float
    audio: bool
    batch: int = 1
    processors: dict[str, dict[str, Any]] = field(default_factory=dict)
    faces_processed: int = 0
    frames_without_face: int | None = None
    identity: dict[str, Any] | None = None
    # A video's segments: count, segment_frames, reused (indexes finished by an interrupted run) and
    # frames_processed (by this run; the rest were reused); a run whose segments went to a cluster
    # (`engine.cluster`) adds `cluster`: per segment it processed, the worker (host:pid) and the attempts it took.
    segments: dict[str, Any] | None = None
    # The sidecar's `provenance` record (engine.provenance.seal) and the lines it adds to the run's summary.
    provenance: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()

    @property
    def fps(self) -> float:
        """Frames this run processed per second of its wall time (a resumed run's reused frames cost nothing)."""
        processed = self.segments["frames_processed"] if self.segments else self.frames
        return processed / self.seconds if self.seconds > 0 else 0.0

    def providers(self) -> str:
        """Each distinct backend and provider of the chain, e.g. `onnx (CPUExecutionProvider)`."""
        seen = {f"{d['backend']} ({d['provider']})" for d in self.processors.values() if "backend" in d}
        return ", ".join(sorted(seen)) or "none"


def sidecar_path(output: Path) -> Path:
    """`<output>.job.json`: the job and its provenance next to the output."""
    return output.with_name(output.name + ".job.json")


def process_frame(chain: Sequence[FrameProcessor], frame: Frame, ctx: FrameContext) -> Frame:
    """Run one frame (H×W×3 uint8 RGB) through the chain: the path of previews and of every batch."""
    return process_batch(chain, [frame], [ctx])[0]


@dataclass
class BatchLimit:
    """Frames per processor call in a run: starts at `runtime.batch`, halved for the rest of the run whenever a
    call runs out of memory."""

    size: int


def process_batch(
    chain: Sequence[FrameProcessor],
    frames: Sequence[Frame],
    ctxs: Sequence[FrameContext],
    limit: BatchLimit | None = None,
) -> list[Frame]:
    """Run a batch of frames through the chain, processor by processor (each batches its own model calls).

    A processor that runs out of memory gets the batch again in halves, down to one frame at a time; `limit`
    remembers the size that fitted."""
    limit = limit or BatchLimit(len(frames))
    out = list(frames)
    for processor in chain:
        out = _process_halving(processor, out, list(ctxs), limit)
    return out


def _process_halving(
    processor: FrameProcessor, frames: list[Frame], ctxs: list[FrameContext], limit: BatchLimit
) -> list[Frame]:
    if len(frames) > limit.size:
        step = limit.size  # fixed for this split; a failure inside lowers the limit for later calls
        return [
            out
            for at in range(0, len(frames), step)
            for out in _process_halving(processor, frames[at : at + step], ctxs[at : at + step], limit)
        ]
    try:
        started = time.perf_counter()
        out = processor.process(frames, ctxs)
        # The one metrics hook of the pipeline: per-processor frames and latency, whoever runs the chain.
        metrics.record_frames(processor, len(out), time.perf_counter() - started)
        return out
    except (OutOfMemory, MemoryError) as exc:
        if len(frames) == 1:
            raise OutOfMemory(
                f"{processor.id} does not fit in memory even for one frame ({exc}); lower the resolution, set a "
                "smaller tile, or use a smaller model"
            ) from exc
        limit.size = len(frames) // 2
        log.warning("%s ran out of memory on %d frames; %d per call from now on", processor.id, len(frames), limit.size)
        return _process_halving(processor, frames, ctxs, limit)


def frame_memory(chain: Sequence[FrameProcessor], width: int, height: int) -> int:
    """Bytes of working memory one width×height input frame takes through the chain's model calls (the largest
    processor's share: they run one after another)."""
    most = 0
    for processor in chain:
        most = max(most, processor.frame_memory(width, height))
        width, height = processor.output_size(width, height)
    return most


def batch_size(chain: Sequence[FrameProcessor], runtime: Runtime, width: int, height: int) -> int:
    """Frames per processor call for width×height frames: `runtime.batch`, or "auto" sized from free memory."""
    return runtime.batch_for(frame_memory(chain, width, height))


def synthetic_metadata(job: Job) -> dict[str, str]:
    """Container tags that mark an output as synthetic and name the tool and the processors."""
    chain = ",".join(job.processors)
    return {
        "comment": f"Synthetic media: generated by facestudio {VERSION} (processors: {chain})",
        "synthetic": "true",
        "generator": f"facestudio {VERSION}",
        "processors": chain,
    }


def run(
    job: Job,
    chain: Sequence[FrameProcessor],
    runtime: Runtime,
    progress: Progress | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
    renderer: SegmentRenderer | None = None,
    signing: keys.SigningKey | None = None,
) -> RunReport:
    """Process `job.target` through `chain` into `job.output` and write `<output>.job.json`.

    A video target is read over `job.video`'s span (trim_start–trim_end) at its fps, and its audio is cut to the
    same span; an image target ignores those settings. An existing file at `job.output` is refused unless
    `overwrite`. A video is rendered in segments (`engine.segments`) in its job folder (`engine.jobdir`); with
    `resume`, the segments an interrupted run of the same job finished are reused (an image is one step: it is
    simply run again). `renderer` renders a video's missing segments (default: in order, in this process;
    `engine.cluster.RayRenderer`: on Ray workers); the plan, job folder, resume and join stay the same. The output
    carries signed C2PA Content Credentials (`signing`, else `engine.provenance.keys.resolve()`). Raises typed
    errors only (InvalidInput, TruncatedInput, InsufficientDiskSpace, Cancelled, ContentRefused, SigningFailed …);
    on any error no output or partial file is left behind.
    """
    progress = progress or NullProgress()
    started = time.perf_counter()
    # The one choke point: every input and the output are checked before any frame is read or any model runs.
    checked = validate(job, chain, overwrite=overwrite)
    info, span, size = checked.info, checked.span, checked.output_size
    # Provenance hook 1, before any output work: the signing key is checked, the content check runs (it may
    # refuse the job) and the inputs are hashed.
    sealing = seal.begin(job, chain, runtime, info, span, VERSION, signing)
    faces = face_stage(job, chain, runtime, info, span)
    job.output.parent.mkdir(parents=True, exist_ok=True)
    batch = batch_size(chain, runtime, info.width, info.height)
    segmented = None
    try:
        if info.kind == "image":
            _run_image(job, chain, size, faces, sealing.seal)
            frames, audio = 1, False
        else:
            frames, audio, segmented = _run_video(
                job, chain, runtime, info, span, size, batch, progress, faces, resume, renderer or _render_missing,
                sealing.seal,
            )  # fmt: skip
    except KeyboardInterrupt:
        raise Cancelled("cancelled by the user; nothing was written") from None
    finally:
        progress.close()
    report = RunReport(
        output=job.output,
        sidecar=sidecar_path(job.output),
        kind=info.kind,
        frames=frames,
        input_size=(info.width, info.height),
        # yuv420p video is padded to even sizes by the writer: report what the file holds.
        output_size=size if info.kind == "image" else (size[0] + size[0] % 2, size[1] + size[1] % 2),
        seconds=time.perf_counter() - started,
        audio=audio,
        batch=batch,
        processors={p.id: p.describe() for p in chain},
        faces_processed=faces.faces if faces else 0,
        frames_without_face=faces.empty_frames if faces else None,
        identity=faces.qa.summary() if faces and faces.qa else None,
        segments=segmented,
        provenance=sealing.describe(),
        notes=tuple(sealing.notes()),
    )
    try:
        _write_sidecar(job, report, info, span)
    except BaseException:
        # An output without its sidecar has lost its provenance (and would look finished): remove it.
        job.output.unlink(missing_ok=True)
        raise
    return report


@dataclass
class _Faces:
    """The face stage of a run, its identity QA and its counters."""

    stage: FaceStage
    qa: IdentityQA | None
    faces: int = 0
    empty_frames: int = 0
    # Output frame 0's time in the target (seconds) and the output rate (None: an image, which has no time).
    span_start: float = 0.0
    rate: float | None = None

    def annotate(self, frames: Iterable[Frame], start: int = 0) -> Iterator[tuple[Frame, FrameContext]]:
        """Each frame with its faces; frames are numbered from `start` (the output frame of the first one)."""
        for index, (frame, found) in enumerate(self.stage.annotate(frames), start):
            time = None if self.rate is None else self.span_start + index / self.rate
            yield frame, FrameContext(index=index, faces=found, source=self.stage.source, time=time, original=frame)

    def count(self, ctxs: Iterable[FrameContext]) -> None:
        """Count the faces of frames being processed (not when found: analysis runs ahead of processing)."""
        for ctx in ctxs:
            self.faces += len(ctx.faces)
            self.empty_frames += not ctx.faces


def face_stage(
    job: Job, chain: Sequence[FrameProcessor], runtime: Runtime, info: video.MediaInfo, span: video.Span
) -> _Faces | None:
    """The face stage when a processor of the chain needs faces (sources checked before any frame is read)."""
    if not any(p.needs_faces for p in chain):
        return None
    for i, processor in enumerate(chain):
        resizing = [p.id for p in chain[:i] if p.output_size(info.width, info.height) != (info.width, info.height)]
        if processor.needs_faces and resizing:
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
    stage = FaceStage.create(job.faces, runtime, job.sources, job.target, fps=float(span.rate))
    qa = None
    if stage.source is not None and job.faces.qa_every > 0:
        qa = IdentityQA(stage.analyser, stage.source.embedding, every=job.faces.qa_every)
    rate = float(span.rate) if info.kind == "video" else None
    return _Faces(stage, qa, span_start=float(span.start), rate=rate)


QualityCheck = Callable[[int, Frame, Frame, tuple[Face, ...]], None]


def _process(
    chain: Sequence[FrameProcessor],
    check: QualityCheck | None,
    frames: list[Frame],
    ctxs: list[FrameContext],
    limit: BatchLimit | None = None,
) -> list[Frame]:
    """Run a batch through the chain; identity QA (`check`: frame index, input, output, faces) looks at the frames
    right after the last face processor (a later processor, such as an upscaler, changes the size QA compares at)."""
    if check is None:
        return process_batch(chain, frames, ctxs, limit)
    split = max(i for i, p in enumerate(chain) if p.needs_faces) + 1
    swapped = process_batch(chain[:split], frames, ctxs, limit)
    for before, after, ctx in zip(frames, swapped, ctxs, strict=True):
        check(ctx.index, before, after, ctx.faces)
    return process_batch(chain[split:], swapped, ctxs, limit)


def _annotated(faces: _Faces | None, frames: Iterable[Frame], start: int = 0) -> Iterator[tuple[Frame, FrameContext]]:
    if faces is None:
        return ((frame, FrameContext(index=i)) for i, frame in enumerate(frames, start))
    return faces.annotate(frames, start)


def _run_image(
    job: Job,
    chain: Sequence[FrameProcessor],
    size: tuple[int, int],
    faces: _Faces | None,
    finish: Callable[[Path], None],
) -> None:
    image, alpha = video.read_image(job.target)
    ((frame, ctx),) = _annotated(faces, [image])
    if faces is not None and not ctx.faces:
        raise InvalidInput(f"no face to process was found in {job.target} (faces.selector={job.faces.selector})")
    if faces is not None:
        faces.count([ctx])
    (result,) = _process(chain, faces.qa.check if faces and faces.qa else None, [frame], [ctx])
    if (result.shape[1], result.shape[0]) != size:
        raise RuntimeError(f"the chain returned {result.shape[1]}×{result.shape[0]}, expected {size[0]}×{size[1]}")
    # Provenance hooks 2 and 3: the watermark goes into the output frame, the credentials into the finished file.
    mark = watermark.marker(job.video.watermark)
    video.write_image(job.output, mark(result), alpha=alpha, metadata=synthetic_metadata(job), finish=finish)


@dataclass
class VideoRender:
    """Everything a video job's segments are rendered with: the job, its chain and runtime, the probed target and
    its span, the output frame size (pixels, before the writer pads odd sizes), the face stage (None when no
    processor needs faces), the frames per processor call and the batch limit, shared so that an out-of-memory
    halving lasts the whole run. `check` is identity QA (None: off); a run replaces the synchronous check with one
    that hands frames to its QA thread."""

    job: Job
    chain: Sequence[FrameProcessor]
    runtime: Runtime
    info: video.MediaInfo
    span: video.Span
    size: tuple[int, int]
    faces: _Faces | None
    batch: int
    limit: BatchLimit
    check: QualityCheck | None = None

    def __post_init__(self) -> None:
        if self.check is None and self.faces is not None and self.faces.qa is not None:
            self.check = self.faces.qa.check


def render_segment(
    render: VideoRender,
    segment: Segment,
    frames: Iterable[tuple[Frame, FrameContext]],
    path: Path,
    progress: Progress | None = None,
) -> int:
    """Process one segment of a video job into the file `path` (.mp4, no audio, no tags: those come when the
    segments are joined); returns the frames written, checked to be in the file.

    frames: the segment's input frames (H×W×3 uint8 RGB, the target's size) with their contexts, numbered by output
    frame of the span: `segment.frames` of them (the last segment of a plan takes every frame the decoder still
    gives, since an open-ended plan's count is an estimate). One process renders the segments in order from one
    stream, so face tracking runs on across them; a worker given segment i alone reads
    `video.FrameReader(target, info, span, skip=segment.start)` and annotates it from `segment.start`. Processing
    overlaps encoding through a bounded queue; on any error the encoder is stopped and nothing is left at `path`.
    """
    progress = progress or NullProgress()
    job = render.job
    batch = render.batch
    # Provenance hook 2: the watermark goes into each output frame before it is encoded (here, so that cluster
    # workers mark the segments they render too).
    mark = watermark.marker(job.video.watermark)
    encoded: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
    stop = threading.Event()
    with video.FrameWriter(
        path,
        render.size[0],
        render.size[1],
        render.span.fps_rational,
        audio_from=None,
        metadata={},
        crf=job.video.crf,
        preset=job.video.preset,
        encoder=job.video.encoder,
    ) as writer:
        encode = _Worker("encode", lambda: _consume(encoded, writer.write, stop))
        try:
            for chunk in _chunks(frames, batch):
                batch_frames = [frame for frame, _ in chunk]
                ctxs = [ctx for _, ctx in chunk]
                if render.faces is not None:
                    render.faces.count(ctxs)
                for out in _process(render.chain, render.check, batch_frames, ctxs, render.limit):
                    _put(encoded, mark(out), stop, encode)
                progress.advance(len(chunk))
            _put(encoded, _END, stop, encode)
            encode.join()
        except BaseException:
            stop.set()
            raise
        finally:
            stop.set()
            encode.thread.join(timeout=5)
    return writer.frames_written


def _run_video(
    job: Job,
    chain: Sequence[FrameProcessor],
    runtime: Runtime,
    info: video.MediaInfo,
    span: video.Span,
    size: tuple[int, int],
    batch: int,
    progress: Progress,
    faces: _Faces | None,
    resume: bool,
    renderer: SegmentRenderer,
    finish: Callable[[Path], None],
) -> tuple[int, bool, dict[str, Any]]:
    """Render the segments of `span` still missing in the job folder, join them with the audio into `job.output`
    (`finish` seals the joined file before it takes the output's name);
    returns the frames written, whether the output has audio (a span can hold none of a short audio track), and
    the segments summary of the report. The job folder is removed, or kept for `--resume` (see `engine.jobdir`)."""
    log.info("%d frames per processor call", batch)
    render = VideoRender(job, chain, runtime, info, span, size, faces, batch, BatchLimit(batch))
    # A resampled span that runs to the end of the video has an expected, not exact, frame count.
    plan = segments.plan(span.frames, job.video.segment_frames, open_end=span.resample and span.end is None)
    root = jobdir.jobs_root(runtime.folders.cache)
    jobdir.sweep(root)
    target, output = job.target.resolve(), job.output.resolve()
    stat = target.stat()
    key = segments.job_key(str(target), stat.st_size, stat.st_mtime_ns, str(output))
    settings = segments.resumable_settings(absolute_raw(job))
    # An edited source image changes every swapped frame: finished segments made from the old one do not fit.
    settings["source_files"] = [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in job.sources]
    describe = {"target": str(target), "output": str(output)}
    folder = jobdir.JobFolder.open(root, key, settings, plan, describe, resume)
    reused = sorted(folder.done)
    try:
        todo = segments.missing(plan, folder.done)
        _check_disk_space(job, info, span, size, plan, todo, folder.path)
        progress.stage("frames", span.frames)
        progress.advance(sum(r["frames"] for r in folder.done.values()))
        if todo:
            renderer(render, folder, plan, todo, progress)
        done = folder.done
        parts = [(folder.segment_path(s), done[s.index]["frames"]) for s in plan.segments]
        written = video.join_segments(
            parts,
            job.output,
            span.rate,
            folder.path / "concat.txt",
            audio_from=job.target if job.video.keep_audio else None,
            metadata=synthetic_metadata(job),
            encoder=job.video.encoder,
            # Output frame 0 is the span's start, so the audio starts there too.
            audio_start=float(span.start),
            audio_end=None if span.end is None else float(span.end),
            # Provenance hook 3: the credentials are signed into the joined file before its final rename.
            finish=finish,
        )
    except (KeyboardInterrupt, InsufficientDiskSpace) as exc:
        if not folder.done:
            folder.remove()
            if isinstance(exc, KeyboardInterrupt):
                raise Cancelled("cancelled by the user; nothing was written") from None
            raise
        folder.release()
        done = folder.done
        kept = (
            f"{len(done)} of {len(plan.segments)} segments ({sum(r['frames'] for r in done.values())} of "
            f"{span.frames} frames) are kept in {folder.path}"
        )
        if isinstance(exc, KeyboardInterrupt):
            raise Cancelled(f"cancelled by the user; {kept}: run again with --resume to continue") from None
        raise InsufficientDiskSpace(f"{exc}; {kept}: once there is room, run again with --resume") from None
    except BaseException:
        folder.remove()
        raise
    if faces is not None:
        # Face counts cover the whole output, the finished segments of an interrupted run included.
        faces.faces = sum(r.get("faces", 0) for r in folder.done.values())
        faces.empty_frames = sum(r.get("empty", 0) for r in folder.done.values())
    folder.remove()
    summary = {
        "count": len(plan.segments),
        "segment_frames": plan.segment_frames,
        "reused": reused,
        "frames_processed": sum(r["frames"] for i, r in folder.done.items() if i not in reused),
    }
    workers = {i: r for i, r in folder.done.items() if i not in reused and "worker" in r}
    if workers:
        summary["cluster"] = {str(i): {"worker": r["worker"], "attempts": r["attempts"]} for i, r in workers.items()}
    return written.frame_count, written.has_audio, summary


# Renders the missing segments (the last argument) of a job into its folder, recording each as it is finished.
SegmentRenderer = Callable[[VideoRender, jobdir.JobFolder, segments.Plan, Sequence[Segment], Progress], None]


@dataclass(frozen=True)
class SegmentResult:
    """What rendering one segment on its own made: the frames written, the face counts of its frames (`faces`,
    `empty`; none when no processor needs faces), and its identity QA records (frame, distance before, after)."""

    frames: int
    counts: dict[str, int]
    identity: list[tuple[int, float, float]]


def segment_render(
    job: Job, chain: Sequence[FrameProcessor], runtime: Runtime, info: video.MediaInfo, span: video.Span,
    size: tuple[int, int],
) -> VideoRender:  # fmt: skip
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
    before = _face_counts(faces)
    checked = 0
    if faces is not None:
        faces.stage.restart()
        checked = len(faces.qa.records) if faces.qa is not None else 0
    with video.FrameReader(render.job.target, render.info, render.span, skip=segment.start) as reader:
        stream = _annotated(faces, reader, segment.start)
        written = render_segment(render, segment, stream if last else itertools.islice(stream, segment.frames), path)
    if not last and written != segment.frames:
        path.unlink(missing_ok=True)
        raise MediaError(
            f"{render.job.target} gave {written} frames for output frames {segment.start}–{segment.stop - 1}, "
            f"expected {segment.frames}"
        )
    after = _face_counts(faces)
    identity = faces.qa.records[checked:] if faces is not None and faces.qa is not None else []
    return SegmentResult(written, {k: after[k] - before[k] for k in after}, list(identity))


def _render_missing(
    render: VideoRender, folder: jobdir.JobFolder, plan: segments.Plan, todo: Sequence[Segment], progress: Progress
) -> None:
    """Render `todo` in order from one decoder that starts at the first of them; frames of finished segments in
    between (segments finished elsewhere) are decoded and dropped.

    Faces of the next frames are found on their own thread while a batch is processed, and identity QA measures
    finished frames on another: the analyser's native code runs while the processors' does (a lock keeps the
    analyser's own calls one at a time)."""
    batch = render.batch
    decoded: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
    stop = threading.Event()
    first = todo[0].start
    last = plan.segments[-1]
    faces = render.faces
    with video.FrameReader(render.job.target, render.info, render.span, skip=first) as reader:
        decode = _Worker("decode", lambda: _produce(iter(reader), decoded, stop))
        workers = [decode]
        try:
            source = _drain(decoded, decode, stop)
            stream = _annotated(None, source, first)
            if faces is not None:
                annotated: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
                analyse = _Worker("faces", lambda: _produce(faces.annotate(source, first), annotated, stop))
                workers.append(analyse)
                stream = _drain(annotated, analyse, stop)
            qa = _QualityThread(render, stop) if render.check is not None else None
            if qa is not None:
                workers.append(qa.worker)
            position = first
            for segment in todo:
                for _ in itertools.islice(stream, segment.start - position):
                    pass
                # The last segment takes every frame that is left: an open-ended plan's count is an estimate.
                frames = stream if segment is last else itertools.islice(stream, segment.frames)
                before = _face_counts(render.faces)
                written = render_segment(render, segment, frames, folder.work_path(segment), progress)
                if segment is not last and written != segment.frames:
                    raise MediaError(
                        f"{render.job.target} gave {written} frames for output frames {segment.start}–"
                        f"{segment.stop - 1}, expected {segment.frames}"
                    )
                after = _face_counts(render.faces)
                folder.finish(segment, written, {k: after[k] - before[k] for k in after})
                position = segment.start + written
            if qa is not None:
                qa.finish()
            # The decoder may still hold frames of finished segments after the last one rendered here.
            stop.set()
            for worker in workers:
                worker.join()
        except BaseException:
            stop.set()
            raise
        finally:
            stop.set()
            for worker in workers:
                worker.thread.join(timeout=5)


class _QualityThread:
    """Identity QA of a run on its own thread: `render.check` is replaced by a hand-over to a bounded queue."""

    def __init__(self, render: VideoRender, stop: threading.Event) -> None:
        check = render.check
        assert check is not None
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=2 * render.batch)
        self.stop = stop
        self.worker = _Worker("qa", lambda: _consume(self.queue, lambda item: check(*item), stop))
        render.check = self.put

    def put(self, index: int, before: Frame, after: Frame, found: tuple[Face, ...]) -> None:
        _put(self.queue, (index, before, after, found), self.stop, self.worker)

    def finish(self) -> None:
        """Wait until every handed-over frame is measured (raising QA's error, if any)."""
        _put(self.queue, _END, self.stop, self.worker)
        self.worker.join()


def _face_counts(faces: _Faces | None) -> dict[str, int]:
    return {} if faces is None else {"faces": faces.faces, "empty": faces.empty_frames}


def _check_disk_space(
    job: Job,
    info: video.MediaInfo,
    span: video.Span,
    size: tuple[int, int],
    plan: segments.Plan,
    todo: Sequence[Segment],
    folder: Path,
) -> None:
    """Refuse a job whose missing segments (in the job folder) and output (next to it) will not fit."""
    audio = job.video.keep_audio and info.has_audio
    rate = float(span.rate)

    def estimate(frames: int) -> int:
        return segments.estimate_video_bytes(size[0], size[1], frames, rate, job.video.crf, audio)

    needs: Mapping[Path, int] = {
        folder: estimate(sum(s.frames for s in todo)),
        job.output.resolve().parent: estimate(plan.frames),
    }
    jobdir.check_disk_space(
        needs, "free some space, write the output to another disk, or set FACESTUDIO_JOBS to a folder on another disk"
    )


class _Worker:
    """A daemon thread whose exception is re-raised in the caller by `join` or `check`."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(target,), name=f"facestudio-{name}", daemon=True)
        self.thread.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # re-raised in the main thread, where the job's error handling lives
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def join(self) -> None:
        self.thread.join()
        self.check()


def _put(q: queue.Queue[Any], item: Any, stop: threading.Event, worker: _Worker | None = None) -> None:
    while not stop.is_set():
        if worker is not None:
            worker.check()
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _produce(items: Iterator[Any], q: queue.Queue[Any], stop: threading.Event) -> None:
    for item in items:
        _put(q, item, stop)
        if stop.is_set():  # checked before asking `items` for more: that may block (a queue) or compute (faces)
            return
    _put(q, _END, stop)


def _consume(q: queue.Queue[Any], write: Callable[[Any], None], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            item = q.get(timeout=0.1)
        except queue.Empty:
            continue
        if item is _END:
            return
        write(item)


def _drain(q: queue.Queue[Any], producer: _Worker, stop: threading.Event) -> Iterator[Any]:
    """The producer's items, in order, until its end marker; the producer's error is raised here. Ends early once
    `stop` is set (the run is over or failed: a thread still pulling must not wait for items that never come)."""
    while True:
        try:
            item = q.get(timeout=0.1)
        except queue.Empty:
            producer.check()
            if stop.is_set():
                return
            continue
        if item is _END:
            producer.check()
            return
        yield item


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_sidecar(job: Job, report: RunReport, info: video.MediaInfo, span: video.Span) -> None:
    data: dict[str, Any] = {
        "facestudio": VERSION,
        "synthetic": True,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "job": _replayable(job, report),
        "input": {
            "path": str(job.target),
            "kind": info.kind,
            "frames": info.frame_count,
            "width": info.width,
            "height": info.height,
            "fps": info.fps_rational,
            "audio": info.has_audio,
            "vfr": info.vfr,
        },
        "output": {
            "path": str(report.output),
            "frames": report.frames,
            "width": report.output_size[0],
            "height": report.output_size[1],
            "audio": report.audio,
        },
        "processors": report.processors,
        "faces": {
            "processed": report.faces_processed,
            "frames_without_face": report.frames_without_face,
            "identity": report.identity,
        },
        "batch": report.batch,
        "seconds": round(report.seconds, 3),
    }
    if report.segments is not None:
        data["segments"] = report.segments
    # Provenance hook 4: what was signed, with which key, the watermark and the content check.
    data["provenance"] = report.provenance
    if info.kind == "video":
        # What the output covers, in seconds of the target from its first frame, and its rate.
        data["span"] = {
            "start": float(span.start),
            "end": None if span.end is None else float(span.end),
            "fps": span.fps_rational,
        }
    tmp = report.sidecar.with_name(f".{report.sidecar.name}.partial")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, report.sidecar)
    finally:
        tmp.unlink(missing_ok=True)


def absolute_raw(job: Job) -> dict[str, Any]:
    """The raw job with every path absolute."""
    raw = job.to_raw()
    raw["target"] = str(job.target.resolve())
    raw["output"] = str(job.output.resolve())
    raw["sources"] = [str(p.resolve()) for p in job.sources]
    if job.faces.reference_image is not None:
        raw["faces"]["reference_image"] = str(job.faces.reference_image.resolve())
    return raw


def _replayable(job: Job, report: RunReport) -> dict[str, Any]:
    """The job as `run --job` should replay it: absolute paths, and the backend that actually ran pinned."""
    raw = absolute_raw(job)
    # Only model backends are pinned (a processor that runs no model reports e.g. "opencv").
    backends = {d["backend"] for d in report.processors.values() if d.get("backend") in ("onnx", "torch")}
    if len(backends) == 1:
        raw["runtime"]["backend"] = backends.pop()
    return raw


def load_sidecar_job(path: Path) -> dict[str, Any]:
    """The raw job of a sidecar written by `run` (or a bare job mapping), for `run --job FILE`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"job file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"job file {path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"job file {path} does not hold a job")
    job = data.get("job", data)
    if not isinstance(job, dict) or "processors" not in job:
        raise InvalidInput(f"job file {path} does not hold a job (no 'processors')")
    return job
