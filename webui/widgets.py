"""Widgets generated from pydantic settings models: a processor's `Options`, the faces, video and runtime groups.

One function maps a field to a Gradio component and one maps the component's value back, so a new option (or a
new processor) appears in the UI without UI code.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

import annotated_types
import gradio as gr
from pydantic import BaseModel
from pydantic.fields import FieldInfo

# Fields the UI sets itself rather than as a plain widget.
SKIPPED = frozenset({"backend"})


def unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without `| None`, whether None is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _bounds(field: FieldInfo) -> tuple[float | None, float | None]:
    low = high = None
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge | annotated_types.Gt):
            low = float(item.ge if isinstance(item, annotated_types.Ge) else item.gt)
        elif isinstance(item, annotated_types.Le | annotated_types.Lt):
            high = float(item.le if isinstance(item, annotated_types.Le) else item.lt)
    return low, high


def widget(name: str, field: FieldInfo, value: Any, choices: list[tuple[str, Any]] | None = None) -> gr.Component:
    """The component for one settings field, showing `value`. `choices` relabels a Literal's values."""
    label = name.replace("_", " ")
    info = field.description
    annotation, optional = unwrap(field.annotation)
    if typing.get_origin(annotation) is Literal:
        options = choices or [(str(v), v) for v in typing.get_args(annotation)]
        return gr.Dropdown(choices=options, value=value, label=label, info=info)
    if annotation is bool:
        return gr.Checkbox(value=bool(value), label=label, info=info)
    if annotation in (int, float) and not optional:
        low, high = _bounds(field)
        if low is not None and high is not None and high - low <= 1000:
            step = 1 if annotation is int else (0.01 if high - low <= 1 else 0.1)
            return gr.Slider(minimum=low, maximum=high, step=step, value=value, label=label, info=info)
        return gr.Number(value=value, precision=0 if annotation is int else None, label=label, info=info)
    return gr.Textbox(value="" if value is None else str(value), label=label, info=info)


def from_widget(field: FieldInfo, value: Any) -> Any:
    """The settings value for what a widget from `widget` holds (empty text = None where None is allowed)."""
    annotation, optional = unwrap(field.annotation)
    if annotation in (int, float) and value is not None and value != "":
        number = float(value)
        return int(round(number)) if annotation is int else number
    if isinstance(value, str) and value.strip() == "" and optional:
        return None
    return value


def fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """The fields of `model` that get a widget, in declaration order."""
    return [(name, f) for name, f in model.model_fields.items() if name not in SKIPPED]
