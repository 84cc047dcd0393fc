"""The deep swapper on stand-in `.dfm` graphs of DeepFaceLive's signature (the swapped face = the inverted crop):
the user's file is checked at load against `[io.dfm]` / `[io.dfm_morph]` and refused in one line when it differs;
the face goes in on the whole-face template, BGR, channels last, with the morph where the graph takes it; pixels
outside the paste-back mask stay; blend 0 gives back the frame and needs no file; a video keeps frames, times and
audio; the sidecar records the file's sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import tiny_graphs
import toolbox_kit as kit

from engine.core.errors import InvalidJob, ModelSignatureMismatch
from engine.faces.align import estimate_affine, warp_face
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.models.runtime import Runtime
from processors.deep_swapper import DeepSwapper, DeepSwapperOptions


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dfm")
    made = {"plain": root / "person.dfm", "amp": root / "person_amp.dfm", "wrong": root / "wrong.dfm"}
    made["short"] = root / "short.dfm"
    tiny_graphs.dfm(made["short"], 96, outputs=2)
    tiny_graphs.dfm(made["plain"], 96)
    tiny_graphs.dfm(made["amp"], 128, morph=True)
    tiny_graphs.wrong(made["wrong"])
    return made


def swapper(model_file: Path | None, **options: object) -> DeepSwapper:
    opts = DeepSwapperOptions(model_file=model_file, colour="none", **options)  # type: ignore[arg-type]
    return DeepSwapper(opts, Runtime(RuntimeSettings(device="cpu")))


@pytest.mark.parametrize(("kind", "size"), [("plain", 96), ("amp", 128)])
def test_the_face_goes_in_on_the_whole_face_crop_and_comes_back_swapped(
    kind: str, size: int, models: dict[str, Path]
) -> None:
    processor = swapper(models[kind], morph=40)
    assert processor.model.spec.input_size == size
    log = kit.logged(processor, "model")
    frame, face = kit.face_on()
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
    ((_, inputs, outputs),) = log
    affine = estimate_affine(face.landmarks5, "dfl_whole_face", size)
    crop = warp_face(frame, affine, size)
    np.testing.assert_allclose(inputs["in_face:0"], crop[None, :, :, ::-1] / 255.0, atol=1e-6)  # BGR, NHWC
    if kind == "amp":
        np.testing.assert_allclose(inputs["morph_value:0"], [0.4])
    else:
        assert set(inputs) == {"in_face:0"}
    assert [o.shape for o in outputs] == [(1, size, size, 1), (1, size, size, 3), (1, size, size, 1)]
    (mask,) = processor.frame_masks(frame, [face])
    inside = mask > 0.99
    assert inside.mean() > 0.02
    # The stand-in inverts the face (morphed 40 % of the way on the AMP graph).
    shift = 0.4 if kind == "amp" else 1.0
    expected = frame.astype(float) + shift * (255 - 2 * frame.astype(float))
    assert np.abs(out[inside] - expected[inside]).mean() < 6
    kit.untouched_outside(frame, out, mask)


def test_blend_0_gives_back_the_frame_and_needs_no_file() -> None:
    processor = swapper(None, blend=0)
    assert processor.model is None and DeepSwapper.model_ids(processor.options) == []
    frame, face = kit.face_on()
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
    assert out is frame


def test_no_file_is_a_one_line_typed_error() -> None:
    with pytest.raises(
        InvalidJob, match=r"deep_swapper needs your \.dfm model: --set deep_swapper.model_file=PATH"
    ) as info:
        swapper(None)
    assert "\n" not in str(info.value) and info.value.exit_code == 2


def test_a_file_of_other_io_is_refused_at_load_in_one_line(models: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ModelSignatureMismatch) as info:
        swapper(models["wrong"])
    message = str(info.value)
    assert message.startswith("wrong.dfm is not a graph deep_swapper can run: ") and "\n" not in message
    assert "no input in_face:0 (it has image)" in message and info.value.exit_code == 3
    with pytest.raises(
        ModelSignatureMismatch, match=r"short.dfm is not a graph deep_swapper can run: 2 outputs, expected 3"
    ):
        swapper(models["short"])
    not_onnx = tmp_path / "notes.dfm"
    not_onnx.write_text("not a graph")
    with pytest.raises(ModelSignatureMismatch, match="notes.dfm is not a readable ONNX graph"):
        swapper(not_onnx)
    with pytest.raises(InvalidJob, match="runs with --backend onnx"):
        swapper(models["plain"], backend="torch")


def test_a_video_keeps_its_frames_times_and_audio_and_the_sidecar_names_the_file(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, out = kit.clip(tmp_path), tmp_path / "deep.mp4"
    code, stdout, err = kit.run(
        capsys, "--target", str(target), "--output", str(out), "--processors", "deep_swapper",
        "--set", f"deep_swapper.model_file={models['plain']}", "--set", "faces.selector=many", "--set", "video.crf=0",
    )  # fmt: skip
    assert code == 0, err
    assert "8 faces processed" in stdout
    kit.check_timing(target, out)
    for a, b in zip(kit.frames(target), kit.frames(out), strict=True):
        diff = np.abs(a - b).max(axis=2)
        assert diff[80:120, 80:120].mean() > 30 and diff[80:120, 280:320].mean() > 30
    described = json.loads(out.with_name(out.name + ".job.json").read_text())["processors"]["deep_swapper"]
    assert described["sha256"] == hashlib.sha256(models["plain"].read_bytes()).hexdigest()
    assert described["file"] == "person.dfm" and described["size"] == 96
