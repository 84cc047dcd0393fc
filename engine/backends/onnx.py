"""ONNX Runtime sessions: CPU, CUDA (device id) and TensorRT (fp16, engine cache), with the provider checked."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from engine import metrics
from engine.backends import Device, gpu_visible
from engine.errors import BackendUnavailable, OutOfMemory

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"


def provider_list(device: Device, *, tensorrt: bool, fp16: bool, cache_dir: Path) -> list[tuple[str, dict[str, str]]]:
    """The ordered providers to ask ONNX Runtime for; pure, so it is unit-tested without a GPU."""
    providers: list[tuple[str, dict[str, str]]] = []
    if device.kind == "cuda":
        if tensorrt:
            providers.append(
                (
                    TENSORRT,
                    {
                        "device_id": str(device.index),
                        "trt_fp16_enable": "True" if fp16 else "False",
                        "trt_engine_cache_enable": "True",
                        "trt_engine_cache_path": str(cache_dir / "tensorrt"),
                        "trt_timing_cache_enable": "True",
                        "trt_timing_cache_path": str(cache_dir / "tensorrt"),
                    },
                )
            )
        providers.append((CUDA, {"device_id": str(device.index)}))
    providers.append((CPU, {}))
    return providers


def session_options(threads: int) -> ort.SessionOptions:
    """Session options set deliberately: all graph optimisations, intra-op threads, no busy spinning.

    `threads` 0 means one per core. Spinning is off because on a shared CPU the spin steals the core that the
    decoder and encoder threads of the same job need.
    """
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or (os.cpu_count() or 1)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # ORT logs a multi-line error when the CUDA libraries are absent; we report the fallback ourselves.
    opts.log_severity_level = 4
    return opts


class OnnxSession:
    """An ONNX Runtime session over a model file. `provider` is the provider ORT actually chose."""

    backend = "onnx"

    def __init__(
        self,
        model: Path,
        device: Device,
        *,
        tensorrt: bool = False,
        fp16: bool = False,
        threads: int = 0,
        cache_dir: Path,
    ) -> None:
        if device.kind == "cuda" and not device.explicit and not gpu_visible():
            # "auto" on a machine without an NVIDIA GPU: go straight to the CPU instead of letting ORT try (and
            # loudly fail) to load the CUDA libraries.
            device = Device("cpu")
        wanted = provider_list(device, tensorrt=tensorrt, fp16=fp16, cache_dir=cache_dir)
        available = set(ort.get_available_providers())
        usable = [(name, opts) for name, opts in wanted if name in available]
        missing = [name for name, _ in wanted if name not in available]
        if missing and device.explicit:
            raise BackendUnavailable(
                f"ONNX Runtime here has no {', '.join(missing)}; install onnxruntime-gpu (and only it) "
                "or use --device cpu"
            )
        if tensorrt:
            (cache_dir / "tensorrt").mkdir(parents=True, exist_ok=True)
        # A provider that fails to load logs several lines through ORT's process-wide logger (the session's
        # own level does not cover provider loading); the failure is reported below as one typed error.
        ort.set_default_logger_severity(3 if device.kind == "cpu" else 4)
        try:
            self._session = ort.InferenceSession(
                str(model),
                sess_options=session_options(threads),
                providers=[name for name, _ in usable],
                provider_options=[opts for _, opts in usable],
            )
        except Exception as exc:  # ORT raises bare Exception subclasses for corrupt or unsupported graphs.
            raise BackendUnavailable(f"ONNX Runtime cannot load {model.name}: {exc}") from exc
        self.provider = self._session.get_providers()[0]
        if self.provider != usable[0][0]:
            if device.explicit:
                raise BackendUnavailable(
                    f"ONNX Runtime could not start {usable[0][0]} (its CUDA/cuDNN libraries did not load) and fell "
                    f"back to {self.provider}; install the CUDA 13 and cuDNN 9 libraries or use --device cpu"
                )
            log.warning("ONNX Runtime fell back from %s to %s", usable[0][0], self.provider)
            metrics.record_fallback(usable[0][0], self.provider)
        self.input_names = [i.name for i in self._session.get_inputs()]
        self.output_names = [o.name for o in self._session.get_outputs()]

    def run(self, inputs: Mapping[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        """Run on float32 NCHW arrays keyed by input name; returns the outputs in graph order.

        Raises OutOfMemory when ONNX Runtime's allocator fails (callers retry with fewer frames or tiles)."""
        try:
            return list(self._session.run(None, dict(inputs)))
        except Exception as exc:  # ORT raises RuntimeException/Fail subclasses of Exception; their text says why.
            if is_out_of_memory(exc):
                raise OutOfMemory(f"{self.provider}: {exc}".splitlines()[0]) from exc
            raise


def describe_graph(path: Path) -> dict[str, list[dict[str, object]]]:
    """The graph's declared inputs and outputs: name, element type and shape (symbolic axes by name)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}

    def entry(value: onnx.ValueInfoProto) -> dict[str, object]:
        tensor = value.type.tensor_type
        dims = [d.dim_param or d.dim_value for d in tensor.shape.dim]
        return {"name": value.name, "type": onnx.TensorProto.DataType.Name(tensor.elem_type).lower(), "shape": dims}

    return {
        "inputs": [entry(v) for v in graph.input if v.name not in initializers],
        "outputs": [entry(v) for v in graph.output],
    }


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an inference error is an allocation failure (ONNX Runtime and CUDA word them thus)."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or any(
        sign in text for sign in ("failed to allocate memory", "out of memory", "bad_alloc", "can't allocate memory")
    )
