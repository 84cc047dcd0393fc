"""`launch.py faces scan`: the people of a target (sampled frames, nothing rendered), their pictures in one sheet."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cli.common import Parser, UsageError, download_progress, registry, service
from engine.job.settings import Preset, apply_overrides, load_preset_raw


def add(sub: Any, summary: str) -> None:
    """The `faces` command's arguments."""
    faces = sub.add_parser("faces", help=summary)
    fsub = faces.add_subparsers(dest="action", required=True, parser_class=Parser)
    fscan = fsub.add_parser("scan", help="list the people of a target, with a picture of each (renders nothing)")
    fscan.add_argument("--target", type=Path, required=True, help="image or video to look at")
    fscan.add_argument("--json", action="store_true", help="print the people as JSON")
    fscan.add_argument(
        "--sheet", type=Path, metavar="PNG", help="where the pictures go (default: TARGET-NAME.people.png here)"
    )
    fscan.add_argument("--preset", help="take the faces settings from this preset (analyser, detector, scan_every)")
    fscan.add_argument("--set", action="append", default=[], metavar="faces.FIELD=VALUE", help="override one")


def command(args: argparse.Namespace) -> int:
    """`faces scan`: the people of a target (sampled frames, nothing rendered), their pictures in one PNG sheet."""
    from engine import media

    raw = load_preset_raw(args.preset or "default")
    for item in args.set:
        if not item.strip().startswith("faces."):
            raise UsageError(f"faces scan takes only faces settings (--set faces.FIELD=VALUE), got {item!r}")
    preset = Preset.parse(apply_overrides(raw, args.set, registry()), registry())
    found = service().people(args.target, preset.faces, preset.runtime, downloads=download_progress)
    sheet = args.sheet or Path.cwd() / f"{args.target.name}.people.png"
    media.write_image(sheet, found.sheet())
    if args.json:
        print(json.dumps({"target": str(args.target), **found.describe(), "sheet": str(sheet)}, indent=2))
        return 0
    every = preset.faces.scan_every
    print(f"{args.target.name}: {found.who()} on {len(found.sampled)} sampled of {found.frames} frames "
          f"(every {every:g} s)")  # fmt: skip
    for person in found.people:
        span = f"{person.first:.1f}–{person.last:.1f} s" if person.last > person.first else f"{person.first:.1f} s"
        print(f"  person {person.number}: seen on {len(person.frames)} sampled frames, {span}, best picture at "
              f"frame {person.frame}, thumbnail {person.thumbnail_hash}")  # fmt: skip
    print(f"pictures: {sheet}")
    if found.people:
        example = " ".join(f"--map {p.number}=IMAGE" for p in found.people[:2])
        print(f"map them: python launch.py run --target {args.target} --output OUT {example}")
    return 0
