"""The face processors' paste-back masks: occlusion (XSeg) and region (BiSeNet) graphs of the real signature,
generated here and pinned by sha256 in a temp manifest over file://, whose output marks a known rectangle of the
face crop; what they mark is kept from the target, the rest of the face is swapped, and the masks of every face of
a batch come from one model call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import pytest
import tiny_graphs
from onnx import helper, numpy_helper
from test_buffalo_inswapper import CountingSession

from engine.core.errors import InvalidJob
from engine.core.types import Frame
from engine.faces import masker
from engine.faces.align import estimate_affine
from engine.faces.embedded import EmbeddedAnalyser
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.media import demo
from engine.models.manifest import Manifest
from engine.models.runtime import LoadedModel, Runtime
from engine.run.face_stage import load_sources
from processors.face_swapper import LANDMARK_MASK_SIZE, LANDMARK_MASK_TEMPLATE, FaceSwapper, FaceSwapperOptions

# What each graph marks, in its own input's pixels (x1, y1, x2, y2): the occluder a block over the left cheek and
# eye ("something in front"), the parser the nose and mouth as `nose` (class 10), all else `skin` (class 1).
OCCLUDED = (40, 90, 120, 150)  # of 256
NOSE = (200, 240, 312, 400)  # of 512, multiples of 8 (the parser's logits are drawn at 1/8 and scaled up)


def occluder(path: Path) -> bytes:
    """XSeg's signature: `input` N×256×256×3 float32 → N×256×256×1, 1 (face visible) except 0 on OCCLUDED."""
    plane = np.ones((1, 256, 256, 1), np.float32)
    x1, y1, x2, y2 = OCCLUDED
    plane[0, y1:y2, x1:x2, 0] = 0.0
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["mean"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Mul", ["mean", "zero"], ["none"]),
        helper.make_node("Add", ["none", "plane"], ["output"]),
    ]
    inits = [numpy_helper.from_array(plane, "plane"), numpy_helper.from_array(np.float32(0), "zero")]
    ins = [tiny_graphs._value("input", ["N", 256, 256, 3])]
    return tiny_graphs._save(nodes, ins, [tiny_graphs._value("output", ["N", 256, 256, 1])], inits, path)


def parser(path: Path) -> bytes:
    """BiSeNet's signature: `input` N×3×512×512 → logits N×19×512×512 (and two more heads, as the real graph
    has): class 10 (nose) highest on NOSE, class 1 (skin) everywhere else."""
    logits = np.zeros((1, 19, 64, 64), np.float32)
    logits[0, 1] = 5.0
    x1, y1, x2, y2 = (v // 8 for v in NOSE)
    logits[0, 10, y1:y2, x1:x2] = 10.0
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["mean"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Mul", ["mean", "zero"], ["none"]),
        helper.make_node("Resize", ["logits", "", "scales"], ["big"], mode="nearest"),
        helper.make_node("Add", ["none", "big"], ["output"]),
        helper.make_node("Identity", ["output"], ["head2"]),
        helper.make_node("Identity", ["output"], ["head3"]),
    ]
    inits = [
        numpy_helper.from_array(logits, "logits"),
        numpy_helper.from_array(np.float32(0), "zero"),
        numpy_helper.from_array(np.array([1, 1, 8, 8], np.float32), "scales"),
    ]
    outs = [tiny_graphs._value(n, ["N", 19, 512, 512]) for n in ("output", "head2", "head3")]
    return tiny_graphs._save(nodes, [tiny_graphs._value("input", ["N", 3, 512, 512])], outs, inits, path)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("masks")
    occluder(root / "mirror" / "xseg_1.onnx")
    parser(root / "mirror" / "bisenet_resnet_34.onnx")
    files = {"xseg_1": root / "mirror" / "xseg_1.onnx", "bisenet_resnet_34": root / "mirror" / "bisenet_resnet_34.onnx"}
    return tiny_graphs.write_manifest(root / "manifest.toml", files)


@pytest.fixture
def runtime(manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv("FACESTUDIO_MODELS", str(tmp_path / "models"))
    yield Runtime(RuntimeSettings(backend="onnx"), manifest=Manifest.load(manifest))


def two_faces(shift: int = 0) -> Frame:
    """400×200 RGB: the astronaut's face and its mirror image side by side, moved right by `shift` px."""
    face = cv2.resize(demo.photo()[20:340, 100 - shift : 420 - shift], (200, 200), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(np.hstack([face, face[:, ::-1]]))


def contexts(analyser: EmbeddedAnalyser, frames: list[Frame]) -> list[FrameContext]:
    source = load_sources(analyser, [demo.source_photo()])
    return [FrameContext(index=i, faces=tuple(analyser.detect(f)), source=source) for i, f in enumerate(frames)]


def swapper(runtime: Runtime, **options: object) -> FaceSwapper:
    return FaceSwapper(FaceSwapper.Options.model_validate(options), runtime)  # type: ignore[arg-type]


def in_crop(frame: Frame, landmarks5: npt.ArrayLike, rect: tuple[float, float, float, float]) -> npt.NDArray:
    """H×W bool: the frame pixels whose place on the face's mask crop (LANDMARK_MASK_SIZE px) lies in `rect`."""
    affine = estimate_affine(np.asarray(landmarks5), LANDMARK_MASK_TEMPLATE, LANDMARK_MASK_SIZE)
    ys, xs = np.mgrid[: frame.shape[0], : frame.shape[1]]
    u = affine[0, 0] * xs + affine[0, 1] * ys + affine[0, 2]
    v = affine[1, 0] * xs + affine[1, 1] * ys + affine[1, 2]
    x1, y1, x2, y2 = rect
    return (u >= x1) & (u < x2) & (v >= y1) & (v < y2)


def counting(loaded: LoadedModel | None) -> tuple[LoadedModel, list[int]]:
    assert loaded is not None
    session = CountingSession(loaded.session)
    return LoadedModel(loaded.spec, loaded.file, session), session.calls  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "role", "kept"),
    [
        ({"mask": ["box", "face", "occlusion"]}, "occluder", OCCLUDED),
        (
            {"mask": ["box", "face", "region"], "mask_regions": ["skin"], "parser": "bisenet_resnet_34"},
            "parser",
            tuple(v / 2 for v in NOSE),  # the parser sees the 256 px crop at 512 px
        ),
    ],
    ids=["occlusion", "region"],
)
def test_what_the_mask_model_marks_is_kept_and_the_rest_of_the_face_swapped(
    runtime: Runtime, analyser: EmbeddedAnalyser, options: dict[str, object], role: str, kept: tuple[float, ...]
) -> None:
    frames = [two_faces(0), two_faces(8)]
    ctxs = contexts(analyser, frames)
    assert [len(c.faces) for c in ctxs] == [2, 2]
    plain = swapper(runtime).process(frames, ctxs)
    masked = swapper(runtime, **options)
    model, calls = counting(getattr(masked.masker, role))
    setattr(masked.masker, role, model)
    out = masked.process(frames, ctxs)
    assert calls == [4]  # one call for the four faces of the batch
    # The ramp from "keep" to "swap" lies outside the marked block, over 3+3 sigma of the crop (~15 px).
    ramp = 6 * masker.MODEL_SIGMA * LANDMARK_MASK_SIZE + 2
    for frame, ctx, before, after in zip(frames, ctxs, plain, out, strict=True):
        for face in ctx.faces:
            inside = in_crop(frame, face.landmarks5, kept)
            x1, y1, x2, y2 = kept
            clear = ~in_crop(frame, face.landmarks5, (x1 - ramp, y1 - ramp, x2 + ramp, y2 + ramp))
            (outline,) = swapper(runtime).frame_masks(frame, [face])
            face_px = (outline > 0.99) & clear
            assert inside.sum() > 300 and face_px.sum() > 500
            assert np.abs(after[inside].astype(int) - frame[inside]).max() <= 2  # kept from the target
            assert np.abs(before[inside].astype(int) - frame[inside]).mean() > 5  # which the plain swap changes
            assert np.abs(after[face_px].astype(int) - before[face_px]).max() <= 2  # the rest: swapped as without
            assert np.abs(after[face_px].astype(int) - frame[face_px]).mean() > 5


def test_a_region_without_a_parser_follows_the_landmarks_and_says_so_once(
    runtime: Runtime, analyser: EmbeddedAnalyser
) -> None:
    frames = [two_faces(0)]
    ctxs = contexts(analyser, frames)
    processor = swapper(runtime, mask=["box", "face", "region"], mask_regions=["skin"])
    assert processor.masker.parser is None
    (note,) = processor.notes
    assert "follows the 68 landmarks" in note and "models fetch bisenet_resnet_34" in note
    (out,) = processor.process(frames, ctxs)
    (plain,) = swapper(runtime).process(frames, ctxs)
    for face in ctxs[0].faces:
        # The nose (landmarks 27–35) is not skin: it stays the target's; the cheeks under the eyes are swapped.
        nose = face.landmarks68[30].round().astype(int)
        x, y = nose
        assert (
            np.abs(out[y - 2 : y + 3, x - 2 : x + 3].astype(int) - frames[0][y - 2 : y + 3, x - 2 : x + 3]).max() <= 2
        )
        assert (
            np.abs(plain[y - 2 : y + 3, x - 2 : x + 3].astype(int) - frames[0][y - 2 : y + 3, x - 2 : x + 3]).mean() > 3
        )


def test_a_mask_combination_that_cannot_work_is_refused(runtime: Runtime) -> None:
    with pytest.raises(InvalidJob, match="face_swapper.mask is empty: choose at least one of box, face"):
        masker.Masker(runtime, "face_swapper", [])
    with pytest.raises(InvalidJob, match="mask_regions is empty"):
        masker.Masker(runtime, "face_swapper", ["region"], regions=[])


def test_landmark_warp_always_has_the_face_outline_so_it_is_never_a_choice_there(runtime: Runtime) -> None:
    """landmark_warp's warp is the face outline: its options include the face mask whatever was asked (the UI
    does not offer it then, see tests/test_studio_browser.py); the model swappers keep exactly what was asked."""
    assert FaceSwapperOptions(mask=["box", "occlusion"]).mask == ("box", "face", "occlusion")
    assert FaceSwapperOptions(model="inswapper_128", mask=["box"]).mask == ("box",)
    assert swapper(runtime, mask=["box", "occlusion"]).options.mask == ("box", "face", "occlusion")
