"""What the tests of the toolbox's processors (age modifier, face editor, frame colourizer, background remover, deep
swapper) share: a temp catalogue of stand-in graphs, a clip with two faces and sound, the run through the CLI, and
the checks every one of them makes — a video keeps its frames, times and audio; a graph with the wrong I/O is
refused at load time in one line; a model is fetched from a local HTTP server by its catalogue entry, sha256
checked."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import pytest
import tiny_graphs
from conftest import Server
from mediakit import audio_seconds, ffmpeg, seconds, sine
from test_expression_restorer import Logged
from test_face_swapper_models import two_faces, write_clip

import cli
from engine import media
from engine.core.types import Face
from engine.faces.align import TEMPLATES
from engine.models.manifest import Manifest
from engine.models.runtime import LoadedModel

FRAMES, FPS = 4, 8


def catalogue(root: Path, files: Mapping[str, Path], server: Server | None = None) -> Path:
    """A temp catalogue (`root/manifest.toml`) whose entries in `files` are served by those stand-in graphs, over
    file://, or from `server` when given."""
    if server is None:
        return tiny_graphs.write_manifest(root / "manifest.toml", files)

    def served(path: Path) -> str:
        server.state.files[path.name] = path.read_bytes()
        return f"{server.base_url}/{path.name}"

    return tiny_graphs.write_manifest(root / "manifest.toml", files, url=served)


def use(monkeypatch: pytest.MonkeyPatch, manifest: Path, models: Path) -> None:
    """Run with `manifest` as the catalogue and `models` as the models folder."""
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(manifest))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(models))


def clip(folder: Path) -> Path:
    """A 4-frame 8 fps H.264 clip of two faces (400×200) with a half-second tone, made once per folder."""
    path = folder / "two-faces.mp4"
    if not path.exists():
        tone = folder / "tone.wav"
        ffmpeg(*sine("0.5"), str(tone))
        write_clip(path, [two_faces(i) for i in range(FRAMES)], FPS, audio=tone)
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`launch.py run ARGS --yes`: (exit code, stdout, stderr)."""
    code = cli.main(["run", *args, "--yes"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def frames(path: Path) -> list[npt.NDArray[np.int16]]:
    with media.FrameReader(path) as reader:
        return [f.astype(np.int16) for f in reader]


def check_timing(target: Path, output: Path) -> None:
    """The output has the target's frame count, each frame at the target's time, and its audio."""
    before, after = media.probe(target), media.probe(output)
    assert after.frame_count == before.frame_count == FRAMES
    assert seconds(after) == seconds(before)
    assert before.has_audio and after.has_audio
    assert abs(audio_seconds(output) - audio_seconds(target)) < 0.03


def check_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], graphs: Mapping[str, Path],
    model_id: str, processor: str, *settings: str,
) -> None:  # fmt: skip
    """A run of `processor` (with `--set` `settings`) on a clip, whose catalogue serves `model_id` by a graph of
    other I/O (`wrong.onnx` beside the stand-in `graphs`), exits 3 with one line naming the file and the entry."""
    use(monkeypatch, catalogue(tmp_path, {**graphs, model_id: graphs[model_id].with_name("wrong.onnx")}),
        tmp_path / "models")  # fmt: skip
    sets = [arg for setting in settings for arg in ("--set", setting)]
    args = ["--target", str(clip(tmp_path)), "--output", str(tmp_path / "o.mp4"), "--processors", processor, *sets]
    code, _, err = run(capsys, *args)
    assert code == 3, err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert f"is not the graph {model_id} declares" in err and "(it has image)" in err


def check_fetched(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    model_id: str, graph: Path,
) -> None:  # fmt: skip
    """`models fetch MODEL` downloads the stand-in from a local HTTP server by the catalogue entry and checks its
    sha256; the same entry with other bytes on the server is refused (exit 3) and nothing is kept."""
    manifest = catalogue(tmp_path, {model_id: graph}, server)
    models = tmp_path / "fetched"
    use(monkeypatch, manifest, models)
    spec = Manifest.load(manifest).get(model_id)
    file = spec.files[0]
    assert (
        file.url == f"{server.base_url}/{graph.name}" and file.sha256 == hashlib.sha256(graph.read_bytes()).hexdigest()
    )
    assert cli.main(["models", "fetch", model_id]) == 0, capsys.readouterr().err
    assert (models / file.filename).read_bytes() == graph.read_bytes()
    assert (graph.name, None) in server.state.requests
    (models / file.filename).unlink()
    server.state.files[graph.name] = graph.read_bytes()[:-8] + b"tampered"
    assert cli.main(["models", "fetch", model_id]) == 3
    err = capsys.readouterr().err
    assert "sha256" in err and file.filename in err
    assert not (models / file.filename).exists()


def face_on(size: int = 600, template: str = "ffhq_512", side: float = 260.0) -> tuple[npt.NDArray[np.uint8], Face]:
    """A size×size frame (a grey ground with a warm disc where the face is, a blue stripe at the top) and a Face
    whose 5 landmarks sit on `template`, scaled to `side` px and centred."""
    points = (TEMPLATES[template] * side + (size - side) / 2.0).astype(np.float32)
    frame = np.full((size, size, 3), 90, np.uint8)
    frame[:40] = (30, 60, 200)
    centre = points.mean(axis=0)
    cv2.circle(frame, (int(centre[0]), int(centre[1])), int(side * 0.45), (210, 150, 120), -1)
    box = (float(points[:, 0].min() - side * 0.2), float(points[:, 1].min() - side * 0.3),
           float(points[:, 0].max() + side * 0.2), float(points[:, 1].max() + side * 0.2))  # fmt: skip
    return frame, Face(box=box, landmarks5=points, score=1.0)


def logged(processor: Any, attribute: str = "models") -> list[tuple[str, dict, list]]:
    """Wrap every session `processor.<attribute>` holds (a dict of LoadedModels, or one) in a `Logged` session
    writing (model id, inputs, outputs) to the returned list."""
    log: list[tuple[str, dict, list]] = []
    held = getattr(processor, attribute)
    if isinstance(held, dict):
        setattr(processor, attribute, {k: wrap(v, log) for k, v in held.items()})
    else:
        setattr(processor, attribute, wrap(held, log))
    return log


def wrap(loaded: LoadedModel, log: list[tuple[str, dict, list]]) -> LoadedModel:
    """`loaded` with its session logging (model id, inputs, outputs) of every call to `log`."""
    return LoadedModel(loaded.spec, loaded.file, Logged(loaded.spec.id, loaded.session, log))  # type: ignore[arg-type]


def untouched_outside(
    before: npt.NDArray[np.uint8], after: npt.NDArray[np.uint8], mask: npt.NDArray[np.float32]
) -> None:
    """Every pixel where `mask` (the processor's own paste-back mask, H×W) is 0 is exactly as it was, and there
    are such pixels (a tenth of the frame at least)."""
    outside = mask <= 0.0
    assert outside.mean() > 0.1
    np.testing.assert_array_equal(after[outside], before[outside])
