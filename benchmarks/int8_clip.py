"""The whole upscale job at int8 against fp32: the demo clip (100 frames 320×180 with its tone track) through the
embedded frame enhancer (realesr_animevideov3, ×4 → 1280×720) on the CPU, as a user runs it, one precision after
the other, `--rounds` times each.

    python benchmarks/int8_clip.py [--rounds 3] [--frames 100] [--json F]

Each run is `launch.py run --processors frame_enhancer --set runtime.precision=fp32|int8 --device cpu` in a child
process (loading, decoding, encoding and the audio included); this prints each run's wall and CPU seconds (the
child's user + system, ffmpeg included), the medians, their int8/fp32 ratios, and the worst PSNR of the int8
output's frames against the fp32 output's (every tenth frame). The int8 graph is made first when there is none
(`models quantize realesr_animevideov3`, whose own gate figures are printed then). Run it with FACESTUDIO_HOME,
FACESTUDIO_MODELS and FACESTUDIO_CACHE pointing at folders of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import media  # noqa: E402
from engine.job.settings import RuntimeSettings  # noqa: E402
from engine.media import demo  # noqa: E402
from engine.models import int8, quantize  # noqa: E402
from engine.models.runtime import Runtime  # noqa: E402

MODEL = "realesr_animevideov3"


def launch(*args: str) -> tuple[float, float]:
    """Run `launch.py ARGS` in a child process; (wall seconds, CPU seconds of it and its children)."""
    before, started = os.times(), time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    after = os.times()
    cpu = after.children_user - before.children_user + after.children_system - before.children_system
    return time.perf_counter() - started, cpu


def worst_psnr(reference: Path, test: Path, step: int = 10) -> float:
    """The worst PSNR (dB, 0–255) of `test`'s frames against `reference`'s, every `step`th frame."""
    with media.FrameReader(reference) as a, media.FrameReader(test) as b:
        pairs = [(x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if i % step == 0]
    return min(quantize.psnr(x, y, 255.0) for x, y in pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runtime = Runtime(RuntimeSettings())
    folders = runtime.folders
    # Quantised again unless a job would run the graph there is (one another installation recorded, say, it refuses).
    found = runtime.check_int8(runtime.manifest.get(MODEL))
    if found is None or found[0] != "ok":
        launch("models", "quantize", MODEL, "--offline")
    entry = int8.read_index(folders.models)[MODEL]
    print(f"int8 graph: {entry['scheme']['name']}, gate {entry['gate']['psnr_db']} dB on a CPU whose sums are "
          f"{entry['cpu']['arithmetic']} ({' '.join(entry['cpu']['flags'])})", file=sys.stderr)  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {"fp32": [], "int8": []}
    with tempfile.TemporaryDirectory(prefix="int8-clip-") as tmp:
        clip = demo.make_clip(Path(tmp, "clip.mp4"), 320, 180, args.frames)
        outputs = {}
        for index in range(args.rounds):
            for precision in ("fp32", "int8"):
                out = Path(tmp, f"out_{precision}_{index}.mp4")
                wall, cpu = launch("run", "--target", str(clip), "--output", str(out), "--processors",
                                   "frame_enhancer", "--set", f"frame_enhancer.model={MODEL}", "--set",
                                   f"runtime.precision={precision}", "--device", "cpu", "--yes")  # fmt: skip
                runs[precision].append({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)})
                outputs[precision] = out
                print(f"round {index + 1} {precision}: {wall:.1f} s wall, {cpu:.1f} s CPU", file=sys.stderr)
        psnr = worst_psnr(outputs["fp32"], outputs["int8"])
    median = {p: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")} for p, rs in runs.items()}
    result: dict[str, Any] = {
        "frames": args.frames,
        "scheme": entry["scheme"]["name"],
        "gate_db": entry["gate"]["psnr_db"],
        "cpu": entry["cpu"],
        "runs": runs,
        "median": median,
        "wall_ratio": round(median["int8"]["wall_s"] / median["fp32"]["wall_s"], 3),
        "cpu_ratio": round(median["int8"]["cpu_s"] / median["fp32"]["cpu_s"], 3),
        "worst_psnr_db": round(psnr, 2),
    }
    walls = f"fp32 {median['fp32']['wall_s']} s, int8 {median['int8']['wall_s']} s (×{result['wall_ratio']})"
    print(f"median wall: {walls}; CPU ×{result['cpu_ratio']}; int8 frames {result['worst_psnr_db']} dB from fp32 "
          "(worst of every tenth)", file=sys.stderr)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
