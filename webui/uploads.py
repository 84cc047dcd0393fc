"""The page's upload components: Gradio's `File` and `UploadButton`, without the file their input processing leaves.

Gradio 6's `File` and `UploadButton` (type "filepath") open a `NamedTemporaryFile(delete=False)` in Gradio's folder
for every file of every event that takes one, and never write or remove it (components/file.py,
upload_button.py, `_process_single_file`): every preview would leave an empty file in `$TMPDIR/gradio` for good.
These do the same checks and hand the handler the same path, with nothing made. They are Gradio templates of the
same components (`is_template`): the page shows Gradio's own.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
from gradio.data_classes import FileData
from gradio.utils import NamedString
from gradio_client import utils as client_utils


def _path_of(component: Any, data: FileData) -> NamedString:
    """The upload's own path, refused (as Gradio refuses it) when its type is not one the component takes."""
    if component.file_types and not client_utils.is_valid_file(data.path, component.file_types):
        raise gr.Error(f"Invalid file type. Please upload a file that is one of these formats: {component.file_types}")
    return NamedString(data.path)


class File(gr.File):
    """`gr.File` whose input processing makes no file (see the module docstring)."""

    is_template = True

    def _process_single_file(self, f: FileData) -> NamedString | bytes:
        return _path_of(self, f) if self.type == "filepath" else super()._process_single_file(f)


class UploadButton(gr.UploadButton):
    """`gr.UploadButton` whose input processing makes no file (see the module docstring)."""

    is_template = True

    def _process_single_file(self, f: FileData) -> NamedString | bytes:
        return _path_of(self, f) if self.type == "filepath" else super()._process_single_file(f)
