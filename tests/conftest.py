"""Shared test setup: every test runs with its own models, cache and consent folders (never the user's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("FACESTUDIO_HOME", str(home / "config"))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(home / "models"))
    monkeypatch.delenv("FACESTUDIO_ACCEPT", raising=False)
    monkeypatch.delenv("FACESTUDIO_MANIFEST", raising=False)
    return home


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for derived ONNX graphs, shared by the session (the conversions are deterministic)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _cache_env(shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACESTUDIO_CACHE", str(shared_cache))
