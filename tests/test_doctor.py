"""`launch.py doctor`: providers that are listed but do not load, missing and tampered models (faked in a temp
catalogue), the exit code, the human table, and the JSON keys the guide documents (docs/guide/doctor.md)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

import pytest

import cli
from engine.job.settings import RuntimeSettings
from engine.media import commands
from engine.models.manifest import Manifest
from engine.models.runtime import Folders, Runtime
from engine.tools import doctor

ROOT = Path(__file__).resolve().parent.parent

KEYS = ["schema", "ok", "python", "packages", "profile", "ffmpeg", "onnxruntime", "cuda", "torch", "gpu_memory",
        "folders", "models", "problems"]  # fmt: skip

MODEL = """
[models.{id}]
task = "frame_enhancer"
title = "test model {id}"
licence = "MIT"
commercial_use = true
homepage = "https://example.invalid/{id}"
arch = "SRVGGNetCompact"
scale = 4

[[models.{id}.files]]
format = "onnx"
filename = "{id}.onnx"
url = "{url}"
size = {size}
sha256 = "{sha256}"
"""


@pytest.fixture
def catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A catalogue of three models, its files pinned by sha256: `good` placed intact, `bad` placed with other bytes
    (tampered), `gone` not placed (missing). Returns the models folder."""
    models = Path(os.environ["FACESTUDIO_MODELS"])
    models.mkdir(parents=True)
    text = ""
    for model_id in ("good", "bad", "gone"):
        data = f"weights of {model_id}".encode()
        url = (tmp_path / "mirror" / f"{model_id}.onnx").as_uri()
        text += MODEL.format(id=model_id, url=url, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        if model_id != "gone":
            (models / f"{model_id}.onnx").write_bytes(data if model_id == "good" else b"changed by someone!")
    (tmp_path / "manifest.toml").write_text(text)
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(tmp_path / "manifest.toml"))
    return models


@pytest.fixture
def cuda_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with a visible NVIDIA GPU whose ONNX Runtime lists CUDA, but a CUDA session falls back to the CPU
    (the CUDA/cuDNN libraries did not load)."""
    monkeypatch.setattr(doctor, "gpu_visible", lambda: True)
    monkeypatch.setattr(doctor, "available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(doctor, "load_provider", lambda name: ("CPUExecutionProvider", None))


def test_json_reports_the_provider_that_does_not_load_and_each_model_state(
    catalogue: Path, cuda_fails: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["doctor", "--json"]) == 2  # the tampered file is an error
    report = json.loads(capsys.readouterr().out)
    assert list(report) == KEYS and report["schema"] == 1 and report["ok"] is False

    assert report["onnxruntime"]["providers"] == [
        {"name": "CUDAExecutionProvider", "loads": False, "got": "CPUExecutionProvider",
         "error": "fell back to CPUExecutionProvider"},
        {"name": "CPUExecutionProvider", "loads": True, "got": "CPUExecutionProvider", "error": None},
    ]  # fmt: skip
    (cuda,) = [p for p in report["problems"] if p["check"] == "onnxruntime"]
    assert cuda["severity"] == "warning" and cuda["fix"] == doctor.CUDA_FIX
    assert cuda["message"].startswith("CUDAExecutionProvider is installed but does not load")

    models = {m["id"]: m for m in report["models"]}
    assert {i: m["status"] for i, m in models.items()} == {"good": "present-verified", "bad": "tampered",
                                                           "gone": "missing"}  # fmt: skip
    assert models["gone"]["files"] == [
        {"file": "gone.onnx", "format": "onnx", "status": "missing", "path": str(catalogue / "gone.onnx")}
    ]
    (tampered,) = [p for p in report["problems"] if p["check"] == "models"]
    assert tampered["severity"] == "error" and str(catalogue / "bad.onnx") in tampered["message"]
    assert "expected " + hashlib.sha256(b"weights of bad").hexdigest()[:12] in tampered["message"]
    assert tampered["fix"] == f"delete or replace {catalogue / 'bad.onnx'}, then python launch.py models fetch bad"
    # Reported, never repaired: the file is left for the user to inspect.
    assert (catalogue / "bad.onnx").read_bytes() == b"changed by someone!"
    assert all(p["fix"] and "\n" not in p["message"] + p["fix"] for p in report["problems"])


def test_table_prints_every_section_and_the_problems_with_their_fixes(
    catalogue: Path, cuda_fails: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (catalogue / "bad.onnx").write_bytes(b"weights of bad")  # repaired: only warnings remain
    assert cli.main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    labels = [line.split()[0] for line in lines if line and not line.startswith(" ")]
    for label in ("python", "ffmpeg", "ffprobe", "onnxruntime", "torch", "models", "warning:"):
        assert label in labels
    assert any(re.fullmatch(r"  CUDAExecutionProvider +does not load \(fell back to CPUExecutionProvider\)", line)
               for line in lines)  # fmt: skip
    assert any(re.fullmatch(r"  bad +present-verified", line) for line in lines)
    assert any(re.fullmatch(r"  gone +missing", line) for line in lines)
    warning = lines.index(next(line for line in lines if line.startswith("warning: CUDAExecutionProvider")))
    assert lines[warning + 1] == f"    fix: {doctor.CUDA_FIX}"
    assert lines[-1] == "the default job can run"


def test_a_needed_missing_model_is_an_error_with_its_fetch_command(catalogue: Path) -> None:
    runtime = Runtime(RuntimeSettings(), manifest=Manifest.load(), folders=Folders.from_env())
    rows, problems = doctor.check_models(runtime, {"gone", "good"})
    assert [(r["id"], r["needed"]) for r in rows] == [("good", True), ("bad", False), ("gone", True)]
    gone = [p for p in problems if "gone" in p.message]
    assert gone == [doctor.Problem("models", "error", "gone, which the default job needs, is missing",
                                   "python launch.py models fetch gone")]  # fmt: skip


def test_cpu_provider_that_fails_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def load(name: str) -> tuple[str, str | None]:
        raise RuntimeError("libonnxruntime.so: cannot open shared object file\nsecond line")

    monkeypatch.setattr(doctor, "available_providers", lambda: ["CPUExecutionProvider"])
    monkeypatch.setattr(doctor, "load_provider", load)
    data, problems = doctor.check_onnxruntime()
    error = "RuntimeError: libonnxruntime.so: cannot open shared object file"
    assert data["providers"] == [{"name": "CPUExecutionProvider", "loads": False, "got": None, "error": error}]
    assert [(p.severity, p.message) for p in problems] == [("error", "ONNX Runtime's CPU provider does not load")]


def test_real_providers_load_on_a_graph_built_in_memory() -> None:
    # The real probe, unfaked: the CPU provider loads and runs the one-node graph on every machine.
    assert doctor.load_provider("CPUExecutionProvider") == ("CPUExecutionProvider", None)


def test_a_check_that_breaks_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> doctor.Result:
        raise ImportError("libtorch_cuda.so: undefined symbol")

    monkeypatch.setattr(doctor, "check_torch", broken)
    monkeypatch.setattr(doctor, "check_models", lambda runtime, needed: ([], []))
    with caplog.at_level(logging.DEBUG, logger="engine.tools.doctor"):
        report = doctor.collect([])
    # --debug shows the traceback the one-line problem leaves out.
    (record,) = [r for r in caplog.records if r.getMessage() == "the torch check failed"]
    assert record.exc_info is not None and record.exc_info[0] is ImportError
    assert report["torch"] is None and report["gpu_memory"] is None
    assert doctor.Problem(
        "torch", "warning", "the torch check failed: ImportError: libtorch_cuda.so: undefined symbol",
        "rerun with --debug to see why, and reinstall what it names",
    ).__dict__ in report["problems"]  # fmt: skip
    assert "torch" in doctor.table(report)  # the table still renders


def test_both_onnxruntime_packages_are_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"onnxruntime": "1.20.0", "onnxruntime-gpu": "1.20.0", "numpy": "2.0", "pydantic": "2.7"}

    def version(name: str) -> str:
        if name not in versions:
            raise doctor.importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(doctor.importlib.metadata, "version", version)
    rows, problems = doctor.check_packages()
    assert {r["name"]: r["version"] for r in rows}["opencv"] is None
    messages = {(p.severity, p.message): p.fix for p in problems}
    assert messages[
        ("warning", "both onnxruntime and onnxruntime-gpu are installed; they overwrite each other's files")
    ] == ("pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu")
    assert messages[("error", "opencv is not installed")] == "pip install opencv-python-headless"
    assert messages[("error", "dlib is not installed")] == "pip install dlib-bin"
    assert ("warning", "gradio is not installed: the web UI cannot run") in messages
    torch = "torch, torchvision, spandrel not installed: the PyTorch backend (--backend torch, .pth and .safetensors "
    assert messages[next(m for m in messages if m[1].startswith(torch))].startswith("pip install -r requirements/torch")


@pytest.mark.parametrize(
    ("installed", "torch_requires", "profile", "torch"),
    [
        ({"onnxruntime-gpu": "1.31.1", "torch": "2.14.1"}, ["nvidia-cudnn-cu13==9.13; platform_system == 'Linux'"],
         "gpu", "cuda"),
        ({"onnxruntime": "1.32.0"}, None, "cpu", None),
        ({"onnxruntime": "1.32.0", "torch": "2.13.0+cpu"}, [], "cpu,torch", "cpu"),
        ({"onnxruntime-gpu": "1.31.1"}, None, "custom", None),
        ({"torch": "2.13.0+cpu"}, [], "none", "cpu"),
    ],
)  # fmt: skip
def test_the_install_profile_and_what_a_gpu_would_need(
    monkeypatch: pytest.MonkeyPatch,
    installed: dict[str, str],
    torch_requires: list[str] | None,
    profile: str,
    torch: str | None,
) -> None:
    def version(name: str) -> str:
        if name not in installed:
            raise doctor.importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(doctor.importlib.metadata, "version", version)
    monkeypatch.setattr(doctor.importlib.metadata, "requires", lambda name: torch_requires)
    monkeypatch.setattr(doctor, "nvidia_driver", lambda: None)
    monkeypatch.setattr(doctor, "gpu_visible", lambda: False)
    data, problems = doctor.check_profile()
    assert (data["name"], data["torch"], problems) == (profile, torch, [])
    if profile == "gpu":
        assert data["gpu_needs"] == "an NVIDIA GPU and its driver (this profile brings the CUDA libraries)"
    else:
        assert data["gpu_needs"] == f"an NVIDIA GPU and its driver, and {doctor.GPU_PROFILE}"
        assert "pip install . (the default profile) in a fresh virtual environment" in data["gpu_needs"]
    # With a GPU and its driver: nothing more for the gpu profile; the others are told to install it.
    monkeypatch.setattr(doctor, "nvidia_driver", lambda: "580.65")
    monkeypatch.setattr(doctor, "gpu_visible", lambda: True)
    data, problems = doctor.check_profile()
    if profile == "gpu":
        assert data["gpu_needs"] is None and problems == []
    else:
        assert data["gpu_needs"] == doctor.GPU_PROFILE
        (problem,) = problems
        assert problem.severity == "warning" and problem.fix == doctor.GPU_PROFILE
        assert (
            problem.message == f"an NVIDIA GPU is visible but the {profile} profile is installed: jobs run on the CPU"
        )


def test_cuda_libraries_are_found_on_the_library_path_with_their_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "libcudnn.so.9.1.0").write_bytes(b"")
    (tmp_path / "libcudnn.so.9").symlink_to("libcudnn.so.9.1.0")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    found = doctor._system_libraries("libcudnn.so", {})
    assert found == [{"path": str(tmp_path / "libcudnn.so.9.1.0"), "version": "9.1.0", "source": "system"}]


def test_encoder_test_command() -> None:
    assert commands.encoder_test_args("ffmpeg", "h264_nvenc") == [
        "ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-f", "lavfi", "-i", "color=c=black:s=256x256:r=25",
        "-frames:v", "1", "-c:v", "h264_nvenc", "-f", "null", "-",
    ]  # fmt: skip
    # libx264 really encodes here, through the same command the NVENC check uses.
    from engine import media as video

    assert doctor.encoder_works(video.find_ffmpeg(), "libx264") == (True, None)
    works, error = doctor.encoder_works(video.find_ffmpeg(), "no_such_encoder")
    assert works is False and error and "no_such_encoder" in error


def test_the_guide_documents_exactly_the_json_keys() -> None:
    guide = (ROOT / "docs" / "guide" / "doctor.md").read_text()
    section = guide[guide.index("## Doctor") :]
    section = section[: section.index("\n## ", 1)]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert documented == KEYS
