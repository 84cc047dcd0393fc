"""GPU benchmark for a lent machine: one command, no downloads, results as JSON.

    python benchmarks/gpu.py --json gpu.json            # on a CUDA machine: ~5 minutes
    python benchmarks/gpu.py --reduced --json cpu.json  # anywhere: small sizes, CPU only (what the tests run)

Models, with random weights in the real architectures and sizes: RRDBNet ×4 (Real-ESRGAN x4plus) on 1080p
frames, GFPGANv1Clean on 512 px faces, and an InSwapper-sized graph (InSwapper's I/O — `target` 1×3×128×128,
`source` 1×512 → `output` — with about its parameter count). Each runs on TensorRT (fp16, engine cache), ONNX
Runtime's CUDA provider (fp32) and PyTorch on CUDA (fp16 and fp32, channels-last; fp16 in NCHW; fp16 with
torch.compile), after a warm-up; a configuration this machine cannot run (no onnxruntime-gpu, no TensorRT) is
listed under `skipped` with the reason. Then the frame enhancer's whole pipeline on a generated 1080p clip with
`--batch auto`, on each backend's default configuration. `--budget` bounds the run: what is left when it is spent
is skipped, and listed. `--reduced` shrinks every size and runs the CPU provider and PyTorch on the CPU instead,
so the script itself is tested where there is no GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.backends import Device  # noqa: E402
from engine.backends.onnx import OnnxSession  # noqa: E402
from engine.backends.torch import CHANNELS_LAST_ARCHS, TorchSession, export_onnx  # noqa: E402
from engine.tools import benchmark  # noqa: E402
from processors import REGISTRY, build_chain  # noqa: E402


class SwapNet(torch.nn.Module):
    """InSwapper-shaped: a strided conv encoder, style blocks modulated by the 512-d source latent (AdaIN), and an
    upsampling decoder; `width` 1024 gives about InSwapper's ~140 M parameters."""

    def __init__(self, width: int, blocks: int = 6) -> None:
        super().__init__()
        self.encode = torch.nn.Sequential(
            torch.nn.Conv2d(3, width // 4, 7, padding=3),
            torch.nn.LeakyReLU(0.2),
            torch.nn.Conv2d(width // 4, width // 2, 4, stride=2, padding=1),
            torch.nn.LeakyReLU(0.2),
            torch.nn.Conv2d(width // 2, width, 4, stride=2, padding=1),
            torch.nn.LeakyReLU(0.2),
        )
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(width, width, 3, padding=1) for _ in range(blocks))
        self.styles = torch.nn.ModuleList(torch.nn.Linear(512, 2 * width) for _ in range(blocks))
        self.norm = torch.nn.InstanceNorm2d(width)
        self.decode = torch.nn.Sequential(
            torch.nn.Upsample(scale_factor=4, mode="nearest"),
            torch.nn.Conv2d(width, width // 4, 3, padding=1),
            torch.nn.LeakyReLU(0.2),
            torch.nn.Conv2d(width // 4, 3, 7, padding=3),
            torch.nn.Sigmoid(),
        )

    def forward(self, target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        x = self.encode(target)
        for conv, style in zip(self.convs, self.styles, strict=True):
            gamma, beta = style(source)[:, :, None, None].chunk(2, dim=1)
            x = x + torch.relu(self.norm(conv(x)) * (1 + gamma) + beta)
        return self.decode(x)


def models(reduced: bool) -> list[tuple[str, str, torch.nn.Module, dict[str, tuple[int, ...]]]]:
    """(name, architecture, module with random weights, input shapes by name)."""
    from spandrel.architectures.ESRGAN.__arch.RRDB import RRDBNet
    from spandrel.architectures.GFPGAN import GFPGAN

    torch.manual_seed(0)
    frame = (1, 3, 64, 96) if reduced else (1, 3, 1080, 1920)
    gfpgan = GFPGAN(
        out_size=512, num_style_feat=512, channel_multiplier=2, decoder_load_path=None, fix_decoder=False,
        num_mlp=8, input_is_latent=True, different_w=True, narrow=0.25 if reduced else 1, sft_half=True,
    )  # fmt: skip
    return [
        ("rrdbnet_x4", "RRDBNet", RRDBNet(num_blocks=2 if reduced else 23), {"input": frame}),
        ("gfpgan_512", "GFPGANv1Clean", _First(gfpgan), {"input": (1, 3, 512, 512)}),
        (
            "inswapper_sized",
            "inswapper",
            SwapNet(64 if reduced else 1024),
            {"target": (1, 3, 128, 128), "source": (1, 512)},
        ),
    ]


class _First(torch.nn.Module):
    """The first output of a module that returns several (GFPGAN: the image), with fixed noise."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x, randomize_noise=False)[0]


def _export(module: torch.nn.Module, shapes: dict[str, tuple[int, ...]], path: Path) -> None:
    if len(shapes) == 1:
        (shape,) = shapes.values()
        export_onnx(module, path, fixed_size=shape[2] if shape[2] == shape[3] else None)
        return
    samples = tuple(torch.rand(*s) for s in shapes.values())
    torch.onnx.export(module.eval(), samples, str(path), dynamo=False, input_names=list(shapes),
                      output_names=["output"], opset_version=17)  # fmt: skip


def _time(call: Callable[[], Any], repeats: int) -> dict[str, float]:
    call()  # warm-up (kernel selection, TensorRT engine build on first use)
    call()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        runs.append(time.perf_counter() - start)
    median = statistics.median(runs)
    return {"ms_per_call": round(median * 1000, 3), "calls_per_s": round(1 / median, 3)}


def _measure(
    module: torch.nn.Module,
    arch: str,
    path: Path,
    shapes: dict[str, tuple[int, ...]],
    feeds: dict[str, np.ndarray],
    cfg: dict[str, Any],
    repeats: int,
    workdir: Path,
) -> dict[str, Any]:
    device = Device.parse(cfg["device"])
    if cfg["backend"] == "onnx":
        session: Any = OnnxSession(path, device, tensorrt=cfg["tensorrt"], fp16=cfg["fp16"],
                                   cache_dir=workdir / "cache")  # fmt: skip
    else:
        # A copy per configuration: a session converts its module in place (precision, memory layout).
        session = TorchSession(copy.deepcopy(module), device, fp16=cfg["fp16"], input_names=list(shapes),
                               channels_last=cfg["channels_last"] and arch in CHANNELS_LAST_ARCHS,
                               compile=cfg["compile"])  # fmt: skip
    start = time.perf_counter()
    timing = _time(lambda: session.run(feeds), repeats)
    extra = {"cuda_graph": session.cuda_graph} if cfg["backend"] == "onnx" else {}
    return {"config": cfg["name"], "provider": session.provider, **timing, **extra,
            "seconds_with_warmup": round(time.perf_counter() - start, 2)}  # fmt: skip


def configs(reduced: bool) -> list[dict[str, Any]]:
    """The configurations to compare, most informative first (a run out of time skips the last ones)."""
    base = {"tensorrt": False, "fp16": False, "channels_last": True, "compile": False}
    if reduced:
        return [
            {**base, "name": "onnx-cpu", "backend": "onnx", "device": "cpu"},
            {**base, "name": "torch-cpu", "backend": "torch", "device": "cpu"},
        ]
    return [
        {**base, "name": "onnx-tensorrt-fp16", "backend": "onnx", "device": "cuda", "tensorrt": True, "fp16": True},
        {**base, "name": "onnx-cuda-fp32", "backend": "onnx", "device": "cuda"},
        {**base, "name": "torch-cuda-fp16", "backend": "torch", "device": "cuda", "fp16": True},
        {**base, "name": "torch-cuda-fp32", "backend": "torch", "device": "cuda"},
        {**base, "name": "torch-cuda-fp16-nchw", "backend": "torch", "device": "cuda", "fp16": True,
         "channels_last": False},
        {**base, "name": "torch-cuda-fp16-compile", "backend": "torch", "device": "cuda", "fp16": True,
         "compile": True},
    ]  # fmt: skip


def unavailable(cfg: dict[str, Any]) -> str | None:
    """Why a configuration cannot run here (None when it can)."""
    import onnxruntime as ort

    if cfg["device"] == "cuda" and not torch.cuda.is_available():
        return "no CUDA device (PyTorch sees none)"
    if cfg["backend"] == "onnx":
        wanted = "CPUExecutionProvider" if cfg["device"] == "cpu" else "CUDAExecutionProvider"
        if cfg["tensorrt"]:
            wanted = "TensorrtExecutionProvider"
        if wanted not in ort.get_available_providers():
            return f"onnxruntime {ort.__version__} here has no {wanted} (providers: {ort.get_available_providers()})"
    return None


def run(
    reduced: bool,
    repeats: int,
    workdir: Path,
    budget: float,
    save: Callable[[dict[str, Any]], None] | None = None,
    only: list[str] | None = None,
    pipeline: bool = True,
) -> dict[str, Any]:
    """Every model on every runnable configuration, then the frame enhancer's pipeline; `budget` seconds after
    which the remaining measurements are skipped (and listed as such). A measurement that fails is recorded under
    `errors` and the rest go on; `save` gets the result so far after each measurement (a run cut short by a time
    limit still leaves its figures)."""
    import onnxruntime as ort

    deadline = time.perf_counter() + budget
    result: dict[str, Any] = {
        "mode": "reduced" if reduced else "full",
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "models": [],
        "pipeline": [],
        "skipped": [],
        "errors": [],
    }
    runnable = []
    for cfg in configs(reduced):
        reason = unavailable(cfg)
        if reason:
            result["skipped"].append({"config": cfg["name"], "reason": reason})
            print(f"skip {cfg['name']}: {reason}", flush=True)
        else:
            runnable.append(cfg)
    for name, arch, module, shapes in models(reduced):
        if only and name not in only:
            continue
        path = workdir / f"{name}.onnx"
        if any(cfg["backend"] == "onnx" for cfg in runnable):
            _export(module, shapes, path)
        feeds = {k: np.random.default_rng(0).random(s, dtype=np.float32) for k, s in shapes.items()}
        for cfg in runnable:
            if time.perf_counter() > deadline:
                result["skipped"].append({"config": cfg["name"], "model": name, "reason": "time budget spent"})
                continue
            try:
                entry = _measure(module, arch, path, shapes, feeds, cfg, repeats, workdir)
            except Exception as exc:  # one configuration failing must not lose the others' figures
                result["errors"].append({"config": cfg["name"], "model": name, "error": repr(exc)[:500]})
                print(f"{name:<16} {cfg['name']:<24} failed: {exc!r}"[:300], flush=True)
            else:
                result["models"].append({"model": name, **entry})
                print(f"{name:<16} {cfg['name']:<24} {entry['ms_per_call']:10.1f} ms", flush=True)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if save:
                save(result)
    resolution, frames = ("180p", 6) if reduced else ("1080p", 60)
    for cfg in runnable if pipeline else []:
        if cfg["compile"] or not cfg["channels_last"]:
            continue  # the pipeline runs each backend's default settings
        if time.perf_counter() > deadline:
            result["skipped"].append({"config": cfg["name"], "model": "pipeline", "reason": "time budget spent"})
            continue
        raw = {
            "processors": ["frame_enhancer"],
            "runtime": {**{k: cfg[k] for k in ("backend", "device", "tensorrt", "fp16")}, "batch": "auto"},
        }
        try:
            measured = benchmark.run(raw, resolution=resolution, frames=frames, registry=REGISTRY,
                                     build_chain=build_chain, workdir=workdir)  # fmt: skip
        except Exception as exc:
            result["errors"].append({"config": cfg["name"], "model": "pipeline", "error": repr(exc)[:500]})
            print(f"pipeline {cfg['name']:<24} failed: {exc!r}"[:300], flush=True)
            continue
        finally:
            if save:
                save(result)
        result["pipeline"].append({"config": cfg["name"], **measured})
        print(f"pipeline {cfg['name']:<24} {measured['fps']:8.2f} fps (floor {measured['floor_fps']:.2f}, batch "
              f"{measured['batch']}, ×{measured['batch_speedup']:.2f} over batch 1)", flush=True)  # fmt: skip
    return result


def _write(result: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reduced", action="store_true", help="small sizes on the CPU (no GPU needed)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", type=Path, default=Path("gpu-benchmark.json"))
    parser.add_argument("--budget", type=float, default=390, help="seconds after which the rest is skipped")
    parser.add_argument("--models", nargs="+", metavar="NAME", help="only these models (default: all)")
    parser.add_argument("--no-pipeline", action="store_true", help="skip the 1080p pipeline runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="facestudio-gpu-bench-") as tmp:
        result = run(args.reduced, args.repeats, Path(tmp), args.budget, save=lambda r: _write(r, args.json),
                     only=args.models, pipeline=not args.no_pipeline)  # fmt: skip
    _write(result, args.json)
    print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
