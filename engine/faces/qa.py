"""Identity QA: did each swapped face move from the target's identity to the source's?

After processing, each processed face is found again on the output frame (a cheap landmark re-fit at the same
place) and embedded with the job's recogniser; its distance to the source is compared with the original face's.
A face is flagged when the output is still not recognised as the source (distance ≥ the analyser's threshold).
Where the job maps people to sources (`faces.selector = "map"`), each face is measured against its own person's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.faces import FaceAnalyser
from engine.types import Face, Frame


@dataclass
class IdentityQA:
    """Accumulates per-face distances (the recogniser's metric) over a job; `summary` is what the CLI prints."""

    analyser: FaceAnalyser
    source: npt.NDArray[np.float32] | None
    every: int = 1
    records: list[tuple[int, float, float]] = field(default_factory=list)
    # Person number → that person's source embedding (the map selector); a face of another person uses `source`.
    people: Mapping[int, npt.NDArray[np.float32]] = field(default_factory=dict)

    def check(self, index: int, before: Frame, after: Frame, faces: Sequence[Face]) -> None:
        """Measure the faces processed on frame `index` (input `before`, output `after`, same size)."""
        faces = [f for f in faces if self._source_of(f) is not None]
        if not faces or self.every <= 0 or index % self.every or before.shape != after.shape:
            return
        originals = self.analyser.embed(before, faces)
        found = [self.analyser.refit(after, f) or f for f in faces]
        swapped = self.analyser.embed(after, found)
        for face, orig, out in zip(faces, originals, swapped, strict=True):
            assert orig.embedding is not None and out.embedding is not None
            source = self._source_of(face)
            assert source is not None
            self.records.append(
                (index, self.analyser.distance(orig.embedding, source), self.analyser.distance(out.embedding, source))
            )

    def _source_of(self, face: Face) -> npt.NDArray[np.float32] | None:
        """The identity `face` should have become: its person's source where people are mapped, else the job's."""
        if face.person is not None and face.person in self.people:
            return self.people[face.person]
        return self.source

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
        }
