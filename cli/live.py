"""`launch.py live`: a local camera through the chain in real time, into a window, a virtual camera, a folder or
a file."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from cli.common import UsageError, job_from_args, positive, registry, require_consent


def add(sub: Any, summary: str) -> None:
    """The `live` command's arguments."""
    live = sub.add_parser("live", help=summary)
    live.add_argument("--camera", required=True, metavar="N|FILE", help="camera number (0: the first) or a video file")
    live.add_argument("--source", type=Path, action="append", default=[], help="source face image (repeatable)")
    live.add_argument("--processors", nargs="+", metavar="ID", help=f"chain, in order: {', '.join(registry())}")
    live.add_argument("--preset", help="preset name (presets/NAME.toml) or TOML file; default: 'default'")
    live.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE", help="override one setting")
    live.add_argument("--backend", choices=["auto", "onnx", "torch"])
    live.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    live.add_argument("--offline", action="store_true", help="never download models")
    live.add_argument(
        "--virtual-camera", action="store_true",
        help="send the result to a virtual camera for video calls (needs pyvirtualcam: v4l2loopback on Linux, OBS "
        "on Windows and macOS)",
    )  # fmt: skip
    live.add_argument("--no-window", action="store_true", help="do not show the result in a window")
    live.add_argument("--sink", metavar="frames:FOLDER", help="also write every processed frame to FOLDER as PNG")
    live.add_argument("--record", type=Path, metavar="FILE", help="record the result (.mp4, tagged synthetic)")
    live.add_argument("--overwrite", action="store_true", help="replace the --record file if it exists")
    live.add_argument("--width", type=positive, default=640, help="camera width to ask for (default 640)")
    live.add_argument("--height", type=positive, default=480, help="camera height to ask for (default 480)")
    live.add_argument("--fps", type=positive, default=30, help="camera frame rate to ask for (default 30)")
    live.add_argument("--loop", action="store_true", help="play a video file camera over and over")
    live.add_argument("--seconds", type=float, help="stop after this many seconds (default: Ctrl-C stops)")
    live.add_argument("--frames", type=positive, help="stop after this many processed frames")
    live.add_argument("--yes", action="store_true", help="acknowledge the responsible-use notice for this run")
    live.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def command(args: argparse.Namespace) -> int:
    """A local camera through the chain in real time, into a window, a virtual camera, a folder and/or a file;
    Ctrl-C (or closing the window) stops it and finishes the recording."""
    import threading

    from engine.live import devices
    from engine.live.local import run_camera
    from engine.live.record import Recorder
    from engine.serve.service import LIVE_OUTPUT, LIVE_TARGET, Service

    if args.sink is not None and not args.sink.startswith("frames:"):
        raise UsageError(f"--sink takes frames:FOLDER, got {args.sink!r}")
    if args.seconds is not None and not args.seconds > 0:
        raise UsageError(f"--seconds must be above 0, got {args.seconds:g}")
    if args.record is not None and args.record.exists() and not args.overwrite:
        raise UsageError(f"{args.record} already exists; add --overwrite to replace it")
    # A camera has no scanned people to map sources onto (--map is run's), and no job file or paths of its own.
    args.job, args.target, args.output, args.map = None, LIVE_TARGET, LIVE_OUTPUT, []
    job = job_from_args(args)
    raw = {k: v for k, v in job.to_raw().items() if k not in ("target", "output", "sources")}
    for setting in job.ignored_settings():
        print(f"note: {setting} is ignored with these settings", file=sys.stderr)
    require_consent(args.yes)
    camera = devices.open_camera(args.camera, args.width, args.height, args.fps, loop=args.loop)
    stop = threading.Event()
    sinks: list[Any] = []
    try:
        service = Service(registry())
        with service.model_lock:
            renderer = service.live_renderer(raw, job.sources, fps=camera.fps)
        if not args.no_window:
            sinks.append(devices.WindowSink(f"facestudio live — {camera.name}", closed=stop))
        if args.virtual_camera:
            virtual = devices.VirtualCameraSink(camera.fps)
            virtual.open(camera.width, camera.height)  # a missing driver is said now, before the stream starts
            print(f"virtual camera: {virtual.name}", file=sys.stderr)
            sinks.append(virtual)
        if args.sink is not None:
            sinks.append(devices.FolderSink(Path(args.sink.removeprefix("frames:"))))
        recorder = None
        if args.record is not None:
            processors = {p.id: p.describe() for p in renderer.chain}
            recorder = Recorder(args.record, camera.fps, job, camera.name, processors)
    except BaseException:
        camera.close()
        for sink in sinks:
            sink.close()
        raise
    print(f"live: {camera.name} at {camera.width}×{camera.height}, {camera.fps:g} fps → {', '.join(job.processors)}"
          " (Ctrl-C stops)", file=sys.stderr)  # fmt: skip
    # Ctrl-C and SIGTERM end the stream normally (the recording is kept), not as a cancelled job.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = run_camera(camera, renderer, service.model_lock, sinks, recorder=recorder, stop=stop,
                             seconds=args.seconds, frames=args.frames, on_figures=_live_figures)  # fmt: skip
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(summary.line())
    if summary.recording is not None:
        rec = summary.recording
        print(f"recorded: {rec.frames} frames ({rec.seconds:.1f} s), {'with' if rec.audio else 'no'} audio → "
              f"{rec.output} (+ {rec.sidecar.name})")  # fmt: skip
    return 0


def _live_figures(figures: Any) -> None:
    """The stream's figures on one line of a terminal, rewritten every second."""
    if sys.stderr.isatty():
        print(f"\r{figures.fps:5.1f} fps, processing {figures.processing_ms:4.0f} ms, arrival → out "
              f"{figures.latency_ms:4.0f} ms, {figures.dropped:4.0%} dropped  ", end="", file=sys.stderr)  # fmt: skip
