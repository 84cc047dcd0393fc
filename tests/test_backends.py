"""Backend plumbing that needs no GPU: provider lists, device parsing, the provider actually used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine.backends import Device, gpu_visible
from engine.backends.onnx import OnnxSession, provider_list
from engine.errors import BackendUnavailable


def test_device_parse() -> None:
    assert Device.parse("auto") == Device("cuda", 0, explicit=False)
    assert Device.parse("cpu") == Device("cpu", 0, explicit=True)
    assert Device.parse("cuda:3") == Device("cuda", 3, explicit=True)
    with pytest.raises(BackendUnavailable, match="unknown device 'gpu'; use auto, cpu, cuda or cuda:N"):
        Device.parse("gpu")


def test_provider_lists(tmp_path: Path) -> None:
    assert provider_list(Device("cpu"), tensorrt=False, fp16=True, cache_dir=tmp_path) == [("CPUExecutionProvider", {})]
    trt = provider_list(Device("cuda", 1), tensorrt=True, fp16=True, cache_dir=tmp_path)
    assert [name for name, _ in trt] == ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert trt[0][1]["device_id"] == "1" and trt[0][1]["trt_fp16_enable"] == "True"
    assert trt[0][1]["trt_engine_cache_path"] == str(tmp_path / "tensorrt")
    assert trt[1][1] == {"device_id": "1"}


def _identity_model(path: Path) -> Path:
    node = helper.make_node("Identity", ["input"], ["output"])
    graph = helper.make_graph(
        [node],
        "id",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 3, None, None])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [None, 3, None, None])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    return path


def test_cpu_session_reports_cpu_provider(tmp_path: Path) -> None:
    session = OnnxSession(_identity_model(tmp_path / "m.onnx"), Device("cpu", explicit=True), cache_dir=tmp_path)
    assert session.provider == "CPUExecutionProvider"
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2)
    np.testing.assert_array_equal(session.run({"input": x})[0], x)


def test_auto_device_without_gpu_falls_back_to_cpu(tmp_path: Path) -> None:
    # On a machine without a usable GPU, "auto" must run (on the CPU) and say so; it never assumes CUDA ran.
    session = OnnxSession(_identity_model(tmp_path / "m.onnx"), Device.parse("auto"), cache_dir=tmp_path)
    if gpu_visible():
        assert session.provider in {"CPUExecutionProvider", "CUDAExecutionProvider"}
    else:
        assert session.provider == "CPUExecutionProvider"


@pytest.mark.skipif(gpu_visible(), reason="checks the refusal on a machine without a GPU")
def test_explicit_cuda_without_gpu_is_one_typed_error(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable) as info:
        OnnxSession(_identity_model(tmp_path / "m.onnx"), Device.parse("cuda"), cache_dir=tmp_path)
    assert "\n" not in str(info.value) and "--device cpu" in str(info.value)


def test_corrupt_model_is_a_typed_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(BackendUnavailable, match="ONNX Runtime cannot load bad.onnx"):
        OnnxSession(bad, Device("cpu", explicit=True), cache_dir=tmp_path)
