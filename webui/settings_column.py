"""The studio's settings: the chain at a glance (which processors are on, in order, with their model; a click
opens the cell), then one cell per registered processor (its toggle, a line about its models, the options that
apply, its backend), the faces, output and runtime groups — generated from the settings models by webui/cells.py,
model choices labelled with their availability."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gradio as gr

from engine.core.options import describe
from engine.job.settings import SETTINGS_GROUPS, Preset
from engine.serve.catalogue import ModelStatus
from webui import cells
from webui.cells import BACKEND, ENABLE, JOB_BACKEND
from webui.parts import Page

FACES = "faces"  # the notes' key for the face analyser's models (the faces group's cell)


def megabytes(size: int | None) -> str:
    return "size unknown" if size is None else f"{size / 1e6:,.0f} MB"


def missing_line(status: ModelStatus) -> str:
    """One line for a model a job needs that is not here, with a link that opens it in the Models tab:
    "CodeFormer … is not downloaded (377 MB, non-commercial) — open Models"."""
    use = "commercial use OK" if status.commercial_use else "non-commercial"
    return (
        f"<span class='fs-warn'>{status.title} is not downloaded ({megabytes(status.size)}, {use})</span> — "
        f"<a href='#models:{status.id}'>open Models</a>"
    )


class SettingsColumn:
    """Builds the settings widgets into `page.settings` (inside the page's settings column)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.service = page.studio.service
        self.settings = page.settings
        self.notes: dict[str, gr.Markdown] = {}

    def chain_strip(self) -> None:
        self.chain = gr.Markdown(elem_id="chain", elem_classes="fs-chain", min_height=0)

    def build(self, default: Preset) -> None:
        """The processor cells, then the faces, output and runtime groups, showing `default`."""
        self._processor_cells(default)
        with gr.Accordion("Faces: how they are found", open=False, elem_id="cell-faces"):
            self.notes[FACES] = gr.Markdown(elem_id="cell-note-faces", elem_classes="fs-note", visible=False)
            self.group("faces", default.faces, skip=frozenset({"selector", "reference_image", "people"}))
        with gr.Accordion("Output: encoder, quality, frame rate, trim", open=False, elem_id="cell-video"):
            self.video = self.group("video", default.video)
        # The device, threads and the frame size cap are the server's (its operator's, at launch): no widget here.
        with gr.Accordion("Runtime: backend, precision, batch", open=False, elem_id="cell-runtime"):
            self.runtime = self.group("runtime", default.runtime)

    def _choices(self, task: str) -> list[str]:
        return [m.id for m in self.service.manifest().for_task(task)]

    def _labelled(self, view: Any) -> list[tuple[str, Any]] | None:
        """A model field's choices labelled short enough for the column: `id`, `id · download 359 MB`; the
        licence of a missing one is said in the cell's line when it is chosen."""
        if not view.shown.models:
            return None
        statuses = {m.id: m for m in self.service.catalogue.statuses()}
        out = []
        for value in view.choices or ():
            status = statuses.get(str(value))
            if status is None or status.availability != "missing":
                out.append((str(value), value))
            else:
                out.append((f"{value} · download {megabytes(status.size)}", value))
        return out

    def group(self, group: str, options: Any, skip: frozenset[str] = frozenset()) -> dict[str, gr.Component]:
        """The widgets of one settings group (a processor's options or a settings group), showing `options`."""
        views = describe(type(options), skip | cells.PROCESSOR_SKIP if group not in SETTINGS_GROUPS else skip,
                         self._choices)  # fmt: skip
        made = cells.add_group(self.settings, group, options, views, self._labelled)
        cells.wire_visibility(views, made)
        return made

    def _processor_cells(self, default: Preset) -> None:
        self.backends: list[gr.Dropdown] = []
        for pid, cls in self.page.studio.registry.items():
            options = default.options.get(pid) or cls.Options()
            with gr.Accordion(cls.title, open=pid in default.processors, elem_id=f"cell-{pid}"):
                self.settings.add(
                    ENABLE,
                    pid,
                    gr.Checkbox(
                        label=f"use {cls.title.lower()}", value=pid in default.processors, elem_id=f"use-{pid}"
                    ),
                )
                self.notes[pid] = gr.Markdown(elem_id=f"cell-note-{pid}", elem_classes="fs-note", visible=False)
                self.group(pid, options)
                backend = gr.Dropdown(
                    [(f"the job's ({default.runtime.backend})", JOB_BACKEND), "auto", "onnx", "torch"],
                    value=JOB_BACKEND,
                    label="backend",
                    info="overrides the job's runtime backend for this processor",
                )
                self.backends.append(self.settings.add(BACKEND, pid, backend))

    def wire(self) -> None:
        """A processor's backend choice names the job's runtime backend it defaults to."""
        self.runtime["backend"].change(
            lambda b: [gr.update(choices=[(f"the job's ({b})", JOB_BACKEND), "auto", "onnx", "torch"])]
            * len(self.backends),
            [self.runtime["backend"]], self.backends, queue=False,
        )  # fmt: skip

    # -- what the preview says about the chain ------------------------------------------------------------------
    @property
    def outputs(self) -> list[gr.Component]:
        """The chain strip and each cell's line, in the order `describe` gives their values."""
        return [self.chain, *self.notes.values()]

    def missing(self, preset: Preset) -> dict[str, list[ModelStatus]]:
        """The models `preset`'s chain would load that are not here, by the cell that chose them (a processor's id,
        or FACES for the face analyser's)."""
        registry, catalogue = self.page.studio.registry, self.service.catalogue
        chosen: dict[str, str] = {}
        for pid in preset.processors:
            for model_id in registry[pid].model_ids(preset.options[pid]):
                chosen.setdefault(model_id, pid)
        out: dict[str, list[ModelStatus]] = {}
        for model_id, _ in catalogue.for_preset(preset):
            status = catalogue.status(model_id)
            if status.availability == "missing":
                out.setdefault(chosen.get(model_id, FACES), []).append(status)
        return out

    def describe(self, preset: Preset | None, missing: Mapping[str, Sequence[ModelStatus]]) -> list[Any]:
        """The chain strip and each cell's line (shown only when it says something) for `preset` (None: the
        settings are not valid; the strip shows nothing on)."""
        registry = self.page.studio.registry
        chips = []
        on = list(preset.processors) if preset else []
        for pid, cls in registry.items():
            if pid in on:
                model = getattr(preset.options[pid], "model", None) if preset else None
                warn = " ⚠" if pid in missing else ""
                text = f"{on.index(pid) + 1} {cls.title}" + (f" · {model}" if model else "") + warn
                chips.append(f"<a href='#cell:{pid}' class='fs-chip fs-on'>{text}</a>")
            else:
                chips.append(f"<a href='#cell:{pid}' class='fs-chip'>{cls.title}</a>")
        lines = ["<br>".join(missing_line(s) for s in missing.get(key, ())) for key in self.notes]
        return [" ".join(chips), *(gr.update(value=line, visible=bool(line)) for line in lines)]
