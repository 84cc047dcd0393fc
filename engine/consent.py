"""The responsible-use notice and its acknowledgement (once per machine, or per run for scripts)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from engine.home import home

NOTICE_VERSION = 1

NOTICE = (
    "facestudio changes faces in images and video. Use it only on media you have the right to edit and only with "
    "the consent of the people shown; never to deceive, harass, defraud or impersonate. Every output is tagged "
    "as synthetic (signed Content Credentials, container metadata and a .job.json sidecar). Some models are "
    "licensed for non-commercial use only; their licence is shown before download."
)

ENV_ACCEPT = "FACESTUDIO_ACCEPT"


def state_file() -> Path:
    """Where the acknowledgement is recorded: $FACESTUDIO_HOME/consent.json (default ~/.config/facestudio)."""
    return home() / "consent.json"


def accepted_by_env() -> bool:
    return os.environ.get(ENV_ACCEPT, "").strip().lower() in {"1", "yes", "true"}


def is_acknowledged() -> bool:
    """True when this machine's user acknowledged the current version of the notice."""
    try:
        data = json.loads(state_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("version") == NOTICE_VERSION


def acknowledge() -> Path:
    """Record the acknowledgement (with the time, in UTC); returns the file written."""
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"version": NOTICE_VERSION, "acknowledged": datetime.now(UTC).isoformat(timespec="seconds")}),
        encoding="utf-8",
    )
    return path
