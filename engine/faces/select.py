"""Which faces a processor works on (the job's `faces.selector` and `faces.order`), and the source identity."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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


@dataclass(frozen=True)
class SourceChoice:
    """Which face of one source photo a job took: `file` (its name), `faces` found in it, `used` the face taken,
    numbered from the left (1 = leftmost), `largest` the one that is largest, `by` what chose it ("largest", the
    default, or "source_face", the job's `faces.source_face`), and `box` (x1, y1, x2, y2, photo pixels)."""

    file: str
    faces: int
    used: int
    largest: int
    by: str
    box: tuple[float, float, float, float]

    def summary(self) -> str:
        """One line for a photo with several faces (the run's summary), saying which was taken and how to pick
        another."""
        which = "the largest" if self.used == self.largest else f"face {self.used}"
        others = f"1–{self.faces}" if self.faces > 2 else ("1" if self.used == 2 else "2")
        return (
            f"source: {self.file} has {self.faces} faces; used {which} ({_nth(self.used)} from the left): "
            f"--source-face {others} (faces.source_face) takes {'another' if self.faces > 2 else 'the other'}"
        )


def _nth(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def source_identity(
    analyser: FaceAnalyser, images: Sequence[Frame], names: Sequence[str], pick: int = 0
) -> tuple[npt.NDArray[np.float32], list[tuple[Frame, Face]], list[SourceChoice]]:
    """The identity of the source person, from one or more photos (H×W×3 uint8 RGB; `names` for messages).

    Each photo's faces are detected; the one taken is its largest (`pick` 0), or its `pick`th from the left in a
    photo with several (a photo with one face gives that one). It is landmarked and embedded. Returns the mean
    embedding (raw mean for recognisers with raw descriptors such as dlib's; mean re-normalised to unit length
    for L2-normalised ones such as ArcFace), each image with its face, and each photo's `SourceChoice`. Raises
    NoFaceInSource naming every image without a face (with the smallest face the analyser finds, and the setting
    that finds smaller ones); InvalidInput when `pick` is past a photo's faces.
    """
    if len(images) != len(names):
        raise ValueError(f"{len(images)} source images but {len(names)} names")
    if not images:
        raise InvalidInput("no source image given: pass at least one with --source")
    found: list[tuple[Frame, Face]] = []
    choices: list[SourceChoice] = []
    missing: list[str] = []
    for image, name in zip(images, names, strict=True):
        faces = order_faces(analyser.detect(image), "left-right")
        if not faces:
            missing.append(name)
            continue
        index, largest = source_face_index(faces, pick, name)
        face = faces[index]
        by = "source_face" if pick and len(faces) > 1 else "largest"
        choices.append(SourceChoice(Path(name).name, len(faces), index + 1, largest + 1, by, face.box))
        found.append((image, analyser.embed(image, [face])[0]))
    if missing:
        raise NoFaceInSource(
            f"no face found in source image{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
            f"{smallest_face_hint(analyser)}: use a photo with a clear, frontal face"
        )
    log.debug("source identity from %d image(s)", len(found))
    return mean_embedding([face.embedding for _, face in found]), found, choices


def source_face_index(faces: Sequence[Face], pick: int, name: str) -> tuple[int, int]:
    """Which of a source photo's `faces` (ordered from the left) a job takes, and which is the largest, as indices:
    the largest for `pick` 0 or a photo with one face, else the `pick`th from the left (1 = leftmost). InvalidInput
    naming the photo (`name`) when `pick` is past its faces."""
    largest = faces.index(order_faces(faces, "largest")[0]) if faces else -1
    if pick > len(faces) > 1:
        raise InvalidInput(
            f"faces.source_face={pick}, but the source image {name} has {len(faces)} faces: choose 1–"
            f"{len(faces)} (from the left), or 0 for the largest"
        )
    return (pick - 1 if pick and len(faces) > 1 else largest), largest


def smallest_face_hint(analyser: FaceAnalyser) -> str:
    """ ", searched for faces of at least 40 px (faces.min_face=20 finds smaller ones, more slowly)" for an
    analyser that says its smallest face (the embedded one), "" for one that does not."""
    smallest = getattr(analyser, "min_face", None)
    if not isinstance(smallest, int | float):
        return ""
    return (
        f" (searched for faces of at least {smallest:g} px; faces.min_face={max(10, round(smallest / 2))} finds "
        "smaller ones, more slowly)"
    )


def mean_embedding(embeddings: Sequence[npt.ArrayLike | None]) -> npt.NDArray[np.float32]:
    """The identity several embeddings of one person share (each D floats, one recogniser): their mean, as it is
    for raw descriptors such as dlib's, re-normalised to unit length for L2-normalised ones such as ArcFace."""
    vectors = np.stack([np.asarray(e, dtype=np.float32) for e in embeddings])
    mean = vectors.mean(axis=0)
    if np.all(np.abs(np.linalg.norm(vectors, axis=1) - 1.0) < _UNIT_NORM_TOLERANCE):
        mean = mean / np.linalg.norm(mean)
    return mean.astype(np.float32)
