"""Start-up: how long `launch.py --help` takes, and `launch.py ui` until its first response (the page at /), each a
fresh process as a user starts it, `--repeats` times; prints each run and the medians. The studio's CPU seconds
until that response (user + system, its own process) are printed too: on a shared machine the wall time swings
with the load, the CPU time much less.

    python benchmarks/startup.py [--repeats 5] [--json F]

Run it with FACESTUDIO_HOME (and FACESTUDIO_MODELS, FACESTUDIO_CACHE) pointing at folders of its own. The studio is
started on a free port on 127.0.0.1 and stopped once it has answered.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "launch.py")]


def help_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([*LAUNCH, "--help"], check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def ui_seconds(timeout: float = 300.0) -> tuple[float, float]:
    """(seconds from starting `launch.py ui` to the first 200 from its page, the server's CPU seconds until then)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        server = subprocess.Popen([*LAUNCH, "ui", "--port", str(port)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=errors)  # fmt: skip
        try:
            while time.perf_counter() - started < timeout:
                if server.poll() is not None:
                    errors.seek(0)
                    said = errors.read().decode(errors="replace").strip().splitlines()[-1:]
                    raise RuntimeError(f"launch.py ui exited with {server.returncode} before answering: {said}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                        if response.status == 200:
                            wall = time.perf_counter() - started
                            used = psutil.Process(server.pid).cpu_times()
                            return wall, used.user + used.system
                except OSError:
                    time.sleep(0.05)
            raise TimeoutError(f"launch.py ui did not answer in {timeout:g} s")
        finally:
            server.terminate()
            server.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"help_s": [], "ui_first_response_s": [], "ui_cpu_s": []}
    for index in range(args.repeats):
        runs["help_s"].append(round(help_seconds(), 3))
        wall, cpu = ui_seconds()
        runs["ui_first_response_s"].append(round(wall, 3))
        runs["ui_cpu_s"].append(round(cpu, 3))
        line = f"run {index + 1}: --help {runs['help_s'][-1]} s, ui {wall:.2f} s ({cpu:.2f} s CPU)"
        print(line, file=sys.stderr)
    result = {"runs": runs, "median": {k: statistics.median(v) for k, v in runs.items()}}
    median = result["median"]
    print(f"median of {args.repeats}: --help {median['help_s']} s, ui first response "
          f"{median['ui_first_response_s']} s ({median['ui_cpu_s']} s CPU)", file=sys.stderr)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
