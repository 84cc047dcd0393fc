"""Render a video job's segments on Ray workers (`run --cluster`): the same plan, job folder, resume and join as a
single-machine run (`engine.run.pipeline.run`), only the missing segments are handed out to Ray actors instead of
being rendered in order in this process.

Each actor (one GPU each where the cluster has GPUs, else one CPU) parses the job from its raw dict against the
processor registry and builds its Runtime and chain once, in `__init__`, then renders any segment it is given
(`engine.run.render.render_alone`: it decodes the target from the segment's first frame, so face tracking restarts
at every segment). It writes the segment into the job folder, which must therefore be on a volume every node mounts
at the same path (`FACESTUDIO_JOBS`), like the target, the sources and the output; a worker that cannot see them
refuses with InvalidInput. The driver (this process) moves each finished segment into place and records it in the
job's manifest, so a `--cluster` run killed half-way resumes with `--resume`, on the cluster or on one machine.

A segment whose worker died, or that failed with an unexpected error, is handed to another worker (a dead actor is
replaced) up to `MAX_ATTEMPTS` times; after that the job fails with SegmentFailed. A foreseeable error (bad input,
missing model: a FacestudioError) fails the job at once, as a retry would fail the same way.

Ray is optional (`pip install ".[ray]"`) and imported only when a cluster is used.
"""

from __future__ import annotations

import logging
import os
import socket
import warnings
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.core.errors import ClusterUnavailable, FacestudioError, InvalidInput, SegmentFailed
from engine.core.progress import Progress
from engine.media import MediaInfo, Span
from engine.run import jobdir, segments
from engine.run.render import SegmentResult, VideoRender, render_alone, segment_render
from engine.run.segments import Segment
from engine.run.sidecar import absolute_raw

log = logging.getLogger(__name__)

# Attempts per segment before the job gives up: one worker lost to a node failure or an OOM kill is routine, the
# same segment failing three times on different workers is not.
MAX_ATTEMPTS = 3
# Frames never travel through Ray's object store (workers read the target and write segments to the shared job
# folder; only small results come back), so a local cluster needs only Ray's minimum.
_LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024
# Tests only: a path; the first worker that creates this file exits at once (os._exit), as a worker killed
# mid-job would, so the retry path is exercised deterministically.
CRASH_ONCE_ENV = "FACESTUDIO_TEST_CRASH_ONCE"


def import_ray() -> ModuleType:
    """The `ray` module, or ClusterUnavailable saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable('--cluster needs Ray, which is not installed: pip install ".[ray]"') from None
    return ray


@contextmanager
def connect(address: str, workers: int | None = None) -> Iterator[None]:
    """Connect this process to a Ray cluster for the `with` block.

    address: `local` (start a cluster of `workers` CPUs in this machine, default all of them, and stop it after),
    `auto` (the cluster this machine belongs to, started with `ray start`) or `ray://HOST:PORT` (Ray client).
    A process already connected (a notebook, a test) keeps its connection and the block leaves it open.
    """
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    options: dict[str, Any] = {"log_to_driver": debug, "logging_level": logging.DEBUG if debug else logging.ERROR}
    if address == "local":
        options.update(
            num_cpus=workers or os.cpu_count() or 1,
            include_dashboard=False,
            object_store_memory=_LOCAL_OBJECT_STORE_BYTES,
        )
    elif address == "auto" or address.startswith("ray://"):
        options["address"] = address
    else:
        raise InvalidInput(f"--cluster {address!r} is not local, auto or ray://HOST:PORT")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Ray client's timeout warning says what the one-line error below says
            ray.init(**options)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError or its own types for an unreachable cluster
        reason = str(exc).strip().rstrip(".")
        raise ClusterUnavailable(
            f"cannot connect to the Ray cluster (--cluster {address}): {reason}; check the address, or start a "
            "cluster with `ray start --head`"
        ) from None
    try:
        yield
    finally:
        ray.shutdown()


def _unreadable(path: Path, what: str) -> InvalidInput:
    return InvalidInput(
        f"the Ray worker on {socket.gethostname()} cannot read the {what} {path}: put the target, sources, output "
        "and FACESTUDIO_JOBS on a volume every node mounts at the same path"
    )


def _check_inputs(raw: Mapping[str, Any], target_size: int) -> None:
    """Refuse (InvalidInput) when this worker cannot read the job's files, or sees another file at the target's
    path than the driver did (`target_size`: its size in bytes there)."""
    target = Path(raw["target"])
    try:
        size = target.stat().st_size
    except OSError:
        raise _unreadable(target, "target") from None
    if size != target_size:
        raise InvalidInput(
            f"the Ray worker on {socket.gethostname()} sees another file at {target} ({size} bytes, the driver's "
            f"has {target_size}): mount the same volume at the same path on every node"
        )
    reference = raw.get("faces", {}).get("reference_image")
    for path, what in [*((Path(p), "source") for p in raw.get("sources", [])), (reference, "reference image")]:
        if path is not None and not os.access(path, os.R_OK):
            raise _unreadable(Path(path), what)


class SegmentWorker:
    """One Ray actor's state: the job's chain, built once, and what its segments are rendered with. Made a Ray
    actor by `RayRenderer`; plain Python otherwise."""

    def __init__(
        self, raw: dict[str, Any], info: MediaInfo, span: Span, size: tuple[int, int], target_size: int
    ) -> None:
        """raw: the job (`sidecar.absolute_raw`); info, span: the target's probe and the job's span; size: output
        frame size in pixels; target_size: the target's bytes as the driver sees it. An error here is kept and
        raised by `render`, so that it reaches the driver as its own type rather than as a dead actor."""
        self.render_with: VideoRender | None = None
        self.error: BaseException | None = None
        try:
            _check_inputs(raw, target_size)
            from engine.job.settings import Job
            from engine.models.runtime import Runtime
            from processors import REGISTRY, build_chain

            job = Job.parse(raw, REGISTRY)
            runtime = Runtime(job.runtime)
            chain = build_chain(job, runtime)
            self.render_with = segment_render(job, chain, runtime, info, span, size)
        except Exception as exc:  # raised by the first `render`, typed as it was
            self.error = exc

    def render(self, segment: Segment, last: bool, path: str) -> tuple[SegmentResult, str]:
        """Render `segment` (`last`: the plan's last) into `path`, a file in the shared job folder; returns what
        it made and this worker's `host:pid`."""
        crash = os.environ.get(CRASH_ONCE_ENV)
        if crash:
            try:
                os.close(os.open(crash, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os._exit(70)
        if self.error is not None:
            raise self.error
        assert self.render_with is not None
        out = Path(path)
        if not out.parent.is_dir():
            raise _unreadable(out.parent.parent, "job folder")
        result = render_alone(self.render_with, segment, last, out)
        return result, f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class RayRenderer:
    """An `engine.run.render.SegmentRenderer` that renders the missing segments on Ray actors (see the module
    docstring).

    workers: actors to start (default: one per GPU of the cluster, or one per CPU when it has none), never more
    than there are segments to render. Needs a connection (`connect`).
    """

    workers: int | None = None
    max_attempts: int = MAX_ATTEMPTS

    def __call__(
        self,
        render: VideoRender,
        folder: jobdir.JobFolder,
        plan: segments.Plan,
        todo: Sequence[Segment],
        progress: Progress,
    ) -> None:
        ray = import_ray()
        from ray.exceptions import RayTaskError

        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        count = max(1, min(self.workers or gpus or int(resources.get("CPU", 1)), len(todo)))
        actor_class = ray.remote(SegmentWorker).options(**({"num_gpus": 1} if gpus else {"num_cpus": 1}))
        args = (
            absolute_raw(render.job),
            render.info,
            render.span,
            render.size,
            render.job.target.stat().st_size,
        )
        actors = [actor_class.remote(*args) for _ in range(count)]
        log.info("rendering %d segments on %d Ray workers (%s each)", len(todo), count, "1 GPU" if gpus else "1 CPU")
        idle = list(actors)
        pending = deque(todo)
        attempts = {s.index: 0 for s in todo}
        failed_on: dict[int, set[int]] = {s.index: set() for s in todo}  # actors (by id) a segment failed on
        inflight: dict[Any, tuple[Any, Segment, Path]] = {}
        last = plan.segments[-1]
        try:
            while pending or inflight:
                while pending and idle:
                    segment = pending.popleft()
                    # A retry goes to another worker when one is free: the failure may be the worker's.
                    actor = next((a for a in idle if id(a) not in failed_on[segment.index]), idle[0])
                    idle.remove(actor)
                    attempts[segment.index] += 1
                    work = folder.work_path(segment)
                    path = work.with_name(f"{work.stem}.try{attempts[segment.index]}{work.suffix}")
                    inflight[actor.render.remote(segment, segment is last, str(path))] = (actor, segment, path)
                (ref,), _ = ray.wait(list(inflight), num_returns=1)
                actor, segment, path = inflight.pop(ref)
                try:
                    result, worker = ray.get(ref)
                except RayTaskError as exc:
                    if isinstance(exc.cause, FacestudioError):
                        raise exc.cause from None
                    reason = f"{type(exc.cause).__name__}: {exc.cause}"
                    idle.append(actor)
                except ray.exceptions.RayError as exc:  # the actor, its process or its node died
                    reason = f"its worker was lost ({type(exc).__name__})"
                    ray.kill(actor, no_restart=True)
                    replacement = actor_class.remote(*args)
                    actors.append(replacement)
                    idle.append(replacement)
                else:
                    self._finish(folder, segment, path, result, worker, attempts[segment.index], render)
                    progress.advance(result.frames)
                    idle.append(actor)
                    continue
                path.unlink(missing_ok=True)
                failed_on[segment.index].add(id(actor))
                log.warning("segment %d, attempt %d: %s", segment.index, attempts[segment.index], reason)
                if attempts[segment.index] >= self.max_attempts:
                    raise SegmentFailed(
                        f"segment {segment.index} (output frames {segment.start}–{segment.stop - 1}) failed on "
                        f"{attempts[segment.index]} attempts, the last: {reason}"
                    )
                pending.appendleft(segment)
        finally:
            for actor in actors:
                ray.kill(actor, no_restart=True)

    @staticmethod
    def _finish(
        folder: jobdir.JobFolder,
        segment: Segment,
        path: Path,
        result: SegmentResult,
        worker: str,
        attempts: int,
        render: VideoRender,
    ) -> None:
        """Move a worker's segment into place and record it; its identity QA joins the driver's."""
        if not path.is_file():
            raise InvalidInput(
                f"the Ray worker {worker} wrote segment {segment.index} to {path}, which this machine cannot see: "
                "set FACESTUDIO_JOBS to a folder on a volume every node mounts at the same path"
            )
        folder.finish(segment, result.frames, {**result.counts, "worker": worker, "attempts": attempts}, path)
        if render.faces is not None and render.faces.qa is not None:
            render.faces.qa.records.extend(result.identity)
