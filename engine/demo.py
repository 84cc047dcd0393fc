"""The demo clip: a slow pan over a public-domain photo that an installed package ships, with a tone track.

The photo is NASA's portrait of astronaut Eileen Collins (public domain), shipped by scikit-image as
`skimage.data.astronaut()`. Used by `launch.py run --demo` and by tests that want real-photo content.
"""

from __future__ import annotations

import math
import tempfile
import wave
from pathlib import Path

import cv2
import numpy as np

from engine import video
from engine.types import Frame


def photo() -> Frame:
    """The 512×512 RGB astronaut photo."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut())


def frames(width: int = 320, height: int = 180, count: int = 48) -> list[Frame]:
    """`count` frames of width×height RGB: a crop that drifts and zooms across the photo."""
    src = photo()
    out = []
    for i in range(count):
        t = i / max(count - 1, 1)
        crop_w = int(src.shape[1] * (0.9 - 0.2 * t))
        crop_h = crop_w * height // width
        x0 = int((src.shape[1] - crop_w) * t)
        y0 = int((src.shape[0] - crop_h) * 0.3)
        crop = src[y0 : y0 + crop_h, x0 : x0 + crop_w]
        out.append(cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA))
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


def make_clip(path: Path, width: int = 256, height: int = 144, count: int = 36, fps: int = 24) -> Path:
    """Write the demo clip (H.264 + AAC tone) to `path`; returns `path`."""
    with tempfile.TemporaryDirectory(prefix="facestudio-demo-") as tmp:
        tone = Path(tmp) / "tone.wav"
        write_tone(tone, count / fps)
        with video.FrameWriter(path, width, height, f"{fps}/1", audio_from=tone, metadata={}) as writer:
            for frame in frames(width, height, count):
                writer.write(frame)
    return path
