"""The jobs API (webui/server.py, webui/jobs.py) through FastAPI's TestClient: submit, status, result and sidecar,
cancel (queued and running), a full queue, refused consent, bad presets, upload limits, unknown ids and auth."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from engine import media as video
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.media import demo
from engine.serve.health import Readiness
from processors import REGISTRY, build_registry
from tests.test_webui import Invert
from webui import server
from webui.app import Studio, api_jobs
from webui.jobs import JobQueue
from webui.studio import Policy


class Gate(FrameProcessor[ProcessorOptions]):
    """A toy processor that holds every call until the test opens `gate`, and says when a call is waiting."""

    id: ClassVar[str] = "gate"
    title: ClassVar[str] = "Gate"
    Options: ClassVar[type[ProcessorOptions]] = ProcessorOptions
    gate: ClassVar[threading.Event] = threading.Event()
    waiting: ClassVar[threading.Event] = threading.Event()

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        Gate.waiting.set()
        assert Gate.gate.wait(timeout=120), "the test never opened the gate"
        return list(frames)


AUTH = ("me", "a-long-password")
GATED = json.dumps({"processors": ["gate"], "runtime": {"batch": 1}})


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, JobQueue]]:
    """A client of the routes with a running jobs worker (two jobs may wait; 200 kB uploads)."""
    Gate.gate.clear()
    Gate.waiting.clear()
    registry = build_registry([*REGISTRY.values(), Invert, Gate])
    studio = Studio(registry, work_dir=tmp_path / "work", policy=Policy(jobs_per_user=8))
    jobs = api_jobs(studio, tmp_path / "jobs", max_queued=2)
    jobs.start()
    routes = server.routes(jobs, Readiness(studio.registry), auth=None, max_upload=200_000)
    try:
        yield TestClient(FastAPI(routes=routes)), jobs
    finally:
        Gate.gate.set()
        jobs.stop()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("jobs-media")
    photo = folder / "photo.png"
    video.write_image(photo, demo.photo()[::4, ::4])
    return {"photo": photo, "clip": demo.make_clip(folder / "clip.mp4", 64, 36, 6)}


def submit(client: TestClient, target: Path, preset: str = "", *, name: str | None = None, **form: str):
    with target.open("rb") as handle:
        return client.post(
            "/api/jobs",
            files={"target": (name or target.name, handle)},
            data={"preset": preset, "consent": "true", **form},
        )


def ask(client: TestClient, job: dict, path: str = "", method: str = "get", **kwargs):
    """A request about `job` (the submit answer: id and token), with its token as the API asks."""
    call = getattr(client, method)
    return call(f"/api/jobs/{job['id']}{path}", headers={"X-Job-Token": job["token"]}, **kwargs)


def finished(client: TestClient, job: dict) -> dict:
    """The job's status once the worker has finished it (the worker's progress decides when)."""
    while (status := ask(client, job).json())["status"] in {"queued", "running"}:
        time.sleep(0.05)
    return status


def test_a_job_runs_and_its_result_and_sidecar_go_to_its_submitter_alone(api, media) -> None:
    client, jobs = api
    response = submit(client, media["photo"], json.dumps({"processors": ["invert"]}), name="../../my holiday.png")
    assert response.status_code == 202
    job = response.json()
    assert len(job["id"]) >= 20 and len(job["token"]) >= 20
    assert job["id"] != submit(client, media["photo"], '{"processors": ["invert"]}').json()["id"]
    status = finished(client, job)
    assert status == {"id": job["id"], "status": "done", "progress": {"done": 1, "total": 1}, "error": None}
    result = ask(client, job, "/result")
    assert result.status_code == 200
    # Named after the client's own file name (made safe), not after a counter or the server's choice.
    assert result.headers["content-disposition"].endswith('filename="my_holiday-facestudio.png"')
    original = video.read_image(media["photo"])[0].astype(int)
    saved = jobs.folder / job["id"] / "my_holiday-facestudio.png"
    assert saved.read_bytes() == result.content
    assert np.array_equal(video.read_image(saved)[0].astype(int), 255 - original)
    sidecar = ask(client, job, "/result", params={"sidecar": 1})
    assert sidecar.headers["content-type"] == "application/json"
    data = sidecar.json()
    assert data["job"]["processors"] == ["invert"]
    assert (data["job"]["target"], data["input"]["path"], data["output"]["path"]) == (
        "my_holiday.png",
        "my_holiday.png",
        "my_holiday-facestudio.png",
    )
    assert str(jobs.folder) not in sidecar.text and "/tmp" not in sidecar.text
    # Without the token, or with another job's, the job does not exist for the client.
    other = submit(client, media["photo"], '{"processors": ["invert"]}').json()
    for headers in ({}, {"X-Job-Token": other["token"]}, {"X-Job-Token": job["token"] + "x"}):
        for path in ("", "/result", "/result?sidecar=1"):
            assert client.get(f"/api/jobs/{job['id']}{path}", headers=headers).status_code == 404
        assert client.post(f"/api/jobs/{job['id']}/cancel", headers=headers).status_code == 404


def test_a_video_job_reports_frames_and_cancels_between_batches(api, media) -> None:
    client, jobs = api
    job = submit(client, media["clip"], GATED).json()
    assert Gate.waiting.wait(timeout=120)
    running = ask(client, job).json()
    assert running["status"] == "running" and running["progress"] == {"done": 0, "total": 6}
    assert ask(client, job, "/cancel", "post").json()["status"] == "running"
    Gate.gate.set()
    status = finished(client, job)
    assert status["status"] == "cancelled" and status["error"].startswith("cancelled through the jobs API")
    assert ask(client, job, "/result").status_code == 409
    assert not list((jobs.folder / job["id"]).glob("*-facestudio*"))


def test_a_full_queue_refuses_and_a_queued_job_cancels_at_once(api, media) -> None:
    client, _ = api
    first = submit(client, media["photo"], GATED).json()
    assert Gate.waiting.wait(timeout=120)
    queued = [submit(client, media["photo"], GATED).json() for _ in range(2)]
    full = submit(client, media["photo"], GATED)
    assert full.status_code == 503 and full.json()["detail"] == "2 jobs are waiting already; try again later"
    assert full.headers["retry-after"] == "30"
    assert ask(client, queued[0]).json()["status"] == "queued"
    cancelled = ask(client, queued[0], "/cancel", "post").json()
    assert (cancelled["status"], cancelled["error"]) == ("cancelled", "cancelled before it started")
    assert ask(client, queued[0], "/result").status_code == 409
    Gate.gate.set()
    assert finished(client, first)["status"] == "done"
    assert finished(client, queued[1])["status"] == "done"
    assert finished(client, queued[0])["status"] == "cancelled"


@pytest.mark.parametrize(
    ("preset", "form", "code", "detail"),
    [
        ('{"processors": ["invert"]}', {"consent": "false"}, 403, "consent must be true"),
        ('{"processors": ["nope"]}', {}, 400, "unknown processor 'nope'"),
        ("processors = [", {}, 400, "the settings are neither TOML nor JSON"),
        ('{"processors": ["invert"], "invert": {"amount": 999}}', {}, 400, "invert.amount"),
        ('{"processors": ["invert"], "output": "/tmp/x.png"}', {}, 400, "output"),
        (
            '{"processors": ["face_swapper"], "faces": {"selector": "reference", "reference_image": "/etc/hostname"}}',
            {},
            400,
            "faces.reference_image takes a file you uploaded to this server",
        ),
        (
            '{"processors": ["invert"], "lip_syncer": {"audio": "/etc/hostname"}}',
            {},
            400,
            "lip_syncer.audio takes a file you uploaded to this server",
        ),
        (
            '{"processors": ["invert"], "runtime": {"batch": 2, "max_pixels": 1000000000000, "threads": 64}}',
            {},
            400,
            "runtime.threads, runtime.max_pixels are the server's to set",
        ),
        ('{"processors": ["invert"], "video": {"segment_frames": 1}}', {}, 400, "video.segment_frames is the server's"),
    ],
)
def test_refusals_are_4xx_with_one_line(api, media, preset: str, form: dict, code: int, detail: str) -> None:
    client, jobs = api
    response = submit(client, media["photo"], preset, **form)
    assert response.status_code == code
    assert detail in response.json()["detail"] and "\n" not in response.json()["detail"]
    assert not list(jobs.folder.iterdir())  # nothing was stored for a refused job


def test_one_client_may_have_its_share_of_jobs_at_once(tmp_path: Path, media) -> None:
    Gate.gate.clear()
    Gate.waiting.clear()
    studio = Studio(build_registry([*REGISTRY.values(), Gate]), work_dir=tmp_path / "work", policy=Policy())
    jobs = api_jobs(studio, tmp_path / "jobs", max_queued=8)
    jobs.start()
    client = TestClient(FastAPI(routes=server.routes(jobs, Readiness(studio.registry), auth=None, max_upload=1 << 20)))
    try:
        held = [submit(client, media["photo"], GATED).json() for _ in range(2)]  # the default: two per client
        refused = submit(client, media["photo"], GATED)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "30"
        assert refused.json()["detail"] == (
            "you have 2 job(s) waiting or running, the most this server takes from one client "
            "(ui --jobs-per-user 2); try again when one has finished"
        )
        Gate.gate.set()
        assert [finished(client, job)["status"] for job in held] == ["done", "done"]
        assert submit(client, media["photo"], GATED).status_code == 202  # its jobs ended: its share is free again
    finally:
        Gate.gate.set()
        jobs.stop()


def test_a_failing_job_says_why(api, media) -> None:
    client, _ = api
    job = submit(client, media["photo"], '{"processors": ["face_swapper"]}').json()
    status = finished(client, job)
    assert status["status"] == "failed" and status["error"] == "face_swapper needs a source face: add --source IMAGE"


def test_uploads_over_the_limit_and_unknown_ids(api, media, tmp_path: Path) -> None:
    client, jobs = api
    big = tmp_path / "big.png"
    big.write_bytes(bytes(300_000))
    response = submit(client, big, '{"processors": ["invert"]}')
    assert response.status_code == 413
    assert response.json()["detail"] == "the upload is over the server's upload limit of 200000 bytes a file"
    # Under the declared-length check (two files may be 400 kB), over the limit for one file: refused as stored.
    big.write_bytes(bytes(250_000))
    with big.open("rb") as target, media["photo"].open("rb") as source:
        response = client.post(
            "/api/jobs",
            files=[("target", ("big.png", target)), ("sources", ("me.png", source))],
            data={"preset": '{"processors": ["invert"]}', "consent": "true"},
        )
    assert response.status_code == 413
    assert response.json()["detail"] == "the target is over the server's upload limit of 200000 bytes a file"
    assert not list(jobs.folder.iterdir())
    # A body over what any job may bring (a target and MAX_SOURCES sources at the limit) is cut off as it streams
    # in, before it is parsed: without a declared length too (chunked).
    huge = iter([bytes(1 << 20)] * 3)
    response = client.post("/api/jobs", content=huge, headers={"content-type": "multipart/form-data; boundary=x"})
    assert response.status_code == 413
    assert not list(jobs.folder.iterdir())
    for path in ("/api/jobs/nope", "/api/jobs/nope/result"):
        assert client.get(path).status_code == 404
    assert client.post("/api/jobs/nope/cancel").status_code == 404


def test_the_api_takes_the_uis_login_and_the_probes_stay_open(tmp_path: Path) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    jobs = api_jobs(studio, tmp_path / "jobs", max_queued=1)
    client = TestClient(FastAPI(routes=server.routes(jobs, Readiness(studio.registry), auth=AUTH, max_upload=1000)))
    assert client.get("/api/jobs/x").status_code == 401
    assert client.get("/api/jobs/x").headers["www-authenticate"] == "Basic"
    assert client.get("/api/jobs/x", auth=("me", "wrong")).status_code == 401
    assert client.get("/api/jobs/x", auth=AUTH).status_code == 404
    assert client.get("/healthz").status_code == 200 and client.get("/metrics").status_code == 200
