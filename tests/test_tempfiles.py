"""Temporary files of a job: the job folder is removed on success, failure and cancel (kept only when finished
segments can be resumed), SIGTERM leaves no ffmpeg and no output, the sweep removes dead jobs' folders only, and a
job that will not fit on the disk is refused before any work."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import ClassVar

import psutil
import pytest
from conftest import live_children
from test_resume import CHAIN, FINISHED, make_clip, start

import cli
from engine import media as video
from engine.core.errors import Cancelled, InsufficientDiskSpace, InvalidInput
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.job.settings import Job
from engine.models.runtime import Runtime
from engine.run import jobdir, pipeline, segments
from engine.run.chain import BatchLimit
from engine.run.render import VideoRender
from engine.run.segmented import VideoJob

ROOT = Path(__file__).resolve().parent.parent


class Stopper(FrameProcessor[ProcessorOptions]):
    """Returns its frames unchanged, counting them; raises `error` when it is given frame `at` (output frame
    numbering), the way a Ctrl-C (KeyboardInterrupt) or a failure would arrive mid-run."""

    id: ClassVar[str] = "stopper"
    title: ClassVar[str] = "Stopper"
    Options: ClassVar[type[ProcessorOptions]] = ProcessorOptions

    def __init__(self, at: int | None = None, error: BaseException | None = None) -> None:
        super().__init__(ProcessorOptions(), None)  # type: ignore[arg-type]  # runs no model
        self.at, self.error = at, error
        self.seen: list[int] = []

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        for ctx in ctxs:
            if ctx.index == self.at and self.error is not None:
                raise self.error
            self.seen.append(ctx.index)
        return list(frames)


def run(
    target: Path, output: Path, stopper: Stopper, resume: bool = False, **video_settings: object
) -> pipeline.RunReport:
    raw = {
        "processors": ["stopper"], "target": str(target), "output": str(output),
        "video": {"segment_frames": 15, "preset": "ultrafast", **video_settings},
    }  # fmt: skip
    job = Job.parse(raw, {"stopper": Stopper})
    return pipeline.run(job, [stopper], Runtime(job.runtime), resume=resume)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=45)


def jobs() -> Path:
    return Path(os.environ["FACESTUDIO_JOBS"])


def leftovers(folder: Path, keep: str = "clip.mp4") -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != keep)


def test_success_removes_the_job_folder(clip: Path, tmp_path: Path) -> None:
    report = run(clip, tmp_path / "o.mp4", Stopper())
    assert report.frames == 45 and report.segments == {
        "count": 3, "segment_frames": 15, "reused": [], "frames_processed": 45,
    }  # fmt: skip
    assert leftovers(tmp_path) == ["o.mp4", "o.mp4.job.json"] and list(jobs().iterdir()) == []


def test_failure_mid_run_leaves_no_output_and_no_folder(clip: Path, tmp_path: Path) -> None:
    stopper = Stopper(at=20, error=RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        run(clip, tmp_path / "o.mp4", stopper)
    assert 15 in stopper.seen  # the first segment was finished before the failure
    assert leftovers(tmp_path) == [] and list(jobs().iterdir()) == []


def test_cancel_keeps_finished_segments_for_resume_and_resume_refuses_other_settings(
    clip: Path, tmp_path: Path
) -> None:
    out = tmp_path / "o.mp4"
    with pytest.raises(Cancelled) as cancelled:
        run(clip, out, Stopper(at=20, error=KeyboardInterrupt()))
    (folder,) = jobs().iterdir()
    assert str(cancelled.value) == (
        f"cancelled by the user; 1 of 3 segments (15 of 45 frames) are kept in {folder}: "
        "run again with --resume to continue"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "owner.json", "seg-00000.mp4"]
    assert leftovers(tmp_path) == []

    with pytest.raises(InvalidInput) as refused:
        run(clip, out, Stopper(), resume=True, crf=30)
    assert str(refused.value) == (
        f"cannot resume: the interrupted job for {out.resolve()} used other settings (video.crf differ); "
        "rerun it with the same settings, or without --resume to start over"
    )
    assert (folder / "seg-00000.mp4").exists()

    stopper = Stopper()
    report = run(clip, out, stopper, resume=True)
    assert stopper.seen == list(range(15, 45))  # frames 0–14 were not processed again
    assert report.frames == video.probe(out).frame_count == 45
    assert report.segments == {"count": 3, "segment_frames": 15, "reused": [0], "frames_processed": 30}
    assert report.fps == 30 / report.seconds  # the speed of the work done, not of the reused frames
    assert not folder.exists()


def test_without_resume_an_interrupted_job_starts_over(clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.mp4"
    with pytest.raises(Cancelled):
        run(clip, out, Stopper(at=20, error=KeyboardInterrupt()))
    stopper = Stopper()
    assert run(clip, out, stopper).segments["reused"] == []  # type: ignore[index]
    assert stopper.seen == list(range(45))


def test_cancel_before_any_segment_is_finished_removes_the_folder(clip: Path, tmp_path: Path) -> None:
    with pytest.raises(Cancelled, match="^cancelled by the user; nothing was written$"):
        run(clip, tmp_path / "o.mp4", Stopper(at=5, error=KeyboardInterrupt()))
    assert leftovers(tmp_path) == [] and list(jobs().iterdir()) == []


def test_disk_space_refusal(clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobdir, "free_bytes", lambda path: 1_000_000)
    out = tmp_path / "o.mp4"
    stopper = Stopper()
    with pytest.raises(InsufficientDiskSpace) as refused:
        run(clip, out, stopper)
    message = str(refused.value)
    assert message.startswith("not enough disk space: the job needs about ")
    assert message.endswith(
        "which has 1.0 MB free; free some space, write the output to another disk, or set FACESTUDIO_JOBS to a "
        "folder on another disk"
    )
    assert stopper.seen == [] and leftovers(tmp_path) == [] and list(jobs().iterdir()) == []

    # The CLI: exit 2, one line.
    code = cli.main(["run", "--target", str(clip), "--output", str(out), *CHAIN, "--yes"])
    assert code == 2 and not out.exists()


def test_disk_space_refusal_on_resume_keeps_the_finished_segments(
    clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "o.mp4"
    with pytest.raises(Cancelled):
        run(clip, out, Stopper(at=20, error=KeyboardInterrupt()))
    monkeypatch.setattr(jobdir, "free_bytes", lambda path: 1_000_000)
    with pytest.raises(InsufficientDiskSpace, match=r"are kept in .*: once there is room, run again with --resume$"):
        run(clip, out, Stopper(), resume=True)
    (folder,) = jobs().iterdir()
    assert (folder / "seg-00000.mp4").exists()


def test_the_estimate_counts_only_missing_segments_and_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[Path, int] = {}

    def check(needs: dict[Path, int], hint: str) -> None:
        asked.update(needs)

    monkeypatch.setattr(jobdir, "check_disk_space", check)
    plan = segments.plan(90, 15)
    job = Job.parse({"processors": ["stopper"], "target": "t.mp4", "output": "/o/x.mp4"}, {"stopper": Stopper})
    info = video.MediaInfo(
        Path("t.mp4"), "video", 64, 48, 90, 30.0, "30/1", 3.0, 0, True, "aac", False, "h264", "yuv420p", "mp4",
        Fraction(1, 30), tuple(range(90)),
    )  # fmt: skip
    span = video.select(info)
    render = VideoRender(job, [], Runtime(job.runtime), info, span, (64, 48), None, 1, BatchLimit(1))
    done = {str(i): {"frames": 15, "bytes": 1} for i in (0, 1, 2)}
    VideoJob(render, plan, jobdir.JobFolder(Path("/j/k"), {"done": done}), []).check_disk_space()
    assert asked == {
        Path("/j/k"): segments.estimate_video_bytes(64, 48, 45, 30.0, 18, audio=True),
        Path("/o"): segments.estimate_video_bytes(64, 48, 90, 30.0, 18, audio=True),
    }


def test_check_disk_space_adds_up_folders_on_one_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobdir, "free_bytes", lambda path: 100)
    jobdir.check_disk_space({tmp_path / "a": 50, tmp_path / "b": 50}, "hint")
    with pytest.raises(
        InsufficientDiskSpace, match=r"needs about 101 B on the disk of .*, which has 100 B free; hint$"
    ):
        jobdir.check_disk_space({tmp_path / "a": 50, tmp_path / "b": 51}, "hint")


# -- the sweep -------------------------------------------------------------------------------------------------
def make_folder(root: Path, name: str, owner: jobdir.Owner | None, done: bool, age_s: float = 0) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if owner is not None:
        (folder / jobdir.OWNER_FILE).write_text(json.dumps(owner.__dict__))
    manifest = folder / jobdir.MANIFEST_FILE
    manifest.write_text(json.dumps({"done": {"0": {"frames": 15, "bytes": 1}} if done else {}}))
    old = time.time() - age_s
    os.utime(manifest, (old, old))
    os.utime(folder, (old, old))
    return folder


def dead_owner() -> jobdir.Owner:
    """The owner record of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(child.pid).create_time()
    child.wait()
    return jobdir.Owner(child.pid, started, socket.gethostname())


def test_sweep_removes_dead_jobs_folders_only(tmp_path: Path) -> None:
    host = socket.gethostname()
    week = jobdir.RESUME_WINDOW_S
    names = iter(f"{i:016x}" for i in range(100))  # job folders are named by 16-hex-digit job keys
    live = make_folder(tmp_path, next(names), jobdir.Owner.current(), done=False, age_s=2 * week)
    dead = make_folder(tmp_path, next(names), dead_owner(), done=False)
    reused_pid = make_folder(tmp_path, next(names), jobdir.Owner(os.getpid(), 0.0, host), done=False)
    resumable = make_folder(tmp_path, next(names), dead_owner(), done=True, age_s=week - 60)
    expired = make_folder(tmp_path, next(names), dead_owner(), done=True, age_s=week + 60)
    elsewhere = make_folder(tmp_path, next(names), jobdir.Owner(1, 0.0, host + "-other"), done=False)
    starting = make_folder(tmp_path, next(names), None, done=False)
    debris = make_folder(tmp_path, next(names), None, done=False, age_s=2 * 3600)
    # FACESTUDIO_JOBS may be a folder that holds other things: what is not named like a job is never touched.
    photos = make_folder(tmp_path, "photos_2023", dead_owner(), done=False, age_s=2 * week)
    other = make_folder(tmp_path, "0123456789abcdef-old", None, done=False, age_s=2 * week)

    removed = jobdir.sweep(tmp_path)
    assert sorted(removed) == sorted([dead, reused_pid, expired, debris])
    assert sorted(p for p in tmp_path.iterdir()) == sorted([live, resumable, elsewhere, starting, photos, other])


def test_a_job_folder_of_a_running_process_is_refused(clip: Path, tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = jobdir.Owner(sleeper.pid, psutil.Process(sleeper.pid).create_time(), socket.gethostname())
        out = tmp_path / "o.mp4"
        key = segments.job_key(str(out.resolve()))
        folder = make_folder(jobs(), key, owner, done=False)
        with pytest.raises(InvalidInput, match=rf"^another facestudio process \(pid {sleeper.pid}\) is rendering "):
            run(clip, out, Stopper())
        assert folder.exists() and leftovers(tmp_path) == []
    finally:
        sleeper.kill()
        sleeper.wait()


# -- signals ---------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("finished", [True, False])
def test_sigterm_exits_4_without_orphans_or_output(tmp_path: Path, finished: bool) -> None:
    target = make_clip(tmp_path / "clip.mp4")
    out, root = tmp_path / "out.mp4", tmp_path / "jobs"
    size = ["--set", "video.segment_frames=15"] if finished else []
    # Held (tests/gate.py) once a segment is finished, or once the first frame is being encoded.
    at = FINISHED if finished else "engine.media.encode:FrameWriter.write"
    run = start(["--target", str(target), "--output", str(out), *CHAIN, *size], root, at)
    child = run.process
    try:
        run.reached()
        ffmpegs = live_children(child.pid)
        assert ffmpegs, "no ffmpeg child while rendering"
        child.send_signal(signal.SIGTERM)
    finally:
        run.close()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 4, err
    assert not [pid for pid in ffmpegs if Path(f"/proc/{pid}").exists()]
    assert leftovers(tmp_path) == ["jobs"]  # no output, no partial file
    if finished:
        (folder,) = root.iterdir()
        assert err.startswith("error: cancelled by the user; ") and err.endswith(
            f"are kept in {folder}: run again with --resume to continue\n"
        )
        assert not list(folder.glob("work-*")) and list(folder.glob("seg-*.mp4"))
    else:
        assert err == "error: cancelled by the user; nothing was written\n"
        assert list(root.iterdir()) == []


def test_an_unwritable_jobs_folder_is_a_one_line_error(
    clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("FACESTUDIO_JOBS", str(blocker / "jobs"))
    with pytest.raises(
        InvalidInput, match=r"^cannot create the job folder .*; set FACESTUDIO_JOBS to a writable folder$"
    ):
        run(clip, tmp_path / "o.mp4", Stopper())
    assert leftovers(tmp_path) == ["file"]
