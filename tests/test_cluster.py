"""`run --cluster`: a video's segments rendered on the Ray actors of a local cluster (2 CPUs) give the output of a
single-machine run (every frame, the audio); a worker that dies mid-job has its segment retried on another; a
job interrupted on one machine resumes on the cluster; without Ray, `--cluster` says how to install it."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import audio_seconds
from test_resume import CHAIN, make_clip, read_frames

import cli
from engine import media as video
from engine.core.errors import Cancelled, InvalidInput
from engine.run import pipeline, segments, sidecar
from engine.run.render import render_missing
from engine.serve import cluster

FRAMES, SEGMENT = 45, 15
ARGS = [*CHAIN, "--set", f"video.segment_frames={SEGMENT}", "--set", "video.preset=ultrafast", "--yes"]
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='Ray is not installed (".[ray]")')


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=FRAMES)


@pytest.fixture
def local_ray() -> Iterator[Callable[[], None]]:
    """Starts a 2-CPU local Ray cluster when called (after the test has set the environment its workers inherit),
    and always shuts it down, so no Ray process outlives the test."""
    ray = pytest.importorskip("ray")

    def start() -> None:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024, log_to_driver=False)

    yield start
    ray.shutdown()


def run(clip: Path, output: Path, *extra: str) -> None:
    code = cli.main(["run", "--target", str(clip), "--output", str(output), *ARGS, *extra])
    assert code == 0


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def assert_same_video(output: Path, reference: Path) -> None:
    """`output` holds every frame of the clip, each ≥ 40 dB from the reference's, and the clip's audio."""
    got, want = read_frames(output), read_frames(reference)
    assert got.shape == want.shape and got.shape[0] == FRAMES
    assert min(psnr(a, b) for a, b in zip(got, want, strict=True)) >= 40
    assert abs(audio_seconds(output) - audio_seconds(reference)) <= 0.01 and audio_seconds(output) > 1


def cluster_record(output: Path) -> dict[str, dict]:
    sidecar = json.loads(pipeline.sidecar_path(output).read_text())
    return sidecar["segments"]["cluster"]


def test_cluster_without_ray_says_how_to_install(
    clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code = cli.main(["run", "--target", str(clip), "--output", str(tmp_path / "o.mp4"), *ARGS, "--cluster", "local"])
    assert code == 2
    assert capsys.readouterr().err == 'error: --cluster needs Ray, which is not installed: pip install ".[ray]"\n'
    assert list(tmp_path.iterdir()) == []


def test_workers_without_cluster_is_a_usage_error(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["run", "--target", str(clip), "--output", str(tmp_path / "o.mp4"), *ARGS, "--workers", "2"])
    assert (code, capsys.readouterr().err) == (2, "error: --workers needs --cluster\n")


@needs_ray
def test_cluster_run_equals_a_single_machine_run(
    clip: Path, tmp_path: Path, local_ray: Callable[[], None], isolated_home: Path
) -> None:
    run(clip, tmp_path / "local.mp4")
    local_ray()
    run(clip, tmp_path / "ray.mp4", "--cluster", "local", "--workers", "2")
    assert_same_video(tmp_path / "ray.mp4", tmp_path / "local.mp4")
    record = cluster_record(tmp_path / "ray.mp4")
    assert sorted(record) == ["0", "1", "2"] and {r["attempts"] for r in record.values()} == {1}
    # The first two segments went out at once, one to each worker; neither is the driver.
    workers = {r["worker"] for r in record.values()}
    assert len(workers) == 2 and f"{os.uname().nodename}:{os.getpid()}" not in workers
    assert list((isolated_home / "jobs").iterdir()) == []  # the job folder went with the finished job


@needs_ray
def test_a_worker_killed_mid_job_has_its_segment_retried(
    clip: Path, tmp_path: Path, local_ray: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    run(clip, tmp_path / "local.mp4")
    crashed = tmp_path / "crashed"
    monkeypatch.setenv(cluster.CRASH_ONCE_ENV, str(crashed))  # the first segment handed out kills its worker
    local_ray()
    run(clip, tmp_path / "ray.mp4", "--cluster", "local", "--workers", "2")
    assert crashed.exists()
    assert_same_video(tmp_path / "ray.mp4", tmp_path / "local.mp4")
    attempts = sorted(r["attempts"] for r in cluster_record(tmp_path / "ray.mp4").values())
    assert attempts == [1, 1, 2]


@needs_ray
def test_a_job_interrupted_on_one_machine_resumes_on_the_cluster(
    clip: Path, tmp_path: Path, local_ray: Callable[[], None], isolated_home: Path
) -> None:
    run(clip, tmp_path / "local.mp4")
    out = tmp_path / "ray.mp4"
    args = cli.build_parser().parse_args(["run", "--target", str(clip), "--output", str(out), *ARGS])
    job = cli.common.job_from_args(args)
    from engine.models.runtime import Runtime
    from processors import build_chain

    runtime = Runtime(job.runtime)

    def first_then_stop(render, folder, plan, todo, progress) -> None:  # type: ignore[no-untyped-def]
        render_missing(render, folder, plan, todo[:1], progress)
        raise KeyboardInterrupt  # Ctrl-C after one segment

    with pytest.raises(Cancelled, match="1 of 3 segments"):
        pipeline.run(job, build_chain(job, runtime), runtime, renderer=first_then_stop)
    local_ray()
    run(clip, out, "--cluster", "local", "--workers", "2", "--resume")
    assert_same_video(out, tmp_path / "local.mp4")
    sidecar = json.loads(pipeline.sidecar_path(out).read_text())
    assert sidecar["segments"]["reused"] == [0] and sorted(sidecar["segments"]["cluster"]) == ["1", "2"]
    assert list((isolated_home / "jobs").iterdir()) == []


def test_a_worker_that_cannot_see_the_target_refuses(clip: Path, tmp_path: Path) -> None:
    """The check each actor runs first, on a plain SegmentWorker (no Ray needed): a missing target, or another
    file at its path than the driver's, is an InvalidInput naming the host, raised by the first `render`."""
    args = cli.build_parser().parse_args(["run", "--target", str(clip), "--output", str(tmp_path / "o.mp4"), *ARGS])
    raw = sidecar.absolute_raw(cli.common.job_from_args(args))
    info = video.probe(clip)
    segment = segments.plan(FRAMES, SEGMENT).segments[0]
    work = tmp_path / "work"
    work.mkdir()
    host = socket.gethostname()

    other = cluster.SegmentWorker(raw, info, video.select(info), (96, 64), target_size=clip.stat().st_size + 1)
    with pytest.raises(InvalidInput, match=f"the Ray worker on {host} sees another file at {clip} "):
        other.render(segment, False, str(work / "seg.mp4"))

    missing = cluster.SegmentWorker(
        {**raw, "target": str(tmp_path / "gone.mp4")}, info, video.select(info), (96, 64), 1
    )
    with pytest.raises(InvalidInput) as refused:
        missing.render(segment, False, str(work / "seg.mp4"))
    assert str(refused.value) == (
        f"the Ray worker on {host} cannot read the target {tmp_path / 'gone.mp4'}: put the target, sources, output "
        "and FACESTUDIO_JOBS on a volume every node mounts at the same path"
    )
    assert list(work.iterdir()) == []
