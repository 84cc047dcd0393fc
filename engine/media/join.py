"""`join_segments`: a video's segments joined into one file without re-encoding, the audio muxed in once; or,
for an animated GIF, the lossless segments encoded to GIF. Written under a temp name and verified, frame times
included, before it is renamed into place."""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from engine.core.errors import FacestudioError, MediaError
from engine.media import children, headers
from engine.media import commands as cmd
from engine.media.encode import check_times
from engine.media.images import partial_path
from engine.media.info import MediaInfo
from engine.media.probe import mp4_video_time_base, probe
from engine.media.timing import FrameTimes
from engine.media.tools import find_ffmpeg, find_ffprobe

logger = logging.getLogger(__name__)

_GIF_COMMENT = b"\x21\xfe"


def join_segments(
    parts: Sequence[tuple[Path, int]],
    output: Path,
    times: FrameTimes,
    last: Fraction,
    script: Path,
    audio: cmd.Audio | None,
    metadata: Mapping[str, str],
    encoder: str = "libx264",
    *,
    tracks: Sequence[cmd.Track] | None = None,
    chapters: bool = False,
    video_tags: Mapping[str, str] | None = None,
    picture: cmd.OutputPicture | None = None,
) -> MediaInfo:
    """Join video segments (path, frame count), played back to back, into `output`; returns what it holds.

    times: when each frame of the joined video is shown, from its first (a span's `output_times()`); last: how
        long its last frame is shown, seconds. The segments' own times are rebuilt from these at every joint, so
        a variable frame rate survives the join.
    script: where to write the concat demuxer's list (a job folder). audio, metadata: as for `FrameWriter` (a GIF
        gets no audio, and its metadata as a GIF comment). encoder: the one the segments were encoded with.
    tracks: which of the source's streams go in and how (`cmd.Track`; None: its first audio stream); chapters: the
        source's chapters too; video_tags: the video stream's tags (`cmd.concat_args`). picture: how the segments
        were encoded (a GIF's alpha and sample aspect ratio; `FrameWriter`'s).
    The last frame keeps its duration `last` (a one-frame video, a GIF's last delay): checked where it can be read
    back (ffprobe's MP4/MOV track end, a GIF's delays; Matroska keeps it in its segment's duration only, and ffmpeg
    alone cannot tell it for a file that leaves frame durations out).
    Like `FrameWriter`, the file is made under a temp name, checked to hold exactly the frames of the parts at
    their times, and only then renamed to `output`; on any error or interruption ffmpeg is stopped and the temp
    file deleted (DiskFull for a full disk, MediaError for another failure).
    """
    output = Path(output)
    ffmpeg = find_ffmpeg()
    gif = output.suffix.lower() == cmd.GIF_SUFFIX
    if audio is not None and audio.codec is None and not gif:
        found = headers.read_header(audio.path, ffmpeg).audio()
        audio = replace(audio, codec=found.codec if found is not None else None)
    counts = list(itertools.accumulate(frames for _, frames in parts))
    starts = [times.seconds(first) - times.seconds(0) for first in [0, *counts[:-1]]]
    end = times.seconds(counts[-1] - 1) - times.seconds(0) + last
    script.write_text(cmd.concat_list([(p, s) for (p, _), s in zip(parts, starts, strict=True)], end), "utf-8")
    partial = partial_path(output)
    if gif:
        alpha, sar = (picture.alpha, picture.sar) if picture is not None else (False, Fraction(1))
        args = cmd.gif_args(ffmpeg, script, partial, alpha=alpha, sar=sar, last=last)
    else:
        ending = _ending(parts[0][0], ffmpeg, times, counts[-1], end, cmd.muxer_for(output))
        args = cmd.concat_args(ffmpeg, script, partial, audio, metadata, encoder, tracks=tracks, chapters=chapters,
                               video_tags=video_tags, ending=ending)  # fmt: skip
    process, drain = children.start(args, subprocess.DEVNULL, subprocess.DEVNULL)
    try:
        returncode = process.wait()
        drain.join()
        if returncode != 0 or drain.write_errno() is not None:
            code = drain.write_errno()
            if code is not None:
                raise children.write_error(code, output, output.name)
            error = drain.first_error(partial) or f"exit status {returncode}"
            raise MediaError(f"ffmpeg failed to join the segments into {output}: {error}")
        if gif and metadata:
            _comment_gif(partial, "; ".join(f"{k}={v}" for k, v in metadata.items()))
        try:
            written = probe(partial, ffmpeg)
        except FacestudioError as exc:
            children.check_room(output)
            raise MediaError(f"the joined {output} cannot be read back: {exc}") from exc
        # The last frame's end is read back where it can be: ffprobe's MP4/MOV track end, a GIF's last delay.
        readable = gif or (find_ffprobe(ffmpeg) is not None and cmd.muxer_for(output) in ("mp4", "mov"))
        check_times(written, times, counts[-1], output, last if readable else None)
        os.replace(partial, output)
    except OSError as exc:
        children.stop(process, drain)
        partial.unlink(missing_ok=True)
        if exc.errno is None:
            raise
        raise children.write_error(exc.errno, output, output.name) from None
    except BaseException:
        children.stop(process, drain)
        partial.unlink(missing_ok=True)
        raise
    logger.info("joined %d segments into %s (%d frames)", len(parts), output, written.frame_count)
    return replace(written, path=output)


def _ending(first: Path, ffmpeg: str, times: FrameTimes, frames: int, end: Fraction, muxer: str) -> cmd.Ending | None:
    """The last frame's time and end in the ticks the output's muxer (`muxer`) writes (`cmd.Ending`): Matroska's
    milliseconds, or MP4's and MOV's the segments' own; None when those are unknown."""
    if muxer in ("matroska", "webm"):
        tick = Fraction(1, 1000)
    elif first.suffix.lower() in (".mp4", ".mov") and (indexed := mp4_video_time_base(first)) is not None:
        tick = indexed  # read from the segment's index, not by a child
    else:
        stream = next((s for s in headers.read_header(first, ffmpeg).streams if s.kind == "video"), None)
        if stream is None or stream.time_base is None:
            return None
        tick = stream.time_base
    last = times.seconds(frames - 1) - times.seconds(0)
    return cmd.Ending(round(last / tick), round(end / tick))


def _comment_gif(path: Path, text: str) -> None:
    """Put `text` in a GIF comment extension right after the header and global colour table (ffmpeg's GIF muxer
    writes no metadata; readers, ffmpeg's own demuxer included, show the comment as the file's `comment` tag)."""
    data = path.read_bytes()
    packed = data[10]
    table = 3 * 2 ** ((packed & 0x07) + 1) if packed & 0x80 else 0
    at = 13 + table
    raw = text.encode("ascii", "replace")
    blocks = b"".join(bytes([len(chunk)]) + chunk for chunk in (raw[i : i + 255] for i in range(0, len(raw), 255)))
    path.write_bytes(data[:at] + _GIF_COMMENT + blocks + b"\x00" + data[at:])
