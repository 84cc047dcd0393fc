"""The command line (DESIGN.md §7): argument parsing, and the only place that maps errors to exit codes.

Exit codes: 0 done; 1 internal error (a bug); 2 invalid usage or input; 3 a model is unavailable; 4 cancelled.
`verify` exits 0 when a file's Content Credentials hold (or it has none) and 2 when they are invalid.
Errors print one line (`error: …`) to stderr, with the traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.core import consent
from engine.core.errors import ConsentRequired, FacestudioError, InvalidJob
from engine.core.progress import for_terminal
from engine.job.processor import FrameProcessor
from engine.job.settings import Job, Preset, RuntimeSettings, apply_overrides, load_preset_raw, preset_schema
from engine.models.manifest import EXPORTS_FILE

if TYPE_CHECKING:
    from engine.models import fetch

log = logging.getLogger("facestudio")

ROOT = Path(__file__).resolve().parent
DEMO_DIR = ROOT / "outputs" / "demo"


def registry() -> Mapping[str, type[FrameProcessor]]:
    """The processor registry, imported on first use so that a broken plugin or manifest is reported by `main`
    as a one-line error instead of failing at import time."""
    from processors import REGISTRY

    return REGISTRY


class UsageError(FacestudioError):
    exit_code = 2


class _Parser(argparse.ArgumentParser):
    """argparse that raises (one line, exit 2) instead of printing usage and exiting itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `python {self.prog} --help`)")


def _batch(text: str) -> int | str:
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is neither auto nor a whole number ≥ 1")


def _positive(text: str) -> int:
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ≥ 1")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="launch.py", description="facestudio: face swap and enhancement studio")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="process a target image or video")
    run.add_argument("--target", type=Path, help="image or video to process")
    run.add_argument("--output", type=Path, help="where to write the result (same kind as the target)")
    run.add_argument("--source", type=Path, action="append", default=[], help="source face image (repeatable)")
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
        "--workers", type=_positive, metavar="N", help="Ray workers for --cluster (default: one per GPU, else per CPU)"
    )
    run.add_argument("--demo", action="store_true", help="make a demo clip from a bundled photo and process it")
    run.add_argument("--yes", action="store_true", help="acknowledge the responsible-use notice for this run")
    run.add_argument("--overwrite", action="store_true", help="replace the output file if it already exists")
    run.add_argument("--sign-cert", type=Path, metavar="PEM", help="certificate chain to sign the Content Credentials")
    run.add_argument("--sign-key", type=Path, metavar="PEM", help="its private key (default: this installation's key)")
    run.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    faces = sub.add_parser("faces", help="the people in a target")
    fsub = faces.add_subparsers(dest="action", required=True, parser_class=_Parser)
    fscan = fsub.add_parser("scan", help="list the people of a target, with a picture of each (renders nothing)")
    fscan.add_argument("--target", type=Path, required=True, help="image or video to look at")
    fscan.add_argument("--json", action="store_true", help="print the people as JSON")
    fscan.add_argument(
        "--sheet", type=Path, metavar="PNG", help="where the pictures go (default: TARGET-NAME.people.png here)"
    )
    fscan.add_argument("--preset", help="take the faces settings from this preset (analyser, detector, scan_every)")
    fscan.add_argument("--set", action="append", default=[], metavar="faces.FIELD=VALUE", help="override one")

    models = sub.add_parser("models", help="list, fetch and verify model files")
    msub = models.add_subparsers(dest="action", required=True, parser_class=_Parser)
    mlist = msub.add_parser("list", help="every model with its licence and availability")
    mlist.add_argument("--json", action="store_true")
    mfetch = msub.add_parser("fetch", help="download model files (licence shown first)")
    mfetch.add_argument("ids", nargs="*", metavar="ID")
    mfetch.add_argument("--preset", help="fetch what a preset's processors need")
    mfetch.add_argument(
        "--trust-first",
        action="store_true",
        help="also fetch files no public record gives a sha256 for, and record the sha256 each arrives with",
    )
    mverify = msub.add_parser("verify", help="check the sha256 of every present model file")
    mverify.add_argument("ids", nargs="*", metavar="ID")
    mexport = msub.add_parser("export", help="export a PyTorch model to ONNX and record its sha256")
    mexport.add_argument("ids", nargs=1, metavar="ID")
    mexport.add_argument("--to", choices=["onnx"], required=True, help="the format to export to")
    mexport.add_argument("--fp16", action="store_true", help="compute in float16 (inputs and outputs stay float32)")
    mexport.add_argument("--offline", action="store_true", help="never download the weights to export")
    mquant = msub.add_parser(
        "quantize", help="make an int8 graph of a model for CPU jobs at runtime.precision=int8, quality-checked"
    )
    mquant.add_argument("ids", nargs=1, metavar="ID")
    mquant.add_argument(
        "--calibration", type=Path, metavar="DIR", help="images to calibrate on (default: the embedded demo media)"
    )
    mquant.add_argument("--offline", action="store_true", help="never download the model's file")

    bench = sub.add_parser("benchmark", help="measure a chain on generated media: latency, fps, overhead, memory")
    bench.add_argument("--processors", nargs="+", metavar="ID", help="chain to measure (default: frame_enhancer)")
    bench.add_argument("--preset", help="take the settings from this preset (its processors unless given)")
    bench.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE", help="override one setting")
    bench.add_argument("--backend", choices=["auto", "onnx", "torch"])
    bench.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    bench.add_argument("--resolution", default="360p", help="180p, 360p, 720p or 1080p")
    bench.add_argument("--frames", type=int, default=60, help="length of the generated clip")
    bench.add_argument("--batch", type=_batch, help="frames per processor call: auto or N (default: the preset's)")
    bench.add_argument(
        "--precision",
        choices=["fp32", "fp16", "int8"],
        help="runtime.precision of the run; int8 also measures each int8 graph against its fp32 graph",
    )
    bench.add_argument("--json", type=Path, help="write the result as JSON here")
    bench.add_argument("--plot", type=Path, help="write a PNG plot here")

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

    live = sub.add_parser("live", help="swap faces on a local camera as it films: a window, a virtual camera, a file")
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
    live.add_argument("--width", type=_positive, default=640, help="camera width to ask for (default 640)")
    live.add_argument("--height", type=_positive, default=480, help="camera height to ask for (default 480)")
    live.add_argument("--fps", type=_positive, default=30, help="camera frame rate to ask for (default 30)")
    live.add_argument("--loop", action="store_true", help="play a video file camera over and over")
    live.add_argument("--seconds", type=float, help="stop after this many seconds (default: Ctrl-C stops)")
    live.add_argument("--frames", type=_positive, help="stop after this many processed frames")
    live.add_argument("--yes", action="store_true", help="acknowledge the responsible-use notice for this run")
    live.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    presets = sub.add_parser("presets", help="list, check and describe presets")
    psub = presets.add_subparsers(dest="action", required=True, parser_class=_Parser)
    psub.add_parser("list", help="built-in presets")
    pcheck = psub.add_parser("check", help="validate preset files (default: all built-in ones)")
    pcheck.add_argument("files", nargs="*", type=Path)
    psub.add_parser("schema", help="JSON Schema of a preset")
    poptions = psub.add_parser("options", help="every setting: values or range, unit, default, when it applies")
    poptions.add_argument("groups", nargs="*", metavar="GROUP", help="processor ids or faces, video, runtime")

    verify = sub.add_parser("verify", help="check a file's Content Credentials and watermark: who, what, when")
    verify.add_argument("file", type=Path, metavar="FILE", help="image or video (any tool's) to check")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")

    doctor = sub.add_parser("doctor", help="check this machine: packages, ffmpeg, providers, GPU, folders, models")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON (keys: see README)")
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
        handler = {
            "run": cmd_run,
            "faces": cmd_faces,
            "models": cmd_models,
            "presets": cmd_presets,
            "ui": cmd_ui,
            "benchmark": cmd_benchmark,
            "doctor": cmd_doctor,
            "live": cmd_live,
            "verify": cmd_verify,
        }[args.command]
        return handler(args)
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


# -- run ------------------------------------------------------------------------------------------------------
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
    for key, value in (("target", args.target), ("output", args.output)):
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


def cmd_run(args: argparse.Namespace) -> int:

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
    job = job_from_args(args)
    from engine.provenance import keys

    # Read (or made) before anything runs: a wrong --sign-key fails at once.
    signing = keys.resolve(args.sign_cert, args.sign_key)
    for setting in job.ignored_settings():
        print(f"note: {setting} is ignored with these settings", file=sys.stderr)
    require_consent(args.yes)
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
        report = service().run(
            job, for_terminal(), overwrite=args.overwrite, downloads=_download_progress, resume=args.resume,
            renderer=renderer, signing=signing,
        )  # fmt: skip
    w0, h0 = report.input_size
    w1, h1 = report.output_size
    audio = "audio kept" if report.audio else "no audio"
    faces = ""
    if report.frames_without_face is not None:
        faces = f", {report.faces_processed} faces processed, {report.frames_without_face} frames without a face"
    print(
        f"done: {report.frames} frame{'s' if report.frames != 1 else ''} {w0}×{h0} → {w1}×{h1} in "
        f"{report.seconds:.1f} s ({report.fps:.2f} fps), {', '.join(job.processors)} on {report.providers()}"
        f"{faces}, {audio} → {report.output} (+ {report.sidecar.name})"
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


def _download_progress(item: fetch.Downloadable) -> Callable[[int, int | None], None] | None:
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


# -- faces ----------------------------------------------------------------------------------------------------
def cmd_faces(args: argparse.Namespace) -> int:
    """`faces scan`: the people of a target (sampled frames, nothing rendered), their pictures in one PNG sheet."""
    from engine import media

    raw = load_preset_raw(args.preset or "default")
    for item in args.set:
        if not item.strip().startswith("faces."):
            raise UsageError(f"faces scan takes only faces settings (--set faces.FIELD=VALUE), got {item!r}")
    preset = Preset.parse(apply_overrides(raw, args.set, registry()), registry())
    found = service().people(args.target, preset.faces, preset.runtime, downloads=_download_progress)
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


# -- models ---------------------------------------------------------------------------------------------------
def service() -> Any:
    """The engine's front-end API (engine/serve/service.py) for this process's registry."""
    from engine.serve.service import Service

    return Service(registry())


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def cmd_models(args: argparse.Namespace) -> int:
    catalogue = service().catalogue
    if args.action == "list":
        return _models_list(catalogue, args.json)
    ids = list(args.ids)
    for model_id in ids:
        catalogue.status(model_id)  # an unknown id is refused, naming the known ones
    if args.action == "verify":
        return _models_verify(catalogue, ids)
    if args.action == "export":
        return _models_export(catalogue, ids[0], fp16=args.fp16, offline=args.offline)
    if args.action == "quantize":
        return _models_quantize(ids[0], args.calibration, offline=args.offline)
    if getattr(args, "preset", None):
        preset = Preset.parse(load_preset_raw(args.preset), registry())
        for path in catalogue.ensure_preset(preset, _download_progress, _say):
            print(f"ok {path}")
        return 0
    if not ids:
        raise UsageError("name the models to fetch (see `python launch.py models list`) or give --preset")
    for path in catalogue.fetch(ids, trust_first=args.trust_first, progress=_download_progress, say=_say):
        print(f"ok {path}")
    return 0


def _models_list(catalogue: Any, as_json: bool) -> int:
    rows = catalogue.statuses(verify=True)
    if as_json:
        print(json.dumps([_list_row(row) for row in rows], indent=2))
        return 0
    print(f"models folder: {catalogue.models_folder()}")
    for row in rows:
        use = "" if row.commercial_use else " [NON-COMMERCIAL]"
        print(f"{row.id:<30} {row.task:<15} {row.licence}{use} — {row.title}")
        if row.caveat:
            print(f"    caveat: {row.caveat}")
        if row.needs:
            print(f"    needs {', '.join(row.needs)}: {row.chain_licence}")
        for f in row.files:
            size = f"{f.size / 1e6:.1f} MB" if f.size else "size not published"
            pin = {
                "one record": " — sha256 pinned to ONE public record",
                "trust-first": f" — no published sha256: `models fetch {row.id} --trust-first` records one",
                "first download": " — sha256 recorded at its first download here (no public record)",
            }.get(f.pin, "")
            print(f"    {f.status:<9} {f.format:<5} {f.file} ({size}){pin}")
    return 0


def _list_row(row: Any) -> dict[str, Any]:
    """`models list --json`'s object for one model (its keys are a contract: see the README)."""
    files = [dataclasses.asdict(f) for f in row.files]
    return {
        "id": row.id,
        "task": row.task,
        "title": row.title,
        "licence": row.licence,
        "commercial_use": row.commercial_use,
        "caveat": row.caveat,
        "needs": list(row.needs),
        "chain_commercial_use": row.chain_commercial_use,
        "chain_licence": row.chain_licence,
        "available": any(f["status"] in {"embedded", "present"} for f in files),
        "files": files,
    }


def _models_verify(catalogue: Any, ids: list[str]) -> int:
    """Every present file of `ids`, each cached conversion and int8 graph of them, checked as a job checks them."""
    checked = catalogue.verify(ids)
    for item in checked:
        print(f"{item.status:<10} {item.model:<30} {item.path}")
    for model in sorted({item.model for item in checked if item.status == "requantise"}):
        print(f"warning: a job at runtime.precision=int8 refuses the int8 graph of {model}: quantise it again with "
              f"`python launch.py models quantize {model}`", file=sys.stderr)  # fmt: skip
    bad = sum(item.status == "mismatch" for item in checked)
    if bad:
        print(f"error: {bad} file(s) do not match their sha256; delete or replace them", file=sys.stderr)
        return 3
    return 0


def _models_export(catalogue: Any, model_id: str, *, fp16: bool, offline: bool) -> int:
    """Export `model_id` to ONNX in the models folder; prints where, its sha256 and the graph's declared I/O."""
    _say(f"licence: {catalogue.status(model_id).licence_line}")
    path, file, io = catalogue.export(model_id, fp16=fp16, offline=offline, progress=_download_progress)
    print(f"exported {model_id} → {path} ({(file.size or 0) / 1e6:.1f} MB, {file.precision}, sha256 {file.sha256})")
    for kind in ("inputs", "outputs"):
        for value in io[kind]:
            shape = "×".join(str(d) for d in value["shape"])  # type: ignore[union-attr]
            print(f"  {kind[:-1]:<6} {value['name']}: {value['type']} {shape}")
    print(f"recorded in {path.parent / EXPORTS_FILE}; --backend onnx now loads it")
    return 0


def _models_quantize(model_id: str, calibration: Path | None, *, offline: bool) -> int:
    """Quantise `model_id` to int8 in the models folder; prints the gate's PSNR and both graphs' times."""
    from engine.models import quantize

    runtime = service().runtime(RuntimeSettings(offline=offline), _download_progress)
    _say(f"licence: {runtime.manifest.get(model_id).licence_line()}")
    frames = quantize.folder_calibration(calibration) if calibration else quantize.demo_calibration()
    _say(f"calibrating {model_id} on {frames.source} (a minute or more on a CPU) …")
    made = quantize.quantize(runtime, model_id, frames)
    print(
        f"quantised {model_id} → {made.path}: {made.psnr_db:.1f} dB PSNR against fp32 on the worst of "
        f"{made.checked_on} held-out inputs (gate {made.threshold_db:g} dB); {made.int8_ms:.0f} ms int8 vs "
        f"{made.fp32_ms:.0f} ms fp32 per input here (×{made.int8_ms / made.fp32_ms:.2f}); calibrated on "
        f"{made.calibrated_on} inputs from {made.calibration}"
    )
    print("jobs with --set runtime.precision=int8 on the CPU now run it")
    return 0


# -- benchmark ------------------------------------------------------------------------------------------------
def cmd_benchmark(args: argparse.Namespace) -> int:
    from engine.tools import benchmark
    from processors import build_chain

    raw = load_preset_raw(args.preset) if args.preset else {}
    if args.processors or not args.preset:
        raw["processors"] = list(args.processors or ["frame_enhancer"])
    raw = apply_overrides(raw, args.set, registry())
    runtime = dict(raw.get("runtime", {}))
    for key, value in (
        ("backend", args.backend),
        ("device", args.device),
        ("batch", args.batch),
        ("precision", args.precision),
    ):
        if value is not None:
            runtime[key] = value
    raw["runtime"] = runtime
    result = benchmark.run(raw, resolution=args.resolution, frames=args.frames, registry=registry(),
                           build_chain=build_chain)  # fmt: skip
    print(benchmark.table(result))
    if args.json:
        print(f"json: {benchmark.write_json(result, args.json)}")
    if args.plot:
        print(f"plot: {benchmark.plot(result, args.plot)}")
    return 0


# -- ui -------------------------------------------------------------------------------------------------------
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


def cmd_ui(args: argparse.Namespace) -> int:
    settings = ui_settings(args)
    from webui.app import launch

    print(f"facestudio UI on http://{settings.host}:{settings.port} (Ctrl-C stops it)", file=sys.stderr)
    launch(settings)
    return 0


# -- live -----------------------------------------------------------------------------------------------------
def cmd_live(args: argparse.Namespace) -> int:
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


# -- presets --------------------------------------------------------------------------------------------------
def cmd_presets(args: argparse.Namespace) -> int:
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


# -- verify ---------------------------------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the file's credentials hold or it has none, 2 when they are invalid (tampered or damaged)."""
    from engine.provenance import verify

    report = verify.inspect(args.file)
    print(report.to_json() if args.json else verify.render(report))
    return verify.exit_code(report)


# -- doctor ---------------------------------------------------------------------------------------------------
def cmd_doctor(args: argparse.Namespace) -> int:
    """Report on this machine, each problem with its fix; exit 0 when no problem is an error (warnings may remain),
    2 when one is: something stops the default job, or a model file does not match its sha256."""
    from engine.tools import doctor

    known = []
    try:
        needed = _default_job_models()
    except Exception as exc:  # a broken install (a processor that fails to import …) is what the doctor reports
        needed = []
        message = f"the default job cannot be built: {type(exc).__name__}: {exc}".splitlines()[0]
        fix = "pip install -e . (or what the message names), then python launch.py presets check"
        known.append(doctor.Problem("presets", "error", message, fix))
    report = doctor.collect(needed, known=known)
    print(json.dumps(report, indent=2) if args.json else doctor.table(report))
    return 0 if report["ok"] else 2


def _default_job_models() -> list[str]:
    """The manifest ids the default preset loads: its processors' models, and its face analyser's when a processor
    needs faces."""
    preset = Preset.parse(load_preset_raw("default"), registry())
    return list(dict.fromkeys(model_id for model_id, _ in service().catalogue.for_preset(preset)))
