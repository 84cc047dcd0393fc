"""The age modifier on stand-in graphs of FRAN's, StyleGANEX's and FairFace's catalogue signatures: each model is
fed as the module docstring states, in that order; amount 0 gives back the frame and loads nothing; pixels outside
the paste-back mask stay; the estimated age is held steady over a video; a video keeps frames, times and audio;
a graph of other I/O is refused in one line; the files come from a local HTTP server, sha256-checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tiny_graphs
import toolbox_kit as kit
from conftest import Server

from engine.faces.age import AGE_GROUPS, middle_year
from engine.faces.align import estimate_affine, scaled_landmarks, warp_face
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import Runtime
from engine.models.tensor import to_tensor
from processors.age_modifier import AgeModifier, AgeModifierOptions

GROUP = 4  # the stand-in FairFace's age group for a normalised crop: 30–39, middle year 34.5


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("age")
    made = {"fran": root / "fran.onnx", "styleganex_age": root / "sg.onnx", "fairface": root / "ff.onnx"}
    tiny_graphs.fran(made["fran"])
    tiny_graphs.styleganex(made["styleganex_age"])
    tiny_graphs.fairface(made["fairface"], GROUP)
    tiny_graphs.wrong(root / "wrong.onnx")
    return made


@pytest.fixture
def env(graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kit.use(monkeypatch, kit.catalogue(tmp_path, graphs), tmp_path / "models")
    return tmp_path


def modifier(**options: object) -> AgeModifier:
    return AgeModifier(AgeModifierOptions(backend="onnx", **options), Runtime(RuntimeSettings(device="cpu")))  # type: ignore[arg-type]


def test_fran_reads_the_age_then_ages_the_face_by_years(env: Path) -> None:
    processor = modifier(amount=25)
    log = kit.logged(processor, "model")
    fairface_log = kit.logged(processor, "classifier")
    frame, face = kit.face_on()
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,), time=0.0)])
    # FairFace first: the face on arcface_112_v2 at 224 px, ImageNet-normalised RGB.
    ((_, fairface_in, _),) = fairface_log
    spec = Manifest.load().get("fairface")
    crop = warp_face(frame, estimate_affine(face.landmarks5, "arcface_112_v2", 224), 224)
    np.testing.assert_array_equal(fairface_in["input"], to_tensor(crop[None], spec.io))
    # Then FRAN: the face on ffhq_512 at 1024 px in [0, 1], direction = [present, present + 25] / 100.
    ((model, fran_in, _),) = log
    age = middle_year(GROUP)
    assert model == "fran" and age == sum(AGE_GROUPS[GROUP]) / 2
    np.testing.assert_allclose(fran_in["direction"], np.float32([age, age + 25]) / 100, rtol=1e-6)
    target = warp_face(frame, estimate_affine(face.landmarks5, "ffhq_512", 1024), 1024)
    np.testing.assert_array_equal(fran_in["target"], to_tensor(target[None], processor.model.spec.io))
    # Older brightens the stand-in's face (+0.5 over [0, 1]); outside the paste-back mask nothing moved.
    (mask,) = processor.frame_masks(frame, [face])
    inside = mask > 0.99
    assert (out[inside].astype(int) - frame[inside]).mean() > 80  # +127.5, less where 255 clips it
    kit.untouched_outside(frame, out, mask)


def test_a_given_present_age_runs_no_classifier_and_younger_clips_at_zero(env: Path) -> None:
    assert AgeModifier.model_ids(AgeModifierOptions(present_age=30)) == ["fran"]
    processor = modifier(present_age=30, amount=-45)
    assert processor.classifier is None
    log = kit.logged(processor, "model")
    frame, face = kit.face_on()
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
    np.testing.assert_allclose(log[0][1]["direction"], [0.3, 0.0])  # 30 − 45 years, clipped at 0
    (mask,) = processor.frame_masks(frame, [face])
    assert (out[mask > 0.99].astype(int) - frame[mask > 0.99]).mean() < -50
    kit.untouched_outside(frame, out, mask)


def test_styleganex_takes_the_face_the_wider_view_and_the_direction(env: Path) -> None:
    processor = modifier(model="styleganex_age", amount=40)
    assert AgeModifier.model_ids(processor.options) == ["styleganex_age"]
    log = kit.logged(processor, "model")
    frame, face = kit.face_on()
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
    ((_, inputs, outputs),) = log
    io = processor.model.spec.io
    target = warp_face(frame, estimate_affine(face.landmarks5, "ffhq_512", 256), 256)
    view = warp_face(frame, estimate_affine(scaled_landmarks(face.landmarks5, 0.875), "styleganex_384", 384), 384)
    np.testing.assert_array_equal(inputs["target"], to_tensor(target[None], io))
    np.testing.assert_array_equal(inputs["target_with_background"], to_tensor(view[None], io))
    assert inputs["direction"].shape == () and inputs["direction"] == np.float32(-40 / 100 * 2.5)
    assert outputs[0].shape == (1, 3, 768, 768)
    (mask,) = processor.frame_masks(frame, [face])
    kit.untouched_outside(frame, out, mask)
    assert np.abs(out.astype(int) - frame).max() > 0


def test_amount_0_gives_back_the_frame_and_loads_nothing(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACESTUDIO_MODELS", str(env / "empty"))  # nothing there: nothing may be needed
    for model in ("fran", "styleganex_age"):
        processor = modifier(model=model, amount=0)
        assert AgeModifier.model_ids(processor.options) == [] and processor.model is None
        frame, face = kit.face_on()
        (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
        assert out is frame


def test_a_wavering_age_estimate_is_held_steady_over_a_video(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    processor = modifier(amount=10)
    log = kit.logged(processor, "model")
    frame, face = kit.face_on()
    raw = [middle_year(GROUP), middle_year(GROUP + 2)] * 4  # what FairFace says, frame by frame
    estimates = iter(raw)
    monkeypatch.setattr("processors.age_modifier.estimate_ages", lambda *_: [next(estimates)])
    for i in range(len(raw)):
        processor.process([frame], [FrameContext(index=i, faces=(face,), time=i / 25)])
    fed = [entry[1]["direction"][0] * 100 for entry in log]
    assert fed[0] == pytest.approx(raw[0])
    assert max(np.abs(np.diff(fed))) < 0.1 * abs(raw[1] - raw[0])  # the 20-year jumps are smoothed away
    assert raw[0] < fed[-1] < raw[1]


def test_a_video_keeps_its_frames_times_and_audio(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = kit.clip(env), env / "aged.mp4"
    code, stdout, err = kit.run(
        capsys, "--target", str(target), "--output", str(out), "--processors", "age_modifier",
        "--set", "faces.selector=many", "--set", "age_modifier.amount=30", "--set", "video.crf=0",
    )  # fmt: skip
    assert code == 0, err
    assert "age_modifier" in stdout and f"{kit.FRAMES} frames" in stdout
    kit.check_timing(target, out)
    for a, b in zip(kit.frames(target), kit.frames(out), strict=True):
        diff = (b - a).mean(axis=2)
        assert diff[70:130, 70:130].mean() > 20 and diff[70:130, 270:330].mean() > 20  # both faces older


@pytest.mark.parametrize("model", ["fran", "styleganex_age"])
def test_a_graph_with_other_io_is_refused_at_load(
    model: str, graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kit.check_refused(tmp_path, monkeypatch, capsys, graphs, model, "age_modifier", f"age_modifier.model={model}")


def test_fetched_from_a_local_server_sha256_checked(
    graphs: dict[str, Path], server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kit.check_fetched(server, tmp_path, monkeypatch, capsys, "fran", graphs["fran"])
