"""Every catalogue swapper end to end through the CLI, on tiny generated graphs with its real signature (names,
types, shapes as the manifest declares them), pinned by sha256 in a temp manifest: a 4-frame video with two
faces on every frame, processed 4 frames per batch, on both backends; the offline error of each with the real
catalogue; and a swapper added to a catalogue by one entry alone, no code.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import pytest
import tiny_graphs
from test_buffalo_inswapper import CountingSession, tiny_arcface

import cli
from engine import media as video
from engine.core import metrics
from engine.media import demo
from engine.models.manifest import IOSpec, Manifest
from engine.models.runtime import LoadedModel, Runtime

SWAPPERS = [
    "hyperswap_1a_256", "hyperswap_1b_256", "hyperswap_1c_256", "ghost_1_256", "ghost_2_256", "ghost_3_256",
    "simswap_256", "simswap_unofficial_512", "hififace_unofficial_256", "uniface_256", "blendswap_256",
]  # fmt: skip
CONVERTERS = ["crossface_ghost", "crossface_simswap", "crossface_hififace"]
RECOGNISER = "buffalo_l_w600k_r50"
FRAMES, FPS = 4, 8

# A swapper added by a catalogue entry alone: 192 px crops on mtcnn_512, a converted identity, pixel boost 384.
NEW_ENTRY = """
[models.test_swap_192]
task = "face_swapper"
title = "a swapper only this catalogue knows"
licence = "Test-1.0"
commercial_use = true
homepage = "https://example.invalid/test_swap"
arch = "test_swap"
input_size = 192
template = "mtcnn_512"

[models.test_swap_192.io]
input = "crop"
source = "identity"
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]
output_range = [-1.0, 1.0]
batch = 1
inputs = [{ name = "identity", shape = [1, 512] }, { name = "crop", shape = [1, 3, 192, 192] }]
outputs = [{ name = "swapped", shape = [1, 3, 192, 192] }]

[models.test_swap_192.swap]
source = "embedding"
recogniser = "buffalo_l_w600k_r50"
embedding = "raw"
converter = "crossface_simswap"
normalise = true
pixel_boost = [192, 384]

[[models.test_swap_192.files]]
format = "onnx"
filename = "test_swap_192.onnx"
url = "@URL@"
size = @SIZE@
sha256 = "@SHA256@"
"""


@dataclass
class Env:
    root: Path
    manifest: Path
    clip: Path
    frames: list[npt.NDArray[np.uint8]]
    boxes: list[tuple[int, int, int, int]]  # the two faces (x1, y1, x2, y2) on frame 0
    calls: dict[str, list[int]]


_spied: dict[str, list[int] | None] = {"calls": None}


def _spying_load(original):  # type: ignore[no-untyped-def]
    """Runtime.load that, during a run, counts the batch sizes of the swapper's calls."""

    def load(self: Runtime, model_id: str, backend: str | None = None) -> LoadedModel:
        model = original(self, model_id, backend)
        calls = _spied["calls"]
        if calls is None or model.spec.task != "face_swapper":
            return model
        session = CountingSession(model.session)
        session.calls = calls
        return LoadedModel(model.spec, model.file, session)  # type: ignore[arg-type]

    return load


def two_faces(shift: int = 0) -> npt.NDArray[np.uint8]:
    """400×200 RGB: the astronaut's face and its mirror image side by side, moved right by `shift` px."""
    face = cv2.resize(demo.photo()[20:340, 100 - shift : 420 - shift], (200, 200), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(np.hstack([face, face[:, ::-1]]))


def write_clip(path: Path, frames: list[npt.NDArray[np.uint8]], fps: int, audio: Path | None = None) -> Path:
    """An H.264 (near-lossless) mp4 of `frames` at `fps`, with `audio` muxed in when given."""
    h, w = frames[0].shape[:2]
    args = [video.find_ffmpeg(), "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
            "-r", str(fps), "-i", "-"]  # fmt: skip
    if audio is not None:
        args += ["-i", str(audio), "-c:a", "aac", "-shortest"]
    args += ["-c:v", "libx264", "-crf", "4", "-pix_fmt", "yuv420p", str(path)]
    subprocess.run(args, input=b"".join(f.tobytes() for f in frames), check=True)
    return path


def read_frames(path: Path) -> list[npt.NDArray[np.int16]]:
    with video.FrameReader(path) as reader:
        return [f.astype(np.int16) for f in reader]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("swappers")
    mirror = root / "mirror"
    real = Manifest.load()
    files: dict[str, Path] = {}
    for model_id in SWAPPERS:
        files[model_id] = mirror / f"{model_id}.onnx"
        tiny_graphs.swapper(files[model_id], real.get(model_id).io, seed=len(files))
    for model_id in CONVERTERS:
        files[model_id] = mirror / f"{model_id}.onnx"
        tiny_graphs.converter(files[model_id])
    files[RECOGNISER] = mirror / "arcface.onnx"
    tiny_arcface(files[RECOGNISER])
    manifest = tiny_graphs.write_manifest(root / "manifest.toml", files)
    frames = [two_faces(i) for i in range(FRAMES)]
    clip = write_clip(root / "two.mp4", frames, FPS)
    from engine.faces.embedded import EmbeddedAnalyser

    boxes = sorted(tuple(int(v) for v in f.box) for f in EmbeddedAnalyser("hog").detect(frames[0]))
    assert len(boxes) == 2
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Runtime, "load", _spying_load(Runtime.load))
        yield Env(root, manifest, clip, frames, boxes, {})  # type: ignore[arg-type]


def run(env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, *extra: str,
        manifest: Path | None = None) -> tuple[int, Path, str]:  # fmt: skip
    for key, value in {
        "FACESTUDIO_MANIFEST": str(manifest or env.manifest),
        "FACESTUDIO_MODELS": str(env.root / f"models_{name}"),
        "FACESTUDIO_CACHE": str(env.root / "cache"),
        "FACESTUDIO_HOME": str(env.root / "home"),
    }.items():
        monkeypatch.setenv(key, value)
    out = env.root / f"{name}.mp4"
    env.calls[name] = _spied["calls"] = []
    try:
        code = cli.main([
            "run", "--source", str(demo.source_photo()), "--target", str(env.clip), "--output", str(out),
            "--processors", "face_swapper", "--set", "faces.selector=many", "--set", "runtime.batch=4",
            "--set", "face_swapper.colour=none", "--set", "video.crf=0", *extra, "--yes",
        ])  # fmt: skip
    finally:
        _spied["calls"] = None
    return code, out, capsys.readouterr().err


def check_swapped(env: Env, out: Path, sidecar: dict) -> None:
    """8 faces processed (2 on each of 4 frames, in one batch of 4); the faces changed, the rest did not."""
    assert sidecar["faces"]["processed"] == 2 * FRAMES
    assert sidecar["output"]["frames"] == FRAMES
    before, after = read_frames(env.clip), read_frames(out)
    assert len(after) == FRAMES
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        diff = np.abs(a - b).max(axis=2)
        for x1, y1, x2, y2 in env.boxes:
            cx, cy, q = (x1 + x2) // 2 + i, (y1 + y2) // 2, (x2 - x1) // 4
            assert diff[cy - q : cy + q, cx - q : cx + q].mean() > 20, f"frame {i}: a face did not change"
        # The bottom band (below both faces' crops at this scale) stays as it was, within the noise of a second
        # 4:2:0 encode (about 2 levels).
        assert diff[185:].mean() < 2.5, f"frame {i}: pixels far from the faces changed"


@pytest.mark.parametrize("backend", ["onnx", "torch"])
@pytest.mark.parametrize("model_id", SWAPPERS)
def test_every_swapper_runs_end_to_end(
    model_id: str, backend: str, env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"{model_id}-{backend}"
    code, out, err = run(
        env, monkeypatch, capsys, name, "--set", f"face_swapper.model={model_id}", "--backend", backend
    )
    assert code == 0, err
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    described = sidecar["processors"]["face_swapper"]
    spec = Manifest.load().get(model_id)
    assert described["model"] == model_id and described["file"] == spec.files[0].filename
    assert described["backend"] == backend
    assert ("recogniser" in described) == (spec.swap.source == "embedding")
    assert described.get("converter", {}).get("model") == spec.swap.converter
    # One model call per face (the graphs fix batch 1), 8 faces; the pipeline batched 4 frames per call.
    assert env.calls[name] == [1] * (2 * FRAMES)
    assert sidecar["batch"] == 4
    check_swapped(env, out, sidecar)


def test_pixel_boost_runs_k_squared_model_crops(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(env, monkeypatch, capsys, "boost", "--set", "face_swapper.model=hyperswap_1a_256",
                         "--set", "face_swapper.pixel_boost=512", "--backend", "onnx")  # fmt: skip
    assert code == 0, err
    assert env.calls["boost"] == [1] * (4 * 2 * FRAMES)  # 2×2 interleaved 256 px crops of each 512 px face
    check_swapped(env, out, json.loads(out.with_name(out.name + ".job.json").read_text()))
    # A size the model does not offer is refused before anything runs, naming the ones it does.
    code, _, err = run(env, monkeypatch, capsys, "boost_bad", "--set", "face_swapper.model=hyperswap_1a_256",
                       "--set", "face_swapper.pixel_boost=384")  # fmt: skip
    assert code == 2 and "pixel_boost 384 is not offered by hyperswap_1a_256; choose 256, 512, 768, 1024" in err


def test_a_new_swapper_is_one_catalogue_entry(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The graph gets the signature the entry declares.
    io_text = NEW_ENTRY.split("[models.test_swap_192.io]")[1].split("[models.test_swap_192.swap]")[0]
    graph = env.root / "mirror" / "test_swap_192.onnx"
    data = tiny_graphs.swapper(graph, IOSpec.model_validate(tomllib.loads(io_text)), seed=9)
    pins = {"@URL@": graph.as_uri(), "@SIZE@": str(len(data)), "@SHA256@": hashlib.sha256(data).hexdigest()}
    entry = NEW_ENTRY
    for key, value in pins.items():
        entry = entry.replace(key, value)
    manifest = env.root / "with_new.toml"
    manifest.write_text(env.manifest.read_text() + entry)
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(manifest))
    # The settings help (and so every front end) lists it among the swapper's choices.
    assert "test_swap_192" in cli.presets.settings_help(["face_swapper"])
    try:
        extra = ("--set", "face_swapper.model=test_swap_192", "--set", "face_swapper.pixel_boost=384")
        code, out, err = run(env, monkeypatch, capsys, "new", *extra, "--backend", "onnx", manifest=manifest)
    finally:
        # The process-wide metrics label models by catalogue id, and tests/test_metrics.py holds them to the built-in
        # catalogue: this catalogue's own model is taken out again, so the two tests do not depend on their order.
        metrics.PROCESS_METRICS.model_load_seconds.remove("test_swap_192", "onnx")
    assert code == 0, err
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    assert sidecar["processors"]["face_swapper"]["converter"]["model"] == "crossface_simswap"
    assert env.calls["new"] == [1] * (4 * 2 * FRAMES)
    check_swapped(env, out, sidecar)


# -- offline with the real catalogue ---------------------------------------------------------------------------
@pytest.mark.parametrize("model_id", SWAPPERS)
def test_offline_run_exits_3_naming_files_urls_licences_and_folder(
    model_id: str, env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "FACESTUDIO_MANIFEST" not in os.environ  # the built-in catalogue (conftest clears the variable)
    out = tmp_path / "o.png"
    target = tmp_path / "t.png"
    video.write_image(target, env.frames[0])
    code = cli.main([
        "run", "--offline", "--processors", "face_swapper", "--set", f"face_swapper.model={model_id}",
        "--source", str(demo.source_photo()), "--target", str(target), "--output", str(out), "--yes",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3
    assert err.count("\n") == 1 and err.startswith("error: ")
    manifest = Manifest.load()
    for spec in manifest.chain(model_id):
        file = spec.files[0]
        assert file.filename in err and str(file.url) in err, file.filename
        assert f"{spec.id}: {spec.licence}" in err
    assert os.environ["FACESTUDIO_MODELS"] in err
    if any(f.sha256 is None for f in manifest.get(model_id).files):
        assert "no published sha256" in err and "--trust-first" in err
    assert not out.exists()
