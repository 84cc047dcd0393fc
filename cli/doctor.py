"""`launch.py doctor`: this machine checked for what facestudio needs, each problem with its fix."""

from __future__ import annotations

import argparse
import json
from typing import Any

from cli.common import registry, service
from engine.job.settings import Preset, load_preset_raw


def add(sub: Any, summary: str) -> None:
    """The `doctor` command's arguments."""
    doctor = sub.add_parser("doctor", help=summary)
    doctor.add_argument("--json", action="store_true", help="print the report as JSON (keys: docs/guide/doctor.md)")


def command(args: argparse.Namespace) -> int:
    """Report on this machine, each problem with its fix; exit 0 when no problem is an error (warnings may remain),
    2 when one is: something stops the default job, or a model file does not match its sha256."""
    from engine.tools import doctor

    known = []
    try:
        needed = _default_job_models()
    except Exception as exc:  # a broken install (a processor that fails to import …) is what the doctor reports
        needed = []
        message = f"the default job cannot be built: {type(exc).__name__}: {exc}".splitlines()[0]
        fix = "pip install -e . (or what the message names), then python launch.py presets check"
        known.append(doctor.Problem("presets", "error", message, fix))
    report = doctor.collect(needed, known=known)
    print(json.dumps(report, indent=2) if args.json else doctor.table(report))
    return 0 if report["ok"] else 2


def _default_job_models() -> list[str]:
    """The manifest ids the default preset loads: its processors' models, and its face analyser's when a processor
    needs faces."""
    preset = Preset.parse(load_preset_raw("default"), registry())
    return list(dict.fromkeys(model_id for model_id, _ in service().catalogue.for_preset(preset)))
