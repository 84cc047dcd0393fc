"""The studio's preview: the chosen frame before and after the chain the settings describe (`Studio.preview`, the
path every batch of a run takes), its status line, and the face debugger toggle. Every settings change re-renders
it; problems are said in its status line, never raised."""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from engine.core.errors import FacestudioError
from engine.faces.crops import face_label
from engine.serve.service import Rendered
from webui import cells
from webui.parts import Page
from webui.studio import Preview, Session, user_message

log = logging.getLogger(__name__)

# The processor the preview's debugger toggle appends to the chain (processors/face_debugger.py).
DEBUGGER = "face_debugger"
# A preview that waited this long (seconds) for the model says so in its status line.
WAIT_SHOWN_S = 0.1


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


class PreviewPanel:
    """Builds the before/after view into the page's right column; `on_preview` renders the chosen frame."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self) -> None:
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

    def wire(self) -> None:
        """Re-render on a settings change, the frame slider's release, the Preview button and the debugger toggle.
        `inputs` and `outputs` are the preview's, for the events other parts chain a preview to."""
        page = self.page
        inputs = page.inputs
        self.inputs = [inputs.target, inputs.sources, inputs.frame_index, inputs.face_paths, self.debug_preview,
                       page.values]  # fmt: skip
        self.outputs = [self.compare, inputs.frame_faces, inputs.face_paths, self.preview_status, page.live.status]
        settings = page.settings.components
        # A change sends only its cell's widgets (see cells.Values). On `input`, not `change`: the handlers that
        # set widgets would otherwise start a preview per widget they set.
        for positions in page.settings.cells().values():
            widgets = [settings[p] for p in positions]
            gr.on(
                [event for w in widgets for event in cells.user_events(w)], page.hearing(positions),
                [*self.inputs, *widgets], self.outputs,
                trigger_mode="always_last", show_progress="minimal", queue=False,
            )  # fmt: skip
        gr.on(
            [inputs.frame_index.release, page.run.preview_btn.click, self.debug_preview.change], self.on_preview,
            self.inputs, self.outputs, trigger_mode="always_last", show_progress="minimal", queue=False,
        )  # fmt: skip

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
        session = self.page.session(request)
        raw = self.page.settings.raw_from(values.items)
        shown = self._preview(session, raw, target, sources or [], int(index), shown_faces, debugging)
        return (*shown, self.page.live.apply(session, raw, sources or []))

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
            raw, sources = self.page.people.apply(session, raw, target, sources)
            if needs_source and not sources:
                preset = self.studio.service.preset(raw)
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
