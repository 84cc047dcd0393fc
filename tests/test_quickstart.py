"""The README's quick start, unattended: its demo command runs with no terminal and no input (`setsid`, stdin
/dev/null) on a fresh copy of the checkout, and a run whose notice is not acknowledged stops having written nothing.

The commands are read from the README, not repeated here; the install half of the line (`pip install .`) is what
this test's own environment already did."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import media
from engine.core import consent
from engine.media import demo

ROOT = Path(__file__).resolve().parent.parent
# What a fresh clone does not have at its top: the VCS, environments, caches, models, outputs, built things.
NOT_IN_A_CLONE = {".git", ".venv", ".cache", "outputs", "models", "test-artifacts", "site"}
FACESTUDIO_ENV = ("FACESTUDIO_HOME", "FACESTUDIO_MODELS", "FACESTUDIO_CACHE", "FACESTUDIO_JOBS", "FACESTUDIO_ACCEPT",
                  "FACESTUDIO_INTEGRITY_KEY", "FACESTUDIO_SIGN_CERT", "FACESTUDIO_SIGN_KEY")  # fmt: skip


def quick_start() -> list[str]:
    """The shell lines of the README's quick start block."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Quick start\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def launch_argv(line: str) -> list[str]:
    """The `launch.py …` command of a quick-start line (`… && .venv/bin/python launch.py ARGS`) as argv for this
    interpreter: the venv's python is the one running the tests."""
    (step,) = [s for s in line.split("&&") if "launch.py" in s]
    words = shlex.split(step)
    assert words[0].endswith("python") and words[1] == "launch.py", step
    return [sys.executable, "launch.py", *words[2:]]


def fresh_clone(dest: Path) -> Path:
    """The checkout as a clone has it: no top-level NOT_IN_A_CLONE entry and no byte-compiled files anywhere."""

    def left_out(folder: str, names: list[str]) -> set[str]:
        top = NOT_IN_A_CLONE if Path(folder) == ROOT else set()
        return {n for n in names if n in top or n == "__pycache__" or n.endswith(".pyc")}

    shutil.copytree(ROOT, dest, ignore=left_out)
    return dest


def unattended(argv: list[str], cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run as a script with no terminal would: a new session (setsid: no controlling terminal), stdin /dev/null,
    a facestudio home that does not exist yet and no other FACESTUDIO_* setting."""
    clean = {k: v for k, v in os.environ.items() if k not in FACESTUDIO_ENV}
    return subprocess.run(
        argv, cwd=cwd, env={**clean, "FACESTUDIO_HOME": str(home), **env}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, start_new_session=True, timeout=600,
    )  # fmt: skip


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_the_quick_start_is_the_readme_s_two_commands() -> None:
    """The demo line acknowledges the notice visibly (`--yes`), and the second line is the test command."""
    demo_line, test_line = quick_start()
    assert launch_argv(demo_line)[2:] == ["run", "--demo", "--yes"]
    assert test_line.endswith('.venv/bin/pip install ".[test]" && .venv/bin/python -m pytest')


@pytest.mark.slow
def test_the_demo_runs_with_no_terminal_on_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    home = tmp_path / "home"
    done = unattended(launch_argv(quick_start()[0]), clone, home)
    assert done.returncode == 0, done.stderr
    output = clone / "outputs" / "demo" / "astronaut_out.mp4"
    assert re.search(rf"^done: 60 frames 320×180 → 320×180 .* → {re.escape(str(output))} ", done.stdout, re.M)
    info = media.probe(output)
    assert (info.frame_count, info.width, info.height, info.has_audio) == (60, 320, 180, True)
    # The README's "2.5-second clip": the demo's 60 frames at 24 fps.
    assert info.duration == pytest.approx(2.5, abs=0.05)
    assert "a 2.5-second demo clip" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert (clone / "outputs" / "demo" / "astronaut_out.mp4.job.json").is_file()
    # --yes acknowledges this run only: nothing about consent is recorded in the new home.
    assert not (home / consent.state_file().name).exists()


@pytest.mark.parametrize("demo_run", [False, True], ids=["own-files", "demo"])
def test_a_run_refused_for_want_of_consent_writes_nothing(tmp_path: Path, demo_run: bool) -> None:
    """No terminal, no --yes, no FACESTUDIO_ACCEPT: exit 2 with the one line saying how to acknowledge, and no
    home, key, cache, models folder, output or demo clip left behind."""
    clone = fresh_clone(tmp_path / "clone")
    work = tmp_path / "work"
    work.mkdir()
    source = work / "me.jpg"
    shutil.copyfile(demo.source_photo(), source)
    argv = [sys.executable, str(clone / "launch.py"), "run"]
    argv += ["--demo"] if demo_run else ["--source", "me.jpg", "--target", "me.jpg", "--output", "out.jpg"]
    home, cache, models = tmp_path / "home", tmp_path / "cache", tmp_path / "models"
    refused = unattended(argv, work, home, FACESTUDIO_CACHE=str(cache), FACESTUDIO_MODELS=str(models))
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: acknowledge the responsible-use notice first: rerun with --yes, set FACESTUDIO_ACCEPT=1"
    )
    assert (files_under(home), files_under(cache), files_under(models)) == ([], [], [])
    assert files_under(work) == ["me.jpg"]
    assert files_under(clone / "outputs") == []
