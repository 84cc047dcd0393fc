"""What every front end shows about a setting, declared once beside the field (ARCHITECTURE.md §3).

A field of a processor's `Options` or of a settings group (faces, video, runtime) may carry one `Shown` in its
`Annotated` metadata::

    pixel_boost: Annotated[Literal[128, 256, 512], Shown(when={"model": INSWAPPER}, unit="px")] = Field(...)

`describe(model)` turns a settings model into `OptionView`s — the control kind (choice, switch, slider, number,
text), its choices, bounds, step and unit, and the condition under which the option applies — which the web UI,
the CLI's settings help and the preset JSON Schema all read. No front end has per-field code.

The same metadata says who may set a field (docs/SECURITY.md): `Shown(server=True)` marks the operator's settings
(device, threads, the frame size cap …), which a user of the studio, the jobs API or live may not change (the
service refuses them and applies the server's own); `Shown(file="audio")` marks a setting that names a file, which
a web or API user gives as an upload of their own and only the operator (the CLI) as a path.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, GetJsonSchemaHandler
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

Kind = Literal["choice", "multi", "open_choice", "switch", "slider", "number", "text"]
# What a file setting holds: the upload control a front end gives it (and the files it accepts): a kind of media,
# or the one extension of a model file the user brings (a deep swapper's DeepFaceLab/DeepFaceLive `.dfm`).
FileKind = Literal["image", "audio", "video", ".dfm"]
# A condition's allowed values: a fixed tuple, or a function giving them when asked (e.g. from the catalogue,
# which can be swapped with $FACESTUDIO_MANIFEST).
Values = Sequence[Any] | Callable[[], Sequence[Any]]


@dataclass(frozen=True)
class Shown:
    """How a setting is shown and when it applies.

    when: the option applies only while each named sibling field holds one of the given values (all must hold);
        a multi-choice sibling holds a value when it includes it.
    unless: ... and while none of these named fields holds one of the given values.
    unit: shown after the value (``%``, ``px``, ``s``, ``fps``, ``× input``); None for plain numbers and text.
    models: the field's values are ids of the catalogue's models of this task: front ends label them with
        availability and licence, and a field that is not a Literal takes its choices from the catalogue.
    suggest: usual values of an open field (a dropdown that also takes other values: `auto`, 1, 4, 8 …).
    advanced: shown folded away in the UI (still a normal setting everywhere else).
    server: the operator's setting (set at launch: the CLI, `ui --max-pixels`, a server preset): a user of the
        studio, the jobs API or live may not change it, and the UI does not show it.
    file: the setting names a file of this kind: an upload of the user's own from the studio and the jobs API (the
        studio gives it an upload control), a path only from the CLI.
    label: what front ends call the option (default: its name, with spaces for underscores).
    implied: a multi-choice's values that are always on while a condition on its siblings holds ({value:
        {field: values}}, as `when`): the options model adds them (`with_implied`), and front ends do not offer
        them then (an option the model cannot do without is not a choice).
    """

    when: Mapping[str, Values] = field(default_factory=dict)
    unless: Mapping[str, Values] = field(default_factory=dict)
    unit: str | None = None
    models: str | None = None
    suggest: tuple[Any, ...] = ()
    advanced: bool = False
    server: bool = False
    file: FileKind | None = None
    label: str | None = None
    implied: Mapping[Any, Mapping[str, Values]] = field(default_factory=dict)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The same facts in the preset JSON Schema, as `x-facestudio` (JSON Schema allows `x-` keywords)."""
        out = handler(schema)
        extra: dict[str, Any] = {}
        if self.when:
            extra["when"] = {k: list(_values(v)) for k, v in self.when.items()}
        if self.unless:
            extra["unless"] = {k: list(_values(v)) for k, v in self.unless.items()}
        if self.unit:
            extra["unit"] = self.unit
        if self.models:
            extra["models"] = self.models
        if self.suggest:
            extra["suggest"] = list(self.suggest)
        if self.advanced:
            extra["advanced"] = True
        if self.server:
            extra["server"] = True
        if self.file:
            extra["file"] = self.file
        if self.implied:
            extra["implied"] = {str(c): {k: list(_values(v)) for k, v in w.items()} for c, w in self.implied.items()}
        if extra:
            out["x-facestudio"] = extra
        return out

    def condition(self) -> str:
        """When the option applies, in words ("" when always): `model in [landmark_warp] and mask in [box]`."""
        conditions = [f"{k} in [{', '.join(map(str, _values(v)))}]" for k, v in self.when.items()]
        conditions += [f"{k} not in [{', '.join(map(str, _values(v)))}]" for k, v in self.unless.items()]
        return " and ".join(conditions)

    def applies(self, values: Mapping[str, Any]) -> bool:
        """Whether the option applies given its siblings' current `values` (missing names count as holding)."""
        return _all_hold(self.when, values) and all(
            not (name in values and _holds(values[name], _values(banned))) for name, banned in self.unless.items()
        )

    def implied_now(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The `implied` values that are on given the siblings' current `values`."""
        return tuple(choice for choice, when in self.implied.items() if _all_hold(when, values))


def _all_hold(when: Mapping[str, Values], values: Mapping[str, Any]) -> bool:
    return all(not (name in values and not _holds(values[name], _values(allowed))) for name, allowed in when.items())


def with_implied(model: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (a settings model's fields by name) with every multi-choice field's `implied` values added where
    their condition holds (in the field's choice order)."""
    out = dict(values)
    for name, info in model.model_fields.items():
        meta = shown(info)
        extra = meta.implied_now(out) if meta.implied else ()
        if name in out and any(c not in out[name] for c in extra):
            choices = view(name, info).choices or ()
            have = {*out[name], *extra}
            out[name] = tuple(c for c in choices if c in have)
    return out


def _values(values: Values) -> Sequence[Any]:
    return values() if callable(values) else values


def _holds(value: Any, values: Sequence[Any]) -> bool:
    """Whether a field's value is one of `values`; a multi-choice value (a tuple or list) when it includes one."""
    if isinstance(value, tuple | list | set | frozenset):
        return any(item in values for item in value)
    return value in values


@dataclass(frozen=True)
class OptionView:
    """One setting as a front end shows it.

    kind: choice (a closed set: dropdown), multi (any number of a closed set: checkboxes), open_choice (usual
    values, others allowed), switch (bool), slider (a number bounded on both sides, within 1000 steps), number
    (other numbers), text. choices: the values of a choice, multi or open_choice (None otherwise). low/high:
    bounds (None where open). step: the slider's step. optional: an empty value means "the default" (None).
    """

    name: str
    label: str
    description: str | None
    kind: Kind
    default: Any
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    optional: bool = False
    integer: bool = False
    shown: Shown = field(default_factory=Shown)

    def applies(self, values: Mapping[str, Any]) -> bool:
        return self.shown.applies(values)

    def help_line(self) -> str:
        """One line for the CLI's settings help: values or range, unit, default and when it applies."""
        if self.kind == "choice":
            what = " | ".join(str(c) for c in self.choices or ())
        elif self.kind == "multi":
            what = "any of " + ", ".join(str(c) for c in self.choices or ()) + " (comma-separated)"
        elif self.kind == "open_choice":
            what = " | ".join(str(c) for c in self.choices or ()) + " | …"
        elif self.kind == "switch":
            what = "true | false"
        elif self.low is not None or self.high is not None:
            low = "" if self.low is None else _number(self.low)
            high = "" if self.high is None else _number(self.high)
            what = f"{low}–{high}" if low and high else (f"≥ {low}" if low else f"≤ {high}")
        else:
            what = "number" if self.kind == "number" else "text"
        if self.optional:
            what += " (empty: default)"
        unit = f" {self.shown.unit}" if self.shown.unit else ""
        default = f"default {self.default!r}" if self.default is not None else "default: none"
        if self.kind == "multi":
            default = f"default {','.join(map(str, self.default)) or '(none)'}"
        parts = [f"{what}{unit}", default]
        if condition := self.shown.condition():
            parts.append(f"applies when {condition}")
        if self.shown.server:
            parts.append("the server's: web and API users cannot change it")
        if self.shown.file:
            parts.append(f"a path to the {self.shown.file} file (web and API: an upload)")
        if self.description:
            parts.append(self.description)
        return "; ".join(parts)


def _number(value: float) -> str:
    return f"{value:g}"


def unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without `| None`, whether None is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def shown(info: FieldInfo) -> Shown:
    """The field's `Shown` metadata (an empty one when it declares none)."""
    return next((m for m in info.metadata if isinstance(m, Shown)), Shown())


def _bounds(info: FieldInfo) -> tuple[float | None, float | None]:
    low = high = None
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge | annotated_types.Gt):
            low = float(item.ge if isinstance(item, annotated_types.Ge) else item.gt)  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Le | annotated_types.Lt):
            high = float(item.le if isinstance(item, annotated_types.Le) else item.lt)  # type: ignore[arg-type]
    return low, high


def view(name: str, info: FieldInfo, model_choices: Callable[[str], Sequence[str]] | None = None) -> OptionView:
    """How field `name` is shown. `model_choices(task)`: the catalogue's model ids of a task, for fields whose
    `Shown.models` names one (without it their choices are the field's own Literal values, if any)."""
    meta = shown(info)
    annotation, optional = unwrap(info.annotation)
    common: dict[str, Any] = {
        "name": name,
        "label": meta.label or name.replace("_", " "),
        "description": info.description,
        "default": info.get_default(call_default_factory=True),
        "optional": optional,
        "shown": meta,
    }
    if typing.get_origin(annotation) is Literal:
        return OptionView(kind="choice", choices=typing.get_args(annotation), **common)
    if typing.get_origin(annotation) is tuple:
        item, *rest = typing.get_args(annotation)
        if rest == [Ellipsis] and typing.get_origin(item) is Literal:
            return OptionView(kind="multi", choices=typing.get_args(item), **common)
    if meta.models and model_choices is not None:
        return OptionView(kind="choice", choices=tuple(model_choices(meta.models)), **common)
    if meta.suggest:
        return OptionView(kind="open_choice", choices=meta.suggest, **common)
    if annotation is bool:
        return OptionView(kind="switch", **common)
    if annotation in (int, float):
        low, high = _bounds(info)
        integer = annotation is int
        if not optional and low is not None and high is not None and high - low <= 1000:
            step = 1.0 if integer else (0.01 if high - low <= 1 else 0.1)
            return OptionView(kind="slider", low=low, high=high, step=step, integer=integer, **common)
        return OptionView(kind="number", low=low, high=high, integer=integer, **common)
    return OptionView(kind="text", **common)


def describe(
    model: type[BaseModel],
    skip: frozenset[str] = frozenset(),
    model_choices: Callable[[str], Sequence[str]] | None = None,
) -> list[OptionView]:
    """Every field of a settings model (but `skip`) as an OptionView, in declaration order."""
    return [view(name, info, model_choices) for name, info in model.model_fields.items() if name not in skip]


def ignored(settings: BaseModel, prefix: str) -> list[str]:
    """The settings given explicitly in `settings` that do not apply to its other values, each as
    "PREFIX.NAME (applies when …)": a front end says they are ignored instead of dropping them silently."""
    values = dict(settings)
    out = []
    for name in sorted(settings.model_fields_set):
        meta = shown(type(settings).model_fields[name])
        if not meta.applies(values):
            out.append(f"{prefix}.{name} (applies when {meta.condition()})")
    return out
