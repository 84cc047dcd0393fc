"""Job validation: the one choke point every job passes before any frame is read (ARCHITECTURE.md §11).

`validate` probes the target and every source, and refuses, with one typed, actionable line, anything the run
would otherwise fail on half-way or get silently wrong: files that are not usable media (via `media.probe`),
animated images given as a still, HDR video, frames above the size cap or beyond what the output's format or
encoder can store, outputs that would overwrite an input or an existing file, cannot be written, whose name (or
their sidecar's) the file system would refuse, or cannot hold the target's kind of media, spans without frames,
and a missing video encoder. `pipeline.run` calls it first; nothing else in the engine re-checks these.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine import media
from engine.core.errors import InvalidInput, InvalidJob
from engine.job.processor import FrameProcessor
from engine.job.settings import Job
from engine.media import commands as cmd
from engine.media.images import size_limit
from engine.run.outputs import check_names

# Image formats that can carry the synthetic-media tags; a BMP target is written as PNG.
TAGGABLE_IMAGE_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "TIFF"})
# Transfer characteristics (ffmpeg names) of HDR video. Frames are decoded to 8-bit RGB as if they were SDR, so
# an HDR target would come out with washed-out, wrong colours: it is refused with the conversion to run instead.
HDR_TRANSFERS = {"smpte2084": "HDR10 (PQ)", "arib-std-b67": "HLG"}
_TONEMAP = (
    "ffmpeg -i IN -vf zscale=t=linear:npl=100,format=gbrpf32le,zscale=p=bt709,tonemap=hable,"
    "zscale=t=bt709:m=bt709:r=tv,format=yuv420p OUT.mp4"
)


@dataclass(frozen=True)
class Checked:
    """What validation established about a job: the probed target, the span of it to read (the whole image for
    an image), the size in pixels (width, height) of the frames the chain will return, the job to run (`job`:
    `video.encoder=auto` resolved to the encoder it stands for here) and what the run's summary should say about
    such choices (`notes`)."""

    info: media.MediaInfo
    span: media.Span
    output_size: tuple[int, int]
    job: Job
    notes: tuple[str, ...] = ()


def validate(job: Job, chain: Sequence[FrameProcessor], *, overwrite: bool = False) -> Checked:
    """Check every input and the output of `job` before any work; raises InvalidInput (or a subclass such as
    TruncatedInput) with a one-line message naming the file and what to do.

    overwrite: accept an existing file at `job.output`, which the run replaces (never when it is an input).
    """
    info = media.probe(job.target)
    for source in job.sources:
        _check_still_image(source, "source face image")
    if job.faces.reference_image is not None:
        _check_still_image(job.faces.reference_image, "faces.reference_image")
    _check_target(job, info)
    _check_chain_kind(chain, info)
    size = output_size(chain, info.width, info.height)
    _check_pixels(job, size, "the output would be", "lower the upscale factor")
    _check_output(job, chain, info, overwrite)
    gif = job.output.suffix.lower() == cmd.GIF_SUFFIX
    notes: tuple[str, ...] = ()
    if info.kind == "video" and not gif:
        encoder, note = media.choose_encoder(job.video.encoder, size[0] + size[0] % 2, size[1] + size[1] % 2)
        notes = (note,) if note else ()
        job = job.model_copy(update={"video": job.video.model_copy(update={"encoder": encoder})})
        cmd.check_container(job.output, encoder)
    _check_format_limits(job, info, size)
    span = media.select(info, job.video.trim_start, job.video.trim_end, job.video.fps)
    if info.kind == "video":
        media.check_encoder(cmd.INTERMEDIATE_ENCODER if gif else job.video.encoder)
    return Checked(info, span, size, job, notes)


def output_size(chain: Sequence[FrameProcessor], width: int, height: int) -> tuple[int, int]:
    """(width, height) in pixels of the frames `chain` returns for input frames of width × height."""
    for processor in chain:
        width, height = processor.output_size(width, height)
    return width, height


def image_output_format(target_format: str) -> str:
    """The Pillow format an image output must have: the target's, or PNG for a format that cannot carry tags."""
    return target_format if target_format in TAGGABLE_IMAGE_FORMATS else "PNG"


def _check_still_image(path: Path, role: str) -> None:
    info = media.probe(path)
    if info.kind != "image":
        raise InvalidInput(f"the {role} {path} is a video: give a still image (PNG, JPEG, WebP, BMP or TIFF)")


def _check_chain_kind(chain: Sequence[FrameProcessor], info: media.MediaInfo) -> None:
    if info.kind != "image":
        return
    for processor in chain:
        if processor.needs_video:
            raise InvalidJob(f"{processor.id} needs a video target; {info.path.name} is a still image")


def _check_target(job: Job, info: media.MediaInfo) -> None:
    path = info.path
    if info.kind == "image":
        frames = media.image_frame_count(path)
        if frames > 1:
            # read_image gives the first frame only: a still output from an animation would lose the rest unasked.
            raise InvalidInput(
                f"{path} is an animated or multi-page {info.format_name} of {frames} frames, and only its first would "
                "be processed: convert it to a video (e.g. MP4) to process every frame, or save one frame as a still"
            )
    elif info.color_transfer in HDR_TRANSFERS:
        raise InvalidInput(
            f"{path} is {HDR_TRANSFERS[info.color_transfer]} HDR video, which would come out with wrong colours "
            f"(processing is 8-bit SDR): tone-map it to SDR first, e.g. {_TONEMAP}"
        )
    _check_pixels(job, (info.width, info.height), f"{path} is", "downscale it first")


def _check_pixels(job: Job, size: tuple[int, int], what: str, remedy: str) -> None:
    width, height = size
    cap = job.runtime.max_pixels
    if width * height > cap:
        raise InvalidInput(
            f"{what} {width}×{height} = {width * height} pixels, above runtime.max_pixels={cap}: "
            f"{remedy}, or raise runtime.max_pixels"
        )


def _check_output(job: Job, chain: Sequence[FrameProcessor], info: media.MediaInfo, overwrite: bool) -> None:
    """Refuse outputs that would overwrite an input or (unless `overwrite`) an existing file, cannot be written
    or named, or cannot hold the target's kind of media (video: an H.264/HEVC container or an animated GIF;
    image: the target's own format, or PNG where the chain makes transparency: a removed background)."""
    out = job.output
    inputs = (job.target, *job.sources, *([job.faces.reference_image] if job.faces.reference_image else []))
    for given in inputs:
        if out.exists() and out.resolve() == given.resolve():
            raise InvalidInput(f"the output {out} is one of the inputs; choose another output path")
    if out.is_dir():
        raise InvalidInput(f"the output {out} is a folder; give a file name such as {out / 'result.mp4'}")
    suffix = out.suffix.lower()
    if info.kind == "video" and suffix not in cmd.VIDEO_SUFFIXES:
        kind = "an animated GIF, which is processed as a video," if info.format_name == "gif" else "a video"
        raise InvalidInput(
            f"the target is {kind} but the output ends in {out.suffix or '(nothing)'}; "
            f"use one of {', '.join(sorted(cmd.VIDEO_SUFFIXES))}"
        )
    if info.kind == "image":
        wanted = image_output_format(info.format_name)
        transparent = media.IMAGE_FORMATS.get(suffix) == "PNG" and any(p.makes_alpha for p in chain)
        if media.IMAGE_FORMATS.get(suffix) != wanted and not transparent:
            endings = ", ".join(s for s, f in media.IMAGE_FORMATS.items() if f == wanted)
            raise InvalidInput(
                f"the target is a {info.format_name} image, so the output must be {wanted} ({endings}); got {out.name}"
            )
    if out.exists() and not overwrite:
        raise InvalidInput(f"the output {out} already exists: choose another output path, or add --overwrite")
    folder = out.parent
    existing = next((p for p in (folder, *folder.parents) if p.exists()), folder)
    try:
        if not existing.is_dir():
            raise NotADirectoryError(existing)
        # Permission bits do not tell (root, read-only mounts, /proc): try what the writer will do.
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError:
        raise InvalidInput(f"cannot write {out}: {existing} is not a writable folder") from None
    check_names(out)


def _check_format_limits(job: Job, info: media.MediaInfo, size: tuple[int, int]) -> None:
    """Refuse an output larger than its format (an image's) or its encoder (a video's) can store."""
    width, height = size
    if info.kind == "image":
        limit = size_limit(image_output_format(info.format_name), width, height, alpha=True)
        if limit is not None:
            raise InvalidInput(
                f"the output would be {width}×{height} pixels, and {limit}: lower the upscale factor, or downscale "
                "the target first"
            )
        return
    gif = job.output.suffix.lower() == cmd.GIF_SUFFIX
    encoder = "gif" if gif else job.video.encoder
    side = cmd.MAX_SIDE[encoder]
    if max(width + width % 2, height + height % 2) > side:
        raise InvalidInput(
            f"the output would be {width}×{height} pixels, and {encoder} encodes at most {side}×{side}: lower the "
            "upscale factor" + ("" if gif or encoder == "libx265" else ", or use video.encoder=libx265")
        )
