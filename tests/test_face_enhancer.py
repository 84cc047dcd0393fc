"""The face enhancer: the embedded real_esrgan_face on a degraded photo; GFPGAN, CodeFormer and RestoreFormer
from placed files (random weights in the real architectures) on both backends; the offline error."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

import cli
from engine import media as video
from engine.faces.align import estimate_affine, warp_face
from engine.faces.embedded import EmbeddedAnalyser
from engine.faces.masks import crop_mask
from engine.media import demo
from engine.models.manifest import MANIFEST_PATH

# PyTorch (and spandrel, and what imports them) is imported in the tests that use it, not when the file is
# collected: every xdist worker collects every file, and PyTorch alone holds ~0.5 GB (tests/README.md, Memory).

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def degraded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The astronaut photo shrunk to a quarter and blown back up: a soft face, as after a 128 px swap."""
    photo = demo.photo()
    soft = cv2.resize(cv2.resize(photo, (128, 128), interpolation=cv2.INTER_AREA), (512, 512), cv2.INTER_CUBIC)
    path = tmp_path_factory.mktemp("soft") / "soft.png"
    Image.fromarray(soft).save(path)
    return path


def place(model_id: str, filename: str, state_dict: dict, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Save `state_dict` like the official file (`params_ema`) into the models folder and point a temporary
    manifest's entry for it at the saved file's size and sha256."""
    import torch

    models = Path(os.environ["FACESTUDIO_MODELS"])
    models.mkdir(parents=True, exist_ok=True)
    placed = models / filename
    torch.save({"params_ema": state_dict}, placed)
    data = placed.read_bytes()
    text = MANIFEST_PATH.read_text()
    section = text.index(f"[[models.{model_id}.files]]")
    pinned = f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"'
    text = text[:section] + re.sub(r'size = \d+\nsha256 = "[0-9a-f]+"', pinned, text[section:], count=1)
    (folder / "manifest.toml").write_text(text)
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(folder / "manifest.toml"))


def enhance(target: Path, out: Path, *extra: str) -> dict:
    """Run the face enhancer offline on `target`; returns the sidecar's face_enhancer entry."""
    args = ["run", "--target", str(target), "--output", str(out), "--processors", "face_enhancer", "--offline"]
    assert cli.main([*args, *extra, "--yes"]) == 0
    return json.loads(Path(str(out) + ".job.json").read_text())["processors"]["face_enhancer"]


def face_support(image: np.ndarray) -> np.ndarray:
    """H×W bool: where the enhancer's paste mask (face kind, default padding and blur) is above zero."""
    analyser = EmbeddedAnalyser()
    (face,) = analyser.detect(image)
    affine = estimate_affine(face.landmarks5, "ffhq_512", 512)
    points = cv2.transform(face.landmarks68[None].astype(np.float64), affine)[0]
    mask = crop_mask(512, points, kind="face")
    back = cv2.warpAffine(mask, cv2.invertAffineTransform(affine), (image.shape[1], image.shape[0]))
    return cv2.dilate((back > 0).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0


def sharpness(image: np.ndarray, box: tuple[int, int, int, int]) -> float:
    x0, y0, x1, y1 = box
    return float(cv2.Laplacian(cv2.cvtColor(image[y0:y1, x0:x1], cv2.COLOR_RGB2GRAY), cv2.CV_64F).var())


def test_embedded_enhancer_sharpens_the_face_only(degraded: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.png"
    args = ["run", "--target", str(degraded), "--output", str(out), "--processors", "face_enhancer", "--yes"]
    assert cli.main([*args, "--set", "face_enhancer.blend=100"]) == 0
    before, after = video.read_image(degraded)[0], video.read_image(out)[0]
    (face,) = EmbeddedAnalyser().detect(before)
    box = tuple(int(v) for v in face.box)
    assert sharpness(after, box) >= 1.5 * sharpness(before, box)
    outside = ~face_support(before)
    assert np.abs(after.astype(int) - before.astype(int)).max(axis=2)[outside].max() <= 2
    assert outside.mean() > 0.8


def test_gfpgan_offline_names_file_url_licence_and_folder(degraded: Path, tmp_path: Path, capsys) -> None:
    args = ["run", "--target", str(degraded), "--output", str(tmp_path / "o.png"), "--processors", "face_enhancer"]
    assert cli.main([*args, "--set", "face_enhancer.model=gfpgan_1_4", "--offline", "--yes"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    # The default backend (ONNX Runtime) asks for the published ONNX export.
    url = "https://github.com/harisreedhar/Face-Upscalers-ONNX/releases/download/Models/GFPGANv1.4.onnx"
    for part in ("GFPGANv1.4.onnx", url, "NON-COMMERCIAL", os.environ["FACESTUDIO_MODELS"]):
        assert part in err, part


@pytest.mark.slow
def test_gfpgan_placed_file_loads_without_a_download_and_backends_agree(
    degraded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from spandrel.architectures.GFPGAN import GFPGAN

    # Random weights in the real architecture and size, saved like the official file (`params_ema`).
    torch.manual_seed(0)
    net = GFPGAN(
        out_size=512, num_style_feat=512, channel_multiplier=2, decoder_load_path=None, fix_decoder=False,
        num_mlp=8, input_is_latent=True, different_w=True, narrow=1, sft_half=True,
    )  # fmt: skip
    place("gfpgan_1_4", "GFPGANv1.4.pth", net.state_dict(), tmp_path, monkeypatch)

    outs = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / f"{backend}.png"
        args = ["run", "--target", str(degraded), "--output", str(out), "--processors", "face_enhancer", "--offline"]
        assert cli.main([*args, "--set", "face_enhancer.model=gfpgan_1_4", "--backend", backend, "--yes"]) == 0
        sidecar = json.loads(Path(str(out) + ".job.json").read_text())
        assert sidecar["processors"]["face_enhancer"]["file"] == "GFPGANv1.4.pth"
        assert sidecar["processors"]["face_enhancer"]["backend"] == backend
        outs[backend] = video.read_image(out)[0].astype(int)
    before = video.read_image(degraded)[0]
    outside = ~face_support(before)
    change = np.abs(outs["torch"] - before.astype(int)).max(axis=2)
    assert change[outside].max() <= 2 and change[~outside].mean() > 2
    # Exported to ONNX (static 1×3×512×512, float32 only): the full path agrees with PyTorch to one level.
    assert np.abs(outs["torch"] - outs["onnx"]).max() <= 1

    # The model outputs themselves, on the crop the processor aligns, agree to 1e-3.
    from engine.job.settings import RuntimeSettings
    from engine.models.runtime import Runtime
    from engine.models.tensor import to_tensor

    (face,) = EmbeddedAnalyser().detect(before)
    crop = warp_face(before, estimate_affine(face.landmarks5, "ffhq_512", 512), 512)
    runtime = Runtime(RuntimeSettings(device="cpu", offline=True))
    loaded = [runtime.load("gfpgan_1_4", b) for b in ("torch", "onnx")]
    x = to_tensor(crop[None], loaded[0].spec.io)
    results = [np.clip(m.session.run({"input": x})[0], -1, 1) for m in loaded]
    assert np.abs(results[0] - results[1]).max() <= 1e-3


def test_swap_then_enhance_finds_faces_once_per_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both face processors share the pipeline's one analysis per frame (detections only every 10 frames)."""
    calls: list[tuple[int, int]] = []
    original = EmbeddedAnalyser.detect

    def counting(self: EmbeddedAnalyser, frame: np.ndarray):  # noqa: ANN202
        calls.append(frame.shape[:2])
        return original(self, frame)

    monkeypatch.setattr(EmbeddedAnalyser, "detect", counting)
    target = demo.make_clip(tmp_path / "clip.mp4", 320, 180, 24, 24)
    out = tmp_path / "out.mp4"
    args = ["run", "--source", str(demo.source_photo()), "--target", str(target), "--output", str(out)]
    args += ["--processors", "face_swapper", "face_enhancer", "--set", "faces.qa_every=0", "--yes"]
    assert cli.main(args) == 0
    sidecar = json.loads(Path(str(out) + ".job.json").read_text())
    assert set(sidecar["processors"]) == {"face_swapper", "face_enhancer"}
    assert sidecar["faces"]["processed"] == 24 and video.probe(out).frame_count == 24
    frame_calls = [c for c in calls if c == (180, 320)]
    assert len(frame_calls) == 3  # frames 0, 10 and 20: never once per processor


@pytest.mark.slow
def test_codeformer_fidelity_and_exported_onnx_agree_with_pytorch(
    degraded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import torch
    from spandrel_extra_arches.architectures.CodeFormer import CodeFormer

    torch.manual_seed(0)
    place("codeformer", "codeformer.pth", CodeFormer().state_dict(), tmp_path, monkeypatch)
    # `models export` gives the ONNX backend a graph with the fidelity input and records its sha256.
    assert cli.main(["models", "export", "codeformer", "--to", "onnx", "--offline"]) == 0
    printed = capsys.readouterr()
    assert "S-Lab" in printed.err and "NON-COMMERCIAL" in printed.err
    assert "input  weight: float 1" in printed.out
    models = Path(os.environ["FACESTUDIO_MODELS"])
    (entry,) = json.loads((models / "exports.json").read_text())["exports"]
    exported = models / entry["file"]["filename"]
    assert entry["file"]["sha256"] == hashlib.sha256(exported.read_bytes()).hexdigest()
    assert [i["name"] for i in entry["io"]["inputs"]] == ["input", "weight"]

    before = video.read_image(degraded)[0]
    outs = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / f"{backend}.png"
        used = enhance(degraded, out, "--set", "face_enhancer.model=codeformer", "--set",
                       "face_enhancer.fidelity=0.7", "--backend", backend)  # fmt: skip
        assert used["file"] == ("codeformer.pth" if backend == "torch" else "exports/codeformer.onnx")
        outs[backend] = video.read_image(out)[0].astype(int)
    assert np.abs(outs["torch"] - outs["onnx"]).max() <= 1
    outside = ~face_support(before)
    assert np.abs(outs["onnx"] - before.astype(int)).max(axis=2)[outside].max() <= 2

    # The fidelity weight reaches the model: w = 0 and w = 0.7 restore the face differently.
    enhance(degraded, tmp_path / "w0.png", "--set", "face_enhancer.model=codeformer", "--set",
            "face_enhancer.fidelity=0", "--backend", "onnx")  # fmt: skip
    w0 = video.read_image(tmp_path / "w0.png")[0].astype(int)
    assert np.abs(w0 - outs["onnx"]).max(axis=2)[~outside].mean() > 1


@pytest.mark.slow
def test_restoreformer_runs_on_both_backends(degraded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from spandrel.architectures.RestoreFormer import RestoreFormer

    torch.manual_seed(0)
    place("restoreformer", "RestoreFormer.pth", RestoreFormer().state_dict(), tmp_path, monkeypatch)
    before = video.read_image(degraded)[0]
    outs = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / f"{backend}.png"
        used = enhance(degraded, out, "--set", "face_enhancer.model=restoreformer", "--backend", backend)
        assert (used["file"], used["backend"]) == ("RestoreFormer.pth", backend)
        outs[backend] = video.read_image(out)[0].astype(int)
    assert np.abs(outs["torch"] - outs["onnx"]).max() <= 1
    outside = ~face_support(before)
    change = np.abs(outs["torch"] - before.astype(int)).max(axis=2)
    assert change[outside].max() <= 2 and change[~outside].mean() > 2
