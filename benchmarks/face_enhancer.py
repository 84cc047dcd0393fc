"""Per-face time of each face enhancer model on each backend, on this machine.

    python benchmarks/face_enhancer.py [--models ID …] [--repeats N] [--threads N]

Downloaded models (GFPGAN, CodeFormer, RestoreFormer) are timed with random weights in their real architecture
and size, so no download is needed and the compute is the real one; the embedded real_esrgan_face uses its real
weights. Each model runs on ONNX Runtime (an export of the same weights) and on PyTorch, on one face of the
package photo through the whole processor path (align → model → paste back); the first call is a warm-up.
Prints one line per model and backend: median ms per face, and the ONNX Runtime / PyTorch ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.job.processor import FrameContext  # noqa: E402
from engine.job.settings import FacesSettings, RuntimeSettings  # noqa: E402
from engine.media import demo  # noqa: E402
from engine.models.manifest import MANIFEST_PATH  # noqa: E402
from engine.models.runtime import Runtime  # noqa: E402
from engine.run.face_stage import build_analyser  # noqa: E402
from processors.face_enhancer import FaceEnhancer, FaceEnhancerOptions  # noqa: E402

MODELS = ("real_esrgan_face", "gfpgan_1_4", "codeformer", "restoreformer")


def random_weights(model_id: str) -> tuple[str, dict[str, torch.Tensor]]:
    """(file name, state dict) of a downloaded model, with random weights in its real architecture."""
    torch.manual_seed(0)
    if model_id.startswith("gfpgan"):
        from spandrel.architectures.GFPGAN import GFPGAN

        net = GFPGAN(
            out_size=512, num_style_feat=512, channel_multiplier=2, decoder_load_path=None, fix_decoder=False,
            num_mlp=8, input_is_latent=True, different_w=True, narrow=1, sft_half=True,
        )  # fmt: skip
        return f"GFPGANv{model_id[-3:].replace('_', '.')}.pth", net.state_dict()
    if model_id == "codeformer":
        from spandrel_extra_arches.architectures.CodeFormer import CodeFormer

        return "codeformer.pth", CodeFormer().state_dict()
    from spandrel.architectures.RestoreFormer import RestoreFormer

    return "RestoreFormer.pth", RestoreFormer().state_dict()


def place(model_id: str, models: Path, manifest: str) -> str:
    """Save random weights for `model_id` in `models` and pin them in the manifest text; returns the new text."""
    filename, state = random_weights(model_id)
    torch.save({"params_ema": state}, models / filename)
    data = (models / filename).read_bytes()
    section = manifest.index(f'[[models.{model_id}.files]]\nformat = "pth"')
    pinned = f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"'
    return manifest[:section] + re.sub(r'size = \d+\nsha256 = "[0-9a-f]+"', pinned, manifest[section:], count=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="inference threads (0: one per core)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models, cache = Path(tmp, "models"), Path(tmp, "cache")
        models.mkdir()
        manifest = MANIFEST_PATH.read_text()
        for model_id in args.models:
            if model_id != "real_esrgan_face":
                manifest = place(model_id, models, manifest)
        Path(tmp, "manifest.toml").write_text(manifest)
        os.environ.update(FACESTUDIO_MODELS=str(models), FACESTUDIO_CACHE=str(cache))
        os.environ["FACESTUDIO_MANIFEST"] = str(Path(tmp, "manifest.toml"))
        frame = demo.photo()
        # Through the same builder as a job, so the dlib files are checked against their sha256 first.
        analyser = build_analyser(FacesSettings(), Runtime(RuntimeSettings(device="cpu", offline=True)))
        (face,) = analyser.detect(frame)
        size = f"{frame.shape[1]}×{frame.shape[0]}"
        print(f"# {os.cpu_count()} CPUs, torch {torch.__version__}, one face on a {size} frame", flush=True)
        for model_id in args.models:
            times = {}
            for backend in ("onnx", "torch"):
                settings = RuntimeSettings(device="cpu", offline=True, threads=args.threads)
                runtime = Runtime(settings)
                enhancer = FaceEnhancer(FaceEnhancerOptions(model=model_id, backend=backend), runtime)
                ctx = [FrameContext(0, (face,))]
                enhancer.process([frame], ctx)
                runs = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    enhancer.process([frame], ctx)
                    runs.append(time.perf_counter() - start)
                times[backend] = statistics.median(runs) * 1000
                print(f"{model_id:<18} {backend:<6} {times[backend]:8.0f} ms/face", flush=True)
            print(f"{model_id:<18} onnx/torch {times['onnx'] / times['torch']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
