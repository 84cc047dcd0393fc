"""The studio's inputs: the source face photos and their faces, the target (its picture or player, what it is),
the frame slider, which faces to change, the faces on the chosen frame and the reference face picked from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from engine import media as video
from engine.core.errors import FacestudioError
from engine.core.options import describe
from engine.job.settings import FacesSettings, Preset
from webui import cells, uploads
from webui.parts import Page
from webui.studio import user_message


class Inputs:
    """Builds the inputs into the page's middle column and handles their changes."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self, default: Preset) -> None:
        settings = self.page.settings
        self.sources = uploads.File(
            label="source face photos", file_count="multiple", file_types=["image"], height=120, elem_id="sources"
        )
        self.source_status = gr.Markdown("**Source faces** — add one or more photos of the face to put in",
                                         elem_id="source-status")  # fmt: skip
        self.source_gallery = gr.Gallery(
            label="source faces", columns=5, height=118, allow_preview=False, object_fit="contain",
            elem_id="source-faces", show_label=False, fit_columns=False,
        )  # fmt: skip
        self.target = uploads.File(
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
        self.reference = settings.add(
            "faces", "reference_image", gr.Textbox(visible=False, elem_id="reference-path"), reference_view
        )

    def wire(self) -> None:
        page, preview = self.page, self.page.preview
        self.target.change(
            self.on_target, [self.target], [self.frame_index, self.target_image, self.target_video, self.target_info],
            queue=False,
        ).then(preview.on_preview, preview.inputs, preview.outputs, queue=False)  # fmt: skip
        self.sources.change(
            self.on_sources, [self.sources, page.values], [self.source_gallery, self.source_status], queue=False
        ).then(preview.on_preview, preview.inputs, preview.outputs, queue=False)  # fmt: skip
        page.written(
            self.frame_faces.select(
                self.on_pick, [self.face_paths], [self.reference, self.reference_picture, self.selector], queue=False
            )
        )
        self.reference.change(self.on_reference, [self.reference], [self.reference_picture], queue=False)

    # -- events -------------------------------------------------------------------------------------------------
    def on_target(self, path: str | None, request: gr.Request) -> tuple[Any, ...]:
        session = self.page.session(request)
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
        session = self.page.session(request)
        self.studio.note_upload(session, "sources", paths or [])
        heading = "**Source faces**"
        if not paths:
            return [], f"{heading} — add one or more photos of the face to put in"
        try:
            faces = FacesSettings.model_validate(self.page.settings.raw_from(values.items).get("faces", {}))
            pictures, problems = self.studio.source_faces(session, paths, faces)
        except Exception as exc:
            return [], f"{heading} — <span class='fs-warn'>{user_message(exc, session.names)}</span>"
        if problems:
            return pictures, f"{heading} — " + "; ".join(f"<span class='fs-warn'>{p}</span>" for p in problems)
        if len(pictures) > 1:
            return pictures, f"{heading} — {len(pictures)} photos: their faces are averaged into one identity"
        return pictures, f"{heading} — the face that will be put in"

    def on_reference(self, path: str | None, request: gr.Request) -> Any:
        """The reference picture, shown while the reference is a file of this session: the hidden textbox holding
        it is the browser's to send, and a path in it that is not the session's shows (and copies) nothing."""
        mine = bool(path) and self.studio.guard.allows(self.page.session(request).owner, str(path))
        return gr.update(value=path if mine else None, visible=mine)

    def on_pick(self, face_paths: list[str], event: gr.SelectData, request: gr.Request) -> tuple[Any, ...]:
        session = self.page.session(request)
        if event.index is None or not 0 <= int(event.index) < len(face_paths):
            return gr.update(), gr.update(), gr.update()
        reference = self.studio.reference_from(session, face_paths[int(event.index)])
        return reference, gr.update(value=reference, visible=True), "reference"
