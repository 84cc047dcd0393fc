"""The studio page (Gradio Blocks): three columns that fit one screen — settings, inputs, preview and run — with
tabs for output settings, history and models below.

    ┌ settings ───────────┐┌ source & target ─────┐┌ before / after ──────────┐
    │ preset              ││ source photos + faces ││ preview of the frame     │
    │ ▸ one cell per      ││ target picture/player ││ consent · Run Cancel     │
    │   processor (toggle,││ frame slider          ││ progress                 │
    │   options that      ││ faces on the frame,   ││ result, summary,         │
    │   apply)            ││ which faces, reference││ downloads                │
    │ ▸ faces ▸ runtime   │└───────────────────────┘└──────────────────────────┘
    └─────────────────────┘  [Output settings] [History] [Models]

Processor cells come from the registry and each processor's `Options` (webui/cells.py): a new processor gets its
cell with no UI code. Every change re-renders the chosen frame through the chain (`Studio.preview`, the path every
batch of a run takes). Handlers never raise for foreseeable problems: they say so in the panel concerned, so no
panel keeps a stale error badge.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gradio as gr

from engine import media as video
from engine.core import consent
from engine.core.errors import Cancelled, FacestudioError
from engine.core.options import describe
from engine.faces.crops import face_label
from engine.job.settings import SETTINGS_GROUPS, FacesSettings, Preset, load_preset_raw, preset_names, save_user_preset
from engine.models.licences import licence_texts
from engine.models.licences import summary as licence_summary
from engine.serve.service import Rendered
from webui import cells
from webui.cells import BACKEND, ENABLE, JOB_BACKEND, Settings
from webui.jobs import parse_preset_text
from webui.live import LiveTab
from webui.people import PeoplePanel
from webui.privacy import owner_from
from webui.schedule import Place
from webui.studio import Preview, Session, Studio, user_message
from webui.summary import report_json, summary

log = logging.getLogger(__name__)

CSS = """
.fs-header h1 {margin: 0; font-size: 1.35rem}
.fs-header p {margin: 0; opacity: .75}
.fs-col {gap: 6px !important}
.fs-status {min-height: 2.2em}
.fs-warn {color: #b45309}
#run, #cancel, #preview-btn {min-width: 0}
"""


# What the pipeline's progress stages are called on the page.
_STAGES = {"frames": "rendering"}
# The processor the preview's debugger toggle appends to the chain (processors/face_debugger.py).
DEBUGGER = "face_debugger"
# A preview that waited this long (seconds) for the model says so in its status line.
WAIT_SHOWN_S = 0.1


def session_of(studio: Studio, request: gr.Request) -> Session:
    """The session of the login or browser a request comes from (refused without either)."""
    cookies = dict(getattr(request, "cookies", None) or {})
    return studio.session(owner_from(cookies, getattr(request, "username", None)))


def _slider_at(rendered: Rendered) -> float:
    """Where the before/after divide starts, in % of the width: through the middle of the first face changed
    (else the first found), so both sides of that face show; the middle without faces."""
    faces = rendered.chosen or rendered.detected
    if not faces:
        return 50.0
    x1, _, x2, _ = faces[0].box
    return min(max((x1 + x2) / 2 / rendered.before.shape[1] * 100, 5.0), 95.0)


def _captioned(preview: Preview) -> list[tuple[str, str]]:
    """The face pictures of a preview, each captioned with its label on the preview (`face_label`)."""
    return [
        (path, face_label(i, face))
        for i, (path, face) in enumerate(zip(preview.faces, preview.rendered.detected, strict=True), 1)
    ]


def _waited(preview: Preview) -> str:
    """What a preview that waited for the model says of it (nothing under WAIT_SHOWN_S)."""
    turn = preview.turn
    if turn.waited < WAIT_SHOWN_S:
        return ""
    behind = "a running job to finish its batch" if turn.behind_job else "another preview"
    return f"; waited {turn.waited:.1f} s for {behind}"


def _ordinal(n: int) -> str:
    return f"{n}{'tsnrhtdd'[(n // 10 % 10 != 1) * (n % 10 < 4) * n % 10 :: 4]}"


def _seconds(value: float) -> str:
    value = max(value, 0.0)
    return f"{value:.0f} s" if value < 90 else f"{value / 60:.0f} min"


class RunState:
    """What a running job shows: its place in line while it waits, then its stage, frames, fps and ETA
    (`engine.core.progress.Progress`; raises Cancelled between batches once the session's cancel flag is set)."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.place: Place | None = None
        self.stage_name = ""
        self.total: int | None = None
        self.done = 0
        self.started: float | None = None
        self._lock = threading.Lock()

    def queued(self, place: Place) -> None:
        self.place = place

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        with self._lock:
            self.place = None
            self.stage_name, self.total, self.done, self.started = name, total, 0, time.monotonic()

    def advance(self, n: int = 1) -> None:
        if self.cancel.is_set():
            raise Cancelled("cancelled from the UI; nothing was written")
        with self._lock:
            self.done += n

    def close(self) -> None:
        pass

    def text(self) -> str:
        """One line of Markdown for the status panel."""
        with self._lock:
            place, stage, total, done, started = self.place, self.stage_name, self.total, self.done, self.started
        if self.cancel.is_set():
            return "cancelling…"
        if place is not None:
            wait = "wait unknown until a job here has run" if place.wait is None else f"about {_seconds(place.wait)}"
            return f"waiting: {_ordinal(place.ahead)} in line — {wait}"
        if not stage:
            return "preparing: checking the inputs, loading models, analysing the source face"
        if total and done >= total:
            return f"finishing: {done} of {total} frames done — writing the output, audio and sidecar"
        elapsed = time.monotonic() - (started or time.monotonic())
        fps = done / elapsed if elapsed > 0 and done else 0.0
        counts = f"{done} of {total}" if total else f"{done}"
        eta = f", about {_seconds((total - done) / fps)} left" if fps and total else ""
        return f"{_STAGES.get(stage, stage)}: {counts} frames, {fps:.2f} fps{eta}"


class Page:
    """Builds the Blocks for a Studio; handlers are its methods."""

    def __init__(self, studio: Studio) -> None:
        self.studio = studio
        self.service = studio.service
        self.settings = Settings({pid: cls.Options for pid, cls in studio.registry.items()} | dict(SETTINGS_GROUPS))

    # -- building -----------------------------------------------------------------------------------------------
    def build(self) -> gr.Blocks:
        default = Preset.parse(load_preset_raw("default"), self.studio.registry)
        with gr.Blocks(title="facestudio", delete_cache=(3600, 6 * 3600), fill_width=True) as app:
            with gr.Row(elem_classes="fs-header"):
                gr.Markdown("# facestudio\nSwap and restore faces, upscale frames, keep the audio.")
            with gr.Row(equal_height=False):
                with gr.Column(scale=3, min_width=330, elem_classes="fs-col"):
                    self._presets_row()
                    self._processor_cells(default)
                    with gr.Accordion("Faces: how they are found", open=False):
                        self._group("faces", default.faces, skip=frozenset({"selector", "reference_image", "people"}))
                    with gr.Accordion("Runtime: backend, device, batch", open=False, elem_id="cell-runtime"):
                        runtime_made = self._group("runtime", default.runtime)
                with gr.Column(scale=4, min_width=340, elem_classes="fs-col"):
                    self._inputs(default)
                    self.people = PeoplePanel(self, session_of)
                    self.people.build()
                with gr.Column(scale=5, min_width=420, elem_classes="fs-col"):
                    self._preview_and_run()
            with gr.Tabs():
                with gr.Tab("Output settings"):
                    self._group("video", default.video)
                with gr.Tab("History", id="history-tab") as history_tab:
                    self._history(history_tab)
                with gr.Tab("Models", id="models-tab") as models_tab:
                    self._models(models_tab)
                with gr.Tab("Live", id="live-tab"):
                    self.live = LiveTab(self)
                    self.live.build()
            self._wire(app, runtime_made)
        return app

    def _presets_row(self) -> None:
        with gr.Row(equal_height=True):
            self.preset_pick = gr.Dropdown(
                preset_names(), value="default", label="preset", scale=3, min_width=110, elem_id="preset-pick"
            )
            with gr.Column(scale=2, min_width=90):
                self.preset_load = gr.Button("Load", size="sm", elem_id="preset-load")
                self.preset_upload = gr.UploadButton(
                    "Open file…", file_types=[".toml", ".json"], size="sm", elem_id="preset-open"
                )
        with gr.Row(equal_height=False):
            self.preset_name = gr.Textbox(
                label="save as", placeholder="my-preset", scale=3, min_width=110, elem_id="preset-name"
            )
            with gr.Column(scale=2, min_width=90):
                self.preset_save = gr.Button("Save", size="sm", elem_id="preset-save")
        self.preset_status = gr.Markdown(elem_id="preset-status")

    def _choices(self, task: str) -> list[str]:
        return [m.id for m in self.service.manifest().for_task(task)]

    def _labelled(self, view: Any) -> list[tuple[str, Any]] | None:
        """A model field's choices labelled `id · embedded|downloaded|missing · commercial use or not`."""
        if not view.shown.models:
            return None
        statuses = {m.id: m for m in self.service.catalogue.statuses()}
        out = []
        for value in view.choices or ():
            status = statuses.get(str(value))
            if status is None:
                out.append((str(value), value))
            else:
                use = "commercial use OK" if status.commercial_use else "non-commercial"
                out.append((f"{value} · {status.availability} · {use}", value))
        return out

    def _group(self, group: str, options: Any, skip: frozenset[str] = frozenset()) -> dict[str, gr.Component]:
        views = describe(type(options), skip | cells.PROCESSOR_SKIP if group not in SETTINGS_GROUPS else skip,
                         self._choices)  # fmt: skip
        made = cells.add_group(self.settings, group, options, views, self._labelled)
        cells.wire_visibility(views, made)
        return made

    def _processor_cells(self, default: Preset) -> None:
        self.backends: list[gr.Dropdown] = []
        for pid, cls in self.studio.registry.items():
            options = default.options.get(pid) or cls.Options()
            with gr.Accordion(cls.title, open=pid in default.processors, elem_id=f"cell-{pid}"):
                self.settings.add(
                    ENABLE,
                    pid,
                    gr.Checkbox(
                        label=f"use {cls.title.lower()}", value=pid in default.processors, elem_id=f"use-{pid}"
                    ),
                )
                self._group(pid, options)
                backend = gr.Dropdown(
                    [(f"the job's ({default.runtime.backend})", JOB_BACKEND), "auto", "onnx", "torch"],
                    value=JOB_BACKEND,
                    label="backend",
                    info="overrides the job's runtime backend for this processor",
                )
                self.backends.append(self.settings.add(BACKEND, pid, backend))

    def _inputs(self, default: Preset) -> None:
        self.sources = gr.File(
            label="source face photos", file_count="multiple", file_types=["image"], height=120, elem_id="sources"
        )
        self.source_status = gr.Markdown("**Source faces** — add one or more photos of the face to put in",
                                         elem_id="source-status")  # fmt: skip
        self.source_gallery = gr.Gallery(
            label="source faces", columns=5, height=118, allow_preview=False, object_fit="contain",
            elem_id="source-faces", show_label=False, fit_columns=False,
        )  # fmt: skip
        self.target = gr.File(
            label="target image or video", file_types=["image", "video"], height=110, elem_id="target"
        )
        self.target_image = gr.Image(
            label="target", type="filepath", interactive=False, height=230, visible=False, elem_id="target-image"
        )
        self.target_video = gr.Video(
            label="target", interactive=False, height=230, visible=False, elem_id="target-video"
        )
        self.frame_index = gr.Slider(0, 1, step=1, value=0, label="frame", elem_id="frame", visible=False)
        self.target_info = gr.Markdown(elem_id="target-info")
        faces_view = next(v for v in describe(FacesSettings) if v.name == "selector")
        self.selector = self.settings.add(
            "faces",
            "selector",
            gr.Radio(
                [(str(c), c) for c in faces_view.choices or ()],
                value=default.faces.selector,
                label="which faces to change",
                info="one (by order) · many: every face · reference: faces like the picked one · map: each person "
                "their own source (People, below)",
                elem_id="selector",
            ),
            faces_view,
        )
        gr.Markdown("**Faces on this frame** (numbered as on the preview) — click one to pick it as the reference")
        self.frame_faces = gr.Gallery(
            label="faces on this frame", columns=6, height=118, allow_preview=False, object_fit="contain",
            elem_id="frame-faces", show_label=False, fit_columns=False,
        )  # fmt: skip
        self.face_paths = gr.State([])
        with gr.Row():
            self.reference_picture = gr.Image(
                label="reference face", type="filepath", interactive=False, height=110, visible=False,
                elem_id="reference-picture",
            )  # fmt: skip
        reference_view = next(v for v in describe(FacesSettings) if v.name == "reference_image")
        self.reference = self.settings.add(
            "faces", "reference_image", gr.Textbox(visible=False, elem_id="reference-path"), reference_view
        )

    def _preview_and_run(self) -> None:
        self.compare = gr.ImageSlider(
            label="before / after (chosen frame)", type="filepath", height=430, elem_id="compare", interactive=False
        )
        self.preview_status = gr.Markdown(elem_id="preview-status")
        self.debug_preview = gr.Checkbox(
            label="show the face debugger on the preview",
            info="boxes, landmarks, the mask in use, person, detection score, identity distance (preview only)",
            value=False,
            elem_id="preview-debug",
        )
        self.agreed = gr.Checkbox(
            label="I have read the responsible-use notice and have the consent of the people shown",
            info=consent.NOTICE,
            value=False,
            elem_id="consent",
        )
        with gr.Row():
            self.run = gr.Button("Run", variant="primary", elem_id="run", scale=2)
            self.cancel = gr.Button("Cancel", variant="stop", elem_id="cancel", scale=1)
            self.preview_btn = gr.Button("Preview", elem_id="preview-btn", scale=1)
        self.status = gr.Markdown(elem_id="status", elem_classes="fs-status")
        self.result_image = gr.Image(
            label="result", type="filepath", interactive=False, visible=False, elem_id="result-image"
        )
        self.result_video = gr.Video(label="result", interactive=False, visible=False, elem_id="result-video")
        self.result_summary = gr.Markdown(elem_id="summary")
        self.downloads = gr.File(
            label="output and job sidecar", file_count="multiple", visible=False, elem_id="downloads"
        )

    def _history(self, tab: gr.Tab) -> None:
        self.history_version = gr.State(0)
        with gr.Row():
            gr.Markdown("Finished jobs of this session (this login, or this browser), newest first.")
            self.history_clear = gr.Button("Delete all", size="sm", scale=0, min_width=100, elem_id="history-clear")

        # Rendered when the tab is opened (not with the page: a first load stays light) and after each change.
        @gr.render(inputs=[self.history_version], triggers=[tab.select, self.history_version.change])
        def show(version: int, request: gr.Request) -> None:
            self._history_rows(request)

    def _models(self, tab: gr.Tab) -> None:
        self.models_version = gr.State(0)
        with gr.Row():
            gr.Markdown("Every model in the catalogue. Downloads are sha256-checked and resumable.")
            self.models_verify = gr.Button("Verify downloaded files", size="sm", scale=0, min_width=180)
        self.models_status = gr.Markdown(elem_id="models-status")

        @gr.render(inputs=[self.models_version], triggers=[tab.select, self.models_version.change])
        def show(version: int) -> None:
            self._model_rows()

    # -- history and models rows --------------------------------------------------------------------------------
    def _history_rows(self, request: gr.Request) -> None:
        try:
            session = session_of(self.studio, request)
        except FacestudioError as exc:
            gr.Markdown(str(exc))
            return
        entries = session.history.entries()
        if not entries:
            gr.Markdown("*No finished jobs yet.*", elem_id="history-empty")
        for entry in entries:
            with gr.Row(elem_classes="fs-history", equal_height=False):
                if entry.thumbnail:
                    gr.Image(
                        self.studio.share(session, entry.thumbnail), show_label=False, height=110, interactive=False,
                        scale=1, min_width=140, container=False,
                    )  # fmt: skip
                with gr.Column(scale=4):
                    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.created))
                    sources = f" with {', '.join(entry.sources)}" if entry.sources else ""
                    gr.Markdown(
                        f"**{Path(entry.output).name}** — {when} — {entry.target}{sources} → "
                        f"{' → '.join(entry.processors)}\n\n{entry.summary}",
                        elem_classes="fs-history-summary",
                    )
                    with gr.Accordion("settings", open=False):
                        gr.Code(json.dumps(entry.settings, indent=1), language="json")
                with gr.Column(scale=1, min_width=160):
                    gr.DownloadButton("Output", self.studio.share(session, entry.output), size="sm")
                    gr.DownloadButton("Job sidecar", self.studio.share(session, entry.sidecar), size="sm")
                    load = gr.Button("Load these settings", size="sm")
                    delete = gr.Button("Delete", size="sm", variant="stop")
            chosen = load.click(
                lambda s=entry.settings: self._values_or_keep(s), None, self.settings.components, queue=False
            )
            self.written(chosen)
            delete.click(self._delete_entry(entry.id), [self.history_version], [self.history_version], queue=False)

    def _delete_entry(self, entry_id: str) -> Any:
        def delete(version: int, request: gr.Request) -> int:
            session = session_of(self.studio, request)
            gone = session.history.remove(entry_id)
            if gone is not None:
                self.studio.guard.release(session.owner, [gone.output, gone.sidecar, gone.thumbnail or ""])
            return version + 1

        return delete

    def _model_rows(self) -> None:
        for status in self.service.catalogue.statuses():
            megabytes = None if status.size is None else f"{status.size / 1e6:,.0f} MB"
            if status.availability == "embedded":
                size = "embedded" + (f" (original {megabytes})" if megabytes else "")
            else:
                size = megabytes or "size unknown"
            use = "commercial use OK" if status.commercial_use else "**non-commercial**"
            with gr.Row(equal_height=False, elem_classes="fs-model"):
                with gr.Column(scale=5):
                    gr.Markdown(
                        f"**{status.id}** — {status.title} · {status.task} · {size} · {use}",
                        elem_id=f"model-{status.id}",
                    )
                    with gr.Accordion(f"licence: {status.licence}", open=False):
                        texts = licence_texts(status.licence, status.homepage)
                        body = "\n\n---\n\n".join(f"### {t.title}\n\n```text\n{t.text}\n```" for t in texts)
                        gr.Markdown(f"{licence_summary(status.licence, status.homepage)}\n\n{body}")
                with gr.Column(scale=2, min_width=200):
                    row_status = gr.Markdown(status.availability, elem_id=f"model-status-{status.id}")
                    if status.downloadable:
                        label = "Download original" if status.availability == "embedded" else "Download"
                        button = gr.Button(label, size="sm", elem_id=f"model-download-{status.id}")
                        button.click(
                            self._download(status.id), None, [row_status], concurrency_id="download",
                            concurrency_limit=2,
                        )  # fmt: skip

    def _download(self, model_id: str) -> Any:
        def download(progress: gr.Progress = gr.Progress()) -> str:
            def bar(item: Any) -> Any:
                return lambda done, total: progress((done, total), desc=item.filename, unit="B")

            try:
                paths = self.service.catalogue.fetch([model_id], progress=bar, say=log.info)
            except Exception as exc:
                log.info("download of %s failed: %s", model_id, exc)
                return f"<span class='fs-warn'>download failed: {user_message(exc, {})}</span>"
            return f"downloaded: {', '.join(p.name for p in paths) or 'nothing to download'}"

        return download

    # -- events -------------------------------------------------------------------------------------------------
    def _wire(self, app: gr.Blocks, runtime_made: dict[str, gr.Component]) -> None:
        settings = self.settings.components
        self.values = self.settings.state()
        previewing = [self.target, self.sources, self.frame_index, self.face_paths, self.debug_preview, self.values]
        preview_out = [self.compare, self.frame_faces, self.face_paths, self.preview_status, self.live.status]
        self.previewing, self.preview_out = previewing, preview_out
        # Previews skip Gradio's queue, as every short event here does: its join-and-stream round trip cost 25–30 ms
        # of every preview (benchmarks/ui.py), and the service's model lock already lets one render at a time through.
        self.people.wire()

        self.target.change(
            self.on_target, [self.target], [self.frame_index, self.target_image, self.target_video, self.target_info],
            queue=False,
        ).then(self.on_preview, previewing, preview_out, queue=False)  # fmt: skip
        self.sources.change(
            self.on_sources, [self.sources, self.values], [self.source_gallery, self.source_status], queue=False
        ).then(self.on_preview, previewing, preview_out, queue=False)  # fmt: skip
        # A change sends only its cell's widgets (see cells.Values). On `input`, not `change`: the handlers below
        # that set widgets would otherwise start a preview per widget they set.
        for positions in self.settings.cells().values():
            widgets = [settings[p] for p in positions]
            gr.on(
                [w.input for w in widgets], self._hearing(positions), [*previewing, *widgets], preview_out,
                trigger_mode="always_last", show_progress="minimal", queue=False,
            )  # fmt: skip
        gr.on(
            [self.frame_index.release, self.preview_btn.click, self.debug_preview.change], self.on_preview, previewing,
            preview_out, trigger_mode="always_last", show_progress="minimal", queue=False,
        )  # fmt: skip
        self.written(
            self.frame_faces.select(
                self.on_pick, [self.face_paths], [self.reference, self.reference_picture, self.selector], queue=False
            )
        )
        self.reference.change(
            lambda path: gr.update(value=path or None, visible=bool(path)), [self.reference], [self.reference_picture],
            queue=False,
        )  # fmt: skip
        runtime_made["backend"].change(
            lambda b: [gr.update(choices=[(f"the job's ({b})", JOB_BACKEND), "auto", "onnx", "torch"])]
            * len(self.backends),
            [runtime_made["backend"]], self.backends, queue=False,
        )  # fmt: skip

        run_out = [
            self.status, self.result_image, self.result_video, self.result_summary, self.downloads, self.compare,
            self.history_version,
        ]  # fmt: skip
        self.run.click(
            self.on_run, [self.agreed, self.target, self.sources, self.frame_index, self.history_version, *settings],
            run_out, concurrency_limit=None, show_progress="hidden",
        )  # fmt: skip
        self.cancel.click(self.on_cancel, None, [self.status], queue=False)

        for loaded in (
            self.preset_load.click(
                self.on_load_preset, [self.preset_pick], [*settings, self.preset_status], queue=False
            ),
            self.preset_upload.upload(self.on_open_preset, [self.preset_upload], [*settings, self.preset_status]),
        ):
            self.written(loaded)
        self.preset_save.click(
            self.on_save_preset, [self.preset_name, *settings], [self.preset_pick, self.preset_status], queue=False
        )
        self.history_clear.click(self.on_clear_history, [self.history_version], [self.history_version], queue=False)
        self.models_verify.click(self.on_verify, None, [self.models_status], concurrency_id="download")
        self._api(app)

    def on_target(self, path: str | None, request: gr.Request) -> tuple[Any, ...]:
        session = session_of(self.studio, request)
        self.studio.note_upload(session, "target", [path] if path else [])
        if not path:
            hidden = gr.update(visible=False, value=None)
            return gr.update(visible=False, maximum=1, value=0), hidden, hidden, ""
        try:
            info = video.probe(Path(path))
        except FacestudioError as exc:
            hidden = gr.update(visible=False, value=None)
            message = f"<span class='fs-warn'>{user_message(exc, session.names)}</span>"
            return gr.update(visible=False, maximum=1, value=0), hidden, hidden, message
        name = self.studio.name(session, path)
        if info.kind == "image":
            text = f"{name}: image, {info.width}×{info.height}"
            return (
                gr.update(visible=False, maximum=1, value=0),
                gr.update(value=path, visible=True),
                gr.update(visible=False, value=None),
                text,
            )
        last = max(info.frame_count - 1, 0)
        text = (
            f"{name}: video, {info.width}×{info.height}, {info.frame_count} frames at {info.fps:.3g} fps, "
            f"{'with' if info.has_audio else 'no'} audio"
        )
        player = self.studio.playable(session, path)
        if player is None:
            text += " — this format does not play in browsers: the preview shows the chosen frame"
        return (
            gr.update(visible=True, maximum=max(last, 1), value=0),
            gr.update(visible=False, value=None),
            gr.update(value=player, visible=player is not None),
            text,
        )

    def on_sources(self, paths: list[str] | None, values: cells.Values, request: gr.Request) -> tuple[Any, str]:
        session = session_of(self.studio, request)
        self.studio.note_upload(session, "sources", paths or [])
        heading = "**Source faces**"
        if not paths:
            return [], f"{heading} — add one or more photos of the face to put in"
        try:
            faces = FacesSettings.model_validate(self.settings.raw_from(values.items).get("faces", {}))
            pictures, problems = self.studio.source_faces(session, paths, faces)
        except Exception as exc:
            return [], f"{heading} — <span class='fs-warn'>{user_message(exc, session.names)}</span>"
        if problems:
            return pictures, f"{heading} — " + "; ".join(f"<span class='fs-warn'>{p}</span>" for p in problems)
        if len(pictures) > 1:
            return pictures, f"{heading} — {len(pictures)} photos: their faces are averaged into one identity"
        return pictures, f"{heading} — the face that will be put in"

    def written(self, dependency: Any) -> Any:
        """Chain, after an event whose handler sets settings widgets, a preview that first hears every widget again
        (the session's `Values` do not see what a handler sets). Returns the chained event."""
        return dependency.then(
            self._hearing(range(len(self.settings.entries))), [*self.previewing, *self.settings.components],
            self.preview_out, queue=False,
        )  # fmt: skip

    def _hearing(self, positions: Sequence[int]) -> Any:
        """A handler taking the preview's inputs and then the values of the widgets at `positions`: it notes those
        in the session's `Values`, then previews."""

        def hear(
            target: str | None,
            sources: list[str] | None,
            index: float,
            shown_faces: list[str],
            debugging: bool,
            values: cells.Values,
            request: gr.Request,
            *widgets: Any,
        ) -> tuple[Any, ...]:
            values.hear(positions, widgets)
            return self.on_preview(target, sources, index, shown_faces, debugging, values, request)

        return hear

    def on_preview(
        self,
        target: str | None,
        sources: list[str] | None,
        index: float,
        shown_faces: list[str],
        debugging: bool,
        values: cells.Values,
        request: gr.Request,
    ) -> tuple[Any, ...]:
        """The chosen frame through the chain the settings describe, and those settings applied to the session's
        live stream: (before/after, faces on the frame, their paths, status line, Live tab status)."""
        session = session_of(self.studio, request)
        raw = self.settings.raw_from(values.items)
        shown = self._preview(session, raw, target, sources or [], int(index), shown_faces, debugging)
        return (*shown, self.live.apply(session, raw, sources or []))

    def _preview(
        self,
        session: Session,
        raw: dict[str, Any],
        target: str | None,
        sources: list[str],
        index: int,
        shown_faces: list[str],
        debugging: bool,
    ) -> tuple[Any, ...]:
        """(before/after, faces on the frame, their paths, status line) for frame `index` of `target` through the
        chain `raw` describes, with the people's mapping and the debugger toggle applied; problems in the status."""
        if not target:
            return gr.update(value=None), [], [], "add a target image or video to see a preview"
        if debugging and DEBUGGER in self.studio.registry and DEBUGGER not in raw["processors"]:
            raw = {**raw, "processors": [*raw["processors"], DEBUGGER]}  # the preview's toggle: not the run's chain
        needs_source = [p for p in raw["processors"] if self.studio.registry[p].needs_source]
        try:
            raw, sources = self.people.apply(session, raw, target, sources)
            if needs_source and not sources:
                preset = self.service.preset(raw)
                preview = self.studio.frame_only(session, target, index, preset.faces, preset.runtime.max_pixels)
                gallery = _captioned(preview)
                found = len(preview.rendered.detected)
                note = f"{found} face{'s' if found != 1 else ''} found; add a source face photo to see the swap"
                compare = gr.update(value=(preview.before, preview.after), slider_position=_slider_at(preview.rendered))
                return compare, gallery, preview.faces, f"frame {index}: {note}{_waited(preview)}"
            preview = self.studio.preview(session, raw, target, sources, index)
        except Exception as exc:
            message = user_message(exc, session.names)
            if not isinstance(exc, FacestudioError):
                log.exception("preview failed")
            return gr.update(), [], [], f"<span class='fs-warn'>preview: {message}</span>"
        rendered = preview.rendered
        chosen = len(rendered.chosen)
        faces = (
            f"; {len(rendered.detected)} face{'s' if len(rendered.detected) != 1 else ''} found, {chosen} changed"
            if any(self.studio.registry[p].needs_faces for p in raw["processors"])
            else ""
        )
        text = f"frame {index}: chain {rendered.chain_ms:.0f} ms{faces}{_waited(preview)}"
        compare = gr.update(value=(preview.before, preview.after), slider_position=_slider_at(rendered))
        if preview.faces == shown_faces:  # the same faces as shown: nothing to send again
            return compare, gr.skip(), gr.skip(), text
        return compare, _captioned(preview), preview.faces, text

    def on_pick(self, face_paths: list[str], event: gr.SelectData, request: gr.Request) -> tuple[Any, ...]:
        session = session_of(self.studio, request)
        if event.index is None or not 0 <= int(event.index) < len(face_paths):
            return gr.update(), gr.update(), gr.update()
        reference = self.studio.reference_from(session, face_paths[int(event.index)])
        return reference, gr.update(value=reference, visible=True), "reference"

    def on_run(
        self,
        agreed: bool,
        target: str | None,
        sources: list[str] | None,
        index: float,
        version: int,
        request: gr.Request,
        *values: Any,
    ) -> Iterator[tuple[Any, ...]]:
        keep = (gr.update(),) * 6
        if not agreed:
            gr.Warning("tick the responsible-use notice before running")
            yield ("tick the responsible-use notice (above Run) before running", *keep)
            return
        session = session_of(self.studio, request)
        state = RunState(session.cancel)
        result: dict[str, Any] = {}
        raw = self.settings.raw_from(values)

        def work() -> None:
            try:
                job_raw, job_sources = self.people.apply(session, raw, target, sources or [])
                result["done"] = self.studio.run_for(session, job_raw, target or "", job_sources, state, state.queued)
            except BaseException as exc:  # reported by the generator below, in the status panel
                result["error"] = exc

        session.cancel.clear()
        worker = threading.Thread(target=work, name="facestudio-ui-run", daemon=True)
        worker.start()
        hidden = gr.update(value=None, visible=False)
        yield (state.text(), hidden, hidden, "", hidden, gr.update(), gr.update())
        while worker.is_alive():
            worker.join(0.5)
            yield (state.text(), *keep)
        error = result.get("error")
        if isinstance(error, Cancelled):
            yield ("**cancelled** — nothing was written", *keep)
            return
        if error is not None:
            if not isinstance(error, FacestudioError):
                log.error("run failed", exc_info=error)
            message = user_message(error, session.names)
            gr.Warning(message)
            yield (f"<span class='fs-warn'>**failed** — {message}</span>", *keep)
            return
        report, entry = result["done"]
        is_image = report.kind == "image"
        output = self.studio.share(session, report.output)
        player = None if is_image else self.studio.playable(session, report.output)
        compare = gr.update()
        try:
            compare = self.studio.compare_after_run(session, target or "", report, int(index))
        except FacestudioError as exc:
            log.info("no before/after after the run: %s", exc)
        done = f"done in {report.seconds:.1f} s"
        if not is_image and player is None:
            done += " — its codec does not play in browsers: download it to watch"
        yield (
            done,
            gr.update(value=output if is_image else None, visible=is_image),
            gr.update(value=player, visible=player is not None),
            summary(report),
            gr.update(value=[output, self.studio.share(session, report.sidecar)], visible=True),
            compare,
            version + 1,
        )

    def on_cancel(self, request: gr.Request) -> str:
        session_of(self.studio, request).cancel.set()
        return "cancelling…"

    def _values_or_keep(self, raw: dict[str, Any]) -> list[Any]:
        return self.settings.values_from(Preset.parse(raw, self.studio.registry))

    def on_load_preset(self, name: str, request: gr.Request) -> list[Any]:
        try:
            values = self._values_or_keep(load_preset_raw(name))
        except FacestudioError as exc:
            return [gr.update()] * len(self.settings.entries) + [f"<span class='fs-warn'>{exc}</span>"]
        return [*values, f"loaded preset {name}"]

    def on_open_preset(self, file: str | None, request: gr.Request) -> list[Any]:
        session = session_of(self.studio, request)
        keep = [gr.update()] * len(self.settings.entries)
        if not file:
            return [*keep, ""]
        name = self.studio.name(session, file)
        try:
            text = Path(file).read_text(encoding="utf-8")
            values = self._values_or_keep(parse_preset_text(text))
        except (OSError, UnicodeDecodeError):
            return [*keep, f"<span class='fs-warn'>{name} is not a text file</span>"]
        except FacestudioError as exc:
            return [*keep, f"<span class='fs-warn'>{name}: {user_message(exc, session.names)}</span>"]
        finally:
            self.studio.guard.release(session.owner, [file])
        return [*values, f"loaded {name}"]

    def on_save_preset(self, name: str, *values: Any) -> tuple[Any, str]:
        raw = self.settings.raw_from(values)
        raw.get("faces", {}).pop("reference_image", None)  # a file of this session, not part of a preset
        try:
            preset = Preset.parse(raw, self.studio.registry)
            path, replaced = save_user_preset(name, preset)
        except FacestudioError as exc:
            return gr.update(), f"<span class='fs-warn'>{exc}</span>"
        verb = "replaced" if replaced else "saved"
        return gr.update(choices=preset_names(), value=path.stem), f"{verb} preset {path.stem} (in your presets folder)"

    def on_clear_history(self, version: int, request: gr.Request) -> int:
        session = session_of(self.studio, request)
        for entry in session.history.entries():
            session.history.remove(entry.id)
            self.studio.guard.release(session.owner, [entry.output, entry.sidecar, entry.thumbnail or ""])
        return version + 1

    def on_verify(self) -> str:
        rows = [r for r in self.service.catalogue.verify() if r.status != "missing"]
        if not rows:
            return "no model files here to check"
        return "\n".join(
            f"- {'ok' if r.status == 'ok' else '**' + r.status + '**'}: {r.model} ({r.path.name})" for r in rows
        )

    # -- the API: one named endpoint for scripts (gradio_client) ------------------------------------------------
    def _api(self, app: gr.Blocks) -> None:
        api_target = gr.File(label="target", visible=False)
        api_sources = gr.File(label="sources", file_count="multiple", visible=False)
        api_settings = gr.Textbox(label="preset", visible=False)
        api_agreed = gr.Checkbox(label="consent", visible=False)
        api_output = gr.File(label="output", visible=False)
        api_sidecar = gr.File(label="sidecar", visible=False)
        api_report = gr.JSON(label="report", visible=False)

        def api_run(
            target: str | None, sources: list[str] | None, preset_text: str, agreed: bool, request: gr.Request
        ) -> tuple[str, str, dict[str, Any]]:
            """Run a job: target file, source files, the preset as TOML or JSON text (empty: default), and
            consent (must be true). Returns the output, its job sidecar and the run report."""
            if not agreed:
                raise gr.Error("consent must be true: acknowledge the responsible-use notice", print_exception=False)
            session = session_of(self.studio, request)
            try:
                report, _ = self.studio.run_for(
                    session, parse_preset_text(preset_text), target or "", sources or [], RunState(session.cancel)
                )
            except Exception as exc:
                if not isinstance(exc, FacestudioError):
                    log.error("API run failed", exc_info=exc)
                raise gr.Error(user_message(exc, session.names), print_exception=False) from None
            return (
                self.studio.share(session, report.output),
                self.studio.share(session, report.sidecar),
                report_json(report),
            )

        gr.Button(visible=False).click(
            api_run,
            [api_target, api_sources, api_settings, api_agreed],
            [api_output, api_sidecar, api_report],
            api_name="run",
            concurrency_limit=None,
        )
