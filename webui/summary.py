"""What a finished run did, in words: the summary line and the identity check, as Markdown and as JSON."""

from __future__ import annotations

from typing import Any

from engine.run.pipeline import RunReport


def summary(report: RunReport) -> str:
    """The run summary and identity-QA lines, as Markdown: what the report says, as the CLI prints it (the audio
    kept, `RunReport.audio_words`; every note, how tracks were kept or converted among them)."""
    w0, h0 = report.input_size
    w1, h1 = report.output_size
    lines = [
        f"**{report.frames} frame{'s' if report.frames != 1 else ''}** {w0}×{h0} → {w1}×{h1} in "
        f"{report.seconds:.1f} s ({report.fps:.2f} fps) on {report.providers()}; "
        f"{report.audio_words()}."
    ]
    if report.frames_without_face is not None:
        faces, empty = report.faces_processed, report.frames_without_face
        lines.append(f"{_count(faces, 'face')} processed, {_count(empty, 'frame')} without a face.")
        if report.frames_without_face == report.frames:
            lines.append("**No face was found on any frame: the output equals the input.**")
    qa = report.identity
    if qa and qa.get("faces_checked"):
        lines.append(
            f"Identity: distance to the source {qa['mean_distance_before']:.2f} → {qa['mean_distance_after']:.2f} on "
            f"average (same person below {qa['threshold']:g}); {len(qa['flagged_frames'])} of {qa['faces_checked']} "
            "checked faces flagged."
        )
    lines += [f"Note: {note}" for note in report.notes]
    return "\n\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def report_json(report: RunReport) -> dict[str, Any]:
    """The report as the `run` API returns it (no paths)."""
    return {
        "kind": report.kind,
        "frames": report.frames,
        "input_size": list(report.input_size),
        "output_size": list(report.output_size),
        "seconds": round(report.seconds, 3),
        "audio": report.audio,
        "audio_tracks": report.audio_tracks,
        "faces_processed": report.faces_processed,
        "frames_without_face": report.frames_without_face,
        "identity": report.identity,
        "processors": list(report.processors),
    }
