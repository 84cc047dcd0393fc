"""int8 graphs (engine/models/quantize.py, engine/models/int8.py): `models quantize` makes a QDQ graph calibrated on
frames, gates it against the float32 graph on held-out frames, and records it signed; a job at
runtime.precision=int8 runs it on the CPU, verified like every derived file.

The model is a generated ×2 upscaler with a real frame enhancer's signature (Real-ESRGAN I/O: RGB in [0, 1],
NCHW, any size) built like SRVGGNetCompact (conv, PReLU, conv, pixel shuffle), pinned by sha256 in a temp
manifest; its arithmetic is a fixed smooth upscale, so float32 and int8 outputs can be compared.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tiny_graphs import write_manifest

import cli
from engine import media
from engine.core.errors import ChecksumMismatch, InvalidInput, ModelUnavailable
from engine.job.settings import RuntimeSettings
from engine.models import derived, int8, quantize
from engine.models.runtime import Runtime
from engine.tools import doctor

MODEL = "tiny_upscaler"


def _upscaler(path: Path) -> bytes:
    """x (N×3×H×W in [0, 1]) → conv 3→8 (the identity in three channels, a blur in the others), PReLU, conv 8→12
    that copies the identity channels to each of the 2×2 sub-pixels, DepthToSpace: a nearest ×2 upscale of x
    (plus nothing: the other channels get weight 0), so the float32 output is exactly the input upscaled."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.05, (8, 3, 3, 3)).astype(np.float32)
    w1[:3] = 0.0
    w1[range(3), range(3), 1, 1] = 1.0
    w2 = np.zeros((12, 8, 1, 1), np.float32)
    for c in range(3):
        w2[c * 4 : c * 4 + 4, c, 0, 0] = 1.0
    slope = np.full((8, 1, 1), 0.25, np.float32)
    inits = [
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
        numpy_helper.from_array(slope, "slope"),
        numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(np.zeros(12, np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("PRelu", ["c1", "slope"], ["p1"]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("DepthToSpace", ["c2"], ["output"], blocksize=2, mode="CRD"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_upscaler",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 3, "h2", "w2"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path.read_bytes()


@pytest.fixture
def catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A manifest with the tiny upscaler (file:// URL, sha256 pinned), a models folder, cache and key of this test's
    own; returns the models folder."""
    graph = tmp_path / "src" / "tiny_upscaler.onnx"
    graph.parent.mkdir()
    data = _upscaler(graph)
    extra = f"""
[io.tiny_upscaler]
# Real-ESRGAN's I/O, with the signature a downloaded graph declares.
input = "input"
output = "output"
colour = "RGB"
mean = [0.0, 0.0, 0.0]
std = [1.0, 1.0, 1.0]
output_range = [0.0, 1.0]
inputs = [{{ name = "input", shape = ["n", 3, "h", "w"] }}]
outputs = [{{ name = "output", shape = ["n", 3, "h2", "w2"] }}]

[models.{MODEL}]
task = "frame_enhancer"
title = "tiny ×2 upscaler (test)"
licence = "MIT"
commercial_use = true
homepage = "https://example.invalid/tiny"
arch = "SRVGGNetCompact"
scale = 2
io = "tiny_upscaler"
tile_pad = 2
bytes_per_pixel = 256

[[models.{MODEL}.files]]
format = "onnx"
filename = "tiny_upscaler.onnx"
url = "{graph.as_uri()}"
size = {len(data)}
sha256 = "{hashlib.sha256(data).hexdigest()}"
"""
    manifest = write_manifest(tmp_path / "manifest.toml", {}, extra)
    models = tmp_path / "models"
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(manifest))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(models))
    monkeypatch.setenv("FACESTUDIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "secret" / "integrity.key"))
    return models


def _calibration(frames: int = 6, seed: int = 0) -> quantize.Calibration:
    """Smooth random colour frames 96×64 (values across the whole 0–255 range): four calibrate, two are held out."""
    rng = np.random.default_rng(seed)
    made = []
    for _ in range(frames):
        small = rng.integers(0, 256, (8, 12, 3)).astype(np.uint8)
        made.append(np.ascontiguousarray(np.kron(small, np.ones((8, 8, 1), np.uint8))))
    return quantize.Calibration("test", tuple(made[:4]), tuple(made[4:]))


def _target(tmp_path: Path) -> Path:
    path = tmp_path / "in.png"
    y, x = np.mgrid[0:40, 0:56]
    media.write_image(path, np.dstack([x * 4, y * 6, (x + y) * 2]).astype(np.uint8))
    return path


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], precision: str, name: str = "") -> tuple[int, str, Path]:
    out = tmp_path / f"out_{precision}{name}.png"
    capsys.readouterr()
    code = cli.main(
        ["run", "--target", str(_target(tmp_path)), "--output", str(out), "--processors", "frame_enhancer",
         "--set", f"frame_enhancer.model={MODEL}", "--set", f"runtime.precision={precision}", "--device", "cpu",
         "--backend", "onnx", "--yes"]
    )  # fmt: skip
    captured = capsys.readouterr()
    return code, captured.err + captured.out, out  # the error line, or the summary


def test_quantize_records_a_signed_graph_that_a_job_runs_within_the_gate(
    catalogue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = _calibration()
    made = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, calibration)
    assert made.path == int8.graph_path(catalogue, MODEL) and made.path.is_file()
    assert made.psnr_db >= made.threshold_db == 38.0
    assert (made.calibrated_on, made.checked_on) == (4, 2)  # 96×64 frames are under a window: fed whole
    graph = onnx.load(str(made.path))
    ops = {n.op_type for n in graph.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops and "PRelu" not in ops  # QDQ; PRelu rewritten
    record = json.loads(derived.record_path(made.path).read_text())
    assert record["sha256"] == hashlib.sha256(made.path.read_bytes()).hexdigest()
    (entry,) = json.loads((catalogue / int8.FOLDER / int8.INDEX).read_text())["graphs"]
    assert entry["model"] == MODEL and entry["calibration"]["sha256"] == calibration.sha256
    assert entry["gate"]["psnr_db"] == round(made.psnr_db, 2)

    # `models verify` and `doctor` check it as the job does.
    code, verified, _ = _verify(capsys)
    assert code == 0 and f"ok         {MODEL:<30} {made.path}" in verified
    files, problems = _doctor_int8()
    assert files == [{"file": made.path.name, "format": "onnx (int8)", "status": "present-verified",
                      "path": str(made.path)}] and problems == []  # fmt: skip

    code, err, out = _run(tmp_path, capsys, "int8")
    assert code == 0, err
    code, err, reference = _run(tmp_path, capsys, "fp32")
    assert code == 0, err
    a, b = media.read_image(out)[0], media.read_image(reference)[0]
    assert a.shape == b.shape == (80, 112, 3)
    assert quantize.psnr(b, a, 255.0) >= 38.0 and not np.array_equal(a, b)  # the int8 graph ran, close to fp32


def test_a_tampered_int8_graph_is_refused(catalogue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    made = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    data = bytearray(made.path.read_bytes())
    data[-1] ^= 0x01
    made.path.write_bytes(bytes(data))
    runtime = Runtime(RuntimeSettings(device="cpu", precision="int8"))
    with pytest.raises(ChecksumMismatch, match=r"modified or corrupt int8 graph of tiny_upscaler.*models quantize"):
        runtime.load(MODEL, "onnx")
    code, err, out = _run(tmp_path, capsys, "int8")
    assert code == 3 and len(err.strip().splitlines()) == 1 and "quantise again" in err
    assert made.path.is_file() and not out.exists()  # left for the user to inspect; no output
    code, verified, err = _verify(capsys)
    assert code == 3 and f"mismatch   {MODEL:<30} {made.path}" in verified and "do not match" in err
    files, problems = _doctor_int8()
    assert [f["status"] for f in files] == ["tampered"]
    assert [(p.severity, str(made.path) in p.message) for p in problems] == [("error", True)]
    assert problems[0].fix == f"delete {made.path}, then python launch.py models quantize {MODEL}"


def test_a_record_signed_by_another_key_is_refused(
    catalogue: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "other" / "integrity.key"))
    with pytest.raises(ChecksumMismatch, match="no record of being quantised here"):
        Runtime(RuntimeSettings(device="cpu", precision="int8")).load(MODEL, "onnx")


def test_the_gate_refuses_a_graph_calibrated_on_damaged_frames(catalogue: Path) -> None:
    good = _calibration()
    # Damaged: the calibration frames are flat dark grey, so the int8 ranges cover a sliver of what the held-out
    # frames hold and their outputs clip.
    dark = tuple(np.full_like(f, 12) for f in good.calibrate)
    damaged = quantize.Calibration("damaged", dark, good.check)
    with pytest.raises(quantize.GateFailed) as failed:
        quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, damaged)
    message = str(failed.value)
    assert failed.value.exit_code == 3 and "\n" not in message
    tried = len(int8.candidates(int8.arithmetic()))
    found = re.search(
        rf"the best of {tried} schemes \(([\w-]+)\) reaches ([\d.]+) dB .* \(([\d.]+) dB short\)", message
    )
    assert found is not None and found.group(1) in int8.SCHEMES
    got, shortfall = float(found.group(2)), float(found.group(3))
    assert got < 38.0 and shortfall == pytest.approx(38.0 - got, abs=0.11)
    assert "runtime.precision=auto stays on fp32" in message
    assert not int8.graph_path(catalogue, MODEL).exists() and int8.read_index(catalogue) == {}
    assert list((catalogue / int8.FOLDER).iterdir()) == []  # no temp folder or graph left


def test_int8_without_a_graph_says_how_to_make_one(
    catalogue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err, out = _run(tmp_path, capsys, "int8")
    assert code == 3
    (line,) = err.strip().splitlines()
    assert f"python launch.py models quantize {MODEL}" in line and "runtime.precision=int8" in line
    assert not out.exists()


def test_a_graph_made_from_another_file_is_not_used(catalogue: Path) -> None:
    quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    index = catalogue / int8.FOLDER / int8.INDEX
    data = json.loads(index.read_text())
    data["graphs"][0]["source"] = "0" * 64
    index.write_text(json.dumps(data))
    with pytest.raises(ModelUnavailable, match="made from another file"):
        Runtime(RuntimeSettings(device="cpu", precision="int8")).load(MODEL, "onnx")


def test_verify_and_doctor_say_which_int8_graphs_a_job_would_refuse(
    catalogue: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    made = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    index = catalogue / int8.FOLDER / int8.INDEX
    kept = index.read_text()
    data = json.loads(kept)
    data["graphs"][0]["source"] = "0" * 64  # made from another file of the model
    index.write_text(json.dumps(data))
    code, verified, err = _verify(capsys)
    assert code == 0 and f"requantise {MODEL:<30} {made.path}" in verified
    assert f"quantise it again with `python launch.py models quantize {MODEL}`" in err
    files, problems = _doctor_int8()
    assert [f["status"] for f in files] == ["stale"] and [p.severity for p in problems] == ["warning"]
    assert "made from another file" in problems[0].message and "refuses it" in problems[0].message
    # Signed by another installation's key: unrecorded, also refused by a job.
    index.write_text(kept)
    monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "other" / "integrity.key"))
    files, problems = _doctor_int8()
    assert [f["status"] for f in files] == ["unrecorded"] and [p.severity for p in problems] == ["warning"]
    assert f"requantise {MODEL:<30} {made.path}" in _verify(capsys)[1]


def _verify(capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["models", "verify", MODEL])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _doctor_int8() -> tuple[list[dict[str, object]], list[doctor.Problem]]:
    """The doctor's rows of the model's int8 graph, and the problems it reports of it."""
    rows, problems = doctor.check_models(Runtime(RuntimeSettings()), [])
    files = [f for r in rows if r["id"] == MODEL for f in r["files"] if f["format"] == "onnx (int8)"]  # type: ignore[union-attr]
    return files, [p for p in problems if "int8" in p.message]


def test_quantize_command_prints_the_gate_and_a_non_face_model_is_refused(
    catalogue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "calib"
    folder.mkdir()
    for i, frame in enumerate(_calibration(8, seed=1).calibrate + _calibration(8, seed=1).check):
        media.write_image(folder / f"{i:02d}.png", frame)
    capsys.readouterr()
    assert cli.main(["models", "quantize", MODEL, "--calibration", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"quantised {MODEL} →" in out and "dB PSNR against fp32" in out and "gate 38 dB" in out
    with pytest.raises(InvalidInput, match="int8 graphs are made of"):
        quantize.quantize(Runtime(RuntimeSettings(device="cpu")), "landmark_warp", _calibration())
    assert cli.main(["models", "quantize", MODEL, "--calibration", str(tmp_path / "nowhere")]) == 2


def test_legacy_fp16_setting_reads_as_precision() -> None:
    assert RuntimeSettings.model_validate({"fp16": False}).precision == "fp32"
    assert RuntimeSettings.model_validate({"fp16": True}).precision == "fp16"
    assert RuntimeSettings.model_validate({"fp16": False, "precision": "int8"}).precision == "int8"
    assert RuntimeSettings().fp16 is True and RuntimeSettings(precision="fp32").fp16 is False


def test_prelu_rewrite_is_the_same_function(tmp_path: Path) -> None:
    import onnxruntime as ort

    path = tmp_path / "g.onnx"
    _upscaler(path)
    rewritten = tmp_path / "r.onnx"
    rewritten.write_bytes(path.read_bytes())
    assert quantize.rewrite_prelu(rewritten) == 1
    x = np.random.default_rng(0).normal(0, 1, (1, 3, 10, 12)).astype(np.float32)
    a, b = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
            for p in (path, rewritten))  # fmt: skip
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_benchmark_at_int8_measures_each_int8_graph_against_fp32(catalogue: Path) -> None:
    from engine.tools import benchmark
    from processors import REGISTRY, build_chain

    quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    raw = {
        "processors": ["frame_enhancer"],
        "frame_enhancer": {"model": MODEL},
        "runtime": {"precision": "int8", "device": "cpu", "backend": "onnx"},
    }
    result = benchmark.run(raw, resolution="180p", frames=4, registry=REGISTRY, build_chain=build_chain)
    (row,) = result["int8"]
    assert result["precision"] == "int8" and row["model"] == MODEL and row["per"] == "frame"
    assert row["calls"] == 4 and row["fp32_ms"] > 0 and row["int8_ms"] > 0
    assert row["ratio"] == round(row["int8_ms"] / row["fp32_ms"], 3) and row["psnr_db"] >= row["gate_db"] == 38.0
    assert "int8 against fp32" in benchmark.table(result)
    fp32 = benchmark.run({**raw, "runtime": {**raw["runtime"], "precision": "fp32"}}, resolution="180p", frames=2,
                         registry=REGISTRY, build_chain=build_chain)  # fmt: skip
    assert fp32["int8"] == [] and fp32["precision"] == "fp32"


def test_a_face_enhancer_is_calibrated_on_the_demo_faces_and_gated_at_35_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GFPGAN's real signature (a generated graph, 512 px crops on the ffhq template): calibrated on the faces the
    embedded analyser finds on the demo media, the portrait held out; the gate for face models is 35 dB."""
    import tiny_graphs

    from engine.models.manifest import Manifest

    real = Manifest.load()
    graph = tmp_path / "src" / "GFPGANv1.4.onnx"
    tiny_graphs.enhancer(graph, real.get("gfpgan_1_4").io, 512)
    manifest = write_manifest(tmp_path / "manifest.toml", {"gfpgan_1_4": (graph, "GFPGANv1.4.onnx")})
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(manifest))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("FACESTUDIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FACESTUDIO_INTEGRITY_KEY", str(tmp_path / "secret" / "integrity.key"))
    made = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), "gfpgan_1_4")
    assert made.threshold_db == 35.0 and made.psnr_db >= 35.0 and made.calibration == "demo"
    assert made.calibrated_on >= 4 and made.checked_on >= 2  # faces found on the clip's frames and the portrait
    loaded = Runtime(RuntimeSettings(device="cpu", precision="int8")).load("gfpgan_1_4", "onnx")
    assert loaded.quantized == made.path and loaded.describe()["precision"] == "int8"


# -- schemes by CPU arithmetic ----------------------------------------------------------------------------------
def _weights(graph: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Each Conv's weight as the graph stores it: the integer initializer its DequantizeLinear reads, or the
    float initializer itself (a convolution left in float32), by the Conv's position."""
    inits = {i.name: numpy_helper.to_array(i) for i in graph.graph.initializer}
    made_by = {o: n for n in graph.graph.node for o in n.output}
    weights = {}
    for index, conv in enumerate(n for n in graph.graph.node if n.op_type == "Conv"):
        source = conv.input[1]
        node = made_by.get(source)
        weights[f"conv{index}"] = inits[node.input[0]] if node is not None else inits[source]
    return weights


@pytest.mark.parametrize("name", list(int8.SCHEMES))
def test_each_scheme_forced_is_made_and_recorded_as_it_says(catalogue: Path, name: str) -> None:
    scheme = int8.SCHEMES[name]
    here = int8.arithmetic()
    runtime = Runtime(RuntimeSettings(device="cpu"))
    if here not in scheme.exact_on:  # full-range int8 weights on a CPU whose sums saturate
        with pytest.raises(InvalidInput, match=f"--scheme {name}: this CPU's int8 sums saturate"):
            quantize.quantize(runtime, MODEL, _calibration(), scheme=name)
        return
    made = quantize.quantize(runtime, MODEL, _calibration(), scheme=name)
    assert made.scheme == scheme and [t["scheme"] for t in made.tried] == [name]
    (entry,) = json.loads((catalogue / int8.FOLDER / int8.INDEX).read_text())["graphs"]
    assert entry["scheme"] == scheme.describe() and entry["scheme"]["name"] == name
    assert entry["cpu"]["arithmetic"] == here and entry["tried"] == [dict(made.tried[0])]
    weights = _weights(onnx.load(str(made.path)))
    first, last = weights["conv0"], weights["conv1"]
    if scheme.float_ends:  # the tiny graph's two convolutions are its ends: both stay float32
        assert first.dtype == last.dtype == np.float32
    else:
        assert first.dtype == last.dtype == (np.int8 if scheme.weights == "int8" else np.uint8)
        if scheme.weights == "int8":
            # 7-bit weights (−64…63) under reduce_range, the full −127…127 otherwise (the largest weight per
            # output channel is mapped to the end of the range).
            assert int(np.abs(first.astype(int)).max()) == (64 if scheme.reduce_range else 127)
    # A job finds it (on a CPU of this arithmetic), and the scheme is part of what the record signs.
    assert Runtime(RuntimeSettings(device="cpu", precision="int8")).load(MODEL, "onnx").quantized == made.path
    index = catalogue / int8.FOLDER / int8.INDEX
    other = next(n for n in int8.SCHEMES if n != name)
    index.write_text(index.read_text().replace(f'"name": "{name}"', f'"name": "{other}"'))
    assert int8.check(catalogue, Runtime(RuntimeSettings()).manifest.get(MODEL), {entry["source"]})[0] == "unrecorded"


def test_a_graph_that_would_clip_on_this_cpu_is_refused_and_auto_runs_fp32(
    catalogue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full-range int8 weights gated on an `exact` CPU, then run on a `saturating` one (x86 without VNNI): an int8
    job refuses the graph saying to quantise it again there, an auto job runs fp32; a reduced-range graph runs on
    both. The CPU is told to the code through `int8.arithmetic` (what it measures)."""
    monkeypatch.setattr(int8, "arithmetic", lambda: "exact")
    made = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration(), scheme="s8")
    code, err, _ = _run(tmp_path, capsys, "auto")
    assert code == 0 and "(CPUExecutionProvider, int8)" in err

    monkeypatch.setattr(int8, "arithmetic", lambda: "saturating")
    code, err, out = _run(tmp_path, capsys, "int8")
    (line,) = err.strip().splitlines()
    assert code == 3 and not out.exists()
    assert f"the int8 graph of {MODEL} (s8:" in line and "would clip on this CPU" in line
    assert f"python launch.py models quantize {MODEL}" in line
    code, err, out = _run(tmp_path, capsys, "auto", "_refused")
    assert code == 0 and "on onnx (CPUExecutionProvider), no audio" in err and out.exists()
    assert made.path.is_file()  # refused here, not deleted
    # `doctor` and `models verify` say so as the job does.
    files, problems = _doctor_int8()
    assert [f["status"] for f in files] == ["clips"] and [p.severity for p in problems] == ["warning"]
    assert "clip on this CPU" in problems[0].message
    assert f"requantise {MODEL:<30} {made.path}" in _verify(capsys)[1]

    # Quantising again on this CPU tries only what it sums exactly, and the result runs here.
    again = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    assert again.scheme in int8.candidates("saturating") and "saturating" in again.scheme.exact_on
    assert [t["scheme"] for t in again.tried] == [s.name for s in int8.candidates("saturating")][: len(again.tried)]
    assert json.loads((catalogue / int8.FOLDER / int8.INDEX).read_text())["graphs"][0]["cpu"]["arithmetic"] == (
        "saturating"
    )
    code, err, _ = _run(tmp_path, capsys, "auto", "_again")
    assert code == 0 and "(CPUExecutionProvider, int8)" in err


def test_auto_without_an_int8_graph_runs_fp32(
    catalogue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert RuntimeSettings().precision == "auto"
    code, err, out = _run(tmp_path, capsys, "auto")
    assert code == 0 and "on onnx (CPUExecutionProvider), no audio" in err and out.exists()
    loaded = Runtime(RuntimeSettings(device="cpu")).load(MODEL, "onnx")
    assert loaded.quantized is None and "precision" not in loaded.describe()


def test_the_arithmetic_probe_agrees_with_the_cpu_flags() -> None:
    """ONNX Runtime sums uint8×int8 exactly with VNNI (AVX-512 VNNI, AVX-VNNI) or AMX, and in saturating 16-bit
    pairs on x86 without them; on other machines (ARM) exactly."""
    cpu = int8.cpu()
    assert cpu["arithmetic"] == int8.arithmetic()
    if platform.machine() not in ("x86_64", "AMD64") or not Path("/proc/cpuinfo").is_file():
        assert cpu["arithmetic"] == "exact"
        return
    flags = set(cpu["flags"])
    assert "avx2" in flags  # ONNX Runtime's x86 int8 kernels need AVX2 at least (this probe's premise)
    expected = "exact" if flags & {"avx512_vnni", "avx_vnni", "amx_int8"} else "saturating"
    assert cpu["arithmetic"] == expected


def test_the_same_model_and_calibration_give_the_same_bytes(catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    digest = hashlib.sha256(first.path.read_bytes()).hexdigest()
    monkeypatch.setenv("FACESTUDIO_MODELS", str(catalogue.parent / "models-again"))
    again = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration())
    assert again.path != first.path and hashlib.sha256(again.path.read_bytes()).hexdigest() == digest
    other = quantize.quantize(Runtime(RuntimeSettings(device="cpu")), MODEL, _calibration(seed=5))
    assert hashlib.sha256(other.path.read_bytes()).hexdigest() != digest  # other frames, other ranges


@pytest.mark.slow
def test_the_embedded_frame_enhancer_passes_the_gate_in_a_fresh_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's command on the real embedded model (realesr-animevideov3, converted from its ncnn files), in a
    home, models folder and cache of its own: the gate passes on this machine under a scheme this CPU sums
    exactly, and a default (auto) job then runs the int8 graph."""
    for name, folder in (("HOME", "home"), ("MODELS", "models"), ("CACHE", "cache")):
        monkeypatch.setenv(f"FACESTUDIO_{name}", str(tmp_path / folder))
    monkeypatch.delenv("FACESTUDIO_MANIFEST", raising=False)
    monkeypatch.delenv("FACESTUDIO_INTEGRITY_KEY", raising=False)
    capsys.readouterr()
    assert cli.main(["models", "quantize", "realesr_animevideov3", "--offline"]) == 0, capsys.readouterr().err
    (entry,) = int8.read_index(tmp_path / "models").values()
    here = int8.arithmetic()
    assert entry["cpu"]["arithmetic"] == here and here in entry["scheme"]["exact_on"]
    assert entry["gate"]["psnr_db"] >= entry["gate"]["threshold_db"] == 38.0
    assert entry["calibration"]["source"] == "demo" and entry["calibration"]["checked_on"] == 10
    assert f"as {entry['scheme']['name']}" in capsys.readouterr().out
    out = tmp_path / "out.png"
    code = cli.main(["run", "--target", str(_target(tmp_path)), "--output", str(out), "--processors",
                     "frame_enhancer", "--set", "frame_enhancer.model=realesr_animevideov3", "--device", "cpu",
                     "--yes"])  # fmt: skip
    assert code == 0 and "(CPUExecutionProvider, int8)" in capsys.readouterr().out
    assert media.read_image(out)[0].shape == (160, 224, 3)  # ×4
