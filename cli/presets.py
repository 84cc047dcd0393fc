"""`launch.py presets`: list, check and describe presets and every setting."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cli.common import Parser, UsageError, registry, service
from engine.core.errors import InvalidJob
from engine.job.settings import Preset, load_preset_raw, preset_schema


def add(sub: Any, summary: str) -> None:
    """The `presets` command's arguments."""
    presets = sub.add_parser("presets", help=summary)
    psub = presets.add_subparsers(dest="action", required=True, parser_class=Parser)
    psub.add_parser("list", help="built-in presets")
    pcheck = psub.add_parser("check", help="validate preset files (default: all built-in ones)")
    pcheck.add_argument("files", nargs="*", type=Path)
    psub.add_parser("schema", help="JSON Schema of a preset")
    poptions = psub.add_parser("options", help="every setting: values or range, unit, default, when it applies")
    poptions.add_argument("groups", nargs="*", metavar="GROUP", help="processor ids or faces, video, runtime")


def command(args: argparse.Namespace) -> int:
    from engine.job.settings import PRESETS_DIR

    if args.action == "schema":
        print(json.dumps(preset_schema(registry()), indent=2))
        return 0
    if args.action == "options":
        print(settings_help(args.groups))
        return 0
    if args.action == "list":
        for path in sorted(PRESETS_DIR.glob("*.toml")):
            preset = Preset.parse(load_preset_raw(path), registry())
            print(f"{path.stem:<20} {' → '.join(preset.processors)}")
        return 0
    files = args.files or sorted(PRESETS_DIR.glob("*.toml"))
    failed = 0
    for path in files:
        try:
            Preset.parse(load_preset_raw(path), registry())
            print(f"ok       {path}")
        except InvalidJob as exc:
            failed += 1
            print(f"invalid  {path}: {exc}")
    return 2 if failed else 0


def settings_help(groups: Sequence[str] = ()) -> str:
    """Every setting of the chosen groups (default: all) as `group.name  values; default; applies when …`, read
    from the same declarations as the UI's widgets and the preset schema."""
    from engine.core.options import describe
    from engine.job.settings import SETTINGS_GROUPS

    models: dict[str, Any] = {**{pid: cls.Options for pid, cls in registry().items()}, **SETTINGS_GROUPS}
    unknown = [g for g in groups if g not in models]
    if unknown:
        raise UsageError(f"unknown settings group {', '.join(unknown)}; valid: {', '.join(models)}")
    manifest = service().manifest()
    lines = []
    for group in groups or models:
        title = registry()[group].title if group in registry() else group
        lines.append(f"{group} — {title}")
        for option in describe(models[group], model_choices=lambda task: [m.id for m in manifest.for_task(task)]):
            lines.append(f"  {group}.{option.name}  {option.help_line()}")
    return "\n".join(lines)
