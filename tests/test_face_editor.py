"""The face editor on stand-in LivePortrait graphs of the catalogue's signatures: the six parts run in the stated
order on the stated crops and points; every slider at 0 gives back the frame and loads nothing; pixels outside the
paste-back mask stay; the measured openings are held steady over a video; a video keeps frames, times and audio;
a graph of other I/O is refused in one line; a part comes from a local HTTP server, sha256-checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
import tiny_graphs
import toolbox_kit as kit
from conftest import Server
from scipy.spatial.transform import Rotation

from engine.core.types import Face, Frame
from engine.faces.align import estimate_affine, scaled_landmarks, warp_face
from engine.faces.embedded import EmbeddedAnalyser
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.runtime import Runtime
from processors.face_editor import EDITS, EYES, LIPS, STITCHER, FaceEditor, FaceEditorOptions, opening, wanted

FEATURES, MOTION, GENERATOR = (
    "live_portrait_feature_extractor",
    "live_portrait_motion_extractor",
    "live_portrait_generator",
)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("editor")
    made = dict(tiny_graphs.live_portrait(root))
    for model_id, width, seed in ((EYES, 66, 1), (LIPS, 65, 2)):
        made[model_id] = root / f"{model_id}.onnx"
        tiny_graphs.retargeter(made[model_id], width, seed)
    made[STITCHER] = root / "stitcher.onnx"
    tiny_graphs.stitcher(made[STITCHER])
    tiny_graphs.wrong(root / "wrong.onnx")
    return made


@pytest.fixture
def env(graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kit.use(monkeypatch, kit.catalogue(tmp_path, graphs), tmp_path / "models")
    return tmp_path


@pytest.fixture(scope="module")
def portrait(analyser: EmbeddedAnalyser) -> tuple[Frame, Face]:
    """The astronaut and her face with 68 landmarks, as the embedded analyser finds it."""
    frame = demo.photo()
    (face,) = analyser.detect(frame)
    return frame, face


def editor(**options: object) -> FaceEditor:
    return FaceEditor(FaceEditorOptions(backend="onnx", **options), Runtime(RuntimeSettings(device="cpu")))  # type: ignore[arg-type]


def rotation(pose: list[float]) -> np.ndarray:
    return Rotation.from_euler("xyz", pose, degrees=True).as_matrix().astype(np.float32)


def test_the_six_parts_run_in_order_on_the_stated_crop_and_points(env: Path, portrait: tuple[Frame, Face]) -> None:
    frame, face = portrait
    sliders = {"eyebrows": 50, "eyes": 60, "mouth": -40, "smile": 30, "gaze_vertical": -20, "head_yaw": 10}
    processor = editor(**sliders)
    log = kit.logged(processor)
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
    assert [entry[0] for entry in log] == [FEATURES, MOTION, EYES, LIPS, STITCHER, GENERATOR]
    (_, feat_in, feat_out), (_, motion_in, motion), (_, eye_in, eye_out), (_, lip_in, lip_out) = log[:4]
    (_, stitch_in, stitch_out), (_, gen_in, _) = log[4:]
    # 1. The head on ffhq_512 at 512 px (landmarks ×1.5 about the nose), resized to 256, RGB/255.
    crop = warp_face(frame, estimate_affine(scaled_landmarks(face.landmarks5, 1.5), "ffhq_512", 512), 512)
    small = cv2.resize(crop, (256, 256), interpolation=cv2.INTER_AREA)
    expected = small.transpose(2, 0, 1)[None].astype(np.float32) / 255.0
    for tensor in (feat_in["input"], motion_in["input"]):
        np.testing.assert_allclose(tensor, expected, atol=1e-6)
    # 2.–3. Own points and driving points: the sliders' offsets on the expression, the yaw on the pose.
    pitch, yaw, roll, scale, shift, expression, keypoints = motion
    pose = [pitch.item(), yaw.item(), roll.item()]
    offsets = np.zeros((1, 21, 3), np.float32)
    for name, moves in EDITS.items():
        for keypoint, axis, offset in moves:
            offsets[0, keypoint, axis] += offset * sliders.get(name, 0) / 100
    own = scale.reshape(1, 1, 1) * (keypoints @ rotation(pose).T + expression) + shift.reshape(1, 1, 3)
    turned = [pose[0], pose[1] + 10, pose[2]]
    driving = scale.reshape(1, 1, 1) * (keypoints @ rotation(turned).T + expression + offsets) + shift.reshape(1, 1, 3)
    # 4. The retargeters: own points, the measured openings, the opening wanted; their offsets added.
    left, right, lips = opening(face.landmarks68)
    np.testing.assert_allclose(eye_in["input"][0, :63], own.ravel(), atol=1e-5)
    np.testing.assert_allclose(eye_in["input"][0, 63:], [left, right, wanted((left + right) / 2, 60, 0.5)], atol=1e-6)
    np.testing.assert_allclose(lip_in["input"][0, 63:], [lips, wanted(lips, -40, 0.9)], atol=1e-6)
    assert wanted(lips, -100, 0.9) == 0.0 and wanted(lips, 100, 0.9) == pytest.approx(0.9)
    driving = driving + eye_out[0].reshape(1, 21, 3) + lip_out[0].reshape(1, 21, 3)
    # 5. The stitcher fits the driving points to the own ones; 6. the generator warps from own to stitched.
    np.testing.assert_allclose(stitch_in["source"], driving, atol=1e-5)
    np.testing.assert_allclose(stitch_in["target"], own, atol=1e-5)
    np.testing.assert_array_equal(gen_in["source"], stitch_out[0])
    np.testing.assert_array_equal(gen_in["target"], stitch_in["target"])
    np.testing.assert_array_equal(gen_in["feature_volume"], feat_out[0])
    (mask,) = processor.frame_masks(frame, [face])
    assert np.abs(out.astype(int) - frame)[mask > 0.99].mean() > 3
    kit.untouched_outside(frame, out, mask)


def test_every_slider_at_0_gives_back_the_frame_and_loads_nothing(
    env: Path, portrait: tuple[Frame, Face], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FACESTUDIO_MODELS", str(env / "empty"))
    processor = editor()
    assert FaceEditor.model_ids(processor.options) == [] and processor.models == {}
    frame, face = portrait
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
    assert out is frame


def test_head_and_expression_alone_need_no_retargeter_and_no_68_landmarks(env: Path) -> None:
    options = FaceEditorOptions(head_roll=-12, smile=40)
    assert FaceEditor.model_ids(options) == [FEATURES, MOTION, STITCHER, GENERATOR]
    processor = editor(head_roll=-12, smile=40)
    assert not processor.needs_landmarks68
    frame, face = kit.face_on()  # 5 landmarks only, as buffalo_l gives
    log = kit.logged(processor)
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,))])
    assert [entry[0] for entry in log] == [FEATURES, MOTION, STITCHER, GENERATOR]
    (mask,) = processor.frame_masks(frame, [face])
    kit.untouched_outside(frame, out, mask)
    assert editor(eyes=10).needs_landmarks68 and editor(mouth=-10).needs_landmarks68


def test_wavering_openings_are_held_steady_over_a_video(env: Path, portrait: tuple[Frame, Face]) -> None:
    frame, face = portrait
    processor = editor(eyes=50)
    log = kit.logged(processor)
    # The lower lids drawn 3 px lower on alternate frames, as a landmark fit wavers.
    lowered = face.landmarks68.copy()
    lowered[[40, 41, 46, 47], 1] += 3
    for i in range(8):
        points = lowered if i % 2 else face.landmarks68
        processor.process([frame], [FrameContext(index=i, faces=(replace(face, landmarks68=points),), time=i / 25)])
    measured = [entry[1]["input"][0, 63] for entry in log if entry[0] == EYES]
    raw = [opening(face.landmarks68)[0], opening(lowered)[0]]
    assert len(measured) == 8 and measured[0] == pytest.approx(raw[0])
    assert max(np.abs(np.diff(measured))) < 0.5 * abs(raw[1] - raw[0])


def test_a_video_keeps_its_frames_times_and_audio(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = kit.clip(env), env / "edited.mp4"
    code, stdout, err = kit.run(
        capsys, "--target", str(target), "--output", str(out), "--processors", "face_editor",
        "--set", "faces.selector=many", "--set", "face_editor.smile=80", "--set", "face_editor.eyes=-50",
        "--set", "video.crf=0",
    )  # fmt: skip
    assert code == 0, err
    assert "face_editor" in stdout and "8 faces processed" in stdout
    kit.check_timing(target, out)
    for a, b in zip(kit.frames(target), kit.frames(out), strict=True):
        diff = np.abs(a - b).max(axis=2)
        assert diff[70:130, 70:130].mean() > 3 and diff[70:130, 270:330].mean() > 3


def test_a_graph_with_other_io_is_refused_at_load(
    graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kit.check_refused(tmp_path, monkeypatch, capsys, graphs, STITCHER, "face_editor", "face_editor.head_yaw=5")


def test_fetched_from_a_local_server_sha256_checked(
    graphs: dict[str, Path], server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kit.check_fetched(server, tmp_path, monkeypatch, capsys, EYES, graphs[EYES])
