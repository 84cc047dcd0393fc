"""`launch.py benchmark`: a chain measured on generated media: latency, fps, overhead against its models, memory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.common import batch_size, registry
from engine.job.settings import apply_overrides, load_preset_raw


def add(sub: Any, summary: str) -> None:
    """The `benchmark` command's arguments."""
    bench = sub.add_parser("benchmark", help=summary)
    bench.add_argument("--processors", nargs="+", metavar="ID", help="chain to measure (default: frame_enhancer)")
    bench.add_argument("--preset", help="take the settings from this preset (its processors unless given)")
    bench.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE", help="override one setting")
    bench.add_argument("--backend", choices=["auto", "onnx", "torch"])
    bench.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    bench.add_argument("--resolution", default="360p", help="180p, 360p, 720p or 1080p")
    bench.add_argument("--frames", type=int, default=60, help="length of the generated clip")
    bench.add_argument("--batch", type=batch_size, help="frames per processor call: auto or N (default: the preset's)")
    bench.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "int8"],
        help="runtime.precision of the run; auto and int8 also measure each int8 graph that ran against its fp32 graph",
    )
    bench.add_argument("--json", type=Path, help="write the result as JSON here")
    bench.add_argument("--plot", type=Path, help="write a PNG plot here")


def command(args: argparse.Namespace) -> int:
    from engine.tools import benchmark
    from processors import build_chain

    raw = load_preset_raw(args.preset) if args.preset else {}
    if args.processors or not args.preset:
        raw["processors"] = list(args.processors or ["frame_enhancer"])
    raw = apply_overrides(raw, args.set, registry())
    runtime = dict(raw.get("runtime", {}))
    for key, value in (
        ("backend", args.backend),
        ("device", args.device),
        ("batch", args.batch),
        ("precision", args.precision),
    ):
        if value is not None:
            runtime[key] = value
    raw["runtime"] = runtime
    result = benchmark.run(raw, resolution=args.resolution, frames=args.frames, registry=registry(),
                           build_chain=build_chain)  # fmt: skip
    print(benchmark.table(result))
    if args.json:
        print(f"json: {benchmark.write_json(result, args.json)}")
    if args.plot:
        print(f"plot: {benchmark.plot(result, args.plot)}")
    return 0
