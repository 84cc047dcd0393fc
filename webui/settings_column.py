"""The studio's settings cells: one per registered processor (its toggle, the options that apply, its backend),
the faces and runtime groups, and the output group of the Output settings tab — generated from the settings models
by webui/cells.py, model choices labelled with their availability and licence."""

from __future__ import annotations

from typing import Any

import gradio as gr

from engine.core.options import describe
from engine.job.settings import SETTINGS_GROUPS, Preset
from webui import cells
from webui.cells import BACKEND, ENABLE, JOB_BACKEND
from webui.parts import Page


class SettingsColumn:
    """Builds the settings widgets into `page.settings` (inside the page's settings column and its output tab)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.service = page.studio.service
        self.settings = page.settings

    def build(self, default: Preset) -> None:
        """The processor cells, then the faces and runtime groups, showing `default`."""
        self._processor_cells(default)
        with gr.Accordion("Faces: how they are found", open=False):
            self.group("faces", default.faces, skip=frozenset({"selector", "reference_image", "people"}))
        # The device, threads and the frame size cap are the server's (its operator's, at launch): no widget here.
        with gr.Accordion("Runtime: backend, precision, batch", open=False, elem_id="cell-runtime"):
            self.runtime = self.group("runtime", default.runtime)

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
