"""ffmpeg and ffprobe child processes: starting them, reading their stderr, stopping and reaping them, and
turning what they print on failure into a one-line reason or a typed error.

Children run in their own process group, so a Ctrl-C in the terminal reaches facestudio alone, which then stops
them itself (a decoder killed first would look like a cut file). Every child is waited for on every way out.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from engine.core.errors import DiskFull, FacestudioError, InvalidInput, MediaError

# How long a child gets to exit after being asked to stop, before it is killed.
STOP_TIMEOUT_S = 5.0
# Error lines of a child's stderr kept for messages; the rest is read and dropped so the pipe never fills.
_KEPT_STDERR_LINES = 20
# Free space below which a disk counts as full (a file system keeps some blocks it will not hand out).
_NEARLY_FULL_BYTES = 256 * 1024
_DUMP_LINE = re.compile(r"^(\s|Input #|Output #|Stream mapping:)")
# What ffmpeg prints (strerror; children run with LC_ALL=C, so in English) when the file system refuses a write.
_WRITE_ERRORS = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EFBIG: "File too large",
    errno.ENAMETOOLONG: "File name too long",
}


def first_error(stderr: str, path: Path) -> str:
    """First error line of an ffmpeg/ffprobe log, without the `[demuxer @ 0x…]` and `path:` prefixes; the
    stream description ffmpeg prints at its default log level is skipped."""
    for raw in stderr.splitlines():
        if _DUMP_LINE.match(raw):
            continue
        line = re.sub(r"^(\[[^]]*\]\s*)+", "", raw.strip())
        for prefix in (f"{path}: ", f"file:{path}: "):
            line = line.removeprefix(prefix)
        if line:
            return line
    return "no error message"


def write_error(code: int, path: Path, what: str) -> FacestudioError:
    """The typed error for a write to `path` that the file system refused with `code` (an errno), `what` saying
    what was being written ("the segment …"). Disk full or over quota: DiskFull (exit 2, names the folder);
    a file or name too long for the file system: InvalidInput; anything else: MediaError."""
    folder = path.parent
    if code in (errno.ENOSPC, errno.EDQUOT):
        reason = "is full" if code == errno.ENOSPC else "is over its quota"
        return DiskFull(f"the disk of {folder} {reason} (writing {what})", folder)
    if code == errno.EFBIG:
        return InvalidInput(
            f"the file system of {folder} cannot hold a file as large as {what} (FAT32 stops at 4 GiB): write the "
            "output to another disk"
        )
    if code == errno.ENAMETOOLONG:
        return InvalidInput(f"the file system of {folder} refuses the name of {path.name}: choose a shorter name")
    return MediaError(f"cannot write {what} to {folder}: {os.strerror(code)}")


def check_room(path: Path) -> None:
    """Raise DiskFull when the disk of `path`'s folder has (almost) no room left: why a file just written there
    can be unreadable although the writer reported no error."""
    with contextlib.suppress(OSError):
        if shutil.disk_usage(path.parent).free < _NEARLY_FULL_BYTES:
            raise write_error(errno.ENOSPC, path, path.name)


def write_errno(message: str) -> int | None:
    """The errno of a file-system refusal that an ffmpeg error message reports, or None."""
    return next((code for code, text in _WRITE_ERRORS.items() if text in message), None)


class Stderr:
    """Reads a child's stderr to the end on a thread, so a chatty child never blocks on a full pipe.

    Keeps the first lines (ffmpeg runs with `-v error`, so they are the errors that explain a failure).
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[str] = []
        self._stream = stream
        self._thread = threading.Thread(target=self._drain, name="ffmpeg-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        for raw in self._stream:
            line = raw.decode("utf-8", errors="replace").strip()
            if line and len(self.lines) < _KEPT_STDERR_LINES:
                self.lines.append(line)
        self._stream.close()

    def join(self) -> None:
        self._thread.join()

    def first_error(self, path: Path) -> str | None:
        return first_error("\n".join(self.lines), path) if self.lines else None

    def write_errno(self) -> int | None:
        """The errno of a file-system refusal among the kept lines (disk full, file too large …), or None."""
        return next((code for line in self.lines if (code := write_errno(line)) is not None), None)


def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run a child to its end and return what it printed (MediaError when it cannot be started)."""
    try:
        return subprocess.run(args, capture_output=True, text=True, errors="replace", check=False, env=_env())
    except OSError as exc:
        raise MediaError(f"cannot run {args[0]}: {exc.strerror}") from exc


class Beside:
    """A child run to its end while the caller does other work (another child, say), as a context manager:
    `result()` waits for it and gives what it printed, as `run` does; leaving the block before then stops it (a
    result no longer wanted), so no child outlives the block. MediaError when it cannot be started."""

    def __init__(self, args: Sequence[str]) -> None:
        self._args = list(args)
        try:
            self._process = subprocess.Popen(
                self._args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=_env()
            )
        except OSError as exc:
            raise MediaError(f"cannot run {args[0]}: {exc.strerror}") from exc
        self._printed: list[tuple[str, str]] = []
        # Both pipes are read to their end here, so a chatty child never blocks while the caller is busy.
        self._thread = threading.Thread(
            target=lambda: self._printed.append(self._process.communicate()), name="ffmpeg-beside", daemon=True
        )
        self._thread.start()

    def result(self) -> subprocess.CompletedProcess[str]:
        self._thread.join()
        stdout, stderr = self._printed[0]
        return subprocess.CompletedProcess(self._args, self._process.returncode, stdout, stderr)

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._thread.join()


def run_bytes(args: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    """`run`, with stdout as bytes (raw frames, alpha planes)."""
    try:
        return subprocess.run(args, capture_output=True, check=False, env=_env())
    except OSError as exc:
        raise MediaError(f"cannot run {args[0]}: {exc.strerror}") from exc


def start(args: Sequence[str], stdin: int | None, stdout: int | None) -> tuple[subprocess.Popen[bytes], Stderr]:
    """Start a child with its stderr drained on a thread; stdin/stdout are `subprocess.PIPE` or `DEVNULL`."""
    group: dict[str, Any] = (
        {"start_new_session": True}
        if os.name == "posix"
        else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    )
    try:
        process = subprocess.Popen(args, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=_env(), **group)
    except OSError as exc:
        raise MediaError(f"cannot run {args[0]}: {exc.strerror}") from exc
    assert process.stderr is not None
    return process, Stderr(process.stderr)


def stop(process: subprocess.Popen[bytes], drain: Stderr) -> None:
    """Terminate `process` if still running, wait for it (no zombie, no orphan), and finish reading its stderr."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a broken pipe flushing stdin: the child is gone or going anyway
                pipe.close()
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    drain.join()


def _env() -> dict[str, str]:
    """The children's environment: ours, with messages in English so the file-system errors above are recognised."""
    return {**os.environ, "LC_ALL": "C"}
