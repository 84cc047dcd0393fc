"""The studio's inputs: the source face photos and their faces, the target (its picture or player, what it is),
the frame slider with the trim range on it, which faces to change, the faces on the chosen frame and the
reference face picked from them.

What they show is derived from the current target: a new one resets the frame, the trim, the reference (a face of
the old target), a selector that needed the old target's faces or people, the faces shown and a stale run line.
The slider moves by mouse, keys or a typed number alike; the player follows it (webui/page.js)."""

from __future__ import annotations

import bisect
import logging
from fractions import Fraction
from pathlib import Path
from typing import Any

import gradio as gr

from engine import media as video
from engine.core.errors import FacestudioError
from engine.core.options import describe
from engine.job.settings import FacesSettings, Preset
from webui import cells, uploads
from webui.parts import Page
from webui.studio import Session, user_message

log = logging.getLogger(__name__)

# Selectors that need the target's own faces or people: a new target falls back to "one".
_OF_THE_TARGET = ("reference", "map")


def trim_bounds(info: video.MediaInfo, first: int, last: int | None) -> tuple[float, float | None]:
    """`video.trim_start`/`trim_end` (seconds from the first frame) that keep frames `first` to `last` (inclusive;
    None: to the end) of `info`'s video: each bound half way between two frames' times, so the engine's span
    (`media.select`, start inclusive, end exclusive) holds exactly those frames whatever the rounding."""
    stamps, tb = info.timestamps, Fraction(info.time_base)

    def between(i: int) -> float:
        return round(float((stamps[i - 1] + stamps[i]) * tb / 2), 6)

    start = 0.0 if first <= 0 else between(first)
    end = None if last is None or last + 1 >= len(stamps) else between(last + 1)
    return start, end


def frames_of(info: video.MediaInfo, start: float, end: float | None) -> tuple[int, int]:
    """The first and last frame (inclusive) the trim [start, end) seconds keeps."""
    span = video.select(info, start, end)
    first = bisect.bisect_left(info.timestamps, round(span.start / Fraction(info.time_base)))
    return first, first + span.frames - 1


class Inputs:
    """Builds the inputs into the page's middle column and handles their changes."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self, default: Preset) -> None:
        settings = self.page.settings
        self.sources = uploads.File(
            label="source face photos", file_count="multiple", file_types=["image"], height=90, elem_id="sources"
        )
        self.source_status = gr.Markdown("**Source faces** — add one or more photos of the face to put in",
                                         elem_id="source-status", min_height=0)  # fmt: skip
        self.source_gallery = gr.Gallery(
            label="source faces", columns=6, height=110, allow_preview=False, object_fit="contain",
            elem_id="source-faces", show_label=False, fit_columns=False, elem_classes="fs-faces",
        )  # fmt: skip
        # What a click on each source picture sets faces.source_face to (None: a photo with one face).
        self.source_picks = gr.State([])
        self.target = uploads.File(
            label="target image or video", file_types=["image", "video"], height=90, elem_id="target"
        )
        self.target_image = gr.Image(
            label="target", type="filepath", interactive=False, height=200, visible=False, elem_id="target-image"
        )
        self.target_video = gr.Video(
            label="target", interactive=False, height=200, visible=False, elem_id="target-video"
        )
        with gr.Group(visible=False, elem_id="timeline") as self.timeline:
            self.frame_index = gr.Slider(0, 1, step=1, value=0, label="frame", elem_id="frame")
            self.trim_bar = gr.HTML(elem_id="trim-bar", apply_default_css=False)
            with gr.Row(elem_classes="fs-trim-row"):
                self.trim_start = gr.Button("Start here", size="sm", elem_id="trim-start")
                self.trim_end = gr.Button("End here", size="sm", elem_id="trim-end")
                self.trim_clear = gr.Button("Whole video", size="sm", elem_id="trim-clear")
        # The target's frame rate, for the page script that keeps the player on the slider's frame.
        self.target_fps = gr.Textbox(elem_id="target-fps", elem_classes="fs-hidden", show_label=False)
        self.target_info = gr.Markdown(elem_id="target-info", min_height=0)
        # What is wrong with the target ("" when it reads): said once, under it; the preview and Run then say
        # nothing more than that they wait for a readable target.
        self.target_problem = gr.State("")
        # True while History puts a job's target back with its settings: that target keeps their trim range.
        self.restoring = gr.State(False)
        faces_view = next(v for v in describe(FacesSettings) if v.name == "selector")
        self.selector = settings.add(
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
        gr.Markdown("**Faces on this frame** (labelled as on the preview) — click one to pick it as the reference",
                    min_height=0)  # fmt: skip
        self.frame_faces = gr.Gallery(
            label="faces on this frame", columns=6, height=110, allow_preview=False, object_fit="contain",
            elem_id="frame-faces", show_label=False, fit_columns=False, elem_classes="fs-faces",
        )  # fmt: skip
        self.face_paths = gr.State([])
        self.reference_picture = gr.Image(
            label="reference face", type="filepath", interactive=False, height=110, visible=False,
            elem_id="reference-picture",
        )  # fmt: skip
        reference_view = next(v for v in describe(FacesSettings) if v.name == "reference_image")
        self.reference = settings.add(
            "faces", "reference_image", gr.Textbox(visible=False, elem_id="reference-path"), reference_view
        )

    def wire(self) -> None:
        page, preview = self.page, self.page.preview
        column = page.settings_column
        trims = [column.video["trim_start"], column.video["trim_end"]]
        target_out = [
            self.frame_index, self.timeline, self.target_image, self.target_video, self.target_info, self.target_fps,
            self.target_problem, self.reference, self.reference_picture, self.selector, self.frame_faces,
            self.face_paths, page.run.status, *trims, self.trim_bar, self.restoring,
        ]  # fmt: skip
        page.written(
            self.target.change(self.on_target, [self.target, self.restoring, *trims, page.values], target_out,
                               queue=False)
        )  # fmt: skip
        sources_out = [self.source_gallery, self.source_picks, self.source_status, page.run.status]
        self.sources.change(
            self.on_sources, [self.sources, page.values], sources_out, queue=False,
        ).then(preview.on_preview, preview.inputs, preview.outputs, queue=False, **preview.progress)  # fmt: skip
        # A click on a face of a photo with several takes that face; the gallery marks the face taken whether it was
        # clicked or its number typed.
        source_face = page.settings.component("faces", "source_face")
        page.written(self.source_gallery.select(self.on_source_pick, [self.source_picks], [source_face], queue=False))
        source_face.change(
            self.on_source_face, [self.sources, page.values, source_face], sources_out, queue=False,
            show_progress="hidden",
        )  # fmt: skip
        page.written(
            self.frame_faces.select(
                self.on_pick, [self.face_paths], [self.reference, self.reference_picture, self.selector], queue=False
            )
        )
        # The reference picture shows while it counts: with the reference selector.
        gr.on(
            [self.selector.change, self.reference.change], self.on_reference, [self.selector, self.reference],
            [self.reference_picture], queue=False, show_progress="hidden",
        )  # fmt: skip
        for button, handler in ((self.trim_start, self.on_trim_start), (self.trim_end, self.on_trim_end)):
            page.written(button.click(handler, [self.target, self.frame_index, *trims], [*trims, self.trim_bar],
                                      queue=False))  # fmt: skip
        page.written(self.trim_clear.click(lambda: (0.0, "", ""), None, [*trims, self.trim_bar], queue=False))
        for trim in trims:
            trim.input(self.on_trim_typed, [self.target, *trims], [self.trim_bar], queue=False)

    # -- events -------------------------------------------------------------------------------------------------
    def on_target(
        self, path: str | None, restoring: bool, start: Any, end: Any, values: cells.Values, request: gr.Request
    ) -> tuple[Any, ...]:
        """Everything derived from the target, from scratch: (frame slider, timeline, picture, player, what it
        is, its fps, its problem, reference, reference picture, selector, faces on the frame and their paths, the
        run line, trim start and end, trim bar, restoring). A target History puts back keeps its job's trim."""
        session = self.page.session(request)
        self.studio.note_upload(session, "target", [path] if path else [])
        selector = values.items[self.page.settings.index("faces", "selector")]
        info = _video_info(path) if restoring else None
        trim = (gr.update(), gr.update(), trim_bar(info, *_seconds(start, end))) if info else (0.0, "", "")
        reset = (
            "", gr.update(value=None, visible=False), "one" if selector in _OF_THE_TARGET else gr.update(), [], [],
            self.page.run.idle_status(session), *trim, False,
        )  # fmt: skip
        hidden = gr.update(visible=False, value=None)
        no_frames = gr.update(maximum=1, value=0), gr.update(visible=False)
        if not path:
            return (*no_frames, hidden, hidden, "", "", "", *reset)
        name = self.studio.name(session, path)
        try:
            info = video.probe(Path(path))
        except FacestudioError as exc:
            log.info("target %s cannot be read: %s", name, exc)
            problem = f"{name} cannot be read as an image or video: it is damaged, incomplete or not media"
            return (*no_frames, hidden, hidden, f"<span class='fs-warn'>{problem} — upload it again</span>", "",
                    problem, *reset)  # fmt: skip
        if info.kind == "image":
            return (*no_frames, gr.update(value=path, visible=True), hidden,
                    f"{name}: image, {info.width}×{info.height}", "", "", *reset)  # fmt: skip
        text = (
            f"{name}: video, {info.width}×{info.height}, {info.frame_count} frames at {info.fps:.3g} fps, "
            f"{'with' if info.has_audio else 'no'} audio"
        )
        player = self.studio.playable(session, path)
        if player is None:
            text += " — this format does not play in browsers: the preview shows the chosen frame"
        return (
            gr.update(maximum=max(info.frame_count - 1, 1), value=0),
            gr.update(visible=True),
            hidden,
            gr.update(value=player, visible=player is not None),
            text,
            f"{info.fps:.6g}",
            "",
            *reset,
        )

    def on_sources(self, paths: list[str] | None, values: cells.Values, request: gr.Request) -> tuple[Any, ...]:
        session = self.page.session(request)
        self.studio.note_upload(session, "sources", paths or [])
        return self._source_gallery(session, paths, self.page.raw(values.items).get("faces", {}))

    def on_source_face(
        self, paths: list[str] | None, values: cells.Values, source_face: Any, request: gr.Request
    ) -> tuple[Any, ...]:
        """The source gallery again when faces.source_face changes (a click on a face, or a number typed)."""
        faces = {**self.page.raw(values.items).get("faces", {}), "source_face": source_face}
        return self._source_gallery(self.page.session(request), paths, faces)

    def _source_gallery(self, session: Session, paths: list[str] | None, faces: dict[str, Any]) -> tuple[Any, ...]:
        """The source gallery's pictures, what a click on each sets, the line above it and the run line."""
        idle = self.page.run.idle_status(session)
        heading = "**Source faces**"
        if not paths:
            return [], [], f"{heading} — add one or more photos of the face to put in", idle
        try:
            pictures, picks, problems = self.studio.source_faces(session, paths, FacesSettings.model_validate(faces))
        except Exception as exc:
            return [], [], f"{heading} — <span class='fs-warn'>{user_message(exc, session.names)}</span>", idle
        if problems:
            line = "; ".join(f"<span class='fs-warn'>{p}</span>" for p in problems)
        elif len(paths) > 1:
            line = f"{len(paths)} photos: their faces are averaged into one identity"
        else:
            line = "the face that will be put in"
        if not problems and any(pick is not None for pick in picks):
            line += " — of a photo with several faces, the one marked ✓: click another to use it"
        return pictures, picks, f"{heading} — {line}", idle

    def on_source_pick(self, picks: list[int | None], event: gr.SelectData) -> Any:
        """faces.source_face for the clicked picture of the source gallery: its number from the left in a photo with
        several faces (a photo with one face: unchanged)."""
        index = event.index if isinstance(event.index, int) else None
        if index is None or not 0 <= index < len(picks) or picks[index] is None:
            return gr.update()
        return picks[index]

    def on_reference(self, selector: str, path: str | None, request: gr.Request) -> Any:
        """The reference picture, shown while it counts (the `reference` selector) and the reference is a file of
        this session: the hidden textbox holding it is the browser's to send, and a path in it that is not the
        session's shows (and copies) nothing."""
        mine = bool(path) and self.studio.guard.allows(self.page.session(request).owner, str(path))
        shown = mine and selector == "reference"
        return gr.update(value=path if shown else None, visible=shown)

    def on_pick(self, face_paths: list[str], event: gr.SelectData, request: gr.Request) -> tuple[Any, ...]:
        session = self.page.session(request)
        if event.index is None or not 0 <= int(event.index) < len(face_paths):
            return gr.update(), gr.update(), gr.update()
        reference = self.studio.reference_from(session, face_paths[int(event.index)])
        return reference, gr.update(value=reference, visible=True), "reference"

    # -- the trim range -----------------------------------------------------------------------------------------
    def on_trim_start(self, target: str | None, index: float, start: Any, end: Any) -> tuple[Any, ...]:
        """Start the output at the slider's frame (the end moves after it when it was before)."""
        info = _video_info(target)
        if info is None:
            return gr.update(), gr.update(), ""
        first, last = int(index), self._kept(info, start, end)[1]
        new_start, new_end = trim_bounds(info, first, last if last > first else None)
        return new_start, "" if new_end is None else str(new_end), trim_bar(info, new_start, new_end)

    def on_trim_end(self, target: str | None, index: float, start: Any, end: Any) -> tuple[Any, ...]:
        """End the output with the slider's frame, included (the start moves before it when it was after)."""
        info = _video_info(target)
        if info is None:
            return gr.update(), gr.update(), ""
        first, last = self._kept(info, start, end)[0], int(index)
        new_start, new_end = trim_bounds(info, first if first <= last else 0, last)
        return new_start, "" if new_end is None else str(new_end), trim_bar(info, new_start, new_end)

    def on_trim_typed(self, target: str | None, start: Any, end: Any) -> str:
        info = _video_info(target)
        return "" if info is None else trim_bar(info, *_seconds(start, end))

    @staticmethod
    def _kept(info: video.MediaInfo, start: Any, end: Any) -> tuple[int, int]:
        try:
            return frames_of(info, *_seconds(start, end))
        except (FacestudioError, ValueError):
            return 0, info.frame_count - 1


def trim_bar(info: video.MediaInfo, start: float, end: float | None) -> str:
    """The trim range drawn on the timeline (HTML: the kept part of the bar) with its frames and seconds."""
    try:
        first, last = frames_of(info, start, end)
    except (FacestudioError, ValueError) as exc:
        return f"<div class='fs-trim-text fs-warn'>trim: {exc}</div>"
    count = max(info.frame_count - 1, 1)
    left, width = first / count * 100, max((last - first) / count * 100, 0.5)
    whole = first == 0 and last >= info.frame_count - 1
    words = "the whole video" if whole else f"frames {first}–{last} ({last - first + 1} frames)"
    return (
        f"<div class='fs-trim'><i style='left:{left:.2f}%;width:{width:.2f}%'></i></div>"
        f"<div class='fs-trim-text'>output: {words}</div>"
    )


def _seconds(start: Any, end: Any) -> tuple[float, float | None]:
    def number(value: Any) -> float | None:
        return None if value is None or str(value).strip() == "" else float(value)

    return number(start) or 0.0, number(end)


def _video_info(target: str | None) -> video.MediaInfo | None:
    if not target:
        return None
    try:
        info = video.probe(Path(target))
    except FacestudioError:
        return None
    return info if info.kind == "video" else None
