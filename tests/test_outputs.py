"""engine/run/outputs.py: one writer per output (the race of two runs), delivery that never replaces a file unasked,
and nothing left behind; and a job that stopped on a full disk finishing with --resume."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from mediakit import ffmpeg, seconds

import cli
from engine import media
from engine.core.errors import DiskFull, InvalidInput
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.job.settings import Job
from engine.models.runtime import Runtime
from engine.run import jobdir, pipeline
from engine.run.outputs import OutputClaim, check_names
from engine.run.segments import Segment

pytest_plugins = ["mediafixtures"]


def _clip(path: Path, colour: str, frames: int = 24) -> Path:
    ffmpeg("-f", "lavfi", "-i", f"color={colour}:s=64x48:r=12", "-frames:v", str(frames), "-c:v", "libx264",
           "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(path))  # fmt: skip
    return path


def test_of_two_runs_to_one_output_exactly_one_writes_it(tmp_path: Path) -> None:
    """Different targets, the same output, no --overwrite, started together: one exits 0 and its picture is the
    output; the other exits 2 saying why (the output is being written, or already exists)."""
    red, blue = _clip(tmp_path / "red.mp4", "red"), _clip(tmp_path / "blue.mp4", "blue")
    output = tmp_path / "out" / "same.mp4"
    env = {**os.environ, "FACESTUDIO_ACCEPT": "1"}
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "launch.py"),
                "run",
                "--target",
                str(target),
                "--output",
                str(output),
                "--processors",
                "frame_enhancer",
                "--set",
                "frame_enhancer.scale=1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for target in (red, blue)
    ]
    results = [(run.wait(timeout=300), run.stderr.read() if run.stderr else "") for run in runs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert loser.startswith("error: ") and loser.count("\n") == 1
    assert "is writing" in loser or "already exists" in loser
    winner = (red, blue)[[code for code, _ in results].index(0)]
    frame = media.FrameReader(output).__iter__().__next__()
    expected = (255, 0, 0) if winner == red else (0, 0, 255)
    assert np.abs(frame.reshape(-1, 3).mean(axis=0) - expected).max() < 40
    assert sorted(p.name for p in output.parent.iterdir()) == ["same.mp4", "same.mp4.job.json"]


def test_a_claim_is_exclusive_and_a_dead_runs_claim_is_taken_over(tmp_path: Path) -> None:
    output = tmp_path / "o.mp4"
    with OutputClaim.claim(output, overwrite=False):
        with pytest.raises(InvalidInput, match=f"another facestudio job \\(pid {os.getpid()}\\) is writing"):
            OutputClaim.claim(output, overwrite=False)
        (lock,) = tmp_path.glob(".facestudio-*.lock")
    assert not lock.exists()  # released
    # A killed run leaves its lock and staged file: the next claim takes both over.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    staged = lock.with_name(lock.name.replace(".lock", f"-{dead.pid}.staged.mp4"))
    staged.write_bytes(b"half")
    lock.write_text(f'{{"pid": {dead.pid}, "started": 0.0, "host": "{os.uname().nodename}"}}')
    with OutputClaim.claim(output, overwrite=False) as claim:
        assert not staged.exists()
        assert claim.staging().parent == tmp_path
    assert list(tmp_path.iterdir()) == []


def test_a_lock_that_cannot_be_read_is_a_starting_run_until_it_is_old(tmp_path: Path) -> None:
    """A lock without its owner's record (a file system without hard links, between creation and write) is
    another run starting: refused. The same lock ten seconds old is a dead run's: taken over."""
    output = tmp_path / "o.mp4"
    with OutputClaim.claim(output, overwrite=False):
        (lock,) = tmp_path.glob(".facestudio-*.lock")
    lock.write_text("")
    with pytest.raises(InvalidInput, match="another facestudio job is starting to write"):
        OutputClaim.claim(output, overwrite=False)
    assert lock.exists()
    os.utime(lock, (time.time() - 11, time.time() - 11))
    with OutputClaim.claim(output, overwrite=False):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert list(tmp_path.iterdir()) == []


def test_a_lock_is_never_seen_empty(tmp_path: Path) -> None:
    """The lock appears with its owner inside: a reader racing a claim sees no file or a whole record. The reader
    looks after every call the claiming thread makes (Python and C: each file-system step is one), so it sees
    every state another process could, whatever the threads' timing."""
    output = tmp_path / "o.mp4"
    seen: list[str] = []

    def look(frame: object, event: str, arg: object) -> None:
        if event in {"return", "c_return", "c_exception"}:
            for lock in tmp_path.glob(".facestudio-*.lock"):
                with contextlib.suppress(FileNotFoundError):
                    seen.append(lock.read_text())

    for _ in range(3):
        sys.setprofile(look)
        try:
            with OutputClaim.claim(output, overwrite=False):
                pass
        finally:
            sys.setprofile(None)
    assert seen and all(json.loads(text)["pid"] == os.getpid() for text in seen)
    assert list(tmp_path.iterdir()) == []


def test_delivery_never_replaces_a_file_that_appeared_meanwhile(tmp_path: Path) -> None:
    output = tmp_path / "o.png"
    with OutputClaim.claim(output, overwrite=False) as claim:
        staged = claim.staging()
        media.write_image(staged, np.zeros((4, 4, 3), np.uint8))
        output.write_bytes(b"written by another program")
        with pytest.raises(InvalidInput, match="appeared while this job ran"):
            claim.deliver(staged, lambda: "{}")
    assert output.read_bytes() == b"written by another program"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.png"]


def test_a_claim_makes_the_output_folders_and_a_failure_removes_them(tmp_path: Path) -> None:
    output = tmp_path / "a" / "b" / "o.mp4"
    with pytest.raises(KeyError), OutputClaim.claim(output, overwrite=False):
        assert output.parent.is_dir()
        raise KeyError("the job failed")
    assert list(tmp_path.iterdir()) == []


def test_names_the_file_system_would_refuse_are_refused_before_any_work(tmp_path: Path) -> None:
    check_names(tmp_path / ("x" * 242 + ".mp4"))  # 246 bytes: with .job.json, 255
    with pytest.raises(InvalidInput, match=r"is 247 bytes long; .* shorten it to at most 246 bytes"):
        check_names(tmp_path / ("x" * 243 + ".mp4"))
    with pytest.raises(InvalidInput, match="is 248 bytes long"):  # bytes, not characters: é is two
        check_names(tmp_path / ("é" * 122 + ".mp4"))


def test_a_job_stopped_by_a_full_disk_finishes_with_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk of the jobs folder fills up after the first segment; once there is room, --resume reuses it."""
    target = _clip(tmp_path / "clip.mp4", "green", frames=18)
    output = tmp_path / "out.mp4"
    args = ["run", "--target", str(target), "--output", str(output), "--yes", "--processors", "frame_enhancer",
            "--set", "frame_enhancer.scale=1", "--set", "video.segment_frames=6"]  # fmt: skip
    finish = jobdir.JobFolder.finish

    def finish_then_fill(self: jobdir.JobFolder, *rest: object, **kw: object) -> None:
        finish(self, *rest, **kw)  # type: ignore[arg-type]
        # Segment 1's encoder writes to /dev/full, which refuses every write with ENOSPC, as a full disk does.
        partial = self.work_path(Segment(1, 6, 12))
        partial.with_name(f".{partial.stem}.partial{partial.suffix}").symlink_to("/dev/full")

    monkeypatch.setattr(jobdir.JobFolder, "finish", finish_then_fill)
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "is full (writing seg-00001.mp4); 1 of 3 segments (6 of 18 frames) are kept in" in err
    assert "free at least" in err and err.rstrip().endswith("and run again with --resume")
    assert not output.exists()
    monkeypatch.setattr(jobdir.JobFolder, "finish", finish)
    assert cli.main([*args, "--resume"]) == 0
    assert "resumed: 6 of 18 frames came from the interrupted run" in capsys.readouterr().out
    assert media.probe(output).frame_count == 18


class _Clock(FrameProcessor[ProcessorOptions]):
    """Records the time of every frame it is given."""

    id = "clock"
    title = "Clock"
    Options = ProcessorOptions

    def __init__(self) -> None:
        super().__init__(ProcessorOptions(), None)  # type: ignore[arg-type]  # runs no model
        self.times: list[float | None] = []

    def process(self, frames: list[Frame], ctxs: list[FrameContext]) -> list[Frame]:  # type: ignore[override]
        self.times += [ctx.time for ctx in ctxs]
        return list(frames)


@pytest.mark.parametrize(("video", "expected"), [
    ({}, None),
    ({"trim_start": 0.2}, None),
    ({"fps": 4}, [Fraction(k, 4) for k in range(13)]),
])  # fmt: skip
def test_every_frame_context_carries_the_frames_time_in_the_target(
    clips: dict[str, Path], tmp_path: Path, video: dict[str, float], expected: list[Fraction] | None
) -> None:
    target = clips["vfr12.mp4"]  # frames at k/12 s for k < 6, then 0.5 s apart
    raw = {"processors": ["clock"], "target": str(target), "output": str(tmp_path / "o.mp4"),
           "video": {**video, "segment_frames": 4}}  # fmt: skip
    job = Job.parse(raw, {"clock": _Clock})
    clock = _Clock()
    pipeline.run(job, [clock], Runtime(job.runtime))
    if expected is None:
        expected = [t for t in seconds(media.probe(target)) if t >= Fraction(str(video.get("trim_start", 0)))]
    assert clock.times == [float(t) for t in expected]


def test_an_image_frame_is_at_time_zero(tmp_path: Path) -> None:
    media.write_image(tmp_path / "still.png", np.zeros((8, 8, 3), np.uint8))
    job = Job.parse({"processors": ["clock"], "target": str(tmp_path / "still.png"),
                     "output": str(tmp_path / "o.png")}, {"clock": _Clock})  # fmt: skip
    clock = _Clock()
    pipeline.run(job, [clock], Runtime(job.runtime))
    assert clock.times == [0.0]


def test_a_full_disk_for_an_image_is_disk_full(full_disk: Path, tmp_path: Path) -> None:
    noise = np.random.default_rng(1).integers(0, 256, (600, 600, 3), dtype=np.uint8)
    media.write_image(tmp_path / "noise.png", noise)
    job = Job.parse({"processors": ["clock"], "target": str(tmp_path / "noise.png"),
                     "output": str(full_disk / "o.png")}, {"clock": _Clock})  # fmt: skip
    with pytest.raises(DiskFull, match=r"is full \(writing the image o\.png\): free at least 1\.1 MB"):
        pipeline.run(job, [_Clock()], Runtime(job.runtime))
    assert list(full_disk.iterdir()) == []
