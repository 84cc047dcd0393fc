"""Job validation: the one choke point every job passes before any frame is read (ARCHITECTURE.md §11).

`validate` probes the target and every source, and refuses, with one typed, actionable line, anything the run
would otherwise fail on half-way or get silently wrong: files that are not usable media (via `media.probe`),
animated images given as a still, HDR video or a colour matrix that cannot be converted exactly, frames above the
size cap or beyond (or below) what the output's format or encoder can store, transparency the output container
cannot hold, audio its encoder cannot hold, outputs that would overwrite an input or an existing file, cannot be
written, whose name (or their sidecar's) the file system would refuse, or cannot hold the target's kind of media,
spans without frames, and a missing video encoder. It decides everything else the run keeps of the target, with a
note in the summary where it converts or leaves something out: the output's colour, depth, aspect and alpha
(`media.plan_picture`), its audio tracks, subtitles, chapters and tags (`media.plan_streams`), a resolution that
changes mid-way (every frame fitted into the first size), timestamps that repeat or jump back (mended).
`pipeline.run` calls it first; nothing else in the engine re-checks these.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from engine import media
from engine.backends import gpu_visible
from engine.core.errors import InvalidInput, InvalidJob
from engine.job.processor import FrameProcessor
from engine.job.settings import Job
from engine.media import commands as cmd
from engine.media.images import size_limit
from engine.media.picture import check_colour
from engine.run.chain import makes_alpha
from engine.run.outputs import check_names
from engine.run.sidecar import synthetic_metadata

# Encoders whose pixel formats depend on how they were built (8 or 10 bits …): ffmpeg is asked which it takes.
_ASKED_FORMATS = frozenset({"libx264", "libx265", "libvpx-vp9"})
# Image formats that can carry the synthetic-media tags; a BMP target is written as PNG.
TAGGABLE_IMAGE_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "TIFF"})


@dataclass(frozen=True)
class Checked:
    """What validation established about a job: the probed target (with its content id), the span of it to read
    (the whole image for an image), the size in pixels (width, height) of the frames the chain will return, the job
    to run (`job`: `video.encoder=auto` resolved to the encoder it stands for here), for a video how its frames are
    encoded (`picture`) and what it takes from the target besides them (`streams`), and what the run's summary
    should say about such choices (`notes`)."""

    info: media.MediaInfo
    span: media.Span
    output_size: tuple[int, int]
    job: Job
    notes: tuple[str, ...] = ()
    picture: cmd.OutputPicture | None = None
    streams: media.StreamsPlan | None = None


def validate(job: Job, chain: Sequence[FrameProcessor], *, overwrite: bool = False) -> Checked:
    """Check every input and the output of `job` before any work; raises InvalidInput (or a subclass such as
    TruncatedInput) with a one-line message naming the file and what to do.

    overwrite: accept an existing file at `job.output`, which the run replaces (never when it is an input).
    """
    likely = _likely_encoder(job)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="facestudio-validate") as pool:
        # ffmpeg lists the pixel formats of the encoder the job most likely takes while the target is probed: two
        # children, each mostly start-up, side by side; an encoder the job turns out to take instead is asked after.
        formats = {likely: pool.submit(media.encoder_pixel_formats, likely)} if likely else {}
        return _validate(job, chain, overwrite, formats)


def _likely_encoder(job: Job) -> str | None:
    """The encoder whose pixel formats `_encoding` asks ffmpeg for that `job` most likely takes, as far as is known
    before its target is probed: the one it names, or what `auto` takes without a GPU (VP9 in WebM, else libx264);
    None for the others (they are not asked)."""
    encoder = job.video.encoder
    if encoder == "auto" and job.output.suffix.lower() != cmd.GIF_SUFFIX and not gpu_visible():
        encoder = "libvpx-vp9" if job.output.suffix.lower() == ".webm" else cmd.AUTO_SOFTWARE
    return encoder if encoder in _ASKED_FORMATS else None


def _validate(
    job: Job, chain: Sequence[FrameProcessor], overwrite: bool, formats: Mapping[str, Future[frozenset[str]]]
) -> Checked:
    """`validate`, with the pixel formats of the encoders `formats` holds being listed already."""
    info = media.probe(job.target, identify=True)
    for source in job.sources:
        _check_still_image(source, "source face image")
    if job.faces.reference_image is not None:
        _check_still_image(job.faces.reference_image, "faces.reference_image")
    _check_target(job, info)
    _check_chain_kind(chain, info)
    size = output_size(chain, info.width, info.height)
    _check_pixels(job, size, "the output would be", "lower the upscale factor")
    _check_output(job, chain, info, overwrite)
    span = media.select(info, job.video.trim_start, job.video.trim_end, job.video.fps)
    if info.kind == "image":
        _check_format_limits(job, info, size, None)
        return Checked(info, span, size, job)
    job, picture, note = _encoding(job, info, size, makes_alpha(chain, job), formats)
    _check_format_limits(job, info, size, picture)
    source = media.source_for(info, span)
    video = job.video
    streams = media.plan_streams(info, _muxer(job), synthetic_metadata(job), keep_audio=video.keep_audio,
                                 keep_metadata=video.keep_metadata, cut=source.cut)  # fmt: skip
    media.check_encoder(picture.encoder)
    notes = [*([note] if note else []), *picture.notes, *streams.notes, *_shape_notes(info)]
    return Checked(info, span, size, job, tuple(notes), picture, streams)


def _muxer(job: Job) -> str:
    return "gif" if job.output.suffix.lower() == cmd.GIF_SUFFIX else cmd.muxer_for(job.output)


def _encoding(
    job: Job,
    info: media.MediaInfo,
    size: tuple[int, int],
    made_alpha: bool,
    asked: Mapping[str, Future[frozenset[str]]],
) -> tuple[Job, cmd.OutputPicture, str | None]:
    """The job with `video.encoder=auto` resolved, how its frames are encoded, and the note on the encoder
    `auto` took (None when it took the GPU's or was not asked). made_alpha: the chain makes the frames
    transparent and the output holds it (`chain.makes_alpha`). asked: encoders whose pixel formats are being
    listed already."""
    muxer = _muxer(job)
    alpha = (info.picture.alpha and job.video.alpha == "keep") or made_alpha
    encoder, note = cmd.INTERMEDIATE_ENCODER, None
    if muxer != "gif":
        even = (size[0] + size[0] % 2, size[1] + size[1] % 2)
        encoder, note = media.choose_encoder(job.video.encoder, *even, muxer=muxer, depth=info.picture.depth,
                                             alpha=alpha)  # fmt: skip
        job = job.model_copy(update={"video": job.video.model_copy(update={"encoder": encoder})})
        cmd.check_container(job.output, encoder)
    formats = None
    if encoder in _ASKED_FORMATS:
        formats = asked[encoder].result() if encoder in asked else media.encoder_pixel_formats(encoder)
    picture = media.plan_picture(info, encoder, muxer, alpha=job.video.alpha, formats=formats, made_alpha=made_alpha)
    return job, picture, note


def _shape_notes(info: media.MediaInfo) -> list[str]:
    """Notes on a target whose frame size or timestamps change mid-way (both decided here, before any frame)."""
    notes = []
    sizes = list(dict.fromkeys(info.sizes))
    if len(sizes) > 1:
        listed = ", then ".join(f"{w}×{h}" for w, h in sizes[:4]) + (" …" if len(sizes) > 4 else "")
        notes.append(
            f"size: the target's resolution changes mid-way ({listed}): every frame is fitted into the first size, "
            f"{info.width}×{info.height}, with its aspect kept (black bars)"
        )
    if info.timing_note is not None:
        notes.append(info.timing_note)
    return notes


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
    else:
        check_colour(info)
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


def _check_format_limits(
    job: Job, info: media.MediaInfo, size: tuple[int, int], picture: cmd.OutputPicture | None
) -> None:
    """Refuse an output larger than its format (an image's) or larger or smaller than its encoder (a video's)
    can store."""
    width, height = size
    if info.kind == "image" or picture is None:
        limit = size_limit(image_output_format(info.format_name), width, height, alpha=True)
        if limit is not None:
            raise InvalidInput(
                f"the output would be {width}×{height} pixels, and {limit}: lower the upscale factor, or downscale "
                "the target first"
            )
        return
    gif = job.output.suffix.lower() == cmd.GIF_SUFFIX
    encoder = "gif" if gif else picture.encoder
    rows, columns = picture.pad
    padded = (width + width % 2 * columns, height + height % 2 * rows)
    side = cmd.MAX_SIDE[encoder]
    if max(padded) > side:
        raise InvalidInput(
            f"the output would be {width}×{height} pixels, and {encoder} encodes at most {side}×{side}: lower the "
            "upscale factor" + ("" if gif or encoder in ("libx265", "prores_ks") else ", or use video.encoder=libx265")
        )
    least = cmd.MIN_SIZE.get(encoder)
    if least is not None and (padded[0] < least[0] or padded[1] < least[1]):
        raise InvalidInput(
            f"the output would be {width}×{height} pixels, and {encoder} encodes at least {least[0]}×{least[1]}: use "
            "video.encoder=libx264, or upscale (frame_enhancer) first"
        )
