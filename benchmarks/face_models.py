"""What facestudio itself adds around the catalogue's swappers, lip syncer and expression restorer, on this machine.

    python benchmarks/face_models.py [--repeats N]

The real weights are not available here, so each model is a stand-in graph of its real signature whose own
compute is negligible (tests/tiny_graphs.py): the times are facestudio's per-face work around the model — align,
normalise, pixel-boost split and weave, identity, colour, mask, paste back; mel windows and the mouth warps;
LivePortrait's crops and keypoint algebra — i.e. what is added on top of the model's own time. Also timed: the
load-time signature check of a 400 MB graph (against hashing the same file, which every load does once), and the
mel spectrogram of 60 s of audio. Prints one line per measurement (median of `--repeats`, after a warm-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import tiny_graphs  # noqa: E402
from test_buffalo_inswapper import tiny_arcface  # noqa: E402

from engine.faces.embedded import EmbeddedAnalyser  # noqa: E402
from engine.job.processor import FrameContext  # noqa: E402
from engine.job.settings import RuntimeSettings  # noqa: E402
from engine.media import demo, speech  # noqa: E402
from engine.models import fetch, signature  # noqa: E402
from engine.models.manifest import Manifest  # noqa: E402
from engine.models.runtime import Folders, Runtime  # noqa: E402
from engine.run.face_stage import SourceFace, SourceIdentity  # noqa: E402


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        real = Manifest.load()
        files: dict[str, Path] = {}
        for model_id in ("hyperswap_1a_256", "simswap_unofficial_512", "uniface_256"):
            files[model_id] = root / f"{model_id}.onnx"
            tiny_graphs.swapper(files[model_id], real.get(model_id).io, identity=True)
        files["crossface_simswap"] = root / "c.onnx"
        tiny_graphs.converter(files["crossface_simswap"])
        files["buffalo_l_w600k_r50"] = root / "a.onnx"
        tiny_arcface(files["buffalo_l_w600k_r50"])
        files["wav2lip_gan_96"] = root / "w.onnx"
        tiny_graphs.wav2lip(files["wav2lip_gan_96"])
        files.update(tiny_graphs.live_portrait(root / "lp"))
        manifest = tiny_graphs.write_manifest(root / "manifest.toml", files)
        os.environ["FACESTUDIO_MANIFEST"] = str(manifest)
        from processors.expression_restorer import ExpressionRestorer, ExpressionRestorerOptions
        from processors.face_swapper import FaceSwapper, FaceSwapperOptions
        from processors.lip_syncer import LipSyncer, LipSyncerOptions

        runtime = Runtime(RuntimeSettings(device="cpu"), folders=Folders(root / "models", root / "cache"))
        frame = np.ascontiguousarray(demo.photo())
        (face,) = EmbeddedAnalyser("hog").detect(frame)
        source = SourceIdentity(np.zeros(512, np.float32), "x", (SourceFace(frame, face),))
        ctx = FrameContext(index=0, faces=(face,), source=source, time=0.5, original=frame)
        print(f"per face, on the 512×512 astronaut photo, {args.repeats} repeats (ms):")
        swappers = [("hyperswap_1a_256", 256), ("hyperswap_1a_256", 1024), ("simswap_unofficial_512", 512)]
        for model_id, boost in [*swappers, ("uniface_256", 256)]:
            options = FaceSwapperOptions(model=model_id, pixel_boost=boost, backend="onnx")
            swapper = FaceSwapper(options, runtime)
            ms = median_ms(lambda swapper=swapper: swapper.process([frame], [ctx]), args.repeats)
            print(f"  face_swapper {model_id} at {boost} px: {ms:.1f}")
        lips = LipSyncer(LipSyncerOptions(backend="onnx"), runtime)
        lips._mel = speech.spectrogram(speech.prepare(np.random.default_rng(0).normal(size=(48000, 2)) * 3000))
        print(f"  lip_syncer wav2lip_gan_96: {median_ms(lambda: lips.process([frame], [ctx]), args.repeats):.1f}")
        restorer = ExpressionRestorer(ExpressionRestorerOptions(backend="onnx"), runtime)
        print(
            f"  expression_restorer (3 graphs): {median_ms(lambda: restorer.process([frame], [ctx]), args.repeats):.1f}"
        )
        voice = (np.random.default_rng(1).normal(size=(48000 * 60, 2)) * 3000).astype(np.int16)
        ms = median_ms(lambda: speech.spectrogram(speech.prepare(voice)), 3)
        print(f"mel spectrogram of 60 s at 48 kHz stereo: {ms:.0f} ms")
        big = root / "big.onnx"
        weights = numpy_helper.from_array(np.zeros((100, 1024, 1024), np.float32), "w")  # 400 MiB of weights
        graph = helper.make_graph(
            [helper.make_node("Identity", ["target"], ["output"])], "big",
            [helper.make_tensor_value_info("source", TensorProto.FLOAT, [1, 512]),
             helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, 256, 256])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 256, 256])], [weights],
        )  # fmt: skip
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), big)
        size = big.stat().st_size / 2**20
        check, digest = (
            median_ms(lambda: signature.read_signature(big), 3),
            median_ms(lambda: fetch.sha256_file(big), 3),
        )
        print(f"signature check of a {size:.0f} MiB graph: {check:.0f} ms (its sha256: {digest:.0f} ms)")


if __name__ == "__main__":
    main()
