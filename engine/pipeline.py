"""The only orchestration: validate, decode → process → encode (overlapped), mux audio, write provenance.

`run` is what the CLI and the UI call; `process_frame` is the single-frame path the UI preview uses, so a preview
and a full run can never differ.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import metrics, video
from engine.errors import Cancelled, InvalidInput, InvalidJob, OutOfMemory
from engine.faces.qa import IdentityQA
from engine.faces.stage import FaceStage
from engine.job import Job
from engine.models.runtime import Runtime
from engine.processor import FrameContext, FrameProcessor
from engine.progress import NullProgress, Progress
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

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

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
) -> RunReport:
    """Process `job.target` through `chain` into `job.output` and write `<output>.job.json`.

    A video target is read over `job.video`'s span (trim_start–trim_end) at its fps, and its audio is cut to the
    same span; an image target ignores those settings. An existing file at `job.output` is refused unless
    `overwrite`. Raises typed errors only (InvalidInput, TruncatedInput, Cancelled …); on any error no output or
    partial file is left behind.
    """
    progress = progress or NullProgress()
    started = time.perf_counter()
    # The one choke point: every input and the output are checked before any frame is read or any model runs.
    checked = validate(job, chain, overwrite=overwrite)
    info, span, size = checked.info, checked.span, checked.output_size
    faces = _face_stage(job, chain, runtime, info, span)
    job.output.parent.mkdir(parents=True, exist_ok=True)
    batch = batch_size(chain, runtime, info.width, info.height)
    try:
        if info.kind == "image":
            _run_image(job, chain, size, faces)
            frames, audio = 1, False
        else:
            frames, audio = _run_video(job, chain, info, span, size, batch, progress, faces)
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
    )
    _write_sidecar(job, report, info, span)
    return report


@dataclass
class _Faces:
    """The face stage of a run, its identity QA and its counters."""

    stage: FaceStage
    qa: IdentityQA | None
    faces: int = 0
    empty_frames: int = 0

    def annotate(self, frames: Iterable[Frame]) -> Iterator[tuple[Frame, FrameContext]]:
        for index, (frame, found) in enumerate(self.stage.annotate(frames)):
            self.faces += len(found)
            self.empty_frames += not found
            yield frame, FrameContext(index=index, faces=found, source=self.stage.source)


def _face_stage(
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
    return _Faces(stage, qa)


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


def _annotated(faces: _Faces | None, frames: Iterable[Frame]) -> Iterator[tuple[Frame, FrameContext]]:
    if faces is None:
        return ((frame, FrameContext(index=i)) for i, frame in enumerate(frames))
    return faces.annotate(frames)


def _run_image(job: Job, chain: Sequence[FrameProcessor], size: tuple[int, int], faces: _Faces | None) -> None:
    image, alpha = video.read_image(job.target)
    ((frame, ctx),) = _annotated(faces, [image])
    if faces is not None and not ctx.faces:
        raise InvalidInput(f"no face to process was found in {job.target} (faces.selector={job.faces.selector})")
    (result,) = _process(chain, faces.qa.check if faces and faces.qa else None, [frame], [ctx])
    if (result.shape[1], result.shape[0]) != size:
        raise RuntimeError(f"the chain returned {result.shape[1]}×{result.shape[0]}, expected {size[0]}×{size[1]}")
    video.write_image(job.output, result, alpha=alpha, metadata=synthetic_metadata(job))


def _run_video(
    job: Job,
    chain: Sequence[FrameProcessor],
    info: video.MediaInfo,
    span: video.Span,
    size: tuple[int, int],
    batch: int,
    progress: Progress,
    faces: _Faces | None,
) -> tuple[int, bool]:
    """Decode `span` of the target, run the chain, encode; returns the frames written and whether the output has
    audio (a span can hold none of a short audio track)."""
    log.info("%d frames per processor call", batch)
    limit = BatchLimit(batch)
    decoded: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
    encoded: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
    stop = threading.Event()
    audio_from = job.target if job.video.keep_audio else None
    progress.stage("frames", span.frames)
    with (
        video.FrameReader(job.target, info, span) as reader,
        video.FrameWriter(
            job.output,
            size[0],
            size[1],
            span.fps_rational,
            audio_from=audio_from,
            metadata=synthetic_metadata(job),
            crf=job.video.crf,
            preset=job.video.preset,
            encoder=job.video.encoder,
            # Output frame 0 is the span's start, so the audio starts there too.
            audio_start=float(span.start),
            audio_end=None if span.end is None else float(span.end),
        ) as writer,
    ):
        decode = _Worker("decode", lambda: _produce(iter(reader), decoded, stop))
        encode = _Worker("encode", lambda: _consume(encoded, writer.write, stop))
        workers = [decode, encode]
        items: Iterator[tuple[Frame, FrameContext]] = _annotated(None, _drain(decoded, decode))
        check: QualityCheck | None = None
        if faces is not None:
            # Faces of the next frames are found while this batch is processed, and identity QA measures finished
            # frames beside both: the analyser's native code runs while the processors' does (one lock keeps
            # the analyser's own calls one at a time).
            annotated: queue.Queue[Any] = queue.Queue(maxsize=2 * batch)
            analyse = _Worker("faces", lambda: _produce(faces.annotate(_drain(decoded, decode)), annotated, stop))
            items = _drain(annotated, analyse)
            workers.append(analyse)
            if faces.qa is not None:
                qa, measured = faces.qa, queue.Queue(maxsize=2 * batch)
                qa_worker = _Worker("qa", lambda: _consume(measured, lambda item: qa.check(*item), stop))
                workers.append(qa_worker)

                def check(index: int, before: Frame, after: Frame, found: tuple[Face, ...]) -> None:
                    _put(measured, (index, before, after, found), stop, qa_worker)

        try:
            for chunk in _chunks(items, batch):
                frames = [frame for frame, _ in chunk]
                for out in _process(chain, check, frames, [ctx for _, ctx in chunk], limit):
                    _put(encoded, out, stop, encode)
                progress.advance(len(frames))
            if check is not None:
                _put(measured, _END, stop, qa_worker)
                qa_worker.join()
            _put(encoded, _END, stop, encode)
            for worker in workers:
                worker.join()
        except BaseException:
            stop.set()
            raise
        finally:
            stop.set()
            for worker in workers:
                worker.thread.join(timeout=5)
    assert writer.written is not None  # the `with` block closed the writer, which probed what it wrote
    return writer.written.frame_count, writer.written.has_audio


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
        if stop.is_set():
            return
        _put(q, item, stop)
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


def _drain(q: queue.Queue[Any], producer: _Worker) -> Iterator[Any]:
    """The producer's items, in order, until its end marker; the producer's error is raised here."""
    while True:
        try:
            item = q.get(timeout=0.1)
        except queue.Empty:
            producer.check()
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
    if info.kind == "video":
        # What the output covers, in seconds of the target from its first frame, and its rate.
        data["span"] = {
            "start": float(span.start),
            "end": None if span.end is None else float(span.end),
            "fps": span.fps_rational,
        }
    tmp = report.sidecar.with_name(f".{report.sidecar.name}.partial")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, report.sidecar)


def _replayable(job: Job, report: RunReport) -> dict[str, Any]:
    """The job as `run --job` should replay it: absolute paths, and the backend that actually ran pinned."""
    raw = job.to_raw()
    raw["target"] = str(job.target.resolve())
    raw["output"] = str(job.output.resolve())
    raw["sources"] = [str(p.resolve()) for p in job.sources]
    if job.faces.reference_image is not None:
        raw["faces"]["reference_image"] = str(job.faces.reference_image.resolve())
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
