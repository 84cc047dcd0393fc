"""The studio page (Gradio Blocks): a header with the one responsible-use consent, then four tabs — Studio,
History, Models, Live. The Studio tab is three columns that fit one screen at 1440×900 — settings, inputs,
preview and run — and stacks as inputs → preview → Run → settings in a narrow window or on a phone.

    facestudio                                   [✓ responsible-use notice and consent]
    [Studio] [History] [Models] [Live]
    ┌ settings ───────────┐┌ inputs ──────────────┐┌ preview ─────────────────┐
    │ the chain at a glance││ source photos + faces ││ frame | face by face     │
    │ preset               ││ target picture/player ││ before / after           │
    │ ▸ one cell per       ││ frame slider, trim    ││ Run Cancel Preview       │
    │   processor          ││ which faces, faces on ││ progress                 │
    │ ▸ faces ▸ output     ││ the frame, reference  ││ result, summary,         │
    │ ▸ runtime            ││ people                ││ downloads                │
    └──────────────────────┘└───────────────────────┘└──────────────────────────┘

Each concern is a part that builds its widgets and wires its events, taking the page (webui/parts.py): the presets
row (webui/presets.py), the settings cells (webui/settings_column.py, from the registry and each processor's
`Options` through webui/cells.py: a new processor gets its cell with no UI code), the inputs (webui/inputs.py), the
people panel (webui/people.py), the preview (webui/preview.py), the run and its API endpoint (webui/run.py), and
the History, Models and Live tabs (webui/history_tab.py, models_tab.py, live.py). The page keeps the layout and
what they share: the session a request comes from, each session's copy of the settings' values, the settings as a
job reads them (`raw`), and `written`. Its browser side (webui/page.js) keeps the consent across reloads, keeps the
target's player on the frame the slider shows, and opens a cell or the Models tab from a link.

Every change re-renders the chosen frame through the chain (`Studio.preview`, the path every batch of a run
takes). What the page shows is derived from the current inputs: a new target resets the frame, the trim, the
reference, the people and the faces shown; a reference counts only with the `reference` selector. Handlers never
raise for foreseeable problems: they say so in the panel concerned, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gradio as gr

from engine.core import consent
from engine.job.settings import SETTINGS_GROUPS, Preset, load_preset_raw
from webui import cells
from webui.cells import Settings
from webui.history_tab import HistoryTab
from webui.inputs import Inputs
from webui.live import LiveTab
from webui.models_tab import ModelsTab
from webui.people import PeoplePanel
from webui.presets import PresetsRow
from webui.preview import PreviewPanel
from webui.privacy import owner_from
from webui.run import RunPanel
from webui.settings_column import SettingsColumn
from webui.studio import Session, Studio

HERE = Path(__file__).resolve().parent
CSS = (HERE / "page.css").read_text(encoding="utf-8")


def session_of(studio: Studio, request: gr.Request) -> Session:
    """The session of the login or browser a request comes from (refused without either)."""
    cookies = dict(getattr(request, "cookies", None) or {})
    return studio.session(owner_from(cookies, getattr(request, "username", None)))


class Page:
    """Builds the Blocks for a Studio from its parts (see the module's docstring)."""

    def __init__(self, studio: Studio) -> None:
        self.studio = studio
        self.settings = Settings({pid: cls.Options for pid, cls in studio.registry.items()} | dict(SETTINGS_GROUPS))
        self.presets = PresetsRow(self)
        self.settings_column = SettingsColumn(self)
        self.inputs = Inputs(self)
        self.people = PeoplePanel(self, session_of)
        self.preview = PreviewPanel(self)
        self.run = RunPanel(self)
        self.history = HistoryTab(self)
        self.models = ModelsTab(studio.service)
        self.live = LiveTab(self)

    # -- building -----------------------------------------------------------------------------------------------
    def build(self) -> gr.Blocks:
        default = Preset.parse(load_preset_raw("default"), self.studio.registry)
        # No telemetry: Gradio's analytics would call its servers as the page is built and served (docs/SECURITY.md).
        with gr.Blocks(
            title="facestudio", delete_cache=(3600, 6 * 3600), fill_width=True, analytics_enabled=False
        ) as app:
            with gr.Row(elem_classes="fs-header", equal_height=True):
                gr.Markdown("# facestudio\nSwap and restore faces, upscale frames, keep the audio.", min_height=0)
                # One consent for the studio and the Live tab, kept by the browser once given (webui/page.js).
                self.consent = gr.Checkbox(
                    label="I have read the responsible-use notice and have the consent of the people shown",
                    info=consent.NOTICE, value=False, elem_id="consent", scale=2,
                )  # fmt: skip
                gr.HTML(
                    "", js_on_load=(HERE / "page.js").read_text(encoding="utf-8"), elem_id="page-script",
                    elem_classes="fs-hidden", apply_default_css=False,
                )  # fmt: skip
            with gr.Tabs(elem_id="tabs") as self.tabs:
                with gr.Tab("Studio", id="studio-tab"):
                    self._studio(default)
                with gr.Tab("History", id="history-tab") as history_tab:
                    self.history.build(history_tab)
                with gr.Tab("Models", id="models-tab") as models_tab:
                    self.models.build(models_tab)
                with gr.Tab("Live", id="live-tab"):
                    self.live.build()
            self._wire(app)
        return app

    def _studio(self, default: Preset) -> None:
        with gr.Row(equal_height=False, elem_id="studio-row"):
            with gr.Column(scale=3, min_width=300, elem_classes="fs-col", elem_id="col-settings"):
                self.settings_column.chain_strip()
                self.presets.build()
                self.settings_column.build(default)
            with gr.Column(scale=4, min_width=300, elem_classes="fs-col", elem_id="col-inputs"):
                self.inputs.build(default)
                self.people.build()
            with gr.Column(scale=5, min_width=340, elem_classes="fs-col", elem_id="col-preview"):
                self.preview.build()
                self.run.build()

    def _wire(self, app: gr.Blocks) -> None:
        self.values = self.settings.state()
        # Previews skip Gradio's queue, as every short event here does: its join-and-stream round trip cost 25–30 ms
        # of every preview (benchmarks/ui.py), and the service's model lock already lets one render at a time through.
        self.preview.wire()
        self.people.wire()
        self.inputs.wire()
        self.settings_column.wire()
        self.run.wire()
        self.presets.wire(app)
        self.history.wire()
        self.models.wire()
        self.run.api()

    # -- what the parts share -----------------------------------------------------------------------------------
    def session(self, request: gr.Request) -> Session:
        return session_of(self.studio, request)

    def values_for(self, raw: dict[str, Any]) -> list[Any]:
        return self.settings.values_from(Preset.parse(raw, self.studio.registry))

    def raw(self, values: Sequence[Any]) -> dict[str, Any]:
        """The preset mapping the settings widgets' `values` describe, as a job reads it: the reference face only
        with the `reference` selector (picking a face, then choosing another selector, leaves nothing behind)."""
        raw = self.settings.raw_from(values)
        faces = raw.get("faces", {})
        if faces.get("selector") != "reference":
            faces.pop("reference_image", None)
        return raw

    def written(self, dependency: Any) -> Any:
        """Chain, after an event whose handler sets settings widgets, a preview that first hears every widget again
        (the session's `Values` do not see what a handler sets). Returns the chained event."""
        return dependency.then(
            self.hearing(range(len(self.settings.entries))), [*self.preview.inputs, *self.settings.components],
            self.preview.outputs, queue=False, **self.preview.progress,
        )  # fmt: skip

    def hearing(self, positions: Sequence[int]) -> Any:
        """A handler taking the preview's inputs and then the values of the widgets at `positions`: it notes those
        in the session's `Values`, then previews."""

        def hear(
            target: str | None,
            sources: list[str] | None,
            index: float,
            shown_faces: list[str],
            debugging: bool,
            mode: str,
            problem: str,
            values: cells.Values,
            request: gr.Request,
            *widgets: Any,
        ) -> tuple[Any, ...]:
            values.hear(positions, widgets)
            return self.preview.on_preview(
                target, sources, index, shown_faces, debugging, mode, problem, values, request
            )

        return hear
