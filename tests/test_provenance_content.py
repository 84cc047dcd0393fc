"""The content check (`runtime.content_check`) with a generated graph of open_nsfw's real signature: `input:0`
N×224×224×3 float (BGR minus the mean, NHWC) → `outputs` N×2 softmax (safe, explicit), whose explicit score is high
for frames that show the test's marker (a magenta square) and low for the demo photo. It is fetched by the real
download code from a file:// URL with its sha256, like the real model."""

from __future__ import annotations

import hashlib
import json
import os
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import cli
from engine import media as video
from engine.media import demo
from engine.models import runtime as runtime_module
from engine.models.manifest import MANIFEST_PATH
from engine.provenance import content
from engine.run import pipeline

SIZE = (160, 120)
COUNT = 24
MARKED = range(10, 16)  # frames that show the marker


def graph(path: Path) -> Path:
    """score = softmax([0, 0.05 · (mean(R) + mean(B) − 2·mean(G) − 7 − 150)]): magenta over most of the crop
    gives ~+5 (0.99), the orange-and-white demo photo about −5 (0.01). The −7 undoes the BGR mean offsets."""
    mean = helper.make_node("ReduceMean", ["input:0"], ["rgb"], axes=[1, 2], keepdims=0)
    weights = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], [0.0, 0.05, 0.0, -0.10, 0.0, 0.05])
    bias = helper.make_tensor("b", TensorProto.FLOAT, [2], [0.0, 0.05 * (-7.0 - 150.0)])
    nodes = [
        mean,
        helper.make_node("MatMul", ["rgb", "w"], ["logits0"]),
        helper.make_node("Add", ["logits0", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["outputs"], axis=1),
    ]
    inputs = [helper.make_tensor_value_info("input:0", TensorProto.FLOAT, ["n", 224, 224, 3])]
    outputs = [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, ["n", 2])]
    model = helper.make_model(
        helper.make_graph(nodes, "open_nsfw_signature", inputs, outputs, [weights, bias]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 8
    onnx.save(model, path)
    return path


def with_marker(frame: np.ndarray) -> np.ndarray:
    out = frame.copy()
    h, w = out.shape[:2]
    out[h // 8 : h - h // 8, w // 8 : w - w // 8] = (255, 0, 255)
    return out


@pytest.fixture
def classifier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The catalogue with open_nsfw's file at a file:// URL with its sha256 (not yet downloaded)."""
    onnx_file = graph(tmp_path / "open-nsfw-signature.onnx")
    data = onnx_file.read_bytes()
    text = MANIFEST_PATH.read_text(encoding="utf-8")
    head, table = text.split("[[models.open_nsfw.files]]")
    table = re.sub(r'^url = ".*"$', f'url = "{onnx_file.as_uri()}"', table, flags=re.M)
    table = re.sub(r"^size = \d+$", f"size = {len(data)}", table, flags=re.M)
    table = re.sub(r'^sha256 = ".*"$', f'sha256 = "{hashlib.sha256(data).hexdigest()}"', table, flags=re.M)
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(head + "[[models.open_nsfw.files]]" + table, encoding="utf-8")
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(manifest))
    return onnx_file


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clip") / "party.mp4"
    frames = demo.frames(*SIZE, COUNT)
    with video.FrameWriter(path, *SIZE, video.FrameTimes.constant(Fraction(12)), metadata={}) as writer:
        for i, frame in enumerate(frames):
            writer.write(with_marker(frame) if i in MARKED else frame)
    return path


def run(target: Path, output: Path, mode: str, *extra: str) -> int:
    return cli.main([
        "run", "--target", str(target), "--output", str(output), "--processors", "frame_enhancer",
        "--set", "frame_enhancer.scale=1", "--set", f"runtime.content_check={mode}", *extra, "--yes",
    ])  # fmt: skip


def test_the_signature_graph_scores_the_marker_high(classifier: Path) -> None:
    # The sampled frames of the clip (every second one) in the check's own preprocessing.
    from engine.job.settings import RuntimeSettings

    model = runtime_module.Runtime(RuntimeSettings()).load(content.MODEL)
    frames = demo.frames(*SIZE, 2)
    scored = content._score_batch(model, [(0, 0.0, frames[0]), (1, 0.1, with_marker(frames[1]))])
    assert scored[0][2] < 0.1 and scored[1][2] > 0.9


def test_refuse_exits_2_naming_the_frame_and_score_before_any_output(
    classifier: Path, clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out.mp4"
    assert run(clip, output, "refuse") == 2
    err = capsys.readouterr().err
    # 24 frames: every second one is checked, so frame 10 is the first marked frame that is.
    assert re.fullmatch(
        r"error: the content check refused party\.mp4: frame 10 \(0\.83 s\) scored (0\.9\d|1\.00) on open_nsfw "
        r"\(threshold 0\.8, runtime\.content_check=refuse\); nothing was written\n",
        err,
    ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.toml", "open-nsfw-signature.onnx"]


def test_refuse_names_an_image(classifier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    target = tmp_path / "still.png"
    Image.fromarray(with_marker(demo.frames(*SIZE, 1)[0])).save(target)
    assert run(target, tmp_path / "out.png", "refuse") == 2
    assert re.search(r"refused still\.png: the image scored (0\.9\d|1\.00) on open_nsfw", capsys.readouterr().err)
    assert not (tmp_path / "out.png").exists()


def test_warn_completes_and_records_the_frames(
    classifier: Path, clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out.mp4"
    assert run(clip, output, "warn") == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^content check: 3 of 12 checked frames scored at or above 0\.8 on open_nsfw: "
        r"frames 10 \((0\.9\d|1\.00)\), 12 ",
        out,
        re.M,
    )
    record = json.loads(pipeline.sidecar_path(output).read_text())["provenance"]["content_check"]
    assert record["mode"] == "warn" and record["frames_checked"] == 12 and record["threshold"] == 0.8
    assert [f["frame"] for f in record["flagged"]] == [10, 12, 14]
    assert record["classifier"] == {"model": "open_nsfw", "sha256": hashlib.sha256(classifier.read_bytes()).hexdigest()}
    # The classifier and its findings are in the Content Credentials too.
    assert cli.main(["verify", str(output)]) == 0
    assert "content check: warn, 3 of 12 frames flagged by open_nsfw (threshold 0.8)" in capsys.readouterr().out


def test_warn_with_nothing_found(classifier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = demo.make_clip(tmp_path / "clean.mp4", width=SIZE[0], height=SIZE[1], count=12, fps=12)
    assert run(clean, tmp_path / "out.mp4", "warn") == 0
    assert (
        "content check: 12 frames checked with open_nsfw, none at or above 0.8 (highest 0.0" in capsys.readouterr().out
    )


def test_off_never_loads_the_model(
    classifier: Path, clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded: list[str] = []
    real = runtime_module.Runtime.load

    def spy(self: runtime_module.Runtime, model_id: str, backend: str | None = None) -> runtime_module.LoadedModel:
        loaded.append(model_id)
        return real(self, model_id, backend)

    monkeypatch.setattr(runtime_module.Runtime, "load", spy)
    output = tmp_path / "out.mp4"
    assert run(clip, output, "off") == 0
    assert content.MODEL not in loaded and loaded  # the chain's own model did load
    assert "content check" not in capsys.readouterr().out
    assert json.loads(pipeline.sidecar_path(output).read_text())["provenance"]["content_check"] is None
    assert not (Path(os.environ["FACESTUDIO_MODELS"]) / "open-nsfw.onnx").exists()  # not even fetched


def test_a_missing_model_with_the_check_on_is_exit_3_naming_it(
    classifier: Path, clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out.mp4"
    assert run(clip, output, "refuse", "--offline") == 3
    err = capsys.readouterr().err
    assert err.startswith("error: the content check (runtime.content_check=refuse) needs the classifier open_nsfw: ")
    assert "open-nsfw.onnx" in err and "models fetch open_nsfw" in err and len(err.splitlines()) == 1
    assert not output.exists()
