"""`launch.py ui` (the default command): the studio served, with its flags checked first."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli.common import UsageError


def add(sub: Any) -> None:
    """The `ui` command's arguments."""
    ui = sub.add_parser("ui", help="start the web UI (the default command)")
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    ui.add_argument("--port", type=int, default=7860)
    ui.add_argument("--share", action="store_true", help="also serve through a public Gradio share link")
    ui.add_argument("--auth", metavar="USER:PASS", help="require this login (needed with --share)")
    ui.add_argument("--max-file-size", default="2gb", help="largest upload accepted, e.g. 500mb or 2gb")
    ui.add_argument("--queue-size", type=int, default=16, help="jobs that may wait at once")
    ui.add_argument("--ready-preset", default="default", help="preset whose models /readyz requires (name or file)")
    ui.add_argument("--min-free-gb", type=float, default=1.0, help="free temp space /readyz requires, in GB")
    ui.add_argument(
        "--keep-hours",
        type=float,
        default=24.0,
        help="how long a session's results and history are kept after its last request (default 24)",
    )


def ui_settings(args: argparse.Namespace) -> Any:
    """Check the serving flags: a share link is public, so it needs a login."""
    from webui.app import UISettings

    auth = None
    if args.auth is not None:
        user, _, password = args.auth.partition(":")
        if not user or not password:
            raise UsageError("--auth must be USER:PASS with both parts non-empty")
        auth = (user, password)
    if args.share and auth is None:
        raise UsageError("--share makes the app public: add --auth USER:PASS so only you and your collaborators get in")
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be 1–65535, got {args.port}")
    if args.queue_size < 1:
        raise UsageError("--queue-size must be at least 1")
    if not args.keep_hours > 0:
        raise UsageError(f"--keep-hours must be above 0, got {args.keep_hours:g}")
    return UISettings(host=args.host, port=args.port, share=args.share, auth=auth,
                      max_file_size=args.max_file_size, queue_size=args.queue_size,
                      ready_preset=args.ready_preset, min_free_gb=args.min_free_gb,
                      keep_hours=args.keep_hours)  # fmt: skip


def command(args: argparse.Namespace) -> int:
    settings = ui_settings(args)
    from webui.app import launch

    print(f"facestudio UI on http://{settings.host}:{settings.port} (Ctrl-C stops it)", file=sys.stderr)
    launch(settings)
    return 0
