"""A session's finished jobs: what the History tab lists, kept on disk in the owner's folder so a page reload (same
browser, and its login with one) finds them again, and removed with the owner's files. Each entry keeps its inputs
(a link to the upload where the file system allows, else a copy), so "Load these settings and inputs" gives the
inputs back too."""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HISTORY_FILE = "history.json"
INPUTS_FILE = "inputs.json"  # in an entry's folder: where its kept target and sources are
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

    def keep_inputs(self, entry: Entry, target: Path, sources: list[Path], names: dict[str, str]) -> None:
        """Keep the job's target and sources with `entry`, under the names the user knows them by (`names`: path →
        name), for `inputs`. An input that cannot be kept is left out (its load then says so)."""
        kept: dict[str, Any] = {"target": None, "sources": []}
        for role, path in [("target", target), *((f"source-{i}", s) for i, s in enumerate(sources))]:
            name = names.get(str(path)) or path.name
            place = Path(entry.folder) / "inputs" / role / Path(name).name
            try:
                place.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(path, place)
            except OSError as exc:
                log.info("input %s not kept with its history entry: %s", name, exc)
                continue
            relative = str(place.relative_to(entry.folder))
            if role == "target":
                kept["target"] = relative
            else:
                kept["sources"].append(relative)
        (Path(entry.folder) / INPUTS_FILE).write_text(json.dumps(kept), encoding="utf-8")

    def inputs(self, entry: Entry) -> tuple[Path | None, list[Path]]:
        """The target and sources kept with `entry` (None and [] when it kept none)."""
        try:
            kept = json.loads((Path(entry.folder) / INPUTS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, []
        target = entry.path(kept["target"]) if kept.get("target") else None
        sources = [entry.path(s) for s in kept.get("sources", [])]
        return (target if target and target.is_file() else None), [s for s in sources if s.is_file()]

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


def _link_or_copy(source: Path, place: Path) -> None:
    """A hard link to `source` at `place` (no second copy of a large video), else a copy (another file system)."""
    place.unlink(missing_ok=True)
    try:
        os.link(source, place)
    except OSError:
        shutil.copyfile(source, place)
