"""Per-stage profile of the default face job (the offline landmark_warp swap, embedded dlib analyser, identity QA).

    python benchmarks/face_chain.py [--resolution 720p 1080p] [--frames 30] [--set faces.qa_every=1] [--json F]

Runs `launch.py benchmark --processors face_swapper` (engine/tools/benchmark.py: the whole run through the pipeline,
then each stage alone on the same frames) with a timer around the functions each stage is made of, and prints,
per frame of the stage-alone pass: decode and encode (p50, the benchmark's own stages); in the face stage,
detection (full or, where the tracked faces are large, coarse: on a downscaled copy), refit (the tracker's landmark
re-fit between detections, and a coarse detection's re-fit of each face on the full frame) and embed (the
source's); in the swap (per frame it processed: the stage pass runs it batched, then frame by frame), the two
triangle warps (reshape and texture), the paste-back mask, colour transfer and its lighting check, and the rest
(geometry, region copy, alpha blend); in identity QA, its refit, its embeddings and its own bookkeeping. Times are
exclusive (a timed call inside another is the inner row's) and in ms per frame; the rows of one part add up to
that part's time.
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

from engine.faces import colour, embedded, landmark_swap, qa  # noqa: E402
from engine.job.settings import apply_overrides  # noqa: E402
from engine.tools import benchmark  # noqa: E402
from processors import REGISTRY, build_chain, face_swapper  # noqa: E402


class Profile:
    """Exclusive wall time (s) and calls per row, from timers wrapped around functions. Rows are named by the
    part of the job they ran in (the face stage, the swapper, identity QA) and the function; a call inside
    another timed call is the inner row's, and the outer row's time excludes it (per thread)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.swapped = 0  # frames the swapper processed (the stage pass runs it batched, then frame by frame)
        self.active = False
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, row: str, fn: Callable[..., Any], part: str | None = None) -> Callable[..., Any]:
        """`fn` timed as `row`; `part`: calls inside it belong to that part of the job."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return fn(*args, **kwargs)
            stack = self._local.__dict__.setdefault("stack", [])
            parts = self._local.__dict__.setdefault("parts", ["faces"])
            name = f"{part or parts[-1]}: {row}"
            stack.append(0.0)
            if part:
                parts.append(part)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                if part:
                    parts.pop()
                inner = stack.pop()
                if stack:
                    stack[-1] += spent
                with self._lock:
                    self.seconds[name] += spent - inner
                    self.calls[name] += 1

        return timed

    def per_frame(self, frames: int) -> dict[str, float]:
        """ms per frame of each row: the swapper's rows per frame it processed, the others per frame."""
        return {
            row: round(seconds * 1000 / (self.swapped if row.startswith("swap") else frames), 2)
            for row, seconds in sorted(self.seconds.items())
        }


def patch(profile: Profile) -> None:
    """Put the timers in place (this process only)."""
    analyser = embedded.EmbeddedAnalyser
    for name in ("detect", "refit", "embed"):
        setattr(analyser, name, profile.wrap({"detect": "detection"}.get(name, name), getattr(analyser, name)))
    landmark_swap.warp_triangles = profile.wrap("triangle warps", landmark_swap.warp_triangles)
    landmark_swap.landmark_mask = profile.wrap("paste-back mask", landmark_swap.landmark_mask)
    # The swapper reuses a tracked face's statistics (colour.TrackColours): `match` is every transfer, measured or
    # not, and `mean_lab` the lighting check that decides.
    colour.match = profile.wrap("colour", colour.match)
    colour.mean_lab = profile.wrap("colour: lighting check", colour.mean_lab)
    swapper = face_swapper.FaceSwapper.process

    def process(self: Any, frames: Any, ctxs: Any) -> Any:
        if profile.active:
            profile.swapped += len(frames)
        return swapper(self, frames, ctxs)

    face_swapper.FaceSwapper.process = profile.wrap("geometry, blend, paste-back", process, "swap")  # type: ignore[method-assign]
    qa.IdentityQA.check = profile.wrap("bookkeeping", qa.IdentityQA.check, "identity QA")  # type: ignore[method-assign]
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
        profile.swapped = 0
        raw = apply_overrides({"processors": ["face_swapper"]}, args.sets, REGISTRY)
        result = benchmark.run(raw, resolution=resolution, frames=args.frames, registry=REGISTRY,
                               build_chain=build_chain)  # fmt: skip
        frames = result["measured_frames"]
        stage = {s["name"]: s for s in result["stages"]}
        rows = {
            "decode": stage["decode"]["p50_ms"],
            **profile.per_frame(frames),
            "encode": stage["encode"]["p50_ms"],
        }
        results[resolution] = {"fps": result["fps"], "frames": frames, "ms_per_frame": rows,
                               "calls": dict(profile.calls), "stages": result["stages"]}  # fmt: skip
        print(f"{resolution}: {result['fps']:.2f} fps end to end; per frame of the stage pass ({frames} frames):")
        for row, ms in rows.items():
            calls = f" ({profile.calls[row]} calls)" if row in profile.calls else " (p50)"
            print(f"  {row:<40} {ms:8.1f} ms{calls}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
