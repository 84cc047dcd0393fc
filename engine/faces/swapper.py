"""Every face swapper through one path, driven by its manifest entry (no per-model code).

Target side: the face is cut on the model's `template` at `input_size`·k px (k = 1, or the pixel-boost factor),
split into k×k interleaved sub-crops of `input_size` each, normalised by the model's `io` (engine/models/
tensor.py), run, mapped back from `io.output_range`, and woven back into one crop.

Source side (`ModelSpec.swap`, a SwapSpec): the identity input is either
- an embedding: the source faces' ArcFace embeddings (their recogniser's output, 1×512 each) averaged — as
  L2-normalised vectors (`unit`) or raw — then optionally mapped by a converter model, projected through the
  swapper graph's last initializer (InSwapper's `emap`), and L2-normalised; or
- an image: the first source face cut on its own template and size, normalised by the spec.
Pure numpy over `Session`s: the backend (ONNX Runtime or a converted torch module) is the runtime's business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.backends import Session
from engine.core.errors import InvalidInput
from engine.core.types import Frame
from engine.faces.align import estimate_affine, warp_face
from engine.models.manifest import IOSpec, SwapSpec
from engine.models.tensor import run_images, to_tensor

EMBEDDING_SIZE = 512

Vectors = npt.NDArray[np.float32]
# A converter model as a function: 1×512 float32 → 1×512 float32.
Converter = Callable[[Vectors], Vectors]


def emap_from_onnx(path: Path) -> npt.NDArray[np.float32]:
    """The 512×512 float32 `emap` of the InSwapper graph at `path`: its last initializer.

    Parses the graph (the released file is 554 MB: about a second); external data is not followed, the emap is
    stored inline in every known file.
    """
    import onnx
    from onnx import numpy_helper

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # protobuf raises DecodeError and friends for files that are not ONNX.
        raise InvalidInput(f"cannot read ONNX graph {path}: {exc}".splitlines()[0]) from exc
    if not graph.initializer:
        raise InvalidInput(f"{path.name} has no initializers, so it holds no emap")
    emap = numpy_helper.to_array(graph.initializer[-1])
    if emap.shape != (EMBEDDING_SIZE, EMBEDDING_SIZE):
        raise InvalidInput(f"{path.name}: the last initializer is {emap.shape}, not a 512×512 emap")
    return emap.astype(np.float32)


def _unit(v: npt.NDArray[np.floating]) -> npt.NDArray[np.floating]:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def latent(
    swap: SwapSpec,
    embeddings: npt.ArrayLike,
    *,
    convert: Converter | None = None,
    emap: npt.NDArray[np.float32] | None = None,
) -> Vectors:
    """The 1×512 float32 identity latent an embedding swapper's `source` input takes.

    embeddings: N×512, the raw recogniser outputs of the N source faces (one identity). convert: the spec's
    converter model (required when it names one). emap: the swapper graph's emap (required when `swap.emap`).
    """
    e = np.asarray(embeddings, np.float64).reshape(-1, EMBEDDING_SIZE)
    v = (_unit(e) if swap.embedding == "unit" else e).mean(axis=0, keepdims=True)
    if swap.converter is not None:
        if convert is None:
            raise ValueError(f"the swap spec needs its converter {swap.converter}")
        v = np.asarray(convert(v.astype(np.float32)), np.float64).reshape(1, -1)
    if swap.emap:
        if emap is None:
            raise ValueError("the swap spec projects through the graph's emap, which was not given")
        v = _unit(v) @ emap
    if swap.normalise:
        v = _unit(v)
    return v.astype(np.float32)


def source_image(swap: SwapSpec, image: Frame, landmarks5: npt.ArrayLike) -> Vectors:
    """The 1×3×S×S float32 `source` input of an image swapper: the source face (5 landmarks in `image`, H×W×3
    uint8 RGB) cut on the spec's template at its size and normalised by it."""
    assert swap.template is not None and swap.size is not None
    crop = warp_face(image, estimate_affine(landmarks5, swap.template, swap.size), swap.size)
    return to_tensor(crop[None], swap.source_io)


def split(crops: npt.NDArray[np.uint8], k: int) -> npt.NDArray[np.uint8]:
    """Pixel boost: N crops of side s·k → k²·N interleaved sub-crops of side s, grouped by offset (y, x) in
    row-major order: sub-crop j·N + i is crop i's pixels (y::k, x::k) with j = y·k + x."""
    return np.ascontiguousarray(np.concatenate([crops[:, y::k, x::k] for y in range(k) for x in range(k)]))


def weave(subs: npt.NDArray[np.uint8], k: int) -> npt.NDArray[np.uint8]:
    """The inverse of `split`."""
    n = len(subs) // (k * k)
    size = subs.shape[1] * k
    out = np.empty((n, size, size, 3), np.uint8)
    for j, (y, x) in enumerate((y, x) for y in range(k) for x in range(k)):
        out[:, y::k, x::k] = subs[j * n : (j + 1) * n]
    return out


def swap(session: Session, io: IOSpec, crops: npt.NDArray[np.uint8], source: Vectors) -> npt.NDArray[np.uint8]:
    """Swap the identity of aligned face crops for `source`.

    session: a swapper session; io: its I/O spec (`io.input` the crops, `io.source` the identity). crops:
    N×S×S×3 uint8 RGB at the model's size, on its template. source: the identity input of one face (1×512 latent,
    or 1×3×s×s image) for every crop, or N of them stacked, crop i's identity at row i (people mapped to their
    own sources). Returns N×S×S×3 uint8 RGB from the graph's first output. All N crops go in one call unless the
    graph fixes its batch (`io.batch`), in which case they go that many at a time.
    """
    if io.source is None:
        raise InvalidInput(f"the I/O spec of input {io.input!r} has no source input, so it is not a face swapper")
    identities = np.asarray(source, np.float32)
    n = crops.shape[0]
    if len(identities) not in (1, n):
        raise ValueError(f"{len(identities)} source identities for {n} crops: give one, or one per crop")
    if len(identities) == 1 or n == 0:
        return run_images(session, io, crops, per_item={io.source: identities[:1]})
    # One call per identity (each person's crops together), the results put back in the crops' order.
    groups: dict[bytes, list[int]] = {}
    for i, row in enumerate(identities):
        groups.setdefault(row.tobytes(), []).append(i)
    results: list[npt.NDArray[np.uint8]] = [crops[0]] * n
    for members in groups.values():
        done = run_images(session, io, crops[members], per_item={io.source: identities[members[:1]]})
        for i, result in zip(members, done, strict=True):
            results[i] = result
    return np.stack(results)


def embed(
    session: Session, io: IOSpec, template: str, size: int, faces: Sequence[tuple[Frame, npt.ArrayLike]]
) -> Vectors:
    """Raw recogniser outputs (N×D float32) for faces given as (image H×W×3 uint8 RGB, 5 landmarks), each cut on
    the recogniser's `template` at `size` px; in one call unless the graph fixes its batch (`io.batch`)."""
    crops = np.stack([warp_face(image, estimate_affine(points, template, size), size) for image, points in faces])
    step = io.batch or len(crops)
    out = [session.run({io.input: to_tensor(crops[i : i + step], io)})[0] for i in range(0, len(crops), step)]
    return np.concatenate(out).astype(np.float32)
