"""The pipeline's face stage: one analyser per job, faces found once per frame, chosen by the job's `faces`
settings, and the source identity computed once per job. Processors read the result from `FrameContext`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engine import media as video
from engine import metrics
from engine.errors import InvalidInput
from engine.faces import FaceAnalyser
from engine.faces.select import order_faces, select, source_identity
from engine.faces.tracking import FaceTracker
from engine.job import FacesSettings
from engine.models.runtime import Runtime
from engine.types import Face, Frame

log = logging.getLogger(__name__)


def analyser_model_ids(settings: FacesSettings) -> list[str]:
    """The manifest ids of the models the analyser `settings` name loads (for prefetch and `doctor`)."""
    if settings.analyser == "buffalo_l":
        from engine.faces.buffalo import DETECTOR, RECOGNISER

        return [DETECTOR, RECOGNISER]
    return ["dlib_landmarks_68", "dlib_resnet_v1"] + (["dlib_mmod_detector"] if settings.detector == "cnn" else [])


def build_analyser(settings: FacesSettings, runtime: Runtime) -> FaceAnalyser:
    """The analyser `faces.analyser` names: dlib (embedded, offline) or InsightFace buffalo_l (downloaded); built
    once per Runtime (loading dlib's models takes about a second) and safe to share between threads."""
    key = ("face_analyser", settings.analyser, settings.detector)
    return runtime.warm(key, lambda: SerialAnalyser(_new_analyser(settings, runtime)))


def _new_analyser(settings: FacesSettings, runtime: Runtime) -> FaceAnalyser:
    if settings.analyser == "buffalo_l":
        from engine.faces.buffalo import BuffaloAnalyser

        return BuffaloAnalyser(runtime)
    from engine.faces.embedded import EmbeddedAnalyser

    # The dlib files are checked against the manifest's sha256 once per process (a tampered file is refused).
    for model_id in analyser_model_ids(settings):
        # A mirror's catalogue may leave the embedded entries out; then there is nothing to check against.
        spec = runtime.manifest.models.get(model_id)
        for file in spec.files if spec is not None else ():
            runtime.is_present(file)
    return EmbeddedAnalyser(settings.detector)


@dataclass(frozen=True)
class SourceFace:
    """One source photo (H×W×3 uint8 RGB) and its face (with landmarks and the analyser's embedding)."""

    image: Frame
    face: Face


@dataclass(frozen=True)
class SourceIdentity:
    """The job's source person: the mean embedding of all source faces (in `recogniser`'s space) and the faces."""

    embedding: npt.NDArray[np.float32]
    recogniser: str
    faces: tuple[SourceFace, ...]


def load_sources(analyser: FaceAnalyser, paths: Sequence[Path]) -> SourceIdentity:
    """Read, detect and embed every source image; NoFaceInSource names the images without a face."""
    images = [video.read_image(p)[0] for p in paths]
    embedding, found = source_identity(analyser, images, [str(p) for p in paths])
    faces = tuple(SourceFace(img, face) for img, face in found)
    return SourceIdentity(np.asarray(embedding, np.float32), analyser.recogniser, faces)


class SerialAnalyser:
    """A FaceAnalyser whose model calls run one at a time.

    A video run finds faces on one thread while identity QA embeds faces on another, both with the job's one
    analyser; dlib's and ONNX Runtime's objects are not documented as safe for concurrent calls on one object.
    Every other attribute (threshold, recogniser, …) is the wrapped analyser's."""

    def __init__(self, inner: FaceAnalyser) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def detect(self, frame: Frame) -> list[Face]:
        with self._lock:
            return self._inner.detect(frame)

    def refit(self, frame: Frame, face: Face) -> Face | None:
        with self._lock:
            return self._inner.refit(frame, face)

    def embed(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        with self._lock:
            return self._inner.embed(frame, faces)

    def distance(self, a: np.ndarray, b: np.ndarray) -> float:
        return self._inner.distance(a, b)


@dataclass
class FaceStage:
    """Finds the faces to process on each frame of one job, in frame order (it tracks between detections)."""

    settings: FacesSettings
    analyser: FaceAnalyser
    source: SourceIdentity | None
    reference: npt.NDArray[np.float32] | None
    tracker: FaceTracker
    _decided: dict[int, bool] = field(default_factory=dict)
    _chosen: int | None = None

    @classmethod
    def create(
        cls, settings: FacesSettings, runtime: Runtime, sources: Sequence[Path], target: Path, fps: float = 30.0
    ) -> FaceStage:
        """`fps`: the target's frame rate, so smoothing works in seconds whatever the video's rate."""
        if settings.reference_image is not None and settings.selector != "reference":
            raise InvalidInput("faces.reference_image is set but faces.selector is not 'reference'; set both")
        analyser = build_analyser(settings, runtime)
        source = load_sources(analyser, sources) if sources else None
        reference = _reference(settings, analyser, target) if settings.selector == "reference" else None
        tracker = FaceTracker(analyser, redetect_every=settings.redetect_every, fps=fps or 30.0)
        return cls(settings, analyser, source, reference, tracker)

    def restart(self) -> None:
        """Start over as on a video's first frame: no track, no face chosen yet (the analyser and source stay)."""
        self.tracker.reset()
        self._decided.clear()
        self._chosen = None

    @property
    def threshold(self) -> float:
        return self.settings.reference_distance or self.analyser.threshold

    def annotate(self, frames: Iterable[Frame]) -> Iterator[tuple[Frame, tuple[Face, ...]]]:
        """Each frame (in video order) with the faces the processors should work on, in order.

        A face the tracker could only extrapolate (nothing found it on that frame) is kept only if its track is
        found again within the tracker's `max_gap` frames: frames are held back until that is known, so a face
        that left the picture is not pasted onto whatever follows. Decisions are made per track, not per frame,
        so the chosen face does not flicker between people: `one` keeps following the face it chose while it is
        tracked; `reference` embeds each new track once.
        """
        held: deque[tuple[Frame, dict[int, tuple[Face, bool]]]] = deque()
        for frame in frames:
            tracks = {t.track_id: (t.face, t.filled) for t in self.tracker.update(frame)}
            found = {tid for tid, (_, filled) in tracks.items() if not filled}
            for _, earlier in held:
                for tid, (face, filled) in list(earlier.items()):
                    if filled and tid in found:
                        earlier[tid] = (face, False)  # the gap closed: the fill was right
                    elif filled and tid not in tracks:
                        del earlier[tid]  # the track ended: the fill was a ghost
            held.append((frame, tracks))
            while held and (len(held) > self.tracker.max_gap or not any(f for _, f in held[0][1].values())):
                yield self._emit(*held.popleft())
        while held:
            yield self._emit(*held.popleft())

    def _emit(self, frame: Frame, tracks: dict[int, tuple[Face, bool]]) -> tuple[Frame, tuple[Face, ...]]:
        chosen = self._choose(frame, {tid: face for tid, (face, filled) in tracks.items() if not filled})
        metrics.record_faces(len(chosen))
        return frame, chosen

    def _choose(self, frame: Frame, tracks: dict[int, Face]) -> tuple[Face, ...]:
        if not tracks:
            return ()
        if self.settings.selector == "many":
            return tuple(select(list(tracks.values()), selector="many", order=self.settings.order))
        if self.settings.selector == "one":
            if self._chosen not in tracks:
                first = order_faces(list(tracks.values()), self.settings.order)[0]
                self._chosen = next(tid for tid, f in tracks.items() if f is first)
            return (tracks[self._chosen],)
        undecided = [tid for tid in tracks if tid not in self._decided]
        if undecided:
            embedded = self.analyser.embed(frame, [tracks[t] for t in undecided])
            chosen_ids = {
                id(f)
                for f in select(
                    embedded,
                    selector="reference",
                    reference=self.reference,
                    reference_distance=self.threshold,
                    analyser=self.analyser,
                )
            }
            for tid, face in zip(undecided, embedded, strict=True):
                self._decided[tid] = id(face) in chosen_ids
        chosen = [f for tid, f in tracks.items() if self._decided[tid]]
        return tuple(order_faces(chosen, self.settings.order))


def _reference(settings: FacesSettings, analyser: FaceAnalyser, target: Path) -> npt.NDArray[np.float32]:
    """The embedding of the person to replace: the largest face of the reference image, or of target frame N."""
    if settings.reference_image is not None:
        frame, where = video.read_image(settings.reference_image)[0], str(settings.reference_image)
    else:
        where = f"frame {settings.reference_frame} of {target}"
        with video.FrameReader(target) as reader:
            frame = next((f for i, f in enumerate(reader) if i == settings.reference_frame), None)
        if frame is None:
            raise InvalidInput(f"faces.reference_frame {settings.reference_frame} is past the end of {target}")
    faces = analyser.detect(frame)
    if not faces:
        raise InvalidInput(f"no face found in {where} to use as the reference; choose another image or frame")
    (face,) = analyser.embed(frame, order_faces(faces, "largest")[:1])
    assert face.embedding is not None
    return face.embedding
