"""Start-up costs only what the command uses: `--help` imports no engine, numpy or pydantic; an ONNX job imports
neither PyTorch nor Gradio, aiortc or Ray; the PyTorch backend loads an upscaler without a warning.

Each runs in a child process (a fresh interpreter, as a user starts it) that runs `launch.py` and then prints the
modules it imported; no test here measures time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from engine.media import demo

ROOT = Path(__file__).resolve().parent.parent

# Runs launch.py with the given arguments in this interpreter, then prints its exit code and the top-level
# packages it imported as JSON on the last line (launch.py's own output comes before it).
PROBE = """
import json, runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
    code = 0
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _imported(*args: str, warnings_as_errors: bool = False) -> tuple[int, set[str], str]:
    """(exit code, top-level packages imported, stderr) of `launch.py ARGS` in a fresh interpreter."""
    flags = ["-W", "error::FutureWarning", "-W", "error::DeprecationWarning:torch"] if warnings_as_errors else []
    result = subprocess.run(
        [sys.executable, *flags, "-c", PROBE, str(ROOT / "launch.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return report["code"], set(report["modules"]), result.stderr


def test_help_imports_no_engine_numpy_or_pydantic() -> None:
    code, modules, _ = _imported("--help")
    assert code == 0
    assert not modules & {"numpy", "pydantic", "processors", "torch", "gradio", "onnxruntime", "cv2", "PIL"}
    assert "engine" in modules  # engine.core.errors only: the exit codes


def test_an_onnx_job_imports_neither_torch_nor_the_web_stack(tmp_path: Path) -> None:
    target = tmp_path / "in.png"
    Image.fromarray(demo.photo()).resize((64, 64)).save(target)
    code, modules, err = _imported(
        "run", "--target", str(target), "--output", str(tmp_path / "out.png"), "--processors", "frame_enhancer",
        "--set", "frame_enhancer.model=realesr_animevideov3", "--backend", "onnx", "--device", "cpu", "--yes",
    )  # fmt: skip
    assert code == 0, err
    assert "onnxruntime" in modules and (tmp_path / "out.png").is_file()
    assert not modules & {"torch", "gradio", "fastapi", "aiortc", "ray", "spandrel", "onnx2torch", "huggingface_hub"}


@pytest.mark.slow
def test_the_torch_backend_loads_an_upscaler_without_a_warning(tmp_path: Path) -> None:
    """CodeFormer's package (spandrel-extra-arches) runs a deprecated torch.jit.script at import: only a CodeFormer
    model imports it, so an upscaler on PyTorch prints no FutureWarning (warnings are errors in the child)."""
    target = tmp_path / "in.png"
    Image.fromarray(demo.photo()).resize((32, 32)).save(target)
    code, modules, err = _imported(
        "run", "--target", str(target), "--output", str(tmp_path / "out.png"), "--processors", "frame_enhancer",
        "--set", "frame_enhancer.model=realesr_animevideov3", "--backend", "torch", "--device", "cpu", "--yes",
        warnings_as_errors=True,
    )  # fmt: skip
    assert code == 0, err
    assert "torch" in modules and "spandrel_extra_arches" not in modules and "Warning" not in err
