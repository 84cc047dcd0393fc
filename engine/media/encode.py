"""`FrameWriter`: frames encoded by an ffmpeg child from a rawvideo pipe, each at its own time, written atomically."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Literal

import numpy as np
import numpy.typing as npt
from PIL import Image

from engine.backends import gpu_visible
from engine.core.errors import FacestudioError, InvalidInput, MediaError
from engine.core.types import Frame, check_frame
from engine.media import children, headers
from engine.media import commands as cmd
from engine.media.images import partial_path
from engine.media.info import MediaInfo
from engine.media.picture import ALPHA_ENCODERS
from engine.media.probe import probe
from engine.media.timing import FrameTimes
from engine.media.tools import available_encoders, check_encoder, encoder_works, ffmpeg_version, find_ffmpeg

logger = logging.getLogger(__name__)

# Longest filter graph given on the command line; a longer one (the times of many variable-rate frames) goes in
# a file. Windows limits a whole command line to 32767 characters.
INLINE_FILTER_CHARS = 8000


class FrameWriter:
    """Encodes frames to a video (H.264, HEVC, AV1, VP9 or ProRes, as a `picture` plan says) with the audio of
    another file, written atomically.

    Use as a context manager:

        with FrameWriter(output, width, height, span.output_times(), audio=…, metadata={...}) as writer:
            for frame in frames:
                writer.write(frame)    # Frame: height × width × 3 uint8 RGB

    Frame n is shown at `times.seconds(n)`: a variable frame rate stays variable (MP4 and MOV keep every time
    exactly; Matroska to the millisecond). Frames are encoded into `.<stem>.partial<suffix>` in the output
    folder. Leaving the block without an exception (or calling `close`) finishes the encode, checks that the file
    holds exactly the frames written at their times (or leaves that to a later check: `checked_later`), and renames
    it to `output`. An exception (or `abort`) kills ffmpeg and deletes the temp file, so a failed job never leaves a
    file that looks finished.

    Odd sizes: yuv420p stores colour at half resolution, so it needs an even width and height. A frame
    with an odd dimension is padded by one column/row that repeats its last column/row (edge replication);
    the video is then one pixel wider/taller than the frames, and no pixel of the frames is lost. The lossless
    RGB intermediates (`ffmpeg_commands.INTERMEDIATE_ENCODER`, segments of a GIF) and 4:4:4 take any size.
    """

    def __init__(
        self,
        output: Path,
        width: int,
        height: int,
        times: FrameTimes,
        audio: cmd.Audio | None = None,
        metadata: Mapping[str, str] | None = None,
        crf: int = 18,
        preset: str = "medium",
        encoder: str = "libx264",
        picture: cmd.OutputPicture | None = None,
        last: Fraction | None = None,
        alpha: Iterable[npt.NDArray[np.uint8]] | None = None,
        checked_later: bool = False,
    ) -> None:
        """output: .mp4, .m4v, .mov, .mkv or .webm path; its folder must exist.
        width, height: size of the frames that will be written, pixels.
        times: when each frame is shown (`FrameTimes.constant(rate)` for a constant rate; a span's
            `output_times()`), counted from the first frame.
        audio: the audio to mux (`engine.media.timing.audio_for`), None for a silent video.
        metadata: container tags to write (custom keys included; readable with `read_video_metadata`).
        crf, preset: quality (0–51, lower is better) and speed preset of the encoder.
        encoder: one of `cmd.VIDEO_ENCODERS` (libx264, libx265, NVENC H.264, HEVC or AV1), `auto`
            (`choose_encoder`; a job resolves it once, before any work, so that its segments agree) or the lossless
            intermediate; InvalidInput here when the ffmpeg in use lacks it, the frames are larger or smaller than
            it takes, or the container cannot hold it. `self.encoder` is the one used.
        picture: how the frames are encoded (`engine.media.picture.plan`: encoder, pixel format, colour, aspect,
            alpha); None: the encoder's default (BT.709 yuv420p, square pixels), and `encoder` as above.
        last: how long the last frame is shown, seconds (None: the gap before it); a one-frame video and a GIF's
            last delay keep their duration.
        alpha: with a picture that keeps alpha, the frames' alpha planes (H×W uint8, 255 = opaque), one per frame
            written, in order (a `FrameReader(…, alpha=True)`), resized to the frames when they differ; None: each
            `write` is given its frame's plane.
        checked_later: `close` moves the finished file into place without reading it back, for a file whose frames
            and times are checked right after as part of another (a job's last segment, checked in the joined
            output: `join_segments`): one ffprobe fewer per job. ffmpeg's exit status is still checked.
        """
        self.output = Path(output)
        self.width, self.height = width, height
        self.times = times
        self.frames_written = 0
        # What the finished file holds, probed by `close` (a cut can leave no audio to mux, for one); None while
        # open, and for a file `checked_later`.
        self.written: MediaInfo | None = None
        self._checked_later = checked_later
        if width < 1 or height < 1:
            raise ValueError(f"frame size must be positive, got {width}×{height}")
        cmd.muxer_for(self.output)  # an unsupported extension fails here, naming the path the caller gave
        if not self.output.parent.is_dir():
            raise InvalidInput(f"cannot write {self.output}: the folder {self.output.parent} does not exist")
        self._ffmpeg = find_ffmpeg()
        if picture is None:
            chosen, _ = choose_encoder(encoder, width + width % 2, height + height % 2, self._ffmpeg)
            rgb = chosen in (cmd.INTERMEDIATE_ENCODER, cmd.GIF_ALPHA_ENCODER)
            picture = cmd.OutputPicture(chosen, "rgb24", None, "pc") if rgb else cmd.OutputPicture(chosen)
        self.picture = picture
        self.encoder = encoder = picture.encoder
        if encoder not in (cmd.INTERMEDIATE_ENCODER, cmd.GIF_ALPHA_ENCODER):
            cmd.check_container(self.output, encoder)
        check_size(encoder, width, height)
        # Here, not at the first frame: ffmpeg would only fail once it had been sent one.
        check_encoder(encoder, self._ffmpeg)
        self._alpha: Iterator[npt.NDArray[np.uint8]] | None = None
        if picture.alpha and alpha is not None:
            self._alpha = iter(alpha)
        if audio is not None and audio.codec is None:
            found = headers.read_header(audio.path, self._ffmpeg).audio()
            audio = replace(audio, codec=found.codec if found is not None else None)
        self._partial = partial_path(self.output)
        self._script = self._partial.with_name(self._partial.name + ".filter")
        # Odd dimensions are padded to even ones for 4:2:0 (see the class docstring).
        rows, columns = picture.pad
        self._pad = (height % 2 * rows, width % 2 * columns)
        timing = _timing(times, self._ffmpeg, last)
        graph = cmd.encode_filter(timing, picture)
        if len(graph) > INLINE_FILTER_CHARS:
            self._script.write_text(graph, encoding="utf-8")
            timing = replace(timing, script=self._script)
        self._args = cmd.encode_args(
            self._ffmpeg, self._partial, width + self._pad[1], height + self._pad[0], timing, audio,
            metadata or {}, crf, preset, encoder, picture,
        )  # fmt: skip
        self._process: subprocess.Popen[bytes] | None = None
        self._drain: children.Stderr | None = None
        self._state: Literal["open", "closed", "aborted"] = "open"

    def __enter__(self) -> FrameWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, frame: Frame, alpha: npt.NDArray[np.uint8] | None = None) -> None:
        """Encode one frame: height × width × 3 uint8 RGB, the size given to the constructor. alpha: its alpha
        plane (H'×W' uint8, 255 = opaque, resized to the frame when it differs) where the picture keeps alpha and
        the constructor was given no planes to take it from."""
        if self._state != "open":
            raise RuntimeError(f"the writer of {self.output} is already {self._state}")
        check_frame(frame)
        if frame.shape[:2] != (self.height, self.width):
            got = f"{frame.shape[1]}×{frame.shape[0]}"
            raise ValueError(f"frame is {got}, this writer takes {self.width}×{self.height}")
        if self.picture.alpha:
            frame = np.dstack([frame, self._fitted(alpha if alpha is not None else self._next_alpha())])
        if any(self._pad):
            frame = np.pad(frame, ((0, self._pad[0]), (0, self._pad[1]), (0, 0)), mode="edge")
        if self._process is None:
            self._process, self._drain = children.start(self._args, subprocess.PIPE, subprocess.DEVNULL)
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(np.ascontiguousarray(frame).data)
        except (BrokenPipeError, ValueError):  # ValueError: stdin closed by `abort` on another thread
            state: str = self._state  # re-read: another thread may have aborted the writer meanwhile
            if state == "aborted":
                raise MediaError(f"writing {self.output} was aborted") from None
            error = self._failure("encoding")
            self.abort()
            raise error from None
        self.frames_written += 1

    def _next_alpha(self) -> npt.NDArray[np.uint8]:
        """The next frame's alpha plane from the planes given to the constructor."""
        if self._alpha is None:
            raise ValueError("a picture that keeps alpha needs the frames' alpha planes")
        plane = next(self._alpha, None)
        if plane is None:
            raise MediaError(f"the alpha planes of {self.output} ended before its frames")
        return plane

    def _fitted(self, plane: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """An alpha plane at the frames' size (resized bilinearly when the chain scaled them)."""
        if plane.shape != (self.height, self.width):
            resized = Image.fromarray(plane).resize((self.width, self.height), Image.Resampling.BILINEAR)
            plane = np.asarray(resized, dtype=np.uint8)
        return plane

    def close(self) -> Path:
        """Finish encoding, verify the frames and their times (unless `checked_later`), and move the file to
        `output`; returns `output`.

        Raises (after deleting the temp file) DiskFull when the disk filled up, MediaError when ffmpeg fails
        otherwise or the file does not hold exactly the frames written at their times.
        """
        if self._state == "closed":
            return self.output
        if self._state == "aborted":
            raise MediaError(f"writing {self.output} was aborted; nothing was written")
        try:
            if self._process is None or self._drain is None:
                raise MediaError(f"no frames were written to {self.output}")
            assert self._process.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # ffmpeg has exited already; its exit status says why
                self._process.stdin.close()
            returncode = self._process.wait()
            self._drain.join()
            if returncode != 0 or self._drain.write_errno() is not None:
                raise self._failure("finishing")
            written = None
            if not self._checked_later:
                try:
                    written = probe(self._partial, self._ffmpeg)
                except FacestudioError as exc:
                    # Some builds exit 0 after failing to write the index: a file that cannot be read on a full
                    # disk is the disk's fault.
                    children.check_room(self.output)
                    raise MediaError(f"the encoded {self.output} cannot be read back: {exc}") from exc
                check_times(written, self.times, self.frames_written, self.output)
            os.replace(self._partial, self.output)
            self.written = None if written is None else replace(written, path=self.output)
        except BaseException:
            self.abort()
            raise
        finally:
            self._script.unlink(missing_ok=True)
        self._state = "closed"
        logger.info("wrote %s (%d frames)", self.output, self.frames_written)
        return self.output

    def abort(self) -> None:
        """Kill ffmpeg and delete the temp file, leaving nothing at `output`; a no-op after a successful `close`."""
        if self._state == "closed":
            return  # the output is finished and in place: there is nothing left to undo
        self._state = "aborted"
        if self._process is not None and self._drain is not None:
            if self._process.poll() is None:
                self._process.kill()
            children.stop(self._process, self._drain)
        self._partial.unlink(missing_ok=True)
        self._script.unlink(missing_ok=True)

    def _failure(self, doing: str) -> FacestudioError:
        assert self._process is not None and self._drain is not None
        self._process.wait()
        self._drain.join()
        code = self._drain.write_errno()
        if code is not None:
            return children.write_error(code, self.output, self.output.name)
        reason = self._drain.first_error(self._partial) or f"exit status {self._process.returncode}"
        return MediaError(f"ffmpeg failed {doing} {self.output}: {reason}")


def check_size(encoder: str, width: int, height: int) -> None:
    """InvalidInput when frames of width × height pixels are larger or smaller than `encoder` takes (MAX_SIDE,
    MIN_SIZE), naming an encoder that takes them."""
    side = cmd.MAX_SIDE.get(encoder)
    if side is not None and max(width, height) > side:
        raise InvalidInput(f"{encoder} encodes frames of at most {side}×{side} pixels, not {width}×{height}")
    least = cmd.MIN_SIZE.get(encoder)
    if least is not None and (width < least[0] or height < least[1]):
        instead = "libx264" if encoder in ("h264_nvenc", "libx265", "hevc_nvenc", "av1_nvenc") else "auto"
        raise InvalidInput(
            f"{encoder} encodes frames of at least {least[0]}×{least[1]} pixels, not {width}×{height}: use "
            f"video.encoder={instead}, or upscale the target first"
        )


def choose_encoder(
    requested: str,
    width: int,
    height: int,
    ffmpeg: str | None = None,
    *,
    muxer: str = "mp4",
    depth: int = 8,
    alpha: bool = False,
) -> tuple[str, str | None]:
    """The encoder `video.encoder` stands for, for frames of width × height pixels into a container of ffmpeg
    muxer `muxer`, of a target of `depth` bits with or without `alpha` (to keep), and the note a run's summary
    gives when `auto` could not take the GPU's: an encoder named is itself (no note); `auto` is the encoder that
    keeps alpha in that container (ProRes 4444 in MOV, VP9 in Matroska or WebM), VP9 in WebM; else NVENC
    (`cmd.AUTO_HARDWARE`; HEVC for a target of more than 8 bits) when an NVIDIA GPU is visible and ffmpeg encodes a
    test frame with it here (the proof `doctor` reports, `tools.encoder_works`), and the frames are within its
    sizes; else libx264 (libx265 for more than 8 bits), and the note says why."""
    if requested != "auto":
        return requested, None
    if alpha and muxer in ALPHA_ENCODERS:
        return ALPHA_ENCODERS[muxer], None
    if muxer == "webm":
        return "libvpx-vp9", None
    deep = depth > 8
    hardware, software = ("hevc_nvenc", "libx265") if deep else (cmd.AUTO_HARDWARE, cmd.AUTO_SOFTWARE)
    side, least = cmd.MAX_SIDE[hardware], cmd.MIN_SIZE[hardware]
    ffmpeg = ffmpeg or find_ffmpeg()
    if not gpu_visible():
        why = "no NVIDIA GPU is visible"
    elif hardware not in available_encoders(ffmpeg):
        why = f"this ffmpeg has no {hardware}"
    elif max(width, height) > side:
        why = f"{width}×{height} frames are beyond {hardware}'s {side}×{side}"
    elif width < least[0] or height < least[1]:
        why = f"{width}×{height} frames are below {hardware}'s {least[0]}×{least[1]}"
    else:
        works, error = encoder_works(hardware, ffmpeg)
        if works:
            return hardware, None
        why = f"{hardware} failed its test frame ({error})"
    if deep and min(width, height) < cmd.MIN_SIZE["libx265"][0]:
        software = cmd.AUTO_SOFTWARE  # x265's least frame is 16×16: below it, 8-bit H.264 (the plan says so)
    kind = f" (HEVC, keeps the target's {depth} bits)" if software == "libx265" else ""
    return (
        software,
        f"encoder: {software}{kind} on the CPU, since {why} (video.encoder=auto takes NVENC where it works)",
    )


def check_times(written: MediaInfo, times: FrameTimes, frames: int, output: Path, last: Fraction | None = None) -> None:
    """Raise MediaError unless the file `written` describes holds `frames` frames, frame n at `times.seconds(n)`
    from the first one, to within a tick of the file's own time base (Matroska's millisecond, GIF's hundredth),
    and (`last`, seconds) its last frame lasts that long, to within a tick or a hundredth of a second."""
    if written.frame_count != frames:
        raise MediaError(f"{output} holds {written.frame_count} frames, {frames} were written")
    tick = written.time_base
    for n, stamp in enumerate(written.timestamps):
        if abs(stamp * tick - times.seconds(n) + times.seconds(0)) > tick:
            raise MediaError(
                f"{output} shows frame {n} at {float(stamp * tick):.6f} s, not at {float(times.seconds(n)):.6f} s"
            )
    if last is not None:
        end = times.seconds(frames - 1) - times.seconds(0) + last
        # ffprobe gives the duration in microseconds; its float read exactly would put 0.51 a hair past 0.51.
        if abs(Fraction(written.duration).limit_denominator(1_000_000) - end) > max(tick, Fraction(1, 100)):
            raise MediaError(f"{output} ends at {written.duration:.6f} s, not at {float(end):.6f} s")


def _timing(times: FrameTimes, ffmpeg: str, last: Fraction | None = None) -> cmd.VideoTiming:
    # The raw input's rate is each frame's duration to ffmpeg: only the last frame's is kept (the others end
    # where the next begins), so it is the last frame's, when known.
    rate = (1 / last if last else times.rate()).limit_denominator(1_000_000)
    base = times.time_base
    major = (ffmpeg_version(ffmpeg) or (99, 0))[0]
    return cmd.VideoTiming(f"{rate.numerator}/{rate.denominator}", f"{base.numerator}/{base.denominator}",
                           times.setpts(), major=major)  # fmt: skip
