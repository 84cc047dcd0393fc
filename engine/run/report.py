"""`RunReport`: what a finished run did (the CLI prints it, the UI shows it, the sidecar records it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunReport:
    """What a finished run did. Sizes in pixels, `seconds` wall time of the whole run."""

    output: Path
    sidecar: Path
    kind: str
    frames: int
    input_size: tuple[int, int]
    output_size: tuple[int, int]
    seconds: float
    audio: bool
    batch: int = 1
    processors: dict[str, dict[str, Any]] = field(default_factory=dict)
    faces_processed: int = 0
    frames_without_face: int | None = None
    identity: dict[str, Any] | None = None
    # The target's people (`FaceStage.people_record`) where the run grouped faces into people.
    people: list[dict[str, Any]] | None = None
    # A video's segments: count, segment_frames, reused (indexes finished by an interrupted run) and
    # frames_processed (by this run; the rest were reused); a run whose segments went to a cluster
    # (`engine.serve.cluster`) adds `cluster`: per segment it processed, the worker (host:pid) and the attempts it took.
    segments: dict[str, Any] | None = None
    # The sidecar's `provenance` record (engine.provenance.seal) and the lines it adds to the run's summary.
    provenance: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    # How many audio tracks the output holds (`audio`: any).
    audio_tracks: int = 0
    # Which face of each source photo was taken (`engine.faces.select.SourceChoice` as dicts): faces found, the one
    # used (from the left), the largest, by what; None without sources.
    sources: list[dict[str, Any]] | None = None

    @property
    def fps(self) -> float:
        """Frames this run processed per second of its wall time (a resumed run's reused frames cost nothing)."""
        processed = self.segments["frames_processed"] if self.segments else self.frames
        return processed / self.seconds if self.seconds > 0 else 0.0

    def audio_words(self) -> str:
        """What the output holds of the target's sound, as every summary says it: "no audio", "audio kept", "2 audio
        tracks kept". How each was kept (languages, re-encoded, resampled) is in `notes`."""
        if self.audio_tracks > 1:
            return f"{self.audio_tracks} audio tracks kept"
        return "audio kept" if self.audio else "no audio"

    def providers(self) -> str:
        """Each distinct backend and provider of the chain with the precision its models ran in where that is
        int8, e.g. `onnx (CPUExecutionProvider)`, `onnx (CPUExecutionProvider, int8)`."""
        seen = {
            f"{d['backend']} ({d['provider']}{', int8' if d.get('precision') == 'int8' else ''})"
            for d in self.processors.values()
            if "backend" in d
        }
        return ", ".join(sorted(seen)) or "none"
