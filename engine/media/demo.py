"""Demo media from public-domain photos that installed packages ship, so a new user needs no files of their own.

Target: a clip with a tone track that drifts and zooms across NASA's portrait of astronaut Eileen Collins
(`skimage.data.astronaut()`), so the face moves and scales. Source: the U.S. Navy portrait of Grace Hopper that
matplotlib ships. Used by `launch.py run --demo` and by tests that want real-photo content.
"""

from __future__ import annotations

import math
import tempfile
import wave
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from engine import media
from engine.core.types import Frame


def photo() -> Frame:
    """The 512×512 RGB astronaut photo."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut())


def source_photo() -> Path:
    """Path of the public-domain portrait of Grace Hopper (U.S. Navy) that matplotlib ships."""
    from matplotlib import cbook

    return Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))


def camera(i: int, count: int) -> tuple[float, float, float]:
    """Crop centre (x, y) in photo pixels and crop width for frame `i`: a slow drift and zoom around the face."""
    t = i / max(count - 1, 1)
    return (
        230.0 + 30.0 * math.sin(2 * math.pi * t),
        135.0 + 12.0 * math.sin(4 * math.pi * t),
        360.0 - 110.0 * math.sin(math.pi * t),
    )


def frames(width: int = 320, height: int = 180, count: int = 48) -> list[Frame]:
    """`count` frames of width×height RGB: a crop of the astronaut photo that drifts and zooms, so the face moves
    and changes size from frame to frame (as `camera` says)."""
    src = photo()
    out = []
    for i in range(count):
        cx, cy, crop_w = camera(i, count)
        scale = width / crop_w
        # Affine crop with sub-pixel placement: the motion is smooth, not quantised to whole pixels.
        m = np.float32([[scale, 0, width / 2 - cx * scale], [0, scale, height / 2 - cy * scale]])
        out.append(cv2.warpAffine(src, m, (width, height), flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REFLECT_101))
    return out


def write_tone(path: Path, seconds: float, rate: int = 48000, hz: float = 440.0) -> None:
    """A mono 16-bit PCM WAV sine tone of `seconds` length."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.2 * np.sin(2 * math.pi * hz * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())


def make_clip(path: Path, width: int = 320, height: int = 180, count: int = 60, fps: int = 24) -> Path:
    """Write the demo clip (H.264 + AAC tone) to `path`; returns `path`."""
    with tempfile.TemporaryDirectory(prefix="facestudio-demo-") as tmp:
        tone = Path(tmp) / "tone.wav"
        write_tone(tone, count / fps)
        audio = media.Audio(tone, None, Fraction(0), None, cut=False)
        with media.FrameWriter(path, width, height, media.FrameTimes.constant(Fraction(fps)), audio) as writer:
            for frame in frames(width, height, count):
                writer.write(frame)
    return path
