"""The int8 graphs a runtime may load: where `models quantize` keeps them, and the check before each is used.

A quantised graph is a derived file (engine/models/derived.py): it lives in the models folder under
`quantized/<model>-int8.onnx`, with a record signed by this installation's key that names what it was made from:
the content key of the float32 graph it quantises (the downloaded graph's sha256, or the converted graph's source
key and converter version), the calibration it was calibrated on (the sha256 of its frames), its scheme and the
quantiser's version. `quantized/index.json` says which calibration and scheme each graph used, on which CPU, and
what its quality gate measured; it is not trusted on its own: a changed entry no longer matches the signed record.

Schemes. How ONNX Runtime's CPU kernels sum uint8 activations × int8 weights depends on the CPU (`arithmetic`,
measured by running one such sum): `exact` where the products are summed in 32 bits (x86 with VNNI, ARM), or
`saturating` on x86 without VNNI (AVX2, AVX-512 without VNNI), which adds pairs of products in 16 bits first
(VPMADDUBSW): two large activations meeting two large weights clip, and an upscaler loses 5–7 dB there. A scheme
(`SCHEMES`) is the weights' type and range and which convolutions stay float32; `models quantize` tries the
candidates for this CPU's arithmetic (`candidates`) in order and keeps the first that passes the gate. Full-range
int8 weights are exact on an `exact` CPU only; reduced-range (7-bit) int8 weights and uint8 weights are exact on
both, so a graph of those schemes gives the same integers on any CPU and its gate holds everywhere. A graph gated
on an `exact` CPU with full-range weights is refused on a `saturating` one (a job says to quantise it again there).

Before a job with `runtime.precision = int8` (or `auto`, which runs fp32 instead of refusing) loads a graph
(`find`):
- no graph, or one made from another file of the model: ModelUnavailable saying how to make one;
- a graph whose bytes differ from its record (modified, corrupt): ChecksumMismatch, left in place;
- a record this key did not sign, or for another quantiser version: ChecksumMismatch (quantise it again);
- a scheme whose sums are not exact on this CPU (made on a CPU of the other kind): ModelUnavailable (quantise it
  again here).
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from engine.core.errors import ChecksumMismatch, InvalidInput, ModelUnavailable
from engine.models import derived
from engine.models.manifest import ModelSpec

# Bump when quantisation changes (graph preparation, quantiser settings): graphs made before are quantised again.
QUANTISER_VERSION = 2
FOLDER = "quantized"
INDEX = "index.json"
# The tasks whose models `models quantize` offers: convolutional graphs that ONNX Runtime runs as int8 on the
# CPU (a swapper's output is the face itself, so its crop is not quantised).
TASKS = ("frame_enhancer", "face_enhancer", "face_detector", "face_recogniser")


Arithmetic = Literal["exact", "saturating"]
# CPU flags worth recording beside a graph (x86; /proc/cpuinfo names): what decides the kernels ONNX Runtime runs.
_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


@dataclass(frozen=True)
class Scheme:
    """How a graph is quantised: activations are always uint8 (per tensor, min/max); `weights` int8 or uint8 per
    output channel, `reduce_range` keeps int8 weights in 7 bits (−64…63); `float_ends` leaves the first and last
    convolution in float32 (the pixels in and the pixels out, where an upscaler's error shows most)."""

    name: str
    weights: Literal["int8", "uint8"]
    reduce_range: bool = False
    float_ends: bool = False

    @property
    def exact_on(self) -> tuple[Arithmetic, ...]:
        """The CPUs (by `arithmetic`) on which ONNX Runtime sums this scheme's products without clipping: a
        saturating CPU adds two uint8 × int8 products in 16 bits, which 255·(|w₁| + |w₂|) > 32767 overflows,
        so only 7-bit int8 weights (255·128 = 32640) or uint8 weights (summed in 32 bits there) are exact."""
        full_range = self.weights == "int8" and not self.reduce_range
        return ("exact",) if full_range else ("exact", "saturating")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "activations": "uint8",
            "weights": self.weights,
            "per_channel": True,
            "reduce_range": self.reduce_range,
            "float_ends": self.float_ends,
            "exact_on": list(self.exact_on),
        }


SCHEMES = {
    s.name: s
    for s in (
        Scheme("s8", "int8"),
        Scheme("s8-float-ends", "int8", float_ends=True),
        Scheme("s8-reduced", "int8", reduce_range=True),
        Scheme("s8-reduced-float-ends", "int8", reduce_range=True, float_ends=True),
        Scheme("u8u8", "uint8"),
        Scheme("u8u8-float-ends", "uint8", float_ends=True),
    )
}


def candidates(arithmetic: Arithmetic) -> tuple[Scheme, ...]:
    """The schemes `models quantize` tries on a CPU of `arithmetic`, in order: the fastest kernels first (int8
    weights run ONNX Runtime's u8s8 kernels; uint8 weights its slower u8u8 ones), the float ends after the whole
    graph of the same kind (two float convolutions cost time). Only schemes exact on this CPU."""
    order = ("s8", "s8-float-ends", "s8-reduced", "s8-reduced-float-ends", "u8u8", "u8u8-float-ends")
    return tuple(SCHEMES[n] for n in order if arithmetic in SCHEMES[n].exact_on)


def arithmetic() -> Arithmetic:
    """How this CPU's ONNX Runtime sums uint8 × int8 products, measured: one MatMulInteger of 255s by 127s, whose
    pairs of products (64770) overflow 16 bits. `exact` when it returns the true sum, `saturating` when it
    clipped (x86 without VNNI)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    depth = 64
    weights = numpy_helper.from_array(np.full((depth, 1), 127, np.int8), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, depth])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (total,) = session.run(None, {"a": np.full((1, depth), 255, np.uint8)})
    return "exact" if int(total[0, 0]) == 255 * 127 * depth else "saturating"


def cpu() -> dict[str, Any]:
    """This CPU as a graph's record names it: its `arithmetic`, its architecture and (Linux, x86) the flags that
    decide ONNX Runtime's int8 kernels."""
    flags: list[str] = []
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("flags"):
                present = set(line.partition(":")[2].split())
                flags = [f for f in _FLAGS if f in present]
                break
    except OSError:
        pass
    return {"arithmetic": arithmetic(), "machine": platform.machine(), "flags": flags}


def offered(spec: ModelSpec) -> bool:
    """Whether `models quantize` makes an int8 graph of `spec` (and a job at precision int8 needs one)."""
    return spec.task in TASKS


def graph_path(models: Path, model_id: str) -> Path:
    """Where the int8 graph of `model_id` is kept in the models folder `models`."""
    return models / FOLDER / f"{model_id}-int8.onnx"


def how_to_make(model_id: str) -> str:
    return f"make one with `python launch.py models quantize {model_id}` (or set runtime.precision=fp32)"


def read_index(models: Path) -> dict[str, dict[str, Any]]:
    """The index of the int8 graphs in the models folder `models`: model id → its entry (empty when none)."""
    path = models / FOLDER / INDEX
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["graphs"]
        return {str(e["model"]): dict(e) for e in entries}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"{path} is unreadable ({exc}); delete it and quantise again".splitlines()[0]) from None


def _signed_source(source_key: str, calibration: str, scheme: str) -> str:
    """What a record names as the graph's origin: the float32 graph's content key, the calibration's sha256 and the
    scheme's name (which decides the CPUs it runs exactly on)."""
    return f"{source_key}+calibration:{calibration}+scheme:{scheme}"


def record(models: Path, model_id: str, graph: Path, source_key: str, entry: Mapping[str, Any]) -> None:
    """Record the int8 graph `graph` of `model_id` (already at `graph_path`), made from the float32 graph with
    content key `source_key`; `entry` holds at least `calibration` (with its `sha256`), `scheme` (with its `name`,
    one of SCHEMES) and `gate` (what the quality gate measured). Signs the graph's record, then writes the index
    entry (whole file to a temp name, renamed)."""
    calibration = str(entry["calibration"]["sha256"])
    derived.record(graph, _signed_source(source_key, calibration, str(entry["scheme"]["name"])), QUANTISER_VERSION)
    index = read_index(models)
    index[model_id] = {
        "model": model_id,
        "file": graph.name,
        "source": source_key,
        "quantiser": QUANTISER_VERSION,
        **entry,
    }
    path = models / FOLDER / INDEX
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps({"graphs": list(index.values())}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def find(models: Path, spec: ModelSpec, source_key: str) -> Path:
    """The verified int8 graph of `spec` made from the float32 graph with content key `source_key`, of a scheme
    exact on this CPU; raises ModelUnavailable (none, made from another file, or of a scheme that clips here) or
    ChecksumMismatch (see the module docstring)."""
    found = _examine(models, spec, {source_key})
    if found is None or found[0] == "unindexed":
        raise ModelUnavailable(f"runtime.precision=int8 needs a quantised graph of {spec.id}: {how_to_make(spec.id)}")
    status, path, actual = found
    if status == "stale":
        raise ModelUnavailable(
            f"the int8 graph of {spec.id} was made from another file of it than this job loads; {how_to_make(spec.id)}"
        )
    if status == "tampered":
        raise ChecksumMismatch(
            f"{path} has sha256 {actual[:12]}…, expected {derived.expected_sha256(path)[:12]}… (modified or corrupt "
            f"int8 graph of {spec.id}); delete it and quantise again: `python launch.py models quantize {spec.id}`"
        )
    if status == "unrecorded":
        raise ChecksumMismatch(
            f"{path} carries no record of being quantised here by this facestudio (its record is missing, was not "
            f"signed by this installation, or is for an older quantiser); quantise it again: "
            f"`python launch.py models quantize {spec.id}`"
        )
    if status == "clips":
        entry = read_index(models)[spec.id]
        scheme = SCHEMES[str(entry["scheme"]["name"])]
        made_on = (entry.get("cpu") or {}).get("arithmetic", "another")
        raise ModelUnavailable(
            f"the int8 graph of {spec.id} ({scheme.name}: full-range int8 weights, gated on a CPU whose int8 sums are "
            f"{made_on}) would clip on this CPU, which sums pairs of products in 16 bits (x86 without VNNI); quantise "
            f"it again here, which picks a scheme exact on it: `python launch.py models quantize {spec.id}` (or set "
            "runtime.precision=fp32)"
        )
    return path


Check = Literal["ok", "tampered", "unrecorded", "stale", "clips"]


def check(models: Path, spec: ModelSpec, source_keys: Collection[str]) -> tuple[Check, Path] | None:
    """What a job at runtime.precision=int8 would find of `spec`'s int8 graph in the models folder `models`, for
    `doctor` and `models verify` (None: there is none): `ok` (used), `tampered` (its bytes no longer match its
    record), `unrecorded` (no record this installation signed, or one of an older quantiser), `stale` (not in the
    index, or made from a float32 graph other than those `source_keys` name), `clips` (of a scheme whose int8
    sums clip on this CPU: gated on a CPU of the other kind). A job refuses all but `ok`."""
    found = _examine(models, spec, source_keys)
    if found is None:
        return None
    status, path, _ = found
    return ("stale" if status == "unindexed" else status), path


def _examine(
    models: Path, spec: ModelSpec, source_keys: Collection[str]
) -> tuple[Check | Literal["unindexed"], Path, str] | None:
    """(status, path, the graph's sha256 when it was hashed) of `spec`'s int8 graph, None when there is no graph:
    `check`'s statuses, with `unindexed` (not in the index) told apart from `stale`."""
    path = graph_path(models, spec.id)
    if not path.is_file():
        return None
    entry = read_index(models).get(spec.id)
    if entry is None:
        return "unindexed", path, ""
    if entry.get("source") not in source_keys:
        return "stale", path, ""
    scheme = str((entry.get("scheme") or {}).get("name", ""))
    if scheme not in SCHEMES:
        return "unrecorded", path, ""
    status, actual = derived.check(
        path, _signed_source(str(entry["source"]), _calibration_of(entry), scheme), QUANTISER_VERSION
    )
    if status == "ok" and arithmetic() not in SCHEMES[scheme].exact_on:
        return "clips", path, actual
    return status, path, actual


def _calibration_of(entry: Mapping[str, Any]) -> str:
    """The sha256 of the calibration an index entry says its graph was calibrated on ("" when it says none)."""
    return str((entry.get("calibration") or {}).get("sha256", ""))
