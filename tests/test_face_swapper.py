"""The landmark face swapper end to end on the package photos, reference selection, and a moving face in video."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

import cli
from engine import demo, video
from engine.faces.embedded import EmbeddedAnalyser
from engine.faces.landmark_swap import RING_RADIUS, face_size
from engine.faces.stage import FaceStage
from engine.faces.tracking import FaceTracker
from engine.job import FacesSettings
from engine.types import Face, Frame


@pytest.fixture(scope="module")
def analyser() -> EmbeddedAnalyser:
    return EmbeddedAnalyser()


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("photos")
    Image.fromarray(demo.photo()).save(folder / "astronaut.png")
    Image.open(demo.source_photo()).convert("RGB").save(folder / "hopper.png")
    return {"astronaut": folder / "astronaut.png", "hopper": folder / "hopper.png"}


def only_face(analyser: EmbeddedAnalyser, image: Frame) -> Face:
    faces = analyser.detect(image)
    assert len(faces) == 1, f"expected one face, found {len(faces)}"
    return analyser.embed(image, faces)[0]


def swap_region(face: Face, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """The square the landmark swapper may touch: its anchor ring around the face, plus a pixel of rounding."""
    assert face.landmarks68 is not None
    centre = face.landmarks68.mean(axis=0)
    r = RING_RADIUS * face_size(face.landmarks68) + 1
    x0, y0 = np.maximum(np.floor(centre - r), 0).astype(int)
    x1, y1 = np.minimum(np.ceil(centre + r), [shape[1], shape[0]]).astype(int)
    return x0, y0, x1, y1


@pytest.mark.parametrize(("source", "target"), [("astronaut", "hopper"), ("hopper", "astronaut")])
def test_identity_moves_to_the_source_in_both_directions(
    analyser: EmbeddedAnalyser, photos: dict[str, Path], tmp_path: Path, source: str, target: str
) -> None:
    out = tmp_path / "out.png"
    args = ["run", "--source", str(photos[source]), "--target", str(photos[target]), "--output", str(out)]
    assert cli.main([*args, "--processors", "face_swapper", "--yes"]) == 0
    src_img, tgt_img, out_img = (video.read_image(p)[0] for p in (photos[source], photos[target], out))
    src, tgt, res = (only_face(analyser, img) for img in (src_img, tgt_img, out_img))
    before = analyser.distance(tgt.embedding, src.embedding)
    after = analyser.distance(res.embedding, src.embedding)
    assert after <= before - 0.05, (before, after)
    # Outside the region the swap works in, nothing changes (PNG output: exact).
    x0, y0, x1, y1 = swap_region(tgt, tgt_img.shape)
    outside = np.ones(tgt_img.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    diff = np.abs(out_img.astype(int) - tgt_img.astype(int)).max(axis=2)
    assert diff[outside].max() <= 2
    assert outside.mean() > 0.3  # the region is the face's surroundings, not the whole picture
    qa = json.loads(Path(str(out) + ".job.json").read_text())["faces"]["identity"]
    assert qa["faces_checked"] == 1 and qa["mean_distance_after"] <= qa["mean_distance_before"] - 0.05


def test_reference_selection_changes_only_the_chosen_face(
    analyser: EmbeddedAnalyser, photos: dict[str, Path], tmp_path: Path
) -> None:
    astronaut = video.read_image(photos["astronaut"])[0]
    hopper = video.read_image(photos["hopper"])[0]
    hopper = cv2.resize(hopper, (hopper.shape[1] * 512 // hopper.shape[0], 512), interpolation=cv2.INTER_AREA)
    pair = np.concatenate([astronaut, hopper], axis=1)
    Image.fromarray(pair).save(tmp_path / "pair.png")
    out = tmp_path / "out.png"
    args = ["run", "--source", str(photos["astronaut"]), "--target", str(tmp_path / "pair.png"), "--output", str(out)]
    sets = ["--set", "faces.selector=reference", "--set", f"faces.reference_image={photos['hopper']}"]
    assert cli.main([*args, *sets, "--processors", "face_swapper", "--yes"]) == 0
    result = video.read_image(out)[0]
    faces = sorted(analyser.detect(pair), key=lambda f: f.box[0])
    assert len(faces) == 2
    ax0, ay0, ax1, ay1 = (int(v) for v in faces[0].box)
    np.testing.assert_array_equal(result[ay0:ay1, ax0:ax1], pair[ay0:ay1, ax0:ax1])
    hx0, hy0, hx1, hy1 = (int(v) for v in faces[1].box)
    assert np.abs(result[hy0:hy1, hx0:hx1].astype(int) - pair[hy0:hy1, hx0:hx1].astype(int)).mean() > 5


def _true_landmarks(photo68: np.ndarray, i: int, count: int, width: int, height: int) -> np.ndarray:
    cx, cy, crop_w = demo.camera(i, count)
    scale = width / crop_w
    return photo68 * scale + np.array([width / 2 - cx * scale, height / 2 - cy * scale])


def _jitter(landmarks: list[np.ndarray], truth: list[np.ndarray]) -> float:
    """RMS frame-to-frame change of the error against the true positions (the motion removed), pixels."""
    residual = np.stack(landmarks) - np.stack(truth)
    return float(np.sqrt((np.diff(residual, axis=0) ** 2).sum(axis=2).mean()))


def test_tracked_landmarks_jitter_half_of_the_detector_and_gaps_are_filled(analyser: EmbeddedAnalyser) -> None:
    count, width, height = 60, 320, 180
    frames = demo.frames(width, height, count)
    photo68 = only_face(analyser, demo.photo()).landmarks68
    truth = [_true_landmarks(photo68, i, count, width, height) for i in range(count)]
    raw = []
    for frame in frames:
        (face,) = analyser.detect(frame)
        raw.append(face.landmarks68)

    class Blind:
        """The analyser, blind on frame 31: no detection and no re-fit there."""

        def __init__(self) -> None:
            self.frame = -1

        def __getattr__(self, name: str):  # noqa: ANN204 - delegate everything else
            return getattr(analyser, name)

        def detect(self, frame: Frame) -> list[Face]:
            return [] if self.frame == 31 else analyser.detect(frame)

        def refit(self, frame: Frame, face: Face) -> Face | None:
            return None if self.frame == 31 else analyser.refit(frame, face)

    blind = Blind()
    settings = FacesSettings()
    stage = FaceStage(settings, blind, None, None, FaceTracker(blind))
    smoothed = []
    for i, frame in enumerate(frames):
        blind.frame = i
        faces = stage.analyse(frame)
        assert len(faces) == 1, f"frame {i}: {len(faces)} faces"
        smoothed.append(faces[0].landmarks68)
    assert stage.tracker.stats.filled >= 1
    assert np.abs(smoothed[31] - truth[31]).mean() < 4.0
    jitter_raw, jitter_smooth = _jitter(raw, truth), _jitter(smoothed, truth)
    assert jitter_smooth <= 0.5 * jitter_raw, (jitter_raw, jitter_smooth)


def test_moving_face_video_is_swapped_on_every_frame_with_audio(tmp_path: Path) -> None:
    target = demo.make_clip(tmp_path / "moving.mp4", 320, 180, 60, 24)
    out = tmp_path / "out.mp4"
    args = ["run", "--source", str(demo.source_photo()), "--target", str(target), "--output", str(out), "--yes"]
    assert cli.main([*args, "--set", "faces.qa_every=6"]) == 0
    info = video.probe(out)
    assert info.frame_count == 60 and info.has_audio
    sidecar = json.loads(Path(str(out) + ".job.json").read_text())
    assert sidecar["faces"]["processed"] == 60 and sidecar["faces"]["frames_without_face"] == 0
    qa = sidecar["faces"]["identity"]
    assert qa["faces_checked"] == 10 and qa["mean_moved_toward_source"] > 0.05


def test_no_face_in_source_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blank = tmp_path / "blank.png"
    Image.fromarray(np.full((200, 200, 3), 128, np.uint8)).save(blank)
    Image.fromarray(demo.photo()).save(tmp_path / "t.png")
    args = ["run", "--source", str(blank), "--target", str(tmp_path / "t.png"), "--output", str(tmp_path / "o.png")]
    assert cli.main([*args, "--yes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "blank.png" in err and err.count("\n") == 1
    assert not (tmp_path / "o.png").exists()


def test_face_processor_without_source_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Image.fromarray(demo.photo()).save(tmp_path / "t.png")
    assert cli.main(["run", "--target", str(tmp_path / "t.png"), "--output", str(tmp_path / "o.png"), "--yes"]) == 2
    assert capsys.readouterr().err == "error: face_swapper needs a source face: add --source IMAGE\n"
