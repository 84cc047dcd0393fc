"""Every HTTP route the app serves (ours and Gradio's), who may call it and what it may touch: the table
docs/SECURITY.md lists and `PrivateFiles` (webui/privacy.py) enforces before any route runs.

A route is known by its path as FastAPI lists it (`/gradio_api/file={path_or_url:path}`). A route missing from
`ROUTES` — one a Gradio upgrade adds — is refused (404) until it is looked at and listed: nothing is reachable
by default. What each `check` means:

    open      anyone who reaches the port (with `--auth`, Gradio's login where Gradio asks for it); the route
              reads nothing of any session's
    route     the route checks its caller itself (the jobs API: its login and each job's token; live: the
              stream's one-time token and owner)
    file      a file named in the URL: served only when it is registered to the caller (an upload of theirs, a
              result given to them); any other path, URL or relative path answers 404, as for a missing file
    upload    Gradio's upload: every file it stores is registered to the uploader alone; refused from its
              declared length over the upload limit before a byte is stored
    event     runs an event of the page (Gradio's queue and call API): every file the request names (a
              `FileData` anywhere in its JSON body) must be registered to the caller, and its Gradio session is
              the caller's (`session` below); else 403 with one line, before the event runs
    session   names a Gradio session (path, query or body `session_hash`): only the owner who first used that
              session may use it again; another gets 404
    refused   not used by the studio (Gradio features it does not use): 404 for everyone
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from starlette.routing import compile_path

Check = Literal["open", "route", "file", "upload", "event", "session", "refused"]


@dataclass(frozen=True)
class Door:
    """One route's rule: `check` (see the module docstring) and, in words, who calls it and what it touches."""

    check: Check
    touches: str


_STATIC = Door("open", "the page's own code, styles and icons (files shipped with Gradio)")
_EVENT = Door("event", "runs one event of the page for the caller's session, on files registered to the caller")
_UNUSED = "a Gradio feature the studio does not use"

ROUTES: dict[str, Door] = {
    # Ours (webui/server.py, webui/live_rtc.py).
    "/healthz": Door("open", "nothing: answers while the process runs"),
    "/readyz": Door(
        "open",
        "whether the ready preset's models, ffmpeg and free disk are there (for the operator); files by name, no "
        "server path",
    ),
    "/metrics": Door("open", "process counters: jobs, frames, queue depth (no paths, ids or names)"),
    "/api/jobs": Door("route", "with --auth its login: stores its own uploads in a new job folder and queues it"),
    "/api/jobs/{job_id}": Door("route", "the job's status, to the holder of its token"),
    "/api/jobs/{job_id}/cancel": Door("route", "cancels the job, for the holder of its token"),
    "/api/jobs/{job_id}/result": Door("route", "the job's output or sidecar, to the holder of its token"),
    "/live/offer": Door("route", "connects the caller's own live stream (its one-time token, same owner)"),
    # Gradio's page, login and static files.
    "/": Door("open", "the studio page (no session's data)"),
    "/config": Door("open", "the page's layout and events as built (no session's data)"),
    "/config/": Door("open", "as /config"),
    "/openapi.json": Door("open", "the description of the routes above"),
    "/login": Door("open", "Gradio's login form (with --auth)"),
    "/login/": Door("open", "as /login"),
    "/logout": Door("open", "ends the caller's own login"),
    "/svelte/{path:path}": _STATIC,
    "/static/{path:path}": _STATIC,
    "/assets/{path:path}": _STATIC,
    "/favicon.ico": _STATIC,
    "/theme.css": _STATIC,
    "/robots.txt": _STATIC,
    "/pwa_icon": _STATIC,
    "/pwa_icon/{size}": _STATIC,
    "/manifest.json": _STATIC,
    "/gradio_api/theme.css": _STATIC,
    "/gradio_api/user": Door("open", "the caller's own login name"),
    "/gradio_api/user/": Door("open", "as /gradio_api/user"),
    "/gradio_api/login_check": Door("open", "whether the caller is logged in"),
    "/gradio_api/login_check/": Door("open", "as /gradio_api/login_check"),
    "/gradio_api/token": Door("open", "the caller's own login token (from its own cookie)"),
    "/gradio_api/token/": Door("open", "as /gradio_api/token"),
    "/gradio_api/app_id": Door("open", "the app's random id"),
    "/gradio_api/app_id/": Door("open", "as /gradio_api/app_id"),
    "/gradio_api/info": Door("open", "the description of the page's events"),
    "/gradio_api/info/": Door("open", "as /gradio_api/info"),
    "/gradio_api/openapi.json": Door("open", "the description of the page's events"),
    "/gradio_api/startup-events": Door("open", "nothing (Gradio calls it once as it starts)"),
    "/gradio_api/queue/status": Door("open", "how many events wait in Gradio's queue"),
    "/gradio_api/upload_progress": Door("open", "progress of an upload, by the random id its uploader chose"),
    "/gradio_api/reset": Door("open", "nothing (Gradio keeps it for old clients)"),
    "/gradio_api/reset/": Door("open", "as /gradio_api/reset"),
    # Files, uploads and events.
    "/gradio_api/file={path_or_url:path}": Door("file", "a file registered to the caller (an upload, a result)"),
    "/gradio_api/file/{path:path}": Door("file", "as /gradio_api/file="),
    "/gradio_api/upload": Door("upload", "stores the caller's uploads (up to --max-file-size each), theirs alone"),
    "/gradio_api/queue/join": _EVENT,
    "/gradio_api/call/{api_name}": _EVENT,
    "/gradio_api/call/{api_name}/": _EVENT,
    "/gradio_api/call/v2/{api_name}": _EVENT,
    "/gradio_api/call/v2/{api_name}/": _EVENT,
    "/gradio_api/run/{api_name}": _EVENT,
    "/gradio_api/run/{api_name}/": _EVENT,
    "/gradio_api/api/{api_name}": _EVENT,
    "/gradio_api/api/{api_name}/": _EVENT,
    "/gradio_api/stream/{event_id}": Door("event", "new input for a running event, by its random id"),
    "/gradio_api/stream/{event_id}/close": Door("open", "ends a running event's input, by its random id"),
    "/gradio_api/call/{api_name}/{event_id}": Door("open", "an event's results, by its random id (files: owner)"),
    "/gradio_api/call/v2/{api_name}/{event_id}": Door("open", "as /gradio_api/call/{api_name}/{event_id}"),
    "/gradio_api/queue/data": Door("session", "the caller's own session's event results"),
    "/gradio_api/heartbeat/{session_hash}": Door("session", "keeps the caller's own session alive"),
    "/gradio_api/cancel": Door("session", "cancels an event of the caller's own session"),
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/playlist.m3u8": Door("session", "own session's stream"),
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/{segment_id}.{ext}": Door("session", "as above"),
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/playlist-file": Door("session", "as above"),
    # Gradio features the studio does not use: each could read or write for a stranger.
    "/gradio_api/deep_link": Door("refused", f"{_UNUSED}: would write a session's values to a file"),
    "/gradio_api/proxy={url_path:path}": Door("refused", f"{_UNUSED}: fetches from other Gradio apps"),
    "/gradio_api/component_server": Door("refused", f"{_UNUSED}: calls a component's server function"),
    "/gradio_api/component_server/": Door("refused", f"{_UNUSED}: as /gradio_api/component_server"),
    "/gradio_api/custom_component/{id}/{environment}/{type}/{file_name}": Door("refused", _UNUSED),
    "/gradio_api/process_recording": Door("refused", f"{_UNUSED}: runs ffmpeg on an uploaded screen recording"),
    "/gradio_api/dev/reload": Door("refused", f"{_UNUSED} (its development mode)"),
    "/gradio_api/runs": Door("refused", f"{_UNUSED} (run history)"),
    "/gradio_api/runs/": Door("refused", f"{_UNUSED} (run history)"),
    "/monitoring": Door("refused", f"{_UNUSED} (monitoring)"),
    "/monitoring/summary": Door("refused", f"{_UNUSED} (monitoring)"),
    "/monitoring/{key}": Door("refused", f"{_UNUSED} (monitoring)"),
    "/gradio_api/vibe-edit": Door("refused", f"{_UNUSED} (its code editor)"),
    "/gradio_api/vibe-edit/": Door("refused", f"{_UNUSED} (its code editor)"),
    "/gradio_api/undo-vibe-edit": Door("refused", f"{_UNUSED} (its code editor)"),
    "/gradio_api/undo-vibe-edit/": Door("refused", f"{_UNUSED} (its code editor)"),
    "/gradio_api/vibe-code": Door("refused", f"{_UNUSED} (its code editor)"),
    "/gradio_api/vibe-code/": Door("refused", f"{_UNUSED} (its code editor)"),
    "/gradio_api/vibe-starter-queries": Door("refused", f"{_UNUSED} (its code editor)"),
    "/gradio_api/vibe-starter-queries/": Door("refused", f"{_UNUSED} (its code editor)"),
}

REFUSED = Door("refused", "not listed in webui/access.py: refused until it is looked at")


@dataclass(frozen=True)
class Served:
    """One route as the app serves it: its path (FastAPI's form), methods and the matcher for request paths."""

    path: str
    methods: frozenset[str]
    pattern: re.Pattern[str]

    @property
    def door(self) -> Door:
        return ROUTES.get(self.path, REFUSED)


def served_routes(app: Any) -> list[Served]:
    """Every route of a FastAPI/Starlette app, routers included in it opened up, in matching order."""
    return [
        Served(path, frozenset(methods), compile_path(path)[0]) for path, methods in _walk(getattr(app, "routes", []))
    ]


def _walk(routes: Iterable[Any]) -> Iterator[tuple[str, Iterable[str]]]:
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)  # FastAPI's included routers (opened lazily)
        if contexts is not None:
            for context in contexts():
                yield context.path, getattr(context.original_route, "methods", None) or ()
        elif hasattr(route, "path"):
            yield route.path, getattr(route, "methods", None) or ()


def match(routes: Iterable[Served], method: str, path: str) -> tuple[Served, dict[str, str]] | None:
    """The first route serving `method` on `path` (as Starlette would pick it), with its path parameters."""
    for served in routes:
        found = served.pattern.match(path)
        if found and (not served.methods or method in served.methods or (method == "HEAD" and "GET" in served.methods)):
            return served, found.groupdict()
    return None
