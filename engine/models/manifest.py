"""Typed view of the model catalogue (`manifest.toml`).

The manifest is data: per model its task, title, licence, architecture, native scale, tiling context and I/O
spec, and per file its format, where it comes from (an installed package or a URL), its size and sha256.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.errors import InvalidInput

MANIFEST_PATH = Path(__file__).with_name("manifest.toml")
# Written by `models export` in the models folder: the ONNX files exported here, with their sha256.
EXPORTS_FILE = "exports.json"

log = logging.getLogger(__name__)

Sha256 = str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IOSpec(_Strict):
    """How a model's tensors relate to `Frame` pixels.

    Input: a float32 NCHW tensor `x = (pixel / 255 - mean) / std`, channels in `colour` order.
    Output: NCHW in `colour` order, values in `output_range`, mapped linearly back to 0–255 and clamped
    (models overshoot their range).
    `source`: a face swapper's second input, the 1×512 float32 identity latent, fed as is (not an image).
    `fidelity`: a face restorer's second input, its fidelity weight as a float32 array of shape [1] in [0, 1]
    (CodeFormer's `w`).
    The graph takes its inputs in the order `input`, then `source` or `fidelity`.
    `batch`: the batch size the graph's inputs declare when it is fixed (the released InSwapper files say 1, so
    faces go one call each); None when N is free.
    """

    input: str = "input"
    output: str = "output"
    colour: Literal["RGB", "BGR"] = "RGB"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    output_range: tuple[float, float] = (0.0, 1.0)
    source: str | None = None
    fidelity: str | None = None
    batch: int | None = Field(default=None, ge=1)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The graph's inputs in the order it takes them."""
        return (self.input, *(name for name in (self.source, self.fidelity) if name is not None))


class FileSpec(_Strict):
    """One file of a model.

    Embedded files (`package` set) are read from an installed package's folder; for ncnn, `filename` is the
    `.param` and `bin` the weights. Downloaded files (`url` set) live in the models folder under `filename`, and
    so do files exported here by `models export` (`derived_from` = the content key of the file they came from).
    `precision`: the float type the graph computes in (its inputs and outputs are float32 either way).
    `size` is in bytes; sha256 values are lower-case hex.
    """

    format: Literal["onnx", "pth", "safetensors", "ncnn", "dlib"]
    filename: str
    sha256: Sha256 = Field(pattern=r"^[0-9a-f]{64}$")
    size: int | None = Field(default=None, ge=1)
    url: str | None = None
    package: str | None = None
    bin: str | None = None
    bin_sha256: Sha256 | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    bin_size: int | None = None
    derived_from: str | None = Field(default=None, pattern=r"^[0-9a-f]{64,}$")
    precision: Literal["fp32", "fp16"] = "fp32"

    @model_validator(mode="after")
    def _one_origin(self) -> FileSpec:
        if sum(x is not None for x in (self.url, self.package, self.derived_from)) != 1:
            raise ValueError(
                f"{self.filename}: exactly one of url (downloaded), package (embedded) or derived_from (exported)"
                " must be set"
            )
        if self.format == "ncnn" and (self.bin is None or self.bin_sha256 is None):
            raise ValueError(f"{self.filename}: an ncnn file needs bin and bin_sha256")
        return self

    @property
    def embedded(self) -> bool:
        return self.package is not None

    @property
    def exported(self) -> bool:
        return self.derived_from is not None

    @property
    def key(self) -> str:
        """A content key for caches derived from this file (sha256 of the weights)."""
        if self.bin_sha256 is not None:
            # An ncnn model is its .param and .bin together: either changing makes a different network.
            return f"{self.sha256[:32]}{self.bin_sha256[:32]}"
        return self.sha256

    def package_dir(self) -> Path | None:
        """Folder of the installed package that ships this embedded file, or None if it is not installed."""
        if self.package is None:
            return None
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))


Template = Literal["arcface_112", "arcface_128", "ffhq_512"]


class ModelSpec(_Strict):
    """A model in the catalogue. `scale` is the native upscale factor (1 for non-upscalers).

    `input_size`: side in pixels of the square image the model takes: the aligned crop of a face model, the
    canvas a detector letterboxes the frame into; None for models that take any size (upscalers).
    `template`: the 5-point alignment template of the crop (engine/faces/align.py), for face models fed
    aligned crops.
    """

    id: str
    task: str
    title: str
    licence: str
    commercial_use: bool
    homepage: str
    arch: str
    scale: int = Field(default=1, ge=1, le=8)
    io: IOSpec = IOSpec()
    tile_pad: int = Field(default=0, ge=0)
    # Working memory of one model call per input pixel (activations alive at once, float32, with headroom):
    # what the frame enhancer sizes whole frames and tiles by.
    bytes_per_pixel: int = Field(default=2048, ge=1)
    input_size: int | None = Field(default=None, ge=1)
    template: Template | None = None
    files: tuple[FileSpec, ...] = Field(min_length=1)

    @property
    def embedded(self) -> bool:
        return any(f.embedded for f in self.files)

    def licence_line(self) -> str:
        use = "commercial use allowed" if self.commercial_use else "NON-COMMERCIAL use only"
        return f"{self.id}: {self.licence} ({use}) — {self.homepage}"


class Manifest(_Strict):
    """The whole catalogue, keyed by model id."""

    models: dict[str, ModelSpec]

    @classmethod
    def load(cls, path: Path | None = None) -> Manifest:
        """Read and validate a manifest TOML file: `path`, else $FACESTUDIO_MANIFEST (a mirror's catalogue for
        air-gapped sites, or a test's), else the built-in one."""
        path = path or Path(os.environ.get("FACESTUDIO_MANIFEST") or MANIFEST_PATH)
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read model manifest {path}: {exc}") from exc
        ios = raw.pop("io", {})
        models = {}
        for model_id, entry in raw.pop("models", {}).items():
            entry = dict(entry)
            io_name = entry.get("io")
            if isinstance(io_name, str):
                if io_name not in ios:
                    raise InvalidInput(f"model manifest {path}: model {model_id} names unknown io spec {io_name!r}")
                entry["io"] = ios[io_name]
            models[model_id] = {"id": model_id, **entry}
        try:
            return cls.model_validate({"models": models, **raw})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(f"model manifest {path} is invalid at {where}: {first['msg']}") from exc

    def with_exports(self, models_dir: Path) -> Manifest:
        """This catalogue plus the files `models export` wrote to `models_dir` (listed in its exports.json).

        An export is only listed while its file exists and the file it was made from is still in the catalogue
        (a changed source makes the export stale). Its sha256 is verified like any other file's before use.
        """
        path = models_dir / EXPORTS_FILE
        if not path.is_file():
            return self
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))["exports"]
            exports = [(str(e["model"]), FileSpec.model_validate(e["file"])) for e in entries]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"{path} is unreadable ({exc}); delete it and export again".splitlines()[0]) from None
        models = dict(self.models)
        for model_id, file in exports:
            spec = models.get(model_id)
            if spec is None or not (models_dir / file.filename).is_file():
                continue
            if file.derived_from not in {f.key for f in spec.files if not f.exported}:
                log.info("ignoring stale export %s: its source is no longer in the catalogue", file.filename)
                continue
            kept = tuple(f for f in spec.files if f.filename != file.filename)
            models[model_id] = spec.model_copy(update={"files": (*kept, file)})
        return Manifest(models=models)

    def get(self, model_id: str) -> ModelSpec:
        """The model `model_id`, or InvalidInput naming the known ids."""
        try:
            return self.models[model_id]
        except KeyError:
            raise InvalidInput(f"unknown model {model_id!r}; known models: {', '.join(sorted(self.models))}") from None

    def for_task(self, task: str) -> list[ModelSpec]:
        return [m for m in self.models.values() if m.task == task]
