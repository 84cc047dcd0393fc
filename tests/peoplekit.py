"""A generated two-person clip for the people tests: the astronaut (skimage) and Grace Hopper (matplotlib) portraits
walk across a plain background in opposite directions, Hopper passing in front of the astronaut, who then leaves
the picture for a second and comes back. Every frame's true face boxes are known (`Clip.truth`)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from engine import media
from engine.core.types import Frame
from engine.media import demo

WIDTH, HEIGHT, FPS, COUNT = 480, 240, 25, 100  # 4 s at a common video rate
PATCH = 150  # px, the side of each portrait's square crop
# Frames on which the astronaut is out of the picture (one second).
AWAY = range(50, 75)
CROSSING = 38  # frames the walk across takes
# Patch tops (px): the two walk at slightly different heights, so one passes in front of the other.
TOP = {"astronaut": 30, "hopper": 70}
NAMES = ("astronaut", "hopper")


def portraits() -> dict[str, Frame]:
    """The two portraits as PATCH² uint8 RGB crops around their faces."""
    hopper = np.asarray(Image.open(demo.source_photo()).convert("RGB"))
    crops = {"astronaut": demo.photo()[20:300, 100:380], "hopper": hopper[60:440, 60:440]}
    return {n: cv2.resize(c, (PATCH, PATCH), interpolation=cv2.INTER_AREA) for n, c in crops.items()}


def left(name: str, i: int) -> float | None:
    """The patch's left edge (px) on frame `i`, None while out of the picture. They cross in the first CROSSING
    frames (8 px a frame), then stand still; the astronaut is away for AWAY."""
    t = min(i, CROSSING) / CROSSING
    if name == "hopper":
        return 320.0 - 300.0 * t
    return None if i in AWAY else 10.0 + 300.0 * t


def frame(i: int, patches: dict[str, Frame]) -> Frame:
    """Frame `i` (HEIGHT×WIDTH×3 uint8 RGB): the astronaut drawn first, Hopper over her."""
    out = np.full((HEIGHT, WIDTH, 3), (96, 110, 124), np.uint8)
    for name in NAMES:
        x = left(name, i)
        if x is not None:
            m = np.float32([[1, 0, x], [0, 1, TOP[name]]])
            warped = cv2.warpAffine(patches[name], m, (WIDTH, HEIGHT), flags=cv2.INTER_LINEAR)
            inside = cv2.warpAffine(np.ones((PATCH, PATCH), np.float32), m, (WIDTH, HEIGHT))[..., None]
            out = np.rint(inside * warped + (1 - inside) * out).astype(np.uint8)
    return out


@dataclass(frozen=True)
class Clip:
    path: Path
    frames: list[Frame]  # as decoded from `path`

    @staticmethod
    def centre(name: str, i: int) -> tuple[float, float] | None:
        """Where the person's patch centre is on frame `i` (px), None while away."""
        x = left(name, i)
        return None if x is None else (x + PATCH / 2, TOP[name] + PATCH / 2)

    def truth(self, box: tuple[float, float, float, float], i: int) -> str:
        """Whose face a box on frame `i` is: the visible person whose patch centre is nearest its centre."""
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        near = {n: c for n in NAMES if (c := self.centre(n, i)) is not None}
        return min(near, key=lambda n: (near[n][0] - cx) ** 2 + (near[n][1] - cy) ** 2)


def make(path: Path, count: int = COUNT) -> Clip:
    """Write the clip (H.264, near-lossless) to `path` and read it back. `count` frames: past COUNT, the two stand
    where the walk left them (a longer clip of the same scene, for benchmarks/people.py)."""
    patches = portraits()
    with media.FrameWriter(path, WIDTH, HEIGHT, media.FrameTimes.constant(Fraction(FPS)), None, crf=4) as writer:
        for i in range(count):
            writer.write(frame(i, patches))
    info = media.probe(path)
    with media.FrameReader(path, info) as reader:
        return Clip(path, list(reader))
