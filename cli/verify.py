"""`launch.py verify`: a file's Content Credentials and watermark: who made it, with what, when."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add(sub: Any, summary: str) -> None:
    """The `verify` command's arguments."""
    verify = sub.add_parser("verify", help=summary)
    verify.add_argument(
        "file", type=Path, metavar="FILE", help="image or video (any tool's) to check, or its <file>.job.json sidecar"
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")


def command(args: argparse.Namespace) -> int:
    """Exit 0 when the file's credentials hold or it has none, 2 when they are invalid (tampered or damaged) or its
    sidecar was edited after signing."""
    from engine.provenance import verify

    report = verify.inspect(args.file)
    print(report.to_json() if args.json else verify.render(report))
    return verify.exit_code(report)
