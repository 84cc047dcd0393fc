"""Where the default face job's time goes above its model floor: `launch.py benchmark --processors face_swapper`'s
figures (end-to-end fps, the models-only floor, their ratio) with the CPU time per frame of the end-to-end run,
by thread of this process and for its ffmpeg children (decode, encode, probes, join).

    python benchmarks/face_overhead.py [--resolution 720p] [--frames 30] [--set video.preset=medium] [--json F]
    python benchmarks/face_overhead.py --compare OTHER_CHECKOUT [--rounds 3]   # before/after, interleaved

CPU time per frame does not depend on what else the machine runs, so it compares two versions on a shared
machine where fps and the ratio swing with the load; `--compare` runs this checkout and another (e.g. main before
a change) alternately, `--rounds` times each, each in a child process, and prints every run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def measure(root: Path, resolution: str, frames: int, sets: list[str]) -> dict[str, Any]:
    """The benchmark of the default face job on the checkout `root`, with the CPU time per frame of its end-to-end
    run: `threads` (ms per frame, by thread: `main`, and each stage thread by its name) and `ffmpeg` (its child
    processes, ms per frame)."""
    sys.path.insert(0, str(root))
    from engine.job.settings import apply_overrides
    from engine.run import pipeline, workers
    from engine.tools import benchmark
    from processors import REGISTRY, build_chain

    cpu: dict[str, float] = defaultdict(float)
    run_cpu: dict[str, float] = {}
    run_worker = workers.Worker._run

    def timed_worker(self: workers.Worker, target: Any) -> None:
        started = time.thread_time()
        try:
            run_worker(self, target)
        finally:
            cpu[self.thread.name.removeprefix("facestudio-")] += time.thread_time() - started

    real_run = pipeline.run

    def timed_run(*args: Any, **kwargs: Any) -> Any:
        cpu.clear()
        before, started = os.times(), time.thread_time()
        try:
            return real_run(*args, **kwargs)
        finally:
            after = os.times()
            run_cpu["main"] = time.thread_time() - started
            run_cpu["process"] = after.user - before.user + after.system - before.system
            run_cpu["ffmpeg"] = (
                after.children_user - before.children_user + after.children_system - before.children_system
            )
            run_cpu.update({name: seconds for name, seconds in cpu.items()})

    workers.Worker._run = timed_worker  # type: ignore[method-assign]
    pipeline.run = timed_run
    raw = apply_overrides({"processors": ["face_swapper"]}, sets, REGISTRY)
    result = benchmark.run(raw, resolution=resolution, frames=frames, registry=REGISTRY, build_chain=build_chain)
    per_frame = {name: round(seconds * 1000 / result["frames"], 1) for name, seconds in run_cpu.items()}
    return {
        "fps": result["fps"],
        "floor_fps": result["floor_fps"],
        "overhead_ratio": result["overhead_ratio"],
        "cpu_ms_per_frame": per_frame,
        "total_cpu_ms_per_frame": round(per_frame["process"] + per_frame["ffmpeg"], 1),
        "stages": {s["name"]: s["p50_ms"] for s in result["stages"]},
        "resolution": resolution,
        "frames": result["frames"],
        "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def compare(other: Path, rounds: int, args: list[str]) -> dict[str, list[dict[str, Any]]]:
    """This checkout ("after") and `other` ("before") measured alternately, `rounds` times each, each run in a
    child process of its own (fresh models and caches are the benchmark's own temp files)."""
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for index in range(rounds):
        for name, root in (("before", other), ("after", ROOT)):
            done = subprocess.run(
                [sys.executable, __file__, "--root", str(root), *args],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs[name].append(result)
            print(f"round {index + 1} {name}: {_line(result)}", file=sys.stderr)
    return runs


def _line(r: dict[str, Any]) -> str:
    parts = ", ".join(f"{k} {v:.0f}" for k, v in r["cpu_ms_per_frame"].items())
    return (
        f"{r['fps']:.2f} fps, floor {r['floor_fps']:.2f}, ratio {r['overhead_ratio']:.3f}, CPU "
        f"{r['total_cpu_ms_per_frame']:.0f} ms/frame ({parts}), load {r['load']:.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    parser.add_argument("--compare", type=Path, metavar="CHECKOUT", help="measure this checkout against another")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.compare:
        passed = ["--resolution", args.resolution, "--frames", str(args.frames)]
        passed += [f"--set={item}" for item in args.set]
        runs = compare(args.compare, args.rounds, passed)
        keys = ("fps", "floor_fps", "overhead_ratio", "total_cpu_ms_per_frame")
        out: dict[str, Any] = {"runs": runs}
        out["median"] = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()}
        for name, medians in out["median"].items():
            print(f"{name:<6} median of {args.rounds}: " + ", ".join(f"{k} {v:g}" for k, v in medians.items()))
    else:
        out = measure(args.root, args.resolution, args.frames, args.set)
        print(_line(out), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
