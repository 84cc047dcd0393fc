"""Keeps a test session off the machine it runs on (tests/README.md, "Where tests may write").

`isolate()` points HOME, the XDG folders and facestudio's own folders at a temporary folder for the whole session,
before the tests are collected: what a test, a module fixture or a child process it starts (they inherit the
environment) writes under `~` or into facestudio's default folders lands there. `Guard` then fails any test after
which the checkout or the real home has changed: a file or folder that is new, changed or gone (Python's own
`__pycache__` and the test runners' caches excepted).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# Folders whose content is the tools' own, not the tests': never compared.
SKIPPED = frozenset({".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "node_modules"})
# The real home's folders whose names are compared (what a test could leave there: ~/.config/facestudio,
# ~/.cache/..., a ~/.something); below them, the folders facestudio writes to are compared file by file.
HOME_LISTED = ("", ".config", ".cache", ".local/share", ".local/state")
HOME_WALKED = (".config/facestudio", ".cache/facestudio")


@dataclass(frozen=True)
class Session:
    """The session's stand-ins: `root` holds them all; `real_home` is the user's home they replace."""

    root: Path
    real_home: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def cache(self) -> Path:
        """FACESTUDIO_CACHE: derived ONNX graphs, shared by the session (the conversions are deterministic)."""
        return self.root / "cache"


def isolate() -> Session:
    """Make the session's folders and point the environment at them (HOME, XDG_*, FACESTUDIO_*).
    $FACESTUDIO_TEST_ARTIFACTS (default: `facestudio-test-artifacts` in the system's temp folder) is where tests
    keep pictures for people to look at; it outlives the session. The real home is the one before the first
    isolation: an xdist worker inherits its controller's isolated environment."""
    real_home = Path(os.environ.get("FACESTUDIO_TESTS_REAL_HOME") or Path.home())
    session = Session(Path(tempfile.mkdtemp(prefix="facestudio-tests-")), real_home)
    home = session.home
    artifacts = os.environ.setdefault(
        "FACESTUDIO_TEST_ARTIFACTS", str(Path(tempfile.gettempdir()) / "facestudio-test-artifacts")
    )
    Path(artifacts).mkdir(parents=True, exist_ok=True)
    os.environ.update(
        FACESTUDIO_TESTS_REAL_HOME=str(real_home),
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        FACESTUDIO_HOME=str(session.root / "config"),
        FACESTUDIO_MODELS=str(session.root / "models"),
        FACESTUDIO_CACHE=str(session.cache),
        FACESTUDIO_JOBS=str(session.root / "jobs"),
        FACESTUDIO_INTEGRITY_KEY=str(session.root / "integrity.key"),
    )
    for name in ("FACESTUDIO_ACCEPT", "FACESTUDIO_MANIFEST"):
        os.environ.pop(name, None)
    home.mkdir()
    return session


def remove(session: Session) -> None:
    shutil.rmtree(session.root, ignore_errors=True)


State = dict[str, tuple[int, int] | None]  # path → (mtime in ns, size) of a file; None for a folder


def walk(root: Path) -> State:
    """Every file and folder below `root` (none if it does not exist), skipping SKIPPED folders and virtual
    environments (a folder holding pyvenv.cfg)."""
    found: State = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))]
        for name in dirs:
            found[os.path.join(folder, name)] = None
        for name in files:
            path = os.path.join(folder, name)
            try:
                stat = os.lstat(path)
            except FileNotFoundError:  # removed meanwhile
                continue
            found[path] = (stat.st_mtime_ns, stat.st_size)
    return found


def listing(folder: Path) -> State:
    """The names directly in `folder` (nothing below them)."""
    try:
        return {str(folder / name): None for name in os.listdir(folder)}
    except (FileNotFoundError, NotADirectoryError):
        return {}


@dataclass
class Guard:
    """Compares the checkout and the real home with how they were when the session began."""

    checkout: Path
    real_home: Path
    before: State = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.before = self.state()

    def state(self) -> State:
        found = walk(self.checkout)
        for name in HOME_LISTED:
            found.update(listing(self.real_home / name))
        for name in HOME_WALKED:
            found.update(walk(self.real_home / name))
        return found

    def changes(self, allowed: frozenset[str] = frozenset()) -> list[str]:
        """What changed since the last call ("new PATH", "changed PATH", "gone PATH"), PATH relative to the checkout
        or shown with ~ for the real home; paths in `allowed` (relative to the checkout) are not reported. Each
        change is reported once: the state seen becomes the new reference."""
        now = self.state()
        allowed_paths = {str(self.checkout / p) for p in allowed}
        found = []
        for path in sorted(now.keys() | self.before.keys()):
            if path in allowed_paths:
                continue
            if path not in self.before:
                found.append(f"new {self._show(path)}")
            elif path not in now:
                found.append(f"gone {self._show(path)}")
            elif now[path] != self.before[path]:
                found.append(f"changed {self._show(path)}")
        self.before = now
        return found

    def _show(self, path: str) -> str:
        if path.startswith(str(self.checkout) + os.sep):
            return os.path.relpath(path, self.checkout)
        return "~" + path.removeprefix(str(self.real_home))
