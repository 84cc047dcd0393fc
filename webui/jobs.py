"""The jobs API's queue: jobs submitted over HTTP, run in order by a worker thread through the `execute` it is
given — the studio's own (webui/studio.py: the engine service, the fair run line shared with UI runs, one job at a
time on the GPU).

Job ids are random and each job has its own secret token, given once to the client that submitted it: status,
cancel and result need both, so a job's result reaches that client alone. A job's inputs and outputs live in its
own folder under a private work directory, named as the client named its files; a job may read those uploads and
nothing else (`JobRecord.owns`): a setting that takes a file (`lip_syncer.audio` …) takes one of them, never a
server path. Which settings a client may give is the engine service's rule for every web and API user (`check`,
given by the app: engine/serve/service.py's `admit`). Finished jobs are kept (status and files) until
`keep_finished` newer ones have finished; then the oldest is forgotten and its folder deleted.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import secrets
import shutil
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from engine.core.errors import Cancelled, FacestudioError, InvalidInput
from engine.core.metrics import PROCESS_METRICS
from engine.core.progress import Progress
from engine.job.settings import load_preset_raw
from engine.run.pipeline import RunReport
from webui.names import scrub

log = logging.getLogger(__name__)

Status = Literal["queued", "running", "done", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"done", "failed", "cancelled"})


class QueueFull(FacestudioError):
    """The jobs queue holds as many waiting jobs as it may (HTTP 503; try again later)."""


class UploadTooLarge(InvalidInput):
    """An uploaded file is over the server's size limit (HTTP 413)."""


class TooManyJobs(FacestudioError):
    """The client has as many jobs waiting or running as one client may (HTTP 429; try again when one ends)."""


@dataclass
class JobRecord:
    """One submitted job. `done`/`total`: frames of the current stage (an image is one frame). `token`: the
    secret only its submitter holds; `names`: server path → the file name the client gave."""

    id: str
    folder: Path
    raw: dict[str, Any]
    target: Path
    sources: list[Path]
    client: str = ""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    names: dict[str, str] = field(default_factory=dict)
    status: Status = "queued"
    done: int = 0
    total: int | None = None
    error: str | None = None
    output: Path | None = None
    sidecar: Path | None = None
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)

    def owns(self, path: Path) -> bool:
        """Whether `path` is one of the files the client uploaded with this job (resolved as it would be opened)."""
        inputs = self.folder / "inputs"
        resolved = Path(os.path.realpath(path))
        return resolved.is_relative_to(os.path.realpath(inputs)) and resolved.is_file()

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "progress": {"done": self.done, "total": self.total},
            "error": self.error,
        }


class _JobProgress:
    """`engine.core.progress.Progress` into the job's record; raises Cancelled between batches once cancel is asked."""

    def __init__(self, record: JobRecord) -> None:
        self.record = record

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        if unit == "frame":
            self.record.done, self.record.total = 0, total

    def advance(self, n: int = 1) -> None:
        if self.record.cancel.is_set():
            raise Cancelled("cancelled through the jobs API; nothing was written")
        self.record.done += n

    def close(self) -> None:
        pass


def parse_preset_text(text: str | None) -> dict[str, Any]:
    """A preset given as TOML or JSON text; empty text is the default preset."""
    if not text or not text.strip():
        return load_preset_raw("default")
    try:
        value = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"the settings are neither TOML nor JSON: {exc}".splitlines()[0]) from None
    if not isinstance(value, dict):
        raise InvalidInput("the settings must be a TOML table or a JSON object")
    return value


def copy_upload(source: IO[bytes], path: Path, limit: int, what: str) -> Path:
    """Copy an uploaded file to `path`, refusing (and removing) it past `limit` bytes; `what` names it in the
    message ("target", "source 2")."""
    written = 0
    with path.open("wb") as out:
        while chunk := source.read(1 << 20):
            written += len(chunk)
            if written > limit:
                out.close()
                path.unlink(missing_ok=True)
                raise UploadTooLarge(f"the {what} is over the server's upload limit of {limit} bytes a file")
            out.write(chunk)
    return path


Execute = Callable[[JobRecord, Progress], RunReport]
# What `save_inputs` gives back: the target, the sources, server path → client name, and the file settings'
# uploads (setting as "group.field" → its file).
Saved = tuple[Path, list[Path], dict[str, str], dict[str, Path]]


class JobQueue:
    """Jobs waiting (at most `max_queued`, at most `per_client` of one client waiting or running) and the worker
    thread that runs them in order. `check(raw)`: refuses (InvalidInput) settings a client may not give."""

    def __init__(
        self,
        execute: Execute,
        check: Callable[[dict[str, Any]], Any],
        folder: Path,
        max_queued: int,
        keep_finished: int = 64,
        per_client: int = 2,
    ) -> None:
        self.execute = execute
        self.check = check
        self.folder = folder
        self.keep_finished = keep_finished
        self.per_client = per_client
        self._queue: queue.Queue[JobRecord | None] = queue.Queue(maxsize=max_queued)
        self._jobs: dict[str, JobRecord] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._work, name="facestudio-jobs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Cancel the running job, stop the worker and wait for it, then remove every job's files (jobs live in
        memory: a restarted server knows none of them, so their uploads and results would only fill the disk)."""
        if self._thread is None:
            return
        with self._lock:
            for record in self._jobs.values():
                record.cancel.set()
        self._put_stop()
        self._thread.join(timeout=30)
        self._thread = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def _put_stop(self) -> None:
        # The stop marker must get in even when the queue is full: drop waiting jobs until it does.
        while True:
            try:
                self._queue.put_nowait(None)
                return
            except queue.Full:
                self._queue.get_nowait()

    # -- the API ----------------------------------------------------------------------------------------------
    def submit(self, raw: dict[str, Any], save_inputs: Callable[[Path], Saved], client: str = "") -> JobRecord:
        """Check the preset (`check`: the settings a client may give; a file setting must come as an upload),
        store the inputs (`save_inputs(folder)`, see `Saved`: the file settings' uploads go into the preset) and
        queue the job for `client` (who sent it: the login or the address).

        Raises InvalidInput for a preset a client may not give, QueueFull when `max_queued` jobs wait already,
        TooManyJobs when `client` has `per_client` jobs waiting or running."""
        self.check(raw)
        if self._queue.full():
            raise QueueFull(f"{self._queue.maxsize} jobs are waiting already; try again later")
        with self._lock:
            mine = sum(1 for r in self._jobs.values() if r.client == client and r.status not in FINISHED)
        if mine >= self.per_client:
            raise TooManyJobs(
                f"you have {mine} job(s) waiting or running, the most this server takes from one client "
                f"(ui --jobs-per-user {self.per_client}); try again when one has finished"
            )
        job_id = secrets.token_urlsafe(16)
        folder = self.folder / job_id
        folder.mkdir(parents=True)
        try:
            target, sources, names, files = save_inputs(folder)
            for setting, path in files.items():
                group, _, name = setting.partition(".")
                raw = {**raw, group: {**(raw.get(group) or {}), name: str(path)}}
            record = JobRecord(job_id, folder, raw, target, sources, client, names=names)
            with self._lock:
                self._jobs[job_id] = record
            try:
                self._queue.put_nowait(record)
            except queue.Full:  # another submit took the last place since the check above
                raise QueueFull(f"{self._queue.maxsize} jobs are waiting already; try again later") from None
        except BaseException:
            with self._lock:
                self._jobs.pop(job_id, None)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        PROCESS_METRICS.queue_depth.set(self._queue.qsize())
        return record

    def get(self, job_id: str, token: str | None) -> JobRecord | None:
        """The job `job_id` when `token` is its own (else None, as for an unknown id: nothing tells them apart)."""
        with self._lock:
            record = self._jobs.get(job_id)
        if record is None or not token or not secrets.compare_digest(record.token.encode(), token.encode()):
            return None
        return record

    def cancel(self, job_id: str, token: str | None) -> JobRecord | None:
        """Cancel a queued job at once, a running one at its next batch; a finished job is left as it is."""
        record = self.get(job_id, token)
        with self._lock:
            if record is not None and record.status not in FINISHED:
                record.cancel.set()
                if record.status == "queued":
                    record.status, record.error = "cancelled", "cancelled before it started"
        return record

    # -- the worker -------------------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            record = self._queue.get()
            PROCESS_METRICS.queue_depth.set(self._queue.qsize())
            if record is None:
                return
            with self._lock:
                # Under the lock: a cancel either saw "queued" (and marked the job cancelled) or sees "running".
                if record.cancel.is_set():
                    record.status, record.error = "cancelled", record.error or "cancelled before it started"
                else:
                    record.status = "running"
            if record.status == "running":
                self._run(record)
            else:
                PROCESS_METRICS.jobs.labels("cancelled").inc()
            self._finished(record)

    def _run(self, record: JobRecord) -> None:
        try:
            report = self.execute(record, _JobProgress(record))
        except Cancelled as exc:
            record.status, record.error = "cancelled", scrub(str(exc), record.names)
        except FacestudioError as exc:
            record.status, record.error = "failed", scrub(str(exc), record.names)
        except Exception as exc:  # a bug: the job fails with one line, the log keeps the traceback
            log.exception("internal error in job %s", record.id)
            record.status, record.error = "failed", scrub(f"internal error: {type(exc).__name__}: {exc}", record.names)
        else:
            record.output, record.sidecar = report.output, report.sidecar
            record.done = record.total = report.frames
            record.status = "done"

    def _finished(self, record: JobRecord) -> None:
        with self._lock:
            finished = [r for r in self._jobs.values() if r.status in FINISHED]
            forget = finished[: max(len(finished) - self.keep_finished, 0)]
            for old in forget:
                del self._jobs[old.id]
        for old in forget:
            shutil.rmtree(old.folder, ignore_errors=True)
