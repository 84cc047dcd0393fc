"""`models quantize ID`: a statically quantised int8 graph of a model, checked against its float32 graph.

1. Calibration: frames from the embedded demo media (the astronaut clip's frames and the Grace Hopper portrait,
   engine/media/demo.py) or the images of a folder (`--calibration DIR`), split in two: frames to calibrate on and
   frames held out for the quality gate (the demo: the portrait and a third of the clip; a folder: every fourth
   image). Each frame becomes the model's input as a job feeds it: 128 px windows of the frame for a frame
   enhancer (96 px for the RRDB models, about 40× the work per pixel of the compact one), the
   faces (found by the embedded analyser) cut on the model's template for a face enhancer or recogniser, the
   frame letterboxed into the detector's canvas for a face detector.
2. Preparation: ONNX shape inference and constant folding (ONNX Runtime's `quant_pre_process`), and every PRelu
   rewritten as `x + (slope − 1)·min(x, 0)` (the same function; ONNX Runtime has no int8 PRelu, and its float PRelu
   kernel costs as much as the convolution it follows; the rewrite's Mul and Add run as int8).
3. Quantisation: ONNX Runtime's `quantize_static`, QDQ format, activations uint8 per tensor with ranges from the
   calibration frames' min/max (measured once, shared by every scheme tried), weights per channel as the scheme
   says (engine/models/int8.py: int8 full or reduced range, or uint8; the first and last convolution float32 or
   not). The schemes tried are the candidates for this CPU's arithmetic (`int8.candidates`), fastest first.
4. Quality gate, on the held-out frames, for each scheme until one passes: the int8 graph's output against the
   float32 graph's as PSNR — images (enhancers) in 0–255 after rounding, other outputs (detector maps,
   embeddings) against the float32 output's range. The worst held-out input must reach 38 dB for a frame enhancer
   and 35 dB for a face model. When no scheme does, nothing is kept and the error (one line) says by how much the
   best fell short; jobs at `runtime.precision=auto` then stay on fp32 for the model. The graph kept is timed
   against the float32 one on those inputs, interleaved. The same model, calibration and CPU arithmetic give the
   same bytes.
5. Record (engine/models/int8.py): the graph, a signed record of what it was made from (its scheme included), and
   the index entry: the scheme, this CPU (arithmetic, flags), every scheme tried with its PSNR, the gate.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.core.errors import InvalidInput, ModelUnavailable
from engine.core.types import Frame
from engine.models import int8, signature
from engine.models.manifest import ModelSpec
from engine.models.runtime import Runtime
from engine.models.tensor import from_tensor, to_tensor

log = logging.getLogger(__name__)

# PSNR (dB) the worst held-out input must reach against the float32 graph.
GATE_DB = {"frame_enhancer": 38.0, "face_enhancer": 35.0, "face_detector": 35.0, "face_recogniser": 35.0}
# Side of the windows a frame enhancer is calibrated and checked on (input pixels).
WINDOW = 128
SMALL_WINDOW = 96  # RRDB models: ~350 convolutions, about 40× the work of the compact model per pixel
HEAVY_BYTES_PER_PIXEL = 4096
# The demo clip used for calibration: its size and length.
DEMO_SIZE = (480, 270)
DEMO_FRAMES = 12
# A folder's images: at most this many are read (evenly spread over the sorted names).
MAX_IMAGES = 48
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
# CodeFormer-style fidelity input: calibrated at the face enhancer's default fidelity.
FIDELITY = 0.5

Inputs = dict[str, npt.NDArray[Any]]


class GateFailed(ModelUnavailable):
    """The int8 graph's output is too far from the float32 graph's; nothing was recorded (exit 3)."""


@dataclass(frozen=True)
class Calibration:
    """Frames (H×W×3 uint8 RGB) to calibrate on and frames held out for the gate (disjoint), where they come from
    ("demo" or the folder), and the sha256 of both sets (which the int8 graph's record names)."""

    source: str
    calibrate: tuple[Frame, ...]
    check: tuple[Frame, ...]

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for part, frames in (("calibrate", self.calibrate), ("check", self.check)):
            digest.update(part.encode())
            for frame in frames:
                digest.update(repr(frame.shape).encode())
                digest.update(np.ascontiguousarray(frame).tobytes())
        return digest.hexdigest()


def demo_calibration() -> Calibration:
    """The embedded demo media: the drifting, zooming astronaut clip (two thirds calibrate, a third is held out)
    and the Grace Hopper portrait (held out: a photo calibration never saw)."""
    from engine.media import demo, read_image

    frames = demo.frames(*DEMO_SIZE, DEMO_FRAMES)
    portrait = read_image(demo.source_photo())[0]
    held = set(range(1, DEMO_FRAMES, 3))
    return Calibration(
        source="demo",
        calibrate=tuple(f for i, f in enumerate(frames) if i not in held),
        check=(*(frames[i] for i in sorted(held)), portrait),
    )


def folder_calibration(folder: Path) -> Calibration:
    """The images of `folder` (sorted by name, at most MAX_IMAGES spread evenly): every fourth one is held out
    for the gate, the others calibrate. InvalidInput when it holds fewer than two images."""
    from engine.media import read_image

    if not folder.is_dir():
        raise InvalidInput(f"--calibration {folder}: not a folder")
    paths = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if len(paths) < 2:
        raise InvalidInput(
            f"--calibration {folder} has {len(paths)} image(s); it needs at least 2 ({', '.join(IMAGE_SUFFIXES)}): "
            "some to calibrate on, others to check the result on"
        )
    if len(paths) > MAX_IMAGES:
        paths = [paths[round(i * (len(paths) - 1) / (MAX_IMAGES - 1))] for i in range(MAX_IMAGES)]
    frames = [read_image(p)[0] for p in paths]
    return Calibration(
        source=str(folder),
        calibrate=tuple(f for i, f in enumerate(frames) if i % 4 != 3),
        check=tuple(f for i, f in enumerate(frames) if i % 4 == 3),
    )


@dataclass(frozen=True)
class Quantised:
    """What `quantize` made: the graph, the gate's worst PSNR and its threshold (dB), and the median time per
    held-out input of the float32 and int8 graphs (ms) on this machine."""

    model: str
    path: Path
    psnr_db: float
    threshold_db: float
    fp32_ms: float
    int8_ms: float
    calibration: str
    calibrated_on: int
    checked_on: int
    scheme: int8.Scheme
    # Every scheme tried, in order: {"scheme", "psnr_db"} (the last one is `scheme`).
    tried: tuple[dict[str, Any], ...] = ()


def quantize(
    runtime: Runtime, model_id: str, calibration: Calibration | None = None, scheme: str | None = None
) -> Quantised:
    """Quantise `model_id` (a model `int8.offered`; its file fetched when missing) on `calibration` (default: the
    demo media) under each candidate scheme for this CPU until one passes the gate (or under `scheme` alone, one
    of int8.SCHEMES exact on this CPU), and record it in the models folder. Raises GateFailed when no scheme
    passes (nothing is kept), InvalidInput for a model that offers none, a scheme this CPU does not sum exactly,
    or a calibration that yields no input."""
    spec = runtime.manifest.get(model_id)
    if not int8.offered(spec):
        raise InvalidInput(f"{model_id} is a {spec.task} model; int8 graphs are made of {', '.join(int8.TASKS)} models")
    here = int8.cpu()
    schemes = _schemes(here["arithmetic"], scheme)
    calibration = calibration or demo_calibration()
    (file,) = runtime.ensure([model_id], "onnx")
    spec = signature.checked(spec, file, runtime.local_path(file))
    source = runtime.onnx_graph(spec, file)
    names = [t.name for t in signature.read_signature(source)[0]]
    make = inputs_for(spec, names)
    calibrate, check = make(calibration.calibrate), make(calibration.check)
    if not calibrate or not check:
        what = "faces" if spec.task != "frame_enhancer" else "frames"
        raise InvalidInput(
            f"the calibration images give {len(calibrate)} {what} to calibrate on and {len(check)} to check on; "
            "both need at least one (a face model needs faces the embedded analyser finds)"
        )
    target = int8.graph_path(runtime.folders.models, model_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    threshold = GATE_DB[spec.task]
    with tempfile.TemporaryDirectory(prefix=".quantize-", dir=target.parent) as tmp:
        threads = runtime.settings.threads
        chosen, made, psnr, tried = _first_passing(spec, source, schemes, calibrate, check, Path(tmp), threads)
        # Timed as the benchmark times them: both graphs on the held-out inputs, interleaved.
        _, fp32_ms, int8_ms = compare(spec, source, made, check, threads)
        os.replace(made, target)
    entry = {
        "calibration": {
            "source": calibration.source,
            "sha256": calibration.sha256,
            "calibrated_on": len(calibrate),
            "checked_on": len(check),
        },
        "scheme": chosen.describe(),
        "cpu": here,
        "tried": tried,
        "gate": {"psnr_db": round(psnr, 2), "threshold_db": threshold, "fp32_ms": fp32_ms, "int8_ms": int8_ms},
    }
    int8.record(runtime.folders.models, model_id, target, runtime.graph_key(file), entry)
    return Quantised(
        model_id,
        target,
        psnr,
        threshold,
        fp32_ms,
        int8_ms,
        calibration.source,
        len(calibrate),
        len(check),
        chosen,
        tuple(tried),
    )


def _schemes(arithmetic: int8.Arithmetic, scheme: str | None) -> tuple[int8.Scheme, ...]:
    """The schemes to try on a CPU of `arithmetic`: its candidates, or `scheme` alone (InvalidInput when it is
    unknown or clips on this CPU)."""
    schemes = int8.candidates(arithmetic)
    if scheme is None:
        return schemes
    if scheme not in int8.SCHEMES:
        raise InvalidInput(f"--scheme {scheme}: unknown; one of {', '.join(int8.SCHEMES)}")
    if int8.SCHEMES[scheme] not in schemes:
        raise InvalidInput(
            f"--scheme {scheme}: this CPU's int8 sums saturate (x86 without VNNI), so its gate would measure "
            f"clipped arithmetic; one of {', '.join(s.name for s in schemes)}"
        )
    return (int8.SCHEMES[scheme],)


def _first_passing(
    spec: ModelSpec,
    source: Path,
    schemes: Sequence[int8.Scheme],
    calibrate: Sequence[Inputs],
    check: Sequence[Inputs],
    work: Path,
    threads: int,
) -> tuple[int8.Scheme, Path, float, list[dict[str, Any]]]:
    """Quantise the float32 graph `source` under each of `schemes` in turn (in the folder `work`) until one passes
    the gate on `check`: (that scheme, its graph, its PSNR in dB, every scheme tried with its PSNR). Raises
    GateFailed, in one line, when none does."""
    threshold = GATE_DB[spec.task]
    prepared = prepare_graph(source, work)
    fp32 = _cpu_session(source, threads)
    reference = [fp32.run(inputs) for inputs in check]
    tried: list[dict[str, Any]] = []
    for scheme in schemes:
        made = work / f"{scheme.name}.onnx"
        started = time.perf_counter()
        quantize_graph(prepared, made, calibrate, scheme, work / "ranges.json")
        psnr = gate(spec, made, check, reference, threads)
        log.info("%s as %s: %.2f dB in %.1f s", spec.id, scheme.name, psnr, time.perf_counter() - started)
        tried.append({"scheme": scheme.name, "psnr_db": round(psnr, 2)})
        if psnr >= threshold:
            return scheme, made, psnr, tried
    best = max(tried, key=lambda t: t["psnr_db"])
    raise GateFailed(
        f"int8 cannot pass the quality gate for {spec.id} on this CPU: the best of {len(tried)} schemes "
        f"({best['scheme']}) reaches {best['psnr_db']:.1f} dB PSNR against fp32 on the worst of {len(check)} "
        f"held-out inputs, {threshold:g} dB needed ({threshold - best['psnr_db']:.1f} dB short); nothing was "
        "recorded and runtime.precision=auto stays on fp32 for it (calibrating on images like the ones you "
        "process, --calibration DIR, may help)"
    )


# -- model inputs ---------------------------------------------------------------------------------------------
def inputs_for(
    spec: ModelSpec, names: Sequence[str], whole_frames: bool = False
) -> Callable[[Sequence[Frame]], list[Inputs]]:
    """A function turning frames into the model's inputs (one dict per model call, batch 1), as a job feeds it.
    `names`: the graph's input names in order (the image first). `whole_frames`: a frame enhancer takes each
    frame whole (not windows of it)."""
    io = spec.io
    image = io.input if io.input in names else names[0]
    extra: Inputs = {}
    fidelity = io.fidelity if io.fidelity in names else (names[1] if len(names) > 1 else None)
    if fidelity is not None:
        extra[fidelity] = np.array([FIDELITY], dtype=io.input_type(io.fidelity or fidelity))

    def feed(crops: Sequence[Frame]) -> list[Inputs]:
        return [{image: to_tensor(np.ascontiguousarray(c)[None], io), **extra} for c in crops]

    if spec.task == "frame_enhancer" and whole_frames:
        return feed
    if spec.task == "frame_enhancer":
        side = SMALL_WINDOW if spec.bytes_per_pixel >= HEAVY_BYTES_PER_PIXEL else WINDOW
        return lambda frames: feed([w for f in frames for w in windows(f, side)])
    if spec.task == "face_detector":
        from engine.faces.buffalo import letterbox

        size = spec.input_size or 640
        return lambda frames: feed([letterbox(f, size)[0] for f in frames])
    return lambda frames: feed(face_crops(frames, spec.template or "arcface_112", spec.input_size or 112))


def windows(frame: Frame, side: int) -> list[Frame]:
    """Two side×side windows of `frame` (its centre and its top-left quarter's centre), or the whole frame when
    it is smaller."""
    h, w = frame.shape[:2]
    if h <= side or w <= side:
        return [frame]
    spots = [((h - side) // 2, (w - side) // 2), (max(0, h // 4 - side // 2), max(0, w // 4 - side // 2))]
    return [frame[y : y + side, x : x + side] for y, x in spots]


def face_crops(frames: Sequence[Frame], template: str, size: int) -> list[Frame]:
    """Every face the embedded analyser finds on `frames`, cut on `template` at size×size px."""
    from engine.faces.align import estimate_affine, warp_face
    from engine.faces.embedded import EmbeddedAnalyser

    analyser = EmbeddedAnalyser("hog")
    return [
        warp_face(frame, estimate_affine(face.landmarks5, template, size), size)
        for frame in frames
        for face in analyser.detect(frame)
    ]


# -- quantisation ---------------------------------------------------------------------------------------------
def prepare_graph(source: Path, work: Path) -> Path:
    """The float32 graph `source` prepared for quantisation in the folder `work` (module docstring, step 2)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = work / "prepared.onnx"
    # Symbolic shape inference needs every axis resolvable, which graphs of any frame size are not.
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    rewrite_prelu(prepared)
    return prepared


def quantize_graph(
    prepared: Path, target: Path, calibrate: Sequence[Inputs], scheme: int8.Scheme, ranges: Path
) -> None:
    """Write to `target` the int8 QDQ graph of the prepared float32 graph `prepared` under `scheme`, calibrated on
    `calibrate` (module docstring, step 3). `ranges`: the activation ranges, measured on the first call and read
    back by the next ones (they do not depend on the scheme)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.items: Iterator[Inputs] = iter(calibrate)

        def get_next(self) -> Inputs | None:
            return next(self.items, None)

    convolutions = [
        n.name for n in onnx.load(str(prepared), load_external_data=False).graph.node if n.op_type == "Conv"
    ]
    quantize_static(
        str(prepared),
        str(target),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8 if scheme.weights == "int8" else QuantType.QUInt8,
        per_channel=True,
        reduce_range=scheme.reduce_range,
        nodes_to_exclude=[convolutions[0], convolutions[-1]] if scheme.float_ends and convolutions else [],
        calibrate_method=CalibrationMethod.MinMax,
        calibration_cache_path=str(ranges),
    )


def rewrite_prelu(path: Path) -> int:
    """Rewrite every PRelu of the graph at `path` (in place) whose slope is a constant as
    `x + (slope − 1)·min(x, 0)`: equal for every x (x > 0: x; x ≤ 0: slope·x), in operators ONNX Runtime runs as
    int8 (Mul, Add) or cheaply (Min). Returns how many were rewritten."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    constants = {init.name: init for init in graph.initializer}
    zero = f"{graph.name or 'graph'}_prelu_zero"
    nodes, count = [], 0
    for node in graph.node:
        if node.op_type != "PRelu" or node.input[1] not in constants:
            nodes.append(node)
            continue
        x, slope, y = node.input[0], node.input[1], node.output[0]
        shifted = numpy_helper.from_array(
            (numpy_helper.to_array(constants[slope]).astype(np.float32) - 1.0), f"{slope}_minus_one"
        )
        graph.initializer.append(shifted)
        name = node.name or y
        nodes += [
            helper.make_node("Min", [x, zero], [f"{y}_negative"], name=f"{name}_min"),
            helper.make_node("Mul", [f"{y}_negative", shifted.name], [f"{y}_scaled"], name=f"{name}_mul"),
            helper.make_node("Add", [x, f"{y}_scaled"], [y], name=f"{name}_add"),
        ]
        count += 1
    if count:
        graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), zero))
        del graph.node[:]
        graph.node.extend(nodes)
        used = {name for node in graph.node for name in node.input}
        kept = [init for init in graph.initializer if init.name in used]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        onnx.save(model, str(path))
    return count


# -- the gate -------------------------------------------------------------------------------------------------
def gate(
    spec: ModelSpec,
    quantised: Path,
    check: Sequence[Inputs],
    reference: Sequence[Sequence[npt.NDArray[Any]]],
    threads: int = 0,
) -> float:
    """The worst PSNR (dB) over `check` of the int8 graph's outputs, run as a job runs it (ONNX Runtime on the CPU),
    against the float32 graph's, `reference` (one call's outputs per input)."""
    session = _cpu_session(quantised, threads)
    return min(output_psnr(spec, expected, session.run(each)) for each, expected in zip(check, reference, strict=True))


def compare(
    spec: ModelSpec, fp32: Path, quantised: Path, inputs: Sequence[Inputs], threads: int = 0
) -> tuple[float, float, float]:
    """(worst PSNR over `inputs` in dB, median ms per input of the float32 graph, of the int8 graph), both run as a
    job runs them, interleaved (so a load on the machine weighs on both alike), after one warm-up call each: what
    `launch.py benchmark --precision int8` reports."""
    sessions = [_cpu_session(path, threads) for path in (fp32, quantised)]
    for session in sessions:
        session.run(inputs[0])
    worst = math.inf
    times: list[list[float]] = [[], []]
    for each in inputs:
        outputs = []
        for session, spent in zip(sessions, times, strict=True):
            started = time.perf_counter()
            outputs.append(session.run(each))
            spent.append((time.perf_counter() - started) * 1000)
        worst = min(worst, output_psnr(spec, outputs[0], outputs[1]))
    return worst, round(statistics.median(times[0]), 2), round(statistics.median(times[1]), 2)


def _cpu_session(path: Path, threads: int) -> Any:
    from engine.backends import Device
    from engine.backends.onnx import OnnxSession

    return OnnxSession(path, Device("cpu"), threads=threads, cache_dir=path.parent)


def output_psnr(spec: ModelSpec, reference: Sequence[npt.NDArray[Any]], test: Sequence[npt.NDArray[Any]]) -> float:
    """PSNR (dB) of a model call's outputs `test` against `reference`: an enhancer's image (its first output) in
    0–255 after `from_tensor`; otherwise every output, each against its reference's range (the worst of them)."""
    if spec.task in ("frame_enhancer", "face_enhancer"):
        return psnr(from_tensor(reference[0], spec.io), from_tensor(test[0], spec.io), 255.0)
    return min(psnr(r, t, float(np.ptp(r)) or 1.0) for r, t in zip(reference, test, strict=True) if np.asarray(r).size)


def psnr(reference: npt.ArrayLike, test: npt.ArrayLike, peak: float) -> float:
    """10·log10(peak² / mean squared difference) in dB; infinite for identical arrays."""
    diff = np.asarray(reference, np.float64) - np.asarray(test, np.float64)
    mse = float(np.mean(diff * diff))
    return math.inf if mse == 0 else 10.0 * math.log10(peak * peak / mse)
