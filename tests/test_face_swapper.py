"""The landmark face swapper end to end on the package photos, reference selection, and a moving face in video."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

import cli
from engine import media as video
from engine.core.types import Face, Frame
from engine.faces.embedded import EmbeddedAnalyser
from engine.faces.landmark_swap import OUTLINE
from engine.faces.tracking import FaceTracker
from engine.faces.warp import extend_with_forehead
from engine.job.settings import FacesSettings
from engine.media import demo
from engine.run.face_stage import FaceStage


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


# The face region of the acceptance test: the face outline (jaw and forehead line) grown by 35 % about its centre.
FACE_REGION_GROWTH = 1.35


def face_region(face: Face, shape: tuple[int, ...]) -> np.ndarray:
    """H×W bool: inside the target face's outline grown by FACE_REGION_GROWTH (hair, hat and collar are outside)."""
    assert face.landmarks68 is not None
    outline = extend_with_forehead(face.landmarks68)[OUTLINE]
    centre = outline.mean(axis=0)
    region = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(region, [np.round(centre + FACE_REGION_GROWTH * (outline - centre)).astype(np.int32)], 1)
    return region.astype(bool)


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
    # Outside the face region nothing changes by more than 2/255 (PNG output).
    outside = ~face_region(tgt, tgt_img.shape)
    diff = np.abs(out_img.astype(int) - tgt_img.astype(int)).max(axis=2)
    assert diff[outside].max() <= 2
    assert outside.mean() > 0.8  # the face region is the face, not the picture
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
    # The reference (the astronaut) is the smaller face, so the default "one largest" would pick the other one.
    faces = sorted(analyser.detect(pair), key=lambda f: f.box[0])
    assert len(faces) == 2 and (faces[0].box[2] - faces[0].box[0]) < (faces[1].box[2] - faces[1].box[0])
    out = tmp_path / "out.png"
    args = ["run", "--source", str(photos["hopper"]), "--target", str(tmp_path / "pair.png"), "--output", str(out)]
    sets = ["--set", "faces.selector=reference", "--set", f"faces.reference_image={photos['astronaut']}"]
    assert cli.main([*args, *sets, "--processors", "face_swapper", "--yes"]) == 0
    result = video.read_image(out)[0]
    # The other person's whole half of the picture is untouched; the chosen face changed.
    np.testing.assert_array_equal(result[:, 512:], pair[:, 512:])
    x0, y0, x1, y1 = (int(v) for v in faces[0].box)
    assert np.abs(result[y0:y1, x0:x1].astype(int) - pair[y0:y1, x0:x1].astype(int)).mean() > 5


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

    def feed():
        for i, frame in enumerate(frames):
            blind.frame = i
            yield frame

    smoothed = []
    for i, (_, faces) in enumerate(stage.annotate(feed())):
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


def test_face_swap_sidecar_replays(tmp_path: Path, photos: dict[str, Path]) -> None:
    out = tmp_path / "out.png"
    args = ["run", "--source", str(photos["hopper"]), "--target", str(photos["astronaut"]), "--output", str(out)]
    assert cli.main([*args, "--yes"]) == 0
    replay = tmp_path / "replay.png"
    assert cli.main(["run", "--job", str(out) + ".job.json", "--output", str(replay), "--yes"]) == 0
    np.testing.assert_array_equal(video.read_image(replay)[0], video.read_image(out)[0])


def test_face_processor_after_an_upscaler_is_refused(
    tmp_path: Path, photos: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "--source", str(photos["hopper"]), "--target", str(photos["astronaut"])]
    args += ["--output", str(tmp_path / "o.png"), "--processors", "frame_enhancer", "face_swapper", "--yes"]
    assert cli.main([*args, "--set", "frame_enhancer.scale=2"]) == 2
    assert capsys.readouterr().err == (
        "error: face_swapper must come before frame_enhancer: faces are found on the input frame\n"
    )


def test_landmark_warp_with_buffalo_is_refused_before_any_download(
    tmp_path: Path, photos: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "--source", str(photos["hopper"]), "--target", str(photos["astronaut"])]
    args += ["--output", str(tmp_path / "o.png"), "--set", "faces.analyser=buffalo_l", "--yes"]
    assert cli.main(args) == 2
    assert "needs 68-point landmarks, which buffalo_l does not give" in capsys.readouterr().err


def test_image_target_without_a_face_exits_2(tmp_path: Path, photos: dict[str, Path]) -> None:
    from skimage import data

    Image.fromarray(data.coffee()).save(tmp_path / "coffee.png")
    out = tmp_path / "o.png"
    args = ["run", "--source", str(photos["hopper"]), "--target", str(tmp_path / "coffee.png"), "--output", str(out)]
    assert cli.main([*args, "--yes"]) == 2
    assert not out.exists()


def test_a_face_that_leaves_is_not_pasted_on_what_follows(analyser: EmbeddedAnalyser) -> None:
    from skimage import data

    faces_frames = demo.frames(320, 180, 12)
    empty = cv2.resize(data.coffee(), (320, 180), interpolation=cv2.INTER_AREA)
    frames = [*faces_frames, *[empty] * 8]
    stage = FaceStage(FacesSettings(), analyser, None, None, FaceTracker(analyser, max_gap=5))
    found = [faces for _, faces in stage.annotate(frames)]
    assert all(len(f) == 1 for f in found[:12])
    assert all(len(f) == 0 for f in found[12:])


def test_tracking_keeps_up_with_a_fast_move(analyser: EmbeddedAnalyser) -> None:
    # 20 frames of the demo motion: about 16 px a frame on a 100 px face. Refits between detections must stay on
    # the face (the verifying detector re-seeds a fit that drifted), not 30 px off it.
    count, width, height = 20, 320, 180
    frames = demo.frames(width, height, count)
    photo68 = only_face(analyser, demo.photo()).landmarks68
    tracker = FaceTracker(analyser)
    for i, frame in enumerate(frames):
        (track,) = tracker.update(frame)
        error = np.linalg.norm(track.face.landmarks68 - _true_landmarks(photo68, i, count, width, height), axis=1)
        assert error.mean() < 3.0, f"frame {i}: landmarks {error.mean():.1f} px off"
