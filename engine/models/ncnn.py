"""Read ncnn models (`.param` + `.bin`) and turn them into ONNX graphs and PyTorch state dicts.

The embedded Real-ESRGAN weights (ARCHITECTURE.md §8) ship only in ncnn format. This module reads them without the
ncnn runtime and without torch:

- `load` parses the two files into an `NcnnModel` (layers in file order plus float32 weights).
- `to_onnx` builds an ONNX graph straight from the ncnn layers, so ONNX Runtime can run the model.
- `to_state_dict` renames the weights to the official Real-ESRGAN/basicsr keys, so the standard RRDBNet and
  SRVGGNetCompact PyTorch modules (for example through spandrel) can load them.

Tensors follow ncnn's layout: one image is a C×H×W blob; in ONNX every blob gains a leading batch axis
(N×C×H×W). The Real-ESRGAN graphs take and return float32 RGB in [0, 1] (outputs overshoot slightly; clamp).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.core.errors import ModelUnavailable

logger = logging.getLogger(__name__)

PARAM_MAGIC = 7767517
"""First line of every text `.param` file."""

ARRAY_KEY_BASE = -23300
"""A `.param` key k ≤ -23300 holds an array (`count,v1,…`); it is stored under key `-23300 - k` (so -23310 → 10)."""

FP16_TAG = 0x01306B47
"""Little-endian uint32 before a tagged weight block: float16 values follow, padded to 4-byte multiples."""

FP32_TAG = 0
"""Little-endian uint32 before a tagged weight block: float32 values follow."""

# Layers whose ncnn implementation reads nothing from the .bin file. A type outside this set and outside the
# weighted types read by `_read_weights` makes `load` fail: its weight size is unknown, so every later layer
# would be read from the wrong offset.
_WEIGHTLESS_TYPES = frozenset(
    {
        "Input",
        "Split",
        "Concat",
        "Eltwise",
        "BinaryOp",
        "UnaryOp",
        "Interp",
        "PixelShuffle",
        "ReLU",
        "Sigmoid",
        "TanH",
        "Clip",
        "Pooling",
        "Dropout",
        "Noop",
        "Crop",
        "Slice",
        "Reshape",
        "Permute",
        "Flatten",
        "Softmax",
    }
)

ParamValue = int | float | tuple[int | float, ...]


class NcnnFormatError(ModelUnavailable, ValueError):
    """An ncnn `.param`/`.bin` pair is corrupted, mismatched or uses a feature this reader does not support.

    A ValueError (bad file contents) and a ModelUnavailable (exit 3: the model cannot be used as it is).
    """


@dataclass(frozen=True)
class NcnnLayer:
    """One line of a `.param` file.

    type: ncnn layer type, e.g. "Convolution".
    name: layer name, unique within the model (keys `NcnnModel.weights`).
    inputs / outputs: blob names consumed / produced, in file order.
    params: ncnn parameter id → value; an int or float as written (a value is a float when its text contains
        '.', 'e' or 'E', as ncnn decides), or a tuple for an array key (key k ≤ -23300 is stored under
        `-23300 - k`, the id ncnn itself uses: `-23310=1,0.2` becomes `params[10] == (0.2,)`).
    """

    type: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: dict[int, ParamValue]


@dataclass(frozen=True)
class NcnnModel:
    """A parsed ncnn model.

    layers: in file order, which is a topological order (every input blob is produced by an earlier layer).
    weights: layer name → float32 read-only arrays, only for layers that carry weights:
        Convolution → [weight O×I×kH×kW, bias O] (no bias when the layer's bias_term `5` is 0);
        PReLU → [slope C] (C = 1 means one slope shared by all channels).
    """

    layers: tuple[NcnnLayer, ...]
    weights: dict[str, list[npt.NDArray[np.float32]]]


def load(param_path: str | Path, bin_path: str | Path) -> NcnnModel:
    """Parse a text `.param` file and its `.bin` weights into an `NcnnModel`.

    Raises NcnnFormatError when either file is malformed, when a weight block has an unsupported storage tag
    (only float32 and float16 are read), when a layer type with unknown weight layout appears, or when the
    `.bin` file is shorter or longer than the layers need: a corrupted or mismatched pair never loads silently.
    """
    param_path, bin_path = Path(param_path), Path(bin_path)
    layers = _parse_param(param_path.read_text(encoding="utf-8"), param_path)
    weights = _read_weights(bin_path.read_bytes(), layers, bin_path)
    logger.debug("loaded ncnn model %s: %d layers, %d with weights", param_path.name, len(layers), len(weights))
    return NcnnModel(layers=layers, weights=weights)


def _parse_value(text: str, where: str) -> int | float:
    try:
        # ncnn's own rule (paramdict.cpp): a value is a float when its text has '.', 'e' or 'E'.
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise NcnnFormatError(f"{where}: cannot read parameter value {text!r}") from None


def _parse_param(text: str, path: Path) -> tuple[NcnnLayer, ...]:
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != [str(PARAM_MAGIC)]:
        raise NcnnFormatError(f"{path}: not a text ncnn .param file (first line must be {PARAM_MAGIC})")
    if len(lines) < 2 or len(lines[1]) != 2:
        raise NcnnFormatError(f"{path}: second line must hold the layer count and the blob count")
    layer_count, blob_count = (int(_parse_value(v, f"{path}:2")) for v in lines[1])

    layers: list[NcnnLayer] = []
    produced: set[str] = set()
    names: set[str] = set()
    for line_no, tokens in enumerate(lines[2:], start=3):
        where = f"{path}:{line_no}"
        if len(tokens) < 4:
            raise NcnnFormatError(f"{where}: a layer line needs type, name, input count and output count")
        layer_type, name = tokens[0], tokens[1]
        n_in, n_out = int(_parse_value(tokens[2], where)), int(_parse_value(tokens[3], where))
        if n_in < 0 or n_out < 0 or len(tokens) < 4 + n_in + n_out:
            raise NcnnFormatError(f"{where}: layer {name!r} lists fewer blobs than its counts say")
        inputs = tuple(tokens[4 : 4 + n_in])
        outputs = tuple(tokens[4 + n_in : 4 + n_in + n_out])
        params: dict[int, ParamValue] = {}
        for token in tokens[4 + n_in + n_out :]:
            key_text, sep, value_text = token.partition("=")
            if not sep:
                raise NcnnFormatError(f"{where}: parameter {token!r} is not key=value")
            key = int(_parse_value(key_text, where))
            value: ParamValue
            if key <= ARRAY_KEY_BASE:
                key = ARRAY_KEY_BASE - key
                count_text, *items = value_text.split(",")
                if int(_parse_value(count_text, where)) != len(items):
                    raise NcnnFormatError(f"{where}: array parameter {token!r} has a wrong element count")
                value = tuple(_parse_value(item, where) for item in items)
            else:
                value = _parse_value(value_text, where)
            if key in params:
                raise NcnnFormatError(f"{where}: parameter id {key} given twice in layer {name!r}")
            params[key] = value

        if name in names:
            raise NcnnFormatError(f"{where}: layer name {name!r} used twice")
        missing = [blob for blob in inputs if blob not in produced]
        if missing:
            raise NcnnFormatError(f"{where}: layer {name!r} reads blob(s) {missing} before any layer writes them")
        if any(blob in produced for blob in outputs) or len(set(outputs)) != len(outputs):
            raise NcnnFormatError(f"{where}: layer {name!r} writes a blob that is already written")
        names.add(name)
        produced.update(outputs)
        layers.append(NcnnLayer(layer_type, name, inputs, outputs, params))

    if len(layers) != layer_count or len(produced) != blob_count:
        raise NcnnFormatError(
            f"{path}: header declares {layer_count} layers and {blob_count} blobs, "
            f"the file has {len(layers)} layers and {len(produced)} blobs"
        )
    return tuple(layers)


class _BinCursor:
    """Reads consecutive blocks of a `.bin` file, failing with the layer's name when the file runs short."""

    def __init__(self, data: bytes, path: Path) -> None:
        self.data = data
        self.path = path
        self.offset = 0

    def take(self, nbytes: int, what: str) -> bytes:
        end = self.offset + nbytes
        if end > len(self.data):
            raise NcnnFormatError(
                f"{self.path}: file ends at byte {len(self.data)} while reading {what} "
                f"({nbytes} bytes from offset {self.offset}); the .bin does not match the .param"
            )
        block = self.data[self.offset : end]
        self.offset = end
        return block

    def raw_fp32(self, count: int, what: str) -> npt.NDArray[np.float32]:
        return np.frombuffer(self.take(4 * count, what), dtype="<f4").astype(np.float32)

    def tagged(self, count: int, what: str) -> npt.NDArray[np.float32]:
        tag_offset = self.offset
        tag = int.from_bytes(self.take(4, f"the storage tag of {what}"), "little")
        if tag == FP32_TAG:
            return self.raw_fp32(count, what)
        if tag == FP16_TAG:
            # ncnn pads float16 blocks to a multiple of 4 bytes (alignSize(count * 2, 4)).
            block = self.take((2 * count + 3) // 4 * 4, what)
            return np.frombuffer(block[: 2 * count], dtype="<f2").astype(np.float32)
        raise NcnnFormatError(
            f"{self.path}: {what} has storage tag 0x{tag:08X} at offset {tag_offset}; only float32 (0x00000000) "
            f"and float16 (0x{FP16_TAG:08X}) weights are supported (int8 or quantised models are not)"
        )


def _int_param(layer: NcnnLayer, key: int, default: int) -> int:
    value = layer.params.get(key, default)
    if not isinstance(value, int):
        raise NcnnFormatError(f"layer {layer.name!r} ({layer.type}): parameter {key} must be an integer, got {value!r}")
    return value


def _read_weights(data: bytes, layers: tuple[NcnnLayer, ...], path: Path) -> dict[str, list[npt.NDArray[np.float32]]]:
    cursor = _BinCursor(data, path)
    weights: dict[str, list[npt.NDArray[np.float32]]] = {}
    for layer in layers:
        what = f"layer {layer.name!r} ({layer.type})"
        if layer.type == "Convolution":
            num_output = _int_param(layer, 0, 0)
            kernel_w = _int_param(layer, 1, 0)
            kernel_h = _int_param(layer, 11, kernel_w)
            weight_size = _int_param(layer, 6, 0)
            if _int_param(layer, 8, 0) or _int_param(layer, 19, 0):
                raise NcnnFormatError(f"{path}: {what} is int8-quantised or has dynamic weights; not supported")
            per_input = num_output * kernel_h * kernel_w
            if per_input <= 0 or weight_size <= 0 or weight_size % per_input:
                raise NcnnFormatError(
                    f"{path}: {what} has weight_data_size {weight_size}, not a multiple of "
                    f"num_output × kernel = {per_input}"
                )
            shape = (num_output, weight_size // per_input, kernel_h, kernel_w)
            arrays = [cursor.tagged(weight_size, f"the weights of {what}").reshape(shape)]
            if _int_param(layer, 5, 0):
                arrays.append(cursor.raw_fp32(num_output, f"the bias of {what}"))
        elif layer.type == "PReLU":
            num_slope = _int_param(layer, 0, 0)
            if num_slope <= 0:
                raise NcnnFormatError(f"{path}: {what} has num_slope {num_slope}")
            arrays = [cursor.raw_fp32(num_slope, f"the slopes of {what}")]
        elif layer.type in _WEIGHTLESS_TYPES:
            continue
        else:
            raise NcnnFormatError(
                f"{path}: {what}: layer type {layer.type!r} is not supported (its weight layout is unknown)"
            )
        for array in arrays:
            array.flags.writeable = False  # the model is frozen and may be cached and shared
        weights[layer.name] = arrays
    if cursor.offset != len(data):
        raise NcnnFormatError(
            f"{path}: {len(data) - cursor.offset} bytes left over after the last layer's weights "
            f"(read {cursor.offset} of {len(data)}); the .bin does not match the .param"
        )
    return weights


def _float_param(layer: NcnnLayer, key: int, default: float) -> float:
    value = layer.params.get(key, default)
    if isinstance(value, tuple):
        raise NcnnFormatError(f"layer {layer.name!r} ({layer.type}): parameter {key} must be a number, got {value!r}")
    return float(value)


def _floats_param(layer: NcnnLayer, key: int) -> tuple[float, ...]:
    """An array parameter as floats; a lone number counts as a one-element array, () when absent."""
    value = layer.params.get(key, ())
    return tuple(float(v) for v in value) if isinstance(value, tuple) else (float(value),)


class _OnnxGraph:
    """Accumulates the ONNX nodes and initializers of `to_onnx`, one ncnn layer at a time.

    `values` maps an ncnn blob name to the ONNX value holding it; a Split's outputs alias its input.
    """

    def __init__(self, final_blob: str) -> None:
        self.final_blob = final_blob
        self.values: dict[str, str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def define(self, blob: str) -> str:
        # Prefixes keep blob names apart from initializer names and from the reserved `input`/`output`.
        self.values[blob] = "output" if blob == self.final_blob else f"blob/{blob}"
        return self.values[blob]

    def constant(self, name: str, array: npt.ArrayLike) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), f"param/{name}"))
        return f"param/{name}"

    def node(self, op: str, inputs: list[str], output: str, name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attrs))
        return output

    def add_layer(self, layer: NcnnLayer, weights: list[npt.NDArray[np.float32]]) -> None:
        """Append the ONNX nodes computing `layer`; raise NcnnFormatError for what has no exact translation."""
        name, params = layer.name, layer.params
        src = [self.values[blob] for blob in layer.inputs]

        def unsupported(detail: str) -> NcnnFormatError:
            return NcnnFormatError(f"layer {name!r} ({layer.type}): {detail} is not supported by to_onnx")

        def integer(key: int, default: int) -> int:
            return _int_param(layer, key, default)

        def expect_inputs(low: int, high: int) -> None:
            if not low <= len(src) <= high:
                raise unsupported(f"{len(src)} input blob(s)")
            if layer.type != "Split" and len(layer.outputs) != 1:
                raise unsupported(f"{len(layer.outputs)} output blobs")

        match layer.type:
            case "Input":
                expect_inputs(0, 0)
                self.values[layer.outputs[0]] = "input"
            case "Split":
                expect_inputs(1, 1)
                for blob in layer.outputs:
                    self.values[blob] = src[0]
            case "Convolution":
                expect_inputs(1, 1)
                kernel_w = integer(1, 0)
                dilation_w, stride_w, pad_left = integer(2, 1), integer(3, 1), integer(4, 0)
                pad_top = integer(14, pad_left)
                pads = [pad_top, pad_left, integer(16, pad_top), integer(15, pad_left)]  # ONNX: begins, then ends
                activation = integer(9, 0)
                if min(pads) < 0:
                    raise unsupported("automatic ('same') padding")
                if _float_param(layer, 18, 0.0) != 0.0:
                    raise unsupported("a non-zero padding value")
                if activation not in (0, 1, 2):
                    raise unsupported(f"fused activation type {activation}")
                conv_inputs = [src[0], self.constant(f"{name}/weight", weights[0])]
                if len(weights) > 1:
                    conv_inputs.append(self.constant(f"{name}/bias", weights[1]))
                conv_out = self.define(layer.outputs[0]) if activation == 0 else f"tmp/{name}/conv"
                self.node(
                    "Conv",
                    conv_inputs,
                    conv_out,
                    name,
                    kernel_shape=[integer(11, kernel_w), kernel_w],
                    dilations=[integer(12, dilation_w), dilation_w],
                    strides=[integer(13, stride_w), stride_w],
                    pads=pads,
                )
                if activation == 1:
                    self.node("Relu", [conv_out], self.define(layer.outputs[0]), f"{name}/relu")
                elif activation == 2:
                    slopes = _floats_param(layer, 10)
                    if not slopes:
                        raise unsupported("a LeakyReLU activation without its slope (-23310)")
                    self.node(
                        "LeakyRelu", [conv_out], self.define(layer.outputs[0]), f"{name}/leakyrelu", alpha=slopes[0]
                    )
            case "PReLU":
                expect_inputs(1, 1)
                # [C, 1, 1] broadcasts one slope per channel over N×C×H×W (C = 1: one shared slope).
                slope = self.constant(f"{name}/slope", weights[0].reshape(-1, 1, 1))
                self.node("PRelu", [src[0], slope], self.define(layer.outputs[0]), name)
            case "Concat":
                expect_inputs(1, len(src))
                axis = integer(0, 0)
                # ncnn's axes skip the batch: its axis 0 (channels of a C×H×W blob) is ONNX axis 1.
                self.node("Concat", src, self.define(layer.outputs[0]), name, axis=axis + 1 if axis >= 0 else axis)
            case "Eltwise":
                expect_inputs(2, len(src))
                op_type = integer(0, 0)
                ops = {0: "Mul", 1: "Add", 2: "Max"}
                if op_type not in ops:
                    raise unsupported(f"operation type {op_type}")
                terms = list(src)
                coeffs = _floats_param(layer, 1)
                if op_type == 1 and coeffs:  # ncnn applies coefficients to sums only
                    if len(coeffs) != len(src):
                        raise unsupported(f"{len(coeffs)} coefficients for {len(src)} inputs")
                    for i, coeff in enumerate(coeffs):
                        if coeff != 1.0:
                            factor = self.constant(f"{name}/coeff{i}", coeff)
                            terms[i] = self.node("Mul", [src[i], factor], f"tmp/{name}/term{i}", f"{name}/scale{i}")
                total = terms[0]
                for i, term in enumerate(terms[1:], start=1):
                    target = self.define(layer.outputs[0]) if i == len(terms) - 1 else f"tmp/{name}/sum{i}"
                    total = self.node(ops[op_type], [total, term], target, f"{name}/{i}")
            case "BinaryOp":
                with_scalar = integer(1, 0)
                operand_blobs = 1 if with_scalar else 2
                expect_inputs(operand_blobs, operand_blobs)
                op_type = integer(0, 0)
                # ncnn op id → (ONNX op, operands swapped): 7-9 are the reversed forms of sub, div and pow.
                ops = {
                    0: ("Add", False),
                    1: ("Sub", False),
                    2: ("Mul", False),
                    3: ("Div", False),
                    4: ("Max", False),
                    5: ("Min", False),
                    6: ("Pow", False),
                    7: ("Sub", True),
                    8: ("Div", True),
                    9: ("Pow", True),
                }
                if op_type not in ops:
                    raise unsupported(f"operation type {op_type}")
                op, swapped = ops[op_type]
                operands = [src[0], self.constant(f"{name}/b", _float_param(layer, 2, 0.0))] if with_scalar else src
                self.node(op, operands[::-1] if swapped else operands, self.define(layer.outputs[0]), name)
            case "Interp":
                expect_inputs(1, 1)
                resize_type = integer(0, 0)
                # 3/4 = output height/width, 5 = dynamic_target_size, 9 = size_expr: all give sizes, not scales.
                if integer(3, 0) or integer(4, 0) or integer(5, 0) or 9 in params:
                    raise unsupported("a fixed or dynamic output size (only a fixed scale is)")
                if resize_type == 1:
                    # ncnn's nearest reads source pixel floor(dst / scale), as PyTorch's F.interpolate "nearest".
                    modes: dict[str, Any] = {
                        "mode": "nearest",
                        "coordinate_transformation_mode": "asymmetric",
                        "nearest_mode": "floor",
                    }
                elif resize_type == 2:
                    modes = {
                        "mode": "linear",
                        "coordinate_transformation_mode": "align_corners" if integer(6, 0) else "half_pixel",
                    }
                else:
                    raise unsupported(f"resize type {resize_type} (1 nearest and 2 bilinear are)")
                scale_h, scale_w = _float_param(layer, 1, 1.0), _float_param(layer, 2, 1.0)
                scales = self.constant(f"{name}/scales", [1.0, 1.0, scale_h, scale_w])
                self.node("Resize", [src[0], "", scales], self.define(layer.outputs[0]), name, **modes)
            case "PixelShuffle":
                expect_inputs(1, 1)
                mode = integer(1, 0)
                if mode not in (0, 1):
                    raise unsupported(f"mode {mode}")
                # ncnn mode 0 orders channels as PyTorch's PixelShuffle (ONNX CRD); mode 1 as TensorFlow (DCR).
                self.node(
                    "DepthToSpace",
                    src,
                    self.define(layer.outputs[0]),
                    name,
                    blocksize=integer(0, 1),
                    mode="CRD" if mode == 0 else "DCR",
                )
            case _:
                raise NcnnFormatError(f"layer {name!r}: layer type {layer.type!r} is not supported by to_onnx")


def to_onnx(model: NcnnModel, opset: int = 17) -> bytes:
    """Build a serialized ONNX model that computes what ncnn computes for `model`, in float32.

    Graph input `input`: float32 N×C×H×W with dynamic N, H and W (C is taken from the convolutions that read
    the input, "C" when they do not say). Graph output `output`: float32 N×C'×H'×W'. For the Real-ESRGAN models
    C = C' = 3 (RGB in [0, 1]) and H' = 4H, W' = 4W.

    Supported layers: Input, Split, Convolution (with no, ReLU or LeakyReLU fused activation), PReLU, Concat,
    Eltwise (product, sum with optional coefficients, max), BinaryOp (add, sub, mul, div, max, min, pow and the
    reversed forms, with a blob or a scalar), Interp (nearest or bilinear, by a fixed scale) and PixelShuffle.
    Blobs are taken to be images (C×H×W in ncnn), as in every image-to-image model.
    Raises ValueError (an NcnnFormatError) naming the layer for any other type or unsupported parameter, or when
    the graph has not exactly one Input layer and one unconsumed output blob. Needs opset ≥ 13.
    """
    if opset < 13:
        raise ValueError(f"to_onnx needs ONNX opset 13 or newer (Resize with an optional roi), got {opset}")
    input_layers = [layer for layer in model.layers if layer.type == "Input"]
    if len(input_layers) != 1:
        raise NcnnFormatError(f"to_onnx needs exactly one Input layer, found {len(input_layers)}")
    consumed = {blob for layer in model.layers for blob in layer.inputs}
    terminal = [blob for layer in model.layers for blob in layer.outputs if blob not in consumed]
    if len(terminal) != 1:
        raise NcnnFormatError(f"to_onnx needs exactly one unconsumed output blob, found {terminal}")

    graph = _OnnxGraph(final_blob=terminal[0])
    for layer in model.layers:
        graph.add_layer(layer, model.weights.get(layer.name, []))
    if graph.values[terminal[0]] != "output":
        # The output blob is the input itself or a Split alias, so no node wrote `output`.
        graph.node("Identity", [graph.values[terminal[0]]], "output", "output")

    in_channels = {
        model.weights[layer.name][0].shape[1]
        for layer in model.layers
        if layer.type == "Convolution" and graph.values[layer.inputs[0]] == "input"
    }
    channels: int | str = in_channels.pop() if len(in_channels) == 1 else "C"
    graph_proto = helper.make_graph(
        graph.nodes,
        "ncnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", channels, "H", "W"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", None, None, None])],
        initializer=graph.initializers,
    )
    opset_ids = [helper.make_opsetid("", opset)]
    onnx_model = helper.make_model(
        graph_proto,
        opset_imports=opset_ids,
        # The oldest IR version carrying this opset, so older runtimes (TensorRT, older ONNX Runtime) accept it.
        ir_version=helper.find_min_ir_version_for(opset_ids),
        producer_name="facestudio.ncnn",
    )
    onnx.checker.check_model(onnx_model, full_check=True)
    return onnx_model.SerializeToString()


def to_state_dict(model: NcnnModel, arch: str) -> dict[str, npt.NDArray[np.float32]]:
    """Name `model`'s weights with the official Real-ESRGAN/basicsr state-dict keys of `arch`.

    arch "RRDBNet" (x4plus, x4plus-anime-6B): conv_first, body.{i}.rdb{1,2,3}.conv{1..5}, conv_body, conv_up1,
    conv_up2, conv_hr, conv_last (each `.weight` O×I×3×3 and `.bias` O); the block count comes from the file.
    arch "SRVGGNetCompact" (realesr-animevideov3, PReLU variant): body.{k}.weight/.bias for the convolutions at
    even k and body.{k}.weight (C slopes) for the PReLUs at odd k.

    Relies on ncnn writing the convolutions in state-dict order (ARCHITECTURE.md §8) and checks every shape and that
    the layer sequence fits the architecture; raises ValueError (an NcnnFormatError) when it does not, or for an
    unknown `arch`. Values are float32 numpy arrays, read-only and shared with `model.weights` (copy them, e.g.
    `torch.tensor(a)`, before handing them to PyTorch).
    """
    weighted = [layer for layer in model.layers if layer.name in model.weights]
    if arch == "RRDBNet":
        return _rrdbnet_state_dict(model, weighted)
    if arch == "SRVGGNetCompact":
        return _srvgg_state_dict(model, weighted)
    raise ValueError(f"to_state_dict knows the architectures 'RRDBNet' and 'SRVGGNetCompact', not {arch!r}")


def _check_conv(
    model: NcnnModel, layer: NcnnLayer, key: str, out_channels: int, in_channels: int
) -> dict[str, npt.NDArray[np.float32]]:
    arrays = model.weights[layer.name]
    expected = (out_channels, in_channels, 3, 3)
    if layer.type != "Convolution" or len(arrays) != 2 or arrays[0].shape != expected:
        found = arrays[0].shape if layer.type == "Convolution" else layer.type
        raise NcnnFormatError(
            f"layer {layer.name!r} should be {key}, a 3×3 convolution with bias of shape {expected}; found {found}"
        )
    return {f"{key}.weight": arrays[0], f"{key}.bias": arrays[1]}


def _rrdbnet_state_dict(model: NcnnModel, weighted: list[NcnnLayer]) -> dict[str, npt.NDArray[np.float32]]:
    # conv_first + 15 convs per RRDB block (3 dense blocks × 5 convs) + conv_body, conv_up1, conv_up2, conv_hr,
    # conv_last.
    num_blocks, rest = divmod(len(weighted) - 6, 15)
    if rest or num_blocks < 1 or weighted[0].type != "Convolution":
        raise NcnnFormatError(f"{len(weighted)} weighted layers do not fit an RRDBNet (6 + 15 × blocks convolutions)")
    num_in, num_feat = model.weights[weighted[0].name][0].shape[1], model.weights[weighted[0].name][0].shape[0]
    grow = model.weights[weighted[1].name][0].shape[0]
    num_out = model.weights[weighted[-1].name][0].shape[0]

    convs = [("conv_first", num_feat, num_in)]
    for block in range(num_blocks):
        for rdb in range(1, 4):
            convs += [(f"body.{block}.rdb{rdb}.conv{i}", grow, num_feat + (i - 1) * grow) for i in range(1, 5)]
            convs.append((f"body.{block}.rdb{rdb}.conv5", num_feat, num_feat + 4 * grow))
    convs += [(key, num_feat, num_feat) for key in ("conv_body", "conv_up1", "conv_up2", "conv_hr")]
    convs.append(("conv_last", num_out, num_feat))

    state: dict[str, npt.NDArray[np.float32]] = {}
    for layer, (key, out_channels, in_channels) in zip(weighted, convs, strict=True):
        state.update(_check_conv(model, layer, key, out_channels, in_channels))
    return state


def _srvgg_state_dict(model: NcnnModel, weighted: list[NcnnLayer]) -> dict[str, npt.NDArray[np.float32]]:
    # body = conv, PReLU, (conv, PReLU) × num_conv, conv: an odd count, at least conv, PReLU, conv.
    if len(weighted) < 3 or len(weighted) % 2 == 0 or weighted[0].type != "Convolution":
        raise NcnnFormatError(f"{len(weighted)} weighted layers do not fit an SRVGGNetCompact (conv, PReLU, …, conv)")
    num_in, num_feat = model.weights[weighted[0].name][0].shape[1], model.weights[weighted[0].name][0].shape[0]
    num_last = model.weights[weighted[-1].name][0].shape[0]

    state: dict[str, npt.NDArray[np.float32]] = {}
    for k, layer in enumerate(weighted):
        if k % 2:
            slopes = model.weights[layer.name][0]
            if layer.type != "PReLU" or slopes.shape != (num_feat,):
                found = slopes.shape if layer.type == "PReLU" else layer.type
                raise NcnnFormatError(
                    f"layer {layer.name!r} should be body.{k}, a PReLU with {num_feat} slopes; found {found}"
                )
            state[f"body.{k}.weight"] = slopes
        else:
            out_channels = num_last if k == len(weighted) - 1 else num_feat
            state.update(_check_conv(model, layer, f"body.{k}", out_channels, num_in if k == 0 else num_feat))
    return state
