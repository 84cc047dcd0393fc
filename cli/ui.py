"""`launch.py ui` (the default command): the studio served, with its flags checked first.

The flags are the operator's: how the app is served, and what one user may use of it (docs/SECURITY.md). Nothing is
printed as started, and nothing is made on disk, until the server listens: a taken port or a share link that
cannot be made is one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli.common import UsageError, positive


def add(sub: Any, summary: str) -> None:
    """The `ui` command's arguments."""
    ui = sub.add_parser("ui", help=summary)
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
    limits = ui.add_argument_group("what one user may use (web and API users alike; see docs/SECURITY.md)")
    limits.add_argument("--max-pixels", type=positive, help="largest frame of a job, width × height (default: 8192²)")
    limits.add_argument("--max-frames", type=positive, default=54_000, help="frames a job may render (default 54000)")
    limits.add_argument(
        "--jobs-per-user", type=positive, default=2, help="runs or API jobs one user may have waiting or running"
    )
    limits.add_argument(
        "--disk-per-user-gb", type=float, default=20.0, help="what one session may keep (uploads, results), in GB"
    )
    limits.add_argument("--live-streams", type=positive, default=4, help="live streams at once (one per session)")
    limits.add_argument(
        "--server-preset",
        metavar="NAME|FILE",
        help="the server's settings every web and API job runs with (runtime.device, runtime.threads …)",
    )


def ui_settings(args: argparse.Namespace) -> Any:
    """Check the serving flags: a share link is public, so it needs a login; a server preset holds only the
    server's settings."""
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
    if not args.disk_per_user_gb > 0:
        raise UsageError(f"--disk-per-user-gb must be above 0, got {args.disk_per_user_gb:g}")
    settings = UISettings(host=args.host, port=args.port, share=args.share, auth=auth,
                          max_file_size=args.max_file_size, queue_size=args.queue_size,
                          ready_preset=args.ready_preset, min_free_gb=args.min_free_gb,
                          keep_hours=args.keep_hours, max_pixels=args.max_pixels, max_frames=args.max_frames,
                          jobs_per_user=args.jobs_per_user, disk_per_user_gb=args.disk_per_user_gb,
                          live_streams=args.live_streams, server_preset=args.server_preset)  # fmt: skip
    if settings.server_preset:
        from cli.common import registry
        from webui.app import policy

        policy(settings, registry())  # a bad server preset is one line now, not after the server started
    return settings


def command(args: argparse.Namespace) -> int:
    settings = ui_settings(args)
    from webui.app import launch

    app = launch(settings, block=False)
    where = f"http://{settings.host}:{settings.port}" + (f" and {app.share_url}" if app.share_url else "")
    print(f"facestudio UI on {where} (Ctrl-C stops it)", file=sys.stderr)
    app.block_thread()
    return 0
