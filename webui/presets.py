"""The studio's presets row: pick a preset and load it, open a preset file, save the settings under a name.

The built-in presets (and those this server's user keeps in `$FACESTUDIO_HOME/presets`) are shared and read-only;
what a user saves is theirs: kept per owner (the browser, and its login with one: `owner_folder`), listed to them
alone.
The picker is read when the page loads, so a saved preset is there after a reload; an opened file shows in it by
its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from engine.core.errors import FacestudioError
from engine.core.home import home
from engine.job.settings import Preset, load_preset_raw, preset_names, save_user_preset
from engine.serve.service import server_settings
from webui import uploads
from webui.jobs import parse_preset_text
from webui.parts import Page
from webui.studio import Session, user_message

OPENED = ":opened"  # the picker's value for the preset file last opened (never a preset's name)


def owner_folder(session: Session) -> Path:
    """Where an owner's own presets live (by the owner's id: a hash, never the login or the cookie)."""
    return home() / "studio" / "presets" / session.owner.id


def choices(session: Session, opened: str | None = None) -> list[tuple[str, str]]:
    """The picker's entries for a session: the shared presets, then the user's own ("name (yours)"), then the file
    last opened."""
    own = owner_folder(session)
    shared = set(preset_names())
    out = [(name if name in shared else f"{name} (yours)", name) for name in preset_names(own)]
    return out + ([(f"{opened} (opened file)", OPENED)] if opened else [])


class PresetsRow:
    """Builds the presets row at the top of the page's settings column and loads, opens and saves presets."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio

    def build(self) -> None:
        with gr.Row(equal_height=True, elem_classes="fs-presets"):
            self.pick = gr.Dropdown(
                preset_names(), value="default", label="settings preset", scale=3, min_width=120,
                elem_id="preset-pick",
            )  # fmt: skip
            with gr.Column(scale=2, min_width=90):
                self.load = gr.Button("Load", size="sm", elem_id="preset-load")
                self.upload = uploads.UploadButton(
                    "Open file…", file_types=[".toml", ".json"], size="sm", elem_id="preset-open"
                )
        with gr.Row(equal_height=False, elem_classes="fs-presets"):
            self.name = gr.Textbox(
                label="save as", placeholder="my-preset", scale=3, min_width=120, elem_id="preset-name"
            )
            with gr.Column(scale=2, min_width=90):
                self.save = gr.Button("Save", size="sm", elem_id="preset-save")
        self.status = gr.Markdown(elem_id="preset-status", min_height=0)
        # The preset file last opened (its name and settings), for Load to take again.
        self.opened = gr.State(None)

    def wire(self, app: gr.Blocks) -> None:
        page = self.page
        settings = page.settings.components
        app.load(self.on_page_load, None, [self.pick], queue=False)
        for loaded in (
            self.load.click(self.on_load, [self.pick, self.opened], [*settings, self.status], queue=False),
            self.upload.upload(self.on_open, [self.upload], [*settings, self.status, self.pick, self.opened]),
        ):
            page.written(loaded)
        self.save.click(self.on_save, [self.name, self.opened, *settings], [self.pick, self.status], queue=False)

    def on_page_load(self, request: gr.Request) -> Any:
        """The picker as this user's presets are now (read per page load, not at server start)."""
        try:
            session = self.page.session(request)
        except FacestudioError:
            return gr.skip()
        return gr.update(choices=choices(session), value="default")

    def on_load(self, name: str, opened: dict[str, Any] | None, request: gr.Request) -> list[Any]:
        session = self.page.session(request)
        keep = [gr.update()] * len(self.page.settings.entries)
        try:
            if name == OPENED and opened:
                raw = opened["raw"]
                return [*self.page.values_for(raw), f"loaded {opened['name']} again{self._left_out(raw)}"]
            raw = load_preset_raw(name, owner_folder(session))
            values = self.page.values_for(raw)
        except FacestudioError as exc:
            return [*keep, f"<span class='fs-warn'>{user_message(exc, session.names)}</span>"]
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
            return [*keep, "", gr.update(), gr.update()]
        name = self.studio.name(session, file)
        try:
            raw = parse_preset_text(Path(file).read_text(encoding="utf-8"))
            values = self.page.values_for(raw)
        except (OSError, UnicodeDecodeError):
            return [*keep, f"<span class='fs-warn'>{name} is not a text file</span>", gr.update(), gr.update()]
        except FacestudioError as exc:
            message = f"<span class='fs-warn'>{name}: {user_message(exc, session.names)}</span>"
            return [*keep, message, gr.update(), gr.update()]
        finally:
            self.studio.guard.release(session.owner, [file])
        picked = gr.update(choices=choices(session, name), value=OPENED)
        return [*values, f"loaded {name}{self._left_out(raw)}", picked, {"name": name, "raw": raw}]

    def on_save(self, name: str, opened: dict[str, Any] | None, request: gr.Request, *values: Any) -> tuple[Any, str]:
        session = self.page.session(request)
        raw = self.studio.without_files(self.page.raw(values))  # files: this session's, not a preset's
        try:
            preset = Preset.parse(raw, self.studio.registry)
            path, replaced = save_user_preset(name, preset, owner_folder(session))
        except FacestudioError as exc:
            return gr.update(), f"<span class='fs-warn'>{exc}</span>"
        verb = "replaced" if replaced else "saved"
        picked = gr.update(choices=choices(session, opened["name"] if opened else None), value=path.stem)
        return picked, f"{verb} preset {path.stem} (yours, kept for {session.owner.label}; the shared ones unchanged)"
