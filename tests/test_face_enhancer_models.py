"""GPEN-BFR 256/512/1024/2048 and FaceFusion's codeformer.onnx: end to end through the CLI on generated graphs with
their declared signatures (a 4-frame video with two faces a frame, both backends), the crop and tensor each is
fed as MODELS.md §5/§12 say (GPEN 256 on arcface_128, the rest on ffhq_512; RGB in [-1, 1]; CodeFormer's
fidelity as a float64 `weight`), and the offline error of each with the real catalogue."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tiny_graphs
from test_face_swapper_models import FPS, FRAMES, read_frames, two_faces, write_clip
from test_swapper_conventions import ARCFACE_128, FFHQ_512, Spy, assert_on_template, centroids, dotted, similarity

import cli
from engine import media as video
from engine.core.types import Face
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import Folders, LoadedModel, Runtime
from processors.face_enhancer import FaceEnhancer, FaceEnhancerOptions

MODELS = {"gpen_bfr_256": 256, "gpen_bfr_512": 512, "gpen_bfr_1024": 1024, "gpen_bfr_2048": 2048, "codeformer": 512}
TEMPLATES = {"gpen_bfr_256": ARCFACE_128, "gpen_bfr_512": FFHQ_512, "gpen_bfr_1024": FFHQ_512}


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("enhancers")
    real = Manifest.load()
    files: dict[str, Path | tuple[Path, str]] = {}
    for model_id, size in MODELS.items():
        path = root / f"{model_id}.onnx"
        if model_id == "codeformer":
            spec = real.get("codeformer")
            file = next(f for f in spec.files if f.filename == "codeformer.onnx")
            tiny_graphs.enhancer(path, spec.io_for(file), size)
            files[model_id] = (path, "codeformer.onnx")
        else:
            tiny_graphs.enhancer(path, real.get(model_id).io, size)
            files[model_id] = path
    tiny_graphs.write_manifest(root / "manifest.toml", files)
    write_clip(root / "two.mp4", [two_faces(i) for i in range(FRAMES)], FPS)
    return root


@pytest.mark.parametrize("backend", ["onnx", "torch"])
@pytest.mark.parametrize("model_id", list(MODELS))
def test_enhancer_runs_end_to_end(
    model_id: str, backend: str, catalogue: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(catalogue / "manifest.toml"))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(catalogue / f"models_{model_id}"))
    monkeypatch.setenv("FACESTUDIO_CACHE", str(catalogue / "cache"))
    out = catalogue / f"{model_id}-{backend}.mp4"
    code = cli.main([
        "run", "--target", str(catalogue / "two.mp4"), "--output", str(out), "--processors", "face_enhancer",
        "--set", f"face_enhancer.model={model_id}", "--set", "faces.selector=many", "--set", "runtime.batch=4",
        "--set", "face_enhancer.blend=100", "--set", "video.crf=0", "--backend", backend, "--yes",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    described = sidecar["processors"]["face_enhancer"]
    assert described["enhancer"] == model_id and described["backend"] == backend
    assert described["file"] == f"{model_id}.onnx"
    assert sidecar["faces"]["processed"] == 2 * FRAMES and sidecar["batch"] == 4
    before, after = read_frames(catalogue / "two.mp4"), read_frames(out)
    assert len(after) == FRAMES
    for a, b in zip(before, after, strict=True):
        diff = np.abs(a - b).max(axis=2)
        assert diff[40:90, 55:95].mean() > 3 and diff[40:90, 305:345].mean() > 3  # both faces restored
        assert diff[185:].mean() < 2.5  # far below them, only the re-encode's noise


@pytest.mark.parametrize("model_id", list(MODELS))
def test_enhancer_crop_and_tensor_follow_the_facts(
    model_id: str, catalogue: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(catalogue / "manifest.toml"))
    size = MODELS[model_id]
    template = TEMPLATES.get(model_id, FFHQ_512)
    runtime = Runtime(RuntimeSettings(device="cpu"), folders=Folders(catalogue / "models_conv", catalogue / "cache"))
    processor = FaceEnhancer(FaceEnhancerOptions(model=model_id, fidelity=0.25, backend="onnx"), runtime)
    spy = Spy(processor.loaded.session)
    processor.loaded = LoadedModel(processor.loaded.spec, processor.loaded.file, spy)  # type: ignore[arg-type]
    background = np.array([200, 60, 20])
    scale = 2400 / size / 1.4  # the face fills most of a 2400 px frame for the 2048 model, as much for the others
    points = similarity(template * size, 9.0, scale, (150.0, 100.0))
    frame = dotted((2400, 2400), points, background, radius=4.0 * scale)
    face = Face(box=(0, 0, 10, 10), landmarks5=points.astype(np.float32), score=1.0)
    processor.process([frame], [FrameContext(index=0, faces=(face,))])
    (call,) = spy.seen
    tensor = call["input"]
    assert tensor.shape == (1, 3, size, size) and tensor.dtype == np.float32
    pixels = (tensor[0].transpose(1, 2, 0) + 1) * 127.5  # RGB in [-1, 1] (x/255 − 0.5)/0.5
    assert_on_template(centroids(pixels, background), template, size)
    np.testing.assert_allclose(tensor[0, :, 3, size // 2], background / 127.5 - 1, atol=2e-3)
    if model_id == "codeformer":
        assert call["weight"].dtype == np.float64 and call["weight"].tolist() == [0.25]
    else:
        assert set(call) == {"input"}


@pytest.mark.parametrize("model_id", list(MODELS))
def test_offline_enhancer_exits_3_naming_file_url_licence_and_folder(
    model_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "FACESTUDIO_MANIFEST" not in os.environ
    target = tmp_path / "t.png"
    video.write_image(target, two_faces())
    code = cli.main([
        "run", "--offline", "--processors", "face_enhancer", "--set", f"face_enhancer.model={model_id}",
        "--target", str(target), "--output", str(tmp_path / "o.png"), "--backend", "onnx", "--yes",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1
    spec = Manifest.load().get(model_id)
    file = next(f for f in spec.files if f.format == "onnx")
    assert file.filename in err and str(file.url) in err and spec.licence in err
    assert os.environ["FACESTUDIO_MODELS"] in err and "NON-COMMERCIAL" in err


def test_facefusions_codeformer_takes_its_float64_weight_through_fixed_buffers(catalogue: Path) -> None:
    """On CUDA a fixed-shape graph runs from buffers allocated once by element type (the CUDA graph path); the same
    binding on the CPU shows FaceFusion's codeformer.onnx gets its float64 `weight` there too."""
    import onnxruntime as ort

    from engine.backends.onnx import _Binding

    session = ort.InferenceSession(str(catalogue / "codeformer.onnx"), providers=["CPUExecutionProvider"])
    binding = _Binding(session, "cpu", 0, fixed=True)
    image = np.random.default_rng(0).random((1, 3, 512, 512), dtype=np.float32)
    for weight in (0.0, 0.7):
        (bound,) = binding.run({"input": image, "weight": np.array([weight])})
        (plain,) = session.run(None, {"input": image, "weight": np.array([weight])})
        np.testing.assert_array_equal(bound, plain)
