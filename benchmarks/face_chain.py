"""Per-stage profile of the default face job (the offline landmark_warp swap, embedded dlib analyser, identity QA).

    python benchmarks/face_chain.py [--resolution 720p 1080p] [--frames 30] [--set faces.qa_every=1] [--json F]

Runs `launch.py benchmark --processors face_swapper` (engine/benchmark.py: the whole run through the pipeline,
then each stage alone on the same frames) with a timer around the functions each stage is made of, and prints,
per frame of the stage-alone pass: decode and encode (the benchmark's own stages), detection, refit (the
tracker's landmark re-fit between detections), embedding (the source's and any the face stage makes), the swap
itself (the two triangle warps: reshape and texture), the paste-back mask, colour transfer, blend (the rest of
the swap: alignment, region copy, alpha blend), and identity QA with its own refit and embeddings. Times are
exclusive (a timed call inside another is counted once, in the inner row) and in ms per frame.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import benchmark  # noqa: E402
from engine.faces import colour, embedded, landmark_swap, qa  # noqa: E402
from engine.job import apply_overrides  # noqa: E402
from processors import REGISTRY, build_chain  # noqa: E402


class Profile:
    """Exclusive wall time (s) and calls per row, from timers wrapped around functions (per thread: a call inside
    a timed call is the inner row's, and the outer row's time excludes it)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.active = False
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, row: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return fn(*args, **kwargs)
            stack = self._local.__dict__.setdefault("stack", [])
            stack.append(0.0)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                inner = stack.pop()
                if stack:
                    stack[-1] += spent
                with self._lock:
                    self.seconds[row] += spent - inner
                    self.calls[row] += 1

        return timed


def patch(profile: Profile) -> None:
    """Put the timers in place (this process only)."""
    analyser = embedded.EmbeddedAnalyser
    for name in ("detect", "refit", "embed"):
        setattr(analyser, name, profile.wrap({"detect": "detection"}.get(name, name), getattr(analyser, name)))
    landmark_swap.warp_triangles = profile.wrap("swap (triangle warps)", landmark_swap.warp_triangles)
    landmark_swap.landmark_mask = profile.wrap("paste-back mask", landmark_swap.landmark_mask)
    colour.transfer = profile.wrap("colour", colour.transfer)
    landmark_swap.swap = profile.wrap("blend and paste-back", landmark_swap.swap)
    qa.IdentityQA.check = profile.wrap("identity QA (own work)", qa.IdentityQA.check)
    stages = benchmark._stages

    def stage_pass(*args: Any, **kwargs: Any) -> Any:
        profile.active = True
        try:
            return stages(*args, **kwargs)
        finally:
            profile.active = False

    benchmark._stages = stage_pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", nargs="+", default=["720p", "1080p"])
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--set", action="append", default=[], dest="sets")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    profile = Profile()
    patch(profile)
    results = {}
    for resolution in args.resolution:
        profile.seconds.clear()
        profile.calls.clear()
        raw = apply_overrides({"processors": ["face_swapper"]}, args.sets, REGISTRY)
        result = benchmark.run(raw, resolution=resolution, frames=args.frames, registry=REGISTRY,
                               build_chain=build_chain)  # fmt: skip
        frames = result["measured_frames"]
        stage = {s["name"]: s for s in result["stages"]}
        rows = {
            "decode": stage["decode"]["p50_ms"],
            **{k: round(v * 1000 / frames, 2) for k, v in sorted(profile.seconds.items())},
            "encode": stage["encode"]["p50_ms"],
        }
        results[resolution] = {"fps": result["fps"], "frames": frames, "ms_per_frame": rows,
                               "calls": dict(profile.calls), "stages": result["stages"]}  # fmt: skip
        print(f"{resolution}: {result['fps']:.2f} fps end to end; per frame of the stage pass ({frames} frames):")
        for row, ms in rows.items():
            calls = f" ({profile.calls[row]} calls)" if row in profile.calls else " (p50)"
            print(f"  {row:<26} {ms:8.1f} ms{calls}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
