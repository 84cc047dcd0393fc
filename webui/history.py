"""A session's finished jobs: what the History tab lists, kept on disk in the owner's folder so a page reload (same
browser, and its login with one) finds them again, and removed with the owner's files."""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HISTORY_FILE = "history.json"
# Oldest entries (and their files) go past this many: a session's folder stays bounded.
KEEP = 50


@dataclass(frozen=True)
class Entry:
    """One finished job. `folder`: the entry's own folder (output, sidecar, thumbnail), inside the owner's folder;
    `settings`: the preset mapping it ran with (no paths); `target`/`sources`: file names as the user uploaded
    them; `summary`: the run summary as Markdown; `created`: seconds since the epoch."""

    id: str
    created: float
    folder: str
    output: str
    sidecar: str
    thumbnail: str | None
    target: str
    sources: tuple[str, ...]
    processors: tuple[str, ...]
    summary: str
    settings: dict[str, Any] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        return Path(self.folder) / name


class History:
    """The entries of one owner, newest first (thread-safe; the file is rewritten whole on each change)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()

    def new_folder(self) -> Path:
        """A fresh folder for a job's results inside the owner's folder (random name: never a counter)."""
        path = self.folder / "jobs" / secrets.token_hex(6)
        path.mkdir(parents=True)
        return path

    def entries(self) -> list[Entry]:
        with self._lock:
            return self._read()

    def get(self, entry_id: str) -> Entry | None:
        return next((e for e in self.entries() if e.id == entry_id), None)

    def add(self, entry: Entry) -> list[Entry]:
        """Record `entry` first; entries past KEEP are removed with their folders. Returns the removed ones."""
        with self._lock:
            entries = [entry, *self._read()]
            kept, dropped = entries[:KEEP], entries[KEEP:]
            self._write(kept)
        for old in dropped:
            shutil.rmtree(old.folder, ignore_errors=True)
        return dropped

    def remove(self, entry_id: str) -> Entry | None:
        with self._lock:
            entries = self._read()
            gone = next((e for e in entries if e.id == entry_id), None)
            self._write([e for e in entries if e.id != entry_id])
        if gone is not None:
            shutil.rmtree(gone.folder, ignore_errors=True)
        return gone

    def _read(self) -> list[Entry]:
        path = self.folder / HISTORY_FILE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("history %s unreadable (%s); starting a new one", path, exc)
            return []
        entries = []
        for item in raw if isinstance(raw, list) else ():
            try:
                entry = Entry(**{**item, "sources": tuple(item["sources"]), "processors": tuple(item["processors"])})
            except (TypeError, KeyError):
                continue
            if Path(entry.folder).is_dir():
                entries.append(entry)
        return entries

    def _write(self, entries: list[Entry]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{HISTORY_FILE}.partial"
        tmp.write_text(json.dumps([asdict(e) for e in entries], indent=1), encoding="utf-8")
        tmp.replace(self.folder / HISTORY_FILE)
