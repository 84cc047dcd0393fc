"""The command line (docs/ARCHITECTURE.md §7): one module per command (its arguments and its handler), and the
only place that maps errors to exit codes.

Exit codes: 0 done; 1 internal error (a bug); 2 invalid usage or input; 3 a model is unavailable; 4 cancelled.
`verify` exits 0 when a file's Content Credentials hold (or it has none) and 2 when they are invalid.
Errors print one line (`error: …`) to stderr, with the traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence

from cli import benchmark, doctor, faces, live, models, presets, run, ui, verify
from cli.common import Parser
from engine.core.errors import FacestudioError

log = logging.getLogger("facestudio")

# In the order `--help` lists them; each module has `add(subparsers)` and `command(args) -> exit code`.
COMMANDS = {"run": run, "faces": faces, "models": models, "benchmark": benchmark, "ui": ui, "live": live,
            "presets": presets, "verify": verify, "doctor": doctor}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="launch.py", description="facestudio: face swap and enhancement studio")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    # Errors reach the user as one `error:` line; the log is for --debug (what fell back, what was cached …).
    logging.basicConfig(level=logging.DEBUG if debug else logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _terminate)
    try:
        commands = [a for a in argv if a != "--debug"]
        if not commands or (commands[0].startswith("-") and commands[0] not in {"-h", "--help"}):
            argv = ["ui", *argv]  # no command (perhaps UI flags): the web UI
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command].command(args)
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
