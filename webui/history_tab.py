"""The studio's History tab: the session's finished jobs (webui/history.py), newest first, each with its
thumbnail, summary, settings, downloads, "Load these settings and inputs" and Delete. Loading one goes back to the
Studio tab with its settings, target and sources, and says so there."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import gradio as gr

from engine.core.errors import FacestudioError
from webui.parts import Page


class HistoryTab:
    """Builds the History tab's rows (when the tab is opened, and after each change: `version`, a `gr.State`
    bumped by whatever adds or removes an entry)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self, tab: gr.Tab) -> None:
        self.tab = tab
        self.version = gr.State(0)
        with gr.Row():
            gr.Markdown("Finished jobs of this session (this browser), newest first.")
            self.clear = gr.Button("Delete all", size="sm", scale=0, min_width=100, elem_id="history-clear")

        # Rendered at each change (a new `version`: every version but 0 has been rendered) and, while there was
        # none, when the tab is first opened (not with the page: a first load stays light). Opening the tab again
        # renders nothing: a render replaces the rows' buttons and their events, and a click on a button of the
        # rows being replaced would name an event that is gone.
        @gr.render(inputs=[self.version], triggers=[self.version.change], concurrency_limit=1,
                   concurrency_id="history-rows")  # fmt: skip
        def show(version: int, request: gr.Request) -> None:
            self._rows(request)

    def wire(self) -> None:
        # Queued, as every event that changes `version`: Gradio tells a State's change (which re-renders the
        # rows) only from a queued event.
        self.tab.select(self.on_open, [self.version], [self.version])
        self.clear.click(self.on_clear, [self.version], [self.version])

    @staticmethod
    def on_open(version: int) -> Any:
        """Opening the tab renders the rows when nothing has yet (version 0); they are kept as they are after."""
        return version + 1 if version == 0 else gr.update()

    def _rows(self, request: gr.Request) -> None:
        try:
            session = self.page.session(request)
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
                    load = gr.Button("Load these settings and inputs", size="sm")
                    delete = gr.Button("Delete", size="sm", variant="stop")
            page = self.page
            inputs = page.inputs
            chosen = load.click(
                self._load(entry.id), None,
                [*page.settings.components, inputs.target, inputs.sources, inputs.restoring, page.tabs,
                 page.presets.status],
                queue=False,
            )  # fmt: skip
            page.written(chosen)
            delete.click(self._delete(entry.id), [self.version], [self.version])

    def _load(self, entry_id: str) -> Any:
        def load(request: gr.Request) -> list[Any]:
            """The entry's settings, target and sources back in the Studio tab, with a line saying so (and what
            could not come back)."""
            session = self.page.session(request)
            entry = session.history.get(entry_id)
            if entry is None:
                keep = [gr.update()] * (len(self.page.settings.entries) + 3)
                return [*keep, gr.update(), "<span class='fs-warn'>that job is no longer in the history</span>"]
            target, sources = session.history.inputs(entry)
            said = f"loaded the settings and inputs of {Path(entry.output).name} (from History)"
            if target is None:
                said = f"loaded the settings of {Path(entry.output).name}; its inputs were not kept: add them again"
            return [
                *self.page.values_for(entry.settings),
                self.studio.share(session, target) if target else gr.update(),
                [self.studio.share(session, s) for s in sources] if target else gr.update(),
                target is not None,
                gr.Tabs(selected="studio-tab"),
                said,
            ]

        return load

    def _delete(self, entry_id: str) -> Any:
        def delete(version: int, request: gr.Request) -> int:
            session = self.page.session(request)
            gone = session.history.remove(entry_id)
            if gone is not None:
                self.studio.guard.release(session.owner, [gone.output, gone.sidecar, gone.thumbnail or ""])
            return version + 1

        return delete

    def on_clear(self, version: int, request: gr.Request) -> int:
        session = self.page.session(request)
        for entry in session.history.entries():
            session.history.remove(entry.id)
            self.studio.guard.release(session.owner, [entry.output, entry.sidecar, entry.thumbnail or ""])
        return version + 1
