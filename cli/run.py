"""`launch.py run`: a target image or video through the chain, or the demo; the summary of what was done."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from cli import batch
from cli.common import UsageError, download_progress, job_from_args, positive, registry, require_consent, service
from engine.core.progress import for_terminal

ROOT = Path(__file__).resolve().parents[1]
DEMO_DIR = ROOT / "outputs" / "demo"


def add(sub: Any, summary: str) -> None:
    """The `run` command's arguments."""
    run = sub.add_parser("run", help=summary)
    run.add_argument(
        "--target",
        action="append",
        default=[],
        help="image or video to process; repeatable, and a pattern ('clips/*.mp4') makes a batch (cli/batch.py)",
    )
    run.add_argument(
        "--output",
        type=Path,
        help="where to write the result (same kind as the target); a batch: a template with {name}, {ext}, {index}",
    )
    run.add_argument("--source", type=Path, action="append", default=[], help="source face image (repeatable)")
    run.add_argument(
        "--source-face",
        type=int,
        metavar="N",
        help="a source photo with several faces: take the Nth from the left (0: the largest, the default); the "
        "summary says how many it has",
    )
    run.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="N=IMAGE[,IMAGE…]",
        help="put these source images on person N of the target (numbers: `faces scan`); repeatable; people not "
        "mapped are left as they are",
    )
    run.add_argument("--processors", nargs="+", metavar="ID", help=f"chain, in order: {', '.join(registry())}")
    run.add_argument("--preset", help="preset name (presets/NAME.toml) or TOML file; default: 'default'")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ID.FIELD=VALUE",
        help="override one setting (every setting: `python launch.py presets options`)",
    )
    run.add_argument("--backend", choices=["auto", "onnx", "torch"])
    run.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--offline", action="store_true", help="never download models")
    run.add_argument("--job", type=Path, help="replay a job sidecar (<output>.job.json)")
    run.add_argument(
        "--resume", action="store_true", help="continue an interrupted video job: reuse the segments it finished"
    )
    run.add_argument(
        "--cluster",
        metavar="local|auto|ray://HOST:PORT",
        help="render a video's segments on Ray workers: a local cluster, the cluster of this machine, or a Ray client "
        "address (needs the ray extra; paths must be visible to every node)",
    )
    run.add_argument(
        "--workers", type=positive, metavar="N", help="Ray workers for --cluster (default: one per GPU, else per CPU)"
    )
    run.add_argument("--demo", action="store_true", help="make a demo clip from a bundled photo and process it")
    run.add_argument("--yes", action="store_true", help="acknowledge the responsible-use notice for this run")
    run.add_argument("--overwrite", action="store_true", help="replace the output file if it already exists")
    run.add_argument(
        "--strip-metadata",
        action="store_true",
        help="leave the target's tags, chapters, subtitles, EXIF and ICC profile out (only the synthetic-media tags)",
    )
    run.add_argument("--sign-cert", type=Path, metavar="PEM", help="certificate chain to sign the Content Credentials")
    run.add_argument("--sign-key", type=Path, metavar="PEM", help="its private key (default: this installation's key)")
    run.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def command(args: argparse.Namespace, engine: Any = None) -> int:
    """Process a target (or the demo clip) and print the run's summary, the resume and identity lines; several
    targets or a pattern run as a batch (cli/batch.py). `engine`: the service to run on (a batch's, whose models
    stay loaded from one target to the next); default, a new one."""
    if isinstance(args.target, list):
        if batch.wanted(args.target, args.output):
            return batch.command(args, command)
        args.target = Path(args.target[0]) if args.target else None
    if args.demo:
        if args.target or args.job:
            raise UsageError("--demo makes its own target; drop --target/--job")
        from engine.media import demo

        args.target = DEMO_DIR / "astronaut.mp4"
        if args.output is None:
            # The demo's own output, remade by every demo run.
            args.output, args.overwrite = DEMO_DIR / "astronaut_out.mp4", True
        args.source = args.source or [demo.source_photo()]
    if args.workers is not None and args.cluster is None:
        raise UsageError("--workers needs --cluster")
    if args.source_face is not None and args.source_face < 0:
        raise UsageError(f"--source-face takes 0 (the largest) or N ≥ 1 (from the left), got {args.source_face}")
    # The two flags are settings; a batch calls this once per target with the same arguments: added once.
    flags = [f"faces.source_face={args.source_face}"] if args.source_face is not None else []
    flags += ["video.keep_metadata=false"] if args.strip_metadata else []
    args.set = [*args.set, *(flag for flag in flags if flag not in args.set)]
    job = job_from_args(args)
    for setting in job.ignored_settings():
        print(f"note: {setting} is ignored with these settings", file=sys.stderr)
    # Before anything is written (the installation's signing key, the demo clip, downloads): a refusal leaves no trace.
    require_consent(args.yes)
    from engine.provenance import keys

    # Read (or made) before anything runs: a wrong --sign-key fails at once.
    signing = keys.resolve(args.sign_cert, args.sign_key)
    if args.demo:
        DEMO_DIR.mkdir(parents=True, exist_ok=True)
        demo.make_clip(job.target)
    with contextlib.ExitStack() as stack:
        renderer = None
        if args.cluster is not None:
            from engine.serve import cluster

            # Connected before any model loads: a wrong address or a missing Ray fails at once.
            stack.enter_context(cluster.connect(args.cluster, args.workers))
            renderer = cluster.RayRenderer(args.workers)
        report = (engine or service()).run(
            job, for_terminal(), overwrite=args.overwrite, downloads=download_progress, resume=args.resume,
            renderer=renderer, signing=signing,
        )  # fmt: skip
    w0, h0 = report.input_size
    w1, h1 = report.output_size
    faces = ""
    if report.frames_without_face is not None:
        faces = f", {report.faces_processed} faces processed, {report.frames_without_face} frames without a face"
    print(
        f"done: {report.frames} frame{'s' if report.frames != 1 else ''} {w0}×{h0} → {w1}×{h1} in "
        f"{report.seconds:.1f} s ({report.fps:.2f} fps), {', '.join(job.processors)} on {report.providers()}"
        f"{faces}, {report.audio_words()} → {report.output} (+ {report.sidecar.name})"
    )
    for note in report.notes:
        print(note)
    if report.segments and report.segments["reused"]:
        reused = report.frames - report.segments["frames_processed"]
        print(f"resumed: {reused} of {report.frames} frames came from the interrupted run, none were recomputed")
    if report.frames_without_face == report.frames:
        print("warning: no face to process was found on any frame; the output equals the input", file=sys.stderr)
    qa = report.identity
    if qa and qa.get("faces_checked"):
        flagged = qa["flagged_frames"]
        listed = f": frames {', '.join(map(str, flagged[:20]))}{' …' if len(flagged) > 20 else ''}" if flagged else ""
        print(
            f"identity: distance to the source {qa['mean_distance_before']:.2f} → {qa['mean_distance_after']:.2f} "
            f"on average (worst {qa['worst_distance_after']:.2f}, frame {qa['worst_frame']}; same person below "
            f"{qa['threshold']:g}), {len(flagged)} of {qa['faces_checked']} checked faces flagged{listed}"
        )
    return 0
