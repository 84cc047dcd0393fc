"""Prometheus metrics of a serving process: jobs, frames, model loads, provider fallbacks, queue, faces.

`PROCESS_METRICS` is the one process-wide registry of these series, like prometheus_client's own default registry
(process-wide by design: a counter counts what this process did, whoever called the engine). It is a separate
`CollectorRegistry` rather than the default one, so what `/metrics` serves is exactly this module's series plus
the process collector, whatever else in the process registers metrics. The engine records through the small
functions below (one hook each in the pipeline's processor call, the face stage, `Runtime.load` and the ONNX
fallback); nothing here changes what a job does.

Labels are low-cardinality by construction: processor ids (the registry), model ids (the manifest), backend and
provider names normalised to a small fixed set, and job outcomes. Never paths, session ids or job ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

from engine.core.errors import Cancelled

# Job outcomes (the `status` label of jobs_total and job_duration_seconds).
JOB_OUTCOMES = ("done", "failed", "cancelled")
# Every value the `provider` label can take (see `provider_label`).
PROVIDER_LABELS = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "torch:cpu",
    "torch:cuda",
    "torch:mps",
    "cpu",
    "other",
)

# The fallbacks ONNX Runtime can make (wanted provider, provider used).
FALLBACKS = (
    ("TensorrtExecutionProvider", "CUDAExecutionProvider"),
    ("TensorrtExecutionProvider", "CPUExecutionProvider"),
    ("CUDAExecutionProvider", "CPUExecutionProvider"),
)


class Metrics:
    """The facestudio series in one registry. Units: seconds and counts."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.jobs = Counter(
            "facestudio_jobs_total", "Jobs finished, by outcome: done, failed, cancelled", ["status"], registry=registry
        )
        self.jobs_running = Gauge("facestudio_jobs_running", "Jobs running now", registry=registry)
        self.job_seconds = Histogram(
            "facestudio_job_duration_seconds",
            "Wall time of a job from start to its outcome, in seconds",
            ["status"],
            buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
            registry=registry,
        )
        self.frames = Counter(
            "facestudio_frames_processed_total", "Frames returned by a processor", ["processor"], registry=registry
        )
        self.frame_seconds = Histogram(
            "facestudio_frame_latency_seconds",
            "Seconds a processor spent per frame (a batch call's time shared among its frames)",
            ["processor", "provider"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.model_load_seconds = Histogram(
            "facestudio_model_load_seconds",
            "Seconds to make a model ready (verify, convert or download when needed, open the session)",
            ["model", "backend"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry,
        )
        self.fallbacks = Counter(
            "facestudio_provider_fallbacks_total",
            "ONNX Runtime sessions that could not start the wanted provider and fell back",
            ["wanted", "used"],
            registry=registry,
        )
        self.queue_depth = Gauge("facestudio_queue_depth", "Jobs waiting in the jobs API queue", registry=registry)
        self.faces_per_frame = Histogram(
            "facestudio_faces_per_frame",
            "Faces handed to the face processors per frame",
            buckets=(0, 1, 2, 3, 4, 6, 8, 16),
            registry=registry,
        )
        # Outcome and fallback series exist from the start, so a dashboard's rate() has a zero to start from.
        for status in JOB_OUTCOMES:
            self.jobs.labels(status)
            self.job_seconds.labels(status)
        for wanted, used in FALLBACKS:
            self.fallbacks.labels(wanted, used)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (serve with prometheus_client.CONTENT_TYPE_LATEST)."""
        return generate_latest(self.registry)


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)  # process_resident_memory_bytes, process_cpu_seconds_total, …
    return registry


PROCESS_METRICS = Metrics(_registry())


def provider_label(provider: str | None) -> str:
    """`provider` reduced to one of PROVIDER_LABELS: device indices dropped (torch:cuda:1 → torch:cuda)."""
    if not provider:
        return "cpu"
    if provider in PROVIDER_LABELS:
        return provider
    base = provider.rsplit(":", 1)[0] if provider.count(":") > 1 else provider
    if base in PROVIDER_LABELS:
        return base
    return "cpu" if provider.upper() == "CPU" else "other"


@contextmanager
def observe_job(metrics: Metrics = PROCESS_METRICS) -> Iterator[None]:
    """Count a job while it runs and record its outcome and duration (Cancelled: cancelled; other errors: failed)."""
    started = time.perf_counter()
    metrics.jobs_running.inc()
    status = "failed"
    try:
        yield
        status = "done"
    except Cancelled:
        status = "cancelled"
        raise
    finally:
        metrics.jobs_running.dec()
        metrics.jobs.labels(status).inc()
        metrics.job_seconds.labels(status).observe(time.perf_counter() - started)


def record_frames(processor: str, provider: str | None, frames: int, seconds: float) -> None:
    """One `process` call of the processor `processor` (its id) on `provider` (what it reports, e.g.
    CUDAExecutionProvider): `frames` frames in `seconds` wall time (each frame observed at seconds / frames)."""
    if frames <= 0:
        return
    PROCESS_METRICS.frames.labels(processor).inc(frames)
    latency = PROCESS_METRICS.frame_seconds.labels(processor, provider_label(provider))
    for _ in range(frames):
        latency.observe(seconds / frames)


def record_model_load(model: str, backend: str, seconds: float) -> None:
    """`model`: a catalogue model's id, or for a graph the user gave (a `.dfm`) the processor's id — never a file
    name, so the label set stays the catalogue's and the registry's."""
    PROCESS_METRICS.model_load_seconds.labels(model, backend).observe(seconds)


def record_fallback(wanted: str, used: str) -> None:
    PROCESS_METRICS.fallbacks.labels(provider_label(wanted), provider_label(used)).inc()


def record_faces(count: int) -> None:
    PROCESS_METRICS.faces_per_frame.observe(count)
