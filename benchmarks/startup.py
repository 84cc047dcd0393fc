"""Start-up: how long `launch.py --help` takes, and `launch.py ui` until its first response (the page at /), each a
fresh process as a user starts it, `--repeats` times; prints each run and the medians.

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

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "launch.py")]


def help_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([*LAUNCH, "--help"], check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def ui_seconds(timeout: float = 300.0) -> float:
    """Seconds from starting `launch.py ui` to the first 200 from its page."""
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
                            return time.perf_counter() - started
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
    runs: dict[str, list[float]] = {"help_s": [], "ui_first_response_s": []}
    for index in range(args.repeats):
        runs["help_s"].append(round(help_seconds(), 3))
        runs["ui_first_response_s"].append(round(ui_seconds(), 3))
        line = f"run {index + 1}: --help {runs['help_s'][-1]} s, ui {runs['ui_first_response_s'][-1]} s"
        print(line, file=sys.stderr)
    result = {"runs": runs, "median": {k: statistics.median(v) for k, v in runs.items()}}
    print(f"median of {args.repeats}: --help {result['median']['help_s']} s, ui first response "
          f"{result['median']['ui_first_response_s']} s", file=sys.stderr)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
