"""Shared test setup. The session runs with its own home and facestudio folders, every test with its own models,
jobs and consent folders (never the user's), and a test that writes into the checkout or the real home fails
(tests/hermetic.py; the rules for test authors are in tests/README.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hermetic
import pytest
from typing_extensions import override  # typing.override needs Python 3.12

from engine import media as video
from engine.faces.embedded import EmbeddedAnalyser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SESSION = pytest.StashKey[hermetic.Session]()
GUARD = pytest.StashKey[hermetic.Guard]()
HEAP = pytest.StashKey["Heap"]()


def pytest_configure(config: pytest.Config) -> None:
    # Before collection: a module that writes while it is imported is caught too.
    session = config.stash[SESSION] = hermetic.isolate()
    config.stash[GUARD] = hermetic.Guard(ROOT, session.real_home)
    config.stash[HEAP] = Heap()


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION in config.stash:
        hermetic.remove(config.stash[SESSION])


# Test files that hold much memory while they run: PyTorch in this process (~0.5 GB once imported: these import it,
# the others never do), or big programs beside it (Chromium, a local Ray cluster: 1–2 GB). With xdist they all run
# on one worker, one after another, so the other worker stays small and two of them never add up.
HEAVY = frozenset(
    f"tests/test_{name}.py"
    for name in (
        "backends", "buffalo_inswapper", "deploy", "derived", "device_frames", "doctor", "export",
        "expression_restorer", "face_enhancer", "face_enhancer_models", "face_swapper_inswapper",
        "face_swapper_models", "gpu_benchmark", "lip_syncer", "model_pins", "ncnn", "runtime",
        "webui_browser", "live_browser", "people_browser", "studio_browser", "security", "cluster",
    )
)  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (pyproject's addopts): each test file whole on one worker, the HEAVY files as one."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return "heavy" if file in HEAVY else file

    return Scheduling(config, log)


@pytest.fixture(autouse=True)
def hermetic_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test when the checkout or the real home changed while it ran (or while a module or session
    fixture it uses was set up or torn down: those write before or after it). `@pytest.mark.checkout_writes(PATH…)`
    allows the named files (relative to the checkout) for a test that writes them on purpose."""
    yield
    allowed = frozenset(path for mark in request.node.iter_markers("checkout_writes") for path in mark.args)
    if changed := request.config.stash[GUARD].changes(allowed):
        pytest.fail(
            "wrote outside the test's temporary folders (use tmp_path or tmp_path_factory; see tests/README.md):\n  "
            + "\n  ".join(changed),
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _hermetic_session(request: pytest.FixtureRequest) -> Iterator[None]:
    """The last check, after the module and session fixtures' teardowns."""
    yield
    if changed := request.config.stash[GUARD].changes():
        pytest.fail("the session's fixtures wrote outside their temporary folders:\n  " + "\n  ".join(changed))


@dataclass
class Heap:
    """Gives memory a test freed back to the system: Python keeps freed objects' memory, and glibc keeps freed
    heap, so without this every model, frame and session a test once held would stay resident for the rest of
    the run. `release()` (after each test) collects the garbage and trims the heap (`malloc_trim`) when the
    process grew by more than `above` bytes since the last release: cheap when nothing grew."""

    above: int = 256 << 20
    released: int = 0  # resident bytes right after the last release

    def release(self) -> None:
        if resident() - self.released <= self.above:
            return
        gc.collect()
        if sys.platform == "linux":
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            if hasattr(libc, "malloc_trim"):  # glibc (not musl)
                libc.malloc_trim(0)
        self.released = resident()


def resident() -> int:
    """This process's resident memory in bytes (Linux /proc; 0 elsewhere)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


@pytest.fixture(autouse=True)
def release_memory(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: the memory it (or its module's fixtures, once torn down) freed goes back to the system."""
    yield
    request.config.stash[HEAP].release()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own facestudio home, models and jobs folders (the session's cache is shared); no consent given."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("FACESTUDIO_HOME", str(home / "config"))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(home / "models"))
    monkeypatch.setenv("FACESTUDIO_JOBS", str(home / "jobs"))
    monkeypatch.delenv("FACESTUDIO_ACCEPT", raising=False)
    monkeypatch.delenv("FACESTUDIO_MANIFEST", raising=False)
    return home


@dataclass
class Clock:
    """A clock the test moves (seconds), for code that takes `clock=`: no test waits for real time to pass."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Item:
    """A downloadable file as `engine.models.fetch` sees it."""

    filename: str
    url: str
    sha256: str
    size: int | None


@dataclass
class ServerState:
    """What the test server serves and how it misbehaves; `requests` records (path, Range header or None)."""

    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    cut_next_after: int | None = None  # send only this many body bytes of the next response, then close
    ignore_range: bool = False


@dataclass
class Server:
    state: ServerState
    base_url: str

    def item(self, name: str, data: bytes, *, sha256: str | None = None) -> Item:
        self.state.files[name] = data
        return Item(name, f"{self.base_url}/{name}", sha256 or hashlib.sha256(data).hexdigest(), len(data))


def _handler(state: ServerState) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.lstrip("/")
            range_header = self.headers.get("Range")
            state.requests.append((name, range_header))
            body = state.files.get(name)
            if body is None:
                self.send_error(404)
                return
            start = 0
            if range_header and not state.ignore_range:
                match = re.fullmatch(r"bytes=(\d+)-", range_header)
                assert match, range_header
                start = int(match[1])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            chunk = body[start:]
            self.send_header("Content-Length", str(len(chunk)))
            self.end_headers()
            if state.cut_next_after is not None:
                # Simulate a dropped connection: a short body under a full Content-Length, then close.
                chunk, state.cut_next_after = chunk[: state.cut_next_after], None
                self.close_connection = True
            self.wfile.write(chunk)

        @override
        def log_message(self, format: str, *args: object) -> None:
            pass  # keep pytest output clean

    return Handler


@pytest.fixture(scope="session")
def analyser() -> EmbeddedAnalyser:
    """The embedded analyser (dlib HOG), loaded once for the session: it keeps no state between calls."""
    return EmbeddedAnalyser("hog")


@pytest.fixture
def server() -> Iterator[Server]:
    state = ServerState()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield Server(state, f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def make_rotated(source: Path, output: Path) -> None:
    """Stream-copy `source` with a 90° display rotation: `-display_rotation` on FFmpeg ≥ 7, where the `rotate`
    tag is no longer turned into a display matrix; the `rotate` tag on older FFmpeg, which lacks the option."""
    ffmpeg = video.find_ffmpeg()
    modern = [ffmpeg, "-nostdin", "-v", "error", "-y", "-display_rotation", "90", "-i", str(source), "-c", "copy",
              str(output)]  # fmt: skip
    if subprocess.run(modern, capture_output=True, check=False).returncode != 0:
        legacy = [ffmpeg, "-nostdin", "-v", "error", "-y", "-i", str(source), "-c", "copy",
                  "-metadata:s:v", "rotate=90", str(output)]  # fmt: skip
        subprocess.run(legacy, capture_output=True, check=True)


def audio_seconds(path: Path) -> float:
    """Length of the first audio stream, measured by decoding it (independent of container headers)."""
    out = subprocess.run(
        [video.find_ffmpeg(), "-v", "error", "-i", str(path), "-map", "0:a:0", "-f", "s16le", "-ac", "1",
         "-ar", "48000", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    return len(out) / 2 / 48000


def _children_of(pid: int) -> list[tuple[int, str, str]]:
    """(pid, command name, state) of every process whose parent is `pid` (Linux /proc; state "Z" = zombie)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # The name sits in parentheses and may hold spaces: the fields after its closing one are fixed.
        name = text[text.index("(") + 1 : text.rindex(")")]
        state, ppid = text[text.rindex(")") + 2 :].split()[:2]
        if int(ppid) == pid:
            found.append((int(stat.parent.name), name, state))
    return found


def live_children(pid: int) -> list[int]:
    """PIDs of live (not zombie) processes whose parent is `pid`."""
    return [child for child, _, state in _children_of(pid) if state != "Z"]


def ffmpeg_children() -> list[str]:
    """`pid name state` of every ffmpeg/ffprobe child of this test process, zombies included (a zombie was never
    waited for)."""
    return [
        f"{child} {name} {state}"
        for child, name, state in _children_of(os.getpid())
        if name.startswith(("ffmpeg", "ffprobe"))
    ]
