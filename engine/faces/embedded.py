"""The embedded face analyser: dlib's detectors, 68-point landmarker and 128-d ResNet recogniser.

Every weight file comes with `pip install face-recognition-models dlib-bin`, so this analyser works offline and is
the default (ARCHITECTURE.md §8). Licences to show: dlib and its HOG detector are Boost-licensed; the 68-point landmark
model was trained on iBUG 300-W, whose terms exclude commercial use.

Box convention: dlib's own, i.e. what its HOG detector reports: a square from about the brows to the chin. The
box `refit` derives from landmarks is mapped onto that convention (`_box_from_landmarks`), so boxes from
`detect` and from `refit` can be linked by IoU. The CNN detector's boxes are similar but not identical.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import cv2
import numpy as np
import numpy.typing as npt

from engine.core.errors import ModelUnavailable
from engine.core.types import Face, Frame, check_frame
from engine.faces.boxes import area, iou
from engine.faces.ibug68 import LEFT_EYE, MOUTH_LEFT, MOUTH_RIGHT, NOSE_TIP, RIGHT_EYE

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install face-recognition-models dlib-bin"

MODEL_FILES: Mapping[str, str] = MappingProxyType(
    {
        "cnn": "mmod_human_face_detector.dat",
        "landmarks68": "shape_predictor_68_face_landmarks.dat",
        "recogniser": "dlib_face_recognition_resnet_model_v1.dat",
    }
)

# Smallest face box (side, px) each detector finds without upsampling, measured on Grace Hopper's photo scaled
# down: HOG finds 50 px and misses 49 px; the CNN (mmod) finds about 62 px and reports it as 80 px. Each
# upsampling step doubles the image and halves these (at four times the cost).
NATIVE_MIN_FACE: Mapping[str, float] = MappingProxyType({"hog": 50.0, "cnn": 64.0})

# A face box mapped from the 68 landmarks' extent onto the HOG detector's convention: a square with side
# 1.07·sqrt(w·h), centred on the extent's centre moved up by 0.057·h. Fitted (medians) on 109 HOG detections of
# the astronaut and Grace Hopper photos, scaled 0.6–1.6×, rotated ±6°, mirrored; the HOG boxes themselves vary
# by ±9 % in size around this (its pyramid steps by 5/6).
BOX_SIDE_PER_EXTENT = 1.07
BOX_RAISE_PER_HEIGHT = 0.057

# refit: the tracked face is re-verified with the HOG detector on a crop around it, rescaled so the face is
# VERIFY_FACE_PX wide (comfortably above HOG's 50 px minimum, and cheap: a ~160 px crop). The detector threshold
# there is lower than for detection: we already know a face was there, so only a clear loss should drop it.
VERIFY_FACE_PX = 80.0
VERIFY_CROP_PER_SIDE = 2.0
VERIFY_MARGIN = -0.3
VERIFY_MIN_IOU = 0.3
# A refit whose box overlaps the verifying detection less than this is redone from the detection's box.
RESEED_IOU = 0.6
# refit rejects a fit whose box side changed by more than this factor from the tracked box (the landmarks collapsed
# onto a point or spread over the background) or whose box lies less than MIN_INSIDE inside the frame.
MAX_SIDE_CHANGE = 1.6
MIN_INSIDE = 0.6


def model_dir() -> Path:
    """The folder of face-recognition-models' .dat files. Raises ModelUnavailable when the package is missing.

    The package is found, not imported: its __init__ needs pkg_resources, which current setuptools lacks.
    """
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"the embedded face models are not installed: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def margin_to_score(margin: float) -> float:
    """Map a dlib detector margin (HOG SVM score or mmod confidence; 0 = dlib's default threshold, clear faces
    score about 1–1.5) to a confidence in [0, 1): 1 − exp(−margin), clamped at 0 for negative margins."""
    return 1.0 - math.exp(-max(margin, 0.0))


def score_to_margin(score: float) -> float:
    """Inverse of `margin_to_score` for scores in [0, 1)."""
    return -math.log(1.0 - score)


class EmbeddedAnalyser:
    """`FaceAnalyser` on dlib (CPU only).

    detector: "hog" (fast; frontal and near-frontal faces; the default for video) or "cnn" (mmod; finds turned and
        badly lit faces, about 3 s for a 512² image on 2 CPU cores: meant for source photos).
    min_face: smallest face box side in pixels to find; sets dlib's upsampling. Default 40 for HOG (one upsampling,
        about 4× the cost of none) and 80 for the CNN (no upsampling; 40 would cost 4×, ~12 s per 512² image).
    min_score: detections scoring below this (see `margin_to_score`) are dropped; 0.25 (dlib margin 0.29) drops the
        weak hits HOG makes on textured clothing when upsampling, real faces score 0.5–0.8.
    models: folder holding the .dat files (default: face-recognition-models' own).

    Embeddings are dlib's raw 128-d descriptors (not L2-normalised): its euclidean metric and 0.6 same-person
    threshold are defined on raw descriptors.
    """

    id = "embedded"
    recogniser = "dlib_resnet_v1"
    threshold = 0.6

    def __init__(
        self,
        detector: Literal["hog", "cnn"] = "hog",
        *,
        min_face: float | None = None,
        min_score: float = 0.25,
        models: Path | None = None,
    ) -> None:
        if detector not in ("hog", "cnn"):
            raise ValueError(f"detector must be 'hog' or 'cnn', got {detector!r}")
        if not 0.0 <= min_score < 1.0:
            raise ValueError(f"min_score must be in [0, 1), got {min_score}")
        try:
            import dlib
        except ImportError as exc:
            raise ModelUnavailable(f"dlib is not installed: {INSTALL_HINT}") from exc
        folder = models if models is not None else model_dir()
        needed = ["landmarks68", "recogniser"] + (["cnn"] if detector == "cnn" else [])
        missing = [MODEL_FILES[k] for k in needed if not (folder / MODEL_FILES[k]).is_file()]
        if missing:
            raise ModelUnavailable(f"missing {', '.join(missing)} in {folder}: {INSTALL_HINT}")

        self.detector = detector
        self.min_face = float(min_face if min_face is not None else (40.0 if detector == "hog" else 80.0))
        self.min_score = min_score
        self.upsample = max(0, math.ceil(math.log2(NATIVE_MIN_FACE[detector] / self.min_face)))
        self._dlib: Any = dlib
        # The HOG detector is built in (no file); refit uses it to verify tracked faces whichever detector detects.
        self._hog: Any = dlib.get_frontal_face_detector()
        self._cnn: Any = (
            dlib.cnn_face_detection_model_v1(str(folder / MODEL_FILES["cnn"])) if detector == "cnn" else None
        )
        self._predictor: Any = dlib.shape_predictor(str(folder / MODEL_FILES["landmarks68"]))
        self._encoder: Any = dlib.face_recognition_model_v1(str(folder / MODEL_FILES["recogniser"]))
        log.debug("embedded analyser: %s detector, upsample %d, models in %s", detector, self.upsample, folder)

    def detect(self, frame: Frame) -> list[Face]:
        """All faces on `frame` (H×W×3 uint8 RGB), in the detector's order (best first), each with its box (frame
        pixels, dlib's convention, may extend past the frame edge), 68 and 5 landmarks (frame pixels) and score
        in [0, 1]. No embedding."""
        image = _dlib_image(frame)
        threshold = score_to_margin(self.min_score)
        if self._cnn is not None:
            found = [(d.rect, d.confidence) for d in self._cnn(image, self.upsample) if d.confidence >= threshold]
        else:
            rects, margins, _ = self._hog.run(image, self.upsample, threshold)
            found = list(zip(rects, margins, strict=True))
        faces = []
        for rect, margin in found:
            points = self._landmarks(image, rect)
            box = (float(rect.left()), float(rect.top()), float(rect.right() + 1), float(rect.bottom() + 1))
            faces.append(
                Face(box=box, landmarks5=landmarks5(points), score=margin_to_score(margin), landmarks68=points)
            )
        return faces

    def refit(self, frame: Frame, face: Face) -> Face | None:
        """Re-fit the 68 landmarks of a tracked face inside its (predicted) box on `frame`.

        Returns the face with new landmarks, a box derived from them in the detector's convention, and as score
        the HOG detector's verdict on a crop around it; or None when the fit is implausible:
        - the derived box's side differs from the tracked box's by more than 1.6× either way (the landmarks
          collapsed or spread onto background), or
        - less than 60 % of the derived box lies inside the frame (the face is leaving it), or
        - the HOG detector, run on a crop twice the box's size rescaled so the face is 80 px wide and with a
          lenient threshold (dlib margin −0.3), finds no face overlapping the box (IoU ≥ 0.3). The landmark
          predictor alone cannot tell: it returns a face-shaped fit even on a blank wall.
        Costs two landmark fits and a HOG pass over ~160² px: a few ms, independent of the frame size.
        """
        image = _dlib_image(frame)
        height, width = image.shape[:2]
        old_side = _side(face.box)
        # A second fit, inside the box derived from the first, corrects most of a misplaced prediction: the
        # predictor's regression trees start from the box, and are most accurate in a box of their own convention.
        points = self._landmarks(image, _rectangle(self._dlib, face.box))
        box = _box_from_landmarks(points)
        points = self._landmarks(image, _rectangle(self._dlib, box))
        box = _box_from_landmarks(points)
        side = _side(box)
        if not 1.0 / MAX_SIDE_CHANGE <= side / old_side <= MAX_SIDE_CHANGE:
            log.debug("refit rejected: box side %.0f px from %.0f px", side, old_side)
            return None
        inside = area(_clip(box, width, height)) / area(box)
        if inside < MIN_INSIDE:
            log.debug("refit rejected: %.0f%% of the box inside the frame", 100 * inside)
            return None
        verified = self._verify(image, box)
        if verified is None:
            log.debug("refit rejected: HOG finds no face at %s", box)
            return None
        margin, hog_box = verified
        if iou(box, hog_box) < RESEED_IOU:
            # The fit drifted (a fast move put the prediction off the face) while the verifying detector still
            # sees the face: fit again in the detector's box, the start the predictor is most accurate from.
            points = self._landmarks(image, _rectangle(self._dlib, hog_box))
            box = _box_from_landmarks(points)
        return Face(box=box, landmarks5=landmarks5(points), score=margin_to_score(margin), landmarks68=points)

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        """The same faces with `embedding` (dlib's raw 128-d float32 descriptor) and `recogniser` set. Uses each
        face's 68 landmarks (fitted in its box first when it has none)."""
        if not faces:
            return []
        image = _dlib_image(frame)
        dlib = self._dlib
        shapes = dlib.full_object_detections()
        for face in faces:
            rect = _rectangle(dlib, face.box)
            points = face.landmarks68 if face.landmarks68 is not None else self._landmarks(image, rect)
            parts = dlib.points([dlib.point(round(float(x)), round(float(y))) for x, y in points])
            shapes.append(dlib.full_object_detection(rect, parts))
        descriptors = self._encoder.compute_face_descriptor(image, shapes)
        return [
            replace(face, embedding=np.asarray(d, dtype=np.float32), recogniser=self.recogniser)
            for face, d in zip(faces, descriptors, strict=True)
        ]

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        """Euclidean distance between two raw dlib descriptors (128-d); under 0.6 = same person."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if a.shape != (128,) or b.shape != (128,):
            raise ValueError(f"dlib embeddings are 128-d vectors, got shapes {a.shape} and {b.shape}")
        return float(np.linalg.norm(a - b))

    def _landmarks(self, image: np.ndarray, rect: Any) -> npt.NDArray[np.float32]:
        shape = self._predictor(image, rect)
        return np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float32)

    def _verify(
        self, image: np.ndarray, box: tuple[float, float, float, float]
    ) -> tuple[float, tuple[float, float, float, float]] | None:
        """HOG margin and box (frame pixels) of the best detection overlapping `box` in a rescaled crop around
        it, or None."""
        height, width = image.shape[:2]
        side = _side(box)
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        half = side * VERIFY_CROP_PER_SIDE / 2
        x1, y1, x2, y2 = (int(v) for v in _clip((cx - half, cy - half, cx + half, cy + half), width, height))
        if x2 - x1 < 2 or y2 - y1 < 2:
            return None
        scale = VERIFY_FACE_PX / side
        crop = cv2.resize(
            image[y1:y2, x1:x2],
            (max(1, round((x2 - x1) * scale)), max(1, round((y2 - y1) * scale))),
            interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR,
        )
        rects, margins, _ = self._hog.run(np.ascontiguousarray(crop), 0, VERIFY_MARGIN)
        expected = tuple((v - o) * scale for v, o in zip(box, (x1, y1, x1, y1), strict=True))
        overlapping = [
            (m, (r.left(), r.top(), r.right() + 1, r.bottom() + 1))
            for r, m in zip(rects, margins, strict=True)
            if iou((r.left(), r.top(), r.right() + 1, r.bottom() + 1), expected) >= VERIFY_MIN_IOU
        ]
        if not overlapping:
            return None
        margin, (left, top, right, bottom) = max(overlapping, key=lambda item: item[0])
        return margin, (left / scale + x1, top / scale + y1, right / scale + x1, bottom / scale + y1)


def landmarks5(points68: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """5 landmarks in the ArcFace template's order from 68 (iBUG 300-W numbering), image-left first: the eye
    centres (means of points 36–41 and 42–47), the nose tip (30), the mouth corners (48, 54). 5×2 float32."""
    return np.stack(
        [
            points68[LEFT_EYE].mean(axis=0),
            points68[RIGHT_EYE].mean(axis=0),
            points68[NOSE_TIP],
            points68[MOUTH_LEFT],
            points68[MOUTH_RIGHT],
        ]
    ).astype(np.float32)


def _box_from_landmarks(points: npt.NDArray[np.float32]) -> tuple[float, float, float, float]:
    """The detector-convention box (x1, y1, x2, y2) for 68 landmarks: see BOX_SIDE_PER_EXTENT."""
    (x1, y1), (x2, y2) = points.min(axis=0), points.max(axis=0)
    w, h = float(x2 - x1), float(y2 - y1)
    half = BOX_SIDE_PER_EXTENT * math.sqrt(max(w * h, 1.0)) / 2
    cx, cy = float(x1 + x2) / 2, float(y1 + y2) / 2 - BOX_RAISE_PER_HEIGHT * h
    return (cx - half, cy - half, cx + half, cy + half)


def _dlib_image(frame: Frame) -> np.ndarray:
    # dlib's pybind11 wrappers accept only C-contiguous uint8 RGB; views (crops, flips) are copied.
    return np.ascontiguousarray(check_frame(frame))


def _rectangle(dlib: Any, box: Sequence[float]) -> Any:
    # dlib rectangles are inclusive of their right/bottom pixel; Face boxes are exclusive.
    x1, y1, x2, y2 = (round(float(v)) for v in box)
    return dlib.rectangle(x1, y1, max(x1, x2 - 1), max(y1, y2 - 1))


def _side(box: Sequence[float]) -> float:
    return math.sqrt(max((box[2] - box[0]) * (box[3] - box[1]), 1e-6))


def _clip(box: Sequence[float], width: int, height: int) -> tuple[float, float, float, float]:
    return (
        min(max(box[0], 0.0), width),
        min(max(box[1], 0.0), height),
        min(max(box[2], 0.0), width),
        min(max(box[3], 0.0), height),
    )
