"""The face debugger draws where the faces are: box edges on each face's box, landmarks on their points, the mask
of the chain's face swapper, a label above the box; scaled when it follows an upscaler; at the end of a run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import cli
from engine import media as video
from engine.core.types import Face, Frame
from engine.faces.embedded import EmbeddedAnalyser
from engine.job.processor import FrameContext
from engine.job.settings import Job
from engine.media import demo
from engine.models.runtime import Runtime
from engine.run.face_stage import load_sources
from processors import REGISTRY, build_chain
from processors.face_debugger import LANDMARKS5, PALETTE, UNNUMBERED, FaceDebugger, line_width


@pytest.fixture(scope="module")
def scene(analyser: EmbeddedAnalyser) -> tuple[Frame, Face]:
    frame = demo.frames(320, 180, 1)[0]
    (face,) = analyser.detect(frame)
    return frame, replace(face, person=2)


def debugger(job: Job | None = None, **options: object) -> FaceDebugger:
    processor = FaceDebugger(FaceDebugger.Options.model_validate(options), Runtime(Job.parse(_raw(), REGISTRY).runtime))
    if job is not None:
        processor.bind_job(job)
    return processor


def _raw(*processors: str) -> dict[str, object]:
    chain = list(processors) or ["face_debugger"]
    return {"target": "t.png", "output": "o.png", "processors": chain, "sources": [str(demo.source_photo())]}


def test_box_edges_lie_on_the_faces_box(scene: tuple[Frame, Face]) -> None:
    frame, face = scene
    (out,) = debugger(show=["box"]).process([frame], [FrameContext(0, faces=(face,))])
    x1, y1, x2, y2 = (round(v) for v in face.box)
    width = line_width(frame)
    edge = np.zeros(frame.shape[:2], bool)
    edge[y1:y2, x1:x2] = True
    edge[y1 + width : y2 - width, x1 + width : x2 - width] = False
    changed = np.any(out != frame, axis=2)
    assert np.array_equal(changed, edge & np.any(frame != PALETTE[2], axis=2))  # only the outline is drawn
    assert (out[edge] == PALETTE[2]).all()  # in person 2's colour
    for corner in ((y1, x1), (y1, x2 - 1), (y2 - 1, x1), (y2 - 1, x2 - 1)):
        assert tuple(out[corner]) == PALETTE[2]


def test_landmarks_are_drawn_on_their_points(scene: tuple[Frame, Face]) -> None:
    frame, face = scene
    (out,) = debugger(show=["landmarks5"]).process([frame], [FrameContext(0, faces=(face,))])
    for x, y in face.landmarks5:
        assert tuple(out[round(y), round(x)]) == LANDMARKS5
    changed = np.argwhere(np.any(out != frame, axis=2))
    # Every pixel drawn is within a dot's radius of one of the five points.
    nearest = np.min(np.linalg.norm(changed[:, None, ::-1] - face.landmarks5[None], axis=2), axis=1)
    assert nearest.max() <= (line_width(frame) + 1) + 1.75  # the radius, its antialiased rim, the rounding
    (out68,) = debugger(show=["landmarks68"]).process([frame], [FrameContext(0, faces=(face,))])
    assert all(np.any(out68[round(y), round(x)] != frame[round(y), round(x)]) for x, y in face.landmarks68[::7])


def test_the_label_sits_above_the_box_and_an_unnumbered_face_is_white(scene: tuple[Frame, Face]) -> None:
    frame, face = scene
    unnumbered = replace(face, person=None)
    (out,) = debugger(show=["box", "label"], distance="off").process([frame], [FrameContext(0, faces=(unnumbered,))])
    x1, y1, x2, _ = (round(v) for v in face.box)
    assert tuple(out[y1, x1 + 3]) == UNNUMBERED
    tag = out[:y1, x1:x2]
    assert np.any(np.all(tag == UNNUMBERED, axis=2)) and np.any(np.all(tag == (0, 0, 0), axis=2))  # tag and text
    assert np.array_equal(out[y1 + 10 :, : x1 - 1], frame[y1 + 10 :, : x1 - 1])  # nothing left of the face


def test_the_mask_in_use_is_the_swappers(scene: tuple[Frame, Face], analyser: EmbeddedAnalyser) -> None:
    frame, face = scene
    job = Job.parse(_raw("face_swapper", "face_debugger"), REGISTRY)
    chain = build_chain(job, Runtime(job.runtime))
    swapper, shown = chain
    assert shown.describe()["mask_of"] == "face_swapper"
    (mask,) = swapper.frame_masks(frame, [face])
    source = load_sources(analyser, [demo.source_photo()])
    ctx = FrameContext(0, faces=(face,), source=source, original=frame)
    (out,) = debugger(job, show=["mask"]).process([frame], [ctx])
    tinted = np.any(out != frame, axis=2)
    assert tinted[mask > 0.05].mean() > 0.95
    assert tinted[mask == 0].sum() <= 0.02 * tinted.sum()  # only the contour line may touch just outside
    assert tinted[mask > 0.5].all()


def test_after_an_upscaler_the_drawing_is_scaled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "face.png"
    video.write_image(target, demo.frames(320, 180, 1)[0])
    out = tmp_path / "out.png"
    args = ["run", "--target", str(target), "--output", str(out), "--source", str(demo.source_photo()), "--yes"]
    args += ["--processors", "face_swapper", "frame_enhancer", "face_debugger", "--set", "face_debugger.show=box"]
    assert cli.main(args) == 0, capsys.readouterr().err
    image = video.read_image(out)[0]
    sidecar = json.loads(Path(f"{out}.job.json").read_text())
    scale = image.shape[1] // 320
    assert scale >= 2 and sidecar["processors"]["face_debugger"]["mask_of"] is None
    (face,) = EmbeddedAnalyser("hog").detect(demo.frames(320, 180, 1)[0])
    x1, y1, x2, y2 = (round(v * scale) for v in face.box)
    # The box's left edge, in person 0's colour (the debugger has the run group faces into people), as wide as
    # the large frame's lines are.
    for column in range(x1, x1 + line_width(image)):
        edge = image[y1 + 5 : y2 - 5, column]
        assert (np.abs(edge.astype(int) - PALETTE[0]).max(axis=1) <= 40).mean() > 0.9
