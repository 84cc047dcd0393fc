"""The session-wide guard (tests/hermetic.py, tests/conftest.py): a test that writes into the checkout or the real
home fails, also through a child process or a module fixture; the session's home stands in for `~`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import hermetic
from conftest import HEAVY, ROOT

LEAKS = """
import os, subprocess, sys
from pathlib import Path

import pytest
from conftest import ROOT, SESSION


@pytest.fixture(scope="module")
def module_cache():
    (ROOT / ".cache" / "onnx").mkdir(parents=True)
    (ROOT / ".cache" / "onnx" / "graph.onnx").write_bytes(b"graph")


def test_writes_into_the_checkout():
    (ROOT / "outputs").mkdir()
    (ROOT / "outputs" / "out.png").write_bytes(b"png")


def test_a_child_process_changes_a_tracked_file():
    subprocess.run([sys.executable, "-c", "open('README.md', 'a').write('more')"], cwd=ROOT, check=True)


def test_a_module_fixture_writes_into_the_checkout(module_cache):
    pass


def test_writes_into_the_real_home(request):
    config = request.config.stash[SESSION].real_home / ".config" / "facestudio"
    config.mkdir(parents=True)
    (config / "consent.json").write_text("{}")


def test_home_is_the_sessions(request, tmp_path):
    assert Path.home() != request.config.stash[SESSION].real_home
    code = "from pathlib import Path; (Path.home() / '.config' / 'facestudio').mkdir(parents=True)"
    subprocess.run([sys.executable, "-c", code], check=True)
    (tmp_path / "out.png").write_bytes(b"png")


@pytest.mark.checkout_writes("docs/picture.png")
def test_a_write_on_purpose_is_allowed():
    (ROOT / "docs" / "picture.png").write_bytes(b"png")
"""


def test_the_guard_fails_tests_that_write_into_the_checkout_or_the_real_home(tmp_path: Path) -> None:
    """A checkout (this one's conftest, guard and settings) with tests that leak, run by pytest in a child
    process whose real home is a temporary folder: each leaking test fails, naming what it wrote."""
    checkout, real_home = tmp_path / "checkout", tmp_path / "real-home"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "docs").mkdir()
    real_home.mkdir()
    for name in ("tests/conftest.py", "tests/hermetic.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    (checkout / "tests" / "test_leaks.py").write_text(LEAKS)
    env = {**os.environ, "HOME": str(real_home), "PYTHONPATH": str(ROOT)}
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "FACESTUDIO_TESTS_REAL_HOME"):
        env.pop(name, None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-rA", "tests"],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    # The four leaking tests pass, then fail at their teardown, each naming what it wrote (once).
    passed = set(re.findall(r"^PASSED tests/test_leaks\.py::(\w+)$", out, re.MULTILINE))
    assert passed == set(re.findall(r"^def (test_\w+)\(", LEAKS, re.MULTILINE))
    errors = dict(re.findall(r"_ ERROR at teardown of (\w+) _+\n(.*?)(?=\n_{3,}|\n={3,})", out, re.DOTALL))
    head = "wrote outside the test's temporary folders (use tmp_path or tmp_path_factory; see tests/README.md):\n  "
    assert errors == {
        "test_writes_into_the_checkout": head + "new outputs\n  new outputs/out.png",
        "test_a_child_process_changes_a_tracked_file": head + "changed README.md",
        "test_a_module_fixture_writes_into_the_checkout": head
        + "new .cache\n  new .cache/onnx\n  new .cache/onnx/graph.onnx",
        "test_writes_into_the_real_home": head
        + "new ~/.config\n  new ~/.config/facestudio\n  new ~/.config/facestudio/consent.json",
    }, out


def test_a_guard_reports_each_change_once_and_skips_the_tools_own_folders(tmp_path: Path) -> None:
    checkout, home = tmp_path / "checkout", tmp_path / "home"
    (checkout / "engine").mkdir(parents=True)
    (checkout / "engine" / "a.py").write_text("a = 1\n")
    (checkout / ".venv").mkdir()
    (checkout / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    home.mkdir()
    guard = hermetic.Guard(checkout, home)
    assert guard.changes() == []
    # Python's bytecode caches, a virtual environment's files and .git are the tools', not the tests'.
    (checkout / "engine" / "__pycache__").mkdir()
    (checkout / "engine" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"pyc")
    (checkout / ".venv" / "lib").mkdir()
    (checkout / ".git").mkdir()
    assert guard.changes() == []
    (checkout / "engine" / "a.py").write_text("a = 2\n")
    (checkout / "models").mkdir()
    (home / ".cache").mkdir()
    assert guard.changes() == ["changed engine/a.py", "new models", "new ~/.cache"]
    assert guard.changes() == []  # reported once
    (checkout / "engine" / "a.py").unlink()
    assert guard.changes() == ["gone engine/a.py"]
    (checkout / "docs").mkdir()
    assert guard.changes(frozenset({"docs"})) == []


def test_the_heavy_files_the_scheduler_groups_exist() -> None:
    """conftest.HEAVY names test files by path: a renamed one would silently leave the group."""
    assert sorted(name for name in HEAVY if not (ROOT / name).is_file()) == []
