"""`models export`: any PyTorch model in the manifest to ONNX (float32 or float16), its sha256 recorded and
verified, and the ONNX backend loading the export in place of a conversion."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

import cli
from engine import media as video
from engine.media import demo


def models_folder() -> Path:
    return Path(os.environ["FACESTUDIO_MODELS"])


def upscale(target: Path, out: Path, *extra: str) -> tuple[np.ndarray, dict]:
    """Run the frame enhancer (embedded realesr_animevideov3, ×2) on ONNX Runtime; (output pixels, sidecar entry)."""
    args = ["run", "--target", str(target), "--output", str(out), "--processors", "frame_enhancer", "--offline"]
    assert cli.main([*args, "--backend", "onnx", "--set", "frame_enhancer.scale=2", *extra, "--yes"]) == 0
    entry = json.loads(Path(str(out) + ".job.json").read_text())["processors"]["frame_enhancer"]
    return video.read_image(out)[0].astype(int), entry


@pytest.fixture
def target(tmp_path: Path) -> Path:
    path = tmp_path / "in.png"
    video.write_image(path, demo.photo()[100:196, 150:278])
    return path


def test_export_records_sha256_and_the_onnx_backend_uses_it(target: Path, tmp_path: Path, capsys) -> None:
    converted, entry = upscale(target, tmp_path / "converted.png")
    assert entry["file"].endswith(".param")  # no export yet: the embedded ncnn file, converted

    assert cli.main(["models", "export", "realesr_animevideov3", "--to", "onnx"]) == 0
    out = capsys.readouterr().out
    assert "input  input: float batch×3×height×width" in out and "output output: float" in out
    recorded = json.loads((models_folder() / "exports.json").read_text())["exports"]
    assert [(e["model"], e["file"]["filename"], e["file"]["precision"]) for e in recorded] == [
        ("realesr_animevideov3", "exports/realesr_animevideov3.onnx", "fp32")
    ]
    path = models_folder() / "exports/realesr_animevideov3.onnx"
    assert recorded[0]["file"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert recorded[0]["file"]["size"] == path.stat().st_size

    exported, entry = upscale(target, tmp_path / "exported.png")
    assert (entry["file"], entry["sha256"]) == ("exports/realesr_animevideov3.onnx", recorded[0]["file"]["sha256"])
    # Same weights (the ncnn file's), same graph: the same picture.
    assert np.abs(exported - converted).max() <= 1

    listing = {m["id"]: m for m in json.loads(_models_list_json(capsys))}
    files = {f["file"]: f["status"] for f in listing["realesr_animevideov3"]["files"]}
    assert files["exports/realesr_animevideov3.onnx"] == "present"


def _models_list_json(capsys) -> str:
    capsys.readouterr()
    assert cli.main(["models", "list", "--json"]) == 0
    return capsys.readouterr().out


def test_fp16_export_is_picked_for_fp16_jobs_on_a_gpu(
    target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.main(["models", "export", "realesr_animevideov3", "--to", "onnx"]) == 0
    assert cli.main(["models", "export", "realesr_animevideov3", "--to", "onnx", "--fp16"]) == 0
    half = models_folder() / "exports/realesr_animevideov3-fp16.onnx"
    full = models_folder() / "exports/realesr_animevideov3.onnx"
    # float16 weights: about half the file.
    assert half.stat().st_size < 0.6 * full.stat().st_size

    # No GPU here: `fp16` (on by default) does not apply on the CPU, so the float32 export serves.
    float32, entry32 = upscale(target, tmp_path / "fp32.png")
    assert entry32["file"] == "exports/realesr_animevideov3.onnx"
    # Where a GPU is visible, `fp16` picks the float16 export (run here by ONNX Runtime's CPU fallback), and
    # turning it off goes back to float32.
    monkeypatch.setattr("engine.models.runtime.gpu_visible", lambda: True)
    float16, entry16 = upscale(target, tmp_path / "fp16.png")
    assert entry16["file"] == "exports/realesr_animevideov3-fp16.onnx"
    _, entry_off = upscale(target, tmp_path / "off.png", "--set", "runtime.fp16=false")
    assert entry_off["file"] == "exports/realesr_animevideov3.onnx"
    # Half precision changes the picture by rounding only.
    diff = np.abs(float16 - float32)
    assert diff.max() <= 8 and diff.mean() < 0.5


def test_tampered_export_is_refused(target: Path, tmp_path: Path, capsys) -> None:
    assert cli.main(["models", "export", "realesr_animevideov3", "--to", "onnx"]) == 0
    path = models_folder() / "exports/realesr_animevideov3.onnx"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    capsys.readouterr()
    args = ["run", "--target", str(target), "--output", str(tmp_path / "o.png"), "--processors", "frame_enhancer"]
    assert cli.main([*args, "--backend", "onnx", "--offline", "--yes"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "export it again" in err
    assert not (tmp_path / "o.png").exists()


def test_export_refusals_are_one_line(capsys) -> None:
    # Published as ONNX only: nothing to export.
    assert cli.main(["models", "export", "inswapper_128", "--to", "onnx"]) == 2
    assert "ONNX only" in capsys.readouterr().err
    # The weights are not here and may not be downloaded: file, URL, licence and folder, like a run.
    assert cli.main(["models", "export", "codeformer", "--to", "onnx", "--offline"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("licence: codeformer: S-Lab") and len(err) == 2
    for part in ("codeformer.pth", "https://github.com/sczhou/CodeFormer/releases/download/v0.1.0/codeformer.pth",
                 "NON-COMMERCIAL", str(models_folder())):  # fmt: skip
        assert part in err[1], part
    assert not (models_folder() / "exports.json").exists()
    assert not list(models_folder().glob("exports/*"))


def test_unreadable_exports_file_is_a_typed_error(capsys) -> None:
    models_folder().mkdir(parents=True, exist_ok=True)
    (models_folder() / "exports.json").write_text("{not json")
    assert cli.main(["models", "list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exports.json is unreadable" in err and "export again" in err
