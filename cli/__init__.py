"""The command line (docs/ARCHITECTURE.md §7): one module per command (its arguments and its handler), and the
only place that maps errors to exit codes.

Exit codes: 0 done; 1 internal error (a bug); 2 invalid usage or input; 3 a model is unavailable; 4 cancelled.
`verify` exits 0 when a file's Content Credentials hold (or it has none) and 2 when they are invalid.
Errors print one line (`error: …`) to stderr, with the traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from engine.core.errors import FacestudioError

log = logging.getLogger("facestudio")

# Each command in the order `--help` lists them, with its one-line summary; its module cli/NAME.py has
# `add(subparsers, summary)` and `command(args) -> exit code`, and is imported only when that command runs (what
# one command imports — the engine, PyTorch, Gradio — costs nothing to another, nor to `--help`).
COMMANDS = {
    "run": "process a target image or video",
    "faces": "the people in a target",
    "models": "list, fetch and verify model files",
    "benchmark": "measure a chain on generated media: latency, fps, overhead, memory",
    "ui": "start the web UI (the default command)",
    "live": "swap faces on a local camera as it films: a window, a virtual camera, a file",
    "presets": "list, check and describe presets",
    "verify": "check a file's Content Credentials and watermark: who, what, when",
    "doctor": "check this machine: packages, ffmpeg, providers, GPU, folders, models",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, that command's arguments alone (the others listed by name and summary, and
    `only=""` lists them all so): what `main` builds, so that parsing one command imports no other's module."""
    from cli.common import Parser

    parser = Parser(prog="launch.py", description="facestudio: face swap and enhancement studio")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, summary in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f"cli.{name}").add(sub, summary)
        else:
            sub.add_parser(name, help=summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # No network unless a download or --share asks for it: the Hugging Face hub library (Gradio imports it) neither
    # looks anything up nor sends telemetry; models download through engine/models/fetch.py, which it does not
    # affect. A value the user set is kept.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    debug = "--debug" in argv
    # Errors reach the user as one `error:` line; the log is for --debug (what fell back, what was cached …).
    logging.basicConfig(level=logging.DEBUG if debug else logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _terminate)
    try:
        commands = [a for a in argv if a != "--debug"]
        if not commands or (commands[0].startswith("-") and commands[0] not in {"-h", "--help"}):
            argv = ["ui", *argv]  # no command (perhaps UI flags): the web UI
        # The command is the first word that is not an option (the top level has no option taking a value).
        named = next((a for a in argv if not a.startswith("-")), "")
        args = build_parser(named if named in COMMANDS else "").parse_args(argv)
        return importlib.import_module(f"cli.{args.command}").command(args)
    except FacestudioError as exc:
        if debug:
            log.exception("failed")
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: cancelled", file=sys.stderr)
        return 4
    except Exception as exc:  # a bug: say so in one line, keep the traceback for --debug
        if debug:
            log.exception("internal error")
        print(
            f"error: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (a service manager, `kill`) cancels like Ctrl-C: the job cleans up and exits 4."""
    raise KeyboardInterrupt
