"""The expression restorer with stand-in LivePortrait graphs of the catalogue's signatures: the chain runs in the
order MODELS.md §10 states, on the crops it states, mixing the expression as stated; strength 0 gives back the
frame; end to end after a swap through the CLI on both backends; the offline error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import pytest
import tiny_graphs
from scipy.spatial.transform import Rotation
from test_face_swapper_models import FPS, FRAMES, read_frames, two_faces, write_clip

import cli
from engine import media as video
from engine.core.types import Face
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.manifest import Manifest
from engine.models.runtime import LoadedModel, Runtime
from processors.expression_restorer import ExpressionRestorer, ExpressionRestorerOptions

PARTS = ("live_portrait_feature_extractor", "live_portrait_motion_extractor", "live_portrait_generator")
# MODELS.md §10: keypoints the restorer moves per part, and those always kept from the swapped face.
UPPER, LOWER, KEPT = [1, 2, 6, 10, 11, 12, 13, 15, 16], [3, 7, 14, 17, 18, 19, 20], [0, 4, 5, 8, 9]
INSIGHTFACE_112 = [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]]
ARCFACE_128 = (np.array(INSIGHTFACE_112) + [8, 0]) / 128  # MODELS.md §1


class Logged:
    """A session that appends (model id, inputs, outputs) of every call to a shared log."""

    def __init__(self, model_id: str, inner: Any, log: list[tuple[str, dict, list]]) -> None:
        self.model_id, self.inner, self.log = model_id, inner, log
        self.input_names, self.backend, self.provider = inner.input_names, inner.backend, inner.provider

    def run(self, inputs: dict[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        outputs = self.inner.run(inputs)
        self.log.append((self.model_id, {k: np.array(v) for k, v in inputs.items()}, [np.array(o) for o in outputs]))
        return outputs


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("live_portrait")
    tiny_graphs.write_manifest(root / "manifest.toml", tiny_graphs.live_portrait(root / "mirror"))
    return root


@pytest.fixture
def manifest_env(catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(catalogue / "manifest.toml"))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(catalogue / "models"))
    monkeypatch.setenv("FACESTUDIO_CACHE", str(catalogue / "cache"))
    return catalogue


def faces_on(colour: tuple[int, int, int], points: npt.NDArray[np.float64]) -> npt.NDArray[np.uint8]:
    """A 600×600 grey frame with a filled `colour` disc where the face is (about the 5 points)."""
    frame = np.full((600, 600, 3), 90, np.uint8)
    centre = points.mean(axis=0)
    cv2.circle(frame, (int(centre[0]), int(centre[1])), 120, colour, -1)
    return frame


def restore(parts: str, strength: int, backend: str = "onnx") -> tuple[list, Any, Any, Any]:
    runtime = Runtime(RuntimeSettings(device="cpu"))
    processor = ExpressionRestorer(ExpressionRestorerOptions(strength=strength, parts=parts, backend=backend), runtime)
    log: list[tuple[str, dict, list]] = []
    for model_id, loaded in processor.models.items():
        processor.models[model_id] = LoadedModel(loaded.spec, loaded.file, Logged(model_id, loaded.session, log))  # type: ignore[arg-type]
    points = ARCFACE_128 * 512 * 0.8 + 60  # a face whose 512 px crop is about the frame's middle
    face = Face(box=(0, 0, 10, 10), landmarks5=points.astype(np.float32), score=1.0)
    original, swapped = faces_on((40, 60, 230), points), faces_on((230, 40, 40), points)  # blue before, red after
    (out,) = processor.process([swapped], [FrameContext(index=0, faces=(face,), original=original)])
    return log, out, swapped, original


@pytest.mark.parametrize("parts", ["whole", "eyes", "lips"])
def test_the_chain_runs_in_the_stated_order_on_the_stated_crops(parts: str, manifest_env: Path) -> None:
    log, out, swapped, _ = restore(parts, strength=100)
    assert [entry[0] for entry in log] == [PARTS[0], PARTS[1], PARTS[1], PARTS[2]]
    (_, feat_in, feat_out), (_, before_in, before_out), (_, after_in, motion), (_, gen_in, _) = log
    # 1. the feature extractor reads the swapped face; 2. the motion extractor the original; 3. then the swapped.
    red, blue = (lambda t: t[0, 0].mean() > t[0, 2].mean()), (lambda t: t[0, 2].mean() > t[0, 0].mean())
    assert red(feat_in["input"]) and blue(before_in["input"]) and red(after_in["input"])
    np.testing.assert_array_equal(feat_in["input"], after_in["input"])
    for tensor in (feat_in["input"], before_in["input"]):  # 256 px, RGB/255 (the 512 px crop resized)
        assert tensor.shape == (1, 3, 256, 256) and tensor.min() >= 0.0 and tensor.max() <= 1.0
    # 4. The expression moves to the original's on the chosen parts, the rest (and 0, 4, 5, 8, 9) stay the swapped's.
    pitch, yaw, roll, scale, shift, own, keypoints = motion
    chosen = {"whole": UPPER + LOWER, "eyes": UPPER, "lips": LOWER}[parts]
    mixed = own.copy()
    mixed[:, chosen] = before_out[5][:, chosen]
    rotation = Rotation.from_euler("xyz", [pitch.item(), yaw.item(), roll.item()], degrees=True).as_matrix()
    driving = scale.reshape(1, 1, 1) * (keypoints @ rotation.T + mixed) + shift.reshape(1, 1, 3)
    current = scale.reshape(1, 1, 1) * (keypoints @ rotation.T + own) + shift.reshape(1, 1, 3)
    # 5. The generator warps the swapped face's feature volume from its own points to the driving ones.
    np.testing.assert_array_equal(gen_in["feature_volume"], feat_out[0])
    np.testing.assert_allclose(gen_in["source"], driving, atol=1e-6)
    np.testing.assert_allclose(gen_in["target"], current, atol=1e-6)
    np.testing.assert_allclose(gen_in["source"][:, KEPT], current[:, KEPT], atol=1e-6)
    assert np.abs(gen_in["source"] - gen_in["target"]).max() > 1e-3  # the two faces' expressions did differ
    assert np.abs(out.astype(int) - swapped).max() > 10


def test_strength_0_gives_back_the_input_frame_and_runs_nothing(
    manifest_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FACESTUDIO_MODELS", str(manifest_env / "empty"))  # nothing downloaded: nothing needed
    log, out, swapped, _ = restore("whole", strength=0)
    np.testing.assert_array_equal(out, swapped)
    assert log == [] and ExpressionRestorer.model_ids(ExpressionRestorerOptions(strength=0)) == []


def test_a_frame_without_its_original_is_a_typed_error(manifest_env: Path) -> None:
    processor = ExpressionRestorer(ExpressionRestorerOptions(), Runtime(RuntimeSettings(device="cpu")))
    face = Face(box=(0, 0, 10, 10), landmarks5=(ARCFACE_128 * 300).astype(np.float32), score=1.0)
    with pytest.raises(Exception, match="needs each frame as it was before the swap") as info:
        processor.process([np.zeros((300, 300, 3), np.uint8)], [FrameContext(index=0, faces=(face,))])
    assert info.value.exit_code == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_after_a_swap_through_the_cli(backend: str, manifest_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clip = manifest_env / "two.mp4"
    if not clip.exists():
        write_clip(clip, [two_faces(i) for i in range(FRAMES)], FPS)
    out = manifest_env / f"restored-{backend}.mp4"
    code = cli.main([
        "run", "--source", str(demo.source_photo()), "--target", str(clip), "--output", str(out),
        "--processors", "face_swapper", "expression_restorer", "--set", "faces.selector=many",
        "--set", "runtime.batch=4", "--set", "video.crf=0", "--backend", backend, "--yes",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    models = sidecar["processors"]["expression_restorer"]["models"]
    assert sorted(models) == sorted(PARTS) and {m["backend"] for m in models.values()} == {backend}
    assert sidecar["faces"]["processed"] == 2 * FRAMES
    before, after = read_frames(clip), read_frames(out)
    assert len(after) == FRAMES
    for a, b in zip(before, after, strict=True):
        diff = np.abs(a - b).max(axis=2)
        assert diff[40:90, 55:95].mean() > 3 and diff[40:90, 305:345].mean() > 3
        assert diff[190:].mean() < 2.5


def test_offline_exits_3_naming_files_urls_licence_and_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "FACESTUDIO_MANIFEST" not in os.environ
    target = tmp_path / "t.png"
    video.write_image(target, two_faces())
    code = cli.main(["run", "--offline", "--processors", "expression_restorer", "--target", str(target),
                     "--output", str(tmp_path / "o.png"), "--yes"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1
    for model_id in PARTS:
        spec = Manifest.load().get(model_id)
        assert spec.files[0].filename in err and str(spec.files[0].url) in err and f"{model_id}: MIT" in err
    assert "no published sha256" in err and os.environ["FACESTUDIO_MODELS"] in err
