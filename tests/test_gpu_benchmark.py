"""The GPU benchmark script runs here in its reduced CPU mode and writes its JSON (no GPU was lent to test the
full mode; it uses the same code path with CUDA/TensorRT configurations)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_reduced_mode_measures_every_model_and_config(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.run(reduced=True, repeats=1, workdir=tmp_path)
    assert result["mode"] == "reduced"
    measured = {(m["model"], m["config"]) for m in result["models"]}
    models = {"rrdbnet_x4", "gfpgan_512", "inswapper_sized"}
    assert measured == {(m, c) for m in models for c in ("onnx-cpu", "torch-cpu")}
    assert all(m["ms_per_call"] > 0 for m in result["models"])
    assert [p["config"] for p in result["pipeline"]] == ["onnx-cpu", "torch-cpu"]
    assert all(p["frames"] == 6 and p["fps"] > 0 for p in result["pipeline"])
