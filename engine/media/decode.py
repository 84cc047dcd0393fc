"""`FrameReader`: the frames of a video (or of a `Span` of it), decoded by an ffmpeg child into a rawvideo pipe;
on the GPU (NVDEC) where it takes the stream and works here.

Raw frames carry no timestamps, and need none: ffmpeg passes each frame through once, in presentation order, so
frame k of a span is shown at `span.times.seconds(k)`, which `probe` read exactly from the packets. The count is
checked at the end, so a frame lost on the way is an error, never a silent shift.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np

from engine.backends import gpu_visible
from engine.core.errors import TruncatedInput
from engine.core.types import Frame
from engine.media import children
from engine.media import commands as cmd
from engine.media.images import read_image
from engine.media.info import MediaInfo
from engine.media.picture import decoding as colour_decoding
from engine.media.probe import probe
from engine.media.timing import FrameTimes, Span, select, skip_frames
from engine.media.tools import ffmpeg_version, find_ffmpeg, hwaccel_works

logger = logging.getLogger(__name__)


class FrameReader:
    """The frames of a video (or the single frame of an image), streamed through an ffmpeg pipe.

    Use as a context manager and iterate once:

        with FrameReader(path) as reader:
            for frame in reader:   # Frame: info.height × info.width × 3 uint8 RGB, upright
                ...

    Frames come in presentation order, rotated upright as the container's display matrix asks. Without a span,
    every frame comes once (variable frame rates are passed through, not resampled); with one, the frames of
    the span, resampled to its rate when `span.resample` says so. After the last frame, if fewer frames were
    decoded than the span holds (`span.minimum`; the whole video: `info.frame_count`), or ffmpeg reported errors
    while decoding (a cut or damaged file), the iteration raises TruncatedInput naming both counts. A file with
    packets that are not frames (`info.hidden`: the leading pictures of an open-GOP cut, whose references the
    cut removed) makes the decoder complain about those pictures; there, errors count only if a frame is
    missing. Leaving the `with` block, breaking out of the loop or an exception stops and reaps the ffmpeg child.
    """

    def __init__(
        self,
        path: Path,
        info: MediaInfo | None = None,
        span: Span | None = None,
        skip: int = 0,
        hwaccel: bool | None = None,
        alpha: bool = False,
        convert: str | None = None,
    ) -> None:
        """path: the video or image; info: its `probe` result when the caller already has it (else probed here);
        span: the part to read and its rate, from `select(info, …)` (None: the whole video; images ignore it);
        skip: leave out the span's first `skip` output frames (a resumed job's finished segments). A span that is
        not resampled starts decoding at frame `skip` (ffmpeg still decodes the frames before it, but they cost no
        conversion, pipe or processing); a resampled one is read from its start and the frames are dropped here,
        since which frame fills a slot depends on the frames before it.
        hwaccel: decode on the GPU (NVDEC); None (auto): where `cmd.nvdec_allows` the stream, an NVIDIA GPU is
        visible and ffmpeg's CUDA device works here (`tools.hwaccel_works`). The frames are the same either way.
        alpha: give each frame's alpha plane instead (H×W uint8, 255 = opaque; `info.picture.alpha` says whether
        there is one), the same frames as the RGB reader of the same span and skip.
        convert: a colour conversion filter to apply first (`picture.gif_conversion`).

        Every frame comes out at the probed size: the file's colour matrix and range convert it to RGB (for a file
        that names none, the one players assume for its size), and a frame of another size (a resolution that
        changes mid-way) is scaled to it, letterboxed with its aspect kept where probe found the change
        (`info.sizes`)."""
        self.path = Path(path)
        self._ffmpeg = find_ffmpeg()
        self.info = info if info is not None else probe(self.path, self._ffmpeg)
        self.alpha = alpha
        self.convert = convert
        # libvpx decodes a VP9 stream's alpha, which NVDEC (and ffmpeg's own VP9 decoder) leave out.
        nvdec = self.info.picture.alpha_decoder is None or not alpha
        self.hwaccel = (use_nvdec(self.info, self._ffmpeg) and nvdec) if hwaccel is None else hwaccel
        self.span = span if span is not None else select(self.info)
        if not 0 <= skip < self.span.frames:
            raise ValueError(f"skip must be in 0–{self.span.frames - 1} (frames of the span), got {skip}")
        self._drop = 0
        if skip and self.span.resample:
            self._drop = skip
        elif skip:
            self.span = skip_frames(self.info, self.span, skip)
        self._iterated = False
        self._closed = False
        self._process: subprocess.Popen[bytes] | None = None
        self._drain: children.Stderr | None = None

    def __enter__(self) -> FrameReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Frame]:
        if self._iterated:
            raise RuntimeError("a FrameReader can be iterated only once; open a new one")
        self._iterated = True
        if self.info.kind == "image":
            return iter([read_image(self.path)[0]])
        return self._frames()

    def start(self) -> FrameReader:
        """Start ffmpeg now, not at the first frame asked for: its start-up (loading its libraries, opening the
        file, decoding the first frame) then overlaps the caller's other work. Returns self; a no-op for an image,
        or once started, iterated or closed."""
        if self.info.kind == "video" and self._process is None and not (self._iterated or self._closed):
            self._spawn()
        return self

    def close(self) -> None:
        """Stop the ffmpeg child if it is still running and wait for it. Safe to call more than once, and from
        another thread than the one iterating (that iteration then ends quietly)."""
        self._closed = True
        if self._process is not None and self._drain is not None:
            children.stop(self._process, self._drain)
        self._process = None

    def _spawn(self) -> None:
        span = self.span
        # A span that ends before the video does stops ffmpeg at its last frame. A resampled one is not cut at
        # its end time but by count, so the frames after the end keep the fps filter filling its last slots.
        args = cmd.decode_args(
            self._ffmpeg, self.path, span.start_pts,
            end_pts=None if span.resample else span.end_pts,
            fps_rational=span.fps_rational if span.resample else None,
            max_frames=None if span.end_pts is None else span.frames,
            major=(ffmpeg_version(self._ffmpeg) or (99, 0))[0],
            hwaccel=self.hwaccel,
            how=decoding(self.info, alpha=self.alpha, convert=self.convert),
        )  # fmt: skip
        self._process, self._drain = children.start(args, subprocess.DEVNULL, subprocess.PIPE)

    def _frames(self) -> Iterator[Frame]:
        width, height = self.info.width, self.info.height
        frame_bytes = width * height * (1 if self.alpha else 3)
        if self._process is None:
            self._spawn()
        process, drain = self._process, self._drain
        assert process is not None and drain is not None and process.stdout is not None
        decoded = 0
        partial = False
        try:
            while True:
                buffer = bytearray(frame_bytes)  # a fresh, writable buffer per frame: callers may keep frames
                try:
                    got = _read_exactly(process.stdout, buffer)
                except ValueError:  # the pipe was closed by `close` on another thread: stop, nothing is wrong
                    if self._closed:
                        return
                    raise
                if got < frame_bytes:
                    partial = got > 0
                    break
                decoded += 1
                if decoded > self._drop:
                    shape = (height, width) if self.alpha else (height, width, 3)
                    yield np.frombuffer(buffer, dtype=np.uint8).reshape(shape)
            returncode = process.wait()
            drain.join()
            self._check(decoded, partial, returncode, self._first_error(drain))
        finally:
            self.close()

    def _first_error(self, drain: children.Stderr) -> str | None:
        """ffmpeg's first error line, leaving out NVDEC's saying it cannot take the stream after all (ffmpeg then
        decodes it on the CPU: the frames are all there, and counted)."""
        lines = drain.lines
        if self.hwaccel:
            fallback = [line for line in lines if cmd.NVDEC_FALLBACK.search(line)]
            if fallback:
                logger.info(
                    "%s: NVDEC did not take this stream, ffmpeg decoded it on the CPU (%s)", self.path, fallback[0]
                )
            lines = [line for line in lines if not cmd.NVDEC_FALLBACK.search(line)]
        return children.first_error("\n".join(lines), self.path) if lines else None

    def _check(self, decoded: int, partial: bool, returncode: int, error: str | None) -> None:
        span = self.span
        missing = decoded < span.minimum or partial or returncode != 0
        if error is not None and not missing and self.info.hidden:
            logger.info("%s: the decoder rejected pictures that are not frames (%s)", self.path, error)
            error = None
        if missing or error is not None:
            at_least = "at least " if span.minimum < span.frames else ""
            detail = f"expected {at_least}{span.minimum} frames, decoded {decoded}"
            if error is not None:
                detail += f"; ffmpeg: {error}"
            raise TruncatedInput(f"{self.path} is damaged or cut short ({detail}): re-export or re-download it")
        if decoded > span.frames and not span.resample:
            logger.warning("%s decoded to %d frames, %d packets were counted", self.path, decoded, span.frames)


def decoding(info: MediaInfo, alpha: bool = False, convert: str | None = None) -> cmd.Decoding:
    """How `FrameReader` decodes the video `info` describes (`cmd.Decoding`): at its probed size, letterboxed where
    its resolution changes mid-way, with its own (or the assumed) colour matrix and range, retimed when its
    timestamps had to be mended, by libvpx for VP9's alpha."""
    picture = info.picture
    matrix, range_ = colour_decoding(picture, info.width, info.height)
    retime = None
    if info.timing_note is not None:
        times = FrameTimes.of(info.timestamps, info.time_base)
        base = info.time_base
        retime = (f"{base.numerator}/{base.denominator}", times.setpts())
    return cmd.Decoding(
        size=(info.width, info.height),
        letterbox=len(set(info.sizes)) > 1,
        matrix=matrix,
        range=range_,
        convert=convert,
        decoder=picture.alpha_decoder if alpha or picture.alpha_decoder else None,
        retime=retime,
        alpha=alpha,
    )


def use_nvdec(info: MediaInfo, ffmpeg: str) -> bool:
    """Whether a video is decoded on the GPU by default: NVDEC takes its stream (`cmd.nvdec_allows`), an NVIDIA GPU
    is visible, and ffmpeg's CUDA device works here."""
    if info.kind != "video" or not cmd.nvdec_allows(info.video_codec, info.pix_fmt, info.width, info.height):
        return False
    return gpu_visible() and hwaccel_works(ffmpeg)[0]


def _read_exactly(stream: IO[bytes], buffer: bytearray) -> int:
    """Fill `buffer` from `stream`; returns the bytes read, fewer than its size only at end of stream."""
    view = memoryview(buffer)
    got = 0
    while got < len(buffer):
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got
