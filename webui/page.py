"""The studio page (Gradio Blocks): three columns that fit one screen — settings, inputs, preview and run — with
tabs for output settings, history, models and live below.

    ┌ settings ───────────┐┌ source & target ─────┐┌ before / after ──────────┐
    │ preset              ││ source photos + faces ││ preview of the frame     │
    │ ▸ one cell per      ││ target picture/player ││ consent · Run Cancel     │
    │   processor (toggle,││ frame slider          ││ progress                 │
    │   options that      ││ faces on the frame,   ││ result, summary,         │
    │   apply)            ││ which faces, reference││ downloads                │
    │ ▸ faces ▸ runtime   ││ people                │└──────────────────────────┘
    └─────────────────────┘└───────────────────────┘
      [Output settings] [History] [Models] [Live]

Each concern is a part that builds its widgets and wires its events, taking the page (webui/parts.py): the presets
row (webui/presets.py), the settings cells (webui/settings_column.py, from the registry and each processor's
`Options` through webui/cells.py: a new processor gets its cell with no UI code), the inputs (webui/inputs.py), the
people panel (webui/people.py), the preview (webui/preview.py), the run and its API endpoint (webui/run.py), and
the History, Models and Live tabs (webui/history_tab.py, models_tab.py, live.py). The page keeps the layout and
what they share: the session a request comes from, each session's copy of the settings' values, and `written`.
Every change re-renders the chosen frame through the chain (`Studio.preview`, the path every batch of a run
takes). Handlers never raise for foreseeable problems: they say so in the panel concerned, so no panel keeps a
stale error badge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gradio as gr

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

CSS = """
.fs-header h1 {margin: 0; font-size: 1.35rem}
.fs-header p {margin: 0; opacity: .75}
.fs-col {gap: 6px !important}
.fs-status {min-height: 2.2em}
.fs-warn {color: #b45309}
#run, #cancel, #preview-btn {min-width: 0}
"""


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
            with gr.Row(elem_classes="fs-header"):
                gr.Markdown("# facestudio\nSwap and restore faces, upscale frames, keep the audio.")
            with gr.Row(equal_height=False):
                with gr.Column(scale=3, min_width=330, elem_classes="fs-col"):
                    self.presets.build()
                    self.settings_column.build(default)
                with gr.Column(scale=4, min_width=340, elem_classes="fs-col"):
                    self.inputs.build(default)
                    self.people.build()
                with gr.Column(scale=5, min_width=420, elem_classes="fs-col"):
                    self.preview.build()
                    self.run.build()
            with gr.Tabs():
                with gr.Tab("Output settings"):
                    self.settings_column.group("video", default.video)
                with gr.Tab("History", id="history-tab") as history_tab:
                    self.history.build(history_tab)
                with gr.Tab("Models", id="models-tab") as models_tab:
                    self.models.build(models_tab)
                with gr.Tab("Live", id="live-tab"):
                    self.live.build()
            self._wire()
        return app

    def _wire(self) -> None:
        self.values = self.settings.state()
        # Previews skip Gradio's queue, as every short event here does: its join-and-stream round trip cost 25–30 ms
        # of every preview (benchmarks/ui.py), and the service's model lock already lets one render at a time through.
        self.preview.wire()
        self.people.wire()
        self.inputs.wire()
        self.settings_column.wire()
        self.run.wire()
        self.presets.wire()
        self.history.wire()
        self.models.wire()
        self.run.api()

    # -- what the parts share -----------------------------------------------------------------------------------
    def session(self, request: gr.Request) -> Session:
        return session_of(self.studio, request)

    def values_for(self, raw: dict[str, Any]) -> list[Any]:
        return self.settings.values_from(Preset.parse(raw, self.studio.registry))

    def written(self, dependency: Any) -> Any:
        """Chain, after an event whose handler sets settings widgets, a preview that first hears every widget again
        (the session's `Values` do not see what a handler sets). Returns the chained event."""
        return dependency.then(
            self.hearing(range(len(self.settings.entries))), [*self.preview.inputs, *self.settings.components],
            self.preview.outputs, queue=False,
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
            values: cells.Values,
            request: gr.Request,
            *widgets: Any,
        ) -> tuple[Any, ...]:
            values.hear(positions, widgets)
            return self.preview.on_preview(target, sources, index, shown_faces, debugging, values, request)

        return hear
