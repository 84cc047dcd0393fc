"""People: the faces of a target grouped into persons, each with a number that holds for the whole target.

Two faces are one person when their embeddings are closer than the analyser's same-person threshold (dlib: 0.6
euclidean; ArcFace: 0.6 cosine distance). `scan` finds the people of a target quickly: it samples frames (every
`every` seconds), detects and embeds their faces and groups them, numbering people 0, 1, … in the order they first
appear (left to right on one frame), with one best picture each (`Person.thumbnail`, and a short hash of it that
a mapping can name to say which face it was made for). It does not track or render.

A run that needs people (the `map` selector, a processor that shows them) starts from its target's scan
(`Gallery`): each new track of the face stage is embedded once and given the number of the scanned person it is
closest to, so the numbers a user saw in `faces scan` (or the studio's people panel) are the numbers the run uses,
in every segment and on every worker; someone who leaves the picture and comes back is the same person again.
A face the scan did not sample gets the next free number (the same one each time it returns).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from engine import media
from engine.core.errors import InvalidInput
from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser
from engine.faces.assignment import assign
from engine.faces.boxes import area
from engine.faces.crops import thumbnail
from engine.faces.select import mean_embedding

log = logging.getLogger(__name__)

THUMBNAIL = 192  # px, the side of a person's picture
# Scans of long videos sample at most this many frames (spread evenly), so a scan stays quick at any length.
MAX_SAMPLES = 600
# Scans kept per process (a UI shows the people of the few targets its users work on).
SCANS_KEPT = 8
HASH_CHARS = 16


@dataclass(frozen=True)
class Person:
    """One person of a target.

    number: 0, 1, … in order of first appearance. embedding: the mean of the person's sampled embeddings, in
    `recogniser`'s space. frames: the sampled frame numbers (0-based, the target's own) they were seen on;
    first/last: the times of the first and last of those, seconds from the target's first frame. thumbnail:
    THUMBNAIL² uint8 RGB, the whole face on the sample where it was found best (largest and most confident);
    frame and box: which sample and where (frame pixels).
    """

    number: int
    embedding: npt.NDArray[np.float32]
    recogniser: str
    frames: tuple[int, ...]
    first: float
    last: float
    thumbnail: Frame
    frame: int
    box: tuple[float, float, float, float]

    @property
    def thumbnail_hash(self) -> str:
        """The first 16 hex digits of the sha256 of the thumbnail's pixels: names this face in a mapping."""
        return picture_hash(self.thumbnail)

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts (no pixels, no embedding)."""
        return {
            "person": self.number,
            "frames_seen": len(self.frames),
            "frames": list(self.frames),
            "first_seconds": round(self.first, 3),
            "last_seconds": round(self.last, 3),
            "best_frame": self.frame,
            "box": [round(v, 1) for v in self.box],
            "thumbnail": self.thumbnail_hash,
        }


def picture_hash(picture: Frame) -> str:
    """16 hex digits of the sha256 of an H×W×3 uint8 picture's shape and pixels."""
    digest = hashlib.sha256(f"{picture.shape}".encode())
    digest.update(np.ascontiguousarray(picture).tobytes())
    return digest.hexdigest()[:HASH_CHARS]


@dataclass(frozen=True)
class Scan:
    """The people of one target. frames: the target's frame count; sampled: the frame numbers looked at;
    recogniser and threshold: the analyser's (embeddings of another recogniser are not comparable)."""

    people: tuple[Person, ...]
    frames: int
    sampled: tuple[int, ...]
    recogniser: str
    threshold: float

    @property
    def numbers(self) -> list[int]:
        return [p.number for p in self.people]

    def person(self, number: int) -> Person | None:
        return next((p for p in self.people if p.number == number), None)

    def who(self) -> str:
        """The people, in words: `people 0, 1 and 2` (or `no one`)."""
        if not self.people:
            return "no one"
        numbers = [str(n) for n in self.numbers]
        listed = numbers[0] if len(numbers) == 1 else f"{', '.join(numbers[:-1])} and {numbers[-1]}"
        return f"{'person' if len(numbers) == 1 else 'people'} {listed}"

    def describe(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "sampled": len(self.sampled),
            "recogniser": self.recogniser,
            "people": [p.describe() for p in self.people],
        }

    def sheet(self, size: int = THUMBNAIL) -> Frame:
        """One picture of everyone: each person's thumbnail (size² px) in a row, their number below it; H×W×3
        uint8 RGB. A scan with no one gives a single grey tile that says so."""
        label = size // 5
        tiles = []
        for person in self.people or (None,):
            tile = np.full((size + label, size, 3), 32, np.uint8)
            text = "no face found" if person is None else f"person {person.number}"
            if person is not None:
                tile[:size] = cv2.resize(person.thumbnail, (size, size), interpolation=cv2.INTER_AREA)
            scale = label / 40
            (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 2)
            origin = ((size - tw) // 2, size + (label + th) // 2)
            cv2.putText(tile, text, origin, cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 2, cv2.LINE_AA)
            tiles.append(tile)
        gap = np.full((size + label, max(2, size // 24), 3), 16, np.uint8)
        row: list[Frame] = []
        for tile in tiles:
            row += [tile, gap]
        return np.ascontiguousarray(np.concatenate(row[:-1], axis=1))


# What model work runs in: a context taken around each piece of it (nothing, or a brief turn of the model lock).
TakeTurn = Callable[[], AbstractContextManager[object]]


def scan(analyser: FaceAnalyser, target: Path, every: float = 1.0, turn: TakeTurn = nullcontext) -> Scan:
    """Find the people of `target` (an image, or a video sampled every `every` seconds from its first frame, at
    most MAX_SAMPLES frames): detect and embed the faces of each sampled frame and group them into people. Each
    sample's detection and embedding run in a `turn()` of their own (the studio's: a brief turn of the model lock,
    so a scan during a run goes between its batches sample by sample); decoding and grouping run outside it.

    Grouping: each sample's faces are matched to the people found so far by one optimal assignment of embedding
    distances (two faces of one frame are never one person), a face farther than the threshold from everyone
    being someone new; then people who never share a frame and whose mean embeddings are within the threshold
    are merged (one person seen from two sides before the means settled). Numbers follow first appearance.
    Raises InvalidInput (from `probe`) for a file that is not an image or video."""
    if not every > 0:
        raise ValueError(f"every must be a positive number of seconds, got {every}")
    info = media.probe(Path(target))
    groups: list[_Group] = []
    sampled: list[int] = []
    for number, (index, seconds, frame) in enumerate(_samples(Path(target), info, every)):
        sampled.append(index)
        with turn():
            faces = analyser.detect(frame)
            embedded = analyser.embed(frame, faces) if faces else []
        if embedded:
            _assign(analyser, groups, number, index, seconds, frame, embedded)
    people = _number(_merged(analyser, groups), analyser.recogniser)
    log.debug("scan of %s: %d people on %d sampled frames", target, len(people), len(sampled))
    return Scan(tuple(people), info.frame_count, tuple(sampled), analyser.recogniser, analyser.threshold)


def _samples(target: Path, info: media.MediaInfo, every: float) -> Iterator[tuple[int, float, Frame]]:
    """(frame number, seconds from the first frame, frame) of each sampled frame, each frame at most once."""
    if info.kind == "image":
        yield 0, 0.0, media.read_image(target)[0]
        return
    duration = float(info.duration)
    every = max(every, duration / MAX_SAMPLES)
    stamps = info.timestamps
    origin = stamps[0]
    if 1.0 / every >= info.fps:
        # As often as the video has frames: every frame, as it comes.
        with media.FrameReader(target, info) as reader:
            for index, frame in enumerate(reader):
                yield index, float((stamps[index] - origin) * info.time_base), frame
        return
    # ffmpeg's fps filter picks the frame on screen at each sample time, so only those cross the pipe.
    span = media.select(info, fps=1.0 / every)
    last = -1
    with media.FrameReader(target, info, span) as reader:
        for slot, frame in enumerate(reader):
            index = max(0, _frame_at(stamps, origin, info.time_base, span.times.seconds(slot)))
            if index != last:
                last = index
                yield index, float((stamps[index] - origin) * info.time_base), frame


def _frame_at(stamps: Sequence[int], origin: int, time_base: Any, seconds: Any) -> int:
    """The number of the frame on screen `seconds` after the first frame."""
    ticks = origin + math.floor(seconds / time_base + 1e-9)
    return bisect.bisect_right(stamps, ticks) - 1


@dataclass
class _Group:
    """A person while scanning: what was seen of them, and their best picture so far."""

    embeddings: list[npt.NDArray[np.float32]]
    samples: list[int]
    frames: list[int]
    times: list[float]
    quality: float
    thumbnail: Frame
    frame: int
    box: tuple[float, float, float, float]
    first_x: float
    centroid: npt.NDArray[np.float32] = field(init=False)

    def __post_init__(self) -> None:
        self.centroid = mean_embedding(self.embeddings)

    def add(self, other: _Group) -> None:
        self.embeddings += other.embeddings
        self.samples += other.samples
        self.frames += other.frames
        self.times += other.times
        if other.quality > self.quality:
            self.quality, self.thumbnail, self.frame, self.box = other.quality, other.thumbnail, other.frame, other.box
        if (other.samples[0], other.first_x) < (self.samples[0], self.first_x):
            self.first_x = other.first_x
        order = np.argsort(self.samples, kind="stable")
        self.samples = [self.samples[i] for i in order]
        self.frames = [self.frames[i] for i in order]
        self.times = [self.times[i] for i in order]
        self.centroid = mean_embedding(self.embeddings)


def _quality(face: Face) -> float:
    """How good a picture of the person a face gives: larger and more confidently detected is better."""
    return math.sqrt(area(face.box)) * max(face.score, 1e-3)


def _observation(sample: int, index: int, seconds: float, frame: Frame, face: Face) -> _Group:
    assert face.embedding is not None
    return _Group(
        [np.asarray(face.embedding, np.float32)], [sample], [index], [seconds], _quality(face),
        thumbnail(frame, face.box, THUMBNAIL), index, tuple(float(v) for v in face.box),  # type: ignore[arg-type]
        (face.box[0] + face.box[2]) / 2,
    )  # fmt: skip


def _assign(
    analyser: FaceAnalyser,
    groups: list[_Group],
    sample: int,
    index: int,
    seconds: float,
    frame: Frame,
    faces: Sequence[Face],
) -> None:
    """Add one sample's embedded faces to the people found so far (see `scan`)."""
    matches = match(analyser, [f.embedding for f in faces], [g.centroid for g in groups])
    for i, face in enumerate(faces):
        seen = _observation(sample, index, seconds, frame, face)
        if i in matches:
            groups[matches[i]].add(seen)
        else:
            groups.append(seen)


def match(analyser: FaceAnalyser, embeddings: Sequence[Any], known: Sequence[npt.ArrayLike | None]) -> dict[int, int]:
    """One optimal assignment (Hungarian) of `embeddings` (faces seen together) to `known` identities, each at most
    once, by the analyser's distance; a pair at or beyond its same-person threshold is never matched (None in
    `known`: not available). Returns face index → known index for the faces matched."""
    if not len(embeddings) or not len(known):
        return {}
    cost = np.full((len(embeddings), len(known)), np.inf)
    for i, e in enumerate(embeddings):
        for j, k in enumerate(known):
            if e is not None and k is not None:
                distance = analyser.distance(np.asarray(e), np.asarray(k))
                if distance < analyser.threshold:
                    cost[i, j] = distance
    return dict(assign(cost))


def _merged(analyser: FaceAnalyser, groups: list[_Group]) -> list[_Group]:
    """Merge, closest first, groups that never share a sample and whose means are within the threshold."""
    groups = list(groups)
    while True:
        best: tuple[float, int, int] | None = None
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if set(groups[a].samples) & set(groups[b].samples):
                    continue
                distance = analyser.distance(groups[a].centroid, groups[b].centroid)
                if distance < analyser.threshold and (best is None or distance < best[0]):
                    best = (distance, a, b)
        if best is None:
            return groups
        _, a, b = best
        groups[a].add(groups.pop(b))


def _number(groups: Sequence[_Group], recogniser: str) -> list[Person]:
    ordered = sorted(groups, key=lambda g: (g.samples[0], g.first_x))
    return [
        Person(n, g.centroid, recogniser, tuple(g.frames), g.times[0], g.times[-1], g.thumbnail, g.frame, g.box)
        for n, g in enumerate(ordered)
    ]


def scan_key(target: Path, analyser_id: str, detector: str, every: float) -> tuple[Any, ...]:
    """What identifies a scan: the target's content (path, size, modification time) and how it was scanned."""
    stat = Path(target).stat()
    return (str(Path(target).resolve()), stat.st_size, stat.st_mtime_ns, analyser_id, detector, every)


class ScanCache:
    """The last SCANS_KEPT scans of a process, by `scan_key`: a run, its previews and the studio's people panel
    share one scan of a target. Thread-safe."""

    def __init__(self, kept: int = SCANS_KEPT) -> None:
        self._kept = kept
        self._scans: OrderedDict[tuple[Any, ...], Scan] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...], make: Any) -> Scan:
        with self._lock:
            kept = self._scans.get(key)
            if kept is not None:
                self._scans.move_to_end(key)
                return kept
        made = make()
        with self._lock:
            self._scans[key] = made
            while len(self._scans) > self._kept:
                self._scans.popitem(last=False)
        return made


class Gallery:
    """Person numbers for the tracks of a run, starting from its target's scan (see the module docstring).

    `assign` gives each track not yet numbered (its embedding known) the nearest known person no other live
    track holds, within the threshold, else a new number; `release` forgets tracks that ended. `restart` (a new
    segment) forgets every track but keeps the people."""

    def __init__(self, analyser: FaceAnalyser, people: Sequence[Person] = ()) -> None:
        self.analyser = analyser
        self._people: dict[int, npt.NDArray[np.float32]] = {p.number: p.embedding for p in people}
        self._next = max(self._people, default=-1) + 1
        self._held: dict[int, int] = {}

    def restart(self) -> None:
        self._held.clear()

    def assign(self, tracks: Mapping[int, npt.ArrayLike | None]) -> dict[int, int]:
        """track id → person number for `tracks` (id → the track's embedding) that have one; tracks not seen
        before are numbered now (those without an embedding yet are left out until they have one)."""
        new = [t for t, e in tracks.items() if t not in self._held and e is not None]
        if new:
            held = set(self._held.values())
            free = [n for n in self._people if n not in held]
            matches = match(self.analyser, [tracks[t] for t in new], [self._people[n] for n in free])
            for i, track_id in enumerate(new):
                if i in matches:
                    self._held[track_id] = free[matches[i]]
                else:
                    self._held[track_id] = self._next
                    self._people[self._next] = np.asarray(tracks[track_id], np.float32)
                    self._next += 1
                    log.debug("track %d: a person the scan did not see, now person %d", track_id, self._held[track_id])
        return {t: self._held[t] for t in tracks if t in self._held}

    def nearest(self, embeddings: Sequence[npt.ArrayLike | None]) -> list[int | None]:
        """The person each of a frame's faces (their embeddings) is: one optimal assignment to the people known,
        each at most once, within the threshold; None for a face that is no one known (or has no embedding).
        Numbers no one and holds no track: what a single frame (a preview) shows."""
        numbers = list(self._people)
        matches = match(self.analyser, embeddings, [self._people[n] for n in numbers])
        return [numbers[matches[i]] if i in matches else None for i in range(len(embeddings))]

    def release(self, alive: Sequence[int]) -> None:
        """Forget the tracks not in `alive` (their person may be taken by a later track)."""
        keep = set(alive)
        for track_id in [t for t in self._held if t not in keep]:
            del self._held[track_id]


def check_mapping(scan_result: Scan, mapping: Mapping[int, str | None], target: Path) -> None:
    """Refuse a mapping that names a person `scan_result` does not have, or names one by a thumbnail hash that is
    not theirs (the target or the face settings changed since the mapping was made). One-line InvalidInput."""
    name = Path(target).name
    hint = f"`launch.py faces scan --target {name}` shows them"
    for number, expected in sorted(mapping.items()):
        person = scan_result.person(number)
        if person is None:
            raise InvalidInput(f"the mapping names person {number}, but {name} has {scan_result.who()} ({hint})")
        if expected is not None and expected != person.thumbnail_hash:
            raise InvalidInput(
                f"person {number} of {name} is not the face the mapping was made for (thumbnail {expected}, now "
                f"{person.thumbnail_hash}): the target or faces settings changed; map the people again ({hint})"
            )
