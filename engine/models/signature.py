"""Load-time check of a downloaded ONNX graph against the I/O its manifest entry declares.

A wrong file, or a file from another release published under the same name, must never run and produce garbage:
before a downloaded graph is loaded, its inputs (by name) and outputs (by position) are compared with the
manifest's `inputs`/`outputs` — names, element types and shapes — and any difference is one typed error naming
the file and the difference. Only the graph's declarations are read (no weights are run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.core.errors import ModelSignatureMismatch
from engine.models.manifest import FileSpec, IOSpec, ModelSpec, TensorSpec

# ONNX TensorProto element types by their enum value (onnx.TensorProto.DataType).
_ONNX_TYPES = {1: "float32", 10: "float16", 11: "float64", 7: "int64", 6: "int32", 2: "uint8", 3: "int8", 9: "bool"}


@dataclass(frozen=True)
class GraphTensor:
    """A graph input or output as the file declares it: shape entries are ints, axis names, or None (unknown)."""

    name: str
    type: str
    shape: tuple[int | str | None, ...] | None


def read_signature(path: Path) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """(inputs, outputs) the ONNX graph at `path` declares, initializers excluded, in graph order."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # protobuf raises DecodeError and friends for files that are not ONNX.
        raise ModelSignatureMismatch(f"{path.name} is not a readable ONNX graph ({exc})".splitlines()[0]) from exc
    initializers = {init.name for init in graph.initializer}

    def entry(value: onnx.ValueInfoProto) -> GraphTensor:
        tensor = value.type.tensor_type
        shape = None
        if tensor.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
        return GraphTensor(value.name, _ONNX_TYPES.get(tensor.elem_type, f"type {tensor.elem_type}"), shape)

    return [entry(v) for v in graph.input if v.name not in initializers], [entry(v) for v in graph.output]


def differences(
    io: IOSpec, size: int | None, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor]
) -> list[str]:
    """How a graph's declared I/O differs from `io`'s (empty: it matches). `size` stands for "size" axes.

    Inputs are matched by name (every declared one must exist, no other may); outputs by position (as many as
    declared, or more when `io.more_outputs`). A fixed declared axis must be that size in the graph, where the
    graph fixes it (a graph free on an axis accepts the declared size); other declared axes match anything.
    """
    found = []
    by_name = {t.name: t for t in inputs}
    declared = {str(t.name) for t in io.inputs}
    missing = [n for n in (str(t.name) for t in io.inputs) if n not in by_name]
    extra = [t.name for t in inputs if t.name not in declared]
    if missing:
        found.append(f"no input {', '.join(missing)} (it has {', '.join(by_name) or 'none'})")
    if extra:
        found.append(f"unexpected input {', '.join(extra)}")
    for want in io.inputs:
        if want.name in by_name:
            found += _tensor_differences(f"input {want.name}", want, by_name[str(want.name)], size)
    if len(outputs) < len(io.outputs) or (len(outputs) > len(io.outputs) and not io.more_outputs):
        found.append(f"{len(outputs)} outputs, expected {len(io.outputs)}")
    for index, (want, got) in enumerate(zip(io.outputs, outputs, strict=False)):
        where = f"output {index}"
        if want.name is not None and got.name != want.name:
            found.append(f"{where} is named {got.name}, expected {want.name}")
        found += _tensor_differences(f"{where} ({got.name})", want, got, size)
    return found


def square_size(io: IOSpec, inputs: Sequence[GraphTensor]) -> int | None:
    """The side in pixels a graph fixes for `io`'s "size" axes (a user's graph, whose size no catalogue entry
    states): the graph's own value on every "size" axis of the declared inputs, when they are all the same fixed
    number; None otherwise (free, mixed, or no such input)."""
    by_name = {t.name: t for t in inputs}
    found: set[int | str | None] = set()
    for want in io.inputs:
        got = by_name.get(str(want.name))
        if want.shape is None or got is None or got.shape is None or len(got.shape) != len(want.shape):
            continue
        found |= {g for w, g in zip(want.shape, got.shape, strict=True) if w == "size"}
    if len(found) != 1:
        return None
    (size,) = found
    return size if isinstance(size, int) and size > 0 else None


def _tensor_differences(where: str, want: TensorSpec, got: GraphTensor, size: int | None) -> list[str]:
    out = []
    if got.type != want.type:
        out.append(f"{where} is {got.type}, expected {want.type}")
    if want.shape is None or got.shape is None:
        return out
    expected = [size if d == "size" else d for d in want.shape]
    if len(expected) != len(got.shape):
        return [*out, f"{where} has shape {_shape(got.shape)}, expected {_shape(expected)}"]
    if any(isinstance(w, int) and isinstance(g, int) and w != g for w, g in zip(expected, got.shape, strict=True)):
        out.append(f"{where} has shape {_shape(got.shape)}, expected {_shape(expected)}")
    return out


def _shape(shape: Sequence[int | str | None]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def checked(spec: ModelSpec, file: FileSpec, path: Path) -> ModelSpec:
    """`spec` as `file` at `path` is fed: with the file's own I/O spec where it has one, its declared inputs in the
    graph's order (a converted graph's torch module takes them positionally), after checking the graph.

    Only downloaded ONNX graphs are checked; embedded, exported and converted files are facestudio's own. Raises
    ModelSignatureMismatch (one line: the file, then each difference) when the graph is not the declared one, or
    when the catalogue declares nothing to check it against.
    """
    io = spec.io_for(file)
    if file.format != "onnx" or file.url is None:
        return spec if io is spec.io else spec.model_copy(update={"io": io})
    if not (io.inputs and io.outputs):
        raise ModelSignatureMismatch(
            f"{path} is a downloaded graph whose catalogue entry ({spec.id}) declares no inputs and outputs to check "
            "it against, so it is not run; add them to the entry (engine/models/manifest.toml shows how)"
        )
    inputs, outputs = read_signature(path)
    found = differences(io, spec.input_size, inputs, outputs)
    if found:
        raise ModelSignatureMismatch(
            f"{path} is not the graph {spec.id} declares: {'; '.join(found)}; it is a different file (or another "
            f"release under the same name): delete it, or fix its entry in the model manifest"
        )
    order = [t.name for t in inputs]
    ordered = tuple(sorted(io.inputs, key=lambda t: order.index(str(t.name))))
    return spec.model_copy(update={"io": io.model_copy(update={"inputs": ordered})})
