"""Download model files with sha256 verification and resume (ARCHITECTURE.md §4).

A file is streamed to `<folder>/<filename>.part`, hashed while it streams, checked against the expected size
and sha256, and only then renamed to its final name, so a file under its final name is always complete.
An interrupted download keeps its `.part` and resumes with an HTTP `Range` request (or a seek, for
`file://` URLs) on the next call. Sizes are in bytes; sha256 digests are lower-case hex strings.

A file whose sha256 no public record gives (`sha256` None) is never fetched unasked: only `fetch(...,
trust_first=True)` (the CLI's `models fetch ID --trust-first`) downloads it, and its caller records the hash.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import logging
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import urllib.response
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

from engine.core.errors import ChecksumMismatch, ModelUnavailable

logger = logging.getLogger(__name__)

Progress = Callable[[int, int | None], None]
"""Called with (bytes done, total bytes or None when unknown) as a download advances."""

# Read size per network/file read: small enough for smooth progress, large enough to be cheap.
_READ_CHUNK = 1 << 16

# Everything that means "the transfer broke, try again later" rather than "the bytes are wrong".
# URLError covers HTTP errors (404, 500…) and refused connections; ConnectionError covers resets and the
# short bodies detected below; HTTPException covers IncompleteRead and malformed responses.
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)


class Downloadable(Protocol):
    """A file the app can download: `size` in bytes (None when unknown), `sha256` lower-case hex.

    Read-only members, so frozen dataclasses and pydantic models with these fields satisfy it.
    """

    @property
    def filename(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def sha256(self) -> str | None: ...
    @property
    def size(self) -> int | None: ...


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Return the lower-case hex sha256 of the file at `path`, reading `chunk` bytes at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify(item: Downloadable, folder: Path) -> Literal["ok", "missing", "mismatch"]:
    """Say whether `folder/item.filename` exists and has the expected size and sha256. Never touches the network."""
    try:
        return "ok" if _present(item, folder / item.filename) else "missing"
    except ChecksumMismatch:
        return "mismatch"


def fetch(
    item: Downloadable,
    folder: Path,
    *,
    progress: Progress | None = None,
    timeout: float = 30.0,
    user_agent: str = "facestudio",
    trust_first: bool = False,
) -> Path:
    """Return the path of `item` in `folder`, downloading it first unless a verified copy is already there.

    `timeout` is in seconds per blocking network operation. `progress` gets (bytes done, total bytes or
    None). Creates `folder` if needed. An item without a sha256 is taken as it comes only with `trust_first`
    (a file already at its final path is then kept as it is): the caller hashes and records it.

    Raises:
        ChecksumMismatch: the downloaded bytes (or a file already at the final path) have the wrong sha256.
        ModelUnavailable: the transfer failed; the `.part` file is kept so the next call resumes it.
    """
    if item.sha256 is None and not trust_first:
        raise ModelUnavailable(_missing_message([item], folder, "no published sha256", _TRUST_FIRST))
    final = folder / item.filename
    if _present(item, final) or (item.sha256 is None and final.is_file()):
        return final
    check_writable(folder, [item])
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / f"{item.filename}.part"
    try:
        _download(item, part, progress=progress, timeout=timeout, user_agent=user_agent)
    except _NETWORK_ERRORS as exc:
        raise ModelUnavailable(
            f"could not download {item.filename} from {item.url} into {folder} ({_reason(exc)}); "
            f"the partial download is kept and resumes when you run this again"
        ) from exc
    except OSError as exc:
        # Not a network error (those are matched above): the disk refused the write.
        raise ModelUnavailable(
            f"could not write {part} ({exc.strerror or exc}); free some space or choose another models folder"
        ) from exc
    os.replace(part, final)
    logger.info("downloaded %s to %s", item.filename, final)
    return final


def ensure(
    items: Sequence[Downloadable],
    folder: Path,
    *,
    offline: bool,
    progress_factory: Callable[[Downloadable], Progress | None] | None = None,
) -> list[Path]:
    """Return the paths of all `items` in `folder`, downloading the missing ones unless `offline`.

    Files already present and verified need no network. `progress_factory` makes one progress callback per
    downloaded item.

    Raises:
        ChecksumMismatch: a file in `folder` (or a download) has the wrong sha256.
        ModelUnavailable: one error naming every file still missing, its URL and the folder to put it in.
    """
    paths = [folder / item.filename for item in items]
    # Check every placed file first, so a wrong file is reported even in offline mode.
    missing = [item for item, path in zip(items, paths, strict=True) if not _present(item, path)]
    unpinned = [item for item in missing if item.sha256 is None]
    pinned = [item for item in missing if item.sha256 is not None]
    if unpinned:
        # Nothing is fetched until the user trusts the unpinned files; the rest are named too, in the same line.
        message = _missing_message(unpinned, folder, "no published sha256", _TRUST_FIRST)
        if pinned:
            why, alternative = ("offline", "or run without --offline") if offline else ("not fetched yet", "")
            message += f"; {_missing_message(pinned, folder, why, alternative)}".rstrip()
        raise ModelUnavailable(message)
    if missing and offline:
        raise ModelUnavailable(_missing_message(missing, folder, "offline", "or run without --offline"))
    if missing:
        check_writable(folder, missing)
    failed: list[Downloadable] = []
    first_error: ModelUnavailable | None = None
    for item in missing:
        try:
            fetch(item, folder, progress=progress_factory(item) if progress_factory else None)
        except ChecksumMismatch:
            raise
        except ModelUnavailable as exc:
            # Keep going: the other files may still download, and the final error lists all that did not.
            logger.warning("%s", exc)
            failed.append(item)
            first_error = first_error or exc
    if failed:
        raise ModelUnavailable(
            _missing_message(
                failed, folder, "download failed", "or check the network and run again (partial downloads resume)"
            )
        ) from first_error
    return paths


def check_writable(folder: Path, items: Sequence[Downloadable]) -> None:
    """ModelUnavailable naming `folder` when downloads cannot be written there (a read-only folder or disk, or
    one this user may not write): the network is not the problem, so the message does not say it is."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    try:
        if existing is None or not existing.is_dir():
            raise NotADirectoryError(str(existing))
        # Permission bits do not tell (root, read-only mounts): try what the download will do.
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            why = "read-only"
        else:
            why = f"not a writable folder ({exc.strerror or exc})"
        listing = ", ".join(item.filename for item in items)
        raise ModelUnavailable(
            f"cannot download {listing} into {folder}: {existing} is {why}; set FACESTUDIO_MODELS to a writable "
            "folder, or copy the files there"
        ) from None


def _present(item: Downloadable, path: Path) -> bool:
    """True when `path` holds the expected file, False when nothing is there.

    Raises ChecksumMismatch when something else is there: a file the user placed is never replaced silently.
    A file with no sha256 to check is never taken as present (`fetch(..., trust_first=True)` decides).
    """
    if not path.exists() or item.sha256 is None:
        return False
    actual_size = path.stat().st_size
    if item.size is not None and actual_size != item.size:
        found = f"is {actual_size} bytes, expected {item.size}"
    else:
        actual = sha256_file(path)
        if actual == item.sha256:
            return True
        found = f"has sha256 {_short(actual)}, expected {_short(item.sha256)}"
    raise ChecksumMismatch(
        f"{path} {found}{_note(item)}; delete it to download it again from {item.url}, or replace it with the "
        "right file"
    )


def _download(item: Downloadable, part: Path, *, progress: Progress | None, timeout: float, user_agent: str) -> None:
    """Bring `part` to the complete file with the expected size and sha256.

    Raises one of _NETWORK_ERRORS with `part` kept for a resume, or ChecksumMismatch with `part` deleted.
    """
    offset = part.stat().st_size if part.exists() else 0
    if item.size is not None and offset > item.size:
        # Longer than the file can be, so it is not a prefix of it.
        logger.info("discarding %s: larger than the expected %d bytes", part, item.size)
        offset = 0
    digest = hashlib.sha256()
    if offset:
        # Resuming: the digest must cover the bytes already on disk before the new ones.
        with part.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)

    is_file_url = urllib.parse.urlsplit(item.url).scheme == "file"
    try:
        response = _open(item.url, 0 if is_file_url else offset, timeout=timeout, user_agent=user_agent)
    except urllib.error.HTTPError as exc:
        if exc.code != 416 or not offset:
            raise
        exc.close()
        # 416: nothing lies past `offset`, so the .part is either the whole file or not a prefix of it.
        if _finish(item, part, offset, digest.hexdigest(), progress, raise_on_mismatch=False):
            return
        logger.info("discarding %s: the server has nothing past byte %d and it does not verify", part, offset)
        offset, digest = 0, hashlib.sha256()
        response = _open(item.url, 0, timeout=timeout, user_agent=user_agent)

    with response:
        length = response.headers.get("Content-Length")
        remaining = int(length) if length is not None else None
        if offset and is_file_url:
            # urllib's file handler ignores Range; seeking the local file gives the same result.
            response.seek(offset)
            remaining = None if remaining is None else remaining - offset
        elif offset and response.status != 206:
            # The server ignored Range and is sending the whole file: start the .part over.
            logger.info("%s ignored the range request; restarting %s from zero", item.url, item.filename)
            offset, digest = 0, hashlib.sha256()
        total = item.size if item.size is not None else (None if remaining is None else offset + remaining)

        done = offset
        if progress:
            progress(done, total)
        with part.open("ab" if offset else "wb") as out:
            while block := response.read(_READ_CHUNK):
                digest.update(block)
                out.write(block)
                done += len(block)
                if progress:
                    progress(done, total)
        received = done - offset
        # http.client returns a short body without raising when the peer closes early.
        if remaining is not None and received < remaining:
            raise ConnectionError(f"connection closed after {received} of {remaining} bytes")
        if item.size is not None and done < item.size:
            raise ConnectionError(f"transfer ended after {done} of {item.size} bytes")
    _finish(item, part, done, digest.hexdigest(), progress, raise_on_mismatch=True)


def _finish(
    item: Downloadable,
    part: Path,
    size: int,
    actual: str,
    progress: Progress | None,
    *,
    raise_on_mismatch: bool,
) -> bool:
    """Check the complete `part` (`size` bytes, sha256 `actual`) against `item`.

    Returns True when it verifies. Otherwise deletes `part` and either returns False (the caller restarts)
    or, with `raise_on_mismatch`, raises ChecksumMismatch.
    """
    size_ok = item.size is None or size == item.size
    if size_ok and (actual == item.sha256 or item.sha256 is None):
        if progress:
            progress(size, size)
        return True
    part.unlink(missing_ok=True)
    if not raise_on_mismatch:
        return False
    found = f"{size} bytes, expected {item.size}" if not size_ok else f"sha256 {_short(actual)}"
    raise ChecksumMismatch(
        f"checksum mismatch for {item.filename} from {item.url}: expected sha256 {_short(item.sha256 or '')}, "
        f"got {found}{_note(item)}; the partial download was deleted, run again to retry or fix the URL/sha256 in "
        "the manifest"
    )


def _open(
    url: str, offset: int, *, timeout: float, user_agent: str
) -> http.client.HTTPResponse | urllib.response.addinfourl:
    """Open `url`, asking for the bytes from `offset` on when it is non-zero. `timeout` in seconds."""
    headers = {"User-Agent": user_agent}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)


_TRUST_FIRST = (
    "with `python launch.py models fetch ID --trust-first` (ID: the model the file belongs to), which "
    "takes the file as it comes (or the copy placed there) and records its sha256, pinning it from then on"
)


def _note(item: Downloadable) -> str:
    """The pin's caveat for a mismatch message (a single record, or a hash recorded here), or nothing; manifest
    files have `pin_note`, other Downloadables need not."""
    note = item.pin_note() if hasattr(item, "pin_note") else ""
    return f" ({note})" if note else ""


def _missing_message(items: Sequence[Downloadable], folder: Path, why: str, alternative: str) -> str:
    listing = " ; ".join(f"{item.filename} from {item.url}" for item in items)
    return f"missing model files ({why}): {listing} — download them into {folder} {alternative}"


def _reason(exc: BaseException) -> str:
    """A short human reason for a network error: urllib wraps the interesting one in `.reason`."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _short(sha256: str) -> str:
    return f"{sha256[:12]}…"
