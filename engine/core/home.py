"""The user's own facestudio folder: $FACESTUDIO_HOME, default ~/.config/facestudio (the consent record, the
user's presets)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The folder (it may not exist yet); every module that keeps a user's file finds it here."""
    return Path(os.environ.get("FACESTUDIO_HOME") or Path.home() / ".config" / "facestudio").expanduser()
