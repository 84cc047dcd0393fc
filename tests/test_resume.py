"""`run --resume` end to end: a real `launch.py run` is SIGKILLed after some segments, resumed, killed again and
resumed to the end; the output is whole, has its audio, equals an uninterrupted run, and no finished segment was
computed twice."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import audio_seconds, live_children
from gate import Gate

import cli
from engine import media as video

ROOT = Path(__file__).resolve().parent.parent
FRAMES, FPS, SEGMENT = 90, 30, 15
# The cheapest real chain: the embedded Real-ESRGAN model at scale 1 on small frames, one frame per call.
CHAIN = ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=1", "--set", "runtime.batch=1"]
SEGMENTS = ["--set", f"video.segment_frames={SEGMENT}"]


def make_clip(path: Path, frames: int = FRAMES) -> Path:
    """`frames` frames of 64×48 testsrc at 30 fps with a 440 Hz sine track of the same length (H.264 + AAC)."""
    seconds = frames / FPS
    subprocess.run(
        [video.find_ffmpeg(), "-nostdin", "-v", "error", "-y",
         "-f", "lavfi", "-i", f"testsrc=size=64x48:rate={FPS}", "-f", "lavfi", "-i", "sine=frequency=440",
         "-t", str(seconds), "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4")


def read_frames(path: Path) -> np.ndarray:
    with video.FrameReader(path) as reader:
        return np.stack(list(reader))


FINISHED = "engine.run.jobdir:JobFolder.finish"  # where a run is held: after each segment it finishes


def start(args: list[str], jobs: Path, at: str = FINISHED) -> Gate:
    """`launch.py run ARGS --yes`, held after each call of `at` (tests/gate.py)."""
    return Gate.start(
        ["run", *args, "--yes"], at=at,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "FACESTUDIO_JOBS": str(jobs)},
    )  # fmt: skip


def finish_segments(run: Gate, count: int) -> None:
    """Let `run` finish `count` more segments; it is held after the last of them."""
    for n in range(count):
        if n:
            run.go()
        run.reached()


def done_segments(jobs: Path) -> dict[int, dict]:
    """The finished segments the job folder's manifest lists (the folder's own record of what counts)."""
    (manifest,) = jobs.glob("*/manifest.json")
    return {int(i): r for i, r in json.loads(manifest.read_text())["done"].items()}


def kill(run: Gate) -> None:
    """SIGKILL, as a crash or power loss would; its ffmpeg children then end on their own (their pipes close):
    waited for, as they may still be writing in the job folder."""
    ending = [os.pidfd_open(pid) for pid in live_children(run.process.pid)]
    run.process.kill()
    run.process.communicate(timeout=60)
    run.close()
    for pidfd in ending:
        assert select.select([pidfd], [], [], 60)[0], "an ffmpeg of the killed run did not end"
        os.close(pidfd)


def stats(folder: Path, indexes: set[int]) -> dict[int, tuple[int, int]]:
    return {i: (s.st_ino, s.st_mtime_ns) for i in indexes for s in [(folder / f"seg-{i:05d}.mp4").stat()]}


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_killed_job_resumes_without_recomputing_finished_segments(clip: Path, tmp_path: Path) -> None:
    jobs, out = tmp_path / "jobs", tmp_path / "out.mp4"
    args = ["--target", str(clip), "--output", str(out), *CHAIN, *SEGMENTS]

    first = start(args, jobs)
    finish_segments(first, 2)
    kill(first)
    (folder,) = jobs.iterdir()
    before = set(done_segments(jobs))
    assert before == {0, 1} and not out.exists()
    kept = stats(folder, before)

    second = start([*args, "--resume"], jobs)
    finish_segments(second, 1)
    kill(second)
    # The segments finished before the first kill are the same files, untouched by the resumed run.
    assert stats(folder, before) == kept
    after = done_segments(jobs)
    assert set(after) == {0, 1, 2} and not out.exists()
    assert {after[i]["pid"] for i in before} == {first.process.pid}
    assert {after[i]["pid"] for i in set(after) - before} == {second.process.pid}

    third = subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), "run", *args, "--resume", "--yes"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
        env={**os.environ, "FACESTUDIO_JOBS": str(jobs)},
    )  # fmt: skip
    assert third.returncode == 0, third.stderr
    reused = sum(r["frames"] for r in after.values())
    assert f"resumed: {reused} of {FRAMES} frames came from the interrupted run" in third.stdout
    info = video.probe(out)
    assert (info.frame_count, info.fps_rational, info.vfr) == (FRAMES, f"{FPS}/1", False)
    assert info.has_audio and abs(audio_seconds(out) - FRAMES / FPS) <= 0.05
    assert abs(info.duration - FRAMES / FPS) <= 1 / FPS
    assert video.read_video_metadata(out)["synthetic"] == "true"
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    assert sidecar["segments"] == {
        "count": FRAMES // SEGMENT,
        "segment_frames": SEGMENT,
        "reused": sorted(after),
        "frames_processed": FRAMES - reused,
    }
    assert sidecar["output"]["frames"] == FRAMES
    # Success removes the job folder.
    assert list(jobs.iterdir()) == []

    # The same job run without interruption gives the same frames.
    whole = tmp_path / "whole.mp4"
    assert cli.main(["run", "--target", str(clip), "--output", str(whole), *CHAIN, *SEGMENTS, "--yes"]) == 0
    np.testing.assert_array_equal(read_frames(out), read_frames(whole))
