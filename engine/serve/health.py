"""Readiness of a serving process: can it run the jobs it is configured for right now?

`Readiness.reasons()` lists what is wrong, one line each (empty: ready). Checked: every model the configured
preset's chain needs has a verified file (sha256, hashed once per process per file), the ONNX Runtime provider
the preset's device asks for actually starts, ffmpeg is found, and the temp folder has room. Liveness is just
"the process answers" and needs nothing from here.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from engine import media
from engine.backends import Device, gpu_visible
from engine.core.errors import FacestudioError
from engine.job.settings import Preset, Registry, RuntimeSettings, load_preset_raw
from engine.models.runtime import NATIVE, Runtime
from engine.serve.catalogue import Catalogue


@dataclass
class Readiness:
    """Checks for `/readyz`. `preset`: name or TOML file of the preset whose models must be ready;
    `min_free_bytes`: free space the temp folder must keep (uploads, outputs and partial files go there)."""

    registry: Registry
    preset: str = "default"
    min_free_bytes: int = 1 << 30
    temp_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()))
    # One warm Runtime, so each model file is hashed once per process, not once per probe.
    _runtimes: dict[RuntimeSettings, Runtime] = field(default_factory=dict, repr=False)
    # The provider check opens a session; its answer holds for the life of the process.
    _providers: dict[RuntimeSettings, str | None] = field(default_factory=dict, repr=False)

    def reasons(self) -> list[str]:
        """What stops this process from serving its preset now, one line each, naming files but no folder (anyone
        may ask); empty when ready."""
        found = []
        try:
            preset = Preset.parse(load_preset_raw(self.preset), self.registry)
        except FacestudioError as exc:
            found.append(f"preset: {exc}")
        else:
            settings = preset.runtime.model_copy(update={"offline": True})
            runtime = self._runtimes.setdefault(settings, Runtime(settings))
            found += self._model_reasons(preset, runtime)
            if settings not in self._providers:
                self._providers[settings] = provider_reason(runtime)
            if self._providers[settings]:
                found.append(str(self._providers[settings]))
        try:
            media.find_ffmpeg()
        except FacestudioError as exc:
            found.append(f"ffmpeg: {exc}")
        free = shutil.disk_usage(self.temp_dir).free
        if free < self.min_free_bytes:
            need = self.min_free_bytes / 1e9
            found.append(f"disk: {free / 1e9:.2f} GB free in the temp folder, below the {need:.2f} GB needed")
        return found

    def _model_reasons(self, preset: Preset, runtime: Runtime) -> list[str]:
        found = []
        catalogue = Catalogue(self.registry, lambda settings, _: runtime)
        for model_id, backend in catalogue.for_preset(preset):
            try:
                spec = runtime.manifest.get(model_id)
                name = runtime.backend_for(backend)
                # A model no backend loads (dlib's) is read from all its files, as the analyser does.
                files = (
                    [runtime.choose_file(spec, name)]
                    if any(f.format in NATIVE[name] for f in spec.files)
                    else list(spec.files)
                )
                missing = [runtime.local_path(f).name for f in files if not runtime.is_present(f)]
                if missing:
                    found.append(f"model {model_id}: {', '.join(missing)} missing")
            except FacestudioError as exc:
                found.append(f"model {model_id}: {exc}")
        return found


def provider_reason(runtime: Runtime) -> str | None:
    """Why the provider the runtime's settings ask for does not start (None: it does). The ONNX backend is checked
    by opening a one-node graph on the wanted providers; PyTorch by asking torch for the CUDA device."""
    try:
        device = Device.parse(runtime.settings.device)
        if device.kind == "cuda" and not device.explicit and not gpu_visible():
            return None  # "auto" without a GPU means the CPU, which is always there
        if runtime.backend_for(None) == "torch":
            return _torch_reason(device)
        return _onnx_reason(device, runtime.settings, runtime.folders.cache)
    except FacestudioError as exc:
        return f"provider: {exc}"


def _onnx_reason(device: Device, settings: RuntimeSettings, cache_dir: Path) -> str | None:
    import onnx
    from onnx import TensorProto, helper

    from engine.backends.onnx import OnnxSession, provider_list

    wanted = provider_list(device, tensorrt=settings.tensorrt, fp16=settings.fp16, cache_dir=cache_dir)[0][0]
    x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [1]) for name in "xy")
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ready", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with tempfile.TemporaryDirectory(prefix="facestudio-ready-") as folder:
        path = Path(folder) / "identity.onnx"
        onnx.save(model, str(path))
        # Explicit, so a provider that does not start is an error here instead of a silent CPU fallback.
        session = OnnxSession(path, Device(device.kind, device.index, explicit=True), tensorrt=settings.tensorrt,
                              fp16=settings.fp16, threads=1, cache_dir=cache_dir)  # fmt: skip
    if session.provider != wanted:
        return f"provider: ONNX Runtime runs {session.provider}, not the {wanted} the preset asks for"
    return None


def _torch_reason(device: Device) -> str | None:
    if device.kind != "cuda":
        return None
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() <= device.index:
        return f"provider: PyTorch sees no CUDA device {device.index}"
    return None
