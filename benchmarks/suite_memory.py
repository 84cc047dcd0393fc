"""The test suite's memory and time: runs a command (by default the README's test command) and samples its whole
process tree with psutil every 0.5 s.

    python benchmarks/suite_memory.py [--json F] [-- COMMAND ...]

Prints the wall time, the CPU time of the tree (user + system, every process that ended), the peak resident set
of the largest single process (what `/usr/bin/time -v` calls "Maximum resident set size") with its command, and
the peak of the sum over the tree: of RSS (shared libraries counted in every worker) and of PSS (shared pages
counted once, sampled every 2 s). With pytest-xdist the sums are the suite's real footprint.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
README_COMMAND = [sys.executable, "-m", "pytest", "-q"]
GIB = 1024**3


def sample(command: list[str], every: float = 0.5) -> dict:
    """Run `command` in ROOT to its end; the peaks of its process tree (bytes), wall and CPU seconds, exit code."""
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True)
    root = psutil.Process(proc.pid)
    peaks = {"largest_rss": 0, "largest_command": "", "sum_rss": 0, "sum_pss": 0, "processes": 0}
    tick = 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        total_rss = total_pss = 0
        for p in tree:
            try:
                rss = p.memory_info().rss
                # PSS reads every mapping (smaps): a few times less often, it does not load the machine it measures.
                total_pss += p.memory_full_info().pss if tick % 4 == 0 else 0
                if rss > peaks["largest_rss"]:
                    peaks["largest_rss"], peaks["largest_command"] = rss, " ".join(p.cmdline())[:200]
            except psutil.Error:
                continue
            total_rss += rss
        peaks["sum_rss"] = max(peaks["sum_rss"], total_rss)
        if tick % 4 == 0:
            peaks["sum_pss"] = max(peaks["sum_pss"], total_pss)
        peaks["processes"] = max(peaks["processes"], len(tree))
        tick += 1
        time.sleep(every)
    returncode = proc.wait()
    children = os.times()
    return {
        **peaks,
        "wall_s": round(time.monotonic() - start, 1),
        "cpu_s": round(children.children_user + children.children_system, 1),
        "returncode": returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("command", nargs="*", help="the command to measure (after --); default: the README's")
    args = parser.parse_args()
    result = sample(args.command or README_COMMAND)
    print(
        f"wall {result['wall_s'] / 60:.1f} min  CPU {result['cpu_s'] / 60:.1f} min  "
        f"largest process {result['largest_rss'] / GIB:.2f} GiB  sum RSS {result['sum_rss'] / GIB:.2f} GiB  "
        f"sum PSS {result['sum_pss'] / GIB:.2f} GiB  processes {result['processes']}  exit {result['returncode']}\n"
        f"largest: {result['largest_command']}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result["returncode"]


if __name__ == "__main__":
    sys.exit(main())
