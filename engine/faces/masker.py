"""The paste-back mask of the face processors: a combination the user chooses, the chosen masks multiplied.

- `box`: the feathered box of the aligned crop (its padding and blur).
- `face`: the face's outline from its 68 landmarks (the lower forehead included; with `keep_mouth`, the inner
  mouth cut out so teeth and tongue stay the target's). Faces without 68 landmarks (buffalo_l) skip it.
- `occlusion`: an occluder model (XSeg): what covers the face (a hand, hair, glasses, a microphone) is kept from
  the target.
- `region`: only the chosen parts of the face (skin, brows, eyes, glasses, nose, mouth, lips), from a face
  parser (BiSeNet); without a parser downloaded, from the 68 landmarks (no glasses there), said once in the
  run's notes.

Everything is in crop coordinates: each face's aligned crop (S×S, cut from the frame the processor works on) goes
in, an S×S float32 mask in [0, 1] comes out (1 = take the processed pixel). The models run once per batch, on the
crops of every face of every frame of the batch, normalised by their manifest entry (`engine.models.tensor`).
A model mask is exactly 0 wherever the model says "keep the target" and ramps up away from it (over about 1 % of
the crop), so an occluder's outline shows no seam and nothing it covers changes. Without `box`, the crop's own
edge is still faded over 2 % of its size, so no square outline can show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import cv2
import numpy as np
import numpy.typing as npt
from pydantic import BeforeValidator

from engine.core.errors import InvalidJob
from engine.core.types import Frame, Mask
from engine.faces.ibug68 import BROWS, CHIN, INNER_MOUTH, JAW
from engine.faces.masks import box_mask, landmark_mask
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import to_tensor

log = logging.getLogger(__name__)

MaskKind = Literal["box", "face", "occlusion", "region"]
Region = Literal[
    "skin", "left-eyebrow", "right-eyebrow", "left-eye", "right-eye", "glasses", "nose", "mouth", "upper-lip",
    "lower-lip",
]  # fmt: skip
REGIONS: tuple[str, ...] = Region.__args__  # type: ignore[attr-defined]
OCCLUDERS = ("xseg_1", "xseg_2", "xseg_3")
PARSERS = ("bisenet_resnet_34", "bisenet_resnet_18")
AUTO = "auto"

# The face parser's classes (CelebAMask-HQ order, MODELS.md §9) for each region a user can choose.
PARSER_LABELS: dict[str, int] = {
    "skin": 1, "left-eyebrow": 2, "right-eyebrow": 3, "left-eye": 4, "right-eye": 5, "glasses": 6, "nose": 10,
    "mouth": 11, "upper-lip": 12, "lower-lip": 13,
}  # fmt: skip
# The same regions from the 68 landmarks (iBUG numbering; "left" is the image's left, as the landmarks number
# it): polygons, each grown by a fraction of the face's size where the points lie on the part's middle line.
LANDMARK_REGIONS: dict[str, tuple[tuple[int, ...], float]] = {
    "left-eyebrow": (tuple(range(17, 22)), 0.035),
    "right-eyebrow": (tuple(range(22, 27)), 0.035),
    "left-eye": (tuple(range(36, 42)), 0.01),
    "right-eye": (tuple(range(42, 48)), 0.01),
    "nose": ((27, 31, 32, 33, 34, 35), 0.02),
    "mouth": (tuple(range(60, 68)), 0.0),
    "upper-lip": ((48, 49, 50, 51, 52, 53, 54, 64, 63, 62, 61, 60), 0.0),
    "lower-lip": ((54, 55, 56, 57, 58, 59, 48, 60, 67, 66, 65, 64), 0.0),
}
# The ramp of a model mask: Gaussian sigma as a fraction of the crop (5 px at 512, as FaceFusion's).
MODEL_SIGMA = 0.01
# Without a box, the crop's edge fades over this fraction of its size.
EDGE_BLUR = 0.04
# The landmarks stop at the brows; the face region is raised like the `face` mask's (engine/faces/masks.py).
FOREHEAD_RAISE = 0.2


def listed(value: Any) -> Any:
    """A multi-choice setting given as text (`--set face_swapper.mask=box,occlusion`): the comma-separated items."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.replace(" ", ",").split(",") if item.strip())
    return value


MaskKinds = Annotated[tuple[MaskKind, ...], BeforeValidator(listed)]
Regions = Annotated[tuple[Region, ...], BeforeValidator(listed)]


def model_ids(kinds: Sequence[str], occluder: str, parser: str) -> list[str]:
    """The models a mask combination loads (prefetch, `models fetch --preset`): the occluder with `occlusion`, the
    parser with `region` unless it is `auto` (which uses a parser only when one is already here)."""
    out = [occluder] if "occlusion" in kinds else []
    return out + ([parser] if "region" in kinds and parser != AUTO else [])


class Masker:
    """Makes the paste-back masks of a processor's face crops (see the module docstring). Loads its models once.

    owner: the processor's id, for messages. kinds: the masks to multiply. padding (% of the crop), blur
    (fraction): the box's, and the face outline's feather (`engine.faces.masks.crop_mask`'s rule). keep_mouth:
    cut the inner mouth out of the face outline. regions: the parts `region` keeps. occluder, parser: model ids
    (parser `auto`: the first parser downloaded here, else landmark regions). backend: the processor's.
    """

    def __init__(
        self,
        runtime: Runtime,
        owner: str,
        kinds: Sequence[str],
        *,
        padding: float = 0.0,
        blur: float = 0.3,
        keep_mouth: bool = False,
        regions: Sequence[str] = REGIONS,
        occluder: str = OCCLUDERS[0],
        parser: str = AUTO,
        backend: str | None = None,
    ) -> None:
        if not kinds:
            raise InvalidJob(f"{owner}.mask is empty: choose at least one of box, face, occlusion, region")
        if "region" in kinds and not regions:
            raise InvalidJob(f"{owner}.mask_regions is empty: choose the parts of the face to keep")
        self.kinds = tuple(kinds)
        self.padding, self.blur, self.keep_mouth = padding, blur, keep_mouth
        self.regions = tuple(regions)
        self.occluder: LoadedModel | None = None
        self.parser: LoadedModel | None = None
        self.notes: tuple[str, ...] = ()
        if "occlusion" in kinds:
            runtime.ensure([occluder], backend)
            self.occluder = runtime.load(occluder, backend)
        if "region" in kinds:
            chosen = parser if parser != AUTO else _present_parser(runtime)
            if chosen is not None:
                runtime.ensure([chosen], backend)
                self.parser = runtime.load(chosen, backend)
            else:
                self.notes = (
                    f"{owner}: the region mask follows the 68 landmarks (no face parser is downloaded"
                    f"{'; glasses need one' if 'glasses' in self.regions else ''}): "
                    f"`launch.py models fetch {PARSERS[0]}` for the parser's regions",
                )
                log.info(self.notes[0])

    @property
    def needs_landmarks68(self) -> bool:
        """Whether the masks need 68 landmarks on every face (landmark regions, without a parser)."""
        return "region" in self.kinds and self.parser is None

    @property
    def needs_pixels(self) -> bool:
        """Whether the masks read the crops' pixels (an occluder or parser model); box, outline and landmark
        regions need only the crop's size, so a device executor need not copy the crops back for them."""
        return self.occluder is not None or self.parser is not None

    def crops_from(self, host: Callable[[], npt.NDArray[np.uint8]], n: int, size: int) -> npt.NDArray[np.uint8]:
        """The N×S×S×3 crops `__call__` takes: `host()` (the crops copied to the host) when the masks read pixels,
        else a zero-copy blank of that shape."""
        if self.needs_pixels:
            return host()
        return np.broadcast_to(np.zeros((1, 1, 1, 3), np.uint8), (n, size, size, 3))

    def describe(self) -> dict[str, Any]:
        """The mask models used, for the sidecar."""
        out: dict[str, Any] = {"kinds": list(self.kinds)}
        for role, loaded in (("occluder", self.occluder), ("parser", self.parser)):
            if loaded is not None:
                out[role] = loaded.describe()
        if "region" in self.kinds:
            out["regions"] = list(self.regions)
            if self.parser is None:
                out["parser"] = "landmarks"
        return out

    def __call__(self, crops: npt.NDArray[np.uint8], landmarks68: Sequence[npt.ArrayLike | None]) -> list[Mask]:
        """The masks of N aligned face crops (N×S×S×3 uint8 RGB, the target's pixels before processing) whose 68
        landmarks (crop pixels; None where the analyser gives only 5) are given: N S×S float32 masks in [0, 1].
        Each model runs once for all N crops."""
        n, size = len(crops), crops.shape[1] if len(crops) else 0
        if len(landmarks68) != n:
            raise ValueError(f"{n} crops but {len(landmarks68)} landmark sets")
        if n == 0:
            return []
        masks = [np.ones((size, size), np.float32) for _ in range(n)]
        if "box" in self.kinds:
            box = box_mask(size, (self.padding,) * 4, self.blur)
            masks = [m * box for m in masks]
        else:
            edge = box_mask(size, (0.0,) * 4, EDGE_BLUR)
            masks = [m * edge for m in masks]
        if "face" in self.kinds:
            masks = [m * self._face(size, points) for m, points in zip(masks, landmarks68, strict=True)]
        restricted = self.restrictions(crops, landmarks68)
        return [np.clip(m * r, 0.0, 1.0).astype(np.float32) for m, r in zip(masks, restricted, strict=True)]

    def restrictions(self, crops: npt.NDArray[np.uint8], landmarks68: Sequence[npt.ArrayLike | None]) -> list[Mask]:
        """The model masks alone (occlusion × region; all 1 where neither is chosen), as `__call__` takes them:
        for a processor that draws its own outline (landmark_warp)."""
        size = crops.shape[1]
        masks = [np.ones((size, size), np.float32) for _ in range(len(crops))]
        if self.occluder is not None:
            masks = [m * v for m, v in zip(masks, self._occlusion(crops), strict=True)]
        if "region" in self.kinds:
            parts = self._parsed(crops) if self.parser is not None else self._landmark_regions(size, landmarks68)
            masks = [m * p for m, p in zip(masks, parts, strict=True)]
        return masks

    def _face(self, size: int, points: npt.ArrayLike | None) -> Mask:
        if points is None:
            return np.ones((size, size), np.float32)
        pts = np.asarray(points, np.float32)
        span = pts.max(axis=0) - pts.min(axis=0)
        feather = self.blur * 0.2 * float(max(span[0], span[1], 1.0))
        return landmark_mask((size, size), pts, exclude_mouth=self.keep_mouth, blur_px=feather)

    def _occlusion(self, crops: npt.NDArray[np.uint8]) -> list[Mask]:
        """1 where the face is visible, 0 where the occluder sees something in front of it (ramped outside)."""
        assert self.occluder is not None
        spec = self.occluder.spec
        side = spec.input_size or 256
        (out, *_) = self.occluder.session.run({spec.io.input: _tensor(crops, spec.io, side)})
        visible = np.asarray(out, np.float32).reshape(len(crops), side, side)
        size = crops.shape[1]
        return [_keep_where(_resize(v, size) < 0.5, size) for v in np.clip(visible, 0.0, 1.0)]

    def _parsed(self, crops: npt.NDArray[np.uint8]) -> list[Mask]:
        """1 on the chosen regions as the parser labels each pixel, 0 elsewhere (ramped inside)."""
        assert self.parser is not None
        spec = self.parser.spec
        side = spec.input_size or 512
        (logits, *_) = self.parser.session.run({spec.io.input: _tensor(crops, spec.io, side)})
        labels = np.asarray(logits).argmax(axis=1)
        chosen = np.isin(labels, [PARSER_LABELS[r] for r in self.regions])
        size = crops.shape[1]
        return [
            _keep_where(cv2.resize((~c).astype(np.uint8), (size, size), interpolation=cv2.INTER_NEAREST) > 0, size)
            for c in chosen
        ]

    def _landmark_regions(self, size: int, landmarks68: Sequence[npt.ArrayLike | None]) -> list[Mask]:
        out = []
        for points in landmarks68:
            if points is None:
                raise InvalidJob(
                    "the region mask needs a face parser (`launch.py models fetch bisenet_resnet_34`) or 68-point "
                    "landmarks (faces.analyser=embedded)"
                )
            chosen = landmark_regions(size, np.asarray(points, np.float64), self.regions)
            out.append(_keep_where(~chosen, size))
        return out


def landmark_regions(size: int, points: npt.NDArray[np.float64], regions: Sequence[str]) -> npt.NDArray[np.bool_]:
    """size×size bool: the chosen regions of a face from its 68 landmarks (crop pixels). `skin` is the face's
    outline (jaw, and the brows raised onto the forehead) less every other part; `glasses` has no landmarks."""
    span = points.max(axis=0) - points.min(axis=0)
    scale = float(max(span[0], span[1], 1.0))
    parts = {name: _polygon(size, points[list(ids)], grow * scale) for name, (ids, grow) in LANDMARK_REGIONS.items()}
    chosen = np.zeros((size, size), bool)
    for name in regions:
        if name in parts:
            chosen |= parts[name]
    if "skin" in regions:
        up = points[BROWS].mean(axis=0) - points[CHIN]
        outline = np.concatenate([points[JAW], points[BROWS] + FOREHEAD_RAISE * up])
        skin = _polygon(size, cv2.convexHull(outline.astype(np.float32))[:, 0], 0.0)
        for part in parts.values():
            skin &= ~part
        skin &= ~_polygon(size, points[INNER_MOUTH], 0.0)
        chosen |= skin
    return chosen


def _polygon(size: int, points: npt.ArrayLike, grow: float) -> npt.NDArray[np.bool_]:
    canvas = np.zeros((size, size), np.uint8)
    cv2.fillPoly(canvas, [np.rint(np.asarray(points, np.float64) * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
    radius = round(grow)
    if radius > 0:
        canvas = cv2.dilate(canvas, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2))
    return canvas.astype(bool)


def _keep_where(kept: npt.NDArray[np.bool_], size: int) -> Mask:
    """A mask exactly 0 on `kept` (the target's pixels stay) that rises to 1 away from it: `kept` grown by three
    sigma, then blurred by a Gaussian cut at three sigma (sigma = MODEL_SIGMA of the crop), so the ramp lies
    wholly outside `kept`."""
    sigma = max(MODEL_SIGMA * size, 0.5)
    radius = int(np.ceil(3 * sigma))
    grown = cv2.dilate(kept.astype(np.uint8), cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2))
    soft = cv2.GaussianBlur(grown.astype(np.float32), (2 * radius + 1,) * 2, sigma, borderType=cv2.BORDER_REPLICATE)
    out = 1.0 - soft
    out[kept] = 0.0
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def _resize(mask: npt.NDArray[np.float32], size: int) -> npt.NDArray[np.float32]:
    if mask.shape[0] == size:
        return mask
    return cv2.resize(mask, (size, size), interpolation=cv2.INTER_LINEAR)


def _tensor(crops: npt.NDArray[np.uint8], io: Any, side: int) -> npt.NDArray[np.float32]:
    """The crops resized to the model's side and normalised by its spec, in its layout."""
    if crops.shape[1] != side:
        interpolation = cv2.INTER_AREA if crops.shape[1] > side else cv2.INTER_LINEAR
        crops = np.stack([cv2.resize(c, (side, side), interpolation=interpolation) for c in crops])
    tensor = to_tensor(crops, io)
    return np.ascontiguousarray(tensor.transpose(0, 2, 3, 1)) if io.layout == "NHWC" else tensor


def _present_parser(runtime: Runtime) -> str | None:
    """The first face parser with a file here (none is downloaded for `auto`)."""
    for model_id in PARSERS:
        spec = runtime.manifest.models.get(model_id)
        if spec is not None and any(runtime.local_path(f).is_file() for f in spec.files):
            return model_id
    return None


def blend(before: Frame, after: Frame, mask: Mask, affine: npt.NDArray[np.float64]) -> Frame:
    """`after` where a crop-space mask (S×S float32 in [0, 1] on the crop `affine` cuts, frame → crop) says so,
    `before` where it is 0: out = m·after + (1 − m)·before at frame resolution, m the mask warped into the frame
    (1 beyond the crop: only what the mask covers is restricted). Both frames H×W×3 uint8 RGB of one size."""
    if before.shape != after.shape:
        raise ValueError(f"frames differ in size: {before.shape} and {after.shape}")
    weight = to_frame(mask, affine, before.shape, outside=1.0)[..., None]
    mixed = weight * after.astype(np.float32) + (1.0 - weight) * before.astype(np.float32)
    return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)


def to_frame(mask: Mask, affine: npt.NDArray[np.float64], shape: tuple[int, ...], outside: float = 0.0) -> Mask:
    """A crop-space mask (S×S, on the crop `affine` cuts: frame → crop) in the frame's pixels: H×W float32 for a
    frame of `shape` (H, W, …), `outside` beyond the crop."""
    inverse = cv2.invertAffineTransform(np.asarray(affine, np.float64))
    return cv2.warpAffine(
        np.ascontiguousarray(mask, np.float32), inverse, (shape[1], shape[0]), flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT, borderValue=outside,
    )  # fmt: skip
