"""The soak script (benchmarks/soak.py) on a two-job run, so that it cannot rot: it starts the UI, runs jobs
through the API, samples the server and writes its files."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_two_job_soak_samples_the_server_and_summarises(tmp_path: Path) -> None:
    args = ["--jobs", "2", "--interval", "1", "--out", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["jobs"], summary["errors"], summary["error_messages"]) == (2, 0, [])
    with (tmp_path / "samples.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == summary["samples"] >= 3
    assert rows[0]["jobs"] == "0" and rows[-1]["jobs"] == "2"
    times = [float(r["t"]) for r in rows]
    assert times == sorted(times)
    # Readings of a live Python web server: tens of MiB at least, some open files and threads.
    assert all(int(r["rss_bytes"]) > 50 * 1024**2 and int(r["fds"]) > 3 and int(r["threads"]) >= 1 for r in rows)
    assert summary["rss_mib"]["max"] >= summary["rss_mib"]["first"] > 50
    assert summary["fds"]["last"] == int(rows[-1]["fds"])
    assert "facestudio UI on http://127.0.0.1:" in (tmp_path / "server.log").read_text()
