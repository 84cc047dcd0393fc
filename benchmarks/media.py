"""Decode and encode throughput of the media layer, before and after a change, and against PyAV, in one run.

    python benchmarks/media.py [--before REV] [--repeats N] [--frames N] [--json FILE]

For 720p and 1080p clips (H.264, generated here), it measures in fresh subprocesses, interleaved and repeated:

- `before`: the media layer of git revision REV (default eed266e, the last with `engine/video.py`; a revision with
  `engine/media/`, such as `main`, is measured through that package): its FrameReader, and its FrameWriter at the
  job defaults (libx264, crf 18, preset medium);
- `after`: this checkout's `engine.media`, the same (each frame timed by its `FrameTimes`);
- `pyav`: decoding and encoding inside the Python process with PyAV (`pip install av`; skipped without it), the
  same frames, encoder settings and colour conversion;

each alone, and again with a busy pure-Python thread beside it (`busy`), as in a run, where face analysis,
identity QA and the queues between the stages are Python threads that want the interpreter while frames are
decoded and encoded. A decode reads 4 × N frames, an encode writes N (1080p: half as many).

Two figures per measurement, each the median of the repeats: frames per second of wall time, and frames per
second of CPU time (this process and its ffmpeg children; alone only: the busy thread's would count too). On a
machine that other work shares, wall time swings with the load, while CPU time per frame is what the code
costs.

An encode's CPU time is a cost per file (finding the encoder, starting ffmpeg, and after: probing the written
file to check every frame's time) plus a cost per frame. A one-frame encode, measured the same way, gives the
first; the encode's throughput is then `(N − 1) / (cpu(N) − cpu(1))`, and both are reported. The change passes
when `after / before` of the CPU throughput is ≥ 0.95 for each clip and stage; the per-file costs are printed
beside it (they are paid once per output, a few tenths of a second).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
RATE = 25


# ---------------------------------------------------------------------------------------------------------------
# One measurement (a subprocess: `--worker IMPLEMENTATION KIND CLIP FRAMES BUSY`)


def _busy(stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1


def _decoder(implementation: str, clip: Path) -> Any:
    """An iterator over the clip's frames (H×W×3 uint8 RGB), opened and probed: only iterating it is timed."""
    if implementation == "pyav":
        import av

        container = av.open(str(clip))
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        return (frame.to_ndarray(format="rgb24") for frame in container.decode(stream))
    return iter(_module(implementation).FrameReader(clip))


def _encode(implementation: str, frames: list[Any], out: Path) -> int:
    height, width = frames[0].shape[:2]
    if implementation == "pyav":
        import av

        base = Fraction(1, RATE)
        with av.open(str(out), "w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=RATE)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.time_base = base
            stream.options = {"crf": "18", "preset": "medium"}
            for n, array in enumerate(frames):
                frame = av.VideoFrame.from_ndarray(array, format="rgb24")
                frame = frame.reformat(format="yuv420p", dst_colorspace="ITU709", dst_color_range="MPEG")
                frame.pts, frame.time_base = n, base
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        return len(frames)
    module = _module(implementation)
    if not hasattr(module, "FrameTimes"):  # engine/video.py: a rate string, the audio and tags by position
        writer = module.FrameWriter(out, width, height, f"{RATE}/1", None, {})
    else:
        writer = module.FrameWriter(out, width, height, module.FrameTimes.constant(Fraction(RATE)))
    with writer:
        for frame in frames:
            writer.write(frame)
    return len(frames)


def _module(implementation: str) -> Any:
    if implementation == "before":
        import engine  # the revision's own package, first on sys.path

        if (Path(engine.__file__).parent / "media").is_dir():
            from engine import media

            return media
        from engine import video  # type: ignore[attr-defined]

        return video
    from engine import media

    return media


def _cpu() -> float:
    """CPU seconds used so far by this process and its finished children (the ffmpeg processes)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def worker(implementation: str, kind: str, clip: Path, frames: int, busy: bool) -> tuple[float, float]:
    """(frames per wall second, frames per CPU second) of one decode or encode in this process (an encode's input
    decoded beforehand)."""
    source: list[Any] = []
    if kind == "encode":
        module = _module("after" if implementation == "pyav" else implementation)
        with module.FrameReader(clip) as reader:
            source = list(itertools.islice(reader, frames))
    frames_in = _decoder(implementation, clip) if kind == "decode" else None
    stop = threading.Event()
    if busy:
        threading.Thread(target=_busy, args=(stop,), daemon=True).start()
    started, cpu = time.perf_counter(), _cpu()
    if frames_in is not None:
        count = sum(1 for _ in frames_in)
    else:
        count = _encode(implementation, source, clip.with_name(f"out-{implementation}-{clip.stem}.mp4"))
    elapsed = time.perf_counter() - started
    stop.set()
    if frames_in is not None:
        del frames_in  # the decoder's child is reaped, so its CPU time counts
    return count / elapsed, count / (_cpu() - cpu)


# ---------------------------------------------------------------------------------------------------------------
# The run


def _before_tree(revision: str, folder: Path) -> Path:
    """The `engine` package of `revision`, extracted into `folder`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "engine"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    if not (folder / "engine" / "video.py").is_file() and not (folder / "engine" / "media").is_dir():
        raise SystemExit(f"{revision} has neither engine/video.py nor engine/media/ to measure as 'before'")
    return folder


def _clips(folder: Path, frames: int) -> dict[str, Path]:
    sys.path.insert(0, str(ROOT))
    from engine import media

    clips = {}
    for name, (width, height) in SIZES.items():
        count = 4 * (frames if name == "720p" else frames // 2)
        clips[name] = folder / f"{name}.mp4"
        subprocess.run(
            [media.find_ffmpeg(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
             f"testsrc2=size={width}x{height}:rate={RATE}", "-frames:v", str(count), "-c:v", "libx264",
             "-preset", "fast", "-crf", "18", "-pix_fmt", "yuv420p", str(clips[name])],
            check=True,
        )  # fmt: skip
    return clips


def _has_pyav() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", default="eed266e", help="git revision whose media layer is 'before' (e.g. main)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--frames", type=int, default=60, help="frames an encode writes at 720p (1080p: half)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--worker", nargs=5, metavar=("IMPL", "KIND", "CLIP", "FRAMES", "BUSY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        implementation, kind, clip, frames, busy = args.worker
        print(json.dumps(worker(implementation, kind, Path(clip), int(frames), busy == "busy")))
        return

    implementations = ["before", "after"] + (["pyav"] if _has_pyav() else [])
    with tempfile.TemporaryDirectory(prefix="facestudio-media-bench-") as tmp:
        before = _before_tree(args.before, Path(tmp, "before"))
        clips = _clips(Path(tmp), args.frames)
        paths = {"before": str(before), "after": str(ROOT), "pyav": str(ROOT)}
        figures: dict[str, list[tuple[float, float]]] = {}
        measured = [*itertools.product(SIZES, ("decode", "encode"), ("alone", "busy")),
                    *((name, "encode", "once") for name in SIZES)]  # fmt: skip
        for name, kind, busy in measured:
            frames = 1 if busy == "once" else args.frames if name == "720p" else args.frames // 2
            for repeat in range(args.repeats):
                # Interleaved, in a different order each time: a slow spell of the machine hits every one.
                order = (
                    implementations[repeat % len(implementations) :] + implementations[: repeat % len(implementations)]
                )
                for implementation in order:
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join([paths[implementation], *sys.path[1:]])}
                    command = [sys.executable, __file__, "--worker", implementation, kind, str(clips[name]),
                               str(frames), "busy" if busy == "busy" else "alone"]  # fmt: skip
                    done = subprocess.run(
                        command, capture_output=True, text=True, env=env, cwd=paths[implementation], check=True
                    )
                    wall, cpu = json.loads(done.stdout)
                    figures.setdefault(f"{name} {kind} {busy} {implementation}", []).append((wall, cpu))
    print("fps (CPU) of an encode: its throughput, the per-file cost taken out (see the docstring)")
    print(f"{'clip':<6} {'stage':<6} {'with':<5} {'fps (wall)':>27}   {'fps (CPU)':>27}   after/before (CPU)")
    print(
        f"{'':<20}"
        + " ".join(f"{i:>8}" for i in implementations)
        + "   "
        + " ".join(f"{i:>8}" for i in implementations)
    )
    summary: dict[str, Any] = {"before": args.before, "repeats": args.repeats, "frames": args.frames, "results": []}
    worst = float("inf")
    for name, kind, busy in itertools.product(SIZES, ("decode", "encode"), ("alone", "busy")):
        runs = {i: figures[f"{name} {kind} {busy} {i}"] for i in implementations}
        wall = {i: statistics.median(w for w, _ in runs[i]) for i in implementations}
        cpu = {i: statistics.median(c for _, c in runs[i]) for i in implementations} if busy == "alone" else None
        per_file = None
        if cpu and kind == "encode":
            frames = args.frames if name == "720p" else args.frames // 2
            once = {i: statistics.median(1 / c for _, c in figures[f"{name} encode once {i}"]) for i in implementations}
            per_file = {i: once[i] - (frames / cpu[i] - once[i]) / (frames - 1) for i in implementations}
            cpu = {i: (frames - 1) / (frames / cpu[i] - once[i]) for i in implementations}
        ratio = cpu["after"] / cpu["before"] if cpu else None
        worst = min(worst, ratio) if ratio is not None else worst
        line = f"{name:<6} {kind:<6} {busy:<5} " + " ".join(f"{wall[i]:8.1f}" for i in implementations)
        if cpu:
            line += "   " + " ".join(f"{cpu[i]:8.1f}" for i in implementations) + f"   {ratio:6.3f}"
        if per_file:
            line += "   per file (CPU s): " + " ".join(f"{i} {per_file[i]:.2f}" for i in implementations)
        print(line)
        summary["results"].append(
            {
                "clip": name,
                "stage": kind,
                "with": busy,
                "fps_wall": wall,
                "fps_cpu": cpu,
                "ratio_cpu": ratio,
                "per_file_cpu_s": per_file,
                "runs": runs,
            }
        )
    summary["worst_ratio"] = worst
    print(f"worst after/before (CPU): {worst:.3f} ({'pass' if worst >= 0.95 else 'FAIL'}: at most 5 % slower)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
