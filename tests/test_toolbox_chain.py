"""The toolbox's face processors in a chain with the face debugger and identity QA: the debugger shows the
paste-back mask of each (the deep swapper, the age modifier, the face editor); identity QA measures the frame
after the last of them, as it does after a swapper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tiny_graphs
import toolbox_kit as kit

from engine import media
from engine.core.types import Face, Frame
from engine.faces.embedded import EmbeddedAnalyser
from engine.faces.qa import IdentityQA
from engine.job.processor import FrameContext
from engine.job.settings import Job
from engine.media import demo
from engine.models.runtime import Runtime
from processors import REGISTRY, build_chain
from processors.face_editor import EYES, LIPS, STITCHER


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chain")
    made = dict(tiny_graphs.live_portrait(root))
    for model_id, width in ((EYES, 66), (LIPS, 65)):
        made[model_id] = root / f"{model_id}.onnx"
        tiny_graphs.retargeter(made[model_id], width, 3)
    made[STITCHER] = root / "stitcher.onnx"
    tiny_graphs.stitcher(made[STITCHER])
    made["fran"], made["fairface"] = root / "fran.onnx", root / "fairface.onnx"
    tiny_graphs.fran(made["fran"])
    tiny_graphs.fairface(made["fairface"])
    tiny_graphs.dfm(root / "person.dfm", 128)
    return made


@pytest.fixture
def env(graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kit.use(monkeypatch, kit.catalogue(tmp_path, graphs), tmp_path / "models")
    return tmp_path


def options(pid: str, graphs: dict[str, Path]) -> dict[str, Any]:
    return {
        "deep_swapper": {"model_file": str(graphs["fran"].with_name("person.dfm"))},
        "age_modifier": {"amount": 30},
        "face_editor": {"smile": 60, "eyes": 30},
    }[pid]


@pytest.mark.parametrize("pid", ["deep_swapper", "age_modifier", "face_editor"])
def test_the_debugger_shows_each_ones_mask(
    pid: str, env: Path, graphs: dict[str, Path], analyser: EmbeddedAnalyser
) -> None:
    frame: Frame = demo.photo()
    (face,) = analyser.detect(frame)
    raw = {"target": "t.png", "output": "o.png", "processors": [pid, "face_debugger"], pid: options(pid, graphs),
           "face_debugger": {"show": ["mask"]}}  # fmt: skip
    job = Job.parse(raw, REGISTRY)
    processor, debugger = build_chain(job, Runtime(job.runtime))
    assert debugger.describe()["mask_of"] == pid
    (mask,) = processor.frame_masks(frame, [face])
    assert (mask > 0.5).mean() > 0.02
    (out,) = debugger.process([frame], [FrameContext(0, faces=(face,), original=frame)])
    tinted = np.any(out != frame, axis=2)
    assert tinted[mask > 0.5].mean() > 0.99  # (a pixel already of the tint colour stays)
    assert tinted[mask == 0].sum() <= 0.02 * tinted.sum()  # only the contour line may touch just outside


@pytest.mark.parametrize("chain", [["face_swapper", "age_modifier"], ["deep_swapper"], ["face_swapper", "face_editor"]])
def test_identity_qa_measures_the_frame_after_the_last_face_processor(
    chain: list[str], env: Path, graphs: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    measured: list[tuple[Frame, tuple[Face, ...]]] = []
    check = IdentityQA.check

    def spy(self: IdentityQA, index: int, before: Frame, after: Frame, faces: tuple[Face, ...]) -> None:
        measured.append((after, tuple(faces)))
        check(self, index, before, after, faces)

    monkeypatch.setattr(IdentityQA, "check", spy)
    target, out = env / "t.png", env / "o.png"
    media.write_image(target, demo.photo())
    sets = [f"{pid}.{k}={v}" for pid in chain if pid != "face_swapper" for k, v in options(pid, graphs).items()]
    code, _, err = kit.run(
        capsys, "--source", str(demo.source_photo()), "--target", str(target), "--output", str(out),
        "--processors", *chain, *(a for s in sets for a in ("--set", s)),
    )  # fmt: skip
    assert code == 0, err
    ((after, faces),) = measured
    assert len(faces) == 1
    np.testing.assert_array_equal(after, media.read_image(out)[0])  # the output: what the last of them made
    identity = json.loads(out.with_name("o.png.job.json").read_text())["faces"]["identity"]
    assert identity["faces_checked"] == 1 and identity["mean_distance_after"] > 0
