"""Who is asking, and which files they may have (docs/SECURITY.md).

**Owners.** A browser: a random secret in the `facestudio-owner` cookie (HttpOnly, SameSite=Lax), set on the first
answer to a client that has none; with a login (`--auth`), the login *and* the browser. One login is often shared
by the collaborators an operator gives it to: each of their browsers is still an owner of its own, so none reads
another's uploads or results. Gradio's own client keeps the cookies of its first request, so scripts get one too.
Folders, history and logs use a hash of the secret (`Owner.id`), never the secret.

**Files are owned, not named.** `FileGuard` is the server's record of which owner may use which file: an upload
is registered to its uploader as it is stored (`upload_route`), a result when a handler `share`s it. A path is
never trusted for its shape (being in Gradio's folder, looking like an upload): it is one of the caller's files
when the record says so, and not otherwise.

**Every route, every event.** `PrivateFiles` (ASGI middleware in front of everything) looks up each request's
route in webui/access.py's table and enforces it before the route runs: a file route serves only the caller's
files (404 otherwise, as for a missing file); an event of the page (Gradio's queue and call API, however it is
called) runs only when every `FileData` in its request is the caller's (403 with one line otherwise), and only in
a Gradio session the caller started; routes the studio does not use answer 404.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from fastapi.routing import APIRoute
from gradio import processing_utils
from gradio import routes as gradio_routes
from gradio import utils as gradio_utils
from gradio.route_utils import upload_fn
from starlette.datastructures import MutableHeaders
from starlette.formparsers import MultiPartException
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from webui.access import Served, match, served_routes

log = logging.getLogger(__name__)

COOKIE = "facestudio-owner"
UPLOAD_ROUTE = "/gradio_api/upload"
# Where the middleware leaves the request's owner for the routes behind it (the scope's key).
OWNER_SCOPE = "facestudio.owner"
# An event's request is JSON of a few kB (settings, file references); anything past this is refused unread.
MAX_EVENT_BODY = 4 << 20
# Gradio sessions remembered with their owner; the oldest are forgotten past this (a page load makes one).
_SESSIONS_KEPT = 100_000
# What the caller hears when an event names a file that is not theirs: the same for any path, existing or not.
NOT_YOURS = "that file is not one this session uploaded or was given (another's, or expired): upload it again"


@dataclass(frozen=True)
class Owner:
    """Whose request this is. `id`: letters and digits only (a folder name): `u…` for a login, `b…` for a
    browser, from a hash so the cookie's secret never reaches the disk. `label`: for people (the login name, or
    "this browser")."""

    id: str
    label: str


def owner_from(cookies: Mapping[str, str], username: str | None) -> Owner | None:
    """The owner of a request with these cookies and (when the app has a login) this logged-in user: its browser
    (the owner cookie's secret), and its login too when there is one. None without a well-formed owner cookie."""
    secret = cookies.get(COOKIE, "")
    if len(secret) < 32 or not secret.isalnum():
        return None
    if username:
        digest = hashlib.sha256(f"{username}\0{secret}".encode()).hexdigest()[:24]
        return Owner("u" + digest, f"{username} (this browser)")
    return Owner("b" + hashlib.sha256(secret.encode()).hexdigest()[:24], "this browser")


def _gradio_user(scope: Scope, cookies: Mapping[str, str]) -> str | None:
    """The user logged in to Gradio (None without a login, or when the app has none)."""
    app = scope.get("app")
    tokens = getattr(app, "tokens", None)
    cookie_id = getattr(app, "cookie_id", None)
    if not tokens or cookie_id is None:
        return None
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    user = tokens.get(token)
    return str(user) if user else None


class FileGuard:
    """Which owners may use which files (absolute, resolved paths), and which Gradio sessions are whose;
    thread-safe. The server's one record of ownership: every route and event asks it (`allows`). Files it lets go
    of are deleted only inside Gradio's folder and `folders` (the studio's work folder): never anything else."""

    def __init__(self, folders: Iterable[Path] = ()) -> None:
        self.folders = tuple(dict.fromkeys(Path(os.path.realpath(f)) for f in folders))
        self._owners: dict[Path, set[str]] = {}
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, owner: Owner, path: Path | str) -> Path:
        """Let `owner` use `path` (as it is now on disk); returns the resolved path."""
        resolved = Path(os.path.realpath(path))
        with self._lock:
            self._owners.setdefault(resolved, set()).add(owner.id)
        return resolved

    def allows(self, owner: Owner | None, path: Path | str) -> bool:
        """Whether `path` (resolved here: links, `..` and relative paths as the server would open them) is one of
        `owner`'s files. No owner owns anything."""
        resolved = Path(os.path.realpath(path))
        with self._lock:
            return owner is not None and owner.id in self._owners.get(resolved, ())

    def share(self, owner: Owner, path: Path | str) -> str:
        """Put a result where Gradio serves files from (its cache folder, under a content-hash folder) and let
        `owner` alone fetch it; returns the cached path, which a handler returns to its component as is."""
        cached = processing_utils.save_file_to_cache(str(path), cache_dir=str(_gradio_folder()))
        return str(self.allow(owner, cached))

    def release(self, owner: Owner, paths: Iterable[Path | str]) -> None:
        """`owner` no longer needs these files; each one nobody else holds is deleted when it is in Gradio's folder
        or the guard's `folders` (with the folders Gradio or the upload made for it, once empty)."""
        gone = []
        with self._lock:
            for path in paths:
                resolved = Path(os.path.realpath(path))
                holders = self._owners.get(resolved)
                if holders is None:
                    continue
                holders.discard(owner.id)
                if not holders:
                    del self._owners[resolved]
                    gone.append(resolved)
        for path in gone:
            if any(path.is_relative_to(folder) for folder in (_gradio_folder(), *self.folders)):
                path.unlink(missing_ok=True)
                _remove_empty_parents(path.parent)

    def held_by(self, owner: Owner) -> list[Path]:
        with self._lock:
            return [p for p, holders in self._owners.items() if owner.id in holders]

    def bind(self, owner: Owner | None, session_hash: str) -> bool:
        """Whether `owner` may use the Gradio session `session_hash`: the first owner to use one binds it; anyone
        else (another owner, no owner) may not."""
        if owner is None:
            return False
        with self._lock:
            bound = self._sessions.setdefault(session_hash, owner.id)
            self._sessions.move_to_end(session_hash)
            while len(self._sessions) > _SESSIONS_KEPT:
                self._sessions.popitem(last=False)
        return bound == owner.id

    def forget(self, owner: Owner) -> None:
        """The owner's Gradio sessions are forgotten (their files are released by the studio)."""
        with self._lock:
            for session_hash in [h for h, o in self._sessions.items() if o == owner.id]:
                del self._sessions[session_hash]


def _remove_empty_parents(folder: Path) -> None:
    """Remove `folder` and its parents while empty, up to (not including) Gradio's folder."""
    top = _gradio_folder()
    while folder != top and folder.is_relative_to(top):
        with contextlib.suppress(OSError):  # not empty (another file of the same upload) or already gone
            folder.rmdir()
        if folder.exists():
            return
        folder = folder.parent


def _gradio_folder() -> Path:
    return Path(os.path.realpath(gradio_utils.get_upload_folder()))


def requested_file(path: str) -> Path | None:
    """The file a file route's path parameter names, resolved as Gradio would open it (relative to the working
    folder), or None for a URL (Gradio would fetch it: never for a stranger)."""
    if "://" in path or path.startswith("//"):
        return None
    return Path(os.path.realpath(unquote(path)))


def upload_route(guard: FileGuard, max_file_size: int) -> APIRoute:
    """`POST /gradio_api/upload`, served instead of Gradio's own (it comes first): the same form and answer
    (Gradio's `upload_fn`), but each request stores into a folder of its own inside Gradio's, removed with
    everything in it when the upload fails or the client goes away (Gradio's would leave its temporary file), and
    every file it stores is registered to the uploader (the owner `PrivateFiles` found) before the answer."""
    router = APIRouter()

    @router.post(UPLOAD_ROUTE)
    async def upload(request: Request, upload_id: str | None = None) -> Any:
        owner: Owner | None = request.scope.get(OWNER_SCOPE)
        if owner is None:
            return PlainTextResponse("this client sent no session cookie: allow cookies and retry", status_code=403)
        _gradio_folder().mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="upload-", dir=_gradio_folder()))
        progress = gradio_routes.file_upload_statuses if upload_id else None
        try:
            stored, _, _ = await upload_fn(request, str(folder), max_file_size, upload_id, True, progress)
        except MultiPartException as exc:
            shutil.rmtree(folder, ignore_errors=True)
            return PlainTextResponse(exc.message, status_code=413 if "maximum allowed size" in exc.message else 400)
        except BaseException:  # the client went away, or anything else: nothing of it is kept
            shutil.rmtree(folder, ignore_errors=True)
            raise
        for path in stored:
            guard.allow(owner, path)
        if not stored:
            folder.rmdir()
        blocks = getattr(request.app, "get_blocks", None)
        if blocks is not None:
            blocks().upload_file_set.update(stored)  # Gradio's cache cleaning (delete_cache) knows them too
        return stored

    return next(r for r in router.routes if isinstance(r, APIRoute))


class PrivateFiles:
    """ASGI middleware in front of the whole app: sets the owner cookie, tells `seen(owner)` of every request (so
    idle sessions expire), and enforces webui/access.py's table for every route (see the module docstring)."""

    def __init__(self, app: ASGIApp, guard: FileGuard, seen: Any = None) -> None:
        self.app = app
        self.guard = guard
        self.seen = seen
        self._routes: list[Served] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        cookies = dict(connection.cookies)
        new_secret = None
        user = _gradio_user(scope, cookies)
        if owner_from(cookies, None) is None:
            new_secret = secrets.token_hex(32)
            cookies[COOKIE] = new_secret
        owner = owner_from(cookies, user)
        scope[OWNER_SCOPE] = owner
        if owner is not None and self.seen is not None:
            self.seen(owner)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and new_secret is not None:
                headers = MutableHeaders(scope=message)
                headers.append("set-cookie", f"{COOKIE}={new_secret}; Path=/; HttpOnly; SameSite=Lax")
            await send(message)

        refusal, receive = await self._check(scope, receive, owner)
        if refusal is not None:
            await _answer(sending, *refusal)
            return
        await self.app(scope, receive, sending)

    async def _check(
        self, scope: Scope, receive: Receive, owner: Owner | None
    ) -> tuple[tuple[int, str] | None, Receive]:
        """(status and one line, when the request is refused; the receive the app reads the body from)."""
        if self._routes is None:
            self._routes = served_routes(scope.get("app"))
        found = match(self._routes, scope["method"], scope["path"])
        if found is None:
            return (404, "Not Found"), receive
        served, params = found
        check = served.door.check
        if check == "refused":
            return (404, "Not Found"), receive
        if check == "file":
            wanted = requested_file(params.get("path_or_url") or params.get("path") or "")
            if wanted is None or not self.guard.allows(owner, wanted):
                return (404, "Not Found"), receive
            return None, receive
        if check not in ("event", "session"):
            return None, receive
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        hashes = [params["session_hash"]] if "session_hash" in params else query.get("session_hash", [])
        data: Any = None
        if scope["method"] == "POST":
            body = await _read_body(receive, MAX_EVENT_BODY)
            if body is None:
                return (413, f"the request is over {MAX_EVENT_BODY} bytes"), receive
            receive = _replay(body, receive)
            try:
                data = json.loads(body) if body.strip() else {}
            except ValueError:
                return (400, "the request is not JSON"), receive
            if isinstance(data, dict) and isinstance(data.get("session_hash"), str):
                hashes.append(data["session_hash"])
        if not all(self.guard.bind(owner, h) for h in hashes):
            return (404, "Not Found"), receive
        if check == "event" and not all(self.guard.allows(owner, path) for path in files_in(data)):
            return (403, NOT_YOURS), receive
        return None, receive


def files_in(data: Any) -> Iterator[str]:
    """The path of every Gradio `FileData` (a dict whose meta is `gradio.FileData`) anywhere in a request's JSON."""
    if isinstance(data, dict):
        meta = data.get("meta")
        if isinstance(meta, dict) and meta.get("_type") == "gradio.FileData":
            path = data.get("path")
            yield path if isinstance(path, str) else ""
        for value in data.values():
            yield from files_in(value)
    elif isinstance(data, list):
        for item in data:
            yield from files_in(item)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it passes `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the app `body` (already read) once, then what the client sends (its disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
