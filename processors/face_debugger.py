"""Face debugger: draws what the face stage decided on each frame — every chosen face's box, its 5 and 68
landmarks, the paste-back mask of the chain's first face processor that pastes faces back (a swapper, the deep
swapper, the age modifier, the face editor, the face enhancer, in that order), the person number, the
detection score and the identity distance to the face's source. At the end of any chain (after an upscaler too:
the drawing is scaled to the frame), or as the studio preview's toggle.

Colours: each person has their own (the box, the label, the mask's tint); faces without a person number are
white. 5 landmarks are filled discs, 68 landmarks small dots. The label reads `#2 · 0.87 · d 0.41`: person 2,
detection score 0.87, identity distance 0.41 in the analyser's metric (below its threshold, 0.6 for both
analysers, is the same person). The distance is measured on the frame as it reaches the debugger (`result`: a
swapped face re-found and embedded, as identity QA does) or on the target's face (`target`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import cv2
import numpy as np
from pydantic import BeforeValidator, Field

from engine.core.options import Shown
from engine.core.types import Face, Frame, Mask
from engine.faces.masker import listed
from engine.job.processor import BoundJob, FrameContext, FrameProcessor, ProcessorOptions
from engine.models.runtime import Runtime
from engine.run.face_stage import build_analyser
from processors.age_modifier import AgeModifier
from processors.deep_swapper import DeepSwapper
from processors.face_editor import FaceEditor
from processors.face_enhancer import FaceEnhancer
from processors.face_swapper import FaceSwapper

Layer = Literal["box", "landmarks5", "landmarks68", "mask", "label"]
LAYERS: tuple[str, ...] = Layer.__args__  # type: ignore[attr-defined]
# Person colours (RGB), by person number modulo their count: distinct on skin, hair and most backgrounds.
PALETTE = (
    (255, 140, 0), (0, 200, 255), (255, 60, 160), (120, 230, 60), (255, 230, 0), (170, 110, 255), (0, 255, 170),
    (255, 90, 70),
)  # fmt: skip
UNNUMBERED = (255, 255, 255)
LANDMARKS5 = (40, 255, 40)
LANDMARKS68 = (0, 230, 255)
MASK_TINT = 0.45  # how strongly the mask tints the face, at mask 1
# The processors whose paste-back mask the debugger shows, in the order it looks for them in the chain.
MASKED: dict[str, type[FaceSwapper | DeepSwapper | AgeModifier | FaceEditor | FaceEnhancer]] = {
    cls.id: cls for cls in (FaceSwapper, DeepSwapper, AgeModifier, FaceEditor, FaceEnhancer)
}


class FaceDebuggerOptions(ProcessorOptions):
    show: Annotated[tuple[Layer, ...], BeforeValidator(listed)] = Field(
        default=LAYERS,
        description="what to draw: face boxes, 5 and 68 landmarks, the paste-back mask, and the label (person, "
        "detection score, identity distance)",
    )
    distance: Annotated[Literal["result", "target", "off"], Shown(when={"show": ("label",)})] = Field(
        default="result",
        description="identity distance to the face's source: of the face as it reaches the debugger (re-found "
        "and embedded), of the target's face, or none",
    )


class FaceDebugger(FrameProcessor[FaceDebuggerOptions]):
    """Draws the faces of `ctx.faces` on each frame (see the module docstring)."""

    id: ClassVar[str] = "face_debugger"
    title: ClassVar[str] = "Face debugger"
    Options: ClassVar[type[ProcessorOptions]] = FaceDebuggerOptions
    needs_faces: ClassVar[bool] = True
    draws_only: ClassVar[bool] = True
    needs_people: bool = True

    def __init__(self, options: FaceDebuggerOptions, runtime: Runtime) -> None:
        super().__init__(options, runtime)
        self.masked: FaceSwapper | DeepSwapper | AgeModifier | FaceEditor | FaceEnhancer | None = None
        self.analyser: Any = None

    def bind_job(self, job: BoundJob) -> None:
        """The mask shown is that of the chain's first processor in MASKED, built from its options on the same
        runtime (its models are the chain's, already loaded); the distance uses the job's analyser."""
        if "mask" in self.options.show:
            pid = next((p for p in MASKED if p in job.processors), None)
            if pid is not None:
                self.masked = MASKED[pid](job.options[pid], self.runtime)  # type: ignore[arg-type]
        if "label" in self.options.show and self.options.distance != "off":
            self.analyser = build_analyser(job.faces, self.runtime)

    def describe(self) -> dict[str, Any]:
        return {"options": self.options.model_dump(mode="json"), "mask_of": getattr(self.masked, "id", None)}

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Each frame (H×W×3 uint8 RGB, any size: faces found on the input are scaled to it) with its faces drawn."""
        return [self._draw(frame, ctx) for frame, ctx in zip(frames, ctxs, strict=True)]

    def _draw(self, frame: Frame, ctx: FrameContext) -> Frame:
        if not ctx.faces:
            return frame
        original = ctx.original if ctx.original is not None else frame
        scale = (frame.shape[1] / original.shape[1], frame.shape[0] / original.shape[0])
        out = np.ascontiguousarray(frame.copy())
        show = self.options.show
        if "mask" in show and self.masked is not None:
            for face, mask in zip(ctx.faces, self.masked.frame_masks(original, ctx.faces), strict=True):
                out = tint(out, _scaled_mask(mask, frame.shape), colour_of(face))
        distances = self._distances(frame, original, ctx) if "label" in show else [None] * len(ctx.faces)
        thickness = line_width(frame)
        for face, distance in zip(ctx.faces, distances, strict=True):
            colour = colour_of(face)
            box = tuple(v * scale[i % 2] for i, v in enumerate(face.box))
            if "box" in show:
                draw_box(out, box, colour, thickness)  # type: ignore[arg-type]
            if "landmarks68" in show and face.landmarks68 is not None:
                for x, y in face.landmarks68 * scale:
                    cv2.circle(out, (round(x), round(y)), max(1, thickness // 2), LANDMARKS68, -1, cv2.LINE_AA)
            if "landmarks5" in show:
                for x, y in face.landmarks5 * scale:
                    cv2.circle(out, (round(x), round(y)), thickness + 1, LANDMARKS5, -1, cv2.LINE_AA)
            if "label" in show:
                draw_label(out, box, label(face, distance), colour, thickness)  # type: ignore[arg-type]
        return out

    def _distances(self, frame: Frame, original: Frame, ctx: FrameContext) -> list[float | None]:
        """Each face's identity distance to its source (None without a source, an analyser or an embedding)."""
        sources = [ctx.source_for(face) for face in ctx.faces]
        if self.analyser is None or all(s is None for s in sources):
            return [None] * len(ctx.faces)
        if self.options.distance == "target" or frame.shape != original.shape:
            faces = [f if f.embedding is not None else None for f in ctx.faces]
            missing = [f for f in ctx.faces if f.embedding is None]
            embedded = iter(self.analyser.embed(original, missing))
            measured = [f if f is not None else next(embedded) for f in faces]
        else:
            found = [self.analyser.refit(frame, f) or f for f in ctx.faces]
            measured = self.analyser.embed(frame, found)
        return [
            None if s is None or m.embedding is None else float(self.analyser.distance(m.embedding, s.embedding))
            for s, m in zip(sources, measured, strict=True)
        ]


def colour_of(face: Face) -> tuple[int, int, int]:
    """The person's colour (RGB); white for a face without a person number."""
    return UNNUMBERED if face.person is None else PALETTE[face.person % len(PALETTE)]


def line_width(frame: Frame) -> int:
    """Line width in px for a frame: readable when a 4K frame is shown small."""
    return max(1, round(max(frame.shape[:2]) / 400))


def label(face: Face, distance: float | None) -> str:
    person = "P?" if face.person is None else f"P{face.person}"  # as the studio labels people (face_label)
    return " · ".join([person, f"{face.score:.2f}", *([] if distance is None else [f"d {distance:.2f}"])])


def draw_box(frame: Frame, box: tuple[float, float, float, float], colour: tuple[int, int, int], width: int) -> None:
    """Draw the box's outline in place: its left and top edges on the box's first column and row, its right and
    bottom ones on its last (x2, y2 exclusive), `width` px inward from there."""
    x1, y1, x2, y2 = (round(v) for v in box)
    for inset in range(width):
        cv2.rectangle(frame, (x1 + inset, y1 + inset), (x2 - 1 - inset, y2 - 1 - inset), colour, 1)


def draw_label(
    frame: Frame, box: tuple[float, float, float, float], text: str, colour: tuple[int, int, int], width: int
) -> None:
    """The label on a filled tag of the person's colour just above the box (below it at the frame's top)."""
    scale = max(0.4, max(frame.shape[:2]) / 1400)
    ascii_text = text.replace("·", "|")  # Hershey fonts are ASCII only
    (tw, th), base = cv2.getTextSize(ascii_text, cv2.FONT_HERSHEY_SIMPLEX, scale, width)
    x1, y1, _, y2 = (round(v) for v in box)
    top = y1 - th - base - 2 * width
    if top < 0:
        top = y2
    cv2.rectangle(frame, (x1, top), (x1 + tw + 2 * width, top + th + base + 2 * width), colour, -1)
    cv2.putText(
        frame, ascii_text, (x1 + width, top + th + width), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), width,
        cv2.LINE_AA,
    )  # fmt: skip


def tint(frame: Frame, mask: Mask, colour: tuple[int, int, int]) -> Frame:
    """`frame` tinted with `colour` where `mask` (H×W in [0, 1]) is above 0, MASK_TINT·mask strong; its 0.5
    contour drawn in the colour."""
    weight = (MASK_TINT * np.clip(mask, 0.0, 1.0))[..., None]
    out = np.rint(frame * (1.0 - weight) + np.array(colour, np.float32) * weight).astype(np.uint8)
    contours, _ = cv2.findContours((mask >= 0.5).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(out, contours, -1, colour, 1, cv2.LINE_AA)
    return out


def _scaled_mask(mask: Mask, shape: tuple[int, ...]) -> Mask:
    if mask.shape[:2] == shape[:2]:
        return mask
    return cv2.resize(mask, (shape[1], shape[0]), interpolation=cv2.INTER_LINEAR)
