"""The int8 graphs a runtime may load: where `models quantize` keeps them, and the check before each is used.

A quantised graph is a derived file (engine/models/derived.py): it lives in the models folder under
`quantized/<model>-int8.onnx`, with a record signed by this installation's key that names what it was made from:
the content key of the float32 graph it quantises (the downloaded graph's sha256, or the converted graph's source
key and converter version), the calibration it was calibrated on (the sha256 of its frames) and the quantiser's
version. `quantized/index.json` says which calibration each graph used and what its quality gate measured; it is
not trusted on its own: a changed entry no longer matches the signed record.

Before a job with `runtime.precision = int8` loads a graph (`find`):
- no graph, or one made from another file of the model: ModelUnavailable saying how to make one;
- a graph whose bytes differ from its record (modified, corrupt): ChecksumMismatch, left in place;
- a record this key did not sign, or for another quantiser version: ChecksumMismatch (quantise it again).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from engine.core.errors import ChecksumMismatch, InvalidInput, ModelUnavailable
from engine.models import derived
from engine.models.manifest import ModelSpec

# Bump when quantisation changes (graph preparation, quantiser settings): graphs made before are quantised again.
QUANTISER_VERSION = 1
FOLDER = "quantized"
INDEX = "index.json"
# The tasks whose models `models quantize` offers: convolutional graphs that ONNX Runtime runs as int8 on the
# CPU (a swapper's output is the face itself, so its crop is not quantised).
TASKS = ("frame_enhancer", "face_enhancer", "face_detector", "face_recogniser")


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


def _signed_source(source_key: str, calibration: str) -> str:
    """What a record names as the graph's origin: the float32 graph's content key and the calibration's sha256."""
    return f"{source_key}+calibration:{calibration}"


def record(models: Path, model_id: str, graph: Path, source_key: str, entry: Mapping[str, Any]) -> None:
    """Record the int8 graph `graph` of `model_id` (already at `graph_path`), made from the float32 graph with
    content key `source_key`; `entry` holds at least `calibration` (with its `sha256`) and `gate` (what the quality
    gate measured). Signs the graph's record, then writes the index entry (whole file to a temp name, renamed)."""
    calibration = str(entry["calibration"]["sha256"])
    derived.record(graph, _signed_source(source_key, calibration), QUANTISER_VERSION)
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
    """The verified int8 graph of `spec` made from the float32 graph with content key `source_key`; raises
    ModelUnavailable (none, or made from another file) or ChecksumMismatch (see the module docstring)."""
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
    return path


Check = Literal["ok", "tampered", "unrecorded", "stale"]


def check(models: Path, spec: ModelSpec, source_keys: Collection[str]) -> tuple[Check, Path] | None:
    """What a job at runtime.precision=int8 would find of `spec`'s int8 graph in the models folder `models`, for
    `doctor` and `models verify` (None: there is none): `ok` (used), `tampered` (its bytes no longer match its
    record), `unrecorded` (no record this installation signed, or one of an older quantiser), `stale` (not in the
    index, or made from a float32 graph other than those `source_keys` name). A job refuses all but `ok`."""
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
    status, actual = derived.check(
        path, _signed_source(str(entry["source"]), _calibration_of(entry)), QUANTISER_VERSION
    )
    return status, path, actual


def _calibration_of(entry: Mapping[str, Any]) -> str:
    """The sha256 of the calibration an index entry says its graph was calibrated on ("" when it says none)."""
    return str((entry.get("calibration") or {}).get("sha256", ""))
