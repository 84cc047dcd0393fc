"""The frame colourizer on stand-in DDColor and DeOldify graphs of the catalogue's signatures: the grey frame goes
in at the render size, the model's colour comes back joined to the frame's own lightness; blend 0 gives back the
frame and loads nothing; colours are held steady over a video where they only waver; a video keeps frames, times
and audio; a graph of other I/O is refused in one line; the file comes from a local HTTP server, sha256-checked."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import tiny_graphs
import toolbox_kit as kit
from conftest import Server

from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.runtime import Runtime
from processors.frame_colourizer import FrameColourizer, FrameColourizerOptions, grey, lightness


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("colour")
    made = {"ddcolor": root / "ddcolor.onnx", "deoldify": root / "deoldify.onnx"}
    tiny_graphs.ddcolor(made["ddcolor"])
    tiny_graphs.deoldify(made["deoldify"])
    tiny_graphs.wrong(root / "wrong.onnx")
    return made


@pytest.fixture
def env(graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kit.use(monkeypatch, kit.catalogue(tmp_path, graphs), tmp_path / "models")
    return tmp_path


def colourizer(**options: object) -> FrameColourizer:
    return FrameColourizer(FrameColourizerOptions(backend="onnx", **options), Runtime(RuntimeSettings(device="cpu")))  # type: ignore[arg-type]


def lab(frame: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(frame.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)


def test_ddcolor_colours_the_grey_frame_and_keeps_its_lightness(env: Path) -> None:
    frame = cv2.cvtColor(cv2.cvtColor(demo.photo(), cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)  # black and white
    processor = colourizer(size=192)
    log = kit.logged(processor, "model")
    (out,) = processor.process([frame], [FrameContext(index=0)])
    ((_, inputs, outputs),) = log
    # The frame's L* as a neutral grey at the render size, RGB in [0, 1].
    small = cv2.resize(grey(lightness(frame)), (192, 192), interpolation=cv2.INTER_AREA)
    np.testing.assert_allclose(inputs["input"], small.transpose(2, 0, 1)[None] / 255.0, atol=1e-6)
    assert outputs[0].shape == (1, 2, 192, 192)
    before, after = lab(frame), lab(out)
    # The lightness is the frame's own (to the rounding of 8-bit RGB); the colour is the model's a*b*.
    assert np.abs(after[:, :, 0] - before[:, :, 0]).mean() < 1.5  # less where the colour leaves the gamut
    expected = cv2.resize(outputs[0][0].transpose(1, 2, 0), (512, 512), interpolation=cv2.INTER_LINEAR)
    mid = (before[:, :, 0] > 30) & (before[:, :, 0] < 70)  # where sRGB's gamut holds the model's colour
    assert mid.mean() > 0.3
    assert np.abs(after[:, :, 2] - expected[:, :, 1])[mid].mean() < 2.0  # b* = 25
    assert np.abs(after[:, :, 1] - expected[:, :, 0])[mid].mean() < 2.0


def test_deoldify_takes_grey_0_255_and_gives_its_picture_colour(env: Path) -> None:
    frame = np.full((64, 96, 3), 128, np.uint8)
    processor = colourizer(model="deoldify", size=256)
    log = kit.logged(processor, "model")
    (out,) = processor.process([frame], [FrameContext(index=0)])
    ((_, inputs, outputs),) = log
    np.testing.assert_allclose(inputs["input"], np.full((1, 3, 256, 256), 128.0), atol=0.05)
    picture = np.clip(outputs[0][0].transpose(1, 2, 0), 0, 255).astype(np.float32) / 255.0
    sepia = cv2.cvtColor(picture, cv2.COLOR_RGB2LAB)[128, 128]
    np.testing.assert_allclose(lab(out)[32, 48, 1:], sepia[1:], atol=1.5)
    assert abs(lab(out)[32, 48, 0] - lab(frame)[32, 48, 0]) < 0.6
    assert out[32, 48, 0] > out[32, 48, 2] + 20  # warm


def test_blend_mixes_and_0_gives_back_the_frame_loading_nothing(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = demo.photo()
    full = colourizer(steady=False).process([frame], [FrameContext(index=0)])[0]
    half = colourizer(blend=50, steady=False).process([frame], [FrameContext(index=0)])[0]
    np.testing.assert_allclose(half, np.rint(frame * 0.5 + full * 0.5), atol=1)
    monkeypatch.setenv("FACESTUDIO_MODELS", str(env / "empty"))
    none = colourizer(blend=0)
    assert FrameColourizer.model_ids(none.options) == [] and none.model is None
    (out,) = none.process([frame], [FrameContext(index=0)])
    assert out is frame


def test_colours_that_waver_are_held_steady_and_changes_pass(env: Path) -> None:
    steady, plain = colourizer(), colourizer(steady=False)
    levels = [110, 122, 110, 122, 110, 122, 220]  # a flicker of 12 levels, then a real change
    outs = {}
    for name, processor in (("steady", steady), ("plain", plain)):
        outs[name] = [
            lab(processor.process([np.full((32, 32, 3), v, np.uint8)], [FrameContext(index=i, time=i / 25)])[0])
            for i, v in enumerate(levels)
        ]
    swing = {name: np.ptp([o[16, 16, 1] for o in outs[name][:6]]) for name in outs}
    assert swing["plain"] > 1.0 and swing["steady"] < 0.5 * swing["plain"]
    # The jump to level 200 is taken at once: the last frame's colour is the model's own.
    np.testing.assert_allclose(outs["steady"][-1][16, 16, 1:], outs["plain"][-1][16, 16, 1:], atol=0.5)


def test_a_video_keeps_its_frames_times_and_audio(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = kit.clip(env), env / "coloured.mp4"
    code, stdout, err = kit.run(
        capsys, "--target", str(target), "--output", str(out), "--processors", "frame_colourizer",
        "--set", "video.crf=0",
    )  # fmt: skip
    assert code == 0, err
    assert "frame_colourizer" in stdout
    kit.check_timing(target, out)
    for a, b in zip(kit.frames(target), kit.frames(out), strict=True):
        assert np.abs(a - b).mean() > 3


def test_a_graph_with_other_io_is_refused_at_load(
    graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kit.check_refused(tmp_path, monkeypatch, capsys, graphs, "ddcolor", "frame_colourizer")


def test_fetched_from_a_local_server_sha256_checked(
    graphs: dict[str, Path], server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kit.check_fetched(server, tmp_path, monkeypatch, capsys, "ddcolor", graphs["ddcolor"])
