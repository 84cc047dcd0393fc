"""How much memory is free for model work: system RAM, or the GPU's own memory when models run on CUDA."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

from engine.backends import Device, gpu_visible


def available_ram() -> int:
    """Bytes of RAM the system can give without swapping (Linux MemAvailable; elsewhere free physical pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def available_gpu(index: int) -> int | None:
    """Free bytes on CUDA device `index` (PyTorch's view when it is installed, else nvidia-smi's); None when
    neither can tell."""
    if importable("torch"):
        import torch

        if torch.cuda.is_available() and index < torch.cuda.device_count():
            free, _ = torch.cuda.mem_get_info(index)
            return int(free)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = [smi, f"--id={index}", "--query-gpu=memory.free", "--format=csv,noheader,nounits"]
    result = subprocess.run(query, capture_output=True, text=True, timeout=10, check=False)
    try:
        return int(result.stdout.strip().splitlines()[0]) * 1024 * 1024
    except (ValueError, IndexError):
        return None


def available_memory(device: str) -> int:
    """Free bytes where models run for the job's `runtime.device` ("auto", "cpu", "cuda", "cuda:N")."""
    parsed = Device.parse(device)
    if on_gpu(device):
        free = available_gpu(parsed.index)
        if free is not None:
            return free
    return available_ram()


# Frames per call "auto" goes up to: on a GPU bigger batches keep the device busy; on a CPU the model already
# uses every core for one frame (batch 4 measured ×0.98–1.01 of batch 1 here), so a few frames only save calls.
AUTO_BATCH_CAP = {"cuda": 16, "cpu": 4}


def auto_batch(frame_bytes: int, available: int, *, on_gpu: bool) -> int:
    """Frames per model call for `runtime.batch = "auto"`: the largest power of two up to the device's cap whose
    working memory (`frame_bytes` per frame, bytes) fits in a quarter of `available` bytes (the rest is for the
    models' weights, the pipeline's queues and everything else on the machine); at least 1."""
    cap = AUTO_BATCH_CAP["cuda" if on_gpu else "cpu"]
    batch = 1
    while batch * 2 <= cap and batch * 2 * max(frame_bytes, 1) <= available // 4:
        batch *= 2
    return batch


def on_gpu(device: str) -> bool:
    """Whether models of a job with `runtime.device` run on a CUDA GPU (an explicit request, or auto with one)."""
    parsed = Device.parse(device)
    return parsed.kind == "cuda" and (parsed.explicit or gpu_visible())


def importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
