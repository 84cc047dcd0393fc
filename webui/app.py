"""The facestudio web UI: a notebook of cells generated from the processor registry (DESIGN.md §9).

Top to bottom: consent · preset · Source · Target · one cell per registered processor · Faces · Output settings ·
Run · Result · Models. Every job goes through `engine.pipeline` exactly as the CLI's does; the preview renders
one frame through `pipeline.process_frame`, the path every batch of a full run takes.

Isolation: each browser session works in its own folder under a private work directory that Gradio does not
serve; what a session gets back (its output and sidecar) is handed to Gradio, which serves it under an
unguessable content-hash URL. All model work shares one queue (`concurrency_id="gpu"`), one job at a time, and
one lock (`Studio.gpu`) that the jobs API's worker takes too (webui/jobs.py). Probes, metrics and the jobs API are
served beside the UI on the same port (webui/server.py).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import shutil
import tempfile
import threading
import typing
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import tomli_w

from engine import consent, pipeline
from engine import media as video
from engine.errors import Cancelled, FacestudioError, InvalidInput
from engine.faces import FaceAnalyser
from engine.faces.stage import FaceStage, build_analyser
from engine.health import Readiness
from engine.job import PRESETS_DIR, SETTINGS_GROUPS, FacesSettings, Job, Preset, RuntimeSettings, load_preset_raw
from engine.metrics import observe_job
from engine.models import fetch
from engine.models.manifest import Manifest
from engine.models.runtime import Runtime
from engine.processor import FrameContext, FrameProcessor
from engine.types import Frame
from webui import server
from webui.jobs import JobQueue, parse_preset_text
from webui.widgets import fields, from_widget, unwrap, widget

log = logging.getLogger(__name__)

# Fields whose Literal values are model ids: their choices are labelled with licence and availability.
MODEL_FIELDS = frozenset({"model", "detail_model"})
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff"})


@dataclass(frozen=True)
class UISettings:
    """How the app is served. `max_file_size`: the largest upload accepted (e.g. "2gb", "500mb"); `queue_size`:
    jobs waiting at most (in the UI's queue, and in the jobs API's), beyond which new ones are refused;
    `ready_preset`: the preset (name or TOML file) whose models `/readyz` requires; `min_free_gb`: free space, in
    GB (10^9 bytes), the temp folder must keep for `/readyz`."""

    host: str = "127.0.0.1"
    port: int = 7860
    share: bool = False
    auth: tuple[str, str] | None = None
    max_file_size: str = "2gb"
    queue_size: int = 16
    ready_preset: str = "default"
    min_free_gb: float = 1.0


class _UIProgress:
    """`engine.progress.Progress` shown by a gr.Progress bar (stage, count, ETA); raises Cancelled once the
    session's cancel flag is set, so the pipeline stops between batches and removes its partial output."""

    def __init__(self, progress: gr.Progress, cancel: threading.Event) -> None:
        self.progress = progress
        self.cancel = cancel
        self.name, self.total, self.done, self.unit = "", None, 0, "frame"

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        self.name, self.total, self.done, self.unit = name, total, 0, unit
        self._show()

    def advance(self, n: int = 1) -> None:
        if self.cancel.is_set():
            raise Cancelled("cancelled from the UI; nothing was written")
        self.done += n
        self._show()

    def close(self) -> None:
        pass

    def _show(self) -> None:
        self.progress((self.done, self.total), desc=self.name, unit=self.unit)


def _error(exc: Exception) -> gr.Error:
    """The one-line message the UI shows for a failure (foreseeable ones as they are, bugs as such)."""
    if isinstance(exc, FacestudioError):
        return gr.Error(str(exc), print_exception=False)
    log.exception("internal error in the UI")
    return gr.Error(f"internal error: {type(exc).__name__}: {exc}", print_exception=False)


def _frame_at(path: Path, index: int) -> Frame:
    """Frame `index` (0-based, clamped to the last) of an image or video, H×W×3 uint8 RGB."""
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return video.read_image(path)[0]
    last = None
    with video.FrameReader(path) as reader:
        for frame in itertools.islice(reader, index + 1):
            last = frame
    if last is None:
        raise InvalidInput(f"{path.name} has no frames")
    return last


class Studio:
    """The app's state: the registry its cells come from, warm runtimes, per-session folders and cancel flags.

    Thread-safe: Gradio calls handlers from worker threads; model work is serialised by the "gpu" queue.
    """

    def __init__(self, registry: Mapping[str, type[FrameProcessor]] | None = None, work_dir: Path | None = None):
        if registry is None:
            from processors import REGISTRY

            registry = REGISTRY
        self.registry = registry
        # Under the system temp folder (Gradio may hand out files from there) but not in Gradio's cache, so
        # nothing in it is reachable by URL until a session's own handler returns it.
        self.work = work_dir or Path(tempfile.mkdtemp(prefix="facestudio-ui-"))
        self._lock = threading.Lock()
        # Held by every piece of model work (runs, previews, face finding), from the UI and the jobs API alike:
        # one job at a time on the GPU, and the shared runtimes are used from one thread at a time.
        self.gpu = threading.Lock()
        self._cancels: dict[str, threading.Event] = {}
        self._runtimes: dict[RuntimeSettings, Runtime] = {}
        self._counter = itertools.count(1)
        # (group, field) for each settings widget, in the order the handlers receive their values.
        self.keys: list[tuple[str, str]] = []

    # -- sessions ---------------------------------------------------------------------------------------------
    def _session_path(self, request: gr.Request | None) -> Path:
        # The session hash comes from the client: only letters, digits, - and _ may name a folder.
        session = (request.session_hash if request is not None else None) or "anonymous"
        if not session.replace("-", "").replace("_", "").isalnum():
            raise InvalidInput("invalid session")
        return self.work / session

    def session_dir(self, request: gr.Request | None) -> Path:
        """This browser session's own work folder (created on first use)."""
        folder = self._session_path(request)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def cancel_flag(self, request: gr.Request | None) -> threading.Event:
        key = self.session_dir(request).name
        with self._lock:
            return self._cancels.setdefault(key, threading.Event())

    def end_session(self, request: gr.Request) -> None:
        """Delete a closed session's folder (its uploads were Gradio's, its outputs were copied out)."""
        folder = self._session_path(request)
        shutil.rmtree(folder, ignore_errors=True)
        with self._lock:
            self._cancels.pop(folder.name, None)

    def runtime(self, settings: RuntimeSettings) -> Runtime:
        """One warm Runtime per runtime settings: models stay loaded between jobs."""
        with self._lock:
            if settings not in self._runtimes:
                self._runtimes[settings] = Runtime(settings)
            return self._runtimes[settings]

    # -- settings <-> widgets ---------------------------------------------------------------------------------
    def raw_from(self, values: Sequence[Any]) -> dict[str, Any]:
        """The preset mapping the settings widgets describe (processors in registry order)."""
        raw: dict[str, Any] = {"processors": []}
        for (group, name), value in zip(self.keys, values, strict=True):
            if group == "enable":
                if value:
                    raw["processors"].append(name)
                continue
            if group == "backend":
                if value != "job":
                    raw.setdefault(name, {})["backend"] = value
                continue
            model = SETTINGS_GROUPS[group] if group in SETTINGS_GROUPS else self.registry[group].Options
            raw.setdefault(group, {})[name] = from_widget(model.model_fields[name], value)
        faces = raw.get("faces", {})
        if faces.get("selector") != "reference":
            # A face picked earlier stays shown, but only counts while the selector says "reference".
            faces.pop("reference_image", None)
        return raw

    def values_from(self, preset: Preset) -> list[Any]:
        """Every settings widget's value for `preset` (the inverse of `raw_from`)."""
        values = []
        for group, name in self.keys:
            if group == "enable":
                values.append(name in preset.processors)
            elif group == "backend":
                options = preset.options.get(name)
                values.append((options.backend if options else None) or "job")
            elif group in SETTINGS_GROUPS:
                values.append(_shown(getattr(getattr(preset, group), name)))
            else:
                options = preset.options.get(group) or self.registry[group].Options()
                values.append(_shown(getattr(options, name)))
        return values

    def _model_choices(self, model_ids: Sequence[Any], manifest: Manifest, runtime: Runtime) -> list[tuple[str, Any]]:
        choices = []
        for model_id in model_ids:
            spec = manifest.models.get(str(model_id))
            if spec is None:
                choices.append((str(model_id), model_id))
                continue
            use = "commercial use OK" if spec.commercial_use else "non-commercial"
            choices.append((f"{model_id} · {self._availability(spec, runtime)} · {use}", model_id))
        return choices

    @staticmethod
    def _availability(spec: Any, runtime: Runtime) -> str:
        """embedded, downloaded or missing, from file presence and size (hashing waits for the run)."""
        if spec.embedded:
            return "embedded"
        for file in spec.files:
            path = runtime.local_path(file)
            if path.is_file() and (file.size is None or path.stat().st_size == file.size):
                return "downloaded"
        return "missing"

    def save_preset(self, name: str, values: Sequence[Any], folder: Path) -> Path:
        """Write the widgets' settings as `folder/NAME.toml` (a preset `presets check` accepts); the reference
        image is left out, being a file of this session."""
        stem = "".join(c for c in (name or "").strip() if c.isalnum() or c in "-_")
        if not stem:
            raise InvalidInput("name the preset (letters, digits, - and _)")
        raw = self.raw_from(values)
        raw.get("faces", {}).pop("reference_image", None)
        preset = Preset.parse(raw, self.registry)
        path = folder / f"{stem}.toml"
        path.write_text(tomli_w.dumps(_toml_ready(preset.to_raw())), encoding="utf-8")
        return path

    def find_faces(self, target: str | None, index: int, values: Sequence[Any], folder: Path) -> list[Frame]:
        """Crops of every face on frame `index` of the target (analyser as the Faces cell sets it), each also
        saved as `folder/face-<i>.png`, the file a click makes the reference image."""
        if not target:
            raise InvalidInput("add a target first")
        frame = _frame_at(Path(target), index)
        with self.gpu:
            crops = [_crop(frame, face.box) for face in self.analyser(values).detect(frame)]
        for i, crop in enumerate(crops):
            video.write_image(folder / f"face-{i}.png", crop)
        return crops

    def analyser(self, values: Sequence[Any]) -> FaceAnalyser:
        """The face analyser the Faces cell's settings name (models verified offline: embedded or present)."""
        settings = FacesSettings.model_validate(self.raw_from(values).get("faces", {}))
        return build_analyser(settings, self.runtime(RuntimeSettings(offline=True)))

    @staticmethod
    def download(model_id: str | None, runtime: Runtime, progress_factory: Any = None) -> list[Path]:
        """Download a model's files as `models fetch` does: an embedded model's official originals, else the file
        the default backend loads. Returns the paths now present."""
        if not model_id:
            raise InvalidInput("choose a model first")
        spec = runtime.manifest.get(model_id)
        files = (
            [f for f in spec.files if not f.embedded]
            if spec.embedded
            else [runtime.choose_file(spec, runtime.backend_for(None))]
        )
        return fetch.ensure(files, runtime.folders.models, offline=False, progress_factory=progress_factory)

    # -- running ----------------------------------------------------------------------------------------------
    def execute(
        self, raw: dict[str, Any], target: str | None, sources: Sequence[str], folder: Path, progress: Any
    ) -> pipeline.RunReport:
        """Run one job on `target` into `folder`; typed errors only, nothing half-written left behind."""
        if not target:
            raise InvalidInput("add a target image or video first")
        target_path = Path(target)
        suffix = target_path.suffix.lower() if target_path.suffix.lower() in IMAGE_SUFFIXES else ".mp4"
        output = folder / f"{next(self._counter):04d}-{target_path.stem[:40]}-facestudio{suffix}"
        with self.gpu, observe_job():
            job, runtime, chain = self._prepare(raw, target, output, sources)
            # The session folder is the UI's own: a name left by an earlier app run with the same counter is stale.
            return pipeline.run(job, chain, runtime, progress, overwrite=True)

    def _prepare(
        self, raw: dict[str, Any], target: str, output: Path, sources: Sequence[str]
    ) -> tuple[Job, Runtime, list[FrameProcessor]]:
        """The validated job, its warm runtime and its processor chain (models loaded)."""
        job = Job.parse({**raw, "target": target, "output": str(output), "sources": list(sources)}, self.registry)
        runtime = self.runtime(job.runtime)
        return job, runtime, [self.registry[pid](job.options[pid], runtime) for pid in job.processors]

    def preview(self, raw: dict[str, Any], target: str | None, sources: Sequence[str], index: int) -> Frame:
        """Frame `index` of the target through the chain, via `pipeline.process_frame` (what a run does)."""
        if not target:
            raise InvalidInput("add a target image or video first")
        frame = _frame_at(Path(target), index)
        with self.gpu:
            job, runtime, chain = self._prepare(raw, target, self.work / "preview.png", sources)
            ctx = FrameContext(index=index)
            if any(p.needs_faces for p in chain):
                stage = FaceStage.create(job.faces, runtime, [Path(s) for s in sources], Path(target))
                ((_, found),) = list(stage.annotate([frame]))
                ctx = FrameContext(index=index, faces=found, source=stage.source)
            return pipeline.process_frame(chain, frame, ctx)

    # -- the app ----------------------------------------------------------------------------------------------
    def build(self) -> gr.Blocks:
        """The Blocks app. Cells for processors come from the registry and their Options models."""
        runtime = Runtime(RuntimeSettings(offline=True))
        manifest = runtime.manifest
        default = Preset.parse(load_preset_raw("default"), self.registry)
        self.keys = []
        settings: list[gr.Component] = []

        def add(group: str, name: str, component: gr.Component) -> None:
            self.keys.append((group, name))
            settings.append(component)

        with gr.Blocks(title="facestudio", delete_cache=(3600, 6 * 3600)) as app:
            gr.Markdown("# facestudio\nSwap and restore faces, upscale frames, keep the audio.")
            with gr.Group():
                gr.Markdown(f"**Responsible use.** {consent.NOTICE}")
                agreed = gr.Checkbox(
                    label="I have read this and have the consent of the people shown", value=False, elem_id="consent"
                )
            with gr.Row():
                preset_names = sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))
                preset_pick = gr.Dropdown(preset_names, value="default", label="preset", scale=2)
                preset_load = gr.Button("Load preset", scale=1)
                preset_name = gr.Textbox(label="save as", placeholder="my-preset", scale=2)
                preset_save = gr.Button("Save as preset", scale=1)
            preset_file = gr.File(label="saved preset", visible=False)

            with gr.Accordion("Source", open=True):
                sources = gr.File(
                    label="source face images", file_count="multiple", file_types=["image"], elem_id="sources"
                )
                source_faces = gr.Gallery(label="source faces found", columns=6, height=160)
            with gr.Accordion("Target", open=True):
                target = gr.File(label="target image or video", file_types=["image", "video"], elem_id="target")
                frame_index = gr.Slider(0, 1, step=1, value=0, label="frame")
                target_info = gr.Markdown()

            for pid, cls in self.registry.items():
                options = default.options.get(pid) or cls.Options()
                with gr.Accordion(cls.title, open=pid in default.processors):
                    enabled = pid in default.processors
                    add(
                        "enable",
                        pid,
                        gr.Checkbox(label=f"use {cls.title.lower()}", value=enabled, elem_id=f"use-{pid}"),
                    )
                    add(
                        "backend",
                        pid,
                        gr.Dropdown(
                            ["job", "auto", "onnx", "torch"],
                            value="job",
                            label="backend",
                            info="job: the runtime setting below",
                        ),
                    )
                    for name, field in fields(cls.Options):
                        choices = None
                        if name in MODEL_FIELDS:
                            ids = typing.get_args(unwrap(field.annotation)[0])
                            choices = self._model_choices(ids, manifest, runtime)
                        add(pid, name, widget(name, field, _shown(getattr(options, name)), choices))

            with gr.Accordion("Faces", open=False):
                for name, field in fields(SETTINGS_GROUPS["faces"]):
                    if name == "reference_image":
                        continue
                    add("faces", name, widget(name, field, _shown(getattr(default.faces, name))))
                detect = gr.Button("Find faces on this frame")
                found_faces = gr.Gallery(
                    label="faces on the frame — click one to make it the reference",
                    columns=6,
                    height=160,
                    allow_preview=False,
                )
                reference = gr.Textbox(label="reference image", interactive=False)
                self.keys.append(("faces", "reference_image"))
                settings.append(reference)
            with gr.Accordion("Output settings", open=False):
                for group in ("video", "runtime"):
                    for name, field in fields(SETTINGS_GROUPS[group]):
                        add(
                            group,
                            name,
                            widget(f"{group} {name}", field, _shown(getattr(getattr(default, group), name))),
                        )

            with gr.Row():
                run = gr.Button("Run", variant="primary", elem_id="run")
                cancel = gr.Button("Cancel", variant="stop")
                preview_btn = gr.Button("Preview frame")
            status = gr.Markdown(elem_id="status")
            with gr.Accordion("Result", open=True):
                compare = gr.ImageSlider(label="before / after (chosen frame)", type="numpy")
                result_image = gr.Image(label="result", visible=False, type="filepath", elem_id="result-image")
                result_video = gr.Video(label="result", visible=False, elem_id="result-video")
                qa = gr.Markdown(elem_id="summary")
                downloads = gr.File(label="output and job sidecar", file_count="multiple")
            with gr.Accordion("Models", open=False):
                models_table = gr.Dataframe(
                    headers=["model", "task", "status", "licence"],
                    interactive=False,
                    value=self._models_rows(manifest, runtime),
                )
                model_pick = gr.Dropdown(sorted(manifest.models), label="model")
                model_licence = gr.Markdown()
                with gr.Row():
                    download = gr.Button("Download")
                    verify = gr.Button("Verify present files")
                models_status = gr.Markdown(elem_id="models-status")

            # -- events ---------------------------------------------------------------------------------------
            def on_target(path: str | None) -> tuple[Any, str]:
                if not path:
                    return gr.update(maximum=1, value=0), ""
                try:
                    info = video.probe(Path(path))
                except FacestudioError as exc:
                    raise _error(exc) from None
                last = max(info.frame_count - 1, 0) if info.kind == "video" else 0
                text = f"{info.kind}, {info.width}×{info.height}" + (
                    f", {info.frame_count} frames at {info.fps:.3g} fps, {'with' if info.has_audio else 'no'} audio"
                    if info.kind == "video"
                    else ""
                )
                return gr.update(maximum=max(last, 1), value=0), text

            target.change(on_target, [target], [frame_index, target_info], api_visibility="private")

            def on_sources(paths: list[str] | None, *values: Any) -> list[np.ndarray]:
                if not paths:
                    return []
                try:
                    analyser = self.analyser(values)
                    crops = []
                    for p in paths:
                        image = video.read_image(Path(p))[0]
                        crops += [_crop(image, f.box) for f in analyser.detect(image)]
                    return crops
                except Exception as exc:
                    raise _error(exc) from None

            sources.change(on_sources, [sources, *settings], [source_faces], api_visibility="private")

            def on_detect(path: str | None, index: float, request: gr.Request, *values: Any) -> list[np.ndarray]:
                try:
                    return self.find_faces(path, int(index), values, self.session_dir(request))
                except Exception as exc:
                    raise _error(exc) from None

            detect.click(
                on_detect,
                [target, frame_index, *settings],
                [found_faces],
                concurrency_id="gpu",
                api_visibility="private",
            )

            def on_pick(event: gr.SelectData, request: gr.Request) -> tuple[str, str]:
                path = self.session_dir(request) / f"face-{event.index}.png"
                return str(path), "reference"

            selector_index = self.keys.index(("faces", "selector"))
            found_faces.select(on_pick, None, [reference, settings[selector_index]], api_visibility="private")

            def on_load(name: str) -> list[Any]:
                try:
                    return self.values_from(Preset.parse(load_preset_raw(name), self.registry))
                except Exception as exc:
                    raise _error(exc) from None

            preset_load.click(on_load, [preset_pick], settings, api_visibility="private")

            def on_save(name: str, request: gr.Request, *values: Any) -> Any:
                try:
                    path = self.save_preset(name, values, self.session_dir(request))
                except Exception as exc:
                    raise _error(exc) from None
                return gr.update(value=str(path), visible=True)

            preset_save.click(on_save, [preset_name, *settings], [preset_file], api_visibility="private")

            def on_run(
                agreed: bool,
                target_path: str | None,
                source_paths: list[str] | None,
                index: float,
                request: gr.Request,
                progress: gr.Progress = gr.Progress(),
                *values: Any,
            ) -> tuple[Any, ...]:
                if not agreed:
                    raise gr.Error("tick the responsible-use notice above before running", print_exception=False)
                flag = self.cancel_flag(request)
                flag.clear()
                try:
                    report = self.execute(
                        self.raw_from(values),
                        target_path,
                        source_paths or [],
                        self.session_dir(request),
                        _UIProgress(progress, flag),
                    )
                    before = _frame_at(Path(target_path or ""), int(index))
                    after = _frame_at(report.output, int(index))
                except Exception as exc:
                    raise _error(exc) from None
                is_image = report.kind == "image"
                return (
                    (before, after),
                    gr.update(value=str(report.output) if is_image else None, visible=is_image),
                    gr.update(value=None if is_image else str(report.output), visible=not is_image),
                    summary(report),
                    [str(report.output), str(report.sidecar)],
                    f"done in {report.seconds:.1f} s",
                )

            run.click(
                on_run,
                [agreed, target, sources, frame_index, *settings],
                [compare, result_image, result_video, qa, downloads, status],
                concurrency_id="gpu",
                api_visibility="private",
            )

            def on_cancel(request: gr.Request) -> str:
                self.cancel_flag(request).set()
                return "cancelling…"

            cancel.click(on_cancel, None, [status], queue=False, api_visibility="private")

            def on_preview(target_path: str | None, source_paths: list[str] | None, index: float, *values: Any) -> Any:
                if not target_path:
                    return gr.update()  # nothing to preview yet: not an error while the user sets things up
                try:
                    before = _frame_at(Path(target_path), int(index))
                    after = self.preview(self.raw_from(values), target_path, source_paths or [], int(index))
                except Exception as exc:
                    raise _error(exc) from None
                return (before, after)

            preview_inputs = [target, sources, frame_index, *settings]
            preview_btn.click(on_preview, preview_inputs, [compare], concurrency_id="gpu", api_visibility="private")
            for component in settings:
                component.change(
                    on_preview,
                    preview_inputs,
                    [compare],
                    concurrency_id="gpu",
                    trigger_mode="always_last",
                    show_progress="minimal",
                    api_visibility="private",
                )
            frame_index.release(
                on_preview,
                preview_inputs,
                [compare],
                concurrency_id="gpu",
                trigger_mode="always_last",
                api_visibility="private",
            )

            def on_model(model_id: str | None) -> str:
                if not model_id:
                    return ""
                return f"licence: {manifest.get(model_id).licence_line()}"

            model_pick.change(on_model, [model_pick], [model_licence], api_visibility="private")

            def on_download(model_id: str | None, progress: gr.Progress = gr.Progress()) -> tuple[str, Any]:
                def bar(item: fetch.Downloadable) -> Any:
                    return lambda done, total: progress((done, total), desc=item.filename, unit="B")

                try:
                    paths = self.download(model_id, runtime, bar)
                except Exception as exc:
                    raise _error(exc) from None
                spec = manifest.get(str(model_id))
                ready = ", ".join(p.name for p in paths) or "nothing to download (embedded)"
                return f"{spec.licence_line()}\n\nready: {ready}", self._models_rows(manifest, runtime)

            download.click(
                on_download,
                [model_pick],
                [models_status, models_table],
                concurrency_id="download",
                api_visibility="private",
            )

            def on_verify() -> str:
                lines = []
                for spec in manifest.models.values():
                    for f in spec.files:
                        if not f.embedded and runtime.local_path(f).is_file():
                            lines.append(f"- {fetch.verify(f, runtime.folders.models)}: {f.filename}")
                return "\n".join(lines) or "no downloaded model files"

            verify.click(on_verify, None, [models_status], concurrency_id="download", api_visibility="private")

            # -- the API: one named endpoint for scripts (gradio_client) ---------------------------------------
            api_target = gr.File(label="target", visible=False)
            api_sources = gr.File(label="sources", file_count="multiple", visible=False)
            api_settings = gr.Textbox(label="preset", visible=False)
            api_agreed = gr.Checkbox(label="consent", visible=False)
            api_output = gr.File(label="output", visible=False)
            api_sidecar = gr.File(label="sidecar", visible=False)
            api_report = gr.JSON(label="report", visible=False)

            def api_run(
                target_path: str | None,
                source_paths: list[str] | None,
                preset_text: str,
                agreed: bool,
                request: gr.Request,
                progress: gr.Progress = gr.Progress(),
            ) -> tuple[str, str, dict[str, Any]]:
                """Run a job: target file, source files, the preset as TOML or JSON text (empty: default), and
                consent (must be true). Returns the output, its job sidecar and the run report."""
                if not agreed:
                    raise gr.Error(
                        "consent must be true: acknowledge the responsible-use notice", print_exception=False
                    )
                try:
                    raw = parse_preset_text(preset_text)
                    report = self.execute(
                        raw,
                        target_path,
                        source_paths or [],
                        self.session_dir(request),
                        _UIProgress(progress, self.cancel_flag(request)),
                    )
                except Exception as exc:
                    raise _error(exc) from None
                return str(report.output), str(report.sidecar), _report_json(report)

            gr.Button(visible=False).click(
                api_run,
                [api_target, api_sources, api_settings, api_agreed],
                [api_output, api_sidecar, api_report],
                api_name="run",
                concurrency_id="gpu",
            )
            app.unload(self.end_session)
        return app

    def _models_rows(self, manifest: Manifest, runtime: Runtime) -> list[list[str]]:
        return [
            [
                spec.id,
                spec.task,
                self._availability(spec, runtime),
                spec.licence + ("" if spec.commercial_use else " [NON-COMMERCIAL]"),
            ]
            for spec in manifest.models.values()
        ]


def _shown(value: Any) -> Any:
    """A settings value as a widget shows it (paths and None as text)."""
    if value is None:
        return None
    return str(value) if isinstance(value, Path) else value


def _crop(frame: Frame, box: tuple[float, float, float, float]) -> Frame:
    """The face box grown by a third on each side, clipped to the frame (a reference image the analyser finds)."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    height, width = frame.shape[:2]
    left, top = max(int(x1 - w / 3), 0), max(int(y1 - h / 3), 0)
    right, bottom = min(int(x2 + w / 3), width), min(int(y2 + h / 3), height)
    return np.ascontiguousarray(frame[top:bottom, left:right])


def _toml_ready(raw: Any) -> Any:
    """`raw` without None values (TOML has no null; a missing key means the default)."""
    if isinstance(raw, dict):
        return {k: _toml_ready(v) for k, v in raw.items() if v is not None}
    if isinstance(raw, list | tuple):
        return [_toml_ready(v) for v in raw]
    return raw


def _report_json(report: pipeline.RunReport) -> dict[str, Any]:
    return {
        "kind": report.kind,
        "frames": report.frames,
        "input_size": list(report.input_size),
        "output_size": list(report.output_size),
        "seconds": round(report.seconds, 3),
        "audio": report.audio,
        "faces_processed": report.faces_processed,
        "frames_without_face": report.frames_without_face,
        "identity": report.identity,
        "processors": report.processors,
    }


def summary(report: pipeline.RunReport) -> str:
    """The run summary and identity-QA lines, as Markdown."""
    w0, h0 = report.input_size
    w1, h1 = report.output_size
    lines = [
        f"**{report.frames} frame{'s' if report.frames != 1 else ''}** {w0}×{h0} → {w1}×{h1} in "
        f"{report.seconds:.1f} s ({report.fps:.2f} fps) on {report.providers()}; "
        f"{'audio kept' if report.audio else 'no audio'}."
    ]
    if report.frames_without_face is not None:
        lines.append(f"{report.faces_processed} faces processed, {report.frames_without_face} frames without a face.")
        if report.frames_without_face == report.frames:
            lines.append("**No face was found on any frame: the output equals the input.**")
    qa = report.identity
    if qa and qa.get("faces_checked"):
        lines.append(
            f"Identity: distance to the source {qa['mean_distance_before']:.2f} → {qa['mean_distance_after']:.2f} on "
            f"average (same person below {qa['threshold']:g}); {len(qa['flagged_frames'])} of {qa['faces_checked']} "
            "checked faces flagged."
        )
    return "\n\n".join(lines)


def parse_size(text: str) -> int:
    """Bytes in a size such as "2gb", "500mb", "64kb" or "1000" (units of 1024, as Gradio reads max_file_size)."""
    units = {"tb": 1 << 40, "gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1}
    compact = text.replace(" ", "").lower()
    unit = next((u for u in units if compact.endswith(u)), "")
    number = compact[: len(compact) - len(unit)]
    if not number.isdigit():
        raise InvalidInput(f"size {text!r} is not a number with kb, mb, gb or tb, e.g. 2gb")
    return int(number) * units.get(unit, 1)


def launch(settings: UISettings, studio: Studio | None = None, *, block: bool = True) -> gr.Blocks:
    """Build and serve the app, with the probes, /metrics and the jobs API on the same port (webui/server.py).
    Sharing needs auth (checked by the CLI before this is called)."""
    studio = studio or Studio()
    app = studio.build()
    app.queue(max_size=settings.queue_size, default_concurrency_limit=1)
    jobs = JobQueue(studio, Path(tempfile.mkdtemp(prefix="facestudio-jobs-")), settings.queue_size)
    readiness = Readiness(studio.registry, settings.ready_preset, int(settings.min_free_gb * 1e9))
    routes = server.routes(jobs, readiness, auth=settings.auth, max_upload=parse_size(settings.max_file_size))

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        # The jobs worker lives as long as the server: started with it, stopped (running job cancelled) with it.
        jobs.start()
        try:
            yield
        finally:
            jobs.stop()

    app.launch(
        server_name=settings.host,
        server_port=settings.port,
        share=settings.share,
        auth=settings.auth,
        max_file_size=settings.max_file_size,
        allowed_paths=[],
        run_history=False,
        enable_monitoring=False,
        mcp_server=False,
        ssr_mode=False,
        show_error=True,
        quiet=True,
        prevent_thread_lock=not block,
        # Gradio builds its FastAPI app with these: our routes go first, so Gradio's routes cannot shadow them,
        # and everything `launch` gives (share links, its login) still works, which mounting Gradio on an app of
        # our own (gr.mount_gradio_app) would lose for --share.
        app_kwargs={"routes": routes, "lifespan": lifespan},
    )
    return app
