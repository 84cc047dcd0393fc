"""InSwapper (InsightFace `inswapper_128`) glue: the identity latent and the batched model call.

The model swaps the identity of a 128×128 face crop (aligned to the `arcface_128` template) for the identity
given as a 1×512 latent. The latent is the source's L2-normalised ArcFace w600k_r50 embedding projected through
`emap`, a 512×512 matrix stored as the graph's last initializer, then L2-normalised again (insightface
`model_zoo/inswapper.py`). Pure numpy over a `Session`: the backend (ONNX Runtime or a converted torch module)
is the runtime's business.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.backends import Session
from engine.errors import InvalidInput
from engine.models.manifest import IOSpec
from engine.models.tensor import from_tensor, to_tensor

EMBEDDING_SIZE = 512


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
        raise InvalidInput(f"{path.name} has no initializers, so it is not an InSwapper graph")
    emap = numpy_helper.to_array(graph.initializer[-1])
    if emap.shape != (EMBEDDING_SIZE, EMBEDDING_SIZE):
        raise InvalidInput(
            f"{path.name}: the last initializer is {emap.shape}, not the 512×512 emap of an InSwapper graph"
        )
    return emap.astype(np.float32)


def source_latent(embedding: npt.NDArray[np.floating], emap: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """1×512 float32 identity latent for InSwapper's `source` input.

    embedding: the source face's 512-d ArcFace w600k_r50 embedding (normalised here, so a raw or an averaged
    embedding of several source images works). emap: 512×512 from `emap_from_onnx`. Result: unit L2 norm.
    """
    e = np.asarray(embedding, np.float32).reshape(-1)
    if e.shape != (EMBEDDING_SIZE,):
        raise InvalidInput(
            f"InSwapper needs a 512-d ArcFace embedding, got {e.shape[0]}-d (use the buffalo_l face analyser)"
        )
    latent = (e / np.linalg.norm(e)) @ emap
    return (latent / np.linalg.norm(latent)).reshape(1, EMBEDDING_SIZE).astype(np.float32)


def swap(
    session: Session, io: IOSpec, crops: npt.NDArray[np.uint8], latent: npt.NDArray[np.float32]
) -> npt.NDArray[np.uint8]:
    """Swap the identity of aligned face crops for `latent`.

    session: an InSwapper session; io: its manifest I/O spec (`io.input` the image, `io.source` the latent).
    crops: N×128×128×3 uint8 RGB, aligned to `arcface_128`. latent: 1×512 float32 from `source_latent`.
    Returns N×128×128×3 uint8 RGB. All N crops go in one model call unless the graph fixes its batch size
    (`io.batch`, 1 for the released files), in which case they go `io.batch` at a time.
    """
    if io.source is None:
        raise InvalidInput(f"the I/O spec of input {io.input!r} has no source input, so it is not a face swapper")
    if crops.shape[0] == 0:
        return crops.copy()
    n = crops.shape[0]
    step = io.batch or n
    sources = np.repeat(np.asarray(latent, np.float32).reshape(1, EMBEDDING_SIZE), step, axis=0)
    out = []
    for start in range(0, n, step):
        chunk = crops[start : start + step]
        if len(chunk) < step:
            # A fixed batch size must be met exactly: pad the last chunk with blank crops, dropped below.
            chunk = np.concatenate([chunk, np.zeros((step - len(chunk), *chunk.shape[1:]), np.uint8)])
        (result, *_) = session.run({io.input: to_tensor(chunk, io), io.source: sources})
        out.append(from_tensor(result, io))
    return np.concatenate(out, axis=0)[:n]
