"""An output file's life: claimed before any work, staged under a temp name, sealed and delivered at the end.

- `OutputClaim.claim` is the one place before any output work starts: it makes the output's folder (remembering
  what it made), and takes the output's lock, so that of two runs writing the same file exactly one proceeds
  and the other is refused (exit 2) naming the process that has it.
- The writers produce the finished file at `claim.staging()`, a short temp name next to the output.
- `OutputClaim.deliver` is the one place a finished output becomes the user's file: the job sidecar's text, then
  `seal` (flushed to disk; where anything that must be inside the published file is added: the signature covers
  the sidecar's digest), then the sidecar, then the rename into place, which never replaces a file that appeared
  meanwhile unless `--overwrite` was given.
- `OutputClaim.release` (leaving the `with` block) removes the lock and every temp file, and after a failure
  the folders the claim made, so nothing a failed run created outlives it.

The lock is `.facestudio-<hash>.lock` in the output's folder, holding its owner (`jobdir.Owner`); a lock whose
owner is no longer running (a killed run) is taken over, with that run's staged files removed. The lock appears
with its owner already written (a hard link to a written temp file), so a run starting at the same moment never
reads it empty and takes it for a dead run's.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

from engine.core.errors import InvalidInput
from engine.media.children import write_error
from engine.run import jobdir
from engine.run.sidecar import SUFFIX, sidecar_path

# A lock that cannot be read is taken for a dead run's only when older than this: on a file system without hard
# links a lock exists, empty, for the moment between its creation and its record's write.
_LOCK_WRITE_GRACE_S = 10.0
# The file system's limits when it does not say (POSIX's usual NAME_MAX and PATH_MAX).
_NAME_MAX = 255
_PATH_MAX = 4096


def check_names(output: Path) -> None:
    """Refuse, before any work, an output whose name or whose sidecar's name (`<name>.job.json`) the file system
    would refuse: longer than its longest name (usually 255 bytes) or its longest path. Temp names are short
    and fixed-length, so they always fit where these do."""
    folder = next((p for p in (output.parent, *output.parent.parents) if p.exists()), output.parent)
    name_max = _limit(folder, "PC_NAME_MAX", _NAME_MAX)
    path_max = _limit(folder, "PC_PATH_MAX", _PATH_MAX)
    name = len(os.fsencode(output.name)) + len(SUFFIX)
    if name > name_max:
        raise InvalidInput(
            f"the output name {output.name[:40]}… is {name - len(SUFFIX)} bytes long; with its sidecar's "
            f"{SUFFIX} it must fit in {name_max}: shorten it to at most {name_max - len(SUFFIX)} bytes"
        )
    path = len(os.fsencode(str(output.absolute()))) + len(SUFFIX)
    if path > path_max:
        raise InvalidInput(f"the output path is {path} bytes long with its sidecar's name, over {path_max}: shorten it")


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows), or the file system does not say
        return default


class OutputClaim:
    """The right to write one output file, held by one run from before any output work until `release`.

    Use as a context manager around the run; see the module docstring for what each step does.
    """

    def __init__(
        self,
        output: Path,
        overwrite: bool,
        made: list[Path],
        lock: Path,
        sealer: Callable[[Path, str], None] | None,
    ) -> None:
        self.output = output
        self.sealer = sealer
        self.overwrite = overwrite
        self._made = made
        self._lock = lock
        self._key = lock.name.removeprefix(".facestudio-").removesuffix(".lock")
        self._locked = False  # this claim took the lock (another claim of the same process may hold it)
        self._delivered = False

    @classmethod
    def claim(cls, output: Path, overwrite: bool, sealer: Callable[[Path, str], None] | None = None) -> OutputClaim:
        """Claim `output`: make its folder, take its lock, and check again that it does not exist (unless
        `overwrite`). `sealer(staged, sidecar)` adds what must be inside the published file (the signed Content
        Credentials, engine/provenance, which record the sidecar's digest). InvalidInput when another run holds the
        lock or the file appeared since validation."""
        output = output.absolute()
        made = _make_folders(output.parent)
        key = hashlib.sha256(os.fsencode(output.name)).hexdigest()[:16]
        lock = output.with_name(f".facestudio-{key}.lock")
        claim = cls(output, overwrite, made, lock, sealer)
        try:
            claim._take_lock()
            if output.exists() and not overwrite:
                raise InvalidInput(
                    f"the output {output} already exists: choose another output path, or add --overwrite"
                )
        except BaseException:
            claim.release(failed=True)
            raise
        return claim

    def __enter__(self) -> OutputClaim:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release(failed=exc_type is not None or not self._delivered)

    def staging(self) -> Path:
        """Where a writer makes the finished file: a temp name next to the output, with its extension."""
        return self.output.with_name(f".facestudio-{self._key}-{os.getpid()}.staged{self.output.suffix}")

    def deliver(self, staged: Path, sidecar: Callable[[], str]) -> None:
        """Make the finished, verified file at `staged` the output, with its sidecar beside it (`sidecar()` gives
        its JSON text, made before the file is sealed, so the seal can sign its digest: the sidecar records what
        the seal will do).

        Raises InvalidInput (nothing placed) when a file appeared at the output meanwhile and `overwrite` is off;
        DiskFull when the sidecar does not fit. On any error the output is not left without its sidecar.
        """
        text = sidecar()
        self.seal(staged, text)
        side = sidecar_path(self.output)
        side_staged = self.output.with_name(f".facestudio-{self._key}-{os.getpid()}.job.partial")
        try:
            side_staged.write_text(text, encoding="utf-8")
        except OSError as exc:
            side_staged.unlink(missing_ok=True)
            raise write_error(exc.errno or 0, side, f"the sidecar {side.name}") from None
        self._place(staged)
        try:
            os.replace(side_staged, side)
        except BaseException:
            # An output without its sidecar has lost its provenance (and would look finished): remove it.
            self.output.unlink(missing_ok=True)
            raise
        self._delivered = True

    def seal(self, staged: Path, sidecar: str = "") -> None:
        """The finished file, just before it is published: its bytes are flushed to the disk, so a power cut after
        the rename never leaves an empty "finished" file. Anything that must be inside the published file (a
        signed provenance manifest, by the claim's `sealer`, with the digest of the `sidecar` text) is added here,
        and nowhere else."""
        if self.sealer is not None:
            self.sealer(staged, sidecar)
        with staged.open("rb+") as f:
            os.fsync(f.fileno())

    def release(self, failed: bool) -> None:
        """Remove the lock and this run's temp files; after a failure also the folders `claim` made, if empty."""
        if self._locked:  # (a claim refused the lock leaves the lock and temp files to the run that has it)
            _remove_temp_files(self.output.parent, self._key, os.getpid())
            self._lock.unlink(missing_ok=True)
            self._locked = False
        if failed:
            for folder in reversed(self._made):
                try:
                    folder.rmdir()
                except OSError:  # not empty (someone else wrote there meanwhile) or gone: leave it
                    break

    def _place(self, staged: Path) -> None:
        if self.overwrite:
            os.replace(staged, self.output)
            return
        try:
            # A hard link never replaces an existing file: exactly one writer can create the output.
            os.link(staged, self.output)
        except FileExistsError:
            staged.unlink(missing_ok=True)
            raise InvalidInput(
                f"the output {self.output} appeared while this job ran (another program wrote it); nothing was "
                "replaced: choose another output path, or add --overwrite"
            ) from None
        except OSError:  # a file system without hard links (FAT, some network shares): check, then rename
            if self.output.exists():
                staged.unlink(missing_ok=True)
                raise InvalidInput(
                    f"the output {self.output} appeared while this job ran; nothing was replaced"
                ) from None
            os.replace(staged, self.output)
            return
        staged.unlink()

    def _take_lock(self) -> None:
        record = json.dumps(asdict(jobdir.Owner.current()))
        for _ in range(2):
            try:
                self._create_lock(record)
            except FileExistsError:
                holder = _read_owner(self._lock)
                if holder is None and _age_s(self._lock) < _LOCK_WRITE_GRACE_S:
                    raise InvalidInput(
                        f"another facestudio job is starting to write {self.output}: wait for it to finish, or "
                        "choose another output path"
                    ) from None
                if holder is not None and holder.alive():
                    raise InvalidInput(
                        f"another facestudio job (pid {holder.pid}) is writing {self.output}: wait for it to "
                        "finish, or choose another output path"
                    ) from None
                # The lock of a run that is gone (killed): take it over, with that run's temp files.
                if holder is not None:
                    _remove_temp_files(self.output.parent, self._key, holder.pid)
                self._lock.unlink(missing_ok=True)
                continue
            except OSError as exc:
                raise write_error(exc.errno or 0, self._lock, "the output's lock") from None
            self._locked = True
            return
        raise InvalidInput(f"another facestudio job is starting to write {self.output}: try again")

    def _create_lock(self, record: str) -> None:
        """Create the lock with `record` inside, or FileExistsError. The lock appears already written (a hard link
        to a written temp file), so another run never reads it empty and takes it for a dead run's."""
        written = self._lock.with_name(f".facestudio-{self._key}-{os.getpid()}.owner")
        try:
            written.write_text(record, encoding="utf-8")
            try:
                os.link(written, self._lock)
                return
            except FileExistsError:
                raise
            except OSError:  # no hard links here (FAT, some network shares): an exclusive create, then the record
                pass
            fd = os.open(self._lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(record)
        finally:
            written.unlink(missing_ok=True)


def _remove_temp_files(folder: Path, key: str, pid: int) -> None:
    """The staged files of process `pid` for the output `key` names, and the writers' own temp files of them."""
    for leftover in folder.glob(f"*facestudio-{key}-{pid}.*"):
        leftover.unlink(missing_ok=True)


def _read_owner(lock: Path) -> jobdir.Owner | None:
    try:
        data: Any = json.loads(lock.read_text(encoding="utf-8"))
        return jobdir.Owner(int(data["pid"]), float(data["started"]), str(data["host"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _age_s(path: Path) -> float:
    """Seconds since `path` was last written; infinite when it is gone (nothing to wait for)."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return float("inf")


def _make_folders(folder: Path) -> list[Path]:
    """Create `folder` and any missing parents; returns the folders created, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    for path in missing:
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(exc.errno or 0, path, "the output's folder") from None
    return missing
