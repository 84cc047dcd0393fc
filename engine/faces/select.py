"""Which faces a processor works on (the job's `faces.selector` and `faces.order`), and the source identity."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Literal

import numpy as np
import numpy.typing as npt

from engine.core.errors import InvalidInput, NoFaceInSource
from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser
from engine.faces.boxes import area

log = logging.getLogger(__name__)

Selector = Literal["one", "many", "reference", "map"]
Order = Literal["largest", "left-right", "right-left", "top-bottom", "best-score"]

# Embeddings whose norms are all this close to 1 come from a recogniser that L2-normalises (ArcFace); their mean
# is normalised again so it lives on the same sphere. dlib's raw descriptors (norm ≈ 1.4) are averaged as they are.
_UNIT_NORM_TOLERANCE = 1e-3


_SORT_KEYS: Mapping[str, Callable[[Face], float]] = MappingProxyType(
    {
        "largest": lambda f: -area(f.box),
        "left-right": lambda f: (f.box[0] + f.box[2]) / 2,
        "right-left": lambda f: -(f.box[0] + f.box[2]) / 2,
        "top-bottom": lambda f: (f.box[1] + f.box[3]) / 2,
        "best-score": lambda f: -f.score,
    }
)


def order_faces(faces: Sequence[Face], order: Order) -> list[Face]:
    """`faces` sorted by `order`: box area descending, box centre x ascending / descending, box centre y
    ascending, or score descending. Stable: ties keep the detector's order."""
    if order not in _SORT_KEYS:
        raise ValueError(f"unknown face order {order!r}; known: {', '.join(_SORT_KEYS)}")
    return sorted(faces, key=_SORT_KEYS[order])


def select(
    faces: Sequence[Face],
    *,
    selector: Selector = "one",
    order: Order = "largest",
    reference: np.ndarray | None = None,
    reference_distance: float = 0.6,
    analyser: FaceAnalyser | None = None,
) -> list[Face]:
    """The faces to process, in `order`.

    "one": the first face by `order` (or none). "many": all faces. "reference": every face whose embedding lies
    closer than `reference_distance` to `reference` by `analyser.distance` (faces must carry embeddings of
    `analyser.recogniser`; ValueError otherwise, and when `reference` or `analyser` is missing). "map" needs the
    faces' people and the job's mapping: the face stage chooses those faces itself (`FaceStage`).
    """
    ordered = order_faces(faces, order)
    if selector == "one":
        return ordered[:1]
    if selector == "many":
        return ordered
    if selector != "reference":
        raise ValueError(f"selector {selector!r} is not chosen by select(); known here: one, many, reference")
    if reference is None or analyser is None:
        raise ValueError("reference selection needs a reference embedding and the analyser that made it")
    chosen = []
    for face in ordered:
        if face.embedding is None:
            raise ValueError("reference selection needs faces with embeddings: call analyser.embed first")
        if face.recogniser != analyser.recogniser:
            raise ValueError(
                f"face embedded by {face.recogniser!r} cannot be compared with {analyser.recogniser!r} embeddings"
            )
        if analyser.distance(face.embedding, reference) < reference_distance:
            chosen.append(face)
    return chosen


def source_identity(
    analyser: FaceAnalyser, images: Sequence[Frame], names: Sequence[str]
) -> tuple[npt.NDArray[np.float32], list[tuple[Frame, Face]]]:
    """The identity of the source person, from one or more photos (H×W×3 uint8 RGB; `names` for messages).

    Each image's largest face is detected, landmarked and embedded. Returns the mean embedding (raw mean for
    recognisers with raw descriptors such as dlib's; mean re-normalised to unit length for L2-normalised ones
    such as ArcFace) and each image with its face. Raises NoFaceInSource naming every image without a face.
    """
    if len(images) != len(names):
        raise ValueError(f"{len(images)} source images but {len(names)} names")
    if not images:
        raise InvalidInput("no source image given: pass at least one with --source")
    found: list[tuple[Frame, Face]] = []
    missing: list[str] = []
    for image, name in zip(images, names, strict=True):
        faces = order_faces(analyser.detect(image), "largest")
        if not faces:
            missing.append(name)
            continue
        found.append((image, analyser.embed(image, faces[:1])[0]))
    if missing:
        raise NoFaceInSource(
            f"no face found in source image{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
            "use a photo with a clear, frontal face"
        )
    log.debug("source identity from %d image(s)", len(found))
    return mean_embedding([face.embedding for _, face in found]), found


def mean_embedding(embeddings: Sequence[npt.ArrayLike | None]) -> npt.NDArray[np.float32]:
    """The identity several embeddings of one person share (each D floats, one recogniser): their mean, as it is
    for raw descriptors such as dlib's, re-normalised to unit length for L2-normalised ones such as ArcFace."""
    vectors = np.stack([np.asarray(e, dtype=np.float32) for e in embeddings])
    mean = vectors.mean(axis=0)
    if np.all(np.abs(np.linalg.norm(vectors, axis=1) - 1.0) < _UNIT_NORM_TOLERANCE):
        mean = mean / np.linalg.norm(mean)
    return mean.astype(np.float32)
