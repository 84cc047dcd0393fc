"""buffalo_l (SCRFD + ArcFace) and InSwapper against tiny generated ONNX graphs with the real files' exact
signatures (input/output names, shapes, layouts), sha256-pinned in a temp manifest and fetched over file://.

The SCRFD stand-in scores each stride-8 cell by its mean brightness (a white 8×8 cell scores ≈ 1, black ≈ 0),
so a bright patch on the frame is "a face" at a known cell, with constant box distances and keypoint offsets.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.backends import Session
from engine.core.errors import InvalidInput, ModelUnavailable
from engine.core.types import Face
from engine.faces.buffalo import BuffaloAnalyser, anchor_centres, letterbox
from engine.faces.swapper import emap_from_onnx, latent, swap
from engine.job.settings import RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import Folders, Runtime

OPSET = 11  # what the InsightFace graphs use; onnx2torch and ONNX Runtime both support it
# SCRFD's output names in graph order: scores, box distances, keypoints, each for strides 8, 16, 32.
SCRFD_OUTPUTS = {"score": ("448", "471", "494"), "box": ("451", "474", "497"), "kps": ("454", "477", "500")}
BOX_DIST = np.float32([4, 5, 4, 9])  # left, top, right, bottom, in stride units
KPS_OFFSETS = np.float32([[-1, -1], [1, -1], [0, 0.5], [-0.8, 1.5], [0.8, 1.5]])  # (x, y) in stride units
CELL_GAIN, CELL_BIAS = 20.0, -10.0  # stride-8 score = sigmoid(20 · mean normalised cell value − 10)


def _save(model: onnx.ModelProto, path: Path) -> bytes:
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path.read_bytes()


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    # ONNX Runtime here reads IR ≤ 13; onnx 1.23 would write 14.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)


def tiny_scrfd(path: Path) -> bytes:
    """`input.1` [1,3,?,?] → the 9 SCRFD outputs (N,1)/(N,4)/(N,10) for strides 8/16/32, 2 anchors per cell."""
    nodes, inits, outputs = [], [], []
    for i, stride in enumerate((8, 16, 32)):
        for kind, width in (("score", 1), ("box", 4), ("kps", 10)):
            name = SCRFD_OUTPUTS[kind][i]
            weight = np.zeros((2 * width, 3, stride, stride), np.float32)
            if kind == "score":
                if stride == 8:
                    weight[:] = CELL_GAIN / (3 * stride * stride)  # the cell's mean, scaled
                bias = np.full(2, CELL_BIAS if stride == 8 else -10.0, np.float32)
            elif kind == "box":
                bias = np.tile(BOX_DIST, 2)
            else:
                bias = np.tile(KPS_OFFSETS.reshape(-1), 2)
            inits += [
                numpy_helper.from_array(weight, f"w{name}"),
                numpy_helper.from_array(bias.astype(np.float32), f"b{name}"),
                numpy_helper.from_array(np.int64([-1, width]), f"s{name}"),
            ]
            conv = f"c{name}"
            nodes.append(
                helper.make_node(
                    "Conv", ["input.1", f"w{name}", f"b{name}"], [conv], kernel_shape=[stride] * 2, strides=[stride] * 2
                )
            )
            if kind == "score":
                nodes.append(helper.make_node("Sigmoid", [conv], [f"g{name}"]))
                conv = f"g{name}"
            # NCHW → N, H, W, (anchor, value) → rows in (y, x, anchor) order, as SCRFD lays them out.
            nodes.append(helper.make_node("Transpose", [conv], [f"t{name}"], perm=[0, 2, 3, 1]))
            nodes.append(helper.make_node("Reshape", [f"t{name}", f"s{name}"], [name]))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, width]))
    order = [n for kind in ("score", "box", "kps") for n in SCRFD_OUTPUTS[kind]]
    outputs.sort(key=lambda o: order.index(o.name))
    graph = helper.make_graph(
        nodes,
        "scrfd_tiny",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, "h", "w"])],
        outputs,
        inits,
    )
    return _save(_model(graph), path)


def tiny_arcface(path: Path) -> bytes:
    """`input.1` [N,3,112,112] → `683` [N,512]: strided conv, ReLU, flatten, dense (random weights)."""
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.2, (4, 3, 8, 8)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "conv_b"),
        numpy_helper.from_array(rng.normal(0, 0.05, (4 * 14 * 14, 512)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.normal(0, 0.05, 512).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["input.1", "conv_w", "conv_b"], ["c"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["683"]),
    ]
    graph = helper.make_graph(
        nodes,
        "arcface_tiny",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["N", 3, 112, 112])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["N", 512])],
        inits,
    )
    return _save(_model(graph), path)


def tiny_inswapper(path: Path, *, batch: int | None = 1) -> tuple[bytes, npt.NDArray[np.float32]]:
    """InSwapper's signature and op types: `target` [1,3,128,128] + `source` [1,512] → `output` [1,3,128,128]
    in [0, 1]; reflect-pad conv encoder, an AdaIN style block driven by the latent (InstanceNormalization, Gemm,
    Reshape, Mul, Add), nearest upsampling, tanh decoder; the 512×512 emap is the last (unused) initializer.
    `batch` None declares a free batch size. Returns (file bytes, emap)."""
    rng = np.random.default_rng(3)
    n = batch if batch is not None else "N"
    emap = rng.normal(0, 1 / np.sqrt(512), (512, 512)).astype(np.float32)

    def w(shape: tuple[int, ...], scale: float) -> npt.NDArray[np.float32]:
        return rng.normal(0, scale, shape).astype(np.float32)

    inits = [
        numpy_helper.from_array(np.int64([0, 0, 1, 1, 0, 0, 1, 1]), "pads"),
        numpy_helper.from_array(w((8, 3, 3, 3), 0.3), "enc1_w"),
        numpy_helper.from_array(w((8,), 0.1), "enc1_b"),
        numpy_helper.from_array(w((16, 8, 4, 4), 0.2), "enc2_w"),
        numpy_helper.from_array(w((16,), 0.1), "enc2_b"),
        numpy_helper.from_array(np.ones(16, np.float32), "in_scale"),
        numpy_helper.from_array(np.zeros(16, np.float32), "in_bias"),
        numpy_helper.from_array(w((512, 16), 0.5), "gamma_w"),
        numpy_helper.from_array(np.ones(16, np.float32), "gamma_b"),
        numpy_helper.from_array(w((512, 16), 0.5), "beta_w"),
        numpy_helper.from_array(np.zeros(16, np.float32), "beta_b"),
        numpy_helper.from_array(np.int64([1 if batch is not None else -1, 16, 1, 1]), "style_shape"),
        numpy_helper.from_array(np.float32([]), "roi"),
        numpy_helper.from_array(np.float32([1, 1, 2, 2]), "scales"),
        numpy_helper.from_array(w((3, 16, 3, 3), 0.2), "dec_w"),
        numpy_helper.from_array(w((3,), 0.1), "dec_b"),
        numpy_helper.from_array(np.float32(1.0), "one"),
        numpy_helper.from_array(np.float32(0.5), "half"),
        numpy_helper.from_array(emap, "emap"),  # last, as in the released graph
    ]
    nodes = [
        helper.make_node("Pad", ["target", "pads"], ["p"], mode="reflect"),
        helper.make_node("Conv", ["p", "enc1_w", "enc1_b"], ["e1"], kernel_shape=[3, 3]),
        helper.make_node("LeakyRelu", ["e1"], ["a1"], alpha=0.2),
        helper.make_node("Conv", ["a1", "enc2_w", "enc2_b"], ["e2"], kernel_shape=[4, 4], strides=[2, 2], pads=[1] * 4),
        helper.make_node("Relu", ["e2"], ["a2"]),
        helper.make_node("InstanceNormalization", ["a2", "in_scale", "in_bias"], ["norm"], epsilon=1e-5),
        helper.make_node("Gemm", ["source", "gamma_w", "gamma_b"], ["gamma_flat"]),
        helper.make_node("Gemm", ["source", "beta_w", "beta_b"], ["beta_flat"]),
        helper.make_node("Reshape", ["gamma_flat", "style_shape"], ["gamma"]),
        helper.make_node("Reshape", ["beta_flat", "style_shape"], ["beta"]),
        helper.make_node("Mul", ["norm", "gamma"], ["styled"]),
        helper.make_node("Add", ["styled", "beta"], ["adain"]),
        helper.make_node("Relu", ["adain"], ["a3"]),
        helper.make_node(
            "Resize",
            ["a3", "roi", "scales"],
            ["up"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Conv", ["up", "dec_w", "dec_b"], ["d"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Tanh", ["d"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["t1", "half"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "inswapper_tiny",
        [
            helper.make_tensor_value_info("target", TensorProto.FLOAT, [n, 3, 128, 128]),
            helper.make_tensor_value_info("source", TensorProto.FLOAT, [n, 512]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [n, 3, 128, 128])],
        inits,
    )
    return _save(_model(graph), path), emap


def _manifest(tmp: Path, files: dict[str, tuple[Path, bytes]], *, swapper_batch: int | None = 1) -> Manifest:
    """The built-in manifest with the entries in `files` (buffalo_l, inswapper_128) pointed at tiny files over
    file://."""
    real = Manifest.load()
    models = dict(real.models)
    for model_id, (path, data) in files.items():
        spec = real.get(model_id)
        file = spec.files[0].model_copy(
            update={"url": path.as_uri(), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        )
        io = spec.io.model_copy(update={"batch": swapper_batch}) if model_id == "inswapper_128" else spec.io
        models[model_id] = spec.model_copy(update={"files": (file,), "io": io})
    return Manifest(models=models)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, bytes]]:
    folder = tmp_path_factory.mktemp("mirror")
    swapper, _ = tiny_inswapper(folder / "inswapper.onnx")
    return {
        "buffalo_l_det_10g": (folder / "det.onnx", tiny_scrfd(folder / "det.onnx")),
        "buffalo_l_w600k_r50": (folder / "rec.onnx", tiny_arcface(folder / "rec.onnx")),
        "inswapper_128": (folder / "inswapper.onnx", swapper),
    }


@pytest.fixture
def runtime(tmp_path: Path, mirror: dict[str, tuple[Path, bytes]]) -> Runtime:
    return Runtime(
        RuntimeSettings(device="cpu"),
        manifest=_manifest(tmp_path, mirror),
        folders=Folders(models=tmp_path / "models", cache=tmp_path / "cache"),
    )


# -- detection -----------------------------------------------------------------------------------------------
def _frame(shape: tuple[int, int]) -> npt.NDArray[np.uint8]:
    """A black frame with a white 16×16 patch at (400, 208) and a grey one at (96, 96): two "faces"."""
    frame = np.zeros((*shape, 3), np.uint8)
    frame[208:224, 400:416] = 255
    frame[96:112, 96:112] = 200
    return frame


def _sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


@pytest.mark.parametrize("shape", [(720, 1280), (1280, 720)], ids=["landscape", "portrait"])
def test_scrfd_decode_nms_and_letterbox_back_to_frame(runtime: Runtime, shape: tuple[int, int]) -> None:
    analyser = BuffaloAnalyser(runtime, backend="onnx")
    faces = analyser.detect(_frame(shape))
    # Both frames letterbox at scale 0.5 (the long side 1280 → 640), so each 16-px patch fills one stride-8
    # cell; its two anchors give two identical boxes, of which NMS keeps one.
    assert len(faces) == 2
    white, grey = faces
    assert white.score > grey.score
    assert white.score == pytest.approx(_sigmoid(CELL_GAIN * (1 - 0.5) / 0.50196078 + CELL_BIAS), abs=1e-4)
    assert grey.score == pytest.approx(_sigmoid(CELL_GAIN * (200 / 255 - 0.5) / 0.50196078 + CELL_BIAS), abs=1e-4)
    scale, stride = 0.5, 8
    for face, corner in ((white, (400, 208)), (grey, (96, 96))):
        centre = np.float32(corner) * scale  # the cell's anchor centre on the canvas
        box = np.concatenate([centre - BOX_DIST[:2] * stride, centre + BOX_DIST[2:] * stride]) / scale
        np.testing.assert_allclose(face.box, box, atol=1e-3)
        np.testing.assert_allclose(face.landmarks5, (centre + KPS_OFFSETS * stride) / scale, atol=1e-3)
        assert face.landmarks5.shape == (5, 2) and face.landmarks68 is None and face.embedding is None
    assert white.box == (336.0, 128.0, 464.0, 352.0)


def test_detect_on_the_torch_backend_matches_onnx(runtime: Runtime) -> None:
    frame = _frame((720, 1280))
    by_onnx = BuffaloAnalyser(runtime, backend="onnx").detect(frame)
    by_torch = BuffaloAnalyser(runtime, backend="torch").detect(frame)
    np.testing.assert_allclose([f.box for f in by_torch], [f.box for f in by_onnx], atol=1e-3)
    assert [f.score for f in by_torch] == pytest.approx([f.score for f in by_onnx], abs=1e-5)


def test_letterbox_and_anchor_layout() -> None:
    canvas, scale = letterbox(np.full((100, 300, 3), 7, np.uint8), 64)
    # The scale is that of the rounded content height, 21/100, as insightface's det_scale.
    assert scale == pytest.approx(21 / 100) and canvas.shape == (64, 64, 3)
    assert (canvas[:21] == 7).all() and (canvas[21:] == 0).all()  # content top-left, zero padding below
    centres = anchor_centres(32, 8)
    assert centres.shape == (2 * 16, 2)
    np.testing.assert_array_equal(centres[:6], [[0, 0], [0, 0], [8, 0], [8, 0], [16, 0], [16, 0]])
    np.testing.assert_array_equal(centres[8], [0, 8])  # row-major: x fastest


def test_empty_frame_has_no_faces_and_bad_outputs_are_typed(runtime: Runtime) -> None:
    analyser = BuffaloAnalyser(runtime, backend="onnx")
    assert analyser.detect(np.zeros((50, 80, 3), np.uint8)) == []
    with pytest.raises(InvalidInput, match="multiple of 32"):
        BuffaloAnalyser(runtime, backend="onnx", det_size=600)


def test_refit_redetects_near_the_prediction(runtime: Runtime) -> None:
    analyser = BuffaloAnalyser(runtime, backend="onnx")
    frame = _frame((720, 1280))
    embedding = np.ones(512, np.float32) / np.sqrt(512)
    # An 80×160 prediction near the patch: the refit crop is 320×320 at (244, 68), i.e. canvas scale 1, where
    # the patch fills one stride-8 cell (crop 160..168 × 144..152) and only half of its neighbours.
    predicted = Face(
        box=(364.0, 148.0, 444.0, 308.0),
        landmarks5=np.zeros((5, 2), np.float32),
        score=0.9,
        embedding=embedding,
        recogniser="arcface_w600k_r50",
    )
    refit = analyser.refit(frame, predicted)
    assert refit is not None
    corner = np.float32([244 + 160, 68 + 144])  # that cell's anchor centre in frame pixels
    np.testing.assert_allclose(refit.box, np.concatenate([corner - BOX_DIST[:2] * 8, corner + BOX_DIST[2:] * 8]))
    np.testing.assert_allclose(refit.landmarks5, corner + KPS_OFFSETS * 8, atol=1e-3)
    assert refit.embedding is embedding and refit.recogniser == "arcface_w600k_r50"
    # Nothing face-like near a prediction in an empty corner of the frame.
    far = Face(box=(1000.0, 500.0, 1080.0, 660.0), landmarks5=np.zeros((5, 2), np.float32), score=0.9)
    assert analyser.refit(frame, far) is None


# -- embeddings ----------------------------------------------------------------------------------------------
def _face_at(x: float, y: float, scale: float) -> Face:
    # Landmarks in arcface_112 layout, scaled and moved: alignment maps them back onto the template.
    template = np.float32([[38.29, 51.70], [73.53, 51.50], [56.03, 71.74], [41.55, 92.37], [70.73, 92.20]])
    points = template * scale + np.float32([x, y])
    return Face(box=(x, y, x + 112 * scale, y + 112 * scale), landmarks5=points, score=0.99)


def test_embeddings_are_unit_length_and_batch_equals_single(runtime: Runtime) -> None:
    analyser = BuffaloAnalyser(runtime, backend="onnx")
    rng = np.random.default_rng(5)
    frame = rng.integers(0, 256, (400, 600, 3), dtype=np.uint8)
    faces = [_face_at(20, 30, 1.5), _face_at(300, 120, 2.0)]
    batch = analyser.embed(frame, faces)
    single = [analyser.embed(frame, [f])[0] for f in faces]
    for b, s in zip(batch, single, strict=True):
        assert b.embedding is not None and s.embedding is not None
        assert b.embedding.shape == (512,) and b.embedding.dtype == np.float32
        assert np.linalg.norm(b.embedding) == pytest.approx(1.0, abs=1e-5)
        np.testing.assert_allclose(b.embedding, s.embedding, atol=1e-5)
        assert b.recogniser == "arcface_w600k_r50" and b.box == s.box
    assert analyser.distance(batch[0].embedding, batch[0].embedding) == pytest.approx(0.0, abs=1e-6)
    assert analyser.distance(batch[0].embedding, batch[1].embedding) > 0.0
    assert analyser.embed(frame, []) == []
    with pytest.raises(InvalidInput, match="different recognisers"):
        analyser.distance(batch[0].embedding, np.ones(128, np.float32))


# -- InSwapper -----------------------------------------------------------------------------------------------
class CountingSession:
    """Wraps a Session and records the batch size of every call."""

    def __init__(self, inner: Session) -> None:
        self.inner, self.calls = inner, []
        self.backend, self.provider, self.input_names = inner.backend, inner.provider, inner.input_names

    def run(self, inputs):  # type: ignore[no-untyped-def]
        self.calls.append(len(next(iter(inputs.values()))))
        return self.inner.run(inputs)


def source_latent(embedding: npt.ArrayLike, emap: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """InSwapper's identity latent by the catalogue's swap spec for it (insightface: normed embedding @ emap)."""
    return latent(Manifest.load().get("inswapper_128").swap, embedding, emap=emap)


def test_emap_is_the_last_initializer(tmp_path: Path) -> None:
    _, emap = tiny_inswapper(tmp_path / "s.onnx")
    got = emap_from_onnx(tmp_path / "s.onnx")
    assert got.shape == (512, 512) and got.dtype == np.float32
    np.testing.assert_array_equal(got, emap)
    embedding = np.random.default_rng(0).normal(size=512).astype(np.float32) * 3.0  # not normalised
    identity = source_latent(embedding, got)
    expected = (embedding / np.linalg.norm(embedding)) @ emap
    np.testing.assert_allclose(identity[0], expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)
    assert identity.shape == (1, 512) and np.linalg.norm(identity) == pytest.approx(1.0, abs=1e-5)
    tiny_arcface(tmp_path / "a.onnx")
    with pytest.raises(InvalidInput, match="not a 512×512 emap"):
        emap_from_onnx(tmp_path / "a.onnx")


def test_inswapper_onnx_runtime_and_torch_agree(runtime: Runtime) -> None:
    by_onnx = runtime.load("inswapper_128", "onnx")
    by_torch = runtime.load("inswapper_128", "torch")
    assert by_torch.session.input_names == ["target", "source"]
    rng = np.random.default_rng(11)
    for _ in range(3):
        inputs = {
            "target": rng.random((1, 3, 128, 128), dtype=np.float32),
            "source": source_latent(rng.normal(size=512), rng.normal(size=(512, 512)).astype(np.float32)),
        }
        (a,) = by_onnx.session.run(inputs)
        (b,) = by_torch.session.run(inputs)
        assert a.shape == b.shape == (1, 3, 128, 128)
        assert np.abs(a - b).max() <= 1e-4


def test_swap_end_to_end_on_both_backends_one_face_per_call(runtime: Runtime) -> None:
    emap = emap_from_onnx(runtime.local_path(runtime.load("inswapper_128", "onnx").file))
    identity = source_latent(np.random.default_rng(1).normal(size=512), emap)
    crops = np.random.default_rng(2).integers(0, 256, (3, 128, 128, 3), dtype=np.uint8)
    results = []
    for backend in ("onnx", "torch"):
        model = runtime.load("inswapper_128", backend)
        session = CountingSession(model.session)
        out = swap(session, model.spec.io, crops, identity)
        assert out.shape == crops.shape and out.dtype == np.uint8
        assert session.calls == [1, 1, 1]  # the graph declares batch 1 (io.batch = 1)
        results.append(out.astype(int))
    assert np.abs(results[0] - results[1]).max() <= 1
    empty = swap(model.session, model.spec.io, crops[:0], identity)
    assert empty.shape == (0, 128, 128, 3)


def test_swap_batches_when_the_graph_allows(tmp_path: Path) -> None:
    data, emap = tiny_inswapper(tmp_path / "free.onnx", batch=None)
    runtime = Runtime(
        RuntimeSettings(device="cpu"),
        manifest=_manifest(tmp_path, {"inswapper_128": (tmp_path / "free.onnx", data)}, swapper_batch=None),
        folders=Folders(models=tmp_path / "models", cache=tmp_path / "cache"),
    )
    model = runtime.load("inswapper_128", "onnx")
    identity = source_latent(np.random.default_rng(1).normal(size=512), emap)
    crops = np.random.default_rng(2).integers(0, 256, (3, 128, 128, 3), dtype=np.uint8)
    session = CountingSession(model.session)
    together = swap(session, model.spec.io, crops, identity)
    assert session.calls == [3]
    one_by_one = np.concatenate([swap(model.session, model.spec.io, crops[i : i + 1], identity) for i in range(3)])
    assert np.abs(together.astype(int) - one_by_one).max() <= 1


def test_offline_inswapper_names_file_url_and_folder(tmp_path: Path) -> None:
    folders = Folders(models=tmp_path / "models", cache=tmp_path / "cache")
    runtime = Runtime(RuntimeSettings(offline=True, device="cpu"), manifest=Manifest.load(), folders=folders)
    with pytest.raises(ModelUnavailable) as info:
        runtime.load("inswapper_128")
    message = str(info.value)
    assert "\n" not in message
    assert "inswapper_128.onnx" in message
    assert "https://huggingface.co/datasets/Gourieff/ReActor/resolve/main/models/inswapper_128.onnx" in message
    assert str(folders.models) in message
    assert info.value.exit_code == 3


def test_real_manifest_pins_the_published_files() -> None:
    manifest = Manifest.load()
    swapper = manifest.get("inswapper_128")
    assert [f.sha256[:8] for f in swapper.files] == ["e4a3f08c", "a290273e"]
    assert [f.sha256[:8] for f in manifest.get("inswapper_128_fp16").files] == ["32031dbe", "c4eccca8"]
    assert swapper.io.input_names == ("target", "source") and swapper.template == "arcface_128"
    assert manifest.get("buffalo_l_det_10g").files[0].size == 16923827
    assert manifest.get("buffalo_l_w600k_r50").io.output == "683"
    for model_id in ("inswapper_128", "inswapper_128_fp16", "buffalo_l_det_10g", "buffalo_l_w600k_r50"):
        assert not manifest.get(model_id).commercial_use
    # Local file names never collide, even where two publishers use the same name.
    names = [f.filename for spec in manifest.models.values() for f in spec.files if not f.embedded]
    assert len(names) == len(set(names))
