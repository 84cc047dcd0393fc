"""Offline, a run names every model file its job needs in one line — its processors' and its face analyser's —
the same files `models fetch --preset` fetches, not the first processor's alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cli
from engine.media import demo


def test_an_offline_run_names_every_missing_file_of_its_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    photo = str(demo.source_photo())
    output = tmp_path / "out.jpg"
    argv = ["run", "--source", photo, "--target", photo, "--output", str(output), "--preset", "inswapper"]
    assert cli.main([*argv, "--offline", "--yes"]) == 3
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith("error: missing model files (offline): "), line
    # The swapper and the recogniser it takes identities from (face_swapper), and buffalo_l's detector (faces).
    assert re.findall(r"(\S+) from https://", line) == ["inswapper_128.onnx", "w600k_r50.onnx", "det_10g.onnx"]
    assert not output.exists()


def test_models_fetch_for_the_default_preset_checks_its_embedded_files(capsys: pytest.CaptureFixture[str]) -> None:
    """The default job's models are dlib's (no ONNX or PyTorch file): fetching its preset needs no download and
    names the embedded files it checked, instead of failing on a model no backend loads."""
    assert cli.main(["models", "fetch", "--preset", "default"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [Path(line.removeprefix("ok ")).name for line in out] == [
        "shape_predictor_68_face_landmarks.dat",
        "dlib_face_recognition_resnet_model_v1.dat",
    ]
