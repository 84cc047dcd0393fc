"""ONNX Runtime sessions: CPU, CUDA (device id) and TensorRT (fp16, engine cache), with the provider checked.

On CUDA and TensorRT, inputs and outputs go through IO binding: each input is copied to the GPU once and each output
is allocated there and copied back once, instead of ORT staging both through its own CPU buffers. A graph whose
inputs and outputs all have fixed shapes (InSwapper, GFPGAN) also runs as a CUDA graph on the CUDA provider: the
first call records the kernel launches and later calls replay them, into the same bound GPU buffers.
TensorRT engines and timing caches are kept per GPU model, TensorRT version and ONNX Runtime version, because an
engine built for one of them is invalid (or silently slower) on another.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import onnxruntime as ort  # after engine.backends, which turns ONNX Runtime's telemetry off

from engine.backends import Device, gpu_visible
from engine.backends.memory import importable
from engine.core import metrics
from engine.core.errors import BackendUnavailable, OutOfMemory

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"


def provider_list(
    device: Device, *, tensorrt: bool, fp16: bool, cache_dir: Path, cuda_graph: bool = False
) -> list[tuple[str, dict[str, str]]]:
    """The ordered providers to ask ONNX Runtime for; pure, so it is unit-tested without a GPU.

    `cache_dir` is where TensorRT keeps engines and timing caches (already keyed by GPU and versions: see
    `tensorrt_cache_dir`); `cuda_graph` turns on the CUDA provider's graph capture (fixed-shape graphs only)."""
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
                        "trt_engine_cache_path": str(cache_dir),
                        "trt_timing_cache_enable": "True",
                        "trt_timing_cache_path": str(cache_dir),
                    },
                )
            )
        cuda = {"device_id": str(device.index)}
        if cuda_graph and not tensorrt:
            cuda["enable_cuda_graph"] = "1"
        providers.append((CUDA, cuda))
    providers.append((CPU, {}))
    return providers


def tensorrt_cache_key(gpu: str, capability: str, tensorrt: str, onnxruntime: str) -> str:
    """A folder name for TensorRT engines valid on one GPU model with one TensorRT and ONNX Runtime version,
    e.g. `nvidia-h200-sm90-trt10.13.3-ort1.23.2`."""
    slug = re.sub(r"[^a-z0-9.]+", "-", gpu.lower()).strip("-") or "gpu"
    return f"{slug}-sm{capability.replace('.', '')}-trt{tensorrt}-ort{onnxruntime}"


def tensorrt_cache_dir(cache_dir: Path, device_index: int) -> Path:
    """`<cache>/tensorrt/<tensorrt_cache_key>` for CUDA device `device_index`, from nvidia-smi and the installed
    packages ("unknown" for what cannot be read, which still separates it from every known combination)."""
    gpu, capability = "unknown", "0"
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        query = [smi, f"--id={device_index}", "--query-gpu=name,compute_cap", "--format=csv,noheader"]
        try:
            out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=False).stdout
            gpu, capability = (part.strip() for part in out.splitlines()[0].split(",", 1))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            pass
    versions = []
    for names in (("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-libs"), ("onnxruntime-gpu", "onnxruntime")):
        versions.append(next((v for v in map(_version, names) if v), "unknown"))
    return cache_dir / "tensorrt" / tensorrt_cache_key(gpu, capability, *versions)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def static_shapes(session: ort.InferenceSession) -> bool:
    """Whether every input and output of the loaded graph has a fixed shape (no named or unknown axes)."""
    args = [*session.get_inputs(), *session.get_outputs()]
    return all(isinstance(d, int) and d > 0 for a in args for d in a.shape)


def preload_cuda_libraries() -> None:
    """Load the CUDA and cuDNN libraries the CUDA provider needs from NVIDIA's pip wheels (those PyTorch's CUDA
    build brings in the gpu profile), so that no system CUDA is needed: ONNX Runtime's own `preload_dlls`, a no-op
    on its CPU build and for libraries already loaded. What it prints (a version mismatch) goes to the debug log,
    not to stdout, which `--json` output owns."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:  # ONNX Runtime before 1.21
        return
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        preload()
    if printed.getvalue().strip():
        log.debug("onnxruntime.preload_dlls: %s", printed.getvalue().strip())


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
    """An ONNX Runtime session over a model file. `provider` is the provider ORT actually chose.

    `io_binding` None binds on CUDA and TensorRT only (on the CPU, ORT's plain run copies nothing extra);
    `cuda_graph` asks for graph capture on the CUDA provider, used when the graph's shapes are all fixed.
    """

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
        io_binding: bool | None = None,
        cuda_graph: bool = True,
    ) -> None:
        if device.kind == "cuda" and not device.explicit and not gpu_visible():
            # "auto" on a machine without an NVIDIA GPU: go straight to the CPU instead of letting ORT try (and
            # loudly fail) to load the CUDA libraries.
            device = Device("cpu")
        if device.kind == "cuda":
            preload_cuda_libraries()
        trt_cache = tensorrt_cache_dir(cache_dir, device.index) if tensorrt and device.kind == "cuda" else cache_dir
        available = set(ort.get_available_providers())
        wanted = provider_list(device, tensorrt=tensorrt, fp16=fp16, cache_dir=trt_cache)
        missing = [name for name, _ in wanted if name not in available]
        if missing and device.explicit:
            raise BackendUnavailable(
                f"ONNX Runtime here has no {', '.join(missing)}; install onnxruntime-gpu (and only it) "
                "or use --device cpu"
            )
        if tensorrt and device.kind == "cuda":
            trt_cache.mkdir(parents=True, exist_ok=True)
        self._session = self._open(model, device, wanted, available, threads)
        self.provider = self._session.get_providers()[0]
        usable = [name for name, _ in wanted if name in available]
        if self.provider != usable[0]:
            if device.explicit:
                raise BackendUnavailable(
                    f"ONNX Runtime could not start {usable[0]} (its CUDA/cuDNN libraries did not load) and fell "
                    f"back to {self.provider}; install the CUDA 13 and cuDNN 9 libraries or use --device cpu"
                )
            log.warning("ONNX Runtime fell back from %s to %s", usable[0], self.provider)
            metrics.record_fallback(usable[0], self.provider)
        graphed = cuda_graph and self.provider == CUDA and static_shapes(self._session)
        if graphed:
            # Capture needs the provider option at creation, and fixed shapes can only be read from a session.
            wanted = provider_list(device, tensorrt=False, fp16=fp16, cache_dir=trt_cache, cuda_graph=True)
            self._session = self._open(model, device, wanted, available, threads)
        self.input_names = [i.name for i in self._session.get_inputs()]
        self.output_names = [o.name for o in self._session.get_outputs()]
        self._device = device
        on_gpu = self.provider in (CUDA, TENSORRT)
        self._binding: _Binding | None = None
        if graphed or (io_binding if io_binding is not None else on_gpu):
            place = ("cuda", device.index) if on_gpu else ("cpu", 0)
            self._binding = _Binding(self._session, *place, fixed=graphed)

    @staticmethod
    def _open(
        model: Path,
        device: Device,
        wanted: list[tuple[str, dict[str, str]]],
        available: set[str],
        threads: int,
    ) -> ort.InferenceSession:
        usable = [(name, opts) for name, opts in wanted if name in available]
        # A provider that fails to load logs several lines through ORT's process-wide logger (the session's
        # own level does not cover provider loading); the failure is reported by the caller as one typed error.
        ort.set_default_logger_severity(3 if device.kind == "cpu" else 4)
        try:
            return ort.InferenceSession(
                str(model),
                sess_options=session_options(threads),
                providers=[name for name, _ in usable],
                provider_options=[opts for _, opts in usable],
            )
        except Exception as exc:  # ORT raises bare Exception subclasses for corrupt or unsupported graphs.
            raise BackendUnavailable(f"ONNX Runtime cannot load {model.name}: {exc}") from exc

    @property
    def cuda_graph(self) -> bool:
        """Whether calls replay a captured CUDA graph."""
        return self._binding is not None and self._binding.fixed

    @property
    def frames_device(self) -> str | None:
        """ "cuda:N" when this session runs on the GPU and PyTorch can hold tensors there (then frames stay on the
        device: `engine.backends.device`, fed through `run_device`); None otherwise."""
        if self.provider not in (CUDA, TENSORRT) or not importable("torch"):
            return None
        import torch

        return f"cuda:{self._device.index}" if torch.cuda.is_available() else None

    def run_device(self, inputs: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        """`run` on torch tensors where this session runs (CUDA; the CPU provider takes CPU tensors): inputs are
        bound in place through DLPack, outputs are allocated by ONNX Runtime on the same device and handed back as
        tensors (copied once on the device, so they outlive the binding). Nothing crosses to the host."""
        binding = self._binding or _Binding(self._session, "cpu", 0)
        try:
            return binding.run_device(inputs)
        except Exception as exc:  # as `run`: ORT's allocator failure, in its words
            if is_out_of_memory(exc):
                raise OutOfMemory(f"{self.provider}: {exc}".splitlines()[0]) from exc
            raise

    def run(self, inputs: Mapping[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        """Run on float32 NCHW arrays keyed by input name; returns the outputs in graph order.

        Raises OutOfMemory when ONNX Runtime's allocator fails (callers retry with fewer frames or tiles)."""
        try:
            if self._binding is not None:
                return self._binding.run(inputs)
            return list(self._session.run(None, dict(inputs)))
        except Exception as exc:  # ORT raises RuntimeException/Fail subclasses of Exception; their text says why.
            if is_out_of_memory(exc):
                raise OutOfMemory(f"{self.provider}: {exc}".splitlines()[0]) from exc
            raise


# float64: CodeFormer's `weight` in FaceFusion's export.
_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
_TORCH_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}


class _Binding:
    """IO binding of one session on `device` ("cuda" or "cpu").

    `fixed`: the session replays a CUDA graph, which reads and writes the same device buffers every call, so
    inputs and outputs live in buffers allocated once (inputs are updated in place). Otherwise every call binds
    its inputs afresh and lets ORT allocate the outputs on the device."""

    def __init__(self, session: ort.InferenceSession, device: str, index: int, *, fixed: bool = False) -> None:
        self.session = session
        self.device = device
        self.index = index
        self.fixed = fixed
        # One binding per session is shared state (bind, run, copy out): calls from two threads (the face-analysis
        # thread and the processors share a cached session) must not interleave.
        self.lock = threading.Lock()
        self.binding = session.io_binding()
        self.buffers: dict[str, ort.OrtValue] = {}
        if fixed:
            for arg in session.get_inputs():
                value = ort.OrtValue.ortvalue_from_shape_and_type(arg.shape, _NUMPY_TYPES[arg.type], device, index)
                self.buffers[arg.name] = value
                self.binding.bind_ortvalue_input(arg.name, value)
            for arg in session.get_outputs():
                value = ort.OrtValue.ortvalue_from_shape_and_type(arg.shape, _NUMPY_TYPES[arg.type], device, index)
                self.binding.bind_ortvalue_output(arg.name, value)
                self.buffers[arg.name] = value

    def run(self, inputs: Mapping[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        with self.lock:
            return self._run(inputs)

    def run_device(self, inputs: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        """Inputs and outputs as torch tensors on this binding's device, exchanged through DLPack."""
        import torch

        types = {arg.name: getattr(torch, _TORCH_TYPES[arg.type]) for arg in self.session.get_inputs()}
        # Contiguous, in the graph's element type; referenced here until the run is over (ORT only borrows them).
        tensors = {name: x.to(types[name]).contiguous() for name, x in inputs.items()}
        with self.lock:
            if self.device == "cuda":
                # The inputs were written on PyTorch's stream; ONNX Runtime reads them on its own.
                torch.cuda.current_stream(tensors[next(iter(tensors))].device).synchronize()
            if self.fixed:
                for name, x in tensors.items():
                    buffer = self.buffers[name]
                    if tuple(x.shape) != tuple(buffer.shape()):
                        raise ValueError(f"this graph takes {name} of shape {buffer.shape()}, got {list(x.shape)}")
                    buffer.update_inplace(ort.OrtValue.from_dlpack(x))
                self.session.run_with_iobinding(self.binding)
                values = [self.buffers[o.name] for o in self.session.get_outputs()]
            else:
                binding = self.session.io_binding()
                for name, x in tensors.items():
                    binding.bind_ortvalue_input(name, ort.OrtValue.from_dlpack(x))
                for arg in self.session.get_outputs():
                    binding.bind_output(arg.name, self.device, self.index)
                self.session.run_with_iobinding(binding)
                binding.synchronize_outputs()
                values = binding.get_outputs()
            # A copy on the device: ORT owns (and the next run reuses) the memory its outputs live in.
            return [torch.from_dlpack(value).clone() for value in values]

    def _run(self, inputs: Mapping[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        if self.fixed:
            for name, array in inputs.items():
                buffer = self.buffers[name]
                if tuple(array.shape) != tuple(buffer.shape()):
                    raise ValueError(f"this graph takes {name} of shape {buffer.shape()}, got {list(array.shape)}")
                buffer.update_inplace(np.ascontiguousarray(array, dtype=_NUMPY_TYPES[buffer.data_type()]))
            self.session.run_with_iobinding(self.binding)
            # A CPU buffer's array may share its memory, which the next call overwrites; a GPU one is a new copy.
            outputs = [self.buffers[o.name].numpy() for o in self.session.get_outputs()]
            return [o.copy() for o in outputs] if self.device == "cpu" else outputs
        for name, array in inputs.items():
            self.binding.bind_cpu_input(name, np.ascontiguousarray(array))
        for arg in self.session.get_outputs():
            self.binding.bind_output(arg.name, self.device, self.index)
        self.session.run_with_iobinding(self.binding)
        outputs = self.binding.copy_outputs_to_cpu()
        self.binding.clear_binding_inputs()
        self.binding.clear_binding_outputs()
        return list(outputs)


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
