"""The studio's state behind the page: one session per owner (a browser, with its login when the app has one),
each with its own folder, names, history and cancel flag; jobs run through the engine service one at a time in a
fair line (UI runs and jobs-API jobs alike); previews and face pictures made as files only their owner may fetch.

Nothing a user sees names a server path: outputs are named after the user's own file names, sidecars and
messages have server paths replaced by the names the user knows (webui/names.py).

Every session's work goes through the engine service with the session's `Access` (engine/serve/service.py): its
files are those the guard (webui/privacy.py) records as its own, the server's settings are the operator's
(`Policy.server`), and the policy's limits — frames a job, runs at once, disk a session keeps — are checked
here, each refusal one line naming the limit and its launch flag (docs/SECURITY.md).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import cv2
from gradio import processing_utils

from engine import media as video
from engine.core.errors import Cancelled, FacestudioError, InvalidInput
from engine.core.metrics import observe_job
from engine.core.progress import Progress
from engine.core.types import Frame
from engine.faces.crops import draw_numbers, thumbnail
from engine.faces.people import Scan
from engine.faces.select import order_faces, source_face_index
from engine.job.processor import FrameProcessor
from engine.job.settings import FacesSettings, Job, RuntimeSettings
from engine.run.pipeline import RunReport
from engine.serve.model_lock import Turn
from engine.serve.service import Access, Rendered, Service, file_settings
from webui.history import Entry, History
from webui.names import output_name, plain_name, scrub, scrub_file
from webui.privacy import FileGuard, Owner
from webui.schedule import RunQueue, Ticket

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff"})
THUMBNAIL = 192  # px, face pictures in the galleries and history
_PREVIEWS_KEPT = 6  # preview files per session (the newest pairs; older ones are deleted)


@dataclass
class Session:
    """One owner's state. `names`: server path → the name the user knows it by (uploads, results)."""

    owner: Owner
    folder: Path
    history: History
    names: dict[str, str] = field(default_factory=dict)
    cancel: threading.Event = field(default_factory=threading.Event)
    last_seen: float = field(default_factory=time.monotonic)
    # The numbered frames and face pictures of recent previews (key: target, index, faces), and recent results.
    frames: dict[tuple[Any, ...], tuple[list[Path], list[str]]] = field(default_factory=dict)
    afters: list[tuple[Path, str]] = field(default_factory=list)
    running: int = 0
    inputs: dict[str, list[str]] = field(default_factory=dict)
    # The people found on the target and the source images given to each (webui/people.py).
    people: Any = None


@dataclass(frozen=True)
class Policy:
    """What users of this server may have (set at launch, docs/SECURITY.md). `server`: the operator's values of
    the server's settings (group → field → value), applied to every user job; `max_frames`: frames a job may
    render (None: any); `jobs_per_user`: runs one session (or jobs-API client) may have waiting or running at
    once; `disk_per_user`: bytes one session may keep (its uploads, results and previews) before its new runs are
    refused (None: no limit)."""

    server: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_frames: int | None = None
    jobs_per_user: int = 2
    disk_per_user: int | None = None


@dataclass(frozen=True)
class Preview:
    """A preview ready for the page: `before` (faces numbered) and `after` as files the owner may fetch, the
    faces found (thumbnails, in the numbering's order), the time the chain took (ms, in `rendered`) and how it got
    the model (`turn`: how long it waited, and whether for a running job)."""

    before: str
    after: str
    faces: list[str]
    rendered: Rendered
    turn: Turn = Turn(0.0, False)


# The engine's size refusals tell the operator which setting to raise; a user of the server cannot raise it.
_RAISE_HINT = ", or raise runtime.max_pixels"
_USER_HINT = " (this server's limit: its operator sets it, `ui --max-pixels`)"


def user_message(exc: BaseException, names: Mapping[str, str]) -> str:
    """The one line a user sees for a failure: foreseeable ones as they are, bugs as such; no server path, and no
    advice to change what only the operator may."""
    text = str(exc) if isinstance(exc, FacestudioError) else f"internal error: {type(exc).__name__}: {exc}"
    line = text.splitlines()[0] if text else type(exc).__name__
    return scrub(line.replace(_RAISE_HINT, _USER_HINT), names)


class Studio:
    """Sessions, the run line and the engine service (thread-safe: Gradio calls handlers from worker threads)."""

    def __init__(
        self,
        registry: Mapping[str, type[FrameProcessor]] | None = None,
        work_dir: Path | None = None,
        service: Service | None = None,
        policy: Policy | None = None,
    ) -> None:
        if service is None:
            if registry is None:
                from processors import REGISTRY

                registry = REGISTRY
            service = Service(registry)
        self.service = service
        self.registry = service.registry
        # Not in Gradio's folder: nothing in it is reachable by URL until a handler shares it with its owner.
        self.work = work_dir or Path(tempfile.mkdtemp(prefix="facestudio-ui-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.guard = FileGuard([self.work])
        self.policy = policy or Policy()
        self.line = RunQueue()
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    # -- sessions -----------------------------------------------------------------------------------------------
    def session(self, owner: Owner | None) -> Session:
        """The owner's session (made on first use). None — a client that sent no owner cookie — is refused."""
        if owner is None:
            raise InvalidInput("this browser sent no session cookie: allow cookies for this site and reload")
        with self._lock:
            session = self._sessions.get(owner.id)
            if session is None:
                folder = self.work / owner.id
                session = Session(owner, folder, History(folder))
                self._sessions[owner.id] = session
            session.last_seen = time.monotonic()
            return session

    def access(self, session: Session) -> Access:
        """What the session may have of the engine: its own files (the guard's record), the server's settings."""
        return Access(partial(self.guard.allows, session.owner), self.policy.server, self.policy.max_frames)

    def check_disk(self, session: Session) -> None:
        """Refuse (InvalidInput, naming the limit) when the session keeps `Policy.disk_per_user` bytes or more."""
        limit = self.policy.disk_per_user
        if limit is None:
            return
        used = self.disk_used(session.owner)
        if used >= limit:
            raise InvalidInput(
                f"this session keeps {used / 1e9:.2f} GB here, its limit on this server is {limit / 1e9:.2f} GB "
                "(ui --disk-per-user-gb): delete results in the History tab or remove uploads first"
            )

    def disk_used(self, owner: Owner) -> int:
        """Bytes an owner keeps here: the files registered to it and its session folder (results, previews)."""
        with self._lock:
            session = self._sessions.get(owner.id)
        files = set(self.guard.held_by(owner))
        if session is not None and session.folder.is_dir():
            files |= {p for p in session.folder.rglob("*") if p.is_file()}
        return sum(p.stat().st_size for p in files if p.is_file())

    def seen(self, owner: Owner) -> None:
        with self._lock:
            session = self._sessions.get(owner.id)
            if session is not None:
                session.last_seen = time.monotonic()

    def expire(self, idle_seconds: float) -> list[str]:
        """Remove the sessions idle (no request, no running job) for more than `idle_seconds`, with their files,
        uploads and history. Returns the owner ids removed."""
        now = time.monotonic()
        with self._lock:
            idle = [s for s in self._sessions.values() if not s.running and now - s.last_seen > idle_seconds]
            for session in idle:
                del self._sessions[session.owner.id]
        for session in idle:
            self.forget(session)
        return [s.owner.id for s in idle]

    def forget(self, session: Session) -> None:
        """Delete everything of a session: its folder (results, history), the uploads only it held, and its
        Gradio sessions' binding."""
        self.guard.release(session.owner, self.guard.held_by(session.owner))
        self.guard.forget(session.owner)
        shutil.rmtree(session.folder, ignore_errors=True)

    def close(self) -> None:
        """Remove every session's files and the work folder (the server is stopping)."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            self.forget(session)
        shutil.rmtree(self.work, ignore_errors=True)

    def name(self, session: Session, path: str | Path) -> str:
        """The name the user knows a server file by (an upload keeps its own name: Gradio stores it under it)."""
        return session.names.get(str(path)) or plain_name(Path(path).name)

    def note_upload(self, session: Session, role: str, paths: Sequence[str]) -> None:
        """The session now uses `paths` as its `role` ("target", "sources"): the uploads of that role it no longer
        uses are deleted, unless a running job may still read them (those go with the session)."""
        for path in paths:
            session.names.setdefault(str(path), plain_name(Path(path).name))
        previous = session.inputs.get(role, [])
        session.inputs[role] = list(paths)
        in_use = {p for files in session.inputs.values() for p in files}
        dropped = [p for p in previous if p not in in_use]
        if dropped and not session.running:
            self.guard.release(session.owner, dropped)

    def playable(self, session: Session, path: str | Path) -> str | None:
        """The video shared with the session when browsers can play its container and codec (H.264/AV1 MP4,
        VP8/VP9/AV1 WebM), else None: the page then shows frames, not a player (a transcode of a long video
        would cost minutes before anything is shown)."""
        return self.share(session, path) if processing_utils.video_is_playable(str(path)) else None

    def compare_after_run(self, session: Session, target: str, report: RunReport, index: int) -> tuple[str, str]:
        """Frame `index` of the target and of the finished output (clamped to its last frame), as the
        before/after pair the page shows."""
        before = self.service.frame(Path(target), index, max_pixels=1 << 62)
        after = self.service.frame(report.output, min(index, max(report.frames - 1, 0)), max_pixels=1 << 62)
        return self.picture(session, before), self.picture(session, after)

    def share(self, session: Session, path: Path | str) -> str:
        """`path` as a file only this session's owner may fetch (returned to a Gradio component as is)."""
        shared = self.guard.share(session.owner, path)
        session.names.setdefault(shared, Path(path).name)
        return shared

    # -- jobs ---------------------------------------------------------------------------------------------------
    def ticket(self, job: Job, cancel: threading.Event, max_frames: int | None = None) -> Ticket:
        """The job's place in the line, sized by its frames and input pixels (probed: a bad target fails here);
        refused (InvalidInput, naming the limit) over `max_frames`."""
        info = video.probe(job.target)
        frames = 1
        if info.kind == "video":
            frames = video.select(info, job.video.trim_start, job.video.trim_end, job.video.fps).frames
        if max_frames is not None and frames > max_frames:
            raise InvalidInput(
                f"{job.target.name} has {frames} frames to render, above this server's limit of {max_frames} a job "
                "(ui --max-frames): trim it (video.trim_start, video.trim_end) or lower video.fps"
            )
        return Ticket(job.processors, frames, frames * info.width * info.height / 1e6, cancel)

    def execute(
        self,
        raw: dict[str, Any],
        target: str | Path,
        sources: Sequence[str | Path],
        folder: Path,
        names: Mapping[str, str],
        progress: Progress | None,
        cancel: threading.Event,
        access: Access,
        *,
        taken: set[str] | None = None,
        queued: Any = None,
    ) -> RunReport:
        """Run one job into `folder` when its turn comes, as `access` may have it (its files, the server's
        settings, its frame limit): the output is named after the target's user name (`names`), and its sidecar
        has every server path replaced by those names. `queued(place)` is told of the job's place in line while
        it waits. Typed errors only; nothing half-written is left behind."""
        if not target:
            raise InvalidInput("add a target image or video first")
        target_path = Path(target)
        target_name = names.get(str(target)) or target_path.name
        suffix = target_path.suffix.lower() if target_path.suffix.lower() in IMAGE_SUFFIXES else ".mp4"
        output = folder / output_name(target_name, suffix, taken or set())
        job = self.service.job(raw, target_path, output, [Path(s) for s in sources], access)
        ticket = self.ticket(job, cancel, access.max_frames)
        watcher = _Waiting(self.line, ticket, queued) if queued else None
        try:
            with self.line.turn(ticket), self.service.model_lock, observe_job():
                if watcher is not None:
                    watcher.stop()
                report = self.service.run(job, _Measured(progress, self.line, ticket), overwrite=True)
        finally:
            if watcher is not None:
                watcher.stop()
        known = {**names, str(output): output.name, str(folder): "", str(folder.resolve()): ""}
        for given in (target_path, *map(Path, sources), *self._setting_files(job)):
            known.setdefault(str(given), given.name)
            known[str(given.resolve())] = known[str(given)]
        scrub_file(report.sidecar, known)
        return report

    def without_files(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The settings to keep with a history entry or a preset: the mapping without the file settings (files
        of this session, not part of a preset)."""
        out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
        for group, names in file_settings(self.registry).items():
            for name in names:
                if isinstance(out.get(group), dict):
                    out[group].pop(name, None)
        return out

    def _setting_files(self, job: Job) -> list[Path]:
        """The files a job's file settings name (the lip syncer's audio, the reference face …)."""
        found = []
        for group, names in file_settings(self.registry).items():
            options = job.options.get(group) if group in self.registry else getattr(job, group, None)
            found += [Path(v) for v in (getattr(options, n, None) for n in names) if v]
        return found

    def run_for(
        self,
        session: Session,
        raw: dict[str, Any],
        target: str,
        sources: Sequence[str],
        progress: Progress | None,
        queued: Any = None,
    ) -> tuple[RunReport, Entry]:
        """A UI run: `execute` into a new history folder of the session, then the history entry (thumbnail,
        summary, settings) recorded; entries past the history's bound go with their files. Refused (one line,
        naming the limit) when the session already has `Policy.jobs_per_user` runs or keeps its disk limit."""
        from webui.summary import summary

        with self._lock:
            if session.running >= self.policy.jobs_per_user:
                raise InvalidInput(
                    f"this session already has {session.running} run(s) waiting or running, the most this server "
                    f"takes from one session (ui --jobs-per-user {self.policy.jobs_per_user}): wait for one to end"
                )
            session.running += 1
        try:
            self.check_disk(session)
            folder = session.history.new_folder()
        except BaseException:
            with self._lock:
                session.running -= 1
            raise
        taken = {Path(e.output).name for e in session.history.entries()}
        session.cancel.clear()
        try:
            report = self.execute(
                raw, target, sources, folder, session.names, progress, session.cancel, self.access(session),
                taken=taken, queued=queued,
            )  # fmt: skip
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            with self._lock:
                session.running -= 1
        thumb = folder / "thumbnail.jpg"
        write_jpeg(thumb, _thumbnail_of(report))
        entry = Entry(
            id=folder.name,
            created=time.time(),
            folder=str(folder),
            output=str(report.output),
            sidecar=str(report.sidecar),
            thumbnail=str(thumb),
            target=self.name(session, target),
            sources=tuple(self.name(session, s) for s in sources),
            processors=tuple(report.processors),
            summary=summary(report),
            settings=self.without_files(raw),
        )
        for dropped in session.history.add(entry):
            self.guard.release(session.owner, [dropped.output, dropped.sidecar, dropped.thumbnail or ""])
        return report, entry

    def run_batch(
        self,
        session: Session,
        targets: Sequence[str],
        prepare: Callable[[str], tuple[dict[str, Any], Sequence[str]]],
        progress: Callable[[int, str], Progress | None],
        queued: Any = None,
    ) -> list[tuple[str, tuple[RunReport, Entry] | FacestudioError]]:
        """Several targets of one upload as jobs, one after another, each taking its turn in the fair line and
        becoming a history entry as it finishes (`run_for`): `prepare(target)` gives its settings and sources,
        `progress(n, target's name)` the progress of the n-th (1-based). A target that fails is recorded with its
        error and the rest carry on; cancelling stops the batch. Returns (target, (report, entry) or error) each."""
        done: list[tuple[str, tuple[RunReport, Entry] | FacestudioError]] = []
        for n, target in enumerate(targets, start=1):
            try:
                raw, sources = prepare(target)
                done.append(
                    (
                        target,
                        self.run_for(session, raw, target, sources, progress(n, self.name(session, target)), queued),
                    )
                )
            except Cancelled:
                raise
            except FacestudioError as exc:
                done.append((target, exc))
        return done

    # -- single frames and faces --------------------------------------------------------------------------------
    def preview(
        self, session: Session, raw: dict[str, Any], target: str, sources: Sequence[str], index: int
    ) -> Preview:
        """Frame `index` of the target through the chain (the path every batch of a run takes), as files the
        session may fetch: the frame with its faces numbered, the result, and a picture of each face."""
        with self.service.model_lock.brief() as turn:
            rendered = self.service.preview(raw, Path(target), [Path(s) for s in sources], index, self.access(session))
        before, faces = self._frame_pictures(session, target, index, rendered)
        return Preview(before, self.picture(session, rendered.after), faces, rendered, turn)

    def picture(self, session: Session, frame: Frame) -> str:
        """A frame as a new JPEG the session may fetch; only the newest few are kept."""
        path = write_jpeg(session.folder / "previews" / f"{time.monotonic_ns():x}.jpg", frame)
        shared = self.share(session, path)
        session.afters.append((path, shared))
        dropped, session.afters = session.afters[:-_PREVIEWS_KEPT], session.afters[-_PREVIEWS_KEPT:]
        for old, _ in dropped:
            old.unlink(missing_ok=True)
        self._release_unused(session, [old_shared for _, old_shared in dropped])
        return shared

    def _release_unused(self, session: Session, shared: list[str]) -> None:
        """Release cached copies no kept preview shows any more (equal pictures share one cached copy)."""
        in_use = {sh for _, sh in session.afters} | {sh for _, copies in session.frames.values() for sh in copies}
        self.guard.release(session.owner, [sh for sh in shared if sh not in in_use])

    def frame_only(
        self, session: Session, target: str, index: int, settings: FacesSettings, max_pixels: int
    ) -> Preview:
        """Frame `index` of the target with its faces numbered, unprocessed (before a source is given). A user's
        `max_pixels` is the server's own when its operator set one."""
        access = self.access(session)
        max_pixels = access.server.get("runtime", {}).get("max_pixels", max_pixels)
        with self.service.model_lock.brief() as turn:
            frame = self.service.frame(Path(target), index, max_pixels, access)
            faces = tuple(self.service.find_faces(frame, settings))
        rendered = Rendered(frame, frame, faces, ())
        before, pictures = self._frame_pictures(session, target, index, rendered)
        return Preview(before, before, pictures, rendered, turn)

    def _frame_pictures(self, session: Session, target: str, index: int, rendered: Rendered) -> tuple[str, list[str]]:
        """The frame with its faces numbered and a picture of each face, made once per frame and faces (an
        option change re-renders only the result, and the browser keeps the frame it already has)."""
        key = (
            str(target),
            index,
            tuple((f.box, f.person) for f in rendered.detected),
            tuple(f.box for f in rendered.chosen),
        )
        kept = session.frames.pop(key, None)
        if kept is None:
            stamp = f"{time.monotonic_ns():x}"
            folder = session.folder / "previews"
            numbered = draw_numbers(rendered.before, rendered.detected, rendered.chosen)
            files = [write_jpeg(folder / f"{stamp}-before.jpg", numbered)] + [
                write_jpeg(folder / f"{stamp}-face-{i + 1}.jpg", thumbnail(rendered.before, f.box, THUMBNAIL))
                for i, f in enumerate(rendered.detected)
            ]
            kept = (files, [self.share(session, f) for f in files])
        session.frames[key] = kept
        while len(session.frames) > _PREVIEWS_KEPT:
            files, shared_copies = session.frames.pop(next(iter(session.frames)))
            for path in files:
                path.unlink(missing_ok=True)
            self._release_unused(session, shared_copies)
        shared = kept[1]
        return shared[0], shared[1:]

    def source_faces(
        self, session: Session, paths: Sequence[str], settings: FacesSettings
    ) -> tuple[list[tuple[str, str]], list[int | None], list[str]]:
        """The faces of the source photos, for the source gallery: a picture of each face, captioned with the
        photo's name, and for a photo with several faces each one of them, left to right, numbered, the one a job
        takes (`faces.source_face`: the largest by default) marked "✓". With them, what a click on each picture
        sets `faces.source_face` to (its number from the left; None for a photo with one face), and a line for
        each photo that cannot be used (no face, or fewer faces than `faces.source_face` picks)."""
        pictures: list[tuple[str, str]] = []
        picks: list[int | None] = []
        problems: list[str] = []
        for path in paths:
            name = self.name(session, path)
            try:
                self.service.check_files([path], self.access(session))
                image = video.read_image(Path(path))[0]
            except FacestudioError as exc:
                problems.append(user_message(exc, session.names))
                continue
            with self.service.model_lock.brief():
                faces = order_faces(self.service.find_faces(image, settings), "left-right")
            if not faces:
                problems.append(f"{name}: no face found — use a photo where one face is clearly visible")
                continue
            try:
                used: int | None = source_face_index(faces, settings.source_face, name)[0]
            except InvalidInput as exc:  # a pick past this photo's faces: its faces are shown to click one
                problems.append(user_message(exc, session.names))
                used = None
            folder = session.folder / "faces"
            for number, face in enumerate(faces, start=1):
                picture = write_jpeg(folder / f"source-{len(pictures)}-{time.monotonic_ns():x}.jpg",
                                     thumbnail(image, face.box, THUMBNAIL))  # fmt: skip
                several = len(faces) > 1
                caption = f"{name} · {number} of {len(faces)}{' ✓' if number - 1 == used else ''}" if several else name
                pictures.append((self.share(session, picture), caption))
                picks.append(number if several else None)
        return pictures, picks, problems

    def people_of(
        self, session: Session, target: str, faces: FacesSettings, runtime: RuntimeSettings
    ) -> tuple[Scan, list[str]]:
        """The people of the target (`Service.people`) and a picture of each, as files the session may fetch. The
        scan takes the model sample by sample (brief turns), so a scan during a run goes between its batches."""
        access = self.access(session)
        runtime = runtime.model_copy(update=dict(access.server.get("runtime", {})))
        found = self.service.people(Path(target), faces, runtime, turn=self.service.model_lock.brief, access=access)
        folder = session.folder / "people"
        pictures = [
            self.share(session, write_jpeg(folder / f"person-{p.number}-{p.thumbnail_hash}.jpg", p.thumbnail))
            for p in found.people
        ]
        return found, pictures

    def reference_from(self, session: Session, face_picture: str) -> str:
        """Make a face picture of the preview the reference image: a copy in the session's folder (the preview's
        files come and go), shared with the session so the page can show it."""
        source = Path(face_picture)
        if not self.guard.allows(session.owner, source.resolve()):
            raise InvalidInput("that face picture is not one of this session's")
        copy = session.folder / "faces" / f"reference-{time.monotonic_ns():x}.jpg"
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
        shared = self.share(session, copy)
        session.names[str(copy)] = session.names[shared] = "reference face"
        return shared


class _Measured:
    """A Progress that also tells the run line how far the running job is (for the others' wait estimates)."""

    def __init__(self, inner: Progress | None, line: RunQueue, ticket: Ticket) -> None:
        self.inner, self.line, self.ticket, self.done = inner, line, ticket, 0

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        if unit == "frame":
            self.done = 0
        if self.inner is not None:
            self.inner.stage(name, total, unit)

    def advance(self, n: int = 1) -> None:
        if self.inner is not None:
            self.inner.advance(n)
        self.done += n
        self.line.progress(self.ticket, self.done)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


class _Waiting:
    """Tells `queued(place)` where a ticket stands every half second until it starts or `stop`."""

    def __init__(self, line: RunQueue, ticket: Ticket, queued: Any) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(line, ticket, queued), daemon=True)
        self._thread.start()

    def _run(self, line: RunQueue, ticket: Ticket, queued: Any) -> None:
        while not self._stop.is_set():
            place = line.place(ticket)
            if place.running:
                return
            queued(place)
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()


def write_jpeg(path: Path, frame: Frame, quality: int = 93) -> Path:
    """Write an H×W×3 uint8 RGB frame as a JPEG (4:4:4, fast to encode: previews are re-made on every change): the
    encoder of every picture the studio shows (previews, face pictures, thumbnails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]
    if not cv2.imwrite(str(path), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), params):
        raise InvalidInput(f"could not write {path.name}")
    return path


def _thumbnail_of(report: RunReport, width: int = 240) -> Frame:
    """A small picture of a result: the image, or the middle frame of a video, `width` px wide."""
    if report.kind == "image":
        frame = video.read_image(report.output)[0]
    else:
        middle = report.frames // 2
        frame = None
        with video.FrameReader(report.output) as reader:
            for i, decoded in enumerate(reader):
                frame = decoded
                if i >= middle:
                    break
        if frame is None:
            raise Cancelled("the result has no frames")
    height = max(1, round(frame.shape[0] * width / frame.shape[1]))
    return cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
