"""Identity QA: did each swapped face move from the target's identity to the source's?

After processing, each processed face is found again on the output frame (a cheap landmark re-fit at the same
place) and embedded with the job's recogniser; its distance to the source is compared with the original face's.
A face is flagged when the output is still not recognised as the source (distance ≥ the analyser's threshold).
Where the job maps people to sources (`faces.selector = "map"`), each face is measured against its own person's.

Sampling (`every`, the job's `faces.qa_every`, 5 by default): every 5th frame is measured. A failure lasts: a face
stays mis-fitted until the tracker re-detects it (every 10 frames by default) or the pose that defeats the swap
passes, so a failed stretch of 5 frames or more always contains a sample. When a sample is flagged, the frames
since the previous sample are measured too (they are held until the next sample), and from then on every frame
until one passes again: the frames listed as flagged are the whole stretch, not only its samples.

Embeddings it already has are reused: the original face's where the face stage computed one (the same
recogniser's), else the one it measured itself on an earlier frame for the face in the same place (box IoU ≥ 0.5:
the tracked face), for up to 30 frames (about a second) before it embeds it again: a tracked person's identity
does not change between frames, and an embedding costs as much as the swap. The output face is always embedded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.core.types import Face, Frame
from engine.faces import FaceAnalyser
from engine.faces.boxes import iou

# An original face measured on an earlier frame is the same tracked face when their boxes overlap this much, and
# its embedding is reused for this many frames.
SAME_FACE_IOU = 0.5
REUSE_FRAMES = 30


@dataclass
class IdentityQA:
    """Accumulates per-face distances (the recogniser's metric) over a job; `summary` is what the CLI prints.

    every: measure every Nth frame (and the stretches around flagged ones, see the module docstring); 1: every
    frame; 0: none. Frames must be checked in order of their index."""

    analyser: FaceAnalyser
    source: npt.NDArray[np.float32] | None
    every: int = 1
    records: list[tuple[int, float, float]] = field(default_factory=list)
    # Person number → that person's source embedding (the map selector); a face of another person uses `source`.
    people: Mapping[int, npt.NDArray[np.float32]] = field(default_factory=dict)
    # Frames passed over since the last measured one (index, input, output, faces): measured if the next sample
    # is flagged. At most every − 1 of them.
    _held: deque[tuple[int, Frame, Frame, Sequence[Face]]] = field(default_factory=deque, repr=False)
    _failing: bool = field(default=False, repr=False)
    # The original faces of the last measured frame with their embeddings, and the frame each was embedded on.
    _originals: list[tuple[int, Face]] = field(default_factory=list, repr=False)

    def check(self, index: int, before: Frame, after: Frame, faces: Sequence[Face]) -> None:
        """Measure the faces processed on frame `index` (input `before`, output `after`, same size), or hold the
        frame until the next sample says whether it must be."""
        faces = [f for f in faces if self._source_of(f) is not None]
        if not faces or self.every <= 0 or before.shape != after.shape:
            return
        if not self._failing and index % self.every:
            self._held.append((index, before, after, faces))
            while len(self._held) >= self.every:
                self._held.popleft()
            return
        flagged = self._measure(index, before, after, faces)
        if flagged and not self._failing:
            # The stretch may have started after the last passing sample: measure the frames since, in order.
            for item in self._held:
                self._measure(*item)
        self._held.clear()
        self._failing = flagged

    def _measure(self, index: int, before: Frame, after: Frame, faces: Sequence[Face]) -> bool:
        """Record the distances of `faces` on one frame; whether any output face is flagged."""
        known = [self._known(index, f) for f in faces]
        embedded = iter(self.analyser.embed(before, [f for f, k in zip(faces, known, strict=True) if k is None]))
        originals = [k or (index, next(embedded)) for k in known]
        self._originals = originals
        found = [self.analyser.refit(after, f) or f for f in faces]
        swapped = self.analyser.embed(after, found)
        flagged = False
        for face, (_, orig), out in zip(faces, originals, swapped, strict=True):
            source = self._source_of(face)
            assert orig.embedding is not None and out.embedding is not None and source is not None
            distance = self.analyser.distance(out.embedding, source)
            self.records.append((index, self.analyser.distance(orig.embedding, source), distance))
            flagged |= distance >= self.analyser.threshold
        return flagged

    def _source_of(self, face: Face) -> npt.NDArray[np.float32] | None:
        """The identity `face` should have become: its person's source where people are mapped, else the job's."""
        if face.person is not None and face.person in self.people:
            return self.people[face.person]
        return self.source

    def _known(self, index: int, face: Face) -> tuple[int, Face] | None:
        """An embedding of `face`'s original already at hand (with the frame it was made on), or None."""
        if face.embedding is not None and face.recogniser == self.analyser.recogniser:
            return index, face
        for at, earlier in self._originals:
            if abs(index - at) <= REUSE_FRAMES and iou(face.box, earlier.box) >= SAME_FACE_IOU:
                # Kept with this frame's box, so the face is followed as it moves.
                return at, replace(face, embedding=earlier.embedding, recogniser=earlier.recogniser)
        return None

    def summary(self) -> dict[str, Any]:
        """Distances to the source before and after (mean), the worst output, and the frames flagged."""
        if not self.records:
            return {"recogniser": self.analyser.recogniser, "faces_checked": 0}
        index, before, after = (np.array(c) for c in zip(*self.records, strict=True))
        worst = int(np.argmax(after))
        flagged = sorted({int(i) for i, a in zip(index, after, strict=True) if a >= self.analyser.threshold})
        return {
            "recogniser": self.analyser.recogniser,
            "threshold": self.analyser.threshold,
            "faces_checked": len(self.records),
            "mean_distance_before": round(float(before.mean()), 4),
            "mean_distance_after": round(float(after.mean()), 4),
            "mean_moved_toward_source": round(float((before - after).mean()), 4),
            "worst_distance_after": round(float(after[worst]), 4),
            "worst_frame": int(index[worst]),
            "flagged_frames": flagged,
            "sampled_every": self.every,
        }
