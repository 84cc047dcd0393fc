"""Backend plumbing that needs no GPU: provider lists, device parsing, the provider actually used."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine.backends import Device, gpu_visible
from engine.backends.onnx import (
    OnnxSession,
    _Binding,
    provider_list,
    static_shapes,
    tensorrt_cache_dir,
    tensorrt_cache_key,
)
from engine.core.errors import BackendUnavailable


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
    assert trt[0][1]["trt_engine_cache_path"] == str(tmp_path)
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


def test_a_session_on_the_gpu_preloads_the_cuda_libraries_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gpu profile's CUDA and cuDNN come from PyTorch's NVIDIA wheels: ONNX Runtime's `preload_dlls` loads them
    before a CUDA session is made (what it prints stays off stdout); a CPU session does not ask."""
    from engine.backends import onnx as onnx_backend

    calls: list[str] = []

    def preload() -> None:
        calls.append("preload")
        print("WARNING: the installed PyTorch uses CUDA 12.x")

    real_session = onnx_backend.ort.InferenceSession

    def session(*args: object, **kwargs: object) -> object:
        calls.append("session")
        return real_session(*args, **kwargs)

    monkeypatch.setattr(onnx_backend.ort, "preload_dlls", preload, raising=False)
    monkeypatch.setattr(onnx_backend.ort, "InferenceSession", session)
    OnnxSession(_identity_model(tmp_path / "m.onnx"), Device("cpu", explicit=True), cache_dir=tmp_path)
    assert calls == ["session"]
    calls.clear()
    monkeypatch.setattr(onnx_backend, "gpu_visible", lambda: True)
    OnnxSession(_identity_model(tmp_path / "m.onnx"), Device.parse("auto"), cache_dir=tmp_path)
    assert calls[0] == "preload" and "session" in calls and capsys.readouterr().out == ""


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


def test_tensorrt_cache_is_keyed_by_gpu_and_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert tensorrt_cache_key("NVIDIA H200", "9.0", "10.13.3", "1.23.2") == "nvidia-h200-sm90-trt10.13.3-ort1.23.2"
    assert tensorrt_cache_key("NVIDIA GeForce RTX 4090", "8.9", "10.1", "1.20.0") != tensorrt_cache_key(
        "NVIDIA GeForce RTX 4090", "8.9", "10.1", "1.21.0"
    )
    # Without nvidia-smi the GPU is "unknown", which never shares a folder with a real GPU's engines.
    monkeypatch.setattr("engine.backends.onnx.shutil.which", lambda name: None)
    folder = tensorrt_cache_dir(tmp_path, 0)
    assert folder.parent == tmp_path / "tensorrt"
    ort_version = importlib.metadata.version("onnxruntime-gpu")
    assert folder.name.startswith("unknown-sm0-trt") and folder.name.endswith(f"-ort{ort_version}")
    trt = provider_list(Device("cuda", 0), tensorrt=True, fp16=True, cache_dir=folder)
    assert trt[0][1]["trt_engine_cache_path"] == trt[0][1]["trt_timing_cache_path"] == str(folder)


def test_cuda_graph_is_a_cuda_provider_option_only_without_tensorrt(tmp_path: Path) -> None:
    graphed = provider_list(Device("cuda", 2), tensorrt=False, fp16=False, cache_dir=tmp_path, cuda_graph=True)
    assert graphed[0] == ("CUDAExecutionProvider", {"device_id": "2", "enable_cuda_graph": "1"})
    with_trt = provider_list(Device("cuda", 2), tensorrt=True, fp16=False, cache_dir=tmp_path, cuda_graph=True)
    assert with_trt[1] == ("CUDAExecutionProvider", {"device_id": "2"})
    assert provider_list(Device("cpu"), tensorrt=False, fp16=False, cache_dir=tmp_path, cuda_graph=True) == [
        ("CPUExecutionProvider", {})
    ]


def _scale_model(path: Path, shape: list[int | None]) -> Path:
    """output = 2 · input (+ a second output, input + 1), so each output is checked against exact values."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["input", "two"], ["output"]), helper.make_node("Add", ["input", "one"], ["plus"])],
        "scale",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("plus", TensorProto.FLOAT, shape),
        ],
        initializer=[two, one],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    return path


def test_io_binding_gives_the_plain_run_s_outputs(tmp_path: Path) -> None:
    model = _scale_model(tmp_path / "m.onnx", [None, 3, None, None])
    bound = OnnxSession(model, Device("cpu", explicit=True), cache_dir=tmp_path, io_binding=True)
    plain = OnnxSession(model, Device("cpu", explicit=True), cache_dir=tmp_path)
    assert not bound.cuda_graph
    for shape in [(1, 3, 4, 5), (2, 3, 6, 2)]:  # a dynamic graph: each call binds its own shapes
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        got, want = bound.run({"input": x}), plain.run({"input": x})
        np.testing.assert_array_equal(got[0], 2 * x)
        np.testing.assert_array_equal(got[1], x + 1)
        np.testing.assert_array_equal(got[0], want[0])


def test_fixed_buffers_are_updated_in_place_and_not_shared_between_calls(tmp_path: Path) -> None:
    # The CUDA-graph path (one set of buffers, inputs updated in place), exercised on the CPU where it also runs.
    model = _scale_model(tmp_path / "m.onnx", [1, 3, 2, 2])
    session = OnnxSession(model, Device("cpu", explicit=True), cache_dir=tmp_path)
    assert static_shapes(session._session)
    binding = _Binding(session._session, "cpu", 0, fixed=True)
    a = np.full((1, 3, 2, 2), 1.5, np.float32)
    b = np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2)
    first = binding.run({"input": a})
    second = binding.run({"input": b})
    np.testing.assert_array_equal(first[0], 2 * a)  # not overwritten by the second call
    np.testing.assert_array_equal(second[0], 2 * b)
    np.testing.assert_array_equal(second[1], b + 1)
    with pytest.raises(ValueError, match=r"this graph takes input of shape \[1, 3, 2, 2\], got \[1, 3, 4, 4\]"):
        binding.run({"input": np.zeros((1, 3, 4, 4), np.float32)})
    assert not static_shapes(
        OnnxSession(
            _scale_model(tmp_path / "d.onnx", [None, 3, 2, 2]), Device("cpu", explicit=True), cache_dir=tmp_path
        )._session
    )


def test_torch_compile_gives_the_eager_module_s_output() -> None:
    torch = pytest.importorskip("torch")
    from engine.backends.torch import TorchSession

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 3, 1))
    x = {"input": np.random.default_rng(1).random((2, 3, 8, 8), dtype=np.float32)}
    eager = TorchSession(module, Device("cpu", explicit=True))
    compiled = TorchSession(module, Device("cpu", explicit=True), compile=True)
    assert not eager.channels_last  # channels-last is a CUDA layout here; the CPU keeps NCHW
    (want,), (got,) = eager.run(x), compiled.run(x)
    assert got.shape == (2, 3, 8, 8) and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, atol=1e-5)
