"""Soak test of the web UI (not run in CI): small jobs through its `run` API, one after another, while the server
process's memory, open files, threads and temp files are sampled. Linux only (it reads /proc).

    python benchmarks/soak.py --minutes 20 --out soak/    # the real soak
    python benchmarks/soak.py --jobs 2 --out soak/        # a smoke run (what tests/test_soak.py does)

Starts `launch.py ui` as a child process on a free port, with its temp folder (TMPDIR, GRADIO_TEMP_DIR) under
OUT/tmp so that its growth is measured too, and submits jobs through gradio_client as the guide shows: an
8-frame 160×90 clip of the demo photo with the demo source face, alternating the default preset (offline face
swap) and a ×2 frame enhancer (`--preset` replaces both). Every `--interval` seconds it samples the server's
resident memory (VmRSS), open file descriptors (/proc/PID/fd), threads and the bytes under OUT/tmp.

Writes OUT/samples.csv (one row per sample: seconds since the server was ready, rss_bytes, fds, threads,
tmp_bytes, jobs, errors), OUT/summary.json and OUT/server.log; prints the summary. Exit status 0 when every job
succeeded, 1 otherwise. The run stops at the first of --minutes/--seconds/--jobs, after the job in flight.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.media import demo  # noqa: E402

PRESETS = ("", json.dumps({"processors": ["frame_enhancer"], "frame_enhancer": {"scale": 2}}))
# Seconds the server may take to start answering (imports gradio and torch on a slow 2-core box).
START_TIMEOUT = 180


@dataclass(frozen=True)
class Sample:
    """One reading of the server: `t` seconds since it was ready; sizes in bytes; jobs and errors so far."""

    t: float
    rss_bytes: int
    fds: int
    threads: int
    tmp_bytes: int
    jobs: int
    errors: int


def process_stats(pid: int) -> tuple[int, int, int]:
    """(resident bytes, open file descriptors, threads) of process `pid`, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss = int(fields["VmRSS"].split()[0]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd")), int(fields["Threads"])


def folder_bytes(folder: Path) -> int:
    """Bytes in the files under `folder` (files that vanish while it is walked are skipped)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(out: Path, port: int) -> subprocess.Popen[bytes]:
    """`launch.py ui` on `port`, its temp files under OUT/tmp, its output in OUT/server.log."""
    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "GRADIO_TEMP_DIR": str(tmp / "gradio"), "PYTHONUNBUFFERED": "1"}
    with (out / "server.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "launch.py"), "ui", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )


def wait_ready(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with status {server.returncode} before answering; see server.log")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"the server did not answer {url} within {START_TIMEOUT} s; see server.log")


class Sampler(threading.Thread):
    """Samples the server every `interval` seconds (and once more on `stop`) into `samples`, and appends each row to
    the CSV file `csv_path` as it goes, so a soak that dies midway still leaves its readings."""

    def __init__(self, pid: int, tmp: Path, interval: float, csv_path: Path) -> None:
        super().__init__(daemon=True)
        self.pid, self.tmp, self.interval = pid, tmp, interval
        self.samples: list[Sample] = []
        self.jobs = self.errors = 0
        self.start_time = time.monotonic()
        self._halt = threading.Event()
        self._file = csv_path.open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=list(Sample.__dataclass_fields__))
        self._writer.writeheader()

    def sample(self) -> bool:
        """Take one reading; False when the server is gone."""
        try:
            rss, fds, threads = process_stats(self.pid)
        except (OSError, KeyError):
            return False
        t = round(time.monotonic() - self.start_time, 2)
        self.samples.append(Sample(t, rss, fds, threads, folder_bytes(self.tmp), self.jobs, self.errors))
        self._writer.writerow(asdict(self.samples[-1]))
        self._file.flush()
        return True

    def run(self) -> None:
        while not self._halt.wait(self.interval) and self.sample():
            pass

    def stop(self) -> None:
        self._halt.set()
        self.join()
        self.sample()
        self._file.close()


def _trend(samples: list[Sample], key: str) -> dict[str, float]:
    """First, last and largest value of `key` (bytes as MiB)."""
    values = [getattr(s, key) for s in samples]
    picked = {"first": values[0], "last": values[-1], "max": max(values)}
    return {k: round(v / 1024**2, 1) for k, v in picked.items()} if key.endswith("_bytes") else picked


def summarise(samples: list[Sample], job_seconds: list[float], errors: list[str], elapsed: float) -> dict[str, Any]:
    """The run in numbers: memory and temp bytes in MiB (first sample: the idle server; `warm`: the first sample
    after the first job, models loaded), the RSS slope over the second half in MiB per hour, and job counts."""
    warm = next((s for s in samples if s.jobs + s.errors >= 1), samples[-1])
    second_half = [s for s in samples if s.t >= samples[-1].t / 2]
    slope = None
    if len(second_half) >= 3 and second_half[-1].t > second_half[0].t:
        fit = statistics.linear_regression([s.t for s in second_half], [s.rss_bytes for s in second_half])
        slope = round(fit.slope * 3600 / 1024**2, 1)
    return {
        "minutes": round(elapsed / 60, 2),
        "jobs": len(job_seconds),
        "errors": len(errors),
        "error_messages": sorted(set(errors))[:5],
        "job_seconds_p50": round(statistics.median(job_seconds), 2) if job_seconds else None,
        "rss_mib": {**_trend(samples, "rss_bytes"), "warm": round(warm.rss_bytes / 1024**2, 1)},
        "rss_slope_mib_per_hour_second_half": slope,
        "fds": {**_trend(samples, "fds"), "warm": warm.fds},
        "threads": {**_trend(samples, "threads"), "warm": warm.threads},
        "tmp_mib": _trend(samples, "tmp_bytes"),
        "samples": len(samples),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, help="stop after this many minutes")
    parser.add_argument("--seconds", type=float, help="stop after this many seconds")
    parser.add_argument("--jobs", type=int, help="stop after this many jobs")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--preset", action="append", help="preset text (JSON or TOML) to cycle through")
    parser.add_argument("--out", type=Path, default=Path("soak"), help="folder for the samples and the summary")
    args = parser.parse_args(argv)
    limits = [x for x in (args.minutes and args.minutes * 60, args.seconds) if x]
    if not limits and not args.jobs:
        parser.error("give --minutes, --seconds or --jobs")
    budget = min(limits) if limits else float("inf")
    presets = args.preset or list(PRESETS)

    from gradio_client import Client, handle_file

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = demo.make_clip(out / "clip.mp4", width=160, height=90, count=8)
    source = demo.source_photo()
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server = start_server(out, port)
    job_seconds: list[float] = []
    errors: list[str] = []
    try:
        try:
            wait_ready(url, server)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        sampler = Sampler(server.pid, out / "tmp", args.interval, out / "samples.csv")
        sampler.sample()
        sampler.start()
        # Outputs are not downloaded: the client's own disk use is not what is measured.
        client = Client(url, verbose=False, download_files=False)
        while time.monotonic() - sampler.start_time < budget and (args.jobs is None or sampler.jobs < args.jobs):
            if server.poll() is not None:
                errors.append(f"the server exited with status {server.returncode}")
                break
            preset = presets[(sampler.jobs + sampler.errors) % len(presets)]
            start = time.monotonic()
            try:
                _, _, report = client.predict(
                    handle_file(str(target)), [handle_file(str(source))], preset, True, api_name="/run"
                )
                if report.get("frames") != 8:
                    raise RuntimeError(f"the job reported {report.get('frames')} frames, not 8")
                job_seconds.append(time.monotonic() - start)
                sampler.jobs += 1
            except Exception as exc:  # any failure is a finding of the soak: count it, keep going
                errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
                sampler.errors += 1
        elapsed = time.monotonic() - sampler.start_time
        sampler.stop()
    finally:
        server.terminate()  # SIGTERM: the CLI cancels like Ctrl-C and exits
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    summary = summarise(sampler.samples, job_seconds, errors, elapsed)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"samples: {out / 'samples.csv'}; summary: {out / 'summary.json'}; server log: {out / 'server.log'}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
