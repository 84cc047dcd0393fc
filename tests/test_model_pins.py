"""What pins a downloaded graph, and what is checked before it runs: the graph's declared signature at load time,
one-record pins, trust-first files (`models fetch ID --trust-first`), and what `models list` says about both and
about a chain's licences."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tiny_graphs
from onnx import TensorProto, helper
from test_buffalo_inswapper import tiny_arcface

import cli
from engine.core.errors import ChecksumMismatch, ModelSignatureMismatch, ModelUnavailable
from engine.job.settings import RuntimeSettings
from engine.models import signature
from engine.models.manifest import TRUSTED_FILE, IOSpec, Manifest, TensorSpec
from engine.models.runtime import Folders, Runtime


def _runtime(manifest: Path, tmp_path: Path) -> Runtime:
    return Runtime(
        RuntimeSettings(device="cpu"),
        manifest=Manifest.load(manifest),
        folders=Folders(tmp_path / "models", tmp_path / "cache"),
    )


def _graph(path: Path, inputs: list[tuple[str, int, list]], outputs: list[tuple[str, int, list]]) -> Path:
    """A graph declaring exactly these (name, element type, shape) inputs and outputs; each output is a constant
    of that shape (named axes: 1)."""
    nodes = []
    for name, kind, shape in outputs:
        dims = [d if isinstance(d, int) else 1 for d in shape]
        value = helper.make_tensor(f"{name}_v", kind, dims, np.zeros(int(np.prod(dims))).tolist())
        nodes.append(helper.make_node("Constant", [], [name], value=value))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path.write_bytes(model.SerializeToString())
    return path


F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE


# -- load-time signature checks ----------------------------------------------------------------------------------
SOURCE, TARGET = ("source", F32, [1, 512]), ("target", F32, [1, 3, 256, 256])
OUTPUT, MASK = ("output", F32, [1, 3, 256, 256]), ("mask", F32, [1, 1, 256, 256])


@pytest.mark.parametrize(
    ("inputs", "outputs", "difference"),
    [
        ([("src", F32, [1, 512]), TARGET], [OUTPUT, MASK], "no input source (it has src, target); unexpected input"),
        ([SOURCE, ("target", F32, [1, 3, 99, 99])], [OUTPUT, MASK], "input target has shape [1,3,99,99], expected [1,"),
        ([("source", F64, [1, 512]), TARGET], [OUTPUT, MASK], "input source is float64, expected float32"),
        ([SOURCE, TARGET], [OUTPUT], "1 outputs, expected 2"),
        ([SOURCE, TARGET], [("swapped", F32, [1, 3, 256, 256]), MASK], "output 0 is named swapped, expected output"),
    ],
)  # fmt: skip
def test_a_graph_that_is_not_the_declared_one_is_refused_before_it_runs(
    inputs: list, outputs: list, difference: str, tmp_path: Path
) -> None:
    wrong = _graph(tmp_path / "wrong.onnx", inputs, outputs)
    runtime = _runtime(tiny_graphs.write_manifest(tmp_path / "m.toml", {"hyperswap_1a_256": wrong}), tmp_path)
    for backend in ("onnx", "torch"):
        with pytest.raises(ModelSignatureMismatch) as info:
            runtime.load("hyperswap_1a_256", backend)
        message = str(info.value)
        assert "\n" not in message and info.value.exit_code == 3
        assert str(tmp_path / "models" / "hyperswap_1a_256.onnx") in message and difference in message, message


def test_declared_axes_size_names_and_input_order(tmp_path: Path) -> None:
    io = IOSpec(
        input="input",
        inputs=(
            TensorSpec(name="input", shape=(1, 3, "size", "size")),
            TensorSpec(name="weight", type="float64", shape=(1,)),
        ),
        outputs=(TensorSpec(shape=(1, 3, "size", "size")),),
        fidelity="weight",
    )  # fmt: skip
    graph = _graph(
        tmp_path / "g.onnx", [("weight", F64, [1]), ("input", F32, [1, 3, 256, 256])], [("y", F32, [1, 3, 256, 256])]
    )
    ins, outs = signature.read_signature(graph)
    assert signature.differences(io, 256, ins, outs) == []  # "size" is the model's size; the unnamed output by position
    assert signature.differences(io, 512, ins, outs) == [
        "input input has shape [1,3,256,256], expected [1,3,512,512]",
        "output 0 (y) has shape [1,3,256,256], expected [1,3,512,512]",
    ]
    # A graph free on an axis the catalogue fixes is accepted (it takes that size too); named axes match anything.
    free = _graph(
        tmp_path / "free.onnx",
        [("input", F32, ["N", 3, 256, 256]), ("weight", F64, [1])],
        [("y", F32, ["N", 3, 256, 256])],
    )
    assert signature.differences(io, 256, *signature.read_signature(free)) == []
    not_onnx = tmp_path / "x.onnx"
    not_onnx.write_bytes(b"PK\x03\x04 not a graph")
    with pytest.raises(ModelSignatureMismatch, match="x.onnx is not a readable ONNX graph"):
        signature.read_signature(not_onnx)


def test_the_torch_backend_takes_inputs_in_the_graphs_order(tmp_path: Path) -> None:
    # HyperSwap's export declares `source` before `target`; onnx2torch's module takes them positionally.
    graph = tmp_path / "hs.onnx"
    tiny_graphs.swapper(graph, Manifest.load().get("hyperswap_1a_256").io)
    runtime = _runtime(tiny_graphs.write_manifest(tmp_path / "m.toml", {"hyperswap_1a_256": graph}), tmp_path)
    loaded = {b: runtime.load("hyperswap_1a_256", b) for b in ("onnx", "torch")}
    assert loaded["torch"].session.input_names == ["source", "target"]
    rng = np.random.default_rng(0)
    inputs = {
        "source": rng.normal(size=(1, 512)).astype(np.float32),
        "target": rng.random((1, 3, 256, 256), dtype=np.float32),
    }
    a, b = (loaded[k].session.run(inputs)[0] for k in ("onnx", "torch"))
    assert np.abs(a - b).max() < 1e-4


# -- trust-first and single-record pins --------------------------------------------------------------------------
@pytest.fixture
def ghost_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The built-in catalogue with GHOST 1's chain on tiny files over file://; ghost_1_256 itself keeps what the
    real catalogue has for it: a URL and no sha256."""
    mirror = tmp_path / "mirror"
    files = {
        "ghost_1_256": mirror / "ghost_1_256.onnx",
        "crossface_ghost": mirror / "cg.onnx",
        "buffalo_l_w600k_r50": mirror / "a.onnx",
    }
    tiny_graphs.swapper(files["ghost_1_256"], Manifest.load().get("ghost_1_256").io)
    tiny_graphs.converter(files["crossface_ghost"])
    tiny_arcface(files["buffalo_l_w600k_r50"])
    manifest = tiny_graphs.write_manifest(tmp_path / "m.toml", files)
    text = manifest.read_text()
    block = re.search(r"\[\[models\.ghost_1_256\.files\]\]\n(?:.+\n)+", text)
    assert block is not None
    unpinned = re.sub(r"^(size|sha256) = .*\n", "", block[0], flags=re.M)
    manifest.write_text(text.replace(block[0], unpinned))
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(manifest))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(tmp_path / "models"))
    return manifest, files["ghost_1_256"]


def test_trust_first_records_the_hash_and_pins_the_file_from_then_on(
    ghost_catalogue: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, source = ghost_catalogue
    models = tmp_path / "models"
    # Without --trust-first: exit 3, one line saying why and how, and nothing downloaded — not even the pinned rest.
    assert cli.main(["models", "fetch", "ghost_1_256"]) == 3
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "ghost_1_256.onnx" in line and "no published sha256" in line
    assert "--trust-first" in line and "crossface_ghost.onnx" in line  # the chain's other missing file is named too
    assert "the chain is NON-COMMERCIAL: buffalo_l_w600k_r50, crossface_ghost" in err  # licences shown first
    assert not models.exists() or not any(models.iterdir())
    # A run is refused the same way (exit 3), naming file, URL, licence and folder.
    target = tmp_path / "t.png"
    from engine import media as video
    from engine.media import demo

    video.write_image(target, demo.photo())
    run = ["run", "--source", str(demo.source_photo()), "--target", str(target), "--output", str(tmp_path / "o.png"),
           "--processors", "face_swapper", "--set", "face_swapper.model=ghost_1_256", "--yes"]  # fmt: skip
    assert cli.main(run) == 3
    err = capsys.readouterr().err
    assert "ghost_1_256.onnx" in err and source.as_uri() in err and str(models) in err and "Apache-2.0" in err
    # With --trust-first: fetched, its sha256 recorded; the chain's pinned files fetched and verified as usual.
    assert cli.main(["models", "fetch", "ghost_1_256", "--trust-first"]) == 0
    out = capsys.readouterr()
    digest = __import__("hashlib").sha256(source.read_bytes()).hexdigest()
    assert f"trusted {models / 'ghost_1_256.onnx'} (sha256 {digest}" in out.err  # notes go to stderr
    assert f"ok {models / 'ghost_1_256.onnx'}" in out.out.splitlines()
    assert "no public record gives a sha256 for ghost_1_256.onnx" in out.err
    record = json.loads((models / TRUSTED_FILE).read_text())["trusted"]
    assert record == [
        {
            "model": "ghost_1_256",
            "filename": "ghost_1_256.onnx",
            "url": source.as_uri(),
            "sha256": digest,
            "size": source.stat().st_size,
        }
    ]
    # From then on the file is pinned: `models list` says by what, and the swapper runs.
    assert cli.main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"present +onnx +ghost_1_256\.onnx .* sha256 recorded at its first download here", listing)
    assert cli.main(run) == 0, capsys.readouterr().err
    capsys.readouterr()
    # A changed file is refused (exit 3), the message saying the pin is this machine's own record.
    (models / "ghost_1_256.onnx").write_bytes(source.read_bytes()[:-1] + b"\x00")
    with pytest.raises(ChecksumMismatch, match="recorded when the file was first downloaded here"):
        Runtime(RuntimeSettings(device="cpu")).load("ghost_1_256")


def test_a_placed_unpinned_file_is_used_only_once_trusted(
    ghost_catalogue: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, source = ghost_catalogue
    models = tmp_path / "models"
    models.mkdir()
    (models / "ghost_1_256.onnx").write_bytes(source.read_bytes())
    with pytest.raises(ModelUnavailable, match="no published sha256"):
        Runtime(RuntimeSettings(device="cpu")).ensure(["ghost_1_256"])
    assert cli.main(["models", "list"]) == 0
    assert re.search(r"unpinned +onnx +ghost_1_256\.onnx", capsys.readouterr().out)
    source.unlink()  # the placed copy is what gets trusted: nothing is downloaded
    assert cli.main(["models", "fetch", "ghost_1_256", "--trust-first"]) == 0
    Runtime(RuntimeSettings(device="cpu")).ensure(["ghost_1_256"])


# -- what `models list` says --------------------------------------------------------------------------------------
def test_models_list_shows_pins_and_what_a_chain_allows(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["models", "list", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    pins = {model: [f["pin"] for f in row["files"]] for model, row in rows.items()}
    assert pins["hyperswap_1a_256"] == ["records"] and rows["hyperswap_1a_256"]["files"][0]["records"] == 5
    assert pins["simswap_unofficial_512"] == ["one record"] and pins["crossface_ghost"] == ["one record"]
    for model in (
        "ghost_1_256",
        "ghost_2_256",
        "blendswap_256",
        "wav2lip_96",
        "wav2lip_gan_96",
        "live_portrait_generator",
    ):
        assert pins[model] == ["trust-first"], model
    # GHOST is Apache-2.0, but its converter and the ArcFace recogniser it needs are not: the chain is not.
    ghost = rows["ghost_2_256"]
    assert ghost["commercial_use"] is True and ghost["chain_commercial_use"] is False
    assert ghost["needs"] == ["buffalo_l_w600k_r50", "crossface_ghost"]
    assert (
        ghost["chain_licence"]
        == "the chain is NON-COMMERCIAL: buffalo_l_w600k_r50, crossface_ghost do not allow commercial use"
    )
    assert rows["live_portrait_motion_extractor"]["chain_commercial_use"] is True
    assert cli.main(["models", "list"]) == 0
    text = capsys.readouterr().out
    assert "needs buffalo_l_w600k_r50, crossface_ghost: the chain is NON-COMMERCIAL" in text
    assert re.search(r"ghost_3_256\.onnx \(size not published\) — sha256 pinned to ONE public record", text)
    assert "no published sha256: `models fetch ghost_1_256 --trust-first` records one" in text


def test_the_guide_models_table_is_the_catalogue() -> None:
    """The guide's table of models by task says what `models list` does: licence, what the chain allows, pins."""
    guide = Path(__file__).parent.parent / "docs" / "guide" / "models.md"
    section = guide.read_text().split("\n## Licences\n")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (\w+) \| `(\w+)`(?: \(([^)]*)\))? \| (.+?) \| (.+?) \|$", section, re.M)
    manifest = Manifest.load()
    assert {model for _, model, *_ in rows} == set(manifest.models)
    for task, model, pins, licence, use in rows:
        spec = manifest.get(model)
        assert (task, licence) == (spec.task, spec.licence), model
        blocking = [m.id for m in manifest.chain(model) if not m.commercial_use]
        assert use == ("yes" if not blocking else f"no: needs {', '.join(blocking)}" if spec.commercial_use else "no")
        files = [f for f in spec.files if not f.embedded]
        expected = {"trust-first" for f in files if f.sha256 is None} | {"one record" for f in files if f.records == 1}
        assert set(filter(None, pins.split(", "))) == expected, model


def test_a_downloaded_graph_whose_entry_declares_nothing_is_not_run(tmp_path: Path) -> None:
    graph = tmp_path / "hs.onnx"
    tiny_graphs.swapper(graph, Manifest.load().get("hyperswap_1a_256").io)
    manifest = tiny_graphs.write_manifest(tmp_path / "m.toml", {"hyperswap_1a_256": graph})
    text = manifest.read_text()
    start = text.index("[io.hyperswap]")
    end = text.index("[swap.hyperswap]")
    undeclared = "\n".join(line for line in text[start:end].splitlines() if not line.startswith(("inputs", "outputs")))
    manifest.write_text(text[:start] + undeclared + "\n\n" + text[end:])
    with pytest.raises(ModelSignatureMismatch, match="declares no inputs and outputs to check it against"):
        _runtime(manifest, tmp_path).load("hyperswap_1a_256", "onnx")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("pixel_boost = [256, 512, 768, 1024]", "pixel_boost = [256, 384]"), "multiples of its input_size"),
        (('recogniser = "buffalo_l_w600k_r50"\nembedding = "unit"\npixel', 'recogniser = "crossface_ghost"\npixel'),
         "its recogniser 'crossface_ghost' is not a face_recogniser model"),
        (('source = "embedding"\nrecogniser = "buffalo_l_w600k_r50"\nembedding = "unit"\npixel',
          'source = "image"\npixel'), "an image source needs its crop's template and size"),
    ],
)  # fmt: skip
def test_a_swapper_entry_that_cannot_run_is_refused_when_the_catalogue_loads(
    change: tuple[str, str], message: str, tmp_path: Path
) -> None:
    from engine.core.errors import InvalidInput
    from engine.models.manifest import MANIFEST_PATH

    text = MANIFEST_PATH.read_text()
    start = text.index("[swap.hyperswap]")
    section = text[start:].replace(*change, 1)
    assert section != text[start:]
    (tmp_path / "m.toml").write_text(text[:start] + section)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        Manifest.load(tmp_path / "m.toml")
