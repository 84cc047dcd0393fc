"""Inference backends behind one `Session` protocol (ARCHITECTURE.md §4).

`onnx.py` (ONNX Runtime) and `torch.py` (PyTorch) are imported lazily by `engine.models.runtime`, so a machine
without one of them can still use the other. Processors only ever see `Session`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from engine.core.errors import BackendUnavailable

BackendName = Literal["onnx", "torch"]

# ONNX Runtime's telemetry writes `$TMPDIR/.ses` when its package is imported: a file that no run may leave behind.
# Set here, before `onnx.py` (which is inside this package) imports it; a value the user set is kept.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


class Session(Protocol):
    """A loaded model ready to run.

    `backend`: "onnx" or "torch". `provider`: what actually runs it (e.g. "CUDAExecutionProvider",
    "CPUExecutionProvider", "torch:cuda:0", "torch:cpu"), checked after load, never assumed.
    """

    backend: BackendName
    provider: str
    input_names: Sequence[str]

    def run(self, inputs: Mapping[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        """Run the model on float32 arrays keyed by input name; returns float32 outputs in graph order."""
        ...


@dataclass(frozen=True)
class Device:
    """Where to run: kind "cpu" or "cuda", CUDA device index, and whether the caller insisted (`explicit`).

    An explicit GPU request that cannot be met is an error; `auto` falls back to the CPU with a warning.
    """

    kind: Literal["cpu", "cuda"]
    index: int = 0
    explicit: bool = False

    @classmethod
    def parse(cls, text: str) -> Device:
        """Parse "auto", "cpu", "cuda" or "cuda:N". "auto" means CUDA when usable, else CPU."""
        if text == "auto":
            return cls("cuda", 0, explicit=False)
        if text == "cpu":
            return cls("cpu", 0, explicit=True)
        if text == "cuda":
            return cls("cuda", 0, explicit=True)
        if text.startswith("cuda:") and text[5:].isdigit():
            return cls("cuda", int(text[5:]), explicit=True)
        raise BackendUnavailable(f"unknown device {text!r}; use auto, cpu, cuda or cuda:N")


def gpu_visible() -> bool:
    """True when an NVIDIA driver is visible (Linux device node, or nvidia-smi on PATH, as on Windows)."""
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None
