"""Two swappers blended (`face_swapper.secondary`): the second gets the first's aligned crop (resized to its own
size), its identity from its own chain, and the two swapped faces are mixed before paste-back; blend 0 is the
first alone, exactly; a second swapper of another crop template is refused naming the ones that fit; the CLI
runs the blend end to end and the sidecar names both models."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import tiny_graphs
import toolbox_kit as kit
from test_buffalo_inswapper import tiny_arcface

from engine.core.errors import InvalidJob
from engine.faces.embedded import EmbeddedAnalyser
from engine.job.processor import FrameContext
from engine.job.settings import Job, RuntimeSettings
from engine.media import demo
from engine.models.manifest import IOSpec, Manifest
from engine.models.runtime import Runtime
from engine.run.face_stage import load_sources
from processors import REGISTRY
from processors.face_swapper import FaceSwapper, FaceSwapperOptions

FIRST, SECOND = "ghost_1_256", "simswap_unofficial_512"  # both cut on arcface_112_v1, at 256 and 512 px


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("blend")
    catalogue = Manifest.load()
    made = {}
    for seed, model_id in enumerate((FIRST, SECOND, "hyperswap_1a_256")):
        made[model_id] = root / f"{model_id}.onnx"
        tiny_graphs.swapper(made[model_id], catalogue.get(model_id).io, seed=seed)
    for model_id in ("crossface_ghost", "crossface_simswap"):
        made[model_id] = root / f"{model_id}.onnx"
        tiny_graphs.converter(made[model_id])
    made["buffalo_l_w600k_r50"] = root / "arcface.onnx"
    tiny_arcface(made["buffalo_l_w600k_r50"])
    return made


@pytest.fixture
def env(graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kit.use(monkeypatch, kit.catalogue(tmp_path, graphs), tmp_path / "models")
    return tmp_path


def swap(analyser: EmbeddedAnalyser, **options: object) -> tuple[np.ndarray, np.ndarray, FaceSwapper, list]:
    """The demo photo's face swapped with these options (box mask, no colour transfer): (the frame, the result,
    the processor, the log of both swappers' calls in call order)."""
    opts = FaceSwapperOptions(mask=("box",), colour="none", backend="onnx", **options)  # type: ignore[arg-type]
    processor = FaceSwapper(opts, Runtime(RuntimeSettings(device="cpu")))
    log: list = []
    processor.swapper = kit.wrap(processor.swapper, log)
    if processor.second is not None:
        second, recogniser, converter = processor.second
        processor.second = (kit.wrap(second, log), recogniser, converter)
    frame = demo.photo()
    (face,) = analyser.detect(frame)
    source = load_sources(analyser, [demo.source_photo()])
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,), source=source, original=frame)])
    return frame, out, processor, log


@pytest.mark.parametrize(("first", "second"), [(FIRST, SECOND), (SECOND, FIRST)])
def test_both_get_the_same_crop_and_their_faces_are_mixed(
    first: str, second: str, env: Path, analyser: EmbeddedAnalyser
) -> None:
    frame, out, processor, log = swap(analyser, model=first, secondary=second, secondary_blend=30)
    assert [entry[0] for entry in log] == [first, second]
    (_, first_in, first_out), (_, second_in, second_out) = log
    catalogue = Manifest.load()
    io1, io2 = catalogue.get(first).io, catalogue.get(second).io
    own = catalogue.get(second).input_size
    # The second gets the first's crop (its pixels, as the first's spec normalised them) resized to its size.
    resized = cv2.resize(pixels(first_in[io1.input], io1), (own, own), interpolation=cv2.INTER_AREA)
    assert np.abs(pixels(second_in[io2.input], io2).astype(int) - resized).max() <= 1
    # Each swapper's identity comes through its own converter: the two identities differ.
    assert not np.allclose(first_in[str(io1.source)], second_in[str(io2.source)])
    assert not np.allclose(first_out[0].mean(), second_out[0].mean())
    assert processor.describe()["secondary"]["model"] == second
    # The mix: 30 % of the way from the first swapper's face alone to the second's alone, pixel by pixel.
    alone = swap(analyser, model=first)[1].astype(np.float32)
    only_second = swap(analyser, model=first, secondary=second, secondary_blend=100)[1]
    assert np.abs(only_second - alone).max() > 5  # the second swapper counts
    assert np.abs(out - (alone + 0.3 * (only_second - alone))).max() <= 2


def pixels(tensor: np.ndarray, io: IOSpec) -> np.ndarray:
    """A 1×3×S×S input tensor normalised by `io` back to S×S×3 uint8 RGB."""
    planes = tensor[0].transpose(1, 2, 0) * np.float32(io.std) + np.float32(io.mean)
    rgb = planes[:, :, ::-1] if io.colour == "BGR" else planes
    return np.clip(np.rint(rgb * 255.0), 0, 255).astype(np.uint8)


def test_blend_0_is_the_first_swapper_alone_exactly(env: Path, analyser: EmbeddedAnalyser) -> None:
    _, alone, _, _ = swap(analyser, model=FIRST)
    _, out, _, log = swap(analyser, model=FIRST, secondary=SECOND, secondary_blend=0)
    assert [entry[0] for entry in log] == [FIRST, SECOND]
    np.testing.assert_array_equal(out, alone)


def test_a_second_swapper_of_another_template_is_refused_naming_those_that_fit() -> None:
    raw = {"target": "t.png", "output": "o.png", "processors": ["face_swapper"],
           "face_swapper": {"model": "hyperswap_1a_256", "secondary": FIRST}}  # fmt: skip
    with pytest.raises(InvalidJob) as info:
        Job.parse(raw, REGISTRY)
    message = str(info.value)
    assert "ghost_1_256 cuts faces on arcface_112_v1, hyperswap_1a_256 on arcface_128" in message
    assert "inswapper_128, inswapper_128_fp16, hyperswap_1b_256, hyperswap_1c_256" in message and "\n" not in message
    with pytest.raises(InvalidJob, match="the second swapper is the first one"):
        Job.parse({**raw, "face_swapper": {"model": FIRST, "secondary": FIRST}}, REGISTRY)
    with pytest.raises(InvalidJob, match="unknown second face_swapper model 'landmark_warp'"):
        Job.parse({**raw, "face_swapper": {"model": FIRST, "secondary": "landmark_warp"}}, REGISTRY)
    needed = FaceSwapper.model_ids(FaceSwapperOptions(model=FIRST, secondary=SECOND))
    assert needed == [FIRST, "buffalo_l_w600k_r50", "crossface_ghost", SECOND, "crossface_simswap"]


def test_the_blend_through_the_cli(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = kit.clip(env), env / "blend.mp4"
    code, _, err = kit.run(
        capsys, "--source", str(demo.source_photo()), "--target", str(target), "--output", str(out),
        "--processors", "face_swapper", "--set", f"face_swapper.model={FIRST}",
        "--set", f"face_swapper.secondary={SECOND}", "--set", "faces.selector=many", "--set", "video.crf=0",
    )  # fmt: skip
    assert code == 0, err
    kit.check_timing(target, out)
    described = json.loads(out.with_name(out.name + ".job.json").read_text())["processors"]["face_swapper"]
    assert described["model"] == FIRST and described["secondary"]["model"] == SECOND
    assert described["secondary"]["converter"]["model"] == "crossface_simswap"
