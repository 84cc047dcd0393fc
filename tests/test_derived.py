"""Derived model files (cached conversions, exports) are checked against a record this installation signed: a job,
`doctor` and `models verify` find the same thing (engine/models/derived.py)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import cli
from engine import media
from engine.job.settings import RuntimeSettings
from engine.models import derived
from engine.models.runtime import Runtime
from engine.tools import doctor

MODEL = "realesr_animevideov3"  # the default upscaler: embedded ncnn files, converted to ONNX on first use
RUN = ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=2", "--backend", "onnx", "--yes"]


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache and a key of this test's own (the session's are shared by every test)."""
    monkeypatch.setenv("FACESTUDIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "secret" / "integrity.key"))
    return tmp_path / "cache"


@pytest.fixture
def target(tmp_path: Path) -> Path:
    path = tmp_path / "in.png"
    y, x = np.mgrid[0:24, 0:32]
    media.write_image(path, np.dstack([x * 8, y * 10, (x + y) * 4]).astype(np.uint8))
    return path


def _run(target: Path, output: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["run", "--target", str(target), "--output", str(output), *RUN])
    return code, capsys.readouterr().err


def _graph(cache: Path) -> Path:
    (graph,) = (cache / "onnx").glob(f"{MODEL}-*.onnx")
    return graph


def _verify(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["models", "verify", MODEL])
    return code, capsys.readouterr().out


def _doctor_models() -> tuple[list[dict[str, object]], list[doctor.Problem]]:
    rows, problems = doctor.check_models(Runtime(RuntimeSettings()), [MODEL])
    return [f for r in rows if r["id"] == MODEL for f in r["files"]], problems  # type: ignore[union-attr]


def test_a_conversion_is_recorded_and_signed_with_a_private_key(
    own_cache: Path, target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(target, tmp_path / "a.png", capsys)[0] == 0
    graph = _graph(own_cache)
    record = json.loads(derived.record_path(graph).read_text())
    assert record["sha256"] == hashlib.sha256(graph.read_bytes()).hexdigest() and record["converter"] >= 1
    key = derived.key_path()
    assert key == tmp_path / "secret" / "integrity.key" and stat.S_IMODE(key.stat().st_mode) == 0o600
    code, out = _verify(capsys)
    assert code == 0 and f"ok         {MODEL:<30} {graph}" in out
    files, problems = _doctor_models()
    assert {"file": graph.name, "format": "onnx (cached conversion)", "status": "present-verified",
            "path": str(graph)} in files and problems == []  # fmt: skip


def test_one_flipped_byte_is_refused_by_the_job_doctor_and_verify(
    own_cache: Path, target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(target, tmp_path / "a.png", capsys)[0] == 0
    graph = _graph(own_cache)
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0x01
    graph.write_bytes(bytes(data))

    code, err = _run(target, tmp_path / "b.png", capsys)
    assert code == 3 and err.count("\n") == 1 and f"{graph} has sha256" in err and "delete it" in err
    assert graph.read_bytes() == bytes(data)  # left for the user to inspect
    code, out = _verify(capsys)
    assert code == 3 and f"mismatch   {MODEL:<30} {graph}" in out
    files, problems = _doctor_models()
    assert any(f["path"] == str(graph) and f["status"] == "tampered" for f in files)
    assert [p.severity for p in problems] == ["error"] and str(graph) in problems[0].message


@pytest.mark.parametrize("forgery", ["record rewritten", "old .sha256 rewritten", "signed by another key"])
def test_changed_weights_with_a_matching_record_are_rebuilt_not_used(
    own_cache: Path, target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], forgery: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    assert _run(target, tmp_path / "a.png", capsys)[0] == 0
    good, _ = media.read_image(tmp_path / "a.png")
    graph = _graph(own_cache)
    original = graph.read_bytes()
    # Other weights: every float of the graph's initializers scaled, as a changed model would be.
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph))
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 0.5, init.name))
    forged = model.SerializeToString()
    graph.write_bytes(forged)
    digest = hashlib.sha256(forged).hexdigest()
    record = derived.record_path(graph)
    if forgery == "record rewritten":
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "sha256": digest}))
    elif forgery == "old .sha256 rewritten":
        record.unlink()
        graph.with_name(graph.name + ".sha256").write_text(digest + "\n")
    else:  # a record signed, but with a key that is not this installation's
        monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "other.key"))
        derived.record(graph, json.loads(record.read_text())["source"], json.loads(record.read_text())["converter"])
        monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "secret" / "integrity.key"))

    code, out = _verify(capsys)
    assert code == 0 and f"rebuild    {MODEL:<30} {graph}" in out
    files, problems = _doctor_models()
    assert any(f["path"] == str(graph) and f["status"] == "unrecorded" for f in files)
    assert [p.severity for p in problems] == ["warning"]

    assert _run(target, tmp_path / "b.png", capsys)[0] == 0
    np.testing.assert_array_equal(media.read_image(tmp_path / "b.png")[0], good)  # the real weights' picture
    assert graph.read_bytes() == original  # made again from the verified source
    assert _verify(capsys)[0] == 0 and _doctor_models()[1] == []


def test_an_export_whose_record_was_not_signed_here_is_refused(
    own_cache: Path, target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.main(["models", "export", MODEL, "--to", "onnx"]) == 0
    models = Path(os.environ["FACESTUDIO_MODELS"])
    export = models / f"exports/{MODEL}.onnx"
    assert derived.check(export, json.loads(derived.record_path(export).read_text())["source"], None)[0] == "ok"
    # Copied from another machine (another key), or exports.json and the graph rewritten together.
    monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "elsewhere.key"))
    code, err = _run(target, tmp_path / "o.png", capsys)
    assert code == 3 and str(export) in err and "export it again" in err
    code, out = _verify(capsys)
    assert code == 3 and f"mismatch   {MODEL:<30} {export}" in out
