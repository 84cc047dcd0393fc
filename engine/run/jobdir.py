"""The job folder: the one place a video job keeps temporary files (its segments, their manifest, the concat
script), who owns it, the start-up sweep of folders left by dead jobs, and the disk-space check.

Where: `$FACESTUDIO_JOBS/<key>/`, by default `<cache>/jobs/<key>/` (`$FACESTUDIO_CACHE`, else `.cache/` in the
checkout); `<key>` is `segments.job_key` of the output, so the same job always finds its folder (the target's
content id is in the manifest's settings: a changed target is refused, not resumed).

    owner.json     the process working in it: PID, that process's start time (PIDs are reused), host name
    manifest.json  the job's settings and fingerprint, the segment plan, and each finished segment
    seg-NNNNN.mp4  finished segments, each read back and checked (only files listed in the manifest count; .mov or
                   .mkv for encoders MP4 cannot hold); the plan's last one, when the process that renders it joins
                   them right after, is checked in the joined output instead
    work-PID/      segments being encoded by process PID (a killed process's leftovers never mix with its successor's)

When a folder is removed:
- the job succeeds, or fails with an error (bad input, model, ffmpeg, out of memory, a bug): removed;
- the job is cancelled (Ctrl-C, SIGTERM) or killed, refused at the start for lack of disk space, or stopped by a
  disk that filled up (`DiskFull`), after some segments were finished: kept, so that `run --resume` continues it;
  with nothing finished: removed (`engine.run.segmented` decides);
- the start-up sweep (`sweep`, at the start of every video job) removes a folder whose owner is not running (same
  host; PID gone or reused by a process that started at another time) and that either holds no finished segment or
  was last written more than `RESUME_WINDOW_S` ago. A folder of a running process, or of another host (a shared
  disk: whether that process runs cannot be told from here), is never removed by the sweep.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from engine.core.errors import DiskFull, InsufficientDiskSpace, InvalidInput
from engine.run import segments
from engine.run.segments import Plan, Segment

log = logging.getLogger(__name__)

OWNER_FILE = "owner.json"
MANIFEST_FILE = "manifest.json"
# How long a killed job's finished segments wait for `--resume` before the sweep reclaims their space.
RESUME_WINDOW_S = 7 * 24 * 3600
# A folder with no owner record yet is being created (the record follows the mkdir at once) or is debris.
_UNOWNED_GRACE_S = 3600
# Start times are floats from the OS's process table; the same process always reads back the same value.
_START_TIME_TOLERANCE_S = 1.0


def jobs_root(cache: Path) -> Path:
    """The folder that holds every job folder: `$FACESTUDIO_JOBS`, else `cache / "jobs"`."""
    override = os.environ.get("FACESTUDIO_JOBS")
    return Path(override).expanduser() if override else cache / "jobs"


@dataclass(frozen=True)
class Owner:
    """The process working in a job folder. started: its start time, seconds since the epoch (psutil's
    `create_time`), so a reused PID is not taken for the owner."""

    pid: int
    started: float
    host: str

    @classmethod
    def current(cls) -> Owner:
        return cls(os.getpid(), psutil.Process().create_time(), socket.gethostname())

    def alive(self) -> bool:
        """Whether the owner still runs; a process of another host is assumed to (it cannot be checked)."""
        if self.host != socket.gethostname():
            return True
        try:
            started = psutil.Process(self.pid).create_time()
        except psutil.NoSuchProcess:
            return False
        except psutil.Error:  # exists but cannot be inspected (another user's): do not assume it is gone
            return True
        return abs(started - self.started) < _START_TIME_TOLERANCE_S


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write atomically: a kill mid-write leaves the previous version, never half a file. A full disk is DiskFull."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(f"the disk of {path.parent} is full (writing {path.name})", path.parent) from None
        raise


def read_owner(folder: Path) -> Owner | None:
    data = _read_json(folder / OWNER_FILE)
    try:
        return None if data is None else Owner(int(data["pid"]), float(data["started"]), str(data["host"]))
    except (KeyError, TypeError, ValueError):
        return None


def _finished(manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    done = manifest.get("done") if manifest else None
    return done if isinstance(done, dict) else {}


class JobFolder:
    """A video job's folder, owned by this process while it is open. See the module docstring."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.owner = Owner.current()

    @classmethod
    def open(
        cls, root: Path, key: str, settings: Mapping[str, Any], plan: Plan, describe: Mapping[str, Any], resume: bool
    ) -> JobFolder:
        """The folder `root/key`, claimed for this process.

        settings: what a resume must share (`segments.resumable_settings`); describe: what else the manifest
        records for people (target, output). With `resume`, finished segments of an earlier run of the same job
        are kept (a folder of the same target and output made with other settings is refused with InvalidInput
        naming them); without it, or with nothing to resume, the job starts empty. A folder whose owner still runs
        is refused with InvalidInput (two processes rendering the same output).
        """
        path = root / key
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInput(
                f"cannot create the job folder {path}: {exc.strerror}; set FACESTUDIO_JOBS to a writable folder"
            ) from None
        owner = read_owner(path)
        if owner is not None and owner.pid != os.getpid() and owner.alive():
            raise InvalidInput(
                f"another facestudio process (pid {owner.pid}) is rendering {describe.get('output')}; "
                "wait for it to finish or stop it first"
            )
        fingerprint = segments.fingerprint(settings)
        earlier = _read_json(path / MANIFEST_FILE)
        done: dict[str, Any] = {}
        if resume and _finished(earlier):
            assert earlier is not None
            if earlier.get("fingerprint") != fingerprint or earlier.get("plan") != plan.to_raw():
                changed = segments.differences(earlier.get("settings", {}), settings) or ["video.segment_frames"]
                if "target_content" in changed:
                    raise InvalidInput(
                        f"cannot resume: the target {describe.get('target')} is not the file the interrupted job for "
                        f"{describe.get('output')} started from (its frames differ); run without --resume to start "
                        "over"
                    )
                raise InvalidInput(
                    f"cannot resume: the interrupted job for {describe.get('output')} used other settings "
                    f"({', '.join(changed)} differ); rerun it with the same settings, or without --resume to start over"
                )
            done = {
                index: record
                for index, record in _finished(earlier).items()
                if _intact(path / segments.segment_name(int(index), plan.suffix), record)
            }
        elif earlier is not None and _finished(earlier):
            log.info("starting %s over: %d finished segments discarded (no --resume)", path, len(_finished(earlier)))
        for entry in path.iterdir():
            if entry.name.startswith("seg-") and entry.name not in {
                segments.segment_name(int(i), plan.suffix) for i in done
            }:
                entry.unlink()
            elif entry.is_dir() and entry.name.startswith("work-"):
                shutil.rmtree(entry, ignore_errors=True)  # an earlier owner's unfinished segments
        folder = cls(path, {})
        _write_json(path / OWNER_FILE, asdict(folder.owner))
        folder.manifest = {
            "key": key,
            "fingerprint": fingerprint,
            "settings": dict(settings),
            **describe,
            "plan": plan.to_raw(),
            "done": done,
        }
        _write_json(path / MANIFEST_FILE, folder.manifest)
        return folder

    @property
    def done(self) -> dict[int, dict[str, Any]]:
        """Finished segments: index -> their record (`frames`, `bytes`, and the face counts `faces`, `empty`)."""
        return {int(index): record for index, record in self.manifest["done"].items()}

    def segment_path(self, segment: Segment) -> Path:
        return self.path / segment.name

    def work_path(self, segment: Segment) -> Path:
        """Where this process encodes `segment` before `finish` moves it into place (its folder is created)."""
        work = self.path / f"work-{os.getpid()}"
        work.mkdir(exist_ok=True)
        return work / segment.name

    def finish(self, segment: Segment, frames: int, counts: Mapping[str, Any], source: Path | None = None) -> None:
        """Move the verified `source` (default `work_path(segment)`) into place and record it as done (`counts`:
        faces, empty; from a cluster also the worker, host:pid, and the attempts it took)."""
        final = self.segment_path(segment)
        os.replace(self.work_path(segment) if source is None else source, final)
        record = {"frames": frames, "bytes": final.stat().st_size, "pid": os.getpid(), **counts}
        self.manifest["done"][str(segment.index)] = record
        _write_json(self.path / MANIFEST_FILE, self.manifest)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def release(self) -> None:
        """Keep the folder for a later `--resume`: drop only this process's unfinished work."""
        shutil.rmtree(self.path / f"work-{os.getpid()}", ignore_errors=True)


def _intact(path: Path, record: Any) -> bool:
    """A finished segment still counts when its file is there at the size recorded (not cut or replaced)."""
    try:
        return isinstance(record, dict) and path.stat().st_size == record.get("bytes")
    except OSError:
        return False


_JOB_KEY = re.compile(r"[0-9a-f]{16}")


def sweep(root: Path, window_s: float = RESUME_WINDOW_S, now: float | None = None) -> list[Path]:
    """Remove the job folders under `root` that no job will use again (the rule is in the module docstring);
    returns the folders removed. Never raises for a folder it cannot read or remove (it is left for later)."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for folder in root.iterdir():
        # Only folders named like a job key: FACESTUDIO_JOBS may point at a folder that holds other things too.
        if not folder.is_dir() or not _JOB_KEY.fullmatch(folder.name):
            continue
        try:
            owner = read_owner(folder)
            manifest_path = folder / MANIFEST_FILE
            last = (manifest_path if manifest_path.exists() else folder).stat().st_mtime
        except OSError:
            continue
        if owner is None:
            stale = now - last > _UNOWNED_GRACE_S
        else:
            finished = _finished(_read_json(manifest_path))
            stale = not owner.alive() and (not finished or now - last > window_s)
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            log.info("removed the job folder %s of a job that is not running", folder)
            removed.append(folder)
    return removed


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds `path` (or would: its nearest existing parent)."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    return shutil.disk_usage(existing).free


def _device(path: Path) -> int:
    return next(p for p in (path, *path.parents) if p.exists()).stat().st_dev


def check_disk_space(needs: Mapping[Path, int], hint: str) -> None:
    """Raise InsufficientDiskSpace when the folders in `needs` (folder -> bytes it will receive) do not fit on
    their disks; folders on the same filesystem add up. `hint` ends the message (what to do instead)."""
    per_disk: dict[int, tuple[Path, int]] = {}
    for folder, size in needs.items():
        device = _device(folder)
        first, total = per_disk.get(device, (folder, 0))
        per_disk[device] = (first, total + size)
    for folder, total in per_disk.values():
        free = free_bytes(folder)
        if free < total:
            raise InsufficientDiskSpace(
                f"not enough disk space: the job needs about {size_text(total)} on the disk of {folder}, "
                f"which has {size_text(free)} free; {hint}"
            )


def shortfall(needs: Mapping[Path, int], folder: Path) -> int:
    """Bytes to free on the disk of `folder` for what `needs` (folder -> bytes still to write) puts there: that
    total less the space free now, and at least 1 MB (a disk that filled up although the estimate fitted is
    being filled by something else too)."""
    device = _device(folder)
    total = sum(size for path, size in needs.items() if _device(path) == device)
    return max(total - free_bytes(folder), 1_000_000)


def size_text(n: int) -> str:
    """Bytes as people read them: `1.2 GB`, `15.0 MB`, `812 B`."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
