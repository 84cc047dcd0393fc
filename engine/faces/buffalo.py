"""The `buffalo_l` face analyser: InsightFace SCRFD det_10g detection and ArcFace w600k_r50 embeddings.

Downloaded, non-commercial weights (MODELS.md §2). The decoding follows insightface v0.7 `model_zoo/scrfd.py`
and `arcface_onnx.py`: the frame is letterboxed (aspect kept, zero padding right/bottom) into a square canvas,
the detector's 9 outputs are score, box-distance and keypoint maps for strides 8, 16 and 32 with 2 anchors per
cell, and faces are aligned to the `arcface_112` template before they are embedded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt

from engine.core.errors import InvalidInput
from engine.core.types import Face, Frame, check_frame
from engine.faces.align import estimate_affine, warp_face
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import to_tensor

DETECTOR = "buffalo_l_det_10g"
RECOGNISER = "buffalo_l_w600k_r50"

STRIDES = (8, 16, 32)
ANCHORS_PER_CELL = 2
# Output widths of the three kinds of maps: a score, 4 box distances (left, top, right, bottom), 5 (x, y) points.
SCORE, BOX, KPS = 1, 4, 10

# A tracked face is re-detected in a crop this many times its box's longer side, centred on the box: room for
# the motion since the last frame. The crop is letterboxed into a smaller canvas than a full detection uses.
REFIT_CONTEXT = 2.0
REFIT_CANVAS = 320
# A re-detected face is the tracked one when their boxes overlap at least this much (intersection over union).
REFIT_MIN_IOU = 0.3

Boxes = npt.NDArray[np.float32]  # K×4 (x1, y1, x2, y2) pixels
Points = npt.NDArray[np.float32]  # K×5×2 (x, y) pixels


class BuffaloAnalyser:
    """`FaceAnalyser` over InsightFace's buffalo_l models (SCRFD-10GF detector, ArcFace R50 recogniser).

    threshold: 0.6 on the distance 1 − cosine similarity, i.e. two faces are the same person when their ArcFace
    embeddings have cosine similarity above 0.4 (pairs of different people cluster near 0, photos of one
    person well above 0.4). Not comparable with the embedded analyser's dlib distances.
    """

    id = "buffalo_l"
    recogniser = "arcface_w600k_r50"
    threshold = 0.6

    def __init__(
        self,
        runtime: Runtime,
        *,
        backend: str | None = None,
        score_threshold: float = 0.5,
        nms_threshold: float = 0.4,
        det_size: int | None = None,
    ) -> None:
        """Load both models (downloading them if needed) on `backend` (None: the job's backend).

        score_threshold: minimum detector score in [0, 1] (insightface: 0.5). nms_threshold: boxes overlapping a
        better one by more than this IoU are dropped (insightface: 0.4). det_size: side in pixels of the detector
        canvas, a multiple of 32 (default: the manifest's 640).
        """
        # Both checked first, so one error names every missing file.
        runtime.ensure([DETECTOR, RECOGNISER], backend)
        self._detector: LoadedModel = runtime.load(DETECTOR, backend)
        self._recogniser: LoadedModel = runtime.load(RECOGNISER, backend)
        self._score_threshold = score_threshold
        self._nms_threshold = nms_threshold
        self._det_size = det_size or self._detector.spec.input_size or 640
        if self._det_size % STRIDES[-1]:
            raise InvalidInput(f"the detector canvas must be a multiple of {STRIDES[-1]} px, got {self._det_size}")

    # -- FaceAnalyser -----------------------------------------------------------------------------------------
    def detect(self, frame: Frame) -> list[Face]:
        """All faces on `frame` (H×W×3 uint8 RGB), best score first: box (clipped to the frame), 5 landmarks
        (image-left eye, other eye, nose tip, image-left mouth corner, other corner; frame pixels, may lie
        outside the frame), score in [0, 1]. No 68-point landmarks, no embedding."""
        check_frame(frame)
        boxes, points, scores = self._detect(frame, self._det_size)
        h, w = frame.shape[:2]
        boxes = np.clip(boxes, 0.0, np.float32([w, h, w, h]))
        return [
            Face(box=_as_box(box), landmarks5=pts, score=float(score))
            for box, pts, score in zip(boxes, points, scores, strict=True)
        ]

    def refit(self, frame: Frame, face: Face) -> Face | None:
        """Re-detect a tracked face near its predicted box.

        The detector runs on a crop REFIT_CONTEXT× the box's longer side around the box's centre (clipped to the
        frame), letterboxed into a REFIT_CANVAS px canvas (about a quarter of a full detection's cost). The
        detection overlapping the predicted box most (IoU ≥ REFIT_MIN_IOU) replaces its box, landmarks and
        score; the embedding and recogniser are kept (a tracked face is the same person). None when no face is
        found there.
        """
        check_frame(frame)
        h, w = frame.shape[:2]
        x1, y1, x2, y2 = face.box
        half = REFIT_CONTEXT * max(x2 - x1, y2 - y1) / 2.0
        cx, cy = (x1 + x2) / 2.0, (y1 + y2) / 2.0
        left, top = max(int(cx - half), 0), max(int(cy - half), 0)
        right, bottom = min(int(np.ceil(cx + half)), w), min(int(np.ceil(cy + half)), h)
        if right - left < 2 or bottom - top < 2:
            return None
        boxes, points, scores = self._detect(frame[top:bottom, left:right], REFIT_CANVAS)
        if len(boxes) == 0:
            return None
        offset = np.float32([left, top])
        boxes = np.clip(boxes + np.tile(offset, 2), 0.0, np.float32([w, h, w, h]))
        overlaps = _iou(np.float32(face.box), boxes)
        best = int(np.argmax(overlaps))
        if overlaps[best] < REFIT_MIN_IOU:
            return None
        return dataclasses.replace(
            face,
            box=_as_box(boxes[best]),
            landmarks5=points[best] + offset,
            score=float(scores[best]),
        )

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        """The same faces with a 512-d L2-normalised float32 ArcFace `embedding` and `recogniser` set.

        Each face is aligned by its 5 landmarks to the model's template (arcface_112), and all faces of the call
        go through the recogniser in one N×3×112×112 batch.
        """
        check_frame(frame)
        if not faces:
            return []
        spec = self._recogniser.spec
        if spec.template is None or spec.input_size is None:
            raise InvalidInput(f"model {spec.id} has no alignment template or input size in the manifest")
        crops = np.stack(
            [
                warp_face(frame, estimate_affine(f.landmarks5, spec.template, spec.input_size), spec.input_size)
                for f in faces
            ]
        )
        (raw, *_) = self._recogniser.session.run({spec.io.input: to_tensor(crops, spec.io)})
        embeddings = raw.reshape(len(faces), -1).astype(np.float32)
        embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
        return [
            dataclasses.replace(f, embedding=e, recogniser=self.recogniser)
            for f, e in zip(faces, embeddings, strict=True)
        ]

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        """1 − cosine similarity of two ArcFace embeddings, in [0, 2] (0 = same direction)."""
        a = np.asarray(a, np.float32).reshape(-1)
        b = np.asarray(b, np.float32).reshape(-1)
        if a.shape != b.shape:
            raise InvalidInput(
                f"cannot compare a {a.size}-d with a {b.size}-d embedding: they come from different recognisers"
            )
        return float(1.0 - np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    # -- detection internals ----------------------------------------------------------------------------------
    def _detect(self, image: Frame, canvas_size: int) -> tuple[Boxes, Points, npt.NDArray[np.float32]]:
        """Detect on `image` letterboxed into a canvas_size² canvas; boxes K×4, points K×5×2 in `image` pixels,
        scores K, best first, after NMS."""
        canvas, scale = letterbox(image, canvas_size)
        io = self._detector.spec.io
        outputs = self._detector.session.run({io.input: to_tensor(canvas[None], io)})
        boxes, points, scores = decode_scrfd(outputs, canvas_size, self._score_threshold)
        keep = nms(boxes, scores, self._nms_threshold)
        return boxes[keep] / scale, points[keep] / scale, scores[keep]


def letterbox(image: Frame, size: int) -> tuple[Frame, float]:
    """Fit `image` (H×W×3 uint8 RGB) into a size×size canvas keeping its aspect, top-left aligned, zero padded.

    Returns (canvas size×size×3 uint8 RGB, scale): canvas pixel = image pixel × scale (as insightface's SCRFD).
    """
    h, w = image.shape[:2]
    if h > w:
        new_h, new_w = size, max(int(size * w / h), 1)
    else:
        new_w, new_h = size, max(int(size * h / w), 1)
    canvas = np.zeros((size, size, 3), np.uint8)
    # cv2.resize works per channel, so the RGB order is kept.
    canvas[:new_h, :new_w] = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    return canvas, new_h / h


def anchor_centres(canvas_size: int, stride: int) -> npt.NDArray[np.float32]:
    """(x, y) centres in canvas pixels of the anchors of one stride: row-major cells, each repeated
    ANCHORS_PER_CELL times; shape (ANCHORS_PER_CELL × cells)×2. Centres are the cells' top-left corners
    (grid × stride), as SCRFD was trained."""
    cells = canvas_size // stride
    ys, xs = np.mgrid[:cells, :cells]
    centres = np.stack([xs, ys], axis=-1).reshape(-1, 2).astype(np.float32) * stride
    return np.repeat(centres, ANCHORS_PER_CELL, axis=0)


def decode_scrfd(
    outputs: Sequence[npt.NDArray[np.float32]], canvas_size: int, score_threshold: float
) -> tuple[Boxes, Points, npt.NDArray[np.float32]]:
    """Decode SCRFD's 9 outputs on a canvas_size² canvas into boxes K×4, points K×5×2 (canvas pixels) and
    scores K for every anchor scoring ≥ score_threshold (no NMS).

    The outputs are told apart by shape, not name or position: width 1 scores, 4 box distances, 10 keypoint
    offsets; within a kind the row count fixes the stride (rows = 2 × (canvas/stride)²). Distances and offsets
    are in units of the stride from the anchor centre. A leading batch axis of 1, if present, is dropped.
    """
    maps: dict[tuple[int, int], npt.NDArray[np.float32]] = {}
    expected = {ANCHORS_PER_CELL * (canvas_size // s) ** 2: s for s in STRIDES}
    for out in outputs:
        arr = out[0] if out.ndim == 3 and out.shape[0] == 1 else out
        stride = expected.get(arr.shape[0]) if arr.ndim == 2 else None
        if stride is None or arr.shape[1] not in (SCORE, BOX, KPS):
            raise InvalidInput(
                f"detector output of shape {out.shape} does not fit SCRFD's layout on a {canvas_size} px canvas"
            )
        maps[(arr.shape[1], stride)] = arr
    if len(maps) != 3 * len(STRIDES):
        raise InvalidInput(f"the detector gave {len(outputs)} outputs, not SCRFD's 9 (scores, boxes, keypoints × 3)")
    all_boxes, all_points, all_scores = [], [], []
    for stride in STRIDES:
        scores = maps[(SCORE, stride)][:, 0]
        hit = np.flatnonzero(scores >= score_threshold)
        centres = anchor_centres(canvas_size, stride)[hit]
        dist = maps[(BOX, stride)][hit] * stride
        offsets = maps[(KPS, stride)][hit].reshape(-1, 5, 2) * stride
        all_boxes.append(np.concatenate([centres - dist[:, :2], centres + dist[:, 2:]], axis=1))
        all_points.append(centres[:, None, :] + offsets)
        all_scores.append(scores[hit])
    scores = np.concatenate(all_scores).astype(np.float32)
    order = np.argsort(-scores, kind="stable")
    boxes = np.concatenate(all_boxes).astype(np.float32)[order]
    points = np.concatenate(all_points).astype(np.float32)[order]
    return boxes, points, scores[order]


def nms(boxes: Boxes, scores: npt.NDArray[np.float32], iou_threshold: float) -> npt.NDArray[np.intp]:
    """Greedy non-maximum suppression: indices of the boxes kept, best score first. A box is dropped when it
    overlaps an already kept one by IoU > iou_threshold."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        order = rest[_iou(boxes[best], boxes[rest]) <= iou_threshold]
    return np.asarray(keep, np.intp)


def _as_box(box: npt.NDArray[np.float32]) -> tuple[float, float, float, float]:
    return float(box[0]), float(box[1]), float(box[2]), float(box[3])


def _iou(box: npt.NDArray[np.float32], others: Boxes) -> npt.NDArray[np.float32]:
    """Intersection over union of one (x1, y1, x2, y2) box with each of K boxes; K floats in [0, 1]."""
    ix = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0.0, None)
    iy = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0.0, None)
    inter = ix * iy
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)
