"""The model catalogue as front ends see it: what is here, what a preset needs, fetching (licences said first,
trust-first pins), verifying as a job verifies, exporting. The CLI's `models` commands, the UI's Models tab and
`doctor` call this; they only present its answers.

Messages meant for the user before or during a fetch (licences, what a whole chain allows, trust-first warnings)
go to the `say` callback a front end passes, so each shows them its own way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.core.errors import FacestudioError
from engine.job.processor import FrameProcessor
from engine.job.settings import Preset, RuntimeSettings
from engine.models import fetch
from engine.models.manifest import FileSpec, ModelSpec, record_trusted
from engine.models.runtime import ProgressFactory, Runtime
from engine.run.face_stage import analyser_model_ids

Availability = Literal["embedded", "downloaded", "missing"]
Pin = Literal["records", "one record", "trust-first", "first download", "embedded", "exported"]
Say = Callable[[str], None]


@dataclass(frozen=True)
class FileStatus:
    """One file of a model. `status`: embedded, present, missing, mismatch (its sha256 differs: only with
    `verify`), or unpinned (there, but no sha256 pins it yet); without `verify`, a downloaded file of the right
    size counts as present. `size`: bytes (the ncnn weights included); `pin`: what backs its sha256."""

    file: str
    format: str
    status: str
    size: int
    url: str | None
    sha256: str | None
    pin: Pin
    records: int | None


@dataclass(frozen=True)
class ModelStatus:
    """One catalogue model. `availability`: embedded, downloaded or missing; `size`: bytes of its smallest
    published file (None when it has none, or the size is unknown); `downloadable`: a published file of it is not
    here yet; `chain_licence`: what the model and every model it needs allow together, in words."""

    id: str
    task: str
    title: str
    licence: str
    commercial_use: bool
    homepage: str
    caveat: str | None
    needs: tuple[str, ...]
    chain_commercial_use: bool
    chain_licence: str
    availability: Availability
    size: int | None
    downloadable: bool
    licence_line: str
    files: tuple[FileStatus, ...]


@dataclass(frozen=True)
class Verified:
    """A file checked as a job checks it: "ok", "missing", "mismatch", for a cached conversion "rebuild" (no
    record signed here: it is made again on use), and for an int8 graph "requantise" (no record signed here, or
    made from another file: a job at runtime.precision=int8 refuses it until `models quantize` makes it again)."""

    model: str
    path: Path
    status: str


def _pin(file: FileSpec) -> Pin:
    if file.embedded or file.exported:
        return "embedded" if file.embedded else "exported"
    if file.first_download:
        return "first download"
    if file.sha256 is None:
        return "trust-first"
    return "one record" if file.records == 1 else "records"


class Catalogue:
    """The catalogue of `runtime_for(settings)`'s runtimes (built-in, or $FACESTUDIO_MANIFEST's, plus this
    machine's exports and trusted records)."""

    def __init__(self, registry: Mapping[str, type[FrameProcessor]], runtime_for: Callable[..., Runtime]) -> None:
        self.registry = registry
        self._runtime_for = runtime_for

    def _runtime(self, settings: RuntimeSettings | None = None, progress: ProgressFactory | None = None) -> Runtime:
        return self._runtime_for(settings or RuntimeSettings(offline=True), progress)

    # -- what is here -------------------------------------------------------------------------------------------
    def statuses(self, *, verify: bool = False) -> list[ModelStatus]:
        """Every model; with `verify`, every present file is hashed (a changed file shows as "mismatch")."""
        runtime = self._runtime()
        return [self._status(spec, runtime, verify) for spec in runtime.manifest.models.values()]

    def status(self, model_id: str, *, verify: bool = False) -> ModelStatus:
        runtime = self._runtime()
        return self._status(runtime.manifest.get(model_id), runtime, verify)

    def models_folder(self) -> Path:
        return self._runtime().folders.models

    def _status(self, spec: ModelSpec, runtime: Runtime, verify: bool) -> ModelStatus:
        manifest = runtime.manifest
        files = tuple(self._file(runtime, f, verify) for f in spec.files)
        published = [(f, s) for f, s in zip(spec.files, files, strict=True) if f.url is not None]
        here = [s for _, s in published if s.status == "present"]
        availability: Availability = "embedded" if spec.embedded else "downloaded" if here else "missing"
        chain = manifest.chain(spec.id)
        return ModelStatus(
            id=spec.id,
            task=spec.task,
            title=spec.title,
            licence=spec.licence,
            commercial_use=spec.commercial_use,
            homepage=spec.homepage,
            caveat=spec.caveat,
            needs=tuple(spec.needs),
            chain_commercial_use=all(m.commercial_use for m in chain),
            chain_licence=manifest.chain_licence(spec.id),
            availability=availability,
            size=min((f.size for f, _ in published if f.size is not None), default=None),
            downloadable=bool(published) and not here,
            licence_line=spec.licence_line(),
            files=files,
        )

    @staticmethod
    def _file(runtime: Runtime, file: FileSpec, verify: bool) -> FileStatus:
        path = runtime.local_path(file)
        if file.embedded:
            status = "embedded" if file.package_dir() is not None else "missing"
        elif file.sha256 is None:
            status = "unpinned" if path.is_file() else "missing"
        elif verify:
            status = fetch.verify(file, runtime.folders.models).replace("ok", "present")
        else:
            status = (
                "present" if path.is_file() and (file.size is None or path.stat().st_size == file.size) else ("missing")
            )
        return FileStatus(
            file.filename, file.format, status, (file.size or 0) + (file.bin_size or 0), file.url, file.sha256,
            _pin(file), file.records,
        )  # fmt: skip

    # -- what a preset needs ------------------------------------------------------------------------------------
    def for_preset(self, preset: Preset) -> list[tuple[str, str | None]]:
        """(model id, the processor's backend override) of every model the preset's chain loads, its face
        analyser's included when a processor needs faces; each once, in the order they load."""
        wanted: list[tuple[str, str | None]] = []
        for pid in preset.processors:
            options = preset.options[pid]
            wanted += [(m, options.backend) for m in self.registry[pid].model_ids(options)]
        if any(self.registry[pid].needs_faces for pid in preset.processors):
            wanted += [(m, None) for m in analyser_model_ids(preset.faces)]
        return list(dict.fromkeys(wanted))

    def ensure_preset(self, preset: Preset, progress: ProgressFactory | None = None, say: Say = print) -> list[Path]:
        """Fetch what the preset's chain needs to run on its backend (nothing when embedded files serve it), each
        model's licence said first. Returns the paths of the files it will load."""
        runtime = self._runtime(preset.runtime, progress)
        wanted = self.for_preset(preset)
        for model_id in dict.fromkeys(model_id for model_id, _ in wanted):
            say(f"licence: {runtime.manifest.get(model_id).licence_line()}")
        return [runtime.local_path(f) for f in runtime.ensure_each(wanted)]

    # -- fetching -----------------------------------------------------------------------------------------------
    def fetch(
        self,
        ids: list[str],
        *,
        trust_first: bool = False,
        progress: ProgressFactory | None = None,
        say: Say = print,
    ) -> list[Path]:
        """Download the named models and the models they need: for an embedded model its official original files;
        otherwise the one file the default backend would load (not every alternative variant). Each model's
        licence, and what its whole chain allows, is said before any byte is downloaded.

        A file no public record gives a sha256 for is fetched only with `trust_first`: it is downloaded as it comes
        (or a copy already placed is taken), and the sha256 it has is recorded, pinning it from then on; those
        paths come first, then the rest. ModelUnavailable / ChecksumMismatch name what failed."""
        runtime = self._runtime(RuntimeSettings(), progress)
        manifest = runtime.manifest
        items: list[tuple[str, FileSpec]] = []
        for model_id in dict.fromkeys(m.id for asked in ids for m in manifest.chain(asked)):
            spec = manifest.get(model_id)
            say(f"licence: {spec.licence_line()}")
            if spec.needs:
                say(f"licence: {model_id} needs {', '.join(spec.needs)}: {manifest.chain_licence(model_id)}")
            files = (
                [f for f in spec.files if not f.embedded]
                if spec.embedded
                else [runtime.choose_file(spec, runtime.backend_for(None))]
            )
            items += [(model_id, f) for f in files]
        folder = runtime.folders.models
        trusted: list[Path] = []
        if trust_first:
            for model_id, file in [(m, f) for m, f in items if f.sha256 is None]:
                say(f"warning: no public record gives a sha256 for {file.filename}: taking it as it comes from "
                    f"{file.url} and recording the sha256 it has")  # fmt: skip
                path = fetch.fetch(file, folder, progress=progress(file) if progress else None, trust_first=True)
                digest = fetch.sha256_file(path)
                record = record_trusted(folder, model_id, file, digest, path.stat().st_size)
                say(f"trusted {path} (sha256 {digest}, recorded in {record})")
                trusted.append(path)
            items = [(m, f) for m, f in items if f.sha256 is not None]
        return trusted + fetch.ensure([f for _, f in items], folder, offline=False, progress_factory=progress)

    # -- verifying ----------------------------------------------------------------------------------------------
    def verify(self, ids: list[str] | None = None) -> list[Verified]:
        """Every present file of `ids` (default: all), each cached conversion of them and their int8 graphs,
        checked exactly as a job checks them (embedded and exported files through the runtime, downloaded ones
        against their sha256, derived graphs against the records this installation signed)."""
        runtime = self._runtime(RuntimeSettings())
        out = []
        for model_id in ids or list(runtime.manifest.models):
            spec = runtime.manifest.get(model_id)
            for f in spec.files:
                if f.embedded or f.exported:
                    try:
                        status = "ok" if runtime.is_present(f) else "missing"
                    except FacestudioError:
                        status = "mismatch"
                else:
                    status = fetch.verify(f, runtime.folders.models)
                out.append(Verified(model_id, runtime.local_path(f), status))
                converted = runtime.check_conversion(spec, f)
                if converted is not None:
                    shown = {"ok": "ok", "tampered": "mismatch", "unrecorded": "rebuild"}[converted]
                    out.append(Verified(model_id, runtime.conversion_path(spec, f), shown))
            quantised = runtime.check_int8(spec)
            if quantised is not None:
                status, path = quantised
                out.append(Verified(model_id, path, {"ok": "ok", "tampered": "mismatch"}.get(status, "requantise")))
        return out

    # -- exporting ----------------------------------------------------------------------------------------------
    def export(
        self, model_id: str, *, fp16: bool, offline: bool, progress: ProgressFactory | None = None
    ) -> tuple[Path, FileSpec, dict[str, list[dict[str, object]]]]:
        """Export a model with PyTorch weights to ONNX in the models folder and record it (see `Runtime.export`):
        (its path, its file record, the graph's declared inputs and outputs)."""
        return self._runtime(RuntimeSettings(offline=offline), progress).export(model_id, fp16=fp16)
