"""The cloud notebook: valid nbformat, every `launch.py` command in it accepted by the real CLI parser, sharing
only behind a login, and the Colab free-tier note present."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import nbformat

import cli

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "facestudio_cloud.ipynb"


def launch_commands() -> list[list[str]]:
    """The argument lists of every `python launch.py …` shell line, with notebook variables filled in."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            match = re.search(r"!python launch\.py (.*)$", line)
            if match:
                text = match.group(1).replace("$USER", "studio").replace("$PASSWORD", "s3cret")
                found.append(shlex.split(text))
    return found


def test_notebook_is_valid_and_its_commands_parse() -> None:
    nbformat.validate(nbformat.read(NOTEBOOK, as_version=4))
    commands = launch_commands()
    assert {c[0] for c in commands} == {"models", "ui"}
    parser = cli.build_parser()
    for argv in commands:
        args = parser.parse_args(argv)
        if args.command == "ui":
            settings = cli.ui.ui_settings(args)
            assert settings.share and settings.auth == ("studio", "s3cret")


def test_notebook_says_what_colab_free_tier_forbids_and_asks_for_consent() -> None:
    text = NOTEBOOK.read_text(encoding="utf-8")
    assert "free tier of Colab forbids creating deepfakes" in text
    assert "consent of the people shown" in text
    assert "--share" in text and "--auth" in text
