"""The engine as front ends see it: the CLI, the web UI, the jobs API and the live mode call this, nothing deeper.

One `Service` per process holds the processor registry it was given (the engine never imports `processors/`),
warm runtimes (models stay loaded between jobs), and small caches for single frames. It builds jobs and chains,
runs jobs, renders single frames through the chain (previews; live streams keep their tracker through a
`FrameRenderer` of their own, `live_renderer`), finds faces; its `catalogue` (engine/serve/catalogue.py) lists, fetches,
verifies and exports models.

Who asks decides what a job may be (`Access`, docs/SECURITY.md): the operator (the CLI) may set anything and name
any file; a user of the studio, the jobs API or live may not set the server's settings (`Shown(server=True)`: the
operator's launch-time values apply instead) and may name only files of their own — the target, the sources and
every file setting (`Shown(file=…)`) — as the front end's record of their uploads says. Every method that builds a
job, a renderer or a scan from a front end's settings and files takes the caller's `Access` and checks it here,
once for every front end.

Not thread-safe for model work by itself: callers serialise model work with `model_lock`
(engine/serve/model_lock.py), as the UI and the jobs API do, so one job at a time uses the GPU: a run holds it, single
frames and face searches take it `brief()`ly, and `run` lets those in between its batches.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from engine import media as video
from engine.core.errors import InvalidInput, InvalidJob, ModelUnavailable
from engine.core.options import shown
from engine.core.progress import NullProgress, Progress
from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser
from engine.faces.people import Scan, TakeTurn
from engine.job.processor import FrameContext, FrameProcessor
from engine.job.settings import SETTINGS_GROUPS, FacesSettings, Job, Preset, RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import ProgressFactory, Runtime
from engine.run import pipeline
from engine.run.chain import chain_alpha
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
class Access:
    """Who a job, preview, scan or stream is for, and so what its settings and files may be.

    `owns`: None for the operator (the CLI: every setting, any file by path). For a user of the studio, the jobs
    API or live, whether a path (as given) is a file of theirs — one they uploaded or were given by the server —
    as the front end's server-side record says (never the path's shape). A user's settings may not include the
    server's (`Shown(server=True)`); `server` holds the operator's values of those (group → field → value, from
    launch: `ui --max-pixels`, a server preset), applied to every job of a user. `max_frames`: the most frames a
    user's job may render (None: no limit)."""

    owns: Callable[[Path], bool] | None = None
    server: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_frames: int | None = None

    @property
    def operator(self) -> bool:
        return self.owns is None


OPERATOR = Access()


def server_settings(registry: Registry) -> dict[str, list[str]]:
    """The operator's settings of every group (a processor's options, faces, video, runtime): group → field names
    declared `Shown(server=True)`, in declaration order; groups without any are left out."""
    groups = {**{pid: cls.Options for pid, cls in registry.items()}, **SETTINGS_GROUPS}
    found = {g: [n for n, info in model.model_fields.items() if shown(info).server] for g, model in groups.items()}
    return {group: names for group, names in found.items() if names}


def file_settings(registry: Registry) -> dict[str, list[str]]:
    """The settings that name a file (`Shown(file=…)`): group → field names, groups without any left out."""
    groups = {**{pid: cls.Options for pid, cls in registry.items()}, **SETTINGS_GROUPS}
    found = {g: [n for n, info in model.model_fields.items() if shown(info).file] for g, model in groups.items()}
    return {group: names for group, names in found.items() if names}


def operator_values(raw: Mapping[str, Any], registry: Registry) -> dict[str, dict[str, Any]]:
    """A server preset's values (`ui --server-preset`): the operator's settings it gives, group → field → value,
    validated by their groups' models. Any other setting is refused (InvalidJob, naming it): a server preset
    holds what users may not choose, and nothing they may."""
    allowed = server_settings(registry)
    others = [
        f"{group}.{name}" if isinstance(values, Mapping) else group
        for group, values in raw.items()
        for name in (values if isinstance(values, Mapping) else [None])
        if group not in allowed or name not in allowed[group]
    ]
    if others:
        every = ", ".join(f"{g}.{n}" for g, names in allowed.items() for n in names)
        raise InvalidJob(f"a server preset sets only the server's settings ({every}), not {', '.join(others)}")
    groups = {**{pid: cls.Options for pid, cls in registry.items()}, **SETTINGS_GROUPS}
    out: dict[str, dict[str, Any]] = {}
    for group, values in raw.items():
        try:
            checked = groups[group].model_validate(dict(values))
        except ValueError as exc:
            raise InvalidJob(f"server preset, {group}: {str(exc).splitlines()[-1].strip()}") from None
        out[group] = {name: getattr(checked, name) for name in values}
    return out


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
            alpha = chain_alpha(self.chain, index)
            if alpha is not None:  # shown as a picture shows transparency
                after = on_checkerboard(after, alpha)
            done = time.perf_counter()
        return Rendered(frame, after, detected, ctx.faces, (faces_done - started) * 1000, (done - faces_done) * 1000)


def on_checkerboard(frame: Frame, alpha: npt.NDArray[np.uint8], square: int = 16) -> Frame:
    """`frame` (H×W×3 uint8 RGB) over a grey checkerboard of `square` px by `alpha` (H'×W' uint8, 255 = opaque;
    resized to the frame): how the preview shows an output's transparency."""
    height, width = frame.shape[:2]
    if alpha.shape != (height, width):
        alpha = cv2.resize(alpha, (width, height), interpolation=cv2.INTER_LINEAR)
    rows, cols = np.indices((height, width)) // square
    board = np.where(((rows + cols) % 2 == 0)[..., None], 204, 153).astype(np.float32)
    a = alpha[..., None].astype(np.float32) / 255.0
    return np.clip(np.rint(frame * a + board * (1.0 - a)), 0, 255).astype(np.uint8)


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

    # -- who asks ----------------------------------------------------------------------------------------------
    def admit(self, raw: Mapping[str, Any], files: Sequence[Path] = (), access: Access = OPERATOR) -> dict[str, Any]:
        """`raw` as `access` may have it: unchanged for the operator. For a user: refused (InvalidInput, one line
        naming them) when it sets any of the server's settings, or when `files` (the target, sources) or a file
        setting name a file that is not theirs (the line names no path and says nothing of whether it exists);
        then the operator's values of the server's settings put in."""
        out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
        if access.owns is None:
            return out
        refused = [
            f"{group}.{name}"
            for group, names in server_settings(self.registry).items()
            for name in names
            if isinstance(out.get(group), Mapping) and name in out[group]
        ]
        if refused:
            raise InvalidInput(
                f"{', '.join(refused)} {'is' if len(refused) == 1 else 'are'} the server's to set (its operator "
                "chooses them when starting it): leave them out"
            )
        self.check_files(files, access)
        for group, names in file_settings(self.registry).items():
            for name in names:
                value = (out.get(group) or {}).get(name) if isinstance(out.get(group), Mapping) else None
                if value not in (None, "") and not access.owns(Path(str(value))):
                    raise InvalidInput(
                        f"{group}.{name} takes a file you uploaded to this server (a path on the server is its "
                        "operator's to give): upload the file for it"
                    )
        for group, values in access.server.items():
            out[group] = {**(out.get(group) or {}), **values}
        return out

    @staticmethod
    def check_files(files: Sequence[Path | str], access: Access = OPERATOR) -> None:
        """Refuse (InvalidInput, naming no path) when any of `files` is not one `access` owns."""
        if access.owns is None:
            return
        for path in files:
            if not access.owns(Path(path)):
                raise InvalidInput(
                    f"{Path(path).name or 'that file'} is not a file you uploaded to this server (or it has expired): "
                    "upload it"
                )

    def preset(self, raw: Mapping[str, Any], access: Access = OPERATOR) -> Preset:
        return Preset.parse(self.admit(raw, (), access), self.registry)

    def job(
        self,
        raw: Mapping[str, Any],
        target: Path,
        output: Path,
        sources: Sequence[Path] = (),
        access: Access = OPERATOR,
        *,
        files: Sequence[Path] | None = None,
    ) -> Job:
        """The job `raw` describes on these files, as `access` may have it (`admit`). `files`: the ones the caller
        gave (default: the target and sources), checked against `access`; `output` is the caller's to choose."""
        given = [target, *sources] if files is None else files
        admitted = self.admit(raw, given, access)
        return Job.parse(
            {**admitted, "target": str(target), "output": str(output), "sources": [str(s) for s in sources]},
            self.registry,
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
    def frame(self, target: Path, index: int, max_pixels: int, access: Access = OPERATOR) -> Frame:
        """Frame `index` (0-based, clamped to the last) of an image or video target, H×W×3 uint8 RGB; refused, as
        a run would refuse it, when the target's frames are over `max_pixels` (width × height), or when `target`
        is not a file `access` owns."""
        self.check_files([target], access)
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

    def renderer(
        self, raw: Mapping[str, Any], target: Path, sources: Sequence[Path] = (), access: Access = OPERATOR
    ) -> FrameRenderer:
        """A FrameRenderer for these settings on `target` (as `access` may have them: `admit`). The face stage
        (detector, source identity, reference) is kept while the face settings, sources and target stay the same,
        so a processor option change costs only the chain; the chain is rebuilt from `raw` every call (its models
        are warm)."""
        job = self.job(raw, target, Path(target).with_name("preview.png"), sources, access)
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

    def preview(
        self, raw: Mapping[str, Any], target: Path, sources: Sequence[Path], index: int, access: Access = OPERATOR
    ) -> Rendered:
        """Frame `index` of `target` through the chain `raw` describes (the same path every batch of a run takes),
        refused over `runtime.max_pixels` like a run, and as `access` may have it (`admit`)."""
        renderer = self.renderer(raw, target, sources, access)
        frame = self.frame(target, index, renderer.job.runtime.max_pixels)
        return renderer.render(frame, index)

    # -- live streams -------------------------------------------------------------------------------------------
    def live_renderer(
        self, raw: Mapping[str, Any], sources: Sequence[Path] = (), *, fps: float = 30.0, access: Access = OPERATOR
    ) -> FrameRenderer:
        """A FrameRenderer for a camera stream: no target file, a face stage of its own (never shared or cached:
        its tracker follows one stream's faces, and two streams must not see each other's), rendering with
        `render(frame, index, track=True)`. `fps`: the rate it will be given frames at (smoothing works in
        seconds). The caller holds `model_lock` (models load here).

        faces.selector = reference needs faces.reference_image: a camera has no frame to take the reference
        from before it streams. `access`: as for `job` (a camera is no file: only the sources are checked)."""
        job = self.job(raw, LIVE_TARGET, LIVE_OUTPUT, sources, access, files=sources)
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
        self,
        renderer: FrameRenderer,
        raw: Mapping[str, Any],
        sources: Sequence[Path] = (),
        *,
        fps: float = 30.0,
        access: Access = OPERATOR,
    ) -> FrameRenderer:
        """The renderer a live stream goes on with after a settings change: `renderer` itself with the new chain
        from its next frame (processor options only), or a new live renderer when the face settings, the sources
        or which processors need faces changed (the source identity and tracker are rebuilt, for `fps` frames per
        second). The caller holds `model_lock`. `access`: as for `live_renderer`."""
        job = self.job(raw, LIVE_TARGET, LIVE_OUTPUT, sources, access, files=sources)
        runtime = self.runtime(job.runtime)
        chain = self.chain(job, runtime)

        def face_key(j: Job, c: Sequence[FrameProcessor]) -> tuple[Any, ...]:
            return j.faces, j.runtime, j.sources, tuple(p.id for p in c if p.needs_faces or p.needs_source)

        if face_key(job, chain) != face_key(renderer.job, renderer.chain):
            return self.live_renderer(raw, sources, fps=fps, access=access)
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
        access: Access = OPERATOR,
    ) -> Scan:
        """The people of `target` as `faces scan` finds them (`engine.faces.people.scan`), kept per runtime: the
        previews and runs of these runtime settings (default: the default ones) number people from the same scan.
        Refused over `max_pixels` like a run. `downloads`: progress of an analyser's model download. `turn`: what
        the model work runs in, piece by piece (the analyser's loading, then each sample): `model_lock.brief`
        from a front end that shares the process, so a scan during a run goes between its batches sample by
        sample; the default, nothing, when the caller holds the lock or has the process to itself. `access`: the
        target must be its file (a user's `runtime` comes from `preset(raw, access)`: the server's settings in)."""
        self.check_files([target], access)
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
