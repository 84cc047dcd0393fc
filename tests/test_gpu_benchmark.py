"""The GPU benchmark script runs here in its reduced CPU mode (the full mode uses the same code path with the
CUDA/TensorRT configurations, and lists those a machine cannot run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_reduced_mode_measures_every_model_and_config(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.run(reduced=True, repeats=1, workdir=tmp_path, budget=600)
    assert result["mode"] == "reduced"
    measured = {(m["model"], m["config"]) for m in result["models"]}
    models = {"rrdbnet_x4", "gfpgan_512", "inswapper_sized"}
    assert measured == {(m, c) for m in models for c in ("onnx-cpu", "torch-cpu")}
    assert all(m["ms_per_call"] > 0 for m in result["models"])
    assert [p["config"] for p in result["pipeline"]] == ["onnx-cpu", "torch-cpu"]
    assert all(p["frames"] == 6 and p["fps"] > 0 for p in result["pipeline"])
    assert all(p["batch"] >= 1 for p in result["pipeline"]) and result["skipped"] == result["errors"] == []


def test_configurations_a_machine_cannot_run_are_named_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    full = {cfg["name"]: cfg for cfg in module.configs(reduced=False)}
    assert module.unavailable(module.configs(reduced=True)[0]) is None
    monkeypatch.setattr(module.torch.cuda, "is_available", lambda: False)
    assert module.unavailable(full["torch-cuda-fp16"]) == "no CUDA device (PyTorch sees none)"
    # A GPU with the CPU-only onnxruntime package (as on a machine whose image ships that one).
    monkeypatch.setattr(module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("onnxruntime.get_available_providers", lambda: ["CPUExecutionProvider"])
    reason = module.unavailable(full["onnx-tensorrt-fp16"])
    assert reason.startswith("onnxruntime ") and "has no TensorrtExecutionProvider" in reason
    assert "has no CUDAExecutionProvider" in module.unavailable(full["onnx-cuda-fp32"])
    assert module.unavailable(full["torch-cuda-fp16"]) is None
