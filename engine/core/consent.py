"""The responsible-use notice and its acknowledgement (once per machine, or per run for scripts)."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from engine.core.home import home

NOTICE = (
    "facestudio changes faces in images and video. Use it only on media you have the right to edit and only with "
    "the consent of the people shown; never to deceive, harass, defraud or impersonate. Every output is tagged "
    "as synthetic (signed Content Credentials, container metadata and a .job.json sidecar). Some models are "
    "licensed for non-commercial use only; their licence is shown before download."
)

ENV_ACCEPT = "FACESTUDIO_ACCEPT"


def notice_digest() -> str:
    """The sha256 (hex) of the notice's text. An acknowledgement records it, so any change to the wording asks
    again: there is no version number to forget to bump."""
    return hashlib.sha256(NOTICE.encode("utf-8")).hexdigest()


def state_file() -> Path:
    """Where the acknowledgement is recorded: $FACESTUDIO_HOME/consent.json (default ~/.config/facestudio)."""
    return home() / "consent.json"


def accepted_by_env() -> bool:
    return os.environ.get(ENV_ACCEPT, "").strip().lower() in {"1", "yes", "true"}


def is_acknowledged() -> bool:
    """True when this machine's user acknowledged the notice as it reads now (an older wording does not count)."""
    try:
        data = json.loads(state_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("notice") == notice_digest()


def acknowledge() -> Path:
    """Record the acknowledgement of this wording (its digest, with the time in UTC); returns the file written."""
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"notice": notice_digest(), "acknowledged": datetime.now(UTC).isoformat(timespec="seconds")}),
        encoding="utf-8",
    )
    return path
