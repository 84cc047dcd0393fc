"""The facestudio web UI: how it is served.

`launch` builds the page (webui/page.py) for a Studio (webui/studio.py), and serves it with the probes, metrics
and jobs API (webui/server.py) on one port, behind `PrivateFiles` (webui/privacy.py): every upload and result is
served to its owner alone. All model work goes through the studio's run line and the engine service's model lock,
one job at a time, for UI runs and API jobs alike. Idle sessions expire with their files after `keep_hours`.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from engine.core.errors import InvalidInput
from engine.core.progress import Progress
from engine.serve.health import Readiness
from webui import server
from webui.jobs import JobQueue, JobRecord
from webui.page import CSS, Page
from webui.privacy import PrivateFiles
from webui.studio import Studio

# How often idle sessions are looked for.
_SWEEP_SECONDS = 600


@dataclass(frozen=True)
class UISettings:
    """How the app is served. `max_file_size`: the largest upload accepted (e.g. "2gb", "500mb"); `queue_size`:
    jobs waiting at most (in the UI's queue, and in the jobs API's), beyond which new ones are refused;
    `ready_preset`: the preset (name or TOML file) whose models `/readyz` requires; `min_free_gb`: free space, in
    GB (10^9 bytes), the temp folder must keep for `/readyz`; `keep_hours`: how long a session's files and history
    are kept after its last request (an open page keeps its session alive)."""

    host: str = "127.0.0.1"
    port: int = 7860
    share: bool = False
    auth: tuple[str, str] | None = None
    max_file_size: str = "2gb"
    queue_size: int = 16
    ready_preset: str = "default"
    min_free_gb: float = 1.0
    keep_hours: float = 24.0


def parse_size(text: str) -> int:
    """Bytes in a size such as "2gb", "500mb", "64kb" or "1000" (units of 1024, as Gradio reads max_file_size)."""
    units = {"tb": 1 << 40, "gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1}
    compact = text.replace(" ", "").lower()
    unit = next((u for u in units if compact.endswith(u)), "")
    number = compact[: len(compact) - len(unit)]
    if not number.isdigit():
        raise InvalidInput(f"size {text!r} is not a number with kb, mb, gb or tb, e.g. 2gb")
    return int(number) * units.get(unit, 1)


def api_jobs(studio: Studio, folder: Path, max_queued: int) -> JobQueue:
    """The jobs API's queue, running its jobs through the studio (the run line UI runs wait in too)."""

    def execute(record: JobRecord, progress: Progress) -> Any:
        return studio.execute(
            record.raw, record.target, record.sources, record.folder, record.names, progress, record.cancel
        )

    return JobQueue(execute, studio.registry, folder, max_queued)


def launch(settings: UISettings, studio: Studio | None = None, *, block: bool = True) -> gr.Blocks:
    """Build and serve the app, with the probes, /metrics and the jobs API on the same port (webui/server.py).
    Sharing needs auth (checked by the CLI before this is called)."""
    studio = studio or Studio()
    page = Page(studio)
    app = page.build()
    app.queue(max_size=settings.queue_size, default_concurrency_limit=1)

    jobs = api_jobs(studio, Path(tempfile.mkdtemp(prefix="facestudio-jobs-")), settings.queue_size)
    readiness = Readiness(studio.registry, settings.ready_preset, int(settings.min_free_gb * 1e9))
    routes = server.routes(jobs, readiness, auth=settings.auth, max_upload=parse_size(settings.max_file_size))
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
        prevent_thread_lock=not block,
        css=CSS,
        # Gradio builds its FastAPI app with these: our routes go first, so Gradio's routes cannot shadow them,
        # and everything `launch` gives (share links, its login) still works, which mounting Gradio on an app of
        # our own (gr.mount_gradio_app) would lose for --share. The middleware sees every request first.
        app_kwargs={
            "routes": routes,
            "lifespan": lifespan,
            "middleware": [Middleware(PrivateFiles, guard=studio.guard, seen=studio.seen)],
        },
    )
    return app
