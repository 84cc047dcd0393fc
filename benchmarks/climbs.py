"""How often a job's walk climbs back up the engine's floors (docs/ARCHITECTURE.md §1).

    python benchmarks/climbs.py

Traces every Python call of one offline `launch.py run` (the demo's 60-frame 320×180 clip and source photo, the
default chain, a fresh FACESTUDIO_HOME) on every thread, and prints each caller → callee function whose module
sits on a higher floor than its caller's (the floors of tests/test_imports.py), with how often it was called.
Imports never climb (the test checks that); what a walk can still climb through are callbacks handed down: a
Progress that the service implements, a cache's factory.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_imports import FLOORS  # noqa: E402


def module_of(filename: str) -> str | None:
    """The dotted name of an engine module from its file name, else None."""
    path = Path(filename)
    try:
        parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    except ValueError:
        return None
    if parts[0] != "engine" or path.suffix != ".py":
        return None
    return ".".join(parts).removesuffix(".__init__")


def floor(module: str) -> int:
    """The module's floor (0 = engine.core); -1 for the engine package itself."""
    for level, packages in enumerate(FLOORS):
        if any(module == p or module.startswith(f"{p}.") for p in packages):
            return level
    return -1


class Walk:
    """A profile function counting the calls that climb."""

    def __init__(self) -> None:
        self.climbs: dict[tuple[str, str], int] = {}
        self._modules: dict[str, str | None] = {}

    def _module(self, filename: str) -> str | None:
        if filename not in self._modules:
            self._modules[filename] = module_of(filename)
        return self._modules[filename]

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee, caller = self._module(frame.f_code.co_filename), self._module(frame.f_back.f_code.co_filename)
        if callee and caller and caller != callee and floor(callee) > floor(caller):
            key = (caller, f"{callee}.{frame.f_code.co_name}")
            self.climbs[key] = self.climbs.get(key, 0) + 1


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="facestudio-climbs-"))
    os.environ["FACESTUDIO_HOME"] = str(folder / "home")
    import cli
    from engine.media import demo

    clip = demo.make_clip(folder / "clip.mp4")
    walk = Walk()
    threading.setprofile(walk)
    sys.setprofile(walk)
    try:
        code = cli.main(["run", "--target", str(clip), "--source", str(demo.source_photo()),
                         "--output", str(folder / "out.mp4"), "--yes", "--offline"])  # fmt: skip
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    modules = {(caller, callee.rpartition(".")[0]) for caller, callee in walk.climbs}
    print(f"run exit {code}; climbs: {len(modules)} module pairs, {len(walk.climbs)} functions, "
          f"{sum(walk.climbs.values())} calls")  # fmt: skip
    for (caller, callee), calls in sorted(walk.climbs.items()):
        print(f"  {caller} → {callee}: {calls}")
    return code


if __name__ == "__main__":
    sys.exit(main())
