"""People benchmark (not a test): how long `faces scan` takes against the mapped render of the same clip.

    python benchmarks/people.py [--seconds 4] [--json people.json]

The clip is the people tests' (tests/peoplekit.py: the astronaut and Grace Hopper cross, one leaves for a second
and comes back), `--seconds` long: past its first 4 s the two stand where the walk left them. In one process, as
tests/test_people.py measures it: `launch.py faces scan --target clip --json`, then `launch.py run` with person 0
given Hopper's photo and person 1 the astronaut's (the face swapper, `landmark_warp`, detecting on every frame).
Reported: each command's CPU seconds in this process (ffmpeg's decoding and encoding are children and counted for
neither) and wall-clock seconds, the people found, and the ratios. The issue's goal: the scan in under a tenth of
the render's time. The scan's fixed cost (loading the analyser, about 1 s) weighs less on a longer clip.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import peoplekit  # noqa: E402
from PIL import Image  # noqa: E402

import cli  # noqa: E402
from engine.media import demo  # noqa: E402


def timed(args: list[str]) -> tuple[float, float, str]:
    """(CPU seconds of this process, wall seconds, what it printed) of one `launch.py` command, run in-process."""
    out = io.StringIO()
    cpu, wall = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = cli.main(args)
    if code != 0:
        raise SystemExit(f"launch.py {' '.join(args[:2])} failed (exit {code})")
    return time.process_time() - cpu, time.perf_counter() - wall, out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="length of the clip (at least 4)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    count = max(peoplekit.COUNT, round(args.seconds * peoplekit.FPS))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clip = peoplekit.make(folder / "two.mp4", count).path
        Image.fromarray(demo.photo()).save(folder / "astronaut.png")
        Image.open(demo.source_photo()).convert("RGB").save(folder / "hopper.png")
        sheet = ["--sheet", str(folder / "people.png")]
        scan_cpu, scan_wall, printed = timed(["faces", "scan", "--target", str(clip), "--json", *sheet])
        found = json.loads(printed)
        mapping = [f"--map=0={folder / 'hopper.png'}", f"--map=1={folder / 'astronaut.png'}"]
        run = ["run", "--target", str(clip), "--output", str(folder / "mapped.mp4"), *mapping]
        render_cpu, render_wall, _ = timed(
            [*run, "--processors", "face_swapper", "--set", "faces.redetect_every=1", "--yes"]
        )
    result: dict[str, Any] = {
        "clip": {"seconds": count / peoplekit.FPS, "frames": count, "size": f"{peoplekit.WIDTH}×{peoplekit.HEIGHT}"},
        "people_found": [p["person"] for p in found["people"]],
        "sampled_frames": found["sampled"],
        "scan_s": {"cpu": round(scan_cpu, 2), "wall": round(scan_wall, 2)},
        "render_s": {"cpu": round(render_cpu, 2), "wall": round(render_wall, 2)},
        "scan_over_render": {"cpu": round(scan_cpu / render_cpu, 3), "wall": round(scan_wall / render_wall, 3)},
        "goal_met_cpu": scan_cpu < render_cpu / 10,
    }
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
