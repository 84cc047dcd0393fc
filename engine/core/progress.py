"""Progress reporting behind one protocol: tqdm on a terminal, nothing elsewhere (the UI adds gr.Progress)."""

from __future__ import annotations

import sys
from typing import Protocol

from tqdm import tqdm


class Progress(Protocol):
    """Stages of a job (`"load models"`, `"frames"` …) each with an optional total in units (frames, bytes)."""

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None: ...

    def advance(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


class NullProgress:
    """Reports nothing (scripts, tests, non-TTY output)."""

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class TqdmProgress:
    """A tqdm bar per stage on stderr; shows rate and ETA. Use only when stderr is a terminal."""

    def __init__(self) -> None:
        self._bar: tqdm | None = None

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        self.close()
        scale = unit == "B"
        self._bar = tqdm(total=total, desc=name, unit=unit, unit_scale=scale, dynamic_ncols=True, file=sys.stderr)

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def for_terminal() -> Progress:
    """tqdm when stderr is a TTY, else silent (so logs and CI output stay clean)."""
    return TqdmProgress() if sys.stderr.isatty() else NullProgress()
