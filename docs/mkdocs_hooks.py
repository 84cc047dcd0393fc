"""MkDocs hooks for the guide (mkdocs.yml `hooks:`); not part of the site.

GitHub needs a pipe inside a table cell's code span escaped (`auto\\|onnx`), while Python-Markdown, which MkDocs
uses, reads pipes in code spans as text and would print the backslash: the site gets the bare pipe."""

from __future__ import annotations

import re
from typing import Any

CODE_SPAN = re.compile(r"`[^`\n]*`")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Each table row's code spans with `\\|` turned into `|` (other lines as they are)."""
    return "\n".join(
        CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), line) if line.lstrip().startswith("|") else line
        for line in markdown.split("\n")
    )
