"""Each swapper family fed as the cited facts say — written from ../shared/MODELS.md (§1, §3, §6, §8), not from
facestudio's code: where the aligned crop's landmarks land, the range and colour order of the tensor the graph
gets, how its output is mapped back, and what its identity input is.

The swapper graphs here hand back their own input (`tiny_graphs.swapper(identity=True)`), so the output is the
input's statistics as the graph saw them; a spy records every tensor each graph is given. The frame is one flat
colour with five white dots placed where the family's template puts the landmarks (under an arbitrary rotation,
scale and shift), so the dots' centroids in the tensor show where the crop put them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import tiny_graphs
from test_buffalo_inswapper import tiny_arcface, tiny_inswapper

from engine.core.types import Face
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import Folders, LoadedModel, Runtime
from engine.run.face_stage import SourceFace, SourceIdentity
from processors.face_swapper import FaceSwapper, FaceSwapperOptions

# -- templates, in fractions of the crop side, as MODELS.md gives them ------------------------------------------
INSIGHTFACE_112 = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]]
)
ARCFACE_112_V2 = INSIGHTFACE_112 / 112  # §6: arcface_112_v2 = the insightface template / 112
ARCFACE_128 = (INSIGHTFACE_112 + [8, 0]) / 128  # §1: estimate_norm at 128 px shifts x by 8·(128/128)
FFHQ_512 = np.array([[192.98, 239.95], [318.90, 240.19], [256.63, 314.02], [201.26, 371.41], [313.09, 371.15]]) / 512
ARCFACE_112_V1 = np.array(
    [[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.50000000, 0.61154464], [0.37913393, 0.77687500],
     [0.62086607, 0.77687500]]
)  # fmt: skip
MTCNN_512 = np.array(
    [[0.36562865, 0.46733799], [0.63305391, 0.46585885], [0.50019127, 0.61942959], [0.39032951, 0.77598822],
     [0.61178945, 0.77476328]]
)  # fmt: skip
HALF, IMAGENET_MEAN, IMAGENET_STD = (0.5,) * 3, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
ZERO, ONE = (0.0,) * 3, (1.0,) * 3


# model: template, crop px, mean, std, output denormalised (x·std + mean) before [0, 1] (§8 table and L747-759;
# §1 for InSwapper), identity: (kind, rule)
FACTS: dict[str, dict[str, Any]] = {
    "inswapper_128": dict(template=ARCFACE_128, size=128, mean=ZERO, std=ONE, denorm=False, source="emap"),
    "hyperswap_1a_256": dict(template=ARCFACE_128, size=256, mean=HALF, std=HALF, denorm=True, source="unit"),
    "ghost_2_256": dict(template=ARCFACE_112_V1, size=256, mean=HALF, std=HALF, denorm=True, source="converted"),
    "simswap_256": dict(
        template=ARCFACE_112_V1, size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD, denorm=False, source="converted_unit"
    ),
    "simswap_unofficial_512": dict(
        template=ARCFACE_112_V1, size=512, mean=ZERO, std=ONE, denorm=False, source="converted_unit"
    ),
    "hififace_unofficial_256": dict(
        template=MTCNN_512, size=256, mean=HALF, std=HALF, denorm=True, source="converted_unit"
    ),
    "blendswap_256": dict(
        template=FFHQ_512, size=256, mean=ZERO, std=ONE, denorm=False, source=("image", ARCFACE_112_V2, 112)
    ),
    "uniface_256": dict(template=FFHQ_512, size=256, mean=HALF, std=HALF, denorm=True, source=("image", FFHQ_512, 256)),
}
BACKGROUND = np.array([200, 60, 20])  # RGB: three different levels, so a channel swap shows
SOURCE_BACKGROUND = np.array([30, 140, 220])


def similarity(
    points: npt.NDArray[np.float64], angle: float, scale: float, shift: tuple[float, float]
) -> npt.NDArray[np.float64]:
    c, s = np.cos(np.radians(angle)), np.sin(np.radians(angle))
    return points @ (scale * np.array([[c, -s], [s, c]])).T + shift


def dotted(
    shape: tuple[int, int], points: npt.NDArray[np.float64], background: npt.NDArray[np.int64], radius: float
) -> npt.NDArray[np.uint8]:
    """A flat `background` image with white anti-aliased dots centred on `points` (sub-pixel)."""
    image = np.empty((*shape, 3), np.uint8)
    image[:] = background
    for x, y in points:
        centre = (int(round(x * 16)), int(round(y * 16)))
        cv2.circle(image, centre, int(radius * 16), (255, 255, 255), -1, cv2.LINE_AA, shift=4)
    return image


def centroids(pixels: npt.NDArray[np.float64], background: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Intensity-weighted centroids (x, y) of the white dots on an H×W×3 image of `background` colour."""
    weight = np.clip((pixels - background).min(axis=2) / (255 - background).min(), 0, 1)
    count, labels = cv2.connectedComponents((weight > 0.02).astype(np.uint8))
    ys, xs = np.mgrid[: weight.shape[0], : weight.shape[1]]
    out = []
    for label in range(1, count):
        w = weight * (labels == label)
        out.append(((w * xs).sum() / w.sum(), (w * ys).sum() / w.sum()))
    return np.array(out)


def assert_on_template(found: npt.NDArray[np.float64], template: npt.NDArray[np.float64], size: int) -> None:
    expected = template * size
    assert len(found) == 5
    for point in expected:
        assert np.linalg.norm(found - point, axis=1).min() <= 0.5, (point, found)


class Spy:
    """Records every input a session is given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.input_names = inner.input_names
        self.backend, self.provider = inner.backend, inner.provider
        self.seen: list[dict[str, npt.NDArray[np.float32]]] = []

    def run(self, inputs: dict[str, npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
        self.seen.append({k: np.array(v) for k, v in inputs.items()})
        return self.inner.run(inputs)


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Path]]]:
    root = tmp_path_factory.mktemp("conventions")
    real = Manifest.load()
    files: dict[str, Path] = {}
    for model_id in FACTS:
        files[model_id] = root / f"{model_id}.onnx"
        if model_id == "inswapper_128":
            tiny_inswapper(files[model_id])
        else:
            tiny_graphs.swapper(files[model_id], real.get(model_id).io, identity=True)
    for model_id in ("crossface_ghost", "crossface_simswap", "crossface_hififace"):
        files[model_id] = root / f"{model_id}.onnx"
        tiny_graphs.converter(files[model_id], seed=int(hashlib.sha256(model_id.encode()).hexdigest()[:4], 16))
    files["buffalo_l_w600k_r50"] = root / "arcface.onnx"
    tiny_arcface(files["buffalo_l_w600k_r50"])
    tiny_graphs.write_manifest(root / "manifest.toml", files)
    yield root, files


@pytest.fixture(autouse=True)
def _catalogue_env(catalogue: tuple[Path, dict[str, Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The options' validators read the catalogue from the environment (conftest clears it for every test)."""
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(catalogue[0] / "manifest.toml"))


def run_swapper(
    model_id: str, root: Path
) -> tuple[FaceSwapper, dict[str, Spy], npt.NDArray[np.uint8], npt.NDArray[np.uint8], Face]:
    """The swapper on a dotted frame and a dotted source photo, every session spied on. Returns (processor,
    spies by model id, frame, output frame, the target face)."""
    facts = FACTS[model_id]
    runtime = Runtime(
        RuntimeSettings(device="cpu"), manifest=Manifest.load(), folders=Folders(root / "models", root / "cache")
    )
    options = FaceSwapperOptions(model=model_id, colour="none", mask="box", mask_blur=0.0, backend="onnx")
    processor = FaceSwapper(options, runtime)
    spies: dict[str, Spy] = {}
    for attr in ("swapper", "recogniser", "converter"):
        loaded: LoadedModel | None = getattr(processor, attr)
        if loaded is not None:
            spies[loaded.spec.id] = Spy(loaded.session)
            setattr(processor, attr, LoadedModel(loaded.spec, loaded.file, spies[loaded.spec.id]))  # type: ignore[arg-type]
    # Target: the template's points under a rotation of 12°, a scale of 1.7 and a shift, with dots on them.
    points = similarity(facts["template"] * facts["size"], 12.0, 1.7, (140.0, 90.0))
    frame = dotted((900, 900), points, BACKGROUND, radius=4.0)
    face = Face(box=(0, 0, 900, 900), landmarks5=points.astype(np.float32), score=1.0)
    # Source: for image identities, its own template's points, likewise dotted.
    kind = facts["source"]
    src_template, src_size = (kind[1], kind[2]) if isinstance(kind, tuple) else (ARCFACE_112_V2, 112)
    src_points = similarity(src_template * src_size, -8.0, 2.3, (60.0, 40.0))
    source_image = dotted((700, 700), src_points, SOURCE_BACKGROUND, radius=4.0)
    source_face = Face(box=(0, 0, 700, 700), landmarks5=src_points.astype(np.float32), score=1.0)
    identity = SourceIdentity(np.zeros(512, np.float32), "arcface_w600k_r50", (SourceFace(source_image, source_face),))
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,), source=identity)])
    return processor, spies, frame, out, face


@pytest.mark.parametrize("model_id", list(FACTS))
def test_target_crop_tensor_and_output_follow_the_facts(model_id: str, catalogue: tuple[Path, dict[str, Path]]) -> None:
    facts = FACTS[model_id]
    processor, spies, frame, out, face = run_swapper(model_id, catalogue[0])
    spec = processor.swapper.spec  # type: ignore[union-attr]
    (call,) = spies[model_id].seen
    tensor = call[spec.io.input]
    size = facts["size"]
    assert tensor.shape == (1, 3, size, size) and tensor.dtype == np.float32
    mean, std = np.array(facts["mean"])[:, None, None], np.array(facts["std"])[:, None, None]
    pixels = ((tensor[0] * std + mean) * 255).transpose(1, 2, 0)  # back to RGB pixels by the facts' numbers
    # (1) The dots (the face's five landmarks) land on the family's template points, within 0.5 px.
    assert_on_template(centroids(pixels, BACKGROUND), facts["template"], size)
    # (2) Away from the dots the tensor holds (background/255 − mean) / std per channel in RGB order.
    flat = tensor[0, :, 4:12, size // 2 - 4 : size // 2 + 4].reshape(3, -1)
    expected = (BACKGROUND / 255 - np.array(facts["mean"])) / np.array(facts["std"])
    np.testing.assert_allclose(flat.mean(axis=1), expected, atol=2e-3)
    # (3) The output, mapped back as stated: denormalised families give back the pixel; the others read the
    # graph's output as [0, 1] (an ImageNet-normalised input comes back clipped, not restored).
    if model_id == "inswapper_128":
        return  # its stand-in is a generator, not an identity graph; its mapping is the [0, 1] read of §1
    value = expected * np.array(facts["std"]) + np.array(facts["mean"]) if facts["denorm"] else expected
    want = np.clip(np.rint(np.clip(value, 0, 1) * 255), 0, 255)
    # A frame pixel the crop covers well inside its border (the box mask is 1 there), away from the dots.
    inverse = cv2.invertAffineTransform(cv2.estimateAffinePartial2D(face.landmarks5, facts["template"] * size)[0])
    x, y = (np.array([size / 2, size * 0.1, 1.0]) @ inverse.T).round().astype(int)
    assert np.abs(out[y, x].astype(int) - want).max() <= 1, (out[y, x], want)


def _ort(path: Path, inputs: dict[str, npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, inputs)[0]


@pytest.mark.parametrize("model_id", list(FACTS))
def test_identity_input_follows_the_facts(model_id: str, catalogue: tuple[Path, dict[str, Path]]) -> None:
    root, files = catalogue
    facts = FACTS[model_id]
    processor, spies, *_ = run_swapper(model_id, root)
    spec = processor.swapper.spec  # type: ignore[union-attr]
    given = spies[model_id].seen[0][str(spec.io.source)]
    kind = facts["source"]
    if isinstance(kind, tuple):
        # An aligned crop of the source face on its own template and size, RGB/255 (mean 0, std 1).
        _, template, size = kind
        assert given.shape == (1, 3, size, size)
        assert_on_template(centroids(given[0].transpose(1, 2, 0) * 255, SOURCE_BACKGROUND), template, size)
        np.testing.assert_allclose(given[0, :, 2, size // 2], SOURCE_BACKGROUND / 255, atol=2e-3)
        assert "buffalo_l_w600k_r50" not in spies  # no recogniser runs
        return
    # ArcFace w600k_r50 embeds the source: 112 px crop on the insightface template, (pixel − 127.5) / 127.5 RGB.
    (rec,) = spies["buffalo_l_w600k_r50"].seen
    crop = rec["input.1"][0].transpose(1, 2, 0) * 127.5 + 127.5
    assert_on_template(centroids(crop, SOURCE_BACKGROUND), ARCFACE_112_V2, 112)
    raw = _ort(files["buffalo_l_w600k_r50"], rec)[0]
    assert given.shape == (1, 512) and given.dtype == np.float32
    if kind == "unit":  # HyperSwap: the L2-normalised embedding, no converter
        np.testing.assert_allclose(given[0], raw / np.linalg.norm(raw), rtol=1e-5, atol=1e-6)
    elif kind == "emap":  # InSwapper: normed embedding @ emap (the last initializer), normalised
        from onnx import load, numpy_helper

        emap = numpy_helper.to_array(load(str(files[model_id])).graph.initializer[-1])
        latent = (raw / np.linalg.norm(raw)) @ emap
        np.testing.assert_allclose(given[0], latent / np.linalg.norm(latent), rtol=1e-4, atol=1e-6)
    else:  # the raw embedding through the converter; GHOST's result is not normalised, the others' is
        converter = spec.swap.converter  # type: ignore[union-attr]
        (converted,) = spies[converter].seen
        np.testing.assert_allclose(converted["input"][0], raw, rtol=1e-5, atol=1e-6)
        mapped = _ort(files[converter], {"input": raw[None]})[0]
        want = mapped / np.linalg.norm(mapped) if kind == "converted_unit" else mapped
        np.testing.assert_allclose(given[0], want, rtol=1e-4, atol=1e-5)
        assert (abs(np.linalg.norm(given) - 1) < 1e-4) == (kind == "converted_unit")
