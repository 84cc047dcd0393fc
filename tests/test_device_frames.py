"""The two executors of the one normalisation spec (engine/models/tensor.py on the host, engine/backends/device.py
in PyTorch ops) give the same tensors, and the device executor's crops, paste-back and whole processor runs agree
with the host's, here on torch's CPU device (on CUDA it is the same code). Also what crosses between host and
device: the uint8 frame once in, only the changed rectangle back, nothing for a frame without a face."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.backends import Device
from engine.backends.onnx import OnnxSession
from engine.faces.align import estimate_affine, footprint, paste_back, warp_face
from engine.faces.embedded import EmbeddedAnalyser
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.executor import HOST, executor_for
from engine.models.manifest import IOSpec
from engine.models.runtime import Runtime
from engine.models.tensor import from_tensor, input_transform, output_transform, run_images, to_tensor
from processors.face_enhancer import FaceEnhancer, FaceEnhancerOptions

# PyTorch (and spandrel, and what imports them) is imported in the tests that use it, not when the file is
# collected: every xdist worker collects every file, and PyTorch alone holds ~0.5 GB (tests/README.md, Memory).

CONVENTIONS = [
    IOSpec(),
    IOSpec(colour="BGR", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), output_range=(-1.0, 1.0)),
    IOSpec(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
]


@pytest.mark.parametrize("io", CONVENTIONS)
def test_both_executors_normalise_to_the_same_tensors(io: IOSpec) -> None:
    import torch

    from engine.backends.device import normalise

    images = np.random.default_rng(0).integers(0, 256, (3, 37, 23, 3), dtype=np.uint8)
    host = to_tensor(images, io)
    on_device = normalise(torch.from_numpy(images), input_transform(io))
    assert on_device.dtype == torch.float32 and tuple(on_device.shape) == host.shape
    np.testing.assert_array_equal(on_device.numpy(), host)


@pytest.mark.parametrize("io", CONVENTIONS)
def test_both_executors_map_outputs_back_to_the_same_pixels(io: IOSpec) -> None:
    import torch

    from engine.backends.device import denormalise

    lo, hi = io.output_range
    rng = np.random.default_rng(1)
    y = rng.uniform(lo - 0.4, hi + 0.4, (2, 3, 29, 31)).astype(np.float32)
    # Exact halves between two levels: both round them to even.
    y[0, :, 0, :20] = ((np.arange(20) + 0.5) / 255 * (hi - lo) + lo).astype(np.float32)
    host = from_tensor(y, io)
    on_device = denormalise(torch.from_numpy(y), output_transform(io))
    assert on_device.dtype == torch.uint8
    np.testing.assert_array_equal(on_device.numpy(), host)
    # float16 outputs (a half-precision session) go through the same map.
    half = y.astype(np.float16)
    np.testing.assert_array_equal(
        denormalise(torch.from_numpy(half), output_transform(io)).numpy(), from_tensor(half, io)
    )


def _photo_and_face() -> tuple[np.ndarray, np.ndarray]:
    photo = demo.photo()
    (face,) = EmbeddedAnalyser().detect(photo)
    return photo, face.landmarks5


def test_device_crops_match_opencv_to_a_level_also_past_the_frame_edge() -> None:
    import torch

    from engine.backends import device

    photo, landmarks = _photo_and_face()
    # One face inside the frame and one moved so that its crop reaches past the left and top edges.
    for shift in (0.0, -float(landmarks[:, 0].min()) - 40):
        affine = estimate_affine(landmarks + [shift, shift * 0.7], "ffhq_512", 512)
        host = warp_face(photo, affine, 512).astype(int)
        on_device = device.warp(torch.from_numpy(photo), affine, 512).numpy().astype(int)
        diff = np.abs(on_device - host)
        assert diff.max() <= 1 and diff.mean() < 0.1, (diff.max(), diff.mean())


def test_device_paste_back_matches_and_leaves_everything_outside_the_footprint_untouched() -> None:
    import torch

    from engine.backends import device

    photo, landmarks = _photo_and_face()
    affine = estimate_affine(landmarks, "arcface_128", 128)
    crop = 255 - warp_face(photo, affine, 128)  # something visibly different to paste
    mask = np.zeros((128, 128), np.float32)
    cv2.circle(mask, (64, 64), 50, 1.0, -1)
    mask = cv2.GaussianBlur(mask, (0, 0), 6) * 0.8
    host = paste_back(photo, crop, affine, mask)
    frame = torch.from_numpy(photo.copy())
    rect = device.paste(frame, torch.from_numpy(crop), affine, torch.from_numpy(mask))
    assert rect == footprint(affine, 128, photo.shape[1], photo.shape[0])
    x1, y1, x2, y2 = rect
    on_device = frame.numpy()
    outside = np.ones(photo.shape[:2], bool)
    outside[y1:y2, x1:x2] = False
    np.testing.assert_array_equal(on_device[outside], photo[outside])
    diff = np.abs(on_device.astype(int) - host.astype(int))
    assert diff.max() <= 2 and diff.mean() < 0.05, (diff.max(), diff.mean())
    assert np.abs(on_device.astype(int) - photo.astype(int)).max() > 100  # the crop went in


def _graph(path: Path, batch: int | str) -> Path:
    """output = 1 - input·w + bias (per channel), with a second input `source` [N,3] added per channel."""
    w = numpy_helper.from_array(np.array([0.5, 0.75, 1.0], np.float32).reshape(1, 3, 1, 1), "w")
    nodes = [
        helper.make_node("Mul", ["input", "w"], ["scaled"]),
        helper.make_node("Unsqueeze", ["source", "axes"], ["bias"]),
        helper.make_node("Sub", ["bias", "scaled"], ["output"]),
    ]
    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 16, 16]),
         helper.make_tensor_value_info("source", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [w, axes],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("fixed", [True, False])
def test_onnx_runtime_through_dlpack_gives_what_its_plain_run_gives(tmp_path: Path, fixed: bool) -> None:
    import torch

    from engine.backends.device import DeviceExecutor

    graph = _graph(tmp_path / "g.onnx", 1 if fixed else "N")
    session = OnnxSession(graph, Device("cpu"), cache_dir=tmp_path)
    io = IOSpec(source="source", batch=1 if fixed else None)
    images = np.random.default_rng(2).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    source = np.array([[1.0, 0.5, 0.25]], np.float32)
    host = run_images(session, io, images, per_item={"source": source})
    executor = DeviceExecutor("cpu")
    on_device = executor.infer(session, io, executor.images(images), per_item={"source": source})
    np.testing.assert_array_equal(executor.host(on_device), host)
    (raw,) = session.run_device(
        {"input": torch.from_numpy(to_tensor(images[:1], io)), "source": torch.from_numpy(source)}
    )
    np.testing.assert_allclose(raw.numpy(), session.run({"input": to_tensor(images[:1], io), "source": source})[0])


def test_torch_sessions_run_on_device_tensors_as_on_arrays() -> None:
    import torch

    from engine.backends.torch import TorchSession

    torch.manual_seed(0)
    module = torch.nn.Conv2d(3, 3, 3, padding=1)
    session = TorchSession(module, Device("cpu"))
    x = np.random.default_rng(3).random((2, 3, 8, 8), dtype=np.float32)
    (on_device,) = session.run_device({"input": torch.from_numpy(x)})
    np.testing.assert_allclose(on_device.numpy(), session.run({"input": x})[0], rtol=1e-6)
    assert session.frames_device is None  # on the CPU the host executor is used


def test_the_device_executor_is_chosen_only_for_sessions_that_take_device_tensors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.backends.device import DeviceExecutor

    runtime = Runtime(RuntimeSettings(device="cpu"))
    session = OnnxSession(_graph(tmp_path / "g.onnx", "N"), Device("cpu"), cache_dir=tmp_path)
    assert session.frames_device is None and executor_for(runtime, session) is HOST
    monkeypatch.setattr(OnnxSession, "frames_device", property(lambda self: "cpu"))
    chosen = executor_for(runtime, session)
    assert isinstance(chosen, DeviceExecutor) and chosen.name == "torch:cpu"
    assert executor_for(runtime, session) is chosen  # one per device, kept warm with the frames it holds


def test_face_enhancer_on_the_device_executor_matches_the_host_and_moves_one_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.backends.device import DeviceExecutor

    photo = demo.photo()
    (face,) = EmbeddedAnalyser().detect(photo)
    blank = np.full_like(photo, 90)
    ctxs = [FrameContext(index=0, faces=(face,)), FrameContext(index=1)]
    options = FaceEnhancerOptions(model="real_esrgan_face", blend=100)
    runtime = Runtime(RuntimeSettings(device="cpu", backend="onnx"))
    host = FaceEnhancer(options, runtime).process([photo, blank], ctxs)

    monkeypatch.setattr(OnnxSession, "frames_device", property(lambda self: "cpu"))
    runtime = Runtime(RuntimeSettings(device="cpu", backend="onnx"))
    enhancer = FaceEnhancer(options, runtime)
    on_device = enhancer.process([photo, blank], ctxs)
    executor = executor_for(runtime, enhancer.loaded.session)
    assert isinstance(executor, DeviceExecutor)

    assert on_device[1] is blank  # no face: not uploaded, not copied
    rect = footprint(estimate_affine(face.landmarks5, "ffhq_512", 512), 512, photo.shape[1], photo.shape[0])
    x1, y1, x2, y2 = rect
    outside = np.ones(photo.shape[:2], bool)
    outside[y1:y2, x1:x2] = False
    np.testing.assert_array_equal(on_device[0][outside], photo[outside])
    diff = np.abs(on_device[0].astype(int) - host[0].astype(int))
    # The crops differ by at most a level (OpenCV's 1/32 px sampling), which the ×4 model carries into its output.
    assert diff.mean() < 0.5 and np.percentile(diff, 99.9) <= 6, (diff.mean(), diff.max())
    # The face was restored, as much as on the host.
    changed = np.abs(on_device[0].astype(int) - photo.astype(int))[~outside].mean()
    assert changed > 1 and changed == pytest.approx(
        np.abs(host[0].astype(int) - photo.astype(int))[~outside].mean(), rel=0.05
    )

    # One uint8 frame up, the 512 px mask as float16, and only the changed rectangle back.
    assert executor.uploaded == photo.nbytes + 512 * 512 * 2
    assert executor.downloaded == (x2 - x1) * (y2 - y1) * 3
    # The next step of a chain finds that output on the device: nothing is uploaded for it again.
    before = executor.uploaded
    again = enhancer.process([on_device[0]], ctxs[:1])
    assert executor.uploaded == before + 512 * 512 * 2
    assert again[0].shape == photo.shape
