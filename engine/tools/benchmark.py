"""`launch.py benchmark`: how fast a chain runs here, how close that is to the models alone, and what it costs.

On generated media (the demo photo drifting across a frame of the chosen resolution, with a tone track), one
benchmark measures:
1. the full run through `pipeline.run` (decode → faces → processors → encode, overlapped): end-to-end fps and
   the process's peak resident memory;
2. each stage alone on the same frames, after a warm-up: decode, face analysis, every processor (in the run's
   batches) and encode, as per-frame p50/p95 latency;
3. the pure-inference floor: face analysis, the processors' model calls and identity QA alone, same batches, as
   fps; and
   `overhead_ratio` = floor fps / end-to-end fps (1.0: the run costs exactly its model work);
4. `tile_waste`: pixels the chain's models compute per frame pixel (1.0 = none computed twice), and `ffmpeg`: the
   ffmpeg and ffprobe the run used (their start-up is most of a run's fixed cost);
5. at `runtime.precision = int8` or `auto` (`--precision`), for every model the run ran as an int8 graph: that graph
   and its float32 graph on the same frames (a frame enhancer takes them whole, a face model their faces'
   crops), interleaved: the median time per call of each and the worst PSNR of the int8 output against the
   float32 one (as `models quantize` gates it).

The result is a JSON-ready dict (schema: `RESULT_KEYS`, stages as `STAGE_KEYS`), a terminal table and a plot.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import media
from engine.core.errors import InvalidInput
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor
from engine.job.settings import Job
from engine.media import demo
from engine.models.runtime import Runtime
from engine.run import pipeline
from engine.run.render import face_stage
from engine.run.sidecar import synthetic_metadata

RESOLUTIONS = {"180p": (320, 180), "360p": (640, 360), "720p": (1280, 720), "1080p": (1920, 1080)}
RESULT_KEYS = (
    "fps",
    "floor_fps",
    "overhead_ratio",
    "tile_waste",
    "peak_rss_mb",
    "peak_gpu_mb",
    "batch",
    "backend",
    "provider",
    "stages",
    "processors",
    "resolution",
    "frames",
    "measured_frames",
    "batch1_floor_fps",
    "batch_speedup",
    "setup_model_ms",
    "precision",
    "int8",
    "ffmpeg",
)
STAGE_KEYS = ("name", "p50_ms", "p95_ms")
INT8_KEYS = ("model", "per", "calls", "fp32_ms", "int8_ms", "ratio", "psnr_db", "gate_db")
# int8 against fp32: this many of the clip's frames (spread over it) go through both graphs of each model.
PRECISION_SAMPLE = 6
# Stages are timed alone on at most this many frames: enough for stable percentiles, little memory.
STAGE_SAMPLE = 48


@dataclass(frozen=True)
class Stage:
    """Per-frame latencies (ms) of one stage."""

    name: str
    per_frame_ms: list[float]

    def summary(self) -> dict[str, Any]:
        values = sorted(self.per_frame_ms)
        return {
            "name": self.name,
            "p50_ms": round(statistics.median(values), 3),
            "p95_ms": round(values[min(len(values) - 1, int(0.95 * len(values)))], 3),
        }


def peak_rss_mb() -> float:
    """The process's peak resident set size so far, in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def peak_gpu_mb() -> float | None:
    """Peak CUDA memory PyTorch allocated in this process, in MiB; None without CUDA."""
    if "torch" not in sys.modules:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / (1024 * 1024)


def tile_waste(chain: Sequence[FrameProcessor], width: int, height: int) -> float:
    """Pixels the chain's models compute per pixel of their input frames (the most wasteful processor)."""
    waste = 1.0
    for processor in chain:
        waste = max(waste, processor.computed_pixels(width, height) / (width * height))
        width, height = processor.output_size(width, height)
    return round(waste, 4)


def _timed(items: Iterator[Any], sink: list[float]) -> Iterator[Any]:
    """Yield from `items`, recording how long producing each one took (ms)."""
    while True:
        start = time.perf_counter()
        try:
            item = next(items)
        except StopIteration:
            return
        sink.append((time.perf_counter() - start) * 1000)
        yield item


def run(
    raw: dict[str, Any],
    *,
    resolution: str,
    frames: int,
    registry: Any,
    build_chain: Callable[[Job, Runtime], list[FrameProcessor]],
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Benchmark the preset mapping `raw` (processors and settings) on generated media; returns the result dict."""
    if resolution not in RESOLUTIONS:
        raise InvalidInput(f"unknown resolution {resolution!r}; use {', '.join(RESOLUTIONS)}")
    if frames < 2:
        raise InvalidInput("--frames must be at least 2")
    width, height = RESOLUTIONS[resolution]
    with tempfile.TemporaryDirectory(prefix="facestudio-bench-", dir=workdir) as tmp:
        target = demo.make_clip(Path(tmp, "bench.mp4"), width, height, frames)
        job = Job.parse(
            {**raw, "target": str(target), "output": str(Path(tmp, "out.mp4")), "sources": [str(demo.source_photo())]},
            registry,
        )
        runtime = Runtime(job.runtime)
        chain = build_chain(job, runtime)
        info = media.probe(target)
        with media.FrameReader(target, info) as reader:
            first = next(iter(reader))
        # Warm-up: loads every model and lets the backends pick their kernels before any clock starts.
        pipeline.process_frame(chain, first, _warm_context(job, chain, runtime, info, first))

        start = time.perf_counter()
        report = pipeline.run(job, chain, runtime)
        wall = time.perf_counter() - start
        rss = peak_rss_mb()

        stages, floor_seconds, sample, single_seconds, setup = _stages(job, chain, runtime, info, tmp, report.batch)
        int8_rows = precision_rows(runtime, target, info) if job.runtime.precision in ("int8", "auto") else []
    fps = report.frames / wall
    # The floor of the whole run: the per-frame model work, for the run's frames, plus the job's one-off model work
    # (the source face's analysis), which the run's wall time includes too.
    floor_fps = report.frames / (floor_seconds / sample * report.frames + setup)
    single_fps = report.frames / (single_seconds / sample * report.frames + setup)
    providers = sorted({d["provider"] for d in report.processors.values() if "provider" in d})
    backends = sorted({d["backend"] for d in report.processors.values() if "backend" in d})
    return {
        "fps": round(fps, 3),
        "floor_fps": round(floor_fps, 3),
        "overhead_ratio": round(floor_fps / fps, 3),
        "tile_waste": tile_waste(chain, width, height),
        "peak_rss_mb": round(rss, 1),
        "peak_gpu_mb": peak_gpu_mb(),
        "batch": report.batch,
        "backend": ",".join(backends) or job.runtime.backend,
        "provider": ",".join(providers) or "none",
        "stages": [s.summary() for s in stages],
        "processors": list(job.processors),
        "resolution": resolution,
        "frames": report.frames,
        "measured_frames": sample,
        "batch1_floor_fps": round(single_fps, 3),
        "batch_speedup": round(floor_fps / single_fps, 3),
        "setup_model_ms": round(setup * 1000, 3),
        "precision": job.runtime.precision,
        "int8": int8_rows,
        "ffmpeg": ffmpeg_used(),
    }


def ffmpeg_used() -> dict[str, str | None]:
    """The ffmpeg (and ffprobe) the run's children were: a run's fixed cost is mostly their start-up, which differs
    several-fold between builds (Debian's, linked to ~215 libraries, against imageio-ffmpeg's static one)."""
    ffmpeg = media.find_ffmpeg()
    version = media.ffmpeg_version(ffmpeg)
    return {
        "executable": ffmpeg,
        "version": ".".join(map(str, version)) if version else None,
        "ffprobe": media.find_ffprobe(ffmpeg),
    }


def precision_rows(runtime: Runtime, target: Path, info: Any) -> list[dict[str, Any]]:
    """For each model `runtime` loaded as an int8 graph: its int8 and float32 graphs on PRECISION_SAMPLE frames of
    `target` (see the module docstring), one row each (INT8_KEYS; times in ms per call, PSNR in dB)."""
    from engine.models import quantize
    from engine.models.signature import read_signature

    step = max(1, info.frame_count // PRECISION_SAMPLE) if info.frame_count else 1
    with media.FrameReader(target, info) as reader:
        frames = [f for i, f in enumerate(reader) if i % step == 0][:PRECISION_SAMPLE]
    rows = []
    for loaded in runtime.loaded():
        if loaded.quantized is None:
            continue
        spec = loaded.spec
        fp32 = runtime.onnx_graph(spec, loaded.file)
        names = [t.name for t in read_signature(fp32)[0]]
        inputs = quantize.inputs_for(spec, names, whole_frames=True)(frames)
        if not inputs:
            continue
        threads = runtime.settings.threads
        psnr, fp32_ms, int8_ms = quantize.compare(spec, fp32, loaded.quantized, inputs, threads=threads)
        rows.append(
            {
                "model": spec.id,
                "per": "frame" if spec.task in ("frame_enhancer", "face_detector") else "face",
                "calls": len(inputs),
                "fp32_ms": fp32_ms,
                "int8_ms": int8_ms,
                "ratio": round(int8_ms / fp32_ms, 3),
                "psnr_db": round(psnr, 2),
                "gate_db": quantize.GATE_DB[spec.task],
            }
        )
    return rows


def _warm_context(job: Job, chain: Sequence[FrameProcessor], runtime: Runtime, info: Any, frame: Frame) -> FrameContext:
    faces = face_stage(job, chain, runtime, info, media.select(info))
    if faces is None:
        return FrameContext(index=0, time=0.0)
    ((_, ctx),) = list(faces.annotate([frame], times=media.select(info).times))
    return ctx


def _stages(
    job: Job, chain: Sequence[FrameProcessor], runtime: Runtime, info: Any, tmp: str, batch: int
) -> tuple[list[Stage], float, int, float, float]:
    """Each stage alone on the first STAGE_SAMPLE frames: (stages, floor seconds, frames measured, floor seconds
    of the same model work one frame per call, seconds of the job's one-off model work)."""
    decode: list[float] = []
    with media.FrameReader(job.target, info) as reader:
        frames = []
        for frame in _timed(iter(reader), decode):
            frames.append(frame)
            if len(frames) == STAGE_SAMPLE:
                break
    stages = [Stage("decode", decode)]
    start = time.perf_counter()
    span = media.select(info)
    faces = face_stage(job, chain, runtime, info, span)
    setup = time.perf_counter() - start
    if faces is not None:
        analysis: list[float] = []
        ctxs = [ctx for _, ctx in _timed(faces.annotate(frames, times=span.times), analysis)]
        stages.append(Stage("faces", analysis))
    else:
        analysis = []
        ctxs = [FrameContext(index=i, time=float(span.times.seconds(i))) for i in range(len(frames))]
    floor = single = sum(analysis) / 1000
    current = frames
    last_face_processor = next((p for p in reversed(chain) if p.needs_faces), None)
    for processor in chain:
        per_frame: list[float] = []
        produced: list[Frame] = []
        for at in range(0, len(current), batch):
            chunk = current[at : at + batch]
            start = time.perf_counter()
            produced += processor.process(chunk, ctxs[at : at + batch])
            elapsed = time.perf_counter() - start
            floor += elapsed
            per_frame += [elapsed * 1000 / len(chunk)] * len(chunk)
        # The same model work one frame per call: what batching is measured against.
        start = time.perf_counter()
        for i, frame in enumerate(current):
            processor.process([frame], [ctxs[i]])
        single += time.perf_counter() - start
        stages.append(Stage(processor.id, per_frame))
        if faces is not None and faces.qa is not None and processor is last_face_processor:
            # Identity QA embeds the input and output faces: model work of the run, so it counts in the floor.
            qa_ms: list[float] = []
            for before, after, ctx in zip(current, produced, ctxs, strict=True):
                start = time.perf_counter()
                faces.qa.check(ctx.index, before, after, ctx.faces)
                qa_ms.append((time.perf_counter() - start) * 1000)
            floor += sum(qa_ms) / 1000
            single += sum(qa_ms) / 1000
            stages.append(Stage("identity_qa", qa_ms))
        current = produced
    encode: list[float] = []
    height, width = current[0].shape[:2]
    with media.FrameWriter(
        Path(tmp, "encode.mp4"),
        width,
        height,
        span.output_times(),
        metadata=synthetic_metadata(job),
        crf=job.video.crf,
        preset=job.video.preset,
        encoder=job.video.encoder,
    ) as writer:
        for frame in current:
            start = time.perf_counter()
            writer.write(frame)
            encode.append((time.perf_counter() - start) * 1000)
    stages.append(Stage("encode", encode))
    return stages, floor, len(frames), single, setup


def table(result: dict[str, Any]) -> str:
    """The result as a terminal table."""
    lines = [
        f"{' → '.join(result['processors'])} at {result['resolution']}, {result['frames']} frames, batch "
        f"{result['batch']}, {result['backend']} ({result['provider']}); ffmpeg {result['ffmpeg']['version'] or '?'}"
        f"{' with ffprobe' if result['ffmpeg']['ffprobe'] else ' alone'}",
        f"{'stage':<18}{'p50 ms':>10}{'p95 ms':>10}",
    ]
    lines += [f"{s['name']:<18}{s['p50_ms']:>10.1f}{s['p95_ms']:>10.1f}" for s in result["stages"]]
    gpu = "n/a" if result["peak_gpu_mb"] is None else f"{result['peak_gpu_mb']:.0f} MiB"
    lines += [
        f"end to end {result['fps']:.2f} fps; model floor {result['floor_fps']:.2f} fps; overhead ratio "
        f"{result['overhead_ratio']:.3f}",
        f"batch {result['batch']} vs 1 frame per call: ×{result['batch_speedup']:.2f} "
        f"({result['batch1_floor_fps']:.2f} fps one at a time)",
        f"tile waste {result['tile_waste']:.3f}; peak RSS {result['peak_rss_mb']:.0f} MiB; peak GPU {gpu}",
    ]
    if result["int8"]:
        lines += [
            "int8 against fp32, same inputs, interleaved:",
            f"{'model':<26}{'per':>6}{'fp32 ms':>10}{'int8 ms':>10}{'ratio':>8}{'PSNR dB':>10}{'gate':>7}",
        ]
        lines += [
            f"{r['model']:<26}{r['per']:>6}{r['fp32_ms']:>10.1f}{r['int8_ms']:>10.1f}{r['ratio']:>8.3f}"
            f"{r['psnr_db']:>10.1f}{r['gate_db']:>7.0f}"
            for r in result["int8"]
        ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> Path:
    """A PNG: per-stage p50/p95 latency bars, and end-to-end fps against the model floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["name"] for s in result["stages"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 1]})
    xs = range(len(names))
    left.bar([x - 0.2 for x in xs], [s["p50_ms"] for s in result["stages"]], width=0.4, label="p50")
    left.bar([x + 0.2 for x in xs], [s["p95_ms"] for s in result["stages"]], width=0.4, label="p95")
    left.set_xticks(list(xs), names, rotation=20)
    left.set_ylabel("ms per frame")
    left.legend()
    left.set_title(f"{' → '.join(result['processors'])}, {result['resolution']}")
    right.bar(["end to end", "model floor"], [result["fps"], result["floor_fps"]], color=["tab:green", "tab:gray"])
    right.set_ylabel("frames per second")
    right.set_title(f"overhead ×{result['overhead_ratio']:.2f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_json(result: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return path
