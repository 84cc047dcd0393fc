"""The engine as front ends see it: the CLI, the web UI, the jobs API and the live mode call this, nothing deeper.

One `Service` per process holds the processor registry it was given (the engine never imports `processors/`),
warm runtimes (models stay loaded between jobs), and small caches for single frames. It builds jobs and chains,
runs jobs, renders single frames through the chain (previews; live streams keep their tracker through a
`FrameRenderer` of their own, `live_renderer`), finds faces; its `catalogue` (engine/serve/catalogue.py) lists, fetches,
verifies and exports models.

Not thread-safe for model work by itself: callers serialise model work with `model_lock`
(engine/serve/model_lock.py), as the UI and the jobs API do, so one job at a time uses the GPU: a run holds it, single
frames and face searches take it `brief()`ly, and `run` lets those in between its batches.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from engine import media as video
from engine.core.errors import InvalidInput, ModelUnavailable
from engine.core.progress import NullProgress, Progress
from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser
from engine.faces.people import Scan, TakeTurn
from engine.job.processor import FrameContext, FrameProcessor
from engine.job.settings import FacesSettings, Job, Preset, RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import ProgressFactory, Runtime
from engine.run import pipeline
from engine.run.face_stage import build_analyser, scan_target
from engine.run.render import face_stage
from engine.serve.catalogue import Catalogue
from engine.serve.model_lock import ModelLock

Registry = Mapping[str, type[FrameProcessor]]
# Decoded target frames and face-stage results kept for previews: a user moves between a handful of frames.
_FRAMES_KEPT = 8
# What a live job names as its target and output: a camera has no file (nothing reads or writes these paths).
LIVE_TARGET = Path("camera")
LIVE_OUTPUT = Path("live.mp4")


@dataclass(frozen=True)
class Rendered:
    """One frame through the chain. `before`/`after`: H×W×3 uint8 RGB (after may be larger: upscalers).
    `detected`: every face found on `before`, in the analyser's order (empty without face processors);
    `chosen`: those the face processors worked on. `faces_ms`/`chain_ms`: the face stage's and the processors'
    wall time for this call (0 for the face stage when its result was cached)."""

    before: Frame
    after: Frame
    detected: tuple[Face, ...] = ()
    chosen: tuple[Face, ...] = ()
    faces_ms: float = 0.0
    chain_ms: float = 0.0


def file_key(path: Path) -> tuple[str, int, int]:
    """What identifies a file's content for caching: its path, size and modification time (ns)."""
    stat = Path(path).stat()
    return str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns


@dataclass
class FrameRenderer:
    """A chain with its face stage, ready to render single frames of one target.

    Previews call `render(frame, index, track=False)` for frames in any order (the tracker restarts each time);
    a live stream calls it with `track=True` for consecutive frames, so faces are tracked and smoothed from frame
    to frame instead of detected on each. `update_chain` swaps the processors (an option changed) from the next
    frame on, keeping the face stage."""

    job: Job
    runtime: Runtime
    chain: list[FrameProcessor]
    faces: Any = None  # pipeline's face stage with its source identity, None when no processor needs faces
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Each frame's presentation time in seconds from the target's start (empty for an image or a camera).
    times: tuple[float, ...] = ()
    _found: dict[int, tuple[FrameContext, tuple[Face, ...]]] = field(default_factory=dict, repr=False)

    def update_chain(self, chain: list[FrameProcessor]) -> None:
        with self._lock:
            self.chain = chain

    def render(self, frame: Frame, index: int, *, track: bool = False) -> Rendered:
        """`frame` (H×W×3 uint8 RGB, frame `index` of the target) through the chain, via `pipeline.process_frame`
        (the path every batch of a run takes). Without `track`, the faces of frame `index` are found once and
        kept, so changing a processor option re-runs only the chain."""
        with self._lock:
            started = time.perf_counter()
            if self.faces is None:
                ctx, detected = FrameContext(index=index), ()
            elif not track and index in self._found:
                ctx, detected = self._found[index]
            else:
                if not track:
                    self.faces.stage.restart()
                ((_, ctx),) = list(self.faces.annotate([frame], index))
                if track:
                    detected = ctx.faces
                else:
                    stage = self.faces.stage
                    detected = stage.label_people(frame, stage.analyser.detect(frame), ctx.faces)
                    self._found[index] = (ctx, detected)
                    while len(self._found) > _FRAMES_KEPT:
                        self._found.pop(next(iter(self._found)))
            # What a run's context holds too: the frame's time in the target and the frame as read.
            ctx = replace(ctx, time=self.times[index] if index < len(self.times) else None, original=frame)
            faces_done = time.perf_counter()
            after = pipeline.process_frame(self.chain, frame, ctx)
            done = time.perf_counter()
        return Rendered(frame, after, detected, ctx.faces, (faces_done - started) * 1000, (done - faces_done) * 1000)


def _camera_info(fps: float) -> tuple[video.MediaInfo, video.Span]:
    """What the face stage needs to know of a camera stream: its rate (the frame size is checked per frame)."""
    rate = video.output_rate(fps)
    info = video.MediaInfo(
        path=LIVE_TARGET, kind="video", width=640, height=480, frame_count=0, fps=float(rate),
        fps_rational=f"{rate.numerator}/{rate.denominator}", duration=0.0, rotation=0, has_audio=False,
        audio_codec=None, vfr=True, video_codec=None, pix_fmt="rgb24", format_name="camera",
        time_base=Fraction(1, 90000), timestamps=(),
    )  # fmt: skip
    span = video.Span(Fraction(0), None, 0, None, rate, False, 0, 0, video.FrameTimes.constant(rate), 1 / rate)
    return info, span


class _BriefBetweenBatches:
    """A run's Progress that, after each batch it reports, lets the brief model work waiting (a preview, a face
    search) go first (`ModelLock.let_brief`; nothing when the run's thread does not hold the lock)."""

    def __init__(self, inner: Progress, lock: ModelLock) -> None:
        self.inner, self.lock = inner, lock

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        self.inner.stage(name, total, unit)

    def advance(self, n: int = 1) -> None:
        self.inner.advance(n)
        self.lock.let_brief()

    def close(self) -> None:
        self.inner.close()


def _check_pixels(target: Path, width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise InvalidInput(
            f"{Path(target).name} is {width}×{height} = {width * height} pixels, above runtime.max_pixels="
            f"{max_pixels}: scale it down first, or raise runtime.max_pixels"
        )


class Service:
    """What every front end asks of the engine (see the module docstring)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        # Held by every piece of model work from any front end: one job at a time on the GPU, and the shared
        # runtimes are used from one thread at a time.
        self.model_lock = ModelLock()
        self._lock = threading.Lock()
        self._runtimes: dict[RuntimeSettings, Runtime] = {}
        self._frames: OrderedDict[tuple[Any, ...], Frame] = OrderedDict()
        self._renderers: OrderedDict[tuple[Any, ...], FrameRenderer] = OrderedDict()
        self.catalogue = Catalogue(registry, self._runtime_for_models)

    # -- jobs ---------------------------------------------------------------------------------------------------
    def runtime(self, settings: RuntimeSettings, progress_factory: ProgressFactory | None = None) -> Runtime:
        """One warm Runtime per runtime settings: models stay loaded between jobs."""
        with self._lock:
            if settings not in self._runtimes:
                self._runtimes[settings] = Runtime(settings, progress_factory=progress_factory)
            return self._runtimes[settings]

    def _runtime_for_models(self, settings: RuntimeSettings, progress: ProgressFactory | None) -> Runtime:
        """The warm runtime, or a fresh one when downloads report their progress to `progress` (a warm runtime
        keeps the progress reporting it was made with)."""
        return self.runtime(settings) if progress is None else Runtime(settings, progress_factory=progress)

    def preset(self, raw: Mapping[str, Any]) -> Preset:
        return Preset.parse(raw, self.registry)

    def job(self, raw: Mapping[str, Any], target: Path, output: Path, sources: Sequence[Path] = ()) -> Job:
        return Job.parse(
            {**raw, "target": str(target), "output": str(output), "sources": [str(s) for s in sources]}, self.registry
        )

    def chain(self, job: Preset, runtime: Runtime) -> list[FrameProcessor]:
        """The job's processors in order, each bound to the job (`FrameProcessor.bind_job`: the lip syncer takes
        its audio there); each loads its models now (once per job: sessions stay warm)."""
        chain = [self.registry[pid](job.options[pid], runtime) for pid in job.processors]
        if isinstance(job, Job):
            for processor in chain:
                processor.bind_job(job)
        return chain

    def run(
        self,
        job: Job,
        progress: Progress | None = None,
        *,
        overwrite: bool = False,
        downloads: ProgressFactory | None = None,
        **kwargs: Any,
    ) -> pipeline.RunReport:
        """Run `job` on its warm runtime (the caller holds `model_lock` when it shares the process: after each
        batch, brief work waiting for it goes first); `kwargs` as `pipeline.run` takes them (resume, renderer,
        signing). `downloads`: progress of model downloads (a one-shot front end's runtime; a warm one keeps what
        it was made with)."""
        runtime = self.runtime(job.runtime, downloads)
        try:
            chain = self.chain(job, runtime)
        except ModelUnavailable:
            if job.runtime.offline:
                # A processor stops at its own missing files: offline, name every file the job needs in one error,
                # its face analyser's too, so they can all be fetched at once. (The job's own checks — chain
                # order, landmarks — run after the chain is built, so they are not put behind a download.)
                runtime.ensure_each(self.catalogue.for_preset(job))
            raise
        between = _BriefBetweenBatches(progress or NullProgress(), self.model_lock)
        return pipeline.run(job, chain, runtime, between, overwrite=overwrite, **kwargs)

    # -- single frames ------------------------------------------------------------------------------------------
    def frame(self, target: Path, index: int, max_pixels: int) -> Frame:
        """Frame `index` (0-based, clamped to the last) of an image or video target, H×W×3 uint8 RGB; refused, as
        a run would refuse it, when the target's frames are over `max_pixels` (width × height)."""
        key = (*file_key(target), index)
        with self._lock:
            kept = self._frames.get(key)
            if kept is not None:
                self._frames.move_to_end(key)
        if kept is not None:
            _check_pixels(target, kept.shape[1], kept.shape[0], max_pixels)
            return kept
        info = video.probe(target)
        _check_pixels(target, info.width, info.height, max_pixels)
        frame = self._decode(Path(target), info, index)
        with self._lock:
            self._frames[key] = frame
            while len(self._frames) > _FRAMES_KEPT:
                self._frames.popitem(last=False)
        return frame

    @staticmethod
    def _decode(target: Path, info: video.MediaInfo, index: int) -> Frame:
        if info.kind == "image":
            return video.read_image(target)[0]
        last = None
        with video.FrameReader(target) as reader:
            for i, frame in enumerate(reader):
                last = frame
                if i >= index:
                    break
        if last is None:
            raise InvalidInput(f"{target.name} has no frames")
        return last

    def renderer(self, raw: Mapping[str, Any], target: Path, sources: Sequence[Path] = ()) -> FrameRenderer:
        """A FrameRenderer for these settings on `target`. The face stage (detector, source identity, reference)
        is kept while the face settings, sources and target stay the same, so a processor option change costs
        only the chain; the chain is rebuilt from `raw` every call (its models are warm)."""
        job = self.job(raw, target, Path(target).with_name("preview.png"), sources)
        runtime = self.runtime(job.runtime)
        chain = self.chain(job, runtime)
        key = (
            job.faces,
            job.runtime,
            tuple(file_key(s) for s in sources),
            file_key(target),
            tuple(p.id for p in chain if p.needs_faces or p.needs_source),
        )
        with self._lock:
            kept = self._renderers.get(key)
        if kept is not None:
            kept.update_chain(chain)
            kept.job = job
            return kept
        info = video.probe(target)
        span = video.select(info)
        times = tuple(float(t * info.time_base) for t in info.timestamps) if info.kind == "video" else ()
        made = FrameRenderer(job, runtime, chain, face_stage(job, chain, runtime, info, span), times=times)
        with self._lock:
            self._renderers[key] = made
            while len(self._renderers) > _FRAMES_KEPT:
                self._renderers.popitem(last=False)
        return made

    def preview(self, raw: Mapping[str, Any], target: Path, sources: Sequence[Path], index: int) -> Rendered:
        """Frame `index` of `target` through the chain `raw` describes (the same path every batch of a run takes),
        refused over `runtime.max_pixels` like a run."""
        renderer = self.renderer(raw, target, sources)
        frame = self.frame(target, index, renderer.job.runtime.max_pixels)
        return renderer.render(frame, index)

    # -- live streams -------------------------------------------------------------------------------------------
    def live_renderer(
        self, raw: Mapping[str, Any], sources: Sequence[Path] = (), *, fps: float = 30.0
    ) -> FrameRenderer:
        """A FrameRenderer for a camera stream: no target file, a face stage of its own (never shared or cached:
        its tracker follows one stream's faces, and two streams must not see each other's), rendering with
        `render(frame, index, track=True)`. `fps`: the rate it will be given frames at (smoothing works in
        seconds). The caller holds `model_lock` (models load here).

        faces.selector = reference needs faces.reference_image: a camera has no frame to take the reference
        from before it streams."""
        job = self.job(raw, LIVE_TARGET, LIVE_OUTPUT, sources)
        if job.faces.selector == "reference" and job.faces.reference_image is None:
            raise InvalidInput(
                "live: faces.selector=reference needs a reference image (a camera has no frame to take it from "
                "yet): pick a face picture as the reference, or choose another selector"
            )
        runtime = self.runtime(job.runtime)
        chain = self.chain(job, runtime)
        info, span = _camera_info(fps)
        return FrameRenderer(job, runtime, chain, face_stage(job, chain, runtime, info, span))

    def live_update(
        self, renderer: FrameRenderer, raw: Mapping[str, Any], sources: Sequence[Path] = (), *, fps: float = 30.0
    ) -> FrameRenderer:
        """The renderer a live stream goes on with after a settings change: `renderer` itself with the new chain
        from its next frame (processor options only), or a new live renderer when the face settings, the sources
        or which processors need faces changed (the source identity and tracker are rebuilt, for `fps` frames per
        second). The caller holds `model_lock`."""
        job = self.job(raw, LIVE_TARGET, LIVE_OUTPUT, sources)
        runtime = self.runtime(job.runtime)
        chain = self.chain(job, runtime)

        def face_key(j: Job, c: Sequence[FrameProcessor]) -> tuple[Any, ...]:
            return j.faces, j.runtime, j.sources, tuple(p.id for p in c if p.needs_faces or p.needs_source)

        if face_key(job, chain) != face_key(renderer.job, renderer.chain):
            return self.live_renderer(raw, sources, fps=fps)
        renderer.update_chain(chain)
        renderer.job = job
        return renderer

    # -- faces --------------------------------------------------------------------------------------------------
    def analyser(self, settings: FacesSettings) -> FaceAnalyser:
        """The warm analyser `settings` name (offline: embedded, or downloaded files already present)."""
        return build_analyser(settings, self.runtime(RuntimeSettings(offline=True)))

    def find_faces(self, image: Frame, settings: FacesSettings) -> list[Face]:
        """Every face on `image` (H×W×3 uint8 RGB), largest first as the analyser orders them."""
        return self.analyser(settings).detect(image)

    def people(
        self,
        target: Path,
        settings: FacesSettings,
        runtime: RuntimeSettings | None = None,
        downloads: ProgressFactory | None = None,
        turn: TakeTurn = nullcontext,
    ) -> Scan:
        """The people of `target` as `faces scan` finds them (`engine.faces.people.scan`), kept per runtime: the
        previews and runs of these runtime settings (default: the default ones) number people from the same scan.
        Refused over `max_pixels` like a run. `downloads`: progress of an analyser's model download. `turn`: what
        the model work runs in, piece by piece (the analyser's loading, then each sample): `model_lock.brief`
        from a front end that shares the process, so a scan during a run goes between its batches sample by
        sample; the default, nothing, when the caller holds the lock or has the process to itself."""
        runtime_settings = runtime or RuntimeSettings()
        info = video.probe(target)
        _check_pixels(target, info.width, info.height, runtime_settings.max_pixels)
        with turn():
            warm = self._runtime_for_models(runtime_settings, downloads)
            analyser = build_analyser(settings, warm)
        return scan_target(settings, warm, analyser, Path(target), turn)

    # -- models -------------------------------------------------------------------------------------------------
    def manifest(self) -> Manifest:
        """The catalogue in use (the built-in one or $FACESTUDIO_MANIFEST's, plus this machine's exports)."""
        return self.runtime(RuntimeSettings(offline=True)).manifest
