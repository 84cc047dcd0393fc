"""Settings widgets generated from the settings models (a processor's `Options`, the faces, video and runtime
groups) through `engine.core.options`: a closed set is a dropdown, a bounded number a slider with its unit, and an
option shows only while it applies (its `Shown.when`/`unless`), so a new option or processor needs no UI code.
The same metadata says what a web user may set (docs/SECURITY.md): the server's settings (`Shown.server`) get no
widget, and a setting that names a file (`Shown.file`) gets an upload control — the microphone too for audio —
whose value is the user's own upload, never a typed path.

`Settings` keeps every widget in one order and turns their values into a preset mapping and back; `Values` is a
browser session's copy of what they hold, kept on the server, so a change sends its cell's values, not all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
from pydantic import BaseModel

from engine.core.options import OptionView
from engine.job.settings import SETTINGS_GROUPS, Preset
from webui import uploads

ENABLE = "enable"  # the group of the processor toggles: (ENABLE, processor id)
BACKEND = "backend"  # the group of the per-processor backend choices: (BACKEND, processor id)
JOB_BACKEND = "job"  # a processor's backend choice meaning "the job's runtime.backend"
# Fields a cell sets with widgets of its own rather than a generated one.
PROCESSOR_SKIP = frozenset({"backend"})


@dataclass
class Entry:
    group: str
    name: str
    component: gr.Component
    view: OptionView | None = None


class Values:
    """What the settings widgets hold, as the server last heard it: one value per `Settings.entries`, in order.

    A browser session's copy, kept server-side in a `gr.State` (`Settings.state`): the preview and the other
    handlers take this one input instead of every widget. Gradio's client spends about a millisecond per input
    gathering an event's values before its request leaves (with 80-odd widgets, 50–90 ms measured here, more than
    the default chain's own time on a 720p frame), and its server as long again preprocessing them. A change in a
    cell sends that cell's widgets (`Settings.cells`); a handler that sets widgets is followed by one that hears
    them all again."""

    def __init__(self, values: Sequence[Any]) -> None:
        self.items = list(values)

    def hear(self, positions: Sequence[int], values: Sequence[Any]) -> None:
        """Take `values` as what the widgets at `positions` (in `Settings.entries`) now hold."""
        if len(values) != len(positions):
            raise ValueError(f"expected {len(positions)} widget values, got {len(values)}")
        for position, value in zip(positions, values, strict=True):
            self.items[position] = value


@dataclass
class Settings:
    """Every settings widget in one order — the order handlers receive their values in."""

    models: dict[str, type[BaseModel]]
    entries: list[Entry] = field(default_factory=list)

    @property
    def components(self) -> list[gr.Component]:
        return [e.component for e in self.entries]

    def add(self, group: str, name: str, component: gr.Component, view: OptionView | None = None) -> gr.Component:
        self.entries.append(Entry(group, name, component, view))
        return component

    def index(self, group: str, name: str) -> int:
        return next(i for i, e in enumerate(self.entries) if (e.group, e.name) == (group, name))

    def component(self, group: str, name: str) -> gr.Component:
        return self.entries[self.index(group, name)].component

    def state(self) -> gr.State:
        """A `gr.State` holding each session's `Values`, starting from what the widgets show as built (call inside
        the Blocks, after every widget is added)."""
        return gr.State(Values([e.component.value for e in self.entries]))

    def cells(self) -> dict[str, list[int]]:
        """The positions of each cell's widgets: a processor's toggle, options and backend under its id, the other
        groups (faces, runtime, video) under their names."""
        out: dict[str, list[int]] = {}
        for position, entry in enumerate(self.entries):
            out.setdefault(entry.name if entry.group in (ENABLE, BACKEND) else entry.group, []).append(position)
        return out

    def raw_from(self, values: Sequence[Any]) -> dict[str, Any]:
        """The preset mapping the widgets' `values` describe (processors in registry order)."""
        raw: dict[str, Any] = {"processors": []}
        for entry, value in zip(self.entries, values, strict=True):
            if entry.group == ENABLE:
                if value:
                    raw["processors"].append(entry.name)
            elif entry.group == BACKEND:
                if value != JOB_BACKEND:
                    raw.setdefault(entry.name, {})["backend"] = value
            elif entry.view is not None:
                raw.setdefault(entry.group, {})[entry.name] = from_widget(entry.view, value)
        return raw

    def values_from(self, preset: Preset) -> list[Any]:
        """Every widget's value for `preset` (the inverse of `raw_from`)."""
        values = []
        for entry in self.entries:
            if entry.group == ENABLE:
                values.append(entry.name in preset.processors)
            elif entry.group == BACKEND:
                options = preset.options.get(entry.name)
                values.append((options.backend if options else None) or JOB_BACKEND)
            elif entry.view is not None and entry.view.shown.file:
                values.append(None)  # a file is the session's upload, never part of a preset
            elif entry.group in SETTINGS_GROUPS:
                values.append(shown_value(getattr(getattr(preset, entry.group), entry.name)))
            else:
                options = preset.options.get(entry.group) or self.models[entry.group]()
                values.append(shown_value(getattr(options, entry.name)))
        return values


def label(view: OptionView) -> str:
    """The widget's label: the option's, with its unit unless that only repeats it ("fps", not "fps (fps)")."""
    unit = view.shown.unit
    if not unit:
        return view.label
    return unit if unit.lower() == view.label.lower() else f"{view.label} ({unit})"


def widget(
    view: OptionView,
    value: Any,
    choices: Sequence[tuple[str, Any]] | None = None,
    siblings: Mapping[str, Any] | None = None,
) -> gr.Component:
    """The component for one setting, showing `value`. `choices` relabels a choice's values (model ids with their
    availability and licence); `siblings`, the group's values, say which of a multi-choice's values are implied
    (see `implied`)."""
    common: dict[str, Any] = {"label": label(view), "info": view.description}
    if view.kind in ("choice", "open_choice"):
        options = list(choices) if choices else [(str(c), c) for c in view.choices or ()]
        if view.kind == "open_choice":
            return gr.Dropdown(choices=options, value=value, allow_custom_value=True, **common)
        if view.optional:  # an optional choice (a second swapper) can be none: empty, read back as None
            return gr.Dropdown(choices=[("none", ""), *options], value=value or "", filterable=False, **common)
        return gr.Dropdown(choices=options, value=value, filterable=False, **common)
    if view.kind == "multi":
        options = list(choices) if choices else [(str(c), c) for c in view.choices or ()]
        fixed = implied(view, siblings or {})
        return gr.CheckboxGroup(choices=options, value=list(value or ()), **{**common, **fixed})
    if view.kind == "switch":
        return gr.Checkbox(value=bool(value), **common)
    if view.kind == "slider":
        return gr.Slider(minimum=view.low, maximum=view.high, step=view.step, value=value, **common)
    if view.shown.file:  # upload controls have no info line: their label says it all
        titled = {"label": f"{label(view)}: {view.description}" if view.description else label(view)}
        if view.shown.file == "audio":
            return gr.Audio(value=value, type="filepath", sources=["upload", "microphone"], **titled)
        # Not gr.Image: its input processing re-saves the picture, and the job would get a copy that is no upload.
        return uploads.File(value=value, file_types=[view.shown.file], **titled)
    if view.kind == "number" and not view.optional:
        # No bounds here: the settings model checks them, with a message naming the setting.
        return gr.Number(value=value, precision=0 if view.integer else None, **common)
    # Text (and optional numbers: a Number cannot be empty, and empty means "the default").
    placeholder = "empty: the default" if view.optional else None
    return gr.Textbox(value="" if value is None else str(value), placeholder=placeholder, **common)


def user_events(component: gr.Component) -> list[Any]:
    """The events by which the user (not a handler) changes a widget: `input`; an upload control's upload and clear."""
    if isinstance(component, gr.File):
        return [component.upload, component.clear]
    return [component.input]


def implied(view: OptionView, siblings: Mapping[str, Any]) -> dict[str, Any]:
    """How a multi-choice shows the values its `Shown.implied` turns on given its `siblings`' values: ticked and
    fixed (CSS `fs-implied-N`: its Nth box cannot be clicked), with the reason after the description. The
    options model adds them whatever the boxes say, so the choice is not offered; the boxes show what runs."""
    on = view.shown.implied_now(siblings) if view.shown.implied else ()
    choices = list(view.choices or ())
    reasons = [
        f"{choice}: always on with {' and '.join(f'{k} {siblings.get(k)}' for k in view.shown.implied[choice])}"
        for choice in on
    ]
    return {
        "elem_classes": ["fs-implied", *(f"fs-implied-{choices.index(c) + 1}" for c in on)] if on else [],
        "info": " — ".join([view.description or "", *reasons]).strip(" —"),
    }


def complete(views: Sequence[OptionView], values: Mapping[str, Any]) -> dict[str, Any]:
    """The group's widget `values` (by name) with each multi-choice's implied values included, as the options
    model will read them (so an option that applies while an implied value is on shows)."""
    out = dict(values)
    for view in views:
        if view.kind == "multi" and view.shown.implied and view.name in out:
            have = {*(out[view.name] or ()), *view.shown.implied_now(out)}
            out[view.name] = [c for c in view.choices or () if c in have]
    return out


def from_widget(view: OptionView, value: Any) -> Any:
    """The setting's value for what its widget holds (empty = None where None is allowed; an open choice's typed
    number as a number)."""
    if isinstance(value, str) and value.strip() == "" and view.optional:
        return None
    if view.kind in ("slider", "number") and value is not None and str(value).strip() != "":
        try:
            number = float(value)
        except ValueError:
            return value  # the settings model refuses it, naming the setting
        return int(round(number)) if view.integer else number
    if view.kind == "open_choice" and isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def shown_value(value: Any) -> Any:
    """A settings value as a widget shows it (paths as text, None as nothing)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return list(value)  # a multi-choice setting: the checkboxes ticked
    return str(value) if isinstance(value, Path) else value


def add_group(
    settings: Settings,
    group: str,
    options: BaseModel,
    views: Sequence[OptionView],
    choices_for: Callable[[OptionView], Sequence[tuple[str, Any]] | None],
    *,
    skip: frozenset[str] = frozenset(),
) -> dict[str, gr.Component]:
    """The widgets of one settings group, in declaration order (advanced ones folded away at the end), added to
    `settings`; each shows only while it applies (see `wire_visibility`). The server's settings get none: a web
    user may not set them. Returns name → component."""
    made: dict[str, gr.Component] = {}
    for_users = [v for v in views if not v.shown.server and v.name not in skip]  # the server's are its operator's
    plain = [v for v in for_users if not v.shown.advanced]
    advanced = [v for v in for_users if v.shown.advanced]
    values = dict(options)

    def add(view: OptionView) -> None:
        shown = widget(view, shown_value(getattr(options, view.name)), choices_for(view), values)
        made[view.name] = settings.add(group, view.name, shown, view)

    for view in plain:
        add(view)
    if advanced:
        with gr.Accordion("advanced", open=False):
            for view in advanced:
                add(view)
    for view in [*plain, *advanced]:
        made[view.name].visible = view.applies(values)
    return made


def wire_visibility(views: Sequence[OptionView], made: dict[str, gr.Component]) -> None:
    """Show or hide each conditional option of a group, and tick and fix a multi-choice's implied values, when a
    field their conditions name changes."""
    dependent = [v for v in views if v.name in made and (v.shown.when or v.shown.unless)]
    fixing = [v for v in views if v.name in made and v.kind == "multi" and v.shown.implied]
    if not dependent and not fixing:
        return
    conditions = [(*v.shown.when, *v.shown.unless) for v in dependent]
    conditions += [tuple(n for when in v.shown.implied.values() for n in when) for v in fixing]
    triggers = sorted({n for names in conditions for n in names if n in made})
    names = sorted({*triggers, *(v.name for v in fixing)})
    by_name = {v.name: v for v in views}

    def update(*values: Any) -> list[Any]:
        current = complete(views, {n: from_widget(by_name[n], value) for n, value in zip(names, values, strict=True)})
        updates = {v.name: {"visible": v.applies(current)} for v in dependent}
        for v in fixing:
            updates.setdefault(v.name, {}).update(value=current[v.name], **implied(v, current))
        return [gr.update(**u) for u in updates.values()]

    outputs = [made[n] for n in dict.fromkeys(v.name for v in [*dependent, *fixing])]
    for name in triggers:
        made[name].change(update, [made[n] for n in names], outputs, queue=False, show_progress="hidden")
