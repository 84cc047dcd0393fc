"""The provenance of one run, as the pipeline drives it: `begin` before any output work, `Seal.describe` into the
sidecar, then `Seal.seal` on the finished file just before it is renamed to the output path, with the sidecar's
sha256 in the signed assertion, so `verify` can tell an edited sidecar from the one written (the watermark goes
into frames where they are written: `watermark.marker(job.video.watermark)`).

The key is checked and the content check run in `begin`, so a bad key or a refused target stops the job before
a frame is processed; the inputs are hashed there too (they are the ingredients of the credentials).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import media as video
from engine.job.processor import FrameProcessor
from engine.job.settings import Job
from engine.models.fetch import sha256_file
from engine.models.runtime import Runtime
from engine.provenance import content, credentials, keys

log = logging.getLogger(__name__)


@dataclass
class Seal:
    """What one run signs its output with. `signed`: what `seal` did (None until it ran)."""

    job: Job
    chain: Sequence[FrameProcessor]
    version: str
    key: keys.SigningKey
    ingredients: tuple[credentials.Ingredient, ...]
    content: content.ContentCheck | None
    signed: dict[str, Any] | None = field(default=None)

    def plan(self) -> dict[str, Any]:
        """What `seal` will do, decided before it does it (the sidecar records it, and the signature covers the
        sidecar): sign, and when; or why the output cannot carry credentials."""
        if self.signed is None:
            output = self.job.output
            if not credentials.supports(output):
                reason = f"{output.suffix} files cannot carry C2PA Content Credentials"
                self.signed = {"signed": False, "reason": reason}
            else:
                self.signed = {
                    "signed": True,
                    "standard": "C2PA",
                    "signer": self.key.subject,
                    "key": "user" if self.key.origin == "user" else "this installation (self-issued)",
                    "when": datetime.now(UTC).isoformat(timespec="seconds"),
                }
        return self.signed

    def seal(self, path: Path, sidecar: str | None = None) -> None:
        """Sign the finished output file at `path` (its temp name; the extension is the output's) in place, as
        `plan` says; `sidecar`: the text of the sidecar written beside it, whose sha256 the assertion records.
        Raises credentials.SigningFailed; a format C2PA cannot carry is left unsigned (said in `describe`)."""
        signed = self.plan()
        if not signed["signed"]:
            log.warning("%s cannot carry Content Credentials: written without them", self.job.output.suffix)
            return
        assertion = self._assertion()
        if sidecar is not None:
            assertion["sidecar_sha256"] = sidecar_digest(sidecar)
        definition = credentials.manifest(
            self.job.output.name, self.version, list(self.job.processors), self.ingredients, signed["when"], assertion
        )
        credentials.sign(path, definition, self.key)

    def describe(self) -> dict[str, Any]:
        """The sidecar's `provenance` record (what the seal will do: `plan`)."""
        self.plan()
        return {
            "credentials": self.signed,
            "ingredients": [{"title": i.title, "sha256": i.sha256} for i in self.ingredients],
            "watermark": self.job.video.watermark,
            "content_check": None if self.content is None else self.content.describe(),
        }

    def notes(self) -> list[str]:
        """Lines for the run's summary: the content check's findings, an output left unsigned."""
        out = [] if self.content is None else [self.content.summary()]
        if self.signed is not None and not self.signed["signed"]:
            out.append(f"credentials: none: {self.signed['reason']} (use .png/.jpg/.webp/.tif or .mp4/.mov)")
        return out

    def _assertion(self) -> dict[str, Any]:
        return {
            "synthetic": True,
            "generator": f"facestudio {self.version}",
            "processors": {p.id: p.describe() for p in self.chain},
            "watermark": self.job.video.watermark,
            "content_check": None if self.content is None else self.content.describe(),
        }


def sidecar_digest(text: str) -> str:
    """sha256 (hex) of a sidecar's text as written (UTF-8): what the signed assertion records of it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def begin(
    job: Job,
    chain: Sequence[FrameProcessor],
    runtime: Runtime,
    info: video.MediaInfo,
    span: video.Span,
    version: str,
    key: keys.SigningKey | None = None,
) -> Seal:
    """Everything a run's provenance needs before its first frame: the signing key (`key`, else
    `keys.resolve()`), checked by a trial signature; the content check of the target (ContentRefused,
    ModelUnavailable); the sha256 of the target and sources."""
    key = key or keys.resolve()
    credentials.check_key(key)
    checked = content.check(job, runtime, info, span)
    ingredients = (
        _ingredient("target", job.target, "parentOf"),
        *(_ingredient(f"source {i}", p, "inputTo") for i, p in enumerate(job.sources, 1)),
    )
    return Seal(job, chain, version, key, ingredients, checked)


def _ingredient(title: str, path: Path, relationship: str) -> credentials.Ingredient:
    return credentials.Ingredient(title, credentials.FORMATS.get(path.suffix.lower()), sha256_file(path), relationship)
