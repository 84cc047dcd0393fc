"""What the studio page's parts (webui/inputs.py, preview.py, run.py, presets.py, settings_column.py,
history_tab.py, people.py, live.py) use of the page they are built into: a protocol, since the page
(webui/page.py) imports them. Each part builds its widgets inside the page's layout and wires its own events; the
page keeps the layout and what the parts share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import gradio as gr

from webui.cells import Settings
from webui.studio import Session, Studio


class Page(Protocol):
    """The page as its parts see it: the studio, every settings widget (`settings`) and each session's copy of
    their values (`values`, a `gr.State` of `cells.Values`), and the parts themselves (typed `Any`: each part's
    module imports this one)."""

    studio: Studio
    settings: Settings
    values: gr.State
    consent: gr.Checkbox
    tabs: gr.Tabs
    presets: Any
    settings_column: Any
    inputs: Any
    preview: Any
    run: Any
    people: Any
    live: Any
    history: Any

    def session(self, request: gr.Request) -> Session:
        """The session of the login or browser `request` comes from (refused without either)."""
        ...

    def written(self, dependency: Any) -> Any:
        """Chain, after an event whose handler sets settings widgets, a preview that first hears every widget again;
        returns the chained event."""
        ...

    def raw(self, values: Sequence[Any]) -> dict[str, Any]:
        """The preset mapping the settings widgets' `values` describe, as a job reads it."""
        ...

    def values_for(self, raw: dict[str, Any]) -> list[Any]:
        """Every settings widget's value for the preset mapping `raw` (refused, typed, when `raw` is not valid)."""
        ...
