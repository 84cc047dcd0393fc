"""PyTorch sessions: modules built by spandrel from a state dict or converted from an ONNX graph (onnx2torch, for
models published as ONNX only, e.g. InSwapper), run under `inference_mode`, fp16 on CUDA.

Weights are only ever read with `torch.load(..., weights_only=True)` or from safetensors: never arbitrary
pickles (ARCHITECTURE.md §11).
"""

from __future__ import annotations

import copy
import logging
import pickle
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from engine.backends import Device
from engine.core.errors import BackendUnavailable, InvalidInput, OutOfMemory, UnsafeWeights

log = logging.getLogger(__name__)

StateDict = dict[str, torch.Tensor]


def load_state_dict(path: Path) -> StateDict:
    """Read a `.pth` (weights only) or `.safetensors` file and unwrap `params_ema` / `params` if present.

    Raises UnsafeWeights for a pickle that names anything but tensors and plain containers (nothing of it runs),
    InvalidInput for a file that is not weights at all.
    """
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            raw: dict = load_file(str(path), device="cpu")
        else:
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError … for bad files.
        if isinstance(exc, pickle.UnpicklingError) and "Weights only load failed" in str(exc):
            # torch's own text suggests weights_only=False, the one thing never to do here; name what it refused.
            found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
            what = f" ({found[1]})" if found else ""
            raise UnsafeWeights(
                f"{path} holds Python objects besides tensors{what}, which could run code when loaded, so it was "
                "refused; use the official file or a .safetensors copy"
            ) from exc
        raise InvalidInput(f"cannot read weights {path}: {exc}".splitlines()[0]) from exc
    for key in ("params_ema", "params", "state_dict"):
        if isinstance(raw.get(key), dict):
            raw = raw[key]
            break
    return {k: v for k, v in raw.items() if isinstance(v, torch.Tensor)}


def state_dict_from_numpy(arrays: Mapping[str, npt.NDArray[np.float32]]) -> StateDict:
    """Torch tensors owning copies of the arrays (the ncnn reader hands out read-only views)."""
    return {k: torch.from_numpy(np.array(v, dtype=np.float32, copy=True)) for k, v in arrays.items()}


def build_module(state_dict: StateDict, arch: str, scale: int) -> torch.nn.Module:
    """Build the architecture spandrel detects for `state_dict`, checking it is `arch` at `scale`."""
    from spandrel import MAIN_REGISTRY, ArchRegistry, ModelLoader, UnsupportedModelError

    registry = ArchRegistry()
    # spandrel keeps restrictively licensed architectures (CodeFormer) in a separate package; a registry of our
    # own adds them, for the architectures that need it only, without touching spandrel's global one.
    registry.add(*MAIN_REGISTRY, *(_extra_architectures() if arch in EXTRA_ARCHITECTURES else []))
    try:
        descriptor = ModelLoader(registry=registry).load_from_state_dict(state_dict)
    except UnsupportedModelError as exc:
        raise InvalidInput(f"the weights do not match any known architecture (expected {arch})") from exc
    if descriptor.scale != scale:
        raise InvalidInput(f"the weights are a ×{descriptor.scale} model, the manifest says ×{scale}")
    module = descriptor.model
    if type(module).__name__ != arch:
        raise InvalidInput(f"the weights are a {type(module).__name__}, the manifest says {arch}")
    if arch == "CodeFormer":
        module.fuse_convs_dict = _SizeKeyed(module.fuse_convs_dict)
    if arch in CALL_OPTIONS:
        return _Call(module.eval(), CALL_OPTIONS[arch]).eval()
    return module.eval()


class _SizeKeyed(torch.nn.ModuleDict):
    """CodeFormer's fusion layers keyed by feature size, also found under the key a trace makes of a size.

    CodeFormer looks its layers up by `str(x.shape[-1])`; while the ONNX exporter traces, a size is a 0-d
    tensor whose str is "tensor(32)". Same layers, same state dict keys; only the lookup is lenient.
    """

    def __getitem__(self, key: str) -> torch.nn.Module:
        if key.startswith("tensor(") and key.endswith(")"):
            key = key[len("tensor(") : -1]
        return super().__getitem__(key)


# The architectures of the manifest that spandrel keeps in spandrel-extra-arches.
EXTRA_ARCHITECTURES = frozenset({"CodeFormer"})


def _extra_architectures() -> list[Any]:
    try:
        with warnings.catch_warnings():
            # Importing the package imports CodeFormer's module, which decorates a function with torch.jit.script,
            # deprecated since torch 2.10 by a FutureWarning nothing on this side can act on.
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
            from spandrel_extra_arches import EXTRA_REGISTRY
    except ImportError:
        log.info("spandrel-extra-arches is not installed: CodeFormer weights cannot be loaded")
        return []
    return list(EXTRA_REGISTRY)


# Face restorers return auxiliary outputs beside the image (GFPGAN its intermediate RGB images, CodeFormer its
# code logits, RestoreFormer a None), and some need keyword arguments at every call: GFPGAN injects fresh random
# noise by default, and fixed noise makes a run reproducible (job replays, backend parity) at no visible cost.
CALL_OPTIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "GFPGANv1Clean": MappingProxyType({"randomize_noise": False}),
        "CodeFormer": MappingProxyType({}),
        "RestoreFormer": MappingProxyType({}),
    }
)


class _Call(torch.nn.Module):
    """Calls the wrapped module with fixed keyword arguments and returns its first output (the image).

    Positional inputs pass through in order (CodeFormer: the image, then its fidelity weight).
    """

    def __init__(self, module: torch.nn.Module, options: Mapping[str, Any]) -> None:
        super().__init__()
        self.module = module
        self.options = dict(options)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        out = self.module(*xs, **self.options)
        return out[0] if isinstance(out, tuple | list) else out


def onnx_to_module(path: Path) -> torch.nn.Module:
    """Convert the ONNX graph at `path` to an equivalent torch module (onnx2torch), in eval mode on the CPU.

    The module takes the graph's inputs positionally in graph order and returns its one output, or a tuple of
    its outputs in graph order. Only the graph's own operators run: nothing is unpickled.
    """
    import onnx
    from onnx2torch import convert

    try:
        graph = onnx.load(str(path))
    except Exception as exc:  # protobuf raises DecodeError and friends for files that are not ONNX.
        raise InvalidInput(f"cannot read ONNX graph {path}: {exc}".splitlines()[0]) from exc
    try:
        module = convert(graph)
    except Exception as exc:  # onnx2torch raises NotImplementedError (and others) for operators it lacks.
        raise BackendUnavailable(
            f"PyTorch cannot run {path.name}: onnx2torch failed ({exc}); use --backend onnx".splitlines()[0]
        ) from exc
    return module.eval()


def resolve_device(device: Device) -> torch.device:
    if device.kind == "cuda":
        if torch.cuda.is_available() and device.index < torch.cuda.device_count():
            return torch.device("cuda", device.index)
        if device.explicit:
            raise BackendUnavailable(
                f"PyTorch sees no CUDA device {device.index} (torch {torch.__version__}); use --device cpu"
            )
        log.info("PyTorch: no CUDA device, running on the CPU")
    return torch.device("cpu")


# Architectures whose every tensor is a 4-D image batch and which never `view` one: channels-last is safe for them.
# (GFPGAN's modulated convolutions hold 5-D weights and reshape activations with `view`, which channels-last breaks.)
CHANNELS_LAST_ARCHS = frozenset({"RRDBNet", "SRVGGNetCompact"})


class TorchSession:
    """A PyTorch module as a `Session`: float32 arrays in and out.

    `input_names`: the module's positional inputs in order (one for an image-to-image net; a converted ONNX
    graph's inputs in graph order). The module returns one tensor or a tuple/list of them (graph order).

    `channels_last` (for CHANNELS_LAST_ARCHS only): on CUDA, image inputs and weights go in channels-last memory
    order, which cuDNN's tensor-core convolutions run without a layout conversion per layer; the values are the
    same. (On the CPU it measured no steady gain, so it is not applied there.) `compile` wraps the module
    in `torch.compile` (the first call of each input shape compiles: seconds to minutes; later calls are faster).
    """

    backend = "torch"

    def __init__(
        self,
        module: torch.nn.Module,
        device: Device,
        *,
        fp16: bool = False,
        input_names: Sequence[str] = ("input",),
        threads: int = 0,
        channels_last: bool = False,
        compile: bool = False,
    ):
        if threads > 0:
            # PyTorch's intra-op pool is process-wide; 0 keeps its default (one thread per physical core).
            torch.set_num_threads(threads)
        self.device = resolve_device(device)
        # fp16 only pays (and is only reliably accurate) on CUDA; CPU half kernels are slow or missing.
        self.dtype = torch.float16 if fp16 and self.device.type == "cuda" else torch.float32
        self.channels_last = channels_last and self.device.type == "cuda"
        module = module.to(self.device, self.dtype).eval()
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.module: Any = torch.compile(module, dynamic=False) if compile else module
        self.provider = f"torch:{self.device}"
        self.input_names = list(input_names)

    @property
    def frames_device(self) -> str | None:
        """The device whose tensors `run_device` takes, when frames should stay there (CUDA); None on the CPU,
        where the host executor is the faster one."""
        return str(self.device) if self.device.type == "cuda" else None

    def run(self, inputs: Mapping[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        """Run on the float32 arrays under `inputs[name]` for each of `input_names`; returns every output as
        float32 (NCHW, contiguous), in the module's (graph) order."""
        xs = [torch.from_numpy(np.ascontiguousarray(inputs[name])) for name in self.input_names]
        return [t.float().contiguous().cpu().numpy() for t in self._forward(xs)]

    def run_device(self, inputs: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        """`run` on tensors (any float type, on this session's device): the outputs stay where they are computed,
        in the session's precision."""
        return self._forward([inputs[name] for name in self.input_names])

    def _forward(self, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        try:
            with torch.inference_mode():
                y = self.module(*(self._tensor(x) for x in xs))
        except (torch.OutOfMemoryError, MemoryError) as exc:
            raise OutOfMemory(f"{self.provider}: {exc}".splitlines()[0]) from exc
        except RuntimeError as exc:  # the CPU allocator's failure is a plain RuntimeError
            if "can't allocate memory" not in str(exc):
                raise
            raise OutOfMemory(f"{self.provider}: {exc}".splitlines()[0]) from exc
        outputs = y if isinstance(y, tuple | list) else (y,)
        # Some architectures also return auxiliary lists (GFPGAN: its intermediate RGB images): tensors only.
        return [t for t in outputs if isinstance(t, torch.Tensor)]

    def _tensor(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, self.dtype, non_blocking=True)
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x


def export_onnx(
    module: torch.nn.Module,
    path: Path,
    *,
    channels: int = 3,
    fixed_size: int | None = None,
    fidelity: str | None = None,
    fp16: bool = False,
    opset: int = 17,
) -> None:
    """Export an image-to-image module to ONNX with input `input` / output `output`.

    Without `fixed_size` the graph has dynamic N, H and W (convolutional upscalers). With it (a face model that
    takes one size, e.g. GFPGAN at 512) the graph is traced at 1×C×size×size and kept static: such models reshape
    by batch and size inside (modulated convolutions), which a dynamic trace cannot express.
    `fidelity`: the name of a second input, a float32 [1] weight the module takes after the image (CodeFormer).
    `fp16`: the graph computes in float16 (weights stored as float16, half the file) between a cast of its
    float32 inputs and a cast back of its output, so callers feed and read float32 either way.
    Uses the TorchScript exporter, which needs no `onnxscript` dependency.
    """
    module = module.cpu().float().eval()
    if fp16:
        # A copy: halving converts parameters in place, and the caller's module stays float32.
        module = _Half(copy.deepcopy(module)).eval()
    samples: tuple[torch.Tensor, ...] = (torch.rand(1, channels, fixed_size or 64, fixed_size or 64),)
    names = ["input"]
    if fidelity is not None:
        # Traced at 0.5 (CodeFormer's default): any weight above 0 follows the same path through the graph.
        samples += (torch.tensor([0.5]),)
        names.append(fidelity)
    axes = {0: "batch", 2: "height", 3: "width"}
    with warnings.catch_warnings():
        # The tracer warns that data-dependent branches (CodeFormer's `if weight > 0`) are fixed at trace time.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(
            module,
            samples,
            str(path),
            dynamo=False,
            input_names=names,
            output_names=["output"],
            dynamic_axes=None if fixed_size else {"input": axes, "output": axes},
            opset_version=opset,
        )
    _float32_only(path)


class _Half(torch.nn.Module):
    """Runs the wrapped module in float16 on float32 inputs and returns float32 (what an fp16 export traces)."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module.half()

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.module(*(x.half() for x in xs)).float()


def _float32_only(path: Path) -> None:
    """Rewrite double-precision casts and constants of an exported graph to float32.

    The TorchScript exporter turns Python float constants (GFPGAN's `* 2**0.5`) into float64 and casts the
    activations they multiply to float64; ONNX Runtime has no float64 convolution, and float32 is what every
    model here computes in anyway.
    """
    import onnx
    from onnx import TensorProto, numpy_helper

    model = onnx.load(str(path))
    changed = False
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.DOUBLE:
                attr.i = TensorProto.FLOAT
                changed = True
            elif node.op_type == "Constant" and attr.name == "value" and attr.t.data_type == TensorProto.DOUBLE:
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name))
                changed = True
    for i, init in enumerate(model.graph.initializer):
        if init.data_type == TensorProto.DOUBLE:
            model.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name)
            )
            changed = True
    if changed:
        onnx.save(model, str(path))
