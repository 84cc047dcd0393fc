"""Who is asking, and which files they may have.

**Owners.** The logged-in user (`user:NAME`) when the app has a login; otherwise the browser: a random secret in
the `facestudio-owner` cookie (HttpOnly, SameSite=Lax), set on the first answer to a client that has none.
Gradio's own client keeps the cookies of its first request, so scripts get one too. Folders, history and logs use
a hash of the secret (`Owner.id`), never the secret.

**Files.** Gradio serves files from its upload/cache folder to whoever asks for their URL (`/gradio_api/file=…`),
so a URL would be a bearer link. `PrivateFiles` (ASGI middleware in front of Gradio) answers 404 for any file in
the guarded folders that was not registered for the asking owner — another browser, a client without cookies,
another login all get 404. Uploads are registered to their uploader from the upload route's answer; results when
a handler `share`s them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from gradio import processing_utils
from gradio import utils as gradio_utils
from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

COOKIE = "facestudio-owner"
_FILE_ROUTES = ("/gradio_api/file=", "/gradio_api/file/")
_UPLOAD_ROUTE = "/gradio_api/upload"


@dataclass(frozen=True)
class Owner:
    """Whose request this is. `id`: letters and digits only (a folder name): `u…` for a login, `b…` for a
    browser, from a hash so the cookie's secret never reaches the disk. `label`: for people (the login name, or
    "this browser")."""

    id: str
    label: str


def owner_from(cookies: Mapping[str, str], username: str | None) -> Owner | None:
    """The owner of a request with these cookies and (when the app has a login) this logged-in user."""
    if username:
        return Owner("u" + hashlib.sha256(username.encode()).hexdigest()[:24], username)
    secret = cookies.get(COOKIE, "")
    if len(secret) < 32 or not secret.isalnum():
        return None
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
    """Which owners may fetch which files (absolute, resolved paths); thread-safe."""

    def __init__(self, folders: Iterable[Path]) -> None:
        # Files inside these folders are private; Gradio's upload/cache folder is always one of them.
        self.folders = tuple(dict.fromkeys(Path(os.path.realpath(f)) for f in (*folders, _gradio_folder())))
        self._owners: dict[Path, set[str]] = {}
        self._lock = threading.Lock()

    def guarded(self, path: Path) -> bool:
        return any(path == f or path.is_relative_to(f) for f in self.folders)

    def allow(self, owner: Owner, path: Path | str) -> Path:
        """Let `owner` fetch `path` (as it is now on disk); returns the resolved path."""
        resolved = Path(os.path.realpath(path))
        with self._lock:
            self._owners.setdefault(resolved, set()).add(owner.id)
        return resolved

    def allows(self, owner: Owner | None, path: Path) -> bool:
        with self._lock:
            return owner is not None and owner.id in self._owners.get(path, ())

    def share(self, owner: Owner, path: Path | str) -> str:
        """Put a result where Gradio serves files from (its cache folder, under a content-hash folder) and let
        `owner` alone fetch it; returns the cached path, which a handler returns to its component as is."""
        cached = processing_utils.save_file_to_cache(str(path), cache_dir=str(_gradio_folder()))
        return str(self.allow(owner, cached))

    def release(self, owner: Owner, paths: Iterable[Path | str]) -> None:
        """`owner` no longer needs these files; each one nobody else holds is deleted (with its folder when that
        is Gradio's per-file folder and now empty)."""
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
            path.unlink(missing_ok=True)
            if path.parent != _gradio_folder() and path.parent.is_relative_to(_gradio_folder()):
                _remove_if_empty(path.parent)

    def held_by(self, owner: Owner) -> list[Path]:
        with self._lock:
            return [p for p, holders in self._owners.items() if owner.id in holders]


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (another file of the same upload) or already gone
        folder.rmdir()


def _gradio_folder() -> Path:
    return Path(os.path.realpath(gradio_utils.get_upload_folder()))


def requested_file(path: str) -> Path | None:
    """The file a Gradio file route asks for (resolved), or None when `path` is not a file route."""
    for prefix in _FILE_ROUTES:
        if path.startswith(prefix):
            wanted = unquote(path[len(prefix) :])
            return Path(os.path.realpath(wanted)) if wanted.startswith("/") or ":" in wanted[:3] else None
    return None


class PrivateFiles:
    """ASGI middleware: sets the owner cookie, guards Gradio's file routes, registers uploads to their uploader,
    and tells `seen(owner)` of every request (so idle sessions can expire)."""

    def __init__(self, app: ASGIApp, guard: FileGuard, seen: Any = None) -> None:
        self.app = app
        self.guard = guard
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        cookies = dict(connection.cookies)
        new_secret = None
        user = _gradio_user(scope, cookies)
        if user is None and owner_from(cookies, None) is None:
            new_secret = secrets.token_hex(32)
            cookies[COOKIE] = new_secret
        owner = owner_from(cookies, user)
        if owner is not None and self.seen is not None:
            self.seen(owner)
        wanted = requested_file(scope["path"])
        if wanted is not None and self.guard.guarded(wanted) and not self.guard.allows(owner, wanted):
            await _not_found(send)
            return
        capture = scope["path"] == _UPLOAD_ROUTE and scope["method"] == "POST" and owner is not None
        body: list[bytes] = []
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if new_secret is not None:
                    headers = MutableHeaders(scope=message)
                    headers.append("set-cookie", f"{COOKIE}={new_secret}; Path=/; HttpOnly; SameSite=Lax")
            elif message["type"] == "http.response.body" and capture and status == 200:
                body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    self._register_upload(owner, b"".join(body))  # type: ignore[arg-type]
            await send(message)

        await self.app(scope, receive, sending)

    def _register_upload(self, owner: Owner, body: bytes) -> None:
        try:
            paths = json.loads(body)
        except ValueError:
            return
        for path in paths if isinstance(paths, list) else ():
            if isinstance(path, str):
                self.guard.allow(owner, path)


async def _not_found(send: Send) -> None:
    body = b'{"detail":"Not Found"}'
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
