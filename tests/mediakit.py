"""Helpers the `engine.media` tests share: media generated at test time with the ffmpeg under test, numpy and
Pillow, and measurements of it. Their fixtures are in `mediafixtures` (`pytest_plugins = ["mediafixtures"]`)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np

from engine import media
from engine.core.errors import FacestudioError
from engine.media import FrameReader, FrameTimes, MediaInfo, Span

W, H = 64, 48


def ffmpeg(*args: str) -> None:
    """Run the ffmpeg under test to make media; fail the test with ffmpeg's stderr if it fails."""
    done = subprocess.run(
        [media.find_ffmpeg(), "-nostdin", "-v", "error", "-y", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def pattern(rate: str = "25", duration: str = "1", size: str = f"{W}x{H}") -> list[str]:
    return ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}:duration={duration}"]


def sine(duration: str = "1") -> list[str]:
    return ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=48000:duration={duration}"]


def x264(*more: str) -> list[str]:
    return ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", *more]


def audio_seconds(path: Path) -> float:
    """Decoded length of the first audio stream, measured by decoding it (works without ffprobe)."""
    done = subprocess.run(
        [media.find_ffmpeg(), "-nostdin", "-v", "error", "-i", str(path), "-map", "0:a:0",
         "-f", "s16le", "-ac", "1", "-ar", "48000", "pipe:1"],
        capture_output=True, check=True,
    )  # fmt: skip
    return len(done.stdout) / 2 / 48000


def rate(fps: int | str) -> FrameTimes:
    """Constant-rate frame times at `fps` frames per second."""
    return FrameTimes.constant(Fraction(fps))


def read_all(path: Path, info: MediaInfo | None = None, span: Span | None = None) -> list[np.ndarray]:
    with FrameReader(path, info, span) as reader:
        return list(reader)


def seconds(info: MediaInfo) -> list[Fraction]:
    """Each frame's presentation time in seconds from the first frame."""
    return [t * info.time_base for t in info.timestamps]


def single_line_error(error: FacestudioError, path: Path) -> None:
    assert str(path) in str(error)
    assert "\n" not in str(error)


def gradient(count: int, width: int = W, height: int = H) -> Iterator[np.ndarray]:
    """Smooth frames (a moving gradient): H.264 reproduces them closely, so pixels can be compared."""
    y, x = np.mgrid[0:height, 0:width]
    for i in range(count):
        yield np.stack([(x * 3 + i * 4) % 256, (y * 4) % 256, np.full_like(x, 128)], axis=2).astype(np.uint8)


def quadrants(height: int, width: int) -> np.ndarray:
    """Four flat colour blocks: survives JPEG well and shows any rotation or mirroring."""
    image = np.zeros((height, width, 3), np.uint8)
    image[: height // 2, : width // 2] = (255, 0, 0)
    image[: height // 2, width // 2 :] = (0, 255, 0)
    image[height // 2 :, : width // 2] = (0, 0, 255)
    image[height // 2 :, width // 2 :] = (255, 255, 255)
    return image


# Frame i of the variable-rate clips: 1/12 s apart for i < 6, then 1/2 s apart.
VFR_SETPTS = "setpts='if(lt(N,6),N/12,0.5+(N-6)*0.5)/TB'"


def flash_and_beep(path: Path, flash: float, *, video_offset: float = 0.0, vfr: bool = False) -> Path:
    """A clip that flashes white (frame at `flash` seconds of its own picture) while a 1 kHz beep starts at the
    same moment: 2 s of black at 25 fps (or the VFR_SETPTS times), audio 3 s of silence with the beep.
    `video_offset`: the video stream starts this many seconds after the audio (`-itsoffset`), the beep moved
    with it, so picture and sound are in sync in the source."""
    folder = path.parent
    beep_at = flash + video_offset
    audio = folder / f"{path.stem}_audio.m4a"
    ffmpeg("-f", "lavfi", "-i", f"aevalsrc='if(between(t,{beep_at},{beep_at + 0.1}),sin(2*PI*1000*t),0)':s=48000:d=3",
           "-c:a", "aac", str(audio))  # fmt: skip
    picture = folder / f"{path.stem}_video.mp4"
    if vfr:
        # 12 frames: 0 … 5 at k/12 s, then 0.5 s apart; the flash on the frame shown at `flash` s.
        frames = [k / 12 for k in range(6)] + [0.5 + (k - 6) * 0.5 for k in range(6, 12)]
        lit = min(range(len(frames)), key=lambda k: abs(frames[k] - flash))
        white = f"drawbox=c=white:t=fill:enable='eq(n,{lit})'"
        ffmpeg("-f", "lavfi", "-i", f"color=black:s={W}x{H}:r=12:d=1", "-vf", f"{white},{VFR_SETPTS}",
               "-fps_mode", "passthrough", "-frames:v", "12", *x264(), str(picture))  # fmt: skip
    else:
        white = f"drawbox=c=white:t=fill:enable='between(t,{flash},{flash + 0.039})'"
        ffmpeg("-f", "lavfi", "-i", f"color=black:s={W}x{H}:r=25:d=2", "-vf", white, *x264(), str(picture))
    ffmpeg("-itsoffset", str(video_offset), "-i", str(picture), "-i", str(audio), "-map", "0:v", "-map", "1:a",
           "-c", "copy", str(path))  # fmt: skip
    audio.unlink()
    picture.unlink()
    return path


def flash_time(path: Path) -> float:
    """Seconds from the first frame of `path` to its brightest frame (the flash)."""
    info = media.probe(path)
    frames = read_all(path, info)
    brightest = int(np.argmax([f.mean() for f in frames]))
    return float(seconds(info)[brightest])


def beep_time(path: Path) -> float:
    """Seconds from the first frame of `path` to the first loud sample of its audio, measured by decoding the
    audio onto the video's timeline (a delayed audio start is filled with silence, not dropped)."""
    info = media.probe(path)
    assert info.audio_start is not None
    done = subprocess.run(
        [media.find_ffmpeg(), "-nostdin", "-v", "error", "-i", str(path), "-map", "0:a:0",
         "-af", "aresample=async=1:first_pts=0", "-f", "f32le", "-ac", "1", "-ar", "48000", "pipe:1"],
        capture_output=True, check=True,
    )  # fmt: skip
    samples = np.frombuffer(done.stdout, np.float32)
    first = int(np.argmax(np.abs(samples) > 0.3))
    # aresample's first_pts=0 puts sample 0 at the file's time 0; the video's first frame is at its start_time.
    return first / 48000 - float(info.start_time)
