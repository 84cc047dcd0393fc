"""The studio's preview: the chosen frame before and after the chain the settings describe (`Studio.preview`, the
path every batch of a run takes) — as the whole frame (a before/after slider) or face by face (each changed face's
crop before and after, large enough to judge the mouth and eyes) — its status line, the chain at a glance and each
cell's line about its models, and the face debugger toggle.

Every settings change re-renders it. Nothing here downloads: a model the chain needs that is not here is one line
in its cell and in the status ("… is not downloaded (size, licence) — open Models"). A preview that cannot render
leaves the last picture marked out of date (`fs-stale`); a slow one shows "rendering…" with the time it has taken
(Gradio's progress on the picture, styled in page.css)."""

from __future__ import annotations

import logging
from typing import Any

import cv2
import gradio as gr
import numpy as np

from engine.core.errors import FacestudioError
from engine.core.types import Frame
from engine.faces.crops import face_label, thumbnail
from engine.job.settings import Preset
from engine.serve.service import Rendered
from webui import cells
from webui.parts import Page
from webui.settings_column import missing_line
from webui.studio import Preview, Session, user_message

log = logging.getLogger(__name__)

# The processor the preview's debugger toggle appends to the chain (processors/face_debugger.py).
DEBUGGER = "face_debugger"
# A preview that waited this long (seconds) for the model says so in its status line.
WAIT_SHOWN_S = 0.1
FRAME, FACES = "frame", "face by face"
CROP = 288  # px, each face's crop in the face-by-face view (before and after side by side)
_GAP = 8  # px between the crops


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


def face_pairs(rendered: Rendered, size: int = CROP) -> Frame | None:
    """Each changed face's crop before and after, side by side (size×size px each), one face a row, labelled as
    on the preview; H×W×3 uint8 RGB. None when no face was changed. The after crop is the same part of the
    after frame (scaled when the chain changed the frame's size)."""
    if not rendered.chosen:
        return None
    sy = rendered.after.shape[0] / rendered.before.shape[0]
    sx = rendered.after.shape[1] / rendered.before.shape[1]
    place = {id(face): i for i, face in enumerate(rendered.detected, 1)}
    rows = []
    for face in rendered.chosen:
        x1, y1, x2, y2 = face.box
        before = thumbnail(rendered.before, face.box, size)
        after = thumbnail(rendered.after, (x1 * sx, y1 * sy, x2 * sx, y2 * sy), size)
        row = np.full((size, size * 2 + _GAP, 3), 255, np.uint8)
        row[:, :size], row[:, size + _GAP :] = before, after
        label = face_label(place.get(id(face), 0), face)
        for colour, width in (((0, 0, 0), 4), ((255, 255, 255), 1)):
            cv2.putText(row, label, (8, 28), cv2.FONT_HERSHEY_SIMPLEX, 0.8, colour, width, cv2.LINE_AA)
        rows.append(row)
    gap = np.full((_GAP, size * 2 + _GAP, 3), 255, np.uint8)
    return np.ascontiguousarray(np.concatenate([part for row in rows for part in (row, gap)][:-1], axis=0))


class PreviewPanel:
    """Builds the preview into the page's right column; `on_preview` renders the chosen frame."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self) -> None:
        with gr.Row(equal_height=True, elem_classes="fs-view-row"):
            self.mode = gr.Radio(
                [FRAME, FACES], value=FRAME, show_label=False, elem_id="view-mode", container=False, scale=2,
                min_width=200,
            )  # fmt: skip
            self.debug_preview = gr.Checkbox(
                label="face debugger", value=False, elem_id="preview-debug", container=False, scale=2, min_width=150,
            )  # fmt: skip
        self.compare = gr.ImageSlider(
            label="before / after (chosen frame)", type="filepath", height=350, elem_id="compare", interactive=False
        )
        self.pairs = gr.Image(
            label="face by face: before | after", type="filepath", height=350, elem_id="face-pairs",
            interactive=False, visible=False,
        )  # fmt: skip
        self.preview_status = gr.Markdown(elem_id="preview-status", min_height=0)

    @property
    def progress(self) -> dict[str, Any]:
        """How a preview event shows that it runs: on the picture, with the time it has taken."""
        return {"show_progress": "full", "show_progress_on": [self.compare, self.pairs]}

    def wire(self) -> None:
        """Re-render on a settings change, the frame slider (mouse, keys or a typed number), the Preview button,
        the debugger toggle and the view. `inputs` and `outputs` are the preview's, for the events other parts chain
        a preview to."""
        page = self.page
        inputs = page.inputs
        self.inputs = [inputs.target, inputs.sources, inputs.frame_index, inputs.face_paths, self.debug_preview,
                       self.mode, inputs.target_problem, page.values]  # fmt: skip
        self.outputs = [self.compare, self.pairs, inputs.frame_faces, inputs.face_paths, self.preview_status,
                        *page.settings_column.outputs, page.live.status]  # fmt: skip
        settings = page.settings.components
        # A change sends only its cell's widgets (see cells.Values). On `input`, not `change`: the handlers that
        # set widgets would otherwise start a preview per widget they set.
        for positions in page.settings.cells().values():
            widgets = [settings[p] for p in positions]
            gr.on(
                [event for w in widgets for event in cells.user_events(w)], page.hearing(positions),
                [*self.inputs, *widgets], self.outputs, trigger_mode="always_last", queue=False, **self.progress,
            )  # fmt: skip
        self.mode.change(
            lambda mode: (gr.update(visible=mode == FRAME), gr.update(visible=mode == FACES)), [self.mode],
            [self.compare, self.pairs], queue=False, show_progress="hidden",
        )  # fmt: skip
        gr.on(
            [inputs.frame_index.input, inputs.frame_index.release, page.run.preview_btn.click,
             self.debug_preview.change, self.mode.change],
            self.on_preview, self.inputs, self.outputs, trigger_mode="always_last", queue=False, **self.progress,
        )  # fmt: skip

    def on_preview(
        self,
        target: str | None,
        sources: list[str] | None,
        index: float,
        shown_faces: list[str],
        debugging: bool,
        mode: str,
        problem: str,
        values: cells.Values,
        request: gr.Request,
    ) -> tuple[Any, ...]:
        """The chosen frame through the chain the settings describe, and those settings applied to the session's
        live stream: (before/after, face by face, faces on the frame, their paths, status line, chain strip, each
        cell's line, Live tab status)."""
        session = self.page.session(request)
        raw = self.page.raw(values.items)
        column = self.page.settings_column
        try:
            preset: Preset | None = self.studio.service.preset(raw)
        except FacestudioError:
            preset = None  # the preview below says why
        missing = column.missing(preset) if preset is not None else {}
        shown = self._preview(session, raw, target, sources or [], int(index), shown_faces, debugging, mode, problem,
                              missing)  # fmt: skip
        return (*shown, *column.describe(preset, missing), self.page.live.apply(session, raw, sources or []))

    def _preview(
        self,
        session: Session,
        raw: dict[str, Any],
        target: str | None,
        sources: list[str],
        index: int,
        shown_faces: list[str],
        debugging: bool,
        mode: str,
        problem: str,
        missing: dict[str, Any],
    ) -> tuple[Any, ...]:
        """(before/after, face by face, faces on the frame, their paths, status line) for frame `index` of
        `target` through the chain `raw` describes, with the people's mapping and the debugger toggle applied;
        problems in the status, the last picture then marked out of date."""
        if not target or problem:
            empty = gr.update(value=None, elem_classes=[])
            said = "add a target image or video to see a preview" if not target else "no preview: see the target"
            return empty, empty, [], [], said
        stale = gr.update(elem_classes=["fs-stale"])
        if missing:
            lines = "; ".join(missing_line(s) for statuses in missing.values() for s in statuses)
            return stale, stale, gr.skip(), gr.skip(), f"preview: {lines}"
        if debugging and DEBUGGER in self.studio.registry and DEBUGGER not in raw["processors"]:
            raw = {**raw, "processors": [*raw["processors"], DEBUGGER]}  # the preview's toggle: not the run's chain
        needs_source = [p for p in raw["processors"] if self.studio.registry[p].needs_source]
        try:
            raw, sources = self.page.people.apply(session, raw, target, sources)
            if needs_source and not sources:
                preset = self.studio.service.preset(raw)
                preview = self.studio.frame_only(session, target, index, preset.faces, preset.runtime.max_pixels)
                found = len(preview.rendered.detected)
                note = f"{found} face{'s' if found != 1 else ''} found; add a source face photo to see the swap"
                return (*self._pictures(session, preview, mode), _captioned(preview), preview.faces,
                        f"frame {index}: {note}{_waited(preview)}")  # fmt: skip
            preview = self.studio.preview(session, raw, target, sources, index)
        except Exception as exc:
            message = user_message(exc, session.names)
            if not isinstance(exc, FacestudioError):
                log.exception("preview failed")
            return stale, stale, gr.skip(), gr.skip(), f"<span class='fs-warn'>preview: {message}</span>"
        rendered = preview.rendered
        chosen = len(rendered.chosen)
        faces = (
            f"; {len(rendered.detected)} face{'s' if len(rendered.detected) != 1 else ''} found, {chosen} changed"
            if any(self.studio.registry[p].needs_faces for p in raw["processors"])
            else ""
        )
        text = f"frame {index}: chain {rendered.chain_ms:.0f} ms{faces}{_waited(preview)}"
        compare, pairs = self._pictures(session, preview, mode)
        if preview.faces == shown_faces:  # the same faces as shown: nothing to send again
            return compare, pairs, gr.skip(), gr.skip(), text
        return compare, pairs, _captioned(preview), preview.faces, text

    def _pictures(self, session: Session, preview: Preview, mode: str) -> tuple[Any, Any]:
        """The before/after slider's update and, in the face-by-face view, the face pairs' (else unchanged)."""
        rendered = preview.rendered
        compare = gr.update(
            value=(preview.before, preview.after), slider_position=_slider_at(rendered), elem_classes=[]
        )
        if mode != FACES:
            return compare, gr.skip()
        pairs = face_pairs(rendered)
        if pairs is None:
            return compare, gr.update(value=None, elem_classes=[])
        return compare, gr.update(value=self.studio.picture(session, pairs), elem_classes=[])
