"""The face swapper's InSwapper path end to end, through the CLI, on tiny generated graphs with the released
files' exact signatures (tests/test_buffalo_inswapper.py builds them): source Grace Hopper, target the astronaut,
the embedded dlib analyser finding the faces, on both backends; pixel boost; a video target; and, with the real
manifest, the offline error that names what to download.

The models come from a temp manifest: the built-in one, with the file tables of `inswapper_128` and
`buffalo_l_w600k_r50` replaced by tiny files over file:// (url, size, sha256); their real I/O specs, templates and
input sizes are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import pytest
from test_buffalo_inswapper import CountingSession, tiny_arcface, tiny_inswapper

import cli
from engine import media as video
from engine.core.types import Face
from engine.faces import swapper
from engine.faces.align import estimate_affine, warp_face
from engine.faces.embedded import EmbeddedAnalyser
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.manifest import MANIFEST_PATH
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import to_tensor

SWAPPER, RECOGNISER = "inswapper_128", "buffalo_l_w600k_r50"


# -- the temp manifest ----------------------------------------------------------------------------------------
def _tables(text: str) -> list[tuple[str, str]]:
    """The TOML text split into (header name, text) per table (`[name]` and `[[name]]`), in file order; the
    text before the first header has the name ""."""
    tables: list[tuple[str, str]] = []
    name, lines = "", []
    for line in text.splitlines():
        match = re.match(r"^\[\[?([^\]]+)\]\]?\s*$", line)
        if match:
            tables.append((name, "\n".join(lines)))
            name, lines = match[1], []
        lines.append(line)
    tables.append((name, "\n".join(lines)))
    return tables


def write_manifest(path: Path, files: dict[str, Path]) -> Path:
    """The built-in manifest with the file tables of the models in `files` replaced by one table each: the real
    first file's format and name, with url/size/sha256 of the tiny file at `files[id]`. Everything else (their
    io specs, templates and input sizes; the embedded models the dlib analyser verifies) is copied as it is."""
    tables = _tables(MANIFEST_PATH.read_text(encoding="utf-8"))
    replaced = {f"models.{model_id}.files" for model_id in files}
    parts = [text for name, text in tables if name not in replaced]
    for model_id, tiny in files.items():
        first = next(text for name, text in tables if name == f"models.{model_id}.files")
        fmt, filename = (re.search(rf'^{key} = "([^"]+)"', first, re.M) for key in ("format", "filename"))
        assert fmt is not None and filename is not None
        data = tiny.read_bytes()
        parts.append(
            f"[[models.{model_id}.files]]\n"
            f'format = "{fmt[1]}"\n'
            f'filename = "{filename[1]}"\n'
            f'url = "{tiny.as_uri()}"\n'
            f"size = {len(data)}\n"
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        )
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


# -- media and runs -------------------------------------------------------------------------------------------
@dataclass
class Env:
    """The module's tiny models and media, and what each CLI run left (outputs, sidecars, model calls)."""

    root: Path
    manifest: Path
    target: Path  # the astronaut as PNG
    source: Path  # Grace Hopper (JPEG)
    calls: dict[str, list[int]] = field(default_factory=dict)  # run name → batch size of each swapper call

    def env(self, models: Path) -> dict[str, str]:
        return {
            "FACESTUDIO_MANIFEST": str(self.manifest),
            "FACESTUDIO_MODELS": str(models),
            "FACESTUDIO_HOME": str(self.root / "home"),
            "FACESTUDIO_CACHE": str(self.root / "cache"),
        }


# Batch sizes of the swapper calls of the CLI run in progress (None: no run, sessions are not wrapped).
_spied: dict[str, list[int] | None] = {"calls": None}


def _spying_load(original):  # type: ignore[no-untyped-def]
    """Runtime.load that, during `run`, wraps the InSwapper session in a CountingSession."""

    def load(self: Runtime, model_id: str, backend: str | None = None) -> LoadedModel:
        model = original(self, model_id, backend)
        calls = _spied["calls"]
        if model_id != SWAPPER or calls is None:
            return model
        session = CountingSession(model.session)
        session.calls = calls
        return LoadedModel(model.spec, model.file, session)  # type: ignore[arg-type]

    return load


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("inswapper_e2e")
    mirror = root / "mirror"
    mirror.mkdir()
    tiny_inswapper(mirror / "inswapper.onnx")
    tiny_arcface(mirror / "arcface.onnx")
    manifest = write_manifest(
        root / "manifest.toml", {SWAPPER: mirror / "inswapper.onnx", RECOGNISER: mirror / "arcface.onnx"}
    )
    target = root / "astronaut.png"
    video.write_image(target, demo.photo(), alpha=None, metadata={})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Runtime, "load", _spying_load(Runtime.load))
        yield Env(root, manifest, target, demo.source_photo())


def run(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, *extra: str,
    target: Path | None = None, suffix: str = ".png",
) -> tuple[int, Path, str]:  # fmt: skip
    """`launch.py run` in-process with the tiny manifest; returns (exit code, output path, stderr)."""
    for key, value in env.env(env.root / f"models_{name}").items():
        monkeypatch.setenv(key, value)
    out = env.root / f"{name}{suffix}"
    env.calls[name] = _spied["calls"] = []
    try:
        code = cli.main([
            "run", "--source", str(env.source), "--target", str(target or env.target), "--output", str(out),
            "--processors", "face_swapper", "--set", f"face_swapper.model={SWAPPER}", *extra, "--yes",
        ])  # fmt: skip
    finally:
        _spied["calls"] = None
    return code, out, capsys.readouterr().err


@pytest.fixture(scope="module")
def face(env: Env) -> Face:
    (found,) = EmbeddedAnalyser("hog").detect(demo.photo())
    return found


@pytest.fixture(scope="module")
def outputs() -> dict[str, npt.NDArray[np.uint8]]:
    """Output images of the module's image runs, by run name (filled by the first test that makes each)."""
    return {}


def swapped(
    name: str, env: Env, outputs: dict[str, npt.NDArray[np.uint8]], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], *extra: str,
) -> npt.NDArray[np.uint8]:  # fmt: skip
    """The output of the image run `name` (run once per module; exit 0 and a sidecar asserted)."""
    if name not in outputs:
        code, out, err = run(env, monkeypatch, capsys, name, *extra)
        assert code == 0, err
        sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
        assert sidecar["faces"]["processed"] == 1
        described = sidecar["processors"]["face_swapper"]
        assert described["model"] == SWAPPER and described["file"] == "inswapper_128.onnx"
        assert described["recogniser"]["model"] == RECOGNISER
        outputs[name] = video.read_image(out)[0]
    return outputs[name]


def crop_footprint(face: Face, shape: tuple[int, ...], size: int, margin: int = 2) -> npt.NDArray[np.bool_]:
    """Pixels of a frame of `shape` that the aligned `size`-px crop of `face` covers (+ `margin` px)."""
    affine = estimate_affine(face.landmarks5, "arcface_128", size)
    inverse = cv2.invertAffineTransform(affine)
    corners = np.float64([[0, 0, 1], [size, 0, 1], [0, size, 1], [size, size, 1]]) @ inverse.T
    x1, y1 = np.floor(corners.min(axis=0)).astype(int) - margin
    x2, y2 = np.ceil(corners.max(axis=0)).astype(int) + margin
    inside = np.zeros(shape[:2], bool)
    inside[max(y1, 0) : y2, max(x1, 0) : x2] = True
    return inside


# -- image runs on both backends -------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_image_swap_touches_only_the_face(
    backend: str, env: Env, face: Face, outputs: dict[str, npt.NDArray[np.uint8]],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    target = demo.photo()
    out = swapped(backend, env, outputs, monkeypatch, capsys, "--backend", backend)
    assert out.shape == target.shape
    assert env.calls[backend] == [1]  # one face, one 128-px model call
    # Far outside the face: outside the crop's footprint, and outside the box grown by its side on every side.
    x1, y1, x2, y2 = (int(v) for v in face.box)
    side = x2 - x1
    far = ~crop_footprint(face, target.shape, 128)
    assert far.mean() > 0.5
    np.testing.assert_array_equal(out[far], target[far])
    grown = np.ones(target.shape[:2], bool)
    grown[max(y1 - side, 0) : y2 + side, max(x1 - side, 0) : x2 + side] = False
    np.testing.assert_array_equal(out[grown], target[grown])
    # Inside the face (the middle half of the box) the pixels changed.
    inner = (slice(y1 + side // 4, y2 - side // 4), slice(x1 + side // 4, x2 - side // 4))
    changed = np.abs(out[inner].astype(int) - target[inner]).max(axis=-1) > 2
    assert changed.mean() > 0.5


def test_backends_agree(
    env: Env, outputs: dict[str, npt.NDArray[np.uint8]], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    by_onnx = swapped("onnx", env, outputs, monkeypatch, capsys, "--backend", "onnx")
    by_torch = swapped("torch", env, outputs, monkeypatch, capsys, "--backend", "torch")
    assert np.abs(by_onnx.astype(int) - by_torch).max() <= 1


def test_sessions_agree_on_the_real_crop_and_latent(env: Env, face: Face, monkeypatch: pytest.MonkeyPatch) -> None:
    """The raw model outputs of ONNX Runtime and the converted torch module on the astronaut's aligned crop and
    Grace Hopper's latent (her tiny-ArcFace embedding through the graph's emap)."""
    for key, value in env.env(env.root / "models_parity").items():
        monkeypatch.setenv(key, value)
    runtime = Runtime(RuntimeSettings(device="cpu"))
    source = video.read_image(env.source)[0]
    (hopper,) = EmbeddedAnalyser("hog").detect(source)
    rec = runtime.load(RECOGNISER, "onnx")
    arc = warp_face(source, estimate_affine(hopper.landmarks5, "arcface_112", 112), 112)
    (embedding,) = rec.session.run({rec.spec.io.input: to_tensor(arc[None], rec.spec.io)})
    by_onnx, by_torch = runtime.load(SWAPPER, "onnx"), runtime.load(SWAPPER, "torch")
    latent = swapper.latent(by_onnx.spec.swap, embedding, emap=swapper.emap_from_onnx(runtime.local_path(by_onnx.file)))
    crop = warp_face(demo.photo(), estimate_affine(face.landmarks5, "arcface_128", 128), 128)
    io = by_onnx.spec.io
    inputs = {io.input: to_tensor(crop[None], io), io.source: latent}
    (a,) = by_onnx.session.run(inputs)
    (b,) = by_torch.session.run(inputs)
    assert a.shape == b.shape == (1, 3, 128, 128)
    assert np.abs(a - b).max() <= 1e-4
    assert a.std() > 0.01  # not a constant image: the comparison means something


def test_pixel_boost_runs_the_model_on_four_sub_crops(
    env: Env, face: Face, outputs: dict[str, npt.NDArray[np.uint8]], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    target = demo.photo()
    plain = swapped("onnx", env, outputs, monkeypatch, capsys, "--backend", "onnx")
    boosted = swapped("boost", env, outputs, monkeypatch, capsys, "--backend", "onnx",
                      "--set", "face_swapper.pixel_boost=256")  # fmt: skip
    assert boosted.shape == target.shape
    assert env.calls["boost"] == [1, 1, 1, 1]  # 2×2 interleaved 128-px sub-crops of the 256-px crop, one face
    x1, y1, x2, y2 = (int(v) for v in face.box)
    assert np.abs(boosted[y1:y2, x1:x2].astype(int) - plain[y1:y2, x1:x2]).max() > 10
    far = ~crop_footprint(face, target.shape, 256)
    np.testing.assert_array_equal(boosted[far], target[far])


# -- video ----------------------------------------------------------------------------------------------------
def test_video_target_keeps_frames_and_audio(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clip = demo.make_clip(env.root / "c.mp4", 160, 96, 12, 12)
    code, out, err = run(env, monkeypatch, capsys, "video", "--backend", "onnx", target=clip, suffix=".mp4")
    assert code == 0, err
    source_info, info = video.probe(clip), video.probe(out)
    assert (info.width, info.height) == (160, 96)
    with video.FrameReader(out) as reader:
        assert sum(1 for _ in reader) == 12
    assert info.frame_count == source_info.frame_count == 12
    assert source_info.has_audio and info.has_audio
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    faces = sidecar["faces"]
    with_face = 12 - faces["frames_without_face"]
    assert faces["processed"] == with_face  # one face per frame that has one
    # Every frame where the detector alone finds the face has it (tracking may fill others in between).
    analyser = EmbeddedAnalyser("hog")
    with video.FrameReader(clip) as reader:
        detected = sum(bool(analyser.detect(frame)) for frame in reader)
    assert 0 < detected <= with_face <= 12
    # The model ran once per processed face (the released graphs fix batch 1).
    assert env.calls["video"] == [1] * faces["processed"]
    assert sidecar["output"]["audio"] is True and sidecar["output"]["frames"] == 12


# -- offline with the real manifest -----------------------------------------------------------------------------
def test_offline_inswapper_exits_3_naming_files_url_folder_and_licence(
    env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "FACESTUDIO_MANIFEST" not in os.environ  # the built-in manifest (conftest clears the variable)
    out = tmp_path / "o.png"
    code = cli.main([
        "run", "--offline", "--processors", "face_swapper", "--set", f"face_swapper.model={SWAPPER}",
        "--source", str(env.source), "--target", str(env.target), "--output", str(out), "--yes",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 3
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ")
    line = captured.err.strip()
    assert "inswapper_128.onnx" in line
    assert "https://huggingface.co/datasets/Gourieff/ReActor/resolve/main/models/inswapper_128.onnx" in line
    assert "w600k_r50.onnx" in line
    assert os.environ["FACESTUDIO_MODELS"] in line
    assert "NON-COMMERCIAL" in line
    assert not out.exists()
