"""The one orchestration of a job: validate, claim the output, render (decode → faces → chain → encode, in
segments for a video), join with the audio, deliver with the sidecar.

`run` is what the CLI, the UI and the jobs API call; `process_frame` is the single-frame path the UI preview uses:
the same face stage and chain as a run's frames. A video's frame in a run can still differ from its preview where a
run carries state across frames (a tracked face's colour statistics, its smoothed box). The parts: `validate`
(every input, before any work), `outputs` (claim, seal, deliver), `render` (faces, segments), `segmented` (job
folder, disk, join, resume), `chain` (batches through the processors), `sidecar` (provenance), `workers` (threads
and queues).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from engine import media
from engine.core.errors import Cancelled, DiskFull, InvalidInput
from engine.core.progress import NullProgress, Progress
from engine.core.types import Frame
from engine.faces.select import smallest_face_hint
from engine.job.processor import FrameContext, FrameProcessor
from engine.job.settings import Job
from engine.media.commands import GIF_SUFFIX
from engine.models.runtime import Runtime
from engine.provenance import keys, seal, watermark
from engine.run.chain import BatchLimit, batch_size, chain_alpha, process_batch, process_checked
from engine.run.outputs import OutputClaim
from engine.run.render import (
    Faces,
    SegmentRenderer,
    VideoRender,
    annotated,
    face_stage,
    render_missing,
    span_reader,
)
from engine.run.report import RunReport
from engine.run.segmented import video_job
from engine.run.sidecar import VERSION, sidecar_path, sidecar_text, synthetic_metadata
from engine.run.validate import validate

__all__ = ["RunReport", "process_frame", "run"]


def process_frame(chain: Sequence[FrameProcessor], frame: Frame, ctx: FrameContext) -> Frame:
    """Run one frame (H×W×3 uint8 RGB) through the chain: the path of previews and of every batch."""
    return process_batch(chain, [frame], [ctx])[0]


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

    A video target is read over `job.video`'s span (trim_start–trim_end) at its fps, every frame at its own time
    unless resampled, and its audio is cut to the same span; an image target ignores those settings. An existing
    file at `job.output` is refused unless `overwrite`, and so is an output another run is writing. A video is
    rendered in segments in its job folder; with `resume`, the segments an interrupted run of the same job
    finished are reused. `renderer` renders a video's missing segments (default: in order, in this process;
    `engine.serve.cluster.RayRenderer`: on Ray workers). Raises typed errors only (InvalidInput, TruncatedInput,
    InsufficientDiskSpace, DiskFull, Cancelled …); on any error no output, partial file or folder it made is left.
    Every output carries signed C2PA Content Credentials (`signing`, else `engine.provenance.keys.resolve()`).
    """
    progress = progress or NullProgress()
    started = time.perf_counter()
    # The one choke point: every input and the output are checked before any frame is read or any model runs.
    checked = validate(job, chain, overwrite=overwrite)
    info, span, size, job = checked.info, checked.span, checked.output_size, checked.job
    # Before any output work: the signing key is checked, the content check runs (it may refuse the job) and the
    # inputs are hashed (the credentials' ingredients).
    sealing = seal.begin(job, chain, runtime, info, span, VERSION, signing)
    try:
        with OutputClaim.claim(job.output, overwrite, sealing.seal) as claim, contextlib.ExitStack() as early:
            decoding = None
            if checked.picture is not None and not resume and renderer is None:
                # A fresh job renders here from the span's first frame: ffmpeg starts decoding it (tens of ms to its
                # first frame) while the source faces are analysed.
                decoding = early.enter_context(span_reader(job, info, span, checked.picture).start())
            faces = face_stage(job, chain, runtime, info, span)
            batch = batch_size(chain, runtime, info.width, info.height)
            staged = claim.staging()
            if info.kind == "image":
                _render_image(job, chain, size, faces, staged)
                return _deliver(
                    claim, staged, job, info, span,
                    lambda: _report(job, chain, info, size, started, 1, 0, batch, faces, None, sealing, checked.notes),
                )  # fmt: skip
            render = VideoRender(job, chain, runtime, info, span, size, faces, batch, BatchLimit(batch),
                                 picture=checked.picture, started=decoding)  # fmt: skip
            with video_job(render, resume) as video:
                video.check_disk_space()
                video.render_missing(renderer or render_missing, progress)
                written = video.join(staged, checked.streams)
                return _deliver(claim, staged, job, info, span,
                                lambda: _report(job, chain, info, size, started, written.frame_count,
                                                len(written.audio_tracks), batch, faces, video.summary(), sealing,
                                                checked.notes))  # fmt: skip
    except KeyboardInterrupt:
        raise Cancelled("cancelled by the user; nothing was written") from None
    finally:
        progress.close()


def _render_image(
    job: Job, chain: Sequence[FrameProcessor], size: tuple[int, int], faces: Faces | None, staged: Path
) -> None:
    image, alpha = media.read_image(job.target)
    ((frame, ctx),) = annotated(faces, [image], times=media.FrameTimes.constant(1))
    if faces is not None and not ctx.faces:
        raise InvalidInput(
            f"no face to process was found in {job.target} (faces.selector={job.faces.selector})"
            f"{smallest_face_hint(faces.stage.analyser)}"
        )
    if faces is not None:
        faces.count([ctx])
    (result,) = process_checked(chain, faces.qa.check if faces and faces.qa else None, [frame], [ctx])
    if (result.shape[1], result.shape[0]) != size:
        raise RuntimeError(f"the chain returned {result.shape[1]}×{result.shape[0]}, expected {size[0]}×{size[1]}")
    # The input's transparency, and what a processor made transparent (a removed background).
    alpha = chain_alpha(chain, ctx.index, alpha)
    try:
        media.write_image(staged, watermark.marker(job.video.watermark)(result), alpha=alpha,
                          metadata=synthetic_metadata(job),
                          keep=media.kept_metadata(job.target) if job.video.keep_metadata else None)  # fmt: skip
    except DiskFull as exc:
        need = result.nbytes + (alpha.nbytes if alpha is not None else 0)  # at most what an encoder stores
        raise DiskFull(
            f"the disk of {exc.folder} is full (writing the image {job.output.name}): free at least "
            f"{need / 1e6:.1f} MB there and run it again",
            exc.folder,
        ) from None


def _deliver(
    claim: OutputClaim, staged: Path, job: Job, info: media.MediaInfo, span: media.Span, report: Callable[[], RunReport]
) -> RunReport:
    """Deliver the staged output; its report (and so its sidecar) is made just before the file is sealed: it records
    what the seal does, and the signature records its digest."""
    made: list[RunReport] = []

    def sidecar() -> str:
        made.append(report())
        return sidecar_text(job, made[0], info, span)

    claim.deliver(staged, sidecar)
    return made[0]


def _report(
    job: Job,
    chain: Sequence[FrameProcessor],
    info: media.MediaInfo,
    size: tuple[int, int],
    started: float,
    frames: int,
    audio: int,
    batch: int,
    faces: Faces | None,
    segmented: dict[str, object] | None,
    sealing: seal.Seal,
    notes: tuple[str, ...] = (),
) -> RunReport:
    yuv = info.kind == "video" and job.output.suffix.lower() != GIF_SUFFIX
    source = faces.stage.source if faces else None
    choices = [*(source.choices if source else ()), *(c for i in (faces.stage.cast if faces else {}).values()
                                                      for c in i.choices)]  # fmt: skip
    found_none = faces is not None and frames > 0 and faces.empty_frames == frames
    hint = smallest_face_hint(faces.stage.analyser) if faces is not None and found_none else ""
    return RunReport(
        output=job.output,
        sidecar=sidecar_path(job.output),
        kind=info.kind,
        frames=frames,
        input_size=(info.width, info.height),
        # yuv420p video is padded to even sizes by the writer (a GIF is not): report what the file holds.
        output_size=(size[0] + size[0] % 2, size[1] + size[1] % 2) if yuv else size,
        seconds=time.perf_counter() - started,
        audio=audio > 0,
        audio_tracks=audio,
        batch=batch,
        processors={p.id: p.describe() for p in chain},
        faces_processed=faces.faces if faces else 0,
        frames_without_face=faces.empty_frames if faces else None,
        identity=faces.qa.summary() if faces and faces.qa else None,
        people=faces.stage.people_record() if faces else None,
        segments=segmented,
        provenance=sealing.describe(),
        sources=[asdict(c) for c in choices] or None,
        notes=(
            *notes,
            *(c.summary() for c in choices if c.faces > 1),
            *([f"faces: none found on any frame{hint}"] if hint else []),
            *sealing.notes(),
            *(note for p in chain for note in p.notes),
        ),
    )
