"""The page's upload components: Gradio's `File` and `UploadButton`, without the file their input processing leaves.

Gradio 6's `File` and `UploadButton` (type "filepath") open a `NamedTemporaryFile(delete=False)` in Gradio's folder
for every file of every event that takes one, and never write or remove it (components/file.py,
upload_button.py, `_process_single_file`): every preview would leave an empty file in `$TMPDIR/gradio` for good.
These make the same components, whose input processing does the same checks and hands the handler the same path,
with nothing made. (Made, not subclassed: Gradio writes a `.pyi` stub beside the module of every component class.)
"""

from __future__ import annotations

import types
from typing import Any

import gradio as gr
from gradio.data_classes import FileData
from gradio.utils import NamedString
from gradio_client import utils as client_utils


def _path_of(component: Any, data: FileData) -> NamedString | bytes:
    """The upload's own path, refused (as Gradio refuses it) when its type is not one the component takes."""
    if component.type != "filepath":
        return type(component)._process_single_file(component, data)
    if component.file_types and not client_utils.is_valid_file(data.path, component.file_types):
        raise gr.Error(f"Invalid file type. Please upload a file that is one of these formats: {component.file_types}")
    return NamedString(data.path)


def File(**kwargs: Any) -> gr.File:  # noqa: N802 - made like the component it stands for
    """`gr.File(**kwargs)` whose input processing makes no file (see the module docstring)."""
    component = gr.File(**kwargs)
    component._process_single_file = types.MethodType(_path_of, component)  # type: ignore[method-assign]
    return component


def UploadButton(label: str, **kwargs: Any) -> gr.UploadButton:  # noqa: N802 - as File
    """`gr.UploadButton(label, **kwargs)` whose input processing makes no file (see the module docstring)."""
    component = gr.UploadButton(label, **kwargs)
    component._process_single_file = types.MethodType(_path_of, component)  # type: ignore[method-assign]
    return component
