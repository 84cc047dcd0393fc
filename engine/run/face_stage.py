"""The pipeline's face stage: one analyser per job, faces found once per frame, chosen by the job's `faces`
settings, and the source identity computed once per job. Processors read the result from `FrameContext`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engine import media as video
from engine.core import metrics
from engine.core.errors import InvalidInput
from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser
from engine.faces.boxes import area
from engine.faces.people import Gallery, Scan, ScanCache, TakeTurn, check_mapping, scan, scan_key
from engine.faces.select import SourceChoice, order_faces, select, source_identity
from engine.faces.serial import SerialAnalyser
from engine.faces.tracking import FaceTracker
from engine.job.settings import FacesSettings
from engine.models.runtime import Runtime

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
    key = ("face_analyser", settings.analyser, settings.detector, settings.min_face)
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
    return EmbeddedAnalyser(settings.detector, min_face=settings.min_face)


@dataclass(frozen=True)
class SourceFace:
    """One source photo (H×W×3 uint8 RGB) and its face (with landmarks and the analyser's embedding)."""

    image: Frame
    face: Face


@dataclass(frozen=True)
class SourceIdentity:
    """The job's source person: the mean embedding of all source faces (in `recogniser`'s space), the faces, and
    which face of each photo was taken (`choices`: its count, the one used, why)."""

    embedding: npt.NDArray[np.float32]
    recogniser: str
    faces: tuple[SourceFace, ...]
    choices: tuple[SourceChoice, ...] = ()


def load_sources(analyser: FaceAnalyser, paths: Sequence[Path], pick: int = 0) -> SourceIdentity:
    """Read, detect and embed every source image (its largest face, or with `pick` its pick-th from the left:
    `faces.source_face`); NoFaceInSource names the images without a face."""
    images = [video.read_image(p)[0] for p in paths]
    embedding, found, choices = source_identity(analyser, images, [str(p) for p in paths], pick)
    faces = tuple(SourceFace(img, face) for img, face in found)
    return SourceIdentity(np.asarray(embedding, np.float32), analyser.recogniser, faces, tuple(choices))


@dataclass
class FaceStage:
    """Finds the faces to process on each frame of one job, in frame order (it tracks between detections).

    With `gallery` (people are needed: the `map` selector, or a processor that reads `Face.person`), every face
    carries its person number and its track's embedding; `cast` is each mapped person's source identity."""

    settings: FacesSettings
    analyser: FaceAnalyser
    source: SourceIdentity | None
    reference: npt.NDArray[np.float32] | None
    tracker: FaceTracker
    gallery: Gallery | None = None
    cast: Mapping[int, SourceIdentity] = field(default_factory=dict)
    scan: Scan | None = None
    _decided: dict[int, bool] = field(default_factory=dict)
    _chosen: int | None = None

    @classmethod
    def create(
        cls,
        settings: FacesSettings,
        runtime: Runtime,
        sources: Sequence[Path],
        target: Path,
        fps: float = 30.0,
        *,
        people: bool = False,
    ) -> FaceStage:
        """`fps`: the target's frame rate, so smoothing works in seconds whatever the video's rate. `people`: a
        processor of the chain reads each face's person (the `map` selector needs them anyway)."""
        if settings.reference_image is not None and settings.selector != "reference":
            raise InvalidInput("faces.reference_image is set but faces.selector is not 'reference'; set both")
        if settings.people and settings.selector != "map":
            raise InvalidInput("faces.people maps people to sources but faces.selector is not 'map'; set both")
        analyser = build_analyser(settings, runtime)
        gallery, cast, source, found = None, {}, None, None
        if settings.selector == "map":
            cast = _cast(settings, analyser, sources)
        elif sources:
            source = load_sources(analyser, sources, settings.source_face)
        if settings.selector == "map" or people:
            found = scan_target(settings, runtime, analyser, target)
            if settings.selector == "map":
                check_mapping(found, {m.person: m.thumbnail for m in settings.people}, target)
            gallery = Gallery(analyser, found.people)
        reference = _reference(settings, analyser, target) if settings.selector == "reference" else None
        tracker = FaceTracker(
            analyser,
            redetect_every=settings.redetect_every,
            fps=fps or 30.0,
            # Appearance keeps crossing faces apart where it matters: whenever the chosen faces follow identities.
            appearance=settings.selector != "many" or gallery is not None,
            embed_new=gallery is not None or settings.selector == "reference",
            # dlib's HOG scans the whole frame (twice enlarged, for 40 px faces): a scheduled re-detection runs
            # on a downscaled copy where the faces are large. SCRFD already detects on a fixed 640 px canvas.
            coarse=settings.analyser == "embedded",
        )
        return cls(settings, analyser, source, reference, tracker, gallery, cast, found)

    def people_record(self) -> list[dict[str, Any]] | None:
        """The target's people as the run numbered them, for the sidecar (None where people are not grouped): each
        person's number, thumbnail hash and sampled frames seen, and the job's sources mapped to them (positions;
        none: left as they are). No path."""
        if self.scan is None:
            return None
        mapped = {entry.person: list(entry.sources) for entry in self.settings.people}
        return [
            {
                "person": p.number,
                "thumbnail": p.thumbnail_hash,
                "frames_seen": len(p.frames),
                "sources": mapped.get(p.number, []),
            }
            for p in self.scan.people
        ]

    def restart(self) -> None:
        """Start over as on a video's first frame: no track, no face chosen yet (the analyser, the sources and the
        people stay)."""
        self.tracker.reset()
        self._decided.clear()
        self._chosen = None
        if self.gallery is not None:
            self.gallery.restart()

    @property
    def threshold(self) -> float:
        return self.settings.reference_distance or self.analyser.threshold

    def annotate(self, frames: Iterable[Frame]) -> Iterator[tuple[Frame, tuple[Face, ...]]]:
        """Each frame (in video order) with the faces the processors should work on, in order.

        A face the tracker could only extrapolate (nothing found it on that frame) is kept only if its track is
        found again within the tracker's `max_gap` frames, and is not hidden behind a face found there: frames
        are held back until that is known, so a face that left the picture is not pasted onto whatever follows,
        nor one passing behind another onto the face in front. Decisions are made per track, not per frame, so
        the chosen face does not flicker between people: `one` keeps following the face it chose while it is
        tracked; `reference` compares each new track's embedding once; `map` takes the faces of the mapped
        people, each numbered by its track's person.
        """
        held: deque[tuple[Frame, dict[int, tuple[Face, str]]]] = deque()
        for frame in frames:
            tracks = self._people(
                {t.track_id: (t.face, FILLED if t.filled else FOUND) for t in self.tracker.update(frame)}
            )
            found = {tid for tid, (_, state) in tracks.items() if state == FOUND}
            for _, earlier in held:
                for tid, (face, state) in list(earlier.items()):
                    if state == FILLED and tid in found:
                        earlier[tid] = (face, CONFIRMED)  # the gap closed: the fill was right
                    elif state == FILLED and tid not in tracks:
                        del earlier[tid]  # the track ended: the fill was a ghost
            held.append((frame, tracks))
            while held and (len(held) > self.tracker.max_gap or all(s != FILLED for _, s in held[0][1].values())):
                yield self._emit(*held.popleft())
        while held:
            yield self._emit(*held.popleft())

    def label_people(self, frame: Frame, faces: Sequence[Face], known: Sequence[Face] = ()) -> tuple[Face, ...]:
        """`faces` of `frame` with the person each one is (`Gallery.nearest`) when this stage groups faces into
        people, else as given: what a preview labels them with. A face without an embedding takes that of the face
        of `known` (faces this stage already embedded on the frame) with the same box, else is embedded now."""
        if self.gallery is None or not faces:
            return tuple(faces)
        boxes = {f.box: f.embedding for f in known if f.embedding is not None}
        faces = [
            f if f.embedding is not None or f.box not in boxes else replace(f, embedding=boxes[f.box]) for f in faces
        ]
        embedded = iter(self.analyser.embed(frame, [f for f in faces if f.embedding is None]))
        faces = [f if f.embedding is not None else next(embedded) for f in faces]
        numbers = self.gallery.nearest([f.embedding for f in faces])
        return tuple(replace(f, person=n) for f, n in zip(faces, numbers, strict=True))

    def _people(self, tracks: dict[int, tuple[Face, str]]) -> dict[int, tuple[Face, str]]:
        """The tracks' faces with their person numbers (when people are grouped)."""
        if self.gallery is None:
            return tracks
        numbers = self.gallery.assign({tid: face.embedding for tid, (face, _) in tracks.items()})
        self.gallery.release(list(tracks))
        return {tid: (replace(face, person=numbers.get(tid)), state) for tid, (face, state) in tracks.items()}

    def _emit(self, frame: Frame, tracks: dict[int, tuple[Face, str]]) -> tuple[Frame, tuple[Face, ...]]:
        seen = {tid: face for tid, (face, state) in tracks.items() if state == FOUND}
        # A confirmed fill hidden behind a face found on that frame (faces crossing) is not there to process.
        for tid, (face, state) in tracks.items():
            if state == CONFIRMED and not any(_covered(face, other) for other in seen.values()):
                seen[tid] = face
        chosen = self._choose(frame, seen)
        metrics.record_faces(len(chosen))
        return frame, chosen

    def _choose(self, frame: Frame, tracks: dict[int, Face]) -> tuple[Face, ...]:
        if not tracks:
            return ()
        if self.settings.selector == "many":
            return tuple(select(list(tracks.values()), selector="many", order=self.settings.order))
        if self.settings.selector == "map":
            mapped = [f for f in tracks.values() if f.person is not None and f.person in self.cast]
            return tuple(order_faces(mapped, self.settings.order))
        if self.settings.selector == "one":
            if self._chosen not in tracks:
                first = order_faces(list(tracks.values()), self.settings.order)[0]
                self._chosen = next(tid for tid, f in tracks.items() if f is first)
            return (tracks[self._chosen],)
        undecided = [tid for tid in tracks if tid not in self._decided]
        if undecided:
            unknown = [tracks[t] for t in undecided if tracks[t].embedding is None]
            embedded = iter(self.analyser.embed(frame, unknown))
            faces = [tracks[t] if tracks[t].embedding is not None else next(embedded) for t in undecided]
            chosen_ids = {
                id(f)
                for f in select(
                    faces,
                    selector="reference",
                    reference=self.reference,
                    reference_distance=self.threshold,
                    analyser=self.analyser,
                )
            }
            for tid, face in zip(undecided, faces, strict=True):
                self._decided[tid] = id(face) in chosen_ids
        chosen = [f for tid, f in tracks.items() if self._decided[tid]]
        return tuple(order_faces(chosen, self.settings.order))


# A tracked face's state on one frame: found there, filled (predicted; not yet known to be right), or a fill
# confirmed by the track being found again.
FOUND, FILLED, CONFIRMED = "found", "filled", "confirmed"
# A predicted face whose box lies this much inside another face's box is hidden behind it.
HIDDEN = 0.5


def _covered(face: Face, other: Face) -> bool:
    """Whether more than HIDDEN of `face`'s box lies inside `other`'s."""
    inter = area(
        (
            max(face.box[0], other.box[0]),
            max(face.box[1], other.box[1]),
            min(face.box[2], other.box[2]),
            min(face.box[3], other.box[3]),
        )
    )
    return inter > HIDDEN * max(area(face.box), 1e-6)


def scan_target(
    settings: FacesSettings, runtime: Runtime, analyser: FaceAnalyser, target: Path, turn: TakeTurn = nullcontext
) -> Scan:
    """The people of `target` as `faces scan` finds them with these settings (kept per process: a run, its
    previews and the studio's people panel share one scan). `turn`: what the runtime's and the analyser's use runs
    in (see `people.scan`); the default, nothing, is for a caller that holds the model lock."""
    with turn():
        cache = runtime.warm(("faces_scans",), ScanCache)
    key = scan_key(target, settings.analyser, settings.detector, settings.scan_every)
    return cache.get(key, lambda: scan(analyser, target, settings.scan_every, turn))


def _cast(settings: FacesSettings, analyser: FaceAnalyser, sources: Sequence[Path]) -> dict[int, SourceIdentity]:
    """Each mapped person's source identity, from the job's sources the mapping names by position."""
    if not settings.people:
        raise InvalidInput(
            "faces.selector=map needs a source for at least one person: run --map N=IMAGE (the people: "
            "`launch.py faces scan --target FILE`)"
        )
    cast = {}
    for entry in settings.people:
        missing = [i for i in entry.sources if i >= len(sources)]
        if missing:
            raise InvalidInput(
                f"faces.people: person {entry.person} takes source {missing[0]}, but the job has "
                f"{len(sources)} source image{'s' if len(sources) != 1 else ''}"
            )
        cast[entry.person] = load_sources(analyser, [sources[i] for i in entry.sources], settings.source_face)
    return cast


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
