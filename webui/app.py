"""The facestudio web UI: how it is served.

`launch` builds the page (webui/page.py) for a Studio (webui/studio.py), and serves it with the probes, metrics
and jobs API (webui/server.py) on one port, behind `PrivateFiles` (webui/privacy.py), which enforces every route's
rule (webui/access.py): every upload and result is its owner's alone, and every event may use its caller's files
only. The operator's launch settings (`UISettings`) make the studio's `Policy`: the server's own settings (a
server preset, `max_pixels`) and what one user may use (frames a job, runs at once, disk, live streams). All model
work goes through the studio's run line and the engine service's model lock, one job at a time, for UI runs and
API jobs alike. Idle sessions expire with their files after `keep_hours`.

What the app does not do (docs/SECURITY.md): no telemetry (Gradio's analytics are off), no network call unless
asked (a model download, `--share`), no file outside a user's own uploads and results for a web or API user.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import socket
import tempfile
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from gradio import utils as gradio_utils
from starlette.middleware import Middleware

from engine.core.errors import FacestudioError, InvalidInput
from engine.core.progress import Progress
from engine.job.settings import load_preset_raw
from engine.serve.health import Readiness
from engine.serve.service import Access, file_settings, operator_values
from webui import server
from webui.jobs import JobQueue, JobRecord
from webui.page import CSS, Page
from webui.privacy import PrivateFiles, upload_route
from webui.studio import Policy, Studio

# How often idle sessions are looked for.
_SWEEP_SECONDS = 600


@dataclass(frozen=True)
class UISettings:
    """How the app is served. `max_file_size`: the largest upload accepted (e.g. "2gb", "500mb"); `queue_size`:
    jobs waiting at most (in the UI's queue, and in the jobs API's), beyond which new ones are refused;
    `ready_preset`: the preset (name or TOML file) whose models `/readyz` requires; `min_free_gb`: free space, in
    GB (10^9 bytes), the temp folder must keep for `/readyz`; `keep_hours`: how long a session's files and history
    are kept after its last request (an open page keeps its session alive).

    What one user may use (docs/SECURITY.md), each with its `ui` flag: `max_pixels`: the largest frame of a job
    (None: the server preset's, else the engine's default); `max_frames`: frames a job may render;
    `jobs_per_user`: runs or API jobs one session or client may have waiting or running; `disk_per_user_gb`: what
    one session may keep (uploads, results), in GB; `live_streams`: live streams at once (one per session).
    `server_preset`: a preset (name or file) holding only the server's settings (runtime.device …), which every
    web and API job runs with."""

    host: str = "127.0.0.1"
    port: int = 7860
    share: bool = False
    auth: tuple[str, str] | None = None
    max_file_size: str = "2gb"
    queue_size: int = 16
    ready_preset: str = "default"
    min_free_gb: float = 1.0
    keep_hours: float = 24.0
    max_pixels: int | None = None
    max_frames: int = 54_000
    jobs_per_user: int = 2
    disk_per_user_gb: float = 20.0
    live_streams: int = 4
    server_preset: str | None = None


class ServeError(FacestudioError):
    """The app could not be served as asked (the port is taken, no share link could be made): exit 2, and
    nothing of it is left running or on disk."""

    exit_code = 2


def parse_size(text: str) -> int:
    """Bytes in a size such as "2gb", "500mb", "64kb" or "1000" (units of 1024, as Gradio reads max_file_size)."""
    units = {"tb": 1 << 40, "gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1}
    compact = text.replace(" ", "").lower()
    unit = next((u for u in units if compact.endswith(u)), "")
    number = compact[: len(compact) - len(unit)]
    if not number.isdigit():
        raise InvalidInput(f"size {text!r} is not a number with kb, mb, gb or tb, e.g. 2gb")
    return int(number) * units.get(unit, 1)


def policy(settings: UISettings, registry: Any) -> Policy:
    """The studio's policy from the launch settings: the server preset's values and `max_pixels` as the server's
    settings, and the per-user limits."""
    server: dict[str, dict[str, Any]] = {}
    if settings.server_preset:
        server = operator_values(load_preset_raw(settings.server_preset), registry)
    if settings.max_pixels is not None:
        server.setdefault("runtime", {})["max_pixels"] = settings.max_pixels
    return Policy(server, settings.max_frames, settings.jobs_per_user, int(settings.disk_per_user_gb * 1e9))


def api_jobs(studio: Studio, folder: Path, max_queued: int) -> JobQueue:
    """The jobs API's queue, running its jobs through the studio (the run line UI runs wait in too), each job as
    a user's: only its own uploads, the server's settings, the studio's limits."""
    rules = studio.policy

    def execute(record: JobRecord, progress: Progress) -> Any:
        access = Access(record.owns, rules.server, rules.max_frames)
        return studio.execute(
            record.raw, record.target, record.sources, record.folder, record.names, progress, record.cancel, access
        )

    def check(raw: dict[str, Any]) -> None:
        # Before any upload is stored: a valid preset a client may give (a file setting must come as an upload:
        # no path is anyone's yet).
        studio.service.preset(raw, Access(lambda _: False, rules.server, rules.max_frames))

    return JobQueue(execute, check, folder, max_queued, per_client=rules.jobs_per_user)


def port_taken(host: str, port: int) -> bool:
    """Whether `port` on `host` cannot be listened on now (another server has it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def launch(settings: UISettings, studio: Studio | None = None, *, block: bool = True) -> gr.Blocks:
    """Build and serve the app, with the probes, /metrics and the jobs API on the same port (webui/server.py);
    the studio takes the policy `settings` give. Sharing needs auth (checked by the CLI before this is called).

    Raises ServeError, leaving nothing running or in the temp folder, when the port is taken or `share` was asked
    and no share link could be made. With `block`, serves until interrupted; else returns the running app."""
    if port_taken(settings.host, settings.port):
        raise ServeError(f"port {settings.port} on {settings.host} is in use (another server?): choose another --port")
    studio = studio or Studio()
    studio.policy = policy(settings, studio.registry)
    page = Page(studio)
    app = page.build()
    app.analytics_enabled = False  # the page is built without them too (webui/page.py): Gradio never phones home
    app.queue(max_size=settings.queue_size, default_concurrency_limit=1)
    page.live.hub.max_streams = settings.live_streams

    jobs = api_jobs(studio, Path(tempfile.mkdtemp(prefix="facestudio-jobs-")), settings.queue_size)
    readiness = Readiness(studio.registry, settings.ready_preset, int(settings.min_free_gb * 1e9))
    max_upload = parse_size(settings.max_file_size)
    files = [f"{g}.{n}" for g, names in file_settings(studio.registry).items() for n in names]
    routes = [upload_route(studio.guard, max_upload)]
    routes += server.routes(jobs, readiness, auth=settings.auth, max_upload=max_upload, file_settings=files)
    routes += page.live.routes(settings.auth)
    stop = threading.Event()

    def sweep() -> None:
        while not stop.wait(_SWEEP_SECONDS):
            page.live.hub.forget(studio.expire(settings.keep_hours * 3600))

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        # The jobs worker and the session sweep live as long as the server; everything goes when it stops.
        jobs.start()
        sweeper = threading.Thread(target=sweep, name="facestudio-sweep", daemon=True)
        sweeper.start()
        try:
            yield
        finally:
            stop.set()
            jobs.stop()
            page.live.hub.close()
            studio.close()
            _remove_gradio_leftovers()

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Gradio's own printing: the CLI says what it needs to
            app.launch(
                server_name=settings.host,
                server_port=settings.port,
                share=settings.share,
                auth=settings.auth,
                max_file_size=settings.max_file_size,
                allowed_paths=[],
                run_history=False,
                enable_monitoring=False,
                mcp_server=False,
                ssr_mode=False,
                show_error=True,
                quiet=True,
                prevent_thread_lock=True,
                css=CSS,
                # Gradio builds its FastAPI app with these: our routes go first, so Gradio's routes cannot shadow
                # them, and everything `launch` gives (share links, its login) still works, which mounting Gradio
                # on an app of our own (gr.mount_gradio_app) would lose for --share. The middleware sees every
                # request first.
                app_kwargs={
                    "routes": routes,
                    "lifespan": lifespan,
                    "middleware": [Middleware(PrivateFiles, guard=studio.guard, seen=studio.seen)],
                },
            )
    except OSError as exc:  # the port was taken between the check above and Gradio's own
        shutil.rmtree(jobs.folder, ignore_errors=True)
        studio.close()
        raise ServeError(f"port {settings.port} on {settings.host} could not be listened on: {exc}") from None
    if settings.share and not app.share_url:
        with contextlib.redirect_stdout(io.StringIO()):
            app.close()
        raise ServeError(
            "no share link could be made (no network, or Gradio's share server is unreachable), so nothing is "
            "served: start without --share to serve on this machine or network only"
        )
    if block:
        app.block_thread()
    return app


def _remove_gradio_leftovers() -> None:
    """Gradio makes an (empty) folder for a code editor the app never enables, and its own folder: removed as the
    server stops when nothing is left in them (another server's files keep them)."""
    folder = Path(gradio_utils.get_upload_folder())
    for empty in (folder / "vibe_edit_history", folder):
        with contextlib.suppress(OSError):
            empty.rmdir()
