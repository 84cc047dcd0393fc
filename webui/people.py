"""The studio's people panel: who is in the target, each shown as a picture with "leave as is" or source photos
of their own — the `map` selector's mapping, made by pointing instead of by number.

"Find the people" scans the target as `launch.py faces scan` does (sampled frames; nothing is rendered). Each
person gets a row: their picture, where they were seen, and an upload for the photos to put on them (empty: they
are left as they are). Giving one person photos switches "which faces to change" to `map`; the preview and the
run then take each person's photos from here (`PeoplePanel.apply`), so a preview shows the mapping's result.
The mapping names people by number and picture hash, never by a server path (presets, history and sidecars
hold no upload's path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from engine.core.errors import FacestudioError, InvalidInput
from engine.faces.people import Scan
from engine.job.settings import FacesSettings, RuntimeSettings
from webui import uploads
from webui.cells import Values
from webui.parts import Page
from webui.studio import Session, user_message

HINT = "**People** — find who is in the target, then give each person their own source photos"


def label(number: int) -> str:
    """What a person is called here: as on the preview and its face pictures (`face_label`), `P0`, `P1`, …"""
    return f"P{number}"


def _listed(scan: Scan) -> str:
    names = [label(n) for n in scan.numbers]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@dataclass
class PeopleState:
    """A session's people: the target they were found on, the scan, each person's picture (a file the session
    may fetch) and the photos given to each person (uploads, by person number)."""

    target: str
    scan: Scan
    pictures: list[str]
    sources: dict[int, list[str]] = field(default_factory=dict)


class PeoplePanel:
    """Builds the panel into the page (inside its inputs column) and turns a session's mapping into job settings."""

    def __init__(self, page: Page, session_of: Callable[[Any, gr.Request], Session]) -> None:
        """`session_of(studio, request)`: the session a request comes from (the page's rule)."""
        self.page = page
        self.studio = page.studio
        self._session_of = session_of

    # -- building -----------------------------------------------------------------------------------------------
    def build(self) -> None:
        with gr.Accordion("People: a source for each person", open=False, elem_id="people"):
            self.status = gr.Markdown(HINT, elem_id="people-status")
            self.find = gr.Button("Find the people", size="sm", elem_id="people-find")
            self.version = gr.State(0)

            @gr.render(
                inputs=[self.version], triggers=[self.version.change], concurrency_limit=1, concurrency_id="people-rows"
            )
            def rows(version: int, request: gr.Request) -> None:
                self._rows(request)

    def wire(self) -> None:
        """Events (once the page has its settings' `values` state)."""
        page = self.page
        self.find.click(
            self.on_find, [page.inputs.target, self.version, page.values], [self.version, self.status],
            concurrency_id="preview", concurrency_limit=4,
        )  # fmt: skip
        # Queued: Gradio tells a State's change (which re-renders the rows) only from a queued event.
        page.inputs.target.change(self.on_target, [self.version], [self.version, self.status])

    def _rows(self, request: gr.Request) -> None:
        session = self._session(request)
        state: PeopleState | None = session.people if session is not None else None
        if state is None:
            return
        for person, picture in zip(state.scan.people, state.pictures, strict=True):
            number = person.number
            with gr.Row(equal_height=False, elem_classes="fs-person", elem_id=f"person-{number}"):
                gr.Image(
                    picture, show_label=False, height=96, width=96, interactive=False, container=False, scale=0,
                    min_width=96, elem_id=f"person-{number}-picture",
                )  # fmt: skip
                with gr.Column(scale=3, min_width=160):
                    seen = f"{person.first:.1f}–{person.last:.1f} s" if person.last > person.first else "one frame"
                    gr.Markdown(f"**{label(number)}** · seen on {len(person.frames)} sampled frames ({seen})")
                    given = state.sources.get(number)
                    files = uploads.File(
                        value=given or None, label="their source photos (none: leave as is)", file_count="multiple",
                        file_types=["image"], height=70, elem_id=f"person-{number}-sources",
                    )  # fmt: skip
            for event in (files.upload, files.clear, files.delete):
                self.page.written(
                    event(self._given(number), [files], [self.page.inputs.selector, self.status], queue=False)
                )

    # -- events -------------------------------------------------------------------------------------------------
    def on_find(self, target: str | None, version: int, values: Values, request: gr.Request) -> tuple[int, str]:
        session = self._session_of(self.studio, request)
        if not target:
            return version, f"{HINT}: add a target image or video first"
        raw = self.page.raw(values.items)
        try:
            faces = FacesSettings.model_validate(raw.get("faces", {}))
            runtime = RuntimeSettings.model_validate(raw.get("runtime", {}))
            found, pictures = self.studio.people_of(session, target, faces, runtime)
        except Exception as exc:
            return version, f"**People** — <span class='fs-warn'>{user_message(exc, session.names)}</span>"
        previous: PeopleState | None = session.people
        state = PeopleState(target, found, pictures)
        if previous is not None and previous.target == target:
            # Found again (other face settings): photos stay with the people whose picture is unchanged.
            kept = {p.number: p.thumbnail_hash for p in previous.scan.people}
            state.sources = {
                n: paths for n, paths in previous.sources.items()
                if (now := found.person(n)) is not None and kept.get(n) == now.thumbnail_hash
            }  # fmt: skip
        session.people = state
        name = self.studio.name(session, target)
        if not found.people:
            return version + 1, f"**People** — no face found in {name} on {len(found.sampled)} sampled frames"
        return version + 1, f"**People** — {_listed(found)} in {name}: give a person photos to put their face in"

    def on_target(self, version: int, request: gr.Request) -> tuple[int, str]:
        session = self._session(request)
        if session is not None and session.people is not None:
            session.people = None
            return version + 1, HINT
        return version, HINT

    def _given(self, number: int) -> Any:
        def given(paths: list[str] | None, request: gr.Request) -> tuple[Any, str]:
            session = self._session_of(self.studio, request)
            state: PeopleState | None = session.people
            if state is None:
                return gr.update(), f"{HINT}: find the people first"
            self.studio.note_upload(session, f"person-{number}", paths or [])
            if paths:
                state.sources[number] = list(paths)
            else:
                state.sources.pop(number, None)
            return ("map" if state.sources else gr.update()), self._summary(session, state)

        return given

    def _summary(self, session: Session, state: PeopleState) -> str:
        if not state.sources:
            return "**People** — no one has source photos yet: everyone is left as they are"
        parts = [
            f"{label(n)} ← {', '.join(self.studio.name(session, p) for p in paths)}"
            for n, paths in sorted(state.sources.items())
        ]
        return "**People** — " + "; ".join(parts) + "; everyone else is left as they are"

    # -- the mapping as job settings ----------------------------------------------------------------------------
    def apply(
        self, session: Session, raw: dict[str, Any], target: str | None, sources: Sequence[str]
    ) -> tuple[dict[str, Any], list[str]]:
        """`raw` and the sources for a preview or run: unchanged unless "which faces to change" is `map`; then the
        sources are every mapped person's photos and `faces.people` says whose they are (by position), with each
        person's picture hash, so a run on another target (or other face settings) is refused, not misapplied."""
        faces = raw.get("faces", {})
        if faces.get("selector") != "map":
            return raw, list(sources)
        state: PeopleState | None = session.people
        if state is None or state.target != target:
            raise InvalidInput("which faces to change is map: find the people of this target (People panel) first")
        if not state.sources:
            raise InvalidInput("which faces to change is map: give at least one person source photos (People panel)")
        mapped: list[str] = []
        people = []
        for number, paths in sorted(state.sources.items()):
            person = state.scan.person(number)
            assert person is not None  # sources are kept only for people of this scan
            people.append(
                {
                    "person": number,
                    "sources": list(range(len(mapped), len(mapped) + len(paths))),
                    "thumbnail": person.thumbnail_hash,
                }
            )
            mapped += paths
        return {**raw, "faces": {**faces, "people": people}}, mapped

    def _session(self, request: gr.Request) -> Session | None:
        try:
            return self._session_of(self.studio, request)
        except FacestudioError:
            return None
