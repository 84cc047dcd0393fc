"""Observability of the served app: /metrics moves when a job runs through the jobs API (with labels from small
fixed sets), /healthz answers, /readyz names what is missing, and the ONNX provider fallback is counted."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from engine.backends import Device
from engine.core import metrics
from engine.job.processor import FrameProcessor
from engine.media import demo
from engine.models.manifest import MANIFEST_PATH, Manifest
from engine.serve.health import Readiness
from processors import REGISTRY
from webui import server
from webui.app import Studio, UISettings, api_jobs, launch

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

# Every metric family the app exports (as the Prometheus parser names them), with the label names each has.
FAMILIES = {
    "facestudio_jobs": {"status"},
    "facestudio_jobs_running": set(),
    "facestudio_job_duration_seconds": {"status"},
    "facestudio_frames_processed": {"processor"},
    "facestudio_frame_latency_seconds": {"processor", "provider"},
    "facestudio_model_load_seconds": {"model", "backend"},
    "facestudio_provider_fallbacks": {"wanted", "used"},
    "facestudio_queue_depth": set(),
    "facestudio_faces_per_frame": set(),
}


def scrape(url: str) -> tuple[Samples, dict[str, list[dict[str, str]]]]:
    """Each sample's value by (name, labels), and each family's samples' labels."""
    response = httpx.get(f"{url}metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    families: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
            # prometheus_client adds a `<family>_created` gauge (start time) beside each counter and histogram.
            families.setdefault(family.name.removesuffix("_created"), []).append(dict(sample.labels))
    return samples, families


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.test_webui import free_port

    studio = Studio(work_dir=tmp_path_factory.mktemp("metrics-work"))
    port = free_port()
    app = launch(UISettings(port=port, queue_size=4), studio, block=False)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        app.close()


def wait_for(url: str, submitted: dict) -> dict:
    """The job's status once it has finished (polls with the submit answer's token; the job decides when)."""
    while True:
        status = httpx.get(f"{url}api/jobs/{submitted['id']}", headers={"X-Job-Token": submitted["token"]}).json()
        if status["status"] in {"done", "failed", "cancelled"}:
            return status
        time.sleep(0.2)


def processor_ids(cls: type) -> set[str]:
    """The ids of every processor class loaded in this process, `cls`'s subclasses at any depth."""
    return {getattr(sub, "id", "") for sub in cls.__subclasses__()} | {
        i for sub in cls.__subclasses__() for i in processor_ids(sub)
    }


def loaded_before(samples: Samples) -> set[str]:
    """The model labels already in `samples` (the loads of test catalogues' models by earlier tests in this worker),
    each checked to be a catalogue id's shape: lower-case letters, digits and underscores, not a file or path."""
    models = {dict(labels)["model"] for name, labels in samples if name.startswith("facestudio_model_load_seconds")}
    assert all(re.fullmatch(r"[a-z][a-z0-9_]{0,63}", model) for model in models), models
    return models


def test_a_job_moves_the_metrics_with_low_cardinality_labels(app_url: str, tmp_path: Path) -> None:
    clip = demo.make_clip(tmp_path / "clip.mp4", 160, 90, 4)
    before, _ = scrape(app_url)
    preset = {"processors": ["face_swapper", "frame_enhancer"], "frame_enhancer": {"scale": 2}}
    with clip.open("rb") as target, demo.source_photo().open("rb") as source:
        response = httpx.post(
            f"{app_url}api/jobs",
            files=[("target", ("clip.mp4", target)), ("sources", ("me.jpg", source))],
            data={"preset": json.dumps(preset), "consent": "true"},
        )
    assert response.status_code == 202
    assert wait_for(app_url, response.json())["status"] == "done"
    after, families = scrape(app_url)
    assert set(FAMILIES) <= set(families)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("facestudio_jobs_total", status="done") == 1
    assert moved("facestudio_job_duration_seconds_count", status="done") == 1
    for processor in ("face_swapper", "frame_enhancer"):
        assert moved("facestudio_frames_processed_total", processor=processor) == 4
    latency = "facestudio_frame_latency_seconds_count"
    assert moved(latency, processor="face_swapper", provider="cpu") == 4
    assert moved(latency, processor="frame_enhancer", provider="CPUExecutionProvider") == 4
    assert moved("facestudio_model_load_seconds_count", model="realesr_animevideov3", backend="onnx") == 1
    assert moved("facestudio_faces_per_frame_count") == 4 and moved("facestudio_faces_per_frame_sum") == 4
    assert value(after, "facestudio_jobs_running") == 0 and value(after, "facestudio_queue_depth") == 0

    # Labels come from small fixed sets: never paths, session ids or job ids.
    allowed = {
        "status": set(metrics.JOB_OUTCOMES),
        # The registry is process-wide: the toy processors of the other test modules this worker ran may be there.
        "processor": {*REGISTRY, *processor_ids(FrameProcessor)},
        "provider": set(metrics.PROVIDER_LABELS),
        "wanted": set(metrics.PROVIDER_LABELS),
        "used": set(metrics.PROVIDER_LABELS),
        "backend": {"onnx", "torch"},
        # A catalogue model's id, or for a graph the user gave (a .dfm) the processor that runs it; and the models
        # of the test catalogues that other test modules loaded in this worker before (each an id, never a file).
        "model": {*Manifest.load().models, *REGISTRY, *loaded_before(before)},
    }
    for family, label_sets in families.items():
        assert family in FAMILIES or not family.startswith("facestudio_"), family
        for labels in label_sets if family in FAMILIES else ():
            labels.pop("le", None)
            assert set(labels) == FAMILIES[family], (family, labels)
            for key, label in labels.items():
                assert label in allowed[key], (family, key, label)


def test_healthz_and_readyz_on_the_served_app(app_url: str) -> None:
    assert httpx.get(f"{app_url}healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{app_url}readyz")
    assert (ready.status_code, ready.json()) == (200, {"ready": True, "reasons": []})


def probe_client(readiness: Readiness, tmp_path: Path) -> TestClient:
    jobs = api_jobs(Studio(work_dir=tmp_path / "work"), tmp_path / "jobs", 2)
    return TestClient(FastAPI(routes=server.routes(jobs, readiness, auth=None, max_upload=1 << 20)))


def test_readyz_names_a_missing_model_then_turns_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = b"not really GFPGAN, but the sha256 matches"
    text = MANIFEST_PATH.read_text()
    start = text.index("[[models.gfpgan_1_3.files]]")
    end = text.index("\n\n", start)
    entry = (f'[[models.gfpgan_1_3.files]]\nformat = "pth"\nfilename = "GFPGANv1.3.pth"\n'
             f'url = "file:///nowhere/GFPGANv1.3.pth"\nsize = {len(payload)}\n'
             f'sha256 = "{hashlib.sha256(payload).hexdigest()}"')  # fmt: skip
    (tmp_path / "manifest.toml").write_text(text[:start] + entry + text[end:])
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(tmp_path / "manifest.toml"))
    models = tmp_path / "models"
    monkeypatch.setenv("FACESTUDIO_MODELS", str(models))
    preset = tmp_path / "restore.toml"
    preset.write_text('processors = ["face_enhancer"]\n[face_enhancer]\nmodel = "gfpgan_1_3"\n')
    client = probe_client(Readiness(REGISTRY, str(preset)), tmp_path)

    missing = client.get("/readyz")
    assert missing.status_code == 503
    (reason,) = missing.json()["reasons"]
    # Anyone may ask: the file is named, the server's folders are not.
    assert reason == "model gfpgan_1_3: GFPGANv1.3.pth missing"

    models.mkdir()
    (models / "GFPGANv1.3.pth").write_bytes(payload)
    assert client.get("/readyz").json() == {"ready": True, "reasons": []}
    assert client.get("/healthz").status_code == 200


def test_readyz_refuses_a_full_disk_and_an_unknown_preset(tmp_path: Path) -> None:
    client = probe_client(Readiness(REGISTRY, "no-such-preset", min_free_bytes=1 << 62), tmp_path)
    response = client.get("/readyz")
    assert response.status_code == 503
    preset, disk = response.json()["reasons"]
    assert preset.startswith("preset: preset 'no-such-preset' not found")
    assert disk.startswith("disk: ") and "GB needed" in disk
    assert "GB free in the temp folder," in disk and "/" not in disk


def test_an_onnx_provider_fallback_is_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.backends import onnx as backend

    class CpuOnly:
        """ONNX Runtime as on a GPU box whose CUDA libraries do not load: CUDA listed, the CPU used."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def get_providers(self) -> list[str]:
            return [backend.CPU]

        def get_inputs(self) -> list:
            return []

        def get_outputs(self) -> list:
            return []

    monkeypatch.setattr(backend, "gpu_visible", lambda: True)
    monkeypatch.setattr(backend.ort, "get_available_providers", lambda: [backend.CUDA, backend.CPU])
    monkeypatch.setattr(backend.ort, "InferenceSession", CpuOnly)

    def count() -> float | None:
        labels = {"wanted": backend.CUDA, "used": backend.CPU}
        return metrics.PROCESS_METRICS.registry.get_sample_value("facestudio_provider_fallbacks_total", labels)

    before = count()
    session = backend.OnnxSession(tmp_path / "model.onnx", Device.parse("auto"), cache_dir=tmp_path)
    assert session.provider == backend.CPU
    assert count() == (before or 0) + 1


@pytest.mark.parametrize(
    ("provider", "label"),
    [
        ("CUDAExecutionProvider", "CUDAExecutionProvider"),
        ("torch:cuda:3", "torch:cuda"),
        ("torch:cpu", "torch:cpu"),
        ("CPU", "cpu"),
        (None, "cpu"),
        ("/some/path/or/session-id", "other"),
    ],
)
def test_provider_labels_are_a_fixed_set(provider: str | None, label: str) -> None:
    assert metrics.provider_label(provider) == label
