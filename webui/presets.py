"""The studio's presets row: pick a preset and load it, open a preset file, save the settings under a name (in the
user's presets folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from engine.core.errors import FacestudioError
from engine.job.settings import Preset, load_preset_raw, preset_names, save_user_preset
from engine.serve.service import server_settings
from webui import uploads
from webui.jobs import parse_preset_text
from webui.parts import Page
from webui.studio import user_message


class PresetsRow:
    """Builds the presets row at the top of the page's settings column and loads, opens and saves presets."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self) -> None:
        with gr.Row(equal_height=True):
            self.pick = gr.Dropdown(
                preset_names(), value="default", label="preset", scale=3, min_width=110, elem_id="preset-pick"
            )
            with gr.Column(scale=2, min_width=90):
                self.load = gr.Button("Load", size="sm", elem_id="preset-load")
                self.upload = uploads.UploadButton(
                    "Open file…", file_types=[".toml", ".json"], size="sm", elem_id="preset-open"
                )
        with gr.Row(equal_height=False):
            self.name = gr.Textbox(
                label="save as", placeholder="my-preset", scale=3, min_width=110, elem_id="preset-name"
            )
            with gr.Column(scale=2, min_width=90):
                self.save = gr.Button("Save", size="sm", elem_id="preset-save")
        self.status = gr.Markdown(elem_id="preset-status")

    def wire(self) -> None:
        page = self.page
        settings = page.settings.components
        for loaded in (
            self.load.click(self.on_load, [self.pick], [*settings, self.status], queue=False),
            self.upload.upload(self.on_open, [self.upload], [*settings, self.status]),
        ):
            page.written(loaded)
        self.save.click(self.on_save, [self.name, *settings], [self.pick, self.status], queue=False)

    def on_load(self, name: str, request: gr.Request) -> list[Any]:
        try:
            raw = load_preset_raw(name)
            values = self.page.values_for(raw)
        except FacestudioError as exc:
            return [gr.update()] * len(self.page.settings.entries) + [f"<span class='fs-warn'>{exc}</span>"]
        return [*values, f"loaded preset {name}{self._left_out(raw)}"]

    def _left_out(self, raw: dict[str, Any]) -> str:
        """What of a preset the page does not load: the server's settings and files (docs/SECURITY.md)."""
        kept = self.studio.without_files(raw)
        files = [f"{g}.{n}" for g, v in raw.items() if isinstance(v, dict) for n in v if n not in kept.get(g, {})]
        server = [f"{g}.{n}" for g, names in server_settings(self.studio.registry).items()
                  for n in names if n in (raw.get(g) or {})]  # fmt: skip
        notes = [f"{', '.join(server)}: the server's to set"] if server else []
        notes += [f"{', '.join(files)}: a file, upload it here"] if files else []
        return f" (not loaded — {'; '.join(notes)})" if notes else ""

    def on_open(self, file: str | None, request: gr.Request) -> list[Any]:
        session = self.page.session(request)
        keep = [gr.update()] * len(self.page.settings.entries)
        if not file:
            return [*keep, ""]
        name = self.studio.name(session, file)
        try:
            text = Path(file).read_text(encoding="utf-8")
            raw = parse_preset_text(text)
            values = self.page.values_for(raw)
        except (OSError, UnicodeDecodeError):
            return [*keep, f"<span class='fs-warn'>{name} is not a text file</span>"]
        except FacestudioError as exc:
            return [*keep, f"<span class='fs-warn'>{name}: {user_message(exc, session.names)}</span>"]
        finally:
            self.studio.guard.release(session.owner, [file])
        return [*values, f"loaded {name}{self._left_out(raw)}"]

    def on_save(self, name: str, *values: Any) -> tuple[Any, str]:
        raw = self.studio.without_files(self.page.settings.raw_from(values))  # files: this session's, not a preset's
        try:
            preset = Preset.parse(raw, self.studio.registry)
            path, replaced = save_user_preset(name, preset)
        except FacestudioError as exc:
            return gr.update(), f"<span class='fs-warn'>{exc}</span>"
        verb = "replaced" if replaced else "saved"
        return gr.update(choices=preset_names(), value=path.stem), f"{verb} preset {path.stem} (in your presets folder)"
