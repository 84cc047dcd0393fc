"""`launch.py models`: list, fetch, verify, export and quantize model files."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from cli.common import Parser, UsageError, download_progress, registry, say, service
from engine.job.settings import Preset, RuntimeSettings, load_preset_raw
from engine.models.manifest import EXPORTS_FILE


def add(sub: Any, summary: str) -> None:
    """The `models` command's arguments."""
    models = sub.add_parser("models", help=summary)
    msub = models.add_subparsers(dest="action", required=True, parser_class=Parser)
    mlist = msub.add_parser("list", help="every model with its licence and availability")
    mlist.add_argument("--json", action="store_true")
    mfetch = msub.add_parser("fetch", help="download model files (licence shown first)")
    mfetch.add_argument("ids", nargs="*", metavar="ID")
    mfetch.add_argument("--preset", help="fetch what a preset's processors need")
    mfetch.add_argument(
        "--trust-first",
        action="store_true",
        help="also fetch files no public record gives a sha256 for, and record the sha256 each arrives with",
    )
    mverify = msub.add_parser("verify", help="check the sha256 of every present model file")
    mverify.add_argument("ids", nargs="*", metavar="ID")
    mexport = msub.add_parser("export", help="export a PyTorch model to ONNX and record its sha256")
    mexport.add_argument("ids", nargs=1, metavar="ID")
    mexport.add_argument("--to", choices=["onnx"], required=True, help="the format to export to")
    mexport.add_argument("--fp16", action="store_true", help="compute in float16 (inputs and outputs stay float32)")
    mexport.add_argument("--offline", action="store_true", help="never download the weights to export")
    mquant = msub.add_parser(
        "quantize", help="make an int8 graph of a model for CPU jobs at runtime.precision=int8, quality-checked"
    )
    mquant.add_argument("ids", nargs=1, metavar="ID")
    mquant.add_argument(
        "--calibration", type=Path, metavar="DIR", help="images to calibrate on (default: the embedded demo media)"
    )
    mquant.add_argument("--offline", action="store_true", help="never download the model's file")
    mquant.add_argument(
        "--scheme",
        metavar="NAME",
        help="quantise under this scheme only (s8, s8-float-ends, s8-reduced, …: README); default: try the ones this "
        "CPU sums exactly, fastest first, and keep the first that passes the gate",
    )


def command(args: argparse.Namespace) -> int:
    catalogue = service().catalogue
    if args.action == "list":
        return _models_list(catalogue, args.json)
    ids = list(args.ids)
    for model_id in ids:
        catalogue.status(model_id)  # an unknown id is refused, naming the known ones
    if args.action == "verify":
        return _models_verify(catalogue, ids)
    if args.action == "export":
        return _models_export(catalogue, ids[0], fp16=args.fp16, offline=args.offline)
    if args.action == "quantize":
        return _models_quantize(ids[0], args.calibration, offline=args.offline, scheme=args.scheme)
    if getattr(args, "preset", None):
        preset = Preset.parse(load_preset_raw(args.preset), registry())
        for path in catalogue.ensure_preset(preset, download_progress, say):
            print(f"ok {path}")
        return 0
    if not ids:
        raise UsageError("name the models to fetch (see `python launch.py models list`) or give --preset")
    for path in catalogue.fetch(ids, trust_first=args.trust_first, progress=download_progress, say=say):
        print(f"ok {path}")
    return 0


def _models_list(catalogue: Any, as_json: bool) -> int:
    rows = catalogue.statuses(verify=True)
    if as_json:
        print(json.dumps([_list_row(row) for row in rows], indent=2))
        return 0
    print(f"models folder: {catalogue.models_folder()}")
    for row in rows:
        use = "" if row.commercial_use else " [NON-COMMERCIAL]"
        print(f"{row.id:<30} {row.task:<15} {row.licence}{use} — {row.title}")
        if row.caveat:
            print(f"    caveat: {row.caveat}")
        if row.needs:
            print(f"    needs {', '.join(row.needs)}: {row.chain_licence}")
        for f in row.files:
            size = f"{f.size / 1e6:.1f} MB" if f.size else "size not published"
            pin = {
                "one record": " — sha256 pinned to ONE public record",
                "trust-first": f" — no published sha256: `models fetch {row.id} --trust-first` records one",
                "first download": " — sha256 recorded at its first download here (no public record)",
            }.get(f.pin, "")
            print(f"    {f.status:<9} {f.format:<5} {f.file} ({size}){pin}")
    return 0


def _list_row(row: Any) -> dict[str, Any]:
    """`models list --json`'s object for one model (its keys are a contract scripts rely on)."""
    files = [dataclasses.asdict(f) for f in row.files]
    return {
        "id": row.id,
        "task": row.task,
        "title": row.title,
        "licence": row.licence,
        "commercial_use": row.commercial_use,
        "caveat": row.caveat,
        "needs": list(row.needs),
        "chain_commercial_use": row.chain_commercial_use,
        "chain_licence": row.chain_licence,
        "available": any(f["status"] in {"embedded", "present"} for f in files),
        "files": files,
    }


def _models_verify(catalogue: Any, ids: list[str]) -> int:
    """Every present file of `ids`, each cached conversion and int8 graph of them, checked as a job checks them."""
    checked = catalogue.verify(ids)
    for item in checked:
        print(f"{item.status:<10} {item.model:<30} {item.path}")
    for model in sorted({item.model for item in checked if item.status == "requantise"}):
        print(f"warning: a job at runtime.precision=int8 refuses the int8 graph of {model}: quantise it again with "
              f"`python launch.py models quantize {model}`", file=sys.stderr)  # fmt: skip
    bad = sum(item.status == "mismatch" for item in checked)
    if bad:
        print(f"error: {bad} file(s) do not match their sha256; delete or replace them", file=sys.stderr)
        return 3
    return 0


def _models_export(catalogue: Any, model_id: str, *, fp16: bool, offline: bool) -> int:
    """Export `model_id` to ONNX in the models folder; prints where, its sha256 and the graph's declared I/O."""
    say(f"licence: {catalogue.status(model_id).licence_line}")
    path, file, io = catalogue.export(model_id, fp16=fp16, offline=offline, progress=download_progress)
    print(f"exported {model_id} → {path} ({(file.size or 0) / 1e6:.1f} MB, {file.precision}, sha256 {file.sha256})")
    for kind in ("inputs", "outputs"):
        for value in io[kind]:
            shape = "×".join(str(d) for d in value["shape"])  # type: ignore[union-attr]
            print(f"  {kind[:-1]:<6} {value['name']}: {value['type']} {shape}")
    print(f"recorded in {path.parent / EXPORTS_FILE}; --backend onnx now loads it")
    return 0


def _models_quantize(model_id: str, calibration: Path | None, *, offline: bool, scheme: str | None) -> int:
    """Quantise `model_id` to int8 in the models folder; prints the gate's PSNR and both graphs' times."""
    from engine.models import quantize

    runtime = service().runtime(RuntimeSettings(offline=offline), download_progress)
    say(f"licence: {runtime.manifest.get(model_id).licence_line()}")
    frames = quantize.folder_calibration(calibration) if calibration else quantize.demo_calibration()
    say(f"calibrating {model_id} on {frames.source} (a minute or more on a CPU) …")
    made = quantize.quantize(runtime, model_id, frames, scheme)
    before = "; ".join(f"{t['scheme']} {t['psnr_db']:.1f} dB" for t in made.tried[:-1])
    print(
        f"quantised {model_id} → {made.path} as {made.scheme.name}{f' (after {before})' if before else ''}: "
        f"{made.psnr_db:.1f} dB PSNR against fp32 on the worst of {made.checked_on} held-out inputs (gate "
        f"{made.threshold_db:g} dB); {made.int8_ms:.0f} ms int8 vs {made.fp32_ms:.0f} ms fp32 per input here "
        f"(×{made.int8_ms / made.fp32_ms:.2f}); calibrated on {made.calibrated_on} inputs from {made.calibration}"
    )
    print("jobs on the CPU at runtime.precision=auto (the default) or int8 now run it")
    return 0
