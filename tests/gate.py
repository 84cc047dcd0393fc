"""Holds a real `launch.py` run at a chosen engine function, so that a test acts at a known point of the run
instead of after a guessed time (kill it after exactly two segments, interrupt it while it encodes).

`Gate.start(args, at="engine.run.jobdir:JobFolder.finish")` starts `launch.py *args` in a child process in
which each call of `at`, once it has returned, is reported to the test and held there until the test says
`go()`; `reached()` waits for the next such call. `open()` lets every call through from then on. Run as a script,
this module is that child: `python tests/gate.py AT EVENTS_FD GO_FD ARGS…`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import runpy
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class Gate:
    """The test's side of a held run; `process` is the child (a Popen, with the pipes asked for)."""

    def __init__(self, process: subprocess.Popen[Any], events: int, go: int) -> None:
        self.process = process
        self._events = events
        self._go: int | None = go
        self.calls = 0

    @classmethod
    def start(cls, args: list[str], at: str, **popen: Any) -> Gate:
        """Start `launch.py *args` with `at` ("module:Class.method" or "module:function") held after each call.
        `popen`: Popen's keyword arguments (stdout, env, …)."""
        events_read, events_write = os.pipe()
        go_read, go_write = os.pipe()
        command = [sys.executable, __file__, at, str(events_write), str(go_read), *args]
        process = subprocess.Popen(command, pass_fds=(events_write, go_read), **popen)
        os.close(events_write)
        os.close(go_read)
        return cls(process, events_read, go_write)

    def reached(self, timeout: float = 300.0) -> int:
        """Wait until the child is held after one more call of `at`; returns how many calls it has made. Fails the
        test if the child ends first (with what it said) or nothing comes within `timeout` seconds (a hang)."""
        ready, _, _ = select.select([self._events], [], [], timeout)
        if not ready:
            raise AssertionError(f"no call of the held function within {timeout:.0f} s")
        if os.read(self._events, 1) == b"":
            out, err = self.process.communicate(timeout=60)
            raise AssertionError(f"the run ended (exit {self.process.returncode}) after {self.calls} calls: {err}")
        self.calls += 1
        return self.calls

    def go(self) -> None:
        """Let the held call return (the run goes on to the next call)."""
        assert self._go is not None, "the gate is open"
        os.write(self._go, b"g")

    def open(self) -> None:
        """Let this and every later call through."""
        if self._go is not None:
            os.close(self._go)
            self._go = None

    def close(self) -> None:
        self.open()
        with contextlib.suppress(OSError):
            os.close(self._events)


def _hold(at: str, events: int, go: int) -> None:
    """Replace `at` by a wrapper that reports each return on `events` and waits for a byte on `go` (none once the
    test closed it)."""
    module, _, name = at.partition(":")
    *path, attribute = name.split(".")
    owner: Any = importlib.import_module(module)
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def held(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        with contextlib.suppress(OSError):  # the test has stopped listening: go on
            os.write(events, b"x")
            os.read(go, 1)
        return result

    setattr(owner, attribute, held)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _hold(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    sys.argv = [str(ROOT / "launch.py"), *sys.argv[4:]]
    runpy.run_path(str(ROOT / "launch.py"), run_name="__main__")
