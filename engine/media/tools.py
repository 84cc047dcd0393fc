"""Finding the ffmpeg and ffprobe executables and asking what they can do (version, encoders, NVENC and NVDEC).

ffmpeg is `FACESTUDIO_FFMPEG` when set, else a system FFmpeg ≥ 5.1 on PATH, else the binary imageio-ffmpeg ships.
ffprobe is optional: without it, `probe` gets the same answers from ffmpeg alone.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from engine.core.errors import BackendUnavailable, InvalidInput, MediaError
from engine.media import commands as cmd
from engine.media.children import first_error

logger = logging.getLogger(__name__)

# `-fps_mode` appeared in FFmpeg 5.1; older system builds (Ubuntu 22.04 ships 4.4) cannot run our commands.
MIN_FFMPEG_VERSION = (5, 1)


def find_ffmpeg() -> str:
    """Path of the ffmpeg executable to run.

    `FACESTUDIO_FFMPEG` when set; else `ffmpeg` on PATH when it is FFmpeg 5.1 or newer (older builds lack
    `-fps_mode` and are skipped with a warning); else the binary bundled with the imageio-ffmpeg package.
    """
    override = os.environ.get("FACESTUDIO_FFMPEG")
    if override:
        return _executable_override("FACESTUDIO_FFMPEG", override)
    system = shutil.which("ffmpeg")
    if system is not None:
        version = ffmpeg_version(system)
        if version is None or version >= MIN_FFMPEG_VERSION:
            return system
        logger.warning("ignoring %s: FFmpeg %d.%d is older than 5.1; using imageio-ffmpeg's FFmpeg", system, *version)
    try:
        import imageio_ffmpeg  # imported here: only needed when the system has no usable ffmpeg

        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except (ImportError, RuntimeError) as exc:
        raise MediaError(
            "no usable ffmpeg found: install FFmpeg 5.1 or newer, `pip install imageio-ffmpeg`, "
            "or set FACESTUDIO_FFMPEG to an ffmpeg executable"
        ) from exc


def find_ffprobe(ffmpeg: str | None = None) -> str | None:
    """Path of the ffprobe executable, or None when there is none (then ffmpeg alone is used).

    `FACESTUDIO_FFPROBE` when set (the value `none` forces the ffmpeg-only path); else ffprobe in the folder of
    `ffmpeg` (the executable `find_ffmpeg` chose, looked up here when None); else ffprobe on PATH.
    """
    override = os.environ.get("FACESTUDIO_FFPROBE")
    if override:
        if override.lower() == "none":
            return None
        return _executable_override("FACESTUDIO_FFPROBE", override)
    chosen = Path(ffmpeg if ffmpeg is not None else find_ffmpeg())
    sibling = chosen.with_name("ffprobe.exe" if chosen.suffix.lower() == ".exe" else "ffprobe")
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return str(sibling)
    return shutil.which("ffprobe")


def available_encoders(ffmpeg: str) -> frozenset[str]:
    """Names of the encoders `ffmpeg` was built with ("libx264", "aac", …)."""
    try:
        done = _ask(ffmpeg, tuple(cmd.encoders_args(ffmpeg)))
    except OSError as exc:
        raise MediaError(f"cannot run {ffmpeg}: {exc.strerror}") from exc
    if done.returncode != 0:
        raise MediaError(f"{ffmpeg} -encoders failed: {first_error(done.stderr, Path(ffmpeg))}")
    lines = done.stdout.splitlines()
    # The legend ends at a line of dashes; each line after it is "flags name description".
    start = next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("---")), len(lines))
    return frozenset(line.split()[1] for line in lines[start:] if len(line.split()) >= 2)


def encoder_pixel_formats(encoder: str, ffmpeg: str | None = None) -> frozenset[str]:
    """The pixel formats `ffmpeg`'s `encoder` takes ("yuv420p", "yuv420p10le" …), from `ffmpeg -h encoder=NAME`;
    empty when it does not list them (or has no such encoder)."""
    ffmpeg = ffmpeg if ffmpeg is not None else find_ffmpeg()
    try:
        done = _ask(ffmpeg, tuple(cmd.encoder_help_args(ffmpeg, encoder)))
    except OSError:
        return frozenset()
    line = next((line for line in done.stdout.splitlines() if "Supported pixel formats:" in line), "")
    return frozenset(line.split(":", 1)[1].split()) if line else frozenset()


def check_encoder(encoder: str, ffmpeg: str | None = None) -> None:
    """Raise InvalidInput, naming the encoder and what to do, when `ffmpeg` (default: `find_ffmpeg()`) was built
    without the video encoder `encoder` (one of `ffmpeg_commands.VIDEO_ENCODERS`); BackendUnavailable when it is an
    NVENC encoder that is built in but fails its test frame here (no NVIDIA GPU, driver or video capability), which
    ffmpeg would otherwise only report once the first frame reaches it."""
    ffmpeg = ffmpeg if ffmpeg is not None else find_ffmpeg()
    available = available_encoders(ffmpeg)
    if encoder in available:
        if encoder in cmd.NVENC_ENCODERS:
            works, error = encoder_works(encoder, ffmpeg)
            if not works:
                raise BackendUnavailable(
                    f"video.encoder={encoder} cannot encode here ({error}): NVENC needs an NVIDIA GPU and its driver "
                    "(in a container, NVIDIA_DRIVER_CAPABILITIES with video); choose video.encoder=auto or libx264"
                )
        return
    others = [e for e in cmd.VIDEO_ENCODERS if e != encoder and e in available]
    instead = f", or choose video.encoder={others[0]}" if others else ""
    raise InvalidInput(
        f"the ffmpeg in use ({ffmpeg}) has no {encoder} encoder: install an FFmpeg built with {encoder} "
        f"(imageio-ffmpeg's has it) and point FACESTUDIO_FFMPEG at it{instead}"
    )


def encoder_works(encoder: str, ffmpeg: str | None = None) -> tuple[bool, str | None]:
    """Whether `ffmpeg` (default: `find_ffmpeg()`) encodes one frame with `encoder` here, with ffmpeg's first error
    line when it does not: the proof a hardware encoder (NVENC) needs, since one can be built in and still lack
    its GPU or driver. Asked once per executable in a process; `doctor` and `video.encoder=auto` both use it."""
    return _works(tuple(cmd.encoder_test_args(ffmpeg or find_ffmpeg(), encoder)))


def hwaccel_works(ffmpeg: str | None = None) -> tuple[bool, str | None]:
    """Whether `ffmpeg` can open a CUDA device and move a frame onto it and back (`-hwaccel cuda`, NVDEC), with
    ffmpeg's first error line when it cannot; asked once per executable in a process."""
    return _works(tuple(cmd.hwaccel_test_args(ffmpeg or find_ffmpeg())))


def _works(args: tuple[str, ...]) -> tuple[bool, str | None]:
    try:
        done = _ask(args[0], args)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if done.returncode == 0 and not done.stderr.strip():
        return True, None
    # ffmpeg's first error line without its `[h264_nvenc @ 0x…]` prefix: it goes into notes and messages.
    return False, first_error(done.stderr, Path(args[0])) if done.stderr.strip() else f"exit status {done.returncode}"


def ffmpeg_version(ffmpeg: str) -> tuple[int, int] | None:
    """(major, minor) from `ffmpeg -version`, or None when the build does not say (git builds: "N-…")."""
    try:
        out = _ask(ffmpeg, (ffmpeg, "-version"))
    except OSError:
        return None
    match = re.match(r"\S+ version n?(\d+)\.(\d+)", out.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _executable_override(variable: str, value: str) -> str:
    resolved = shutil.which(value)
    if resolved is None:
        raise InvalidInput(f"{variable}={value} is not an executable file: fix or unset {variable}")
    return resolved


def _ask(executable: str, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """The output of `args`, a question about what `executable` can do (its version, its encoders), asked once
    per version of the file in this process: a run asks several times and each answer costs 80–130 ms."""
    stat = os.stat(executable)
    return _asked(args, stat.st_size, stat.st_mtime_ns)


# The one memo of this package: answers about executables, keyed by their arguments and the file's size and
# modification time (a replaced binary is asked again); it holds nothing of any job.
@functools.lru_cache(maxsize=32)
def _asked(args: tuple[str, ...], size: int, mtime_ns: int) -> subprocess.CompletedProcess[str]:
    # A bounded wait: a test encode on a GPU whose driver hangs must not hang the job (a timeout is not cached).
    return subprocess.run(list(args), capture_output=True, text=True, errors="replace", check=False, timeout=60)
