"""What the commands share: the parser's error handling, argument types, the processor registry and the engine's
service, the consent check, download bars, and a job built from a command's arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.core import consent
from engine.core.errors import ConsentRequired, FacestudioError

if TYPE_CHECKING:
    from engine.job.processor import FrameProcessor
    from engine.job.settings import Job
    from engine.models import fetch


def registry() -> Mapping[str, type[FrameProcessor]]:
    """The processor registry, imported on first use so that a broken plugin or manifest is reported by `main`
    as a one-line error instead of failing at import time."""
    from processors import REGISTRY

    return REGISTRY


class UsageError(FacestudioError):
    exit_code = 2


class Parser(argparse.ArgumentParser):
    """argparse that raises (one line, exit 2) instead of printing usage and exiting itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `python {self.prog} --help`)")


def batch_size(text: str) -> int | str:
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is neither auto nor a whole number ≥ 1")


def positive(text: str) -> int:
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ≥ 1")


def service() -> Any:
    """The engine's front-end API (engine/serve/service.py) for this process's registry."""
    from engine.serve.service import Service

    return Service(registry())


def say(line: str) -> None:
    """A line for the user on stderr (what is being fetched, licences), leaving stdout to results."""
    print(line, file=sys.stderr)


def require_consent(yes: bool) -> None:
    """Stop unless the notice was acknowledged: before on this machine, by --yes/env, or now at a prompt."""
    if yes or consent.accepted_by_env() or consent.is_acknowledged():
        return
    if not sys.stdin.isatty():
        raise ConsentRequired(
            "acknowledge the responsible-use notice first: rerun with --yes, set FACESTUDIO_ACCEPT=1, "
            "or run once in a terminal and answer the prompt"
        )
    print(consent.NOTICE, file=sys.stderr)
    try:
        answer = input("Type 'yes' to acknowledge and continue: ").strip().lower()
    except EOFError:
        answer = ""
    if answer != "yes":
        raise ConsentRequired("the responsible-use notice was not acknowledged; nothing was done")
    consent.acknowledge()


def job_from_args(args: argparse.Namespace) -> Job:
    """Build the Job exactly as documented: preset (or --job sidecar), then --processors, --set, flags, paths."""
    from engine.job.settings import Job, apply_overrides, load_preset_raw

    if args.job is not None:
        from engine.run.sidecar import load_sidecar_job

        raw: dict[str, Any] = load_sidecar_job(args.job)
    else:
        raw = load_preset_raw(args.preset or "default")
    if args.processors:
        raw["processors"] = list(args.processors)
    raw = apply_overrides(raw, args.set, registry())
    runtime = dict(raw.get("runtime", {}))
    if args.backend:
        runtime["backend"] = args.backend
    if args.device:
        runtime["device"] = args.device
    if args.offline:
        runtime["offline"] = True
    raw["runtime"] = runtime
    target = args.target
    if isinstance(target, list):  # `run --target` is repeatable: several make a batch (cli/batch.py), a job has one
        if len(target) > 1:
            raise UsageError("a job has one target; give several --target to `run`, which runs them as a batch")
        target = target[0] if target else None
    for key, value in (("target", target), ("output", args.output)):
        if value is not None:
            raw[key] = str(value)
    if args.source:
        raw["sources"] = [str(p) for p in args.source]
    if args.map:
        if args.source:
            raise UsageError("give each person's images with --map N=IMAGE, not --source as well")
        sources, people = people_map(args.map)
        raw["sources"] = sources
        raw["faces"] = {**raw.get("faces", {}), "selector": "map", "people": people}
    return Job.parse(raw, registry())


def people_map(items: Sequence[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """`--map N=IMAGE[,IMAGE…]` items as the job's sources and `faces.people` (each person's images by position)."""
    sources: list[str] = []
    people: list[dict[str, Any]] = []
    for item in items:
        number, sep, images = item.partition("=")
        paths = [p.strip() for p in images.split(",") if p.strip()]
        if not sep or not number.strip().isdigit() or not paths:
            raise UsageError(f"--map takes N=IMAGE[,IMAGE…] with N a person's number (see `faces scan`), got {item!r}")
        people.append({"person": int(number), "sources": list(range(len(sources), len(sources) + len(paths)))})
        sources += paths
    return sources, people


def download_progress(item: fetch.Downloadable) -> Callable[[int, int | None], None] | None:
    """A tqdm byte bar for one download when stderr is a terminal."""
    from tqdm import tqdm

    if not sys.stderr.isatty():
        return None
    bar = tqdm(total=item.size, desc=item.filename, unit="B", unit_scale=True, file=sys.stderr)

    def update(done: int, total: int | None) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()
        if total is not None and done >= total:
            bar.close()

    return update
