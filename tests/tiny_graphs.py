"""Tiny ONNX stand-ins with the real signatures of the catalogue's swappers, converters, enhancers, LivePortrait
parts and Wav2Lip (names, element types, shapes as the manifest declares them), and a temp manifest that pins
them by sha256 over file://. Weights are random; what a test needs from a graph's arithmetic is said per graph.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.models.manifest import MANIFEST_PATH, IOSpec

OPSET = 13
_TYPES = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "int64": TensorProto.INT64}


def _save(nodes: list, inputs: list, outputs: list, inits: list, path: Path) -> bytes:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path.read_bytes()


def _value(name: str, shape: Sequence[int | str], dtype: str = "float32") -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _TYPES[dtype], list(shape))


def _shape(spec_shape: Sequence[int | str] | None, size: int | None) -> list[int]:
    assert spec_shape is not None
    return [size if d == "size" else d for d in spec_shape]  # type: ignore[misc]


def swapper(path: Path, io: IOSpec, *, identity: bool = False, seed: int = 0) -> bytes:
    """A face swapper with `io`'s declared signature. Output[0] = squash(conv(target) + identity term) in the
    declared output range ([-1, 1]: tanh; [0, 1]: sigmoid), so the result depends on the crop and on the source;
    further declared outputs (HyperSwap's mask) are a sigmoid plane. `identity`: output[0] = target + 0·source,
    the graph hands back exactly the tensor it was given (a convention test reads its input statistics there)."""
    rng = np.random.default_rng(seed)
    shapes = {str(t.name): _shape(t.shape, None) for t in io.inputs}
    target, source = shapes[io.input], shapes[str(io.source)]
    side = target[-1]
    inits = [numpy_helper.from_array(np.float32(0.0), "zero")]
    nodes = [
        helper.make_node("ReduceMean", [str(io.source)], ["s_mean"], keepdims=0),
        helper.make_node("Mul", ["s_mean", "zero"], ["s_zero"]),
    ]
    if identity:
        nodes.append(helper.make_node("Add", [io.input, "s_zero"], ["out0"]))
    else:
        inits += [
            numpy_helper.from_array(rng.normal(0, 0.4, (3, 3, 3, 3)).astype(np.float32), "conv_w"),
            numpy_helper.from_array(np.zeros(3, np.float32), "conv_b"),
        ]
        nodes.append(helper.make_node("Conv", [io.input, "conv_w", "conv_b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4))
        if len(source) == 2:  # an embedding: a dense layer to one value per channel
            inits.append(numpy_helper.from_array(rng.normal(0, 3.0, (source[1], 3)).astype(np.float32), "id_w"))
            inits.append(numpy_helper.from_array(np.int64([1, 3, 1, 1]), "id_shape"))
            nodes += [
                helper.make_node("MatMul", [str(io.source), "id_w"], ["id"]),
                helper.make_node("Reshape", ["id", "id_shape"], ["id4"]),
            ]
        else:  # an image: its per-channel means
            inits.append(numpy_helper.from_array(np.float32(4.0), "id_gain"))
            nodes += [
                helper.make_node("ReduceMean", [str(io.source)], ["id_m"], axes=[2, 3], keepdims=1),
                helper.make_node("Mul", ["id_m", "id_gain"], ["id4"]),
            ]
        nodes += [helper.make_node("Add", ["c", "id4"], ["pre"]), helper.make_node("Add", ["pre", "s_zero"], ["pre0"])]
        nodes.append(helper.make_node("Tanh" if io.output_range[0] < 0 else "Sigmoid", ["pre0"], ["out0"]))
    outputs = [_value(io.outputs[0].name or "out0", [1, 3, side, side])]
    if io.outputs[0].name and io.outputs[0].name != "out0":
        nodes.append(helper.make_node("Identity", ["out0"], [io.outputs[0].name]))
    for extra in io.outputs[1:]:
        nodes += [
            helper.make_node("ReduceMean", [io.input], [f"{extra.name}_m"], axes=[1], keepdims=1),
            helper.make_node("Sigmoid", [f"{extra.name}_m"], [str(extra.name)]),
        ]
        outputs.append(_value(str(extra.name), [1, 1, side, side]))
    inputs = [_value(str(t.name), shapes[str(t.name)]) for t in io.inputs]
    return _save(nodes, inputs, outputs, inits, path)


def converter(path: Path, seed: int = 1) -> bytes:
    """CrossFace's signature: `input` [1,512] → `output` [1,512], a random dense map (not norm-preserving)."""
    w = np.random.default_rng(seed).normal(0, 0.3, (512, 512)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["input", "w"], ["output"])]
    return _save(
        nodes, [_value("input", [1, 512])], [_value("output", [1, 512])], [numpy_helper.from_array(w, "w")], path
    )


def enhancer(path: Path, io: IOSpec, size: int) -> bytes:
    """A face restorer with `io`'s signature at `size` px: output[0] = tanh(conv(input)) in [-1, 1]; a float64
    `weight` input (CodeFormer) is cast and added, so the output depends on it."""
    w = np.random.default_rng(2).normal(0, 0.1, (3, 3, 3, 3)).astype(np.float32)
    w[range(3), range(3), 1, 1] += 1.0  # about the input itself, sharpened a little
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(3, np.float32), "b")]
    nodes = [helper.make_node("Conv", [io.input, "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4)]
    inputs = [_value(io.input, [1, 3, size, size])]
    last = "c"
    if io.fidelity is not None:
        dtype = io.input_type(io.fidelity)
        inputs.append(_value(io.fidelity, [1], dtype))
        nodes += [
            helper.make_node("Cast", [io.fidelity], ["wf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["c", "wf"], ["cw"]),
        ]
        last = "cw"
    name = io.outputs[0].name or "restored"
    nodes.append(helper.make_node("Tanh", [last], [name]))
    return _save(nodes, inputs, [_value(name, [1, 3, size, size])], inits, path)


def live_portrait(folder: Path) -> dict[str, Path]:
    """The three LivePortrait parts the expression restorer runs, with the catalogue's names and shapes.

    feature extractor: `input` [1,3,256,256] → a [1,3,32,32] "volume" (the image average-pooled ×8).
    motion extractor: `input` → pitch, yaw, roll [1,1] (degrees: 0), scale [1,1] (1), translation [1,3] (0),
    expression [1,21,3] = a dense map of the image's 8×8 average-pooled pixels (so faces differ), keypoints
    [1,21,3] (fixed). generator: `feature_volume`, `source`, `target` [1,21,3] → [1,3,512,512] in [0, 1]:
    sigmoid(upsampled volume·2 − 1 + the mean of (source − target)·50)."""
    rng = np.random.default_rng(5)
    paths = {
        m: folder / f"{m}.onnx"
        for m in ("live_portrait_feature_extractor", "live_portrait_motion_extractor", "live_portrait_generator")
    }
    pool = helper.make_node("AveragePool", ["input"], ["volume"], kernel_shape=[8, 8], strides=[8, 8])
    _save(
        [pool],
        [_value("input", [1, 3, 256, 256])],
        [_value("volume", [1, 3, 32, 32])],
        [],
        paths["live_portrait_feature_extractor"],
    )
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.05, (3 * 32 * 32, 63)).astype(np.float32), "exp_w"),
        numpy_helper.from_array(np.int64([1, 21, 3]), "pts_shape"),
        numpy_helper.from_array(rng.normal(0, 0.3, (1, 21, 3)).astype(np.float32), "keypoints"),
        numpy_helper.from_array(np.zeros((1, 1), np.float32), "angle"),
        numpy_helper.from_array(np.ones((1, 1), np.float32), "scale_c"),
        numpy_helper.from_array(np.zeros((1, 3), np.float32), "shift_c"),
    ]
    nodes = [
        helper.make_node("AveragePool", ["input"], ["p"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("MatMul", ["f", "exp_w"], ["e"]),
        helper.make_node("Reshape", ["e", "pts_shape"], ["expression"]),
        helper.make_node("Identity", ["keypoints"], ["motion_points"]),
    ]
    nodes += [helper.make_node("Identity", ["angle"], [n]) for n in ("pitch", "yaw", "roll")]
    nodes += [
        helper.make_node("Identity", ["scale_c"], ["scale"]),
        helper.make_node("Identity", ["shift_c"], ["translation"]),
    ]
    outs = [_value(n, [1, 1]) for n in ("pitch", "yaw", "roll", "scale")] + [_value("translation", [1, 3])]
    outs += [_value("expression", [1, 21, 3]), _value("motion_points", [1, 21, 3])]
    _save(nodes, [_value("input", [1, 3, 256, 256])], outs, inits, paths["live_portrait_motion_extractor"])
    inits = [
        numpy_helper.from_array(np.float32([1, 1, 16, 16]), "scales"),
        numpy_helper.from_array(np.float32(2.0), "two"),
        numpy_helper.from_array(np.float32(1.0), "one"),
        numpy_helper.from_array(np.float32(50.0), "gain"),
    ]
    nodes = [
        helper.make_node(
            "Resize",
            ["feature_volume", "", "scales"],
            ["up"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),  # fmt: skip
        helper.make_node("Mul", ["up", "two"], ["up2"]),
        helper.make_node("Sub", ["up2", "one"], ["up3"]),
        helper.make_node("Sub", ["source", "target"], ["d"]),
        helper.make_node("ReduceMean", ["d"], ["dm"], keepdims=0),
        helper.make_node("Mul", ["dm", "gain"], ["dg"]),
        helper.make_node("Add", ["up3", "dg"], ["pre"]),
        helper.make_node("Sigmoid", ["pre"], ["image"]),
    ]
    ins = [_value("feature_volume", [1, 3, 32, 32]), _value("source", [1, 21, 3]), _value("target", [1, 21, 3])]
    _save(nodes, ins, [_value("image", [1, 3, 512, 512])], inits, paths["live_portrait_generator"])
    return paths


def wav2lip(path: Path, gain: float = 1.0) -> bytes:
    """Wav2Lip's signature: `source` [1,1,80,16] mel, `target` [1,6,96,96] → [1,3,96,96] in [0, 1]: the reference
    half of the target (channels 3–5) plus `gain`·(mean mel + 4). Silence (every mel value −4) gives back the
    crop as it was; speech brightens the mouth: the output depends on the audio window it gets."""
    inits = [
        numpy_helper.from_array(np.int64([3, 3]), "halves"),
        numpy_helper.from_array(np.float32(4.0), "four"),
        numpy_helper.from_array(np.float32(gain), "gain"),
    ]
    nodes = [
        helper.make_node("Split", ["target", "halves"], ["masked", "ref"], axis=1),
        helper.make_node("ReduceMean", ["source"], ["m"], keepdims=0),
        helper.make_node("Add", ["m", "four"], ["m4"]),
        helper.make_node("Mul", ["m4", "gain"], ["lift"]),
        helper.make_node("Add", ["ref", "lift"], ["mouth"]),
    ]
    ins = [_value("source", [1, 1, 80, 16]), _value("target", [1, 6, 96, 96])]
    return _save(nodes, ins, [_value("mouth", [1, 3, 96, 96])], inits, path)


# -- the temp manifest ----------------------------------------------------------------------------------------
def _tables(text: str) -> list[tuple[str, str]]:
    """The TOML text split into (header name, text) per table (`[name]` and `[[name]]`), in file order."""
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


def write_manifest(
    path: Path,
    files: Mapping[str, Path | tuple[Path, str]],
    extra: str = "",
    base: Path = MANIFEST_PATH,
    url: Callable[[Path], str] = Path.as_uri,
) -> Path:
    """The built-in manifest with each model in `files` served by one file: a real file's format, name and I/O
    override (its first file, or the one named in a (path, filename) pair), with url/size/sha256 of the tiny
    file (its URL: `url(tiny file)`, file:// by default); `extra` TOML appended (new entries). Everything else
    (io specs, swap tables, templates, the embedded models) is copied as it is."""
    tables = _tables(base.read_text(encoding="utf-8"))
    replaced = {f"models.{model_id}.files" for model_id in files}
    parts = [text for name, text in tables if name not in replaced]
    for model_id, given in files.items():
        tiny, real = given if isinstance(given, tuple) else (given, None)
        first = next(
            text
            for name, text in tables
            if name == f"models.{model_id}.files" and (real is None or f'filename = "{real}"' in text)
        )
        keys = {k: re.search(rf'^{k} = "([^"]+)"', first, re.M) for k in ("format", "filename", "io")}
        data = tiny.read_bytes()
        io = f'io = "{keys["io"][1]}"\n' if keys["io"] else ""
        parts.append(
            f"[[models.{model_id}.files]]\n"
            f'format = "{keys["format"][1]}"\n'  # type: ignore[index]
            f'filename = "{keys["filename"][1]}"\n'  # type: ignore[index]
            f'url = "{url(tiny)}"\n'
            f"size = {len(data)}\n"
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\n{io}'
        )
    path.write_text("\n".join(parts) + "\n" + extra, encoding="utf-8")
    return path


# -- the toolbox's processors ---------------------------------------------------------------------------------
def _values(names: Sequence[str], arrays: Sequence[np.ndarray]) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.asarray(a), n) for n, a in zip(names, arrays, strict=True)]


def fran(path: Path, gain: float = 2.0) -> bytes:
    """FRAN's signature: `target` [1,3,1024,1024] RGB [0, 1], `direction` [2] → [1,3,1024,1024] in [0, 1]:
    clip(target + gain·(direction[1] − direction[0])): older brightens the face, younger darkens it, and the
    output tells which direction it was given."""
    nodes = [
        helper.make_node("Mul", ["direction", "signs"], ["d"]),
        helper.make_node("ReduceSum", ["d"], ["delta"], keepdims=0),
        helper.make_node("Mul", ["delta", "gain"], ["lift"]),
        helper.make_node("Add", ["target", "lift"], ["raw"]),
        helper.make_node("Clip", ["raw", "zero", "one"], ["aged"]),
    ]
    inits = _values(
        ["signs", "gain", "zero", "one"], [np.float32([-1, 1]), np.float32(gain), np.float32(0), np.float32(1)]
    )
    ins = [_value("target", [1, 3, 1024, 1024]), _value("direction", [2])]
    return _save(nodes, ins, [_value("aged", [1, 3, 1024, 1024])], inits, path)


def styleganex(path: Path) -> bytes:
    """StyleGANEX age's signature: `target` [1,3,256,256], `target_with_background` [1,3,384,384], `direction` (a
    scalar) → [1,3,768,768] in [−1, 1]: the wider view upsampled ×2 plus the direction (its mean: 0·target)."""
    nodes = [
        helper.make_node("ReduceMean", ["target"], ["t_mean"], keepdims=0),
        helper.make_node("Mul", ["t_mean", "zero"], ["t_zero"]),
        helper.make_node("Resize", ["target_with_background", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Add", ["up", "direction"], ["moved"]),
        helper.make_node("Add", ["moved", "t_zero"], ["raw"]),
        helper.make_node("Clip", ["raw", "minus", "one"], ["aged"]),
    ]
    inits = _values(
        ["zero", "scales", "minus", "one"], [np.float32(0), np.float32([1, 1, 2, 2]), np.float32(-1), np.float32(1)]
    )
    ins = [
        _value("target", [1, 3, 256, 256]),
        _value("target_with_background", [1, 3, 384, 384]),
        _value("direction", []),
    ]
    return _save(nodes, ins, [_value("aged", [1, 3, 768, 768])], inits, path)


def fairface(path: Path, age_group: int = 4) -> bytes:
    """FairFace's signature: `input` [1,3,224,224] → race, gender, age indices (int64 [1]); the age group is
    `age_group` plus the crop's mean (0 for a normalised grey crop, floored), so a brighter face reads older."""
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["m"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Floor", ["m"], ["f"]),
        helper.make_node("Add", ["f", "group"], ["g"]),
        helper.make_node("Cast", ["g"], ["age"], to=TensorProto.INT64),
        helper.make_node("Identity", ["zero"], ["race"]),
        helper.make_node("Identity", ["zero"], ["gender"]),
    ]
    inits = _values(["group", "zero"], [np.float32([age_group]), np.int64([0])])
    outs = [helper.make_tensor_value_info(n, TensorProto.INT64, [1]) for n in ("race", "gender", "age")]
    return _save(nodes, [_value("input", [1, 3, 224, 224])], outs, inits, path)


def retargeter(path: Path, width: int, seed: int) -> bytes:
    """A LivePortrait retargeter's signature: `input` [1,width] → [1,63], a fixed random dense map of the last
    `width − 63` values (the openings) alone, so the offset depends on what opening is asked for."""
    w = np.zeros((width, 63), np.float32)
    w[63:] = np.random.default_rng(seed).normal(0, 0.05, (width - 63, 63))
    nodes = [helper.make_node("MatMul", ["input", "w"], ["offset"])]
    return _save(nodes, [_value("input", [1, width])], [_value("offset", [1, 63])], _values(["w"], [w]), path)


def stitcher(path: Path) -> bytes:
    """The LivePortrait stitcher's signature: `source`, `target` [1,21,3] → 0.9·source + 0.1·target."""
    nodes = [
        helper.make_node("Mul", ["source", "a"], ["s"]),
        helper.make_node("Mul", ["target", "b"], ["t"]),
        helper.make_node("Add", ["s", "t"], ["stitched"]),
    ]
    ins = [_value("source", [1, 21, 3]), _value("target", [1, 21, 3])]
    return _save(
        nodes, ins, [_value("stitched", [1, 21, 3])], _values(["a", "b"], [np.float32(0.9), np.float32(0.1)]), path
    )


def ddcolor(path: Path) -> bytes:
    """DDColor's signature: `input` [1,3,h,w] grey RGB in [0, 1] → a*b* [1,2,h,w]: a* = 60·(grey − 0.5) (dark
    greenish, light reddish), b* = 25 (warm) everywhere."""
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["g"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["g", "half"], ["c"]),
        helper.make_node("Mul", ["c", "sixty"], ["a"]),
        helper.make_node("Mul", ["g", "zero"], ["g0"]),
        helper.make_node("Add", ["g0", "warm"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
    ]
    inits = _values(["half", "sixty", "zero", "warm"], [np.float32(0.5), np.float32(60), np.float32(0), np.float32(25)])
    return _save(nodes, [_value("input", [1, 3, "h", "w"])], [_value("ab", [1, 2, "h", "w"])], inits, path)


def deoldify(path: Path) -> bytes:
    """DeOldify's signature: `input` [1,3,h,w] grey RGB 0–255 → [1,3,h,w] an RGB picture 0–255: sepia (R = grey,
    G = 0.8·grey, B = 0.55·grey)."""
    tint = np.float32([1.0, 0.8, 0.55]).reshape(1, 3, 1, 1)
    nodes = [helper.make_node("Mul", ["input", "tint"], ["picture"])]
    return _save(
        nodes,
        [_value("input", [1, 3, "h", "w"])],
        [_value("picture", [1, 3, "h", "w"])],
        _values(["tint"], [tint]),
        path,
    )


def matting(path: Path, io: IOSpec, size: int) -> bytes:
    """A background matting model with `io`'s signature at `size` px: one plane, exactly 1 where a pixel's mean
    is above 128 (the bright "person") and exactly 0 below it (a saturated sigmoid of the normalised mean)."""
    centre = np.float32([(128 / 255 - io.mean[c]) / io.std[c] for c in range(3)]).reshape(1, 3, 1, 1)
    nodes = [
        helper.make_node("Sub", ["input", "centre"], ["d"]),
        helper.make_node("ReduceMean", ["d"], ["m"], axes=[1], keepdims=1),
        helper.make_node("Mul", ["m", "gain"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["matte"]),
    ]
    gain = np.float32(4000.0 * min(io.std))
    ins = [_value(io.input, [1, 3, size, size])]
    return _save(nodes, ins, [_value("matte", [1, 1, size, size])], _values(["centre", "gain"], [centre, gain]), path)


def dfm(path: Path, size: int = 96, morph: bool = False, outputs: int = 3) -> bytes:
    """A DeepFaceLive `.dfm` signature at `size` px: `in_face:0` [1,S,S,3] (+ `morph_value:0` [1]) → the face's
    mask (all 1), the swapped face = 1 − input (inverted: plainly another face; with morph m: m·(1 − input) +
    (1 − m)·input) and its mask (all 1); only the first `outputs` of them (fewer: a graph of other I/O)."""
    nodes = [
        helper.make_node("Sub", ["one", "in_face:0"], ["inverted"]),
        helper.make_node("ReduceMean", ["in_face:0"], ["mean"], axes=[3], keepdims=1),
        helper.make_node("Mul", ["mean", "zero"], ["z"]),
        helper.make_node("Add", ["z", "one"], ["out_face_mask:0"]),
        helper.make_node("Add", ["z", "one"], ["out_celeb_face_mask:0"]),
    ]
    if morph:
        nodes += [
            helper.make_node("Sub", ["inverted", "in_face:0"], ["change"]),
            helper.make_node("Mul", ["change", "morph_value:0"], ["moved"]),
            helper.make_node("Add", ["in_face:0", "moved"], ["out_celeb_face:0"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["inverted"], ["out_celeb_face:0"]))
    ins = [_value("in_face:0", [1, size, size, 3])] + ([_value("morph_value:0", [1])] if morph else [])
    outs = [_value("out_face_mask:0", [1, size, size, 1]), _value("out_celeb_face:0", [1, size, size, 3]),
            _value("out_celeb_face_mask:0", [1, size, size, 1])][:outputs]  # fmt: skip
    return _save(nodes, ins, outs, _values(["one", "zero"], [np.float32(1), np.float32(0)]), path)


def wrong(path: Path) -> bytes:
    """A graph no catalogue entry declares: `image` [1,3,8,8] → itself."""
    nodes = [helper.make_node("Identity", ["image"], ["same"])]
    return _save(nodes, [_value("image", [1, 3, 8, 8])], [_value("same", [1, 3, 8, 8])], [], path)
