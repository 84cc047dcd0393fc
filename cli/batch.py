"""`launch.py run` over several targets (FaceFusion's batch-run): `--target 'clips/*.mp4' --output
'out/{name}-swapped.mp4'`, or several `--target`s.

The targets are the patterns' matches, in the order given (each pattern's matches sorted by name; a pattern that
matches nothing is a usage error before anything runs). Each output is the `--output` template with `{name}` (the
target's file name without its extension), `{ext}` (its extension, without the dot) and `{index}` (1, 2, … in
batch order) filled in; several targets need a template that names each apart. The targets are rendered in turn
by one engine service, so every model is loaded once for the whole batch; each prints its summary line as a
single run does, a target that fails prints one `failed:` line and the rest carry on, and a total ends the batch:
exit 0 when every target was done, 2 when any failed (4 when cancelled, which stops the batch).
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from string import Formatter
from typing import Any

from cli.common import UsageError, require_consent, service
from engine.core.errors import Cancelled, FacestudioError

FIELDS = ("name", "ext", "index")


def wanted(targets: Sequence[str], output: Path | None) -> bool:
    """Whether a `run` is a batch: several targets, a target pattern, or an output template."""
    return len(targets) > 1 or any(glob.has_magic(t) for t in targets) or "{" in str(output or "")


def expand(patterns: Sequence[str]) -> list[Path]:
    """The targets `patterns` name, each once, in order (a pattern's matches sorted); a plain path is taken as it
    is (a missing one fails as its own target). UsageError for a pattern that matches nothing."""
    found: list[Path] = []
    for pattern in patterns:
        if not glob.has_magic(pattern):
            found.append(Path(pattern))
            continue
        matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
        if not matches:
            raise UsageError(f"--target {pattern!r} matches no file")
        found += matches
    return list(dict.fromkeys(found))


def outputs(targets: Sequence[Path], template: Path | None) -> list[Path]:
    """Each target's output: `template` with {name}, {ext} and {index} filled in. UsageError when it is missing,
    names another field, or gives two targets one output."""
    if template is None:
        raise UsageError("a batch needs --output, a template such as 'out/{name}-swapped.mp4'")
    text = str(template)
    names = {field for _, field, _, _ in Formatter().parse(text) if field is not None}
    unknown = sorted(names - set(FIELDS))
    if unknown:
        raise UsageError(f"--output {text!r} names {{{unknown[0]}}}; a template takes {{name}}, {{ext}}, {{index}}")
    made = [Path(text.format(name=t.stem, ext=t.suffix.lstrip("."), index=i)) for i, t in enumerate(targets, start=1)]
    twice = next((p for p in made if made.count(p) > 1), None)
    if twice is not None:
        raise UsageError(
            f"--output {text!r} gives two targets the one output {twice}: put {{name}} (or {{index}}) in it"
        )
    return made


def command(args: argparse.Namespace, run_one: Callable[[argparse.Namespace, Any], int]) -> int:
    """Run `args` (a `run` command whose --target is a list of patterns) over every target in turn with one
    service: `run_one(args for one target, the service)` is the single run. Prints the failures and the total."""
    if args.job is not None or args.demo:
        raise UsageError("a batch of targets takes neither --job nor --demo")
    targets = expand(args.target)
    made = outputs(targets, args.output)
    require_consent(args.yes)  # once, before the first target: the rest are under the same acknowledgement
    engine = service()
    started, failed = time.perf_counter(), []
    for target, output in zip(targets, made, strict=True):
        single = argparse.Namespace(**{**vars(args), "target": target, "output": output})
        try:
            run_one(single, engine)
        except Cancelled:
            raise
        except FacestudioError as exc:
            failed.append(target)
            print(f"failed: {target}: {exc}", file=sys.stderr)
    done = len(targets) - len(failed)
    listed = f"; failed: {', '.join(map(str, failed))}" if failed else ""
    print(f"batch: {done} of {len(targets)} targets done in {time.perf_counter() - started:.1f} s{listed}")
    return 2 if failed else 0
