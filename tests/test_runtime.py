"""Model files end to end with tiny generated models of the real architectures: fetched over file:// and HTTP,
sha256-pinned in a temp manifest, loaded on both backends (weights_only), exported to ONNX, cached."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import Server

import cli
from engine import media as video
from engine.core.errors import (
    BackendUnavailable,
    ChecksumMismatch,
    InvalidInput,
    ModelSignatureMismatch,
    ModelUnavailable,
    UnsafeWeights,
)
from engine.job.settings import RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import Folders, Runtime

# PyTorch (and spandrel, and what imports them) is imported in the tests that use it, not when the file is
# collected: every xdist worker collects every file, and PyTorch alone holds ~0.5 GB (tests/README.md, Memory).

MANIFEST = """
[io.realesrgan]
colour = "RGB"
output_range = [0.0, 1.0]

[models.{id}]
task = "frame_enhancer"
title = "tiny test model"
licence = "{licence}"
commercial_use = {commercial}
homepage = "https://example.invalid/tiny"
arch = "SRVGGNetCompact"
scale = 4
io = "realesrgan"
tile_pad = 6

[[models.{id}.files]]
format = "pth"
filename = "{filename}"
url = "{url}"
size = {size}
sha256 = "{sha256}"
"""


def tiny_pth(path: Path, seed: int = 0) -> bytes:
    """A random-weight SRVGGNetCompact (8 features, 2 convs, ×4) saved like the official files (`params`)."""
    import torch
    from spandrel.architectures.Compact import Compact as SRVGGNetCompact

    torch.manual_seed(seed)
    net = SRVGGNetCompact(num_feat=8, num_conv=2, upscale=4)
    torch.save({"params": net.state_dict()}, path)
    return path.read_bytes()


def write_manifest(
    tmp: Path,
    url: str,
    data: bytes,
    *,
    model_id: str = "realesr_general_x4v3",
    sha256: str | None = None,
    filename: str = "tiny.pth",
    licence: str = "BSD-3-Clause",
    commercial: bool = True,
) -> Path:
    path = tmp / "manifest.toml"
    path.write_text(
        MANIFEST.format(
            id=model_id, url=url, size=len(data), sha256=sha256 or hashlib.sha256(data).hexdigest(),
            filename=filename, licence=licence, commercial=str(commercial).lower(),
        )
    )  # fmt: skip
    return path


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Runtime, Path]:
    src = tmp_path / "mirror" / "tiny.pth"
    src.parent.mkdir()
    data = tiny_pth(src)
    manifest = Manifest.load(write_manifest(tmp_path, src.as_uri(), data))
    folders = Folders(models=tmp_path / "models", cache=tmp_path / "cache")
    return Runtime(RuntimeSettings(device="cpu"), manifest=manifest, folders=folders), src


def test_file_url_fetch_then_both_backends_agree(tiny: tuple[Runtime, Path]) -> None:
    runtime, _ = tiny
    x = np.random.default_rng(1).random((2, 3, 24, 20), dtype=np.float32)
    torch_model = runtime.load("realesr_general_x4v3", "torch")
    onnx_model = runtime.load("realesr_general_x4v3", "onnx")
    assert (runtime.folders.models / "tiny.pth").is_file()
    assert torch_model.session.provider == "torch:cpu" and onnx_model.session.provider == "CPUExecutionProvider"
    (a,) = torch_model.session.run({"input": x})
    (b,) = onnx_model.session.run({"input": x})
    assert a.shape == b.shape == (2, 3, 96, 80)
    assert np.abs(a - b).max() <= 1e-4
    # The export is cached under the weights' sha256 and reused, not redone.
    (cached,) = (runtime.folders.cache / "onnx").glob("*.onnx")
    assert runtime.manifest.get("realesr_general_x4v3").files[0].sha256[:32] in cached.name
    assert runtime.load("realesr_general_x4v3", "onnx") is onnx_model


def test_offline_names_file_url_and_folder(tiny: tuple[Runtime, Path]) -> None:
    runtime, src = tiny
    offline = Runtime(RuntimeSettings(offline=True), manifest=runtime.manifest, folders=runtime.folders)
    with pytest.raises(ModelUnavailable) as info:
        offline.load("realesr_general_x4v3", "torch")
    message = str(info.value)
    assert "tiny.pth" in message and src.as_uri() in message and str(runtime.folders.models) in message


def test_placed_file_loads_without_download(tiny: tuple[Runtime, Path]) -> None:
    runtime, src = tiny
    runtime.folders.models.mkdir(parents=True)
    (runtime.folders.models / "tiny.pth").write_bytes(src.read_bytes())
    src.unlink()  # no source left to download from
    offline = Runtime(RuntimeSettings(offline=True, device="cpu"), manifest=runtime.manifest, folders=runtime.folders)
    assert offline.load("realesr_general_x4v3", "torch").file.filename == "tiny.pth"


def test_tampered_file_is_refused_and_kept(tiny: tuple[Runtime, Path]) -> None:
    runtime, src = tiny
    runtime.folders.models.mkdir(parents=True)
    placed = runtime.folders.models / "tiny.pth"
    placed.write_bytes(tiny_pth(src.with_name("other.pth"), seed=1))
    with pytest.raises(ChecksumMismatch, match="tiny.pth"):
        runtime.load("realesr_general_x4v3", "torch")
    assert placed.is_file()


def evil_pickle(path: Path, marker: Path) -> bytes:
    """A `.pth` whose unpickling would create `marker` (a `__reduce__` payload, as a malicious checkpoint has)."""

    import torch

    class Evil:
        def __reduce__(self):  # runs `touch` if anything unpickles this
            return (Path.touch, (marker,))

    torch.save({"params": Evil()}, path)
    return path.read_bytes()


def test_weights_are_never_unpickled(tmp_path: Path) -> None:
    src = tmp_path / "evil.pth"
    data = evil_pickle(src, tmp_path / "pwned")
    manifest = Manifest.load(write_manifest(tmp_path, src.as_uri(), data, filename="evil.pth"))
    runtime = Runtime(
        RuntimeSettings(device="cpu"), manifest=manifest, folders=Folders(models=tmp_path / "m", cache=tmp_path / "c")
    )
    for backend in ("torch", "onnx"):  # the ONNX backend converts .pth weights through the same reader
        with pytest.raises(UnsafeWeights) as info:
            runtime.load("realesr_general_x4v3", backend)
        message = str(info.value)
        assert message.startswith(f"{tmp_path / 'm' / 'evil.pth'} holds Python objects besides tensors")
        assert "\n" not in message and "weights_only=False" not in message
    assert not (tmp_path / "pwned").exists()


def test_malicious_pickle_run_exits_3_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "evil.pth"
    data = evil_pickle(src, tmp_path / "pwned")
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(write_manifest(tmp_path, src.as_uri(), data, filename="evil.pth")))
    target = tmp_path / "t.png"
    video.write_image(target, np.full((16, 16, 3), 128, np.uint8))
    args = ["run", "--target", str(target), "--output", str(tmp_path / "o.png"), "--processors", "frame_enhancer",
            "--set", "frame_enhancer.model=realesr_general_x4v3", "--backend", "torch", "--device", "cpu",
            "--yes"]  # fmt: skip
    assert cli.main(args) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "holds Python objects besides tensors" in err
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "o.png").exists()


def test_tampered_model_run_exits_3_and_keeps_the_file(
    tiny: tuple[Runtime, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime, src = tiny
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(tmp_path / "manifest.toml"))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(runtime.folders.models))
    runtime.folders.models.mkdir(parents=True)
    placed = runtime.folders.models / "tiny.pth"
    placed.write_bytes(tiny_pth(tmp_path / "other.pth", seed=1))
    target = tmp_path / "t.png"
    video.write_image(target, np.full((16, 16, 3), 128, np.uint8))
    for backend in ("torch", "onnx"):
        args = ["run", "--target", str(target), "--output", str(tmp_path / "o.png"), "--processors",
                "frame_enhancer", "--set", "frame_enhancer.model=realesr_general_x4v3", "--backend", backend,
                "--device", "cpu", "--yes"]  # fmt: skip
        assert cli.main(args) == 3
        err = capsys.readouterr().err
        expected, actual = hashlib.sha256(src.read_bytes()).hexdigest(), hashlib.sha256(placed.read_bytes()).hexdigest()
        assert err == (
            f"error: {placed} has sha256 {actual[:12]}…, expected {expected[:12]}… (modified or corrupt); "
            "delete it to download it again\n"
        )
    assert placed.read_bytes() == (tmp_path / "other.pth").read_bytes()  # left for the user to inspect


def test_cached_conversion_is_verified_before_reuse(tiny: tuple[Runtime, Path]) -> None:
    runtime, _ = tiny
    runtime.load("realesr_general_x4v3", "onnx")
    (graph,) = (runtime.folders.cache / "onnx").glob("*.onnx")
    record = json.loads(graph.with_name(f"{graph.name}.record.json").read_text())
    assert record["sha256"] == hashlib.sha256(graph.read_bytes()).hexdigest()

    # A later process (a fresh runtime) reuses the graph only while it still has the recorded sha256.
    built = graph.stat().st_mtime_ns
    fresh = Runtime(RuntimeSettings(device="cpu"), manifest=runtime.manifest, folders=runtime.folders)
    assert fresh.load("realesr_general_x4v3", "onnx").session.provider == "CPUExecutionProvider"
    assert graph.stat().st_mtime_ns == built
    graph.write_bytes(graph.read_bytes() + b"\0")
    tampered = graph.read_bytes()
    fresh = Runtime(RuntimeSettings(device="cpu"), manifest=runtime.manifest, folders=runtime.folders)
    with pytest.raises(ChecksumMismatch, match=f"{graph.name} has sha256 .*cached conversion of tiny.pth"):
        fresh.load("realesr_general_x4v3", "onnx")
    assert graph.read_bytes() == tampered

    # A graph without a record (cached by an older version, or its record lost) is rebuilt from the verified
    # weights, and recorded.
    graph.with_name(f"{graph.name}.record.json").unlink()
    fresh.load("realesr_general_x4v3", "onnx")
    rebuilt = json.loads(graph.with_name(f"{graph.name}.record.json").read_text())["sha256"]
    assert rebuilt == hashlib.sha256(graph.read_bytes()).hexdigest() != hashlib.sha256(tampered).hexdigest()


def test_a_file_that_is_not_what_the_manifest_says_is_a_typed_error(tiny: tuple[Runtime, Path], tmp_path: Path) -> None:
    # The manifest calls the (pickled) tiny.pth an ONNX graph (declaring its I/O, as a downloaded graph must):
    # loading it says so in one line, on either backend.
    text = (tmp_path / "manifest.toml").read_text().replace('format = "pth"', 'format = "onnx"')
    text = text.replace(
        "output_range = [0.0, 1.0]\n", 'output_range = [0.0, 1.0]\ninputs = [{ name = "input" }]\noutputs = [{}]\n', 1
    )
    (tmp_path / "onnx_manifest.toml").write_text(text)
    for backend in ("torch", "onnx"):
        runtime = Runtime(
            RuntimeSettings(device="cpu"), manifest=Manifest.load(tmp_path / "onnx_manifest.toml"),
            folders=tiny[0].folders,
        )  # fmt: skip
        with pytest.raises((InvalidInput, BackendUnavailable, ModelSignatureMismatch), match="tiny.pth") as info:
            runtime.load("realesr_general_x4v3", backend)
        assert "\n" not in str(info.value)


# -- `launch.py models` against a local HTTP server -------------------------------------------------------------
def test_models_fetch_cli_full_resume_and_mismatch(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tiny_pth(tmp_path / "tiny.pth")
    server.state.files["tiny.pth"] = data
    manifest = write_manifest(tmp_path, f"{server.base_url}/tiny.pth", data, licence="Test-NC-1.0", commercial=False)
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(manifest))
    models = Path(str(Folders.from_env().models))

    # A cut connection: exit 3, the partial download kept for a resume.
    server.state.cut_next_after = 5000
    assert cli.main(["models", "fetch", "realesr_general_x4v3"]) == 3
    err = capsys.readouterr().err
    assert "licence: realesr_general_x4v3: Test-NC-1.0 (NON-COMMERCIAL use only)" in err
    assert err.index("licence:") < err.index("error:")
    assert (models / "tiny.pth.part").stat().st_size == 5000
    # The resume asks for the rest only, and the verified file replaces the part.
    assert cli.main(["models", "fetch", "realesr_general_x4v3"]) == 0
    assert server.state.requests[-1] == ("tiny.pth", "bytes=5000-")
    assert (models / "tiny.pth").read_bytes() == data and not (models / "tiny.pth.part").exists()
    assert cli.main(["models", "verify", "realesr_general_x4v3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("ok")

    # The server now serves other bytes than the manifest pins: exit 3, nothing kept.
    (models / "tiny.pth").unlink()
    server.state.files["tiny.pth"] = data[:-10] + b"0123456789"
    assert cli.main(["models", "fetch", "realesr_general_x4v3"]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "tiny.pth" in err and "sha256" in err
    assert list(models.iterdir()) == []

    # A placed file with other bytes: verify says so (exit 3) and leaves it for the user to inspect.
    (models / "tiny.pth").write_bytes(b"tampered")
    assert cli.main(["models", "verify", "realesr_general_x4v3"]) == 3
    assert capsys.readouterr().out.startswith("mismatch")
    assert (models / "tiny.pth").read_bytes() == b"tampered"


def test_models_list_json_reports_availability(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    assert cli.main(["models", "list", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["realesr_animevideov3"]["available"] is True
    assert rows["realesr_animevideov3"]["files"][0]["status"] == "embedded"
    assert rows["real_esrgan_x2plus"]["available"] is False
    assert rows["real_esrgan_x2plus"]["files"][0]["status"] == "missing"
