"""Typed view of the model catalogue (`manifest.toml`).

The manifest is data: per model its task, title, licence, architecture, native scale, tiling context, I/O spec
(with the graph signature a downloaded ONNX file must have) and, for a face swapper, where its identity comes
from; per file its format, where it comes from (an installed package or a URL), its size and sha256, and how
many public records back that sha256 (none: fetched only on request, recording the hash it got).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.core.errors import InvalidInput

MANIFEST_PATH = Path(__file__).with_name("manifest.toml")
# Written by `models export` in the models folder: the ONNX files exported here, with their sha256.
EXPORTS_FILE = "exports.json"
# Written by `models fetch ID --trust-first` in the models folder: the sha256 each unpinned file had when it was
# first downloaded here (no public record gives one), which pins it from then on.
TRUSTED_FILE = "trusted.json"

log = logging.getLogger(__name__)

Sha256 = str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


ElementType = Literal["float32", "float16", "float64", "int64", "int32"]


class TensorSpec(_Strict):
    """One declared input or output of a graph, checked against the file at load time (engine/models/signature.py).

    name: the graph's name for it; None where the facts give only its position (outputs read as output[0]).
    type: element type. shape: per axis a fixed size (int), `"size"` (the model's `input_size`), or any other text
    for an axis of any size (a named batch axis, or a size the facts do not state); None: rank not stated.
    """

    name: str | None = None
    type: ElementType = "float32"
    shape: tuple[int | str, ...] | None = None


class IOSpec(_Strict):
    """How a model's tensors relate to `Frame` pixels.

    Input: a float32 NCHW tensor `x = (pixel / 255 - mean) / std`, channels in `colour` order.
    Output: NCHW in `colour` order, values in `output_range`, mapped linearly back to 0–255 and clamped
    (models overshoot their range).
    `source`: a face swapper's identity input (a 1×512 float32 latent, or an aligned source crop: its SwapSpec).
    `fidelity`: a face restorer's second input, its fidelity weight as a float32 array of shape [1] in [0, 1]
    (CodeFormer's `w`).
    Without a declared signature the graph takes its inputs in the order `input`, then `source` or `fidelity`.
    `batch`: the batch size the graph's inputs declare when it is fixed (the released InSwapper files say 1, so
    faces go one call each); None when N is free.
    `inputs`, `outputs`: the graph signature a downloaded ONNX file must have (names, element types, shapes);
    outputs are matched by position. `more_outputs`: the graph may have further outputs after the declared ones
    (the facts say one exists but nothing reads it). `layout`: how the image input is laid out, NCHW or NHWC
    (channels last: the tensor `engine.models.tensor.to_tensor` makes, transposed by whoever feeds such a graph).
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
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    more_outputs: bool = False
    layout: Literal["NCHW", "NHWC"] = "NCHW"

    @model_validator(mode="after")
    def _named_inputs(self) -> IOSpec:
        declared = [t.name for t in self.inputs]
        if self.inputs and None in declared:
            raise ValueError("every declared input needs its name")
        missing = [n for n in (self.input, self.source, self.fidelity) if self.inputs and n and n not in declared]
        if missing:
            raise ValueError(f"inputs {missing} are not among the declared inputs {declared}")
        return self

    @property
    def input_names(self) -> tuple[str, ...]:
        """The graph's inputs in the order it takes them (a converted graph's torch module takes them so)."""
        if self.inputs:
            return tuple(str(t.name) for t in self.inputs)
        return (self.input, *(name for name in (self.source, self.fidelity) if name is not None))

    def input_type(self, name: str) -> ElementType:
        """The declared element type of input `name` (float32 where nothing is declared)."""
        return next((t.type for t in self.inputs if t.name == name), "float32")


class FileSpec(_Strict):
    """One file of a model.

    Embedded files (`package` set) are read from an installed package's folder; for ncnn, `filename` is the
    `.param` and `bin` the weights. Downloaded files (`url` set) live in the models folder under `filename`, and
    so do files exported here by `models export` (`derived_from` = the content key of the file they came from).
    `precision`: the float type the graph computes in (its inputs and outputs are float32 either way).
    `size` is in bytes; sha256 values are lower-case hex.
    `records`: how many independent public records agree on `sha256` (None: several, see MODELS.md); a file
    backed by one record is pinned to it all the same, and a mismatch says so. A downloaded file with no
    published sha256 has none here: it is fetched only by `models fetch ID --trust-first`, which records the
    hash it got (`first_download` then says the pin is this machine's own, not a public one).
    `io`: this file's I/O spec where it differs from the model's (another exporter's names or types).
    """

    format: Literal["onnx", "pth", "safetensors", "ncnn", "dlib"]
    filename: str
    sha256: Sha256 | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    records: int | None = Field(default=None, ge=1)
    first_download: bool = False
    io: IOSpec | None = None
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
        if self.sha256 is None and self.url is None:
            raise ValueError(f"{self.filename}: only a downloaded file may lack a sha256 (it is trusted on first use)")
        return self

    def pin_note(self) -> str:
        """What backs the sha256, for messages: empty when several public records agree."""
        if self.first_download:
            return "this sha256 was recorded when the file was first downloaded here (no public record gives one)"
        if self.records == 1:
            return "only one public record backed this sha256, so the file may be another release under this name"
        return ""

    @property
    def embedded(self) -> bool:
        return self.package is not None

    @property
    def exported(self) -> bool:
        return self.derived_from is not None

    @property
    def key(self) -> str:
        """A content key for caches derived from this file (sha256 of the weights)."""
        sha256 = self.sha256 or ""
        if self.bin_sha256 is not None:
            # An ncnn model is its .param and .bin together: either changing makes a different network.
            return f"{sha256[:32]}{self.bin_sha256[:32]}"
        return sha256

    def package_dir(self) -> Path | None:
        """Folder of the installed package that ships this embedded file, or None if it is not installed."""
        if self.package is None:
            return None
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))


Template = Literal[
    "arcface_112",
    "arcface_112_v1",
    "arcface_112_v2",
    "arcface_128",
    "dfl_whole_face",
    "ffhq_512",
    "mtcnn_512",
    "styleganex_384",
]


class SwapSpec(_Strict):
    """Where a face swapper's identity (its `source` input) comes from; the target side is the model's `io`,
    `template` and `input_size`, so one code path serves every swapper.

    source: `embedding` (an ArcFace embedding of the source faces, by the `recogniser` model) or `image` (an
    aligned crop of the first source face).
    embedding: which average over the source faces starts the latent: of the L2-normalised embeddings (`unit`)
    or of the raw ones (`raw`). converter: a model mapping that 1×512 vector into the swapper's own space.
    emap: project through the swapper graph's last initializer (InSwapper's 512×512 `emap`). normalise:
    L2-normalise the latent last.
    template, size, colour, mean, std: an image source's crop (`size` px on `template`) and its normalisation
    `(pixel/255 - mean) / std`, NCHW.
    pixel_boost: the crop sizes offered, in px (multiples of the model's `input_size`: k×k interleaved runs).
    """

    source: Literal["embedding", "image"]
    recogniser: str | None = None
    embedding: Literal["unit", "raw"] = "unit"
    converter: str | None = None
    emap: bool = False
    normalise: bool = False
    template: Template | None = None
    size: int | None = Field(default=None, ge=1)
    colour: Literal["RGB", "BGR"] = "RGB"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    pixel_boost: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _complete(self) -> SwapSpec:
        if self.source == "embedding" and self.recogniser is None:
            raise ValueError("an embedding source needs its recogniser")
        if self.source == "image" and (self.template is None or self.size is None):
            raise ValueError("an image source needs its crop's template and size")
        if self.source == "image" and (self.converter or self.emap or self.recogniser):
            raise ValueError("an image source takes no recogniser, converter or emap")
        return self

    @property
    def source_io(self) -> IOSpec:
        """The normalisation of an image source's crop."""
        return IOSpec(input="source", colour=self.colour, mean=self.mean, std=self.std)


class ModelSpec(_Strict):
    """A model in the catalogue. `scale` is the native upscale factor (1 for non-upscalers).

    `input_size`: side in pixels of the square image the model takes: the aligned crop of a face model, the
    canvas a detector letterboxes the frame into; None for models that take any size (upscalers).
    `template`: the 5-point alignment template of the crop (engine/faces/align.py), for face models fed
    aligned crops.
    `swap`: a face swapper's identity source (SwapSpec). `caveat`: what the licence line does not say (training
    data terms, use restrictions), shown beside it.
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
    swap: SwapSpec | None = None
    caveat: str | None = None
    files: tuple[FileSpec, ...] = Field(min_length=1)

    @property
    def embedded(self) -> bool:
        return any(f.embedded for f in self.files)

    @property
    def needs(self) -> tuple[str, ...]:
        """Ids of the other models this one cannot run without (a swapper's recogniser and converter)."""
        if self.swap is None:
            return ()
        return tuple(m for m in (self.swap.recogniser, self.swap.converter) if m is not None)

    def io_for(self, file: FileSpec) -> IOSpec:
        """The I/O spec `file` is fed by: its own where it declares one, else the model's."""
        return file.io or self.io

    def licence_line(self) -> str:
        use = "commercial use allowed" if self.commercial_use else "NON-COMMERCIAL use only"
        caveat = f"; {self.caveat}" if self.caveat else ""
        return f"{self.id}: {self.licence} ({use}{caveat}) — {self.homepage}"


class Manifest(_Strict):
    """The whole catalogue, keyed by model id. `io`: the named I/O specs (`[io.NAME]` tables) as declared, for
    graphs no entry names a file of (a deep swapper's `.dfm`: the user's own file, checked against `io.dfm`)."""

    models: dict[str, ModelSpec]
    io: dict[str, IOSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        """References between models resolve, and every face swapper says where its identity comes from."""
        tasks = {"recogniser": "face_recogniser", "converter": "embedding_converter"}
        for spec in self.models.values():
            for role, task in tasks.items():
                ref = getattr(spec.swap, role, None) if spec.swap else None
                if ref is not None and (ref not in self.models or self.models[ref].task != task):
                    raise ValueError(f"{spec.id}: its {role} {ref!r} is not a {task} model of this catalogue")
            if spec.task == "face_swapper" and spec.swap is None and spec.arch != "landmark_warp":
                raise ValueError(f"{spec.id}: a face swapper needs its [swap] table (where its identity comes from)")
            if spec.swap is not None and (spec.input_size is None or spec.template is None):
                raise ValueError(f"{spec.id}: a face swapper needs the input_size and template of its crop")
            if spec.swap is not None and any(s % (spec.input_size or 1) for s in spec.swap.pixel_boost):
                raise ValueError(f"{spec.id}: its pixel_boost sizes must be multiples of its input_size")
        return self

    @classmethod
    def load(cls, path: Path | None = None) -> Manifest:
        """Read and validate a manifest TOML file: `path`, else $FACESTUDIO_MANIFEST (a mirror's catalogue for
        air-gapped sites, or a test's), else the built-in one."""
        path = path or Path(os.environ.get("FACESTUDIO_MANIFEST") or MANIFEST_PATH)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"cannot read model manifest {path}: {exc}") from exc
        return _parsed(str(path), text)

    @classmethod
    def parse(cls, path: Path, text: str) -> Manifest:
        """The manifest in `text` (read from `path`, which messages name), validated."""
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidInput(f"cannot read model manifest {path}: {exc}") from exc
        shared = {"io": raw.pop("io", {}), "swap": raw.pop("swap", {})}

        def resolve(entry: dict[str, Any], key: str, where: str) -> dict[str, Any]:
            """`entry` with its `key` (the name of a shared [io.NAME] or [swap.NAME] table) replaced by that table."""
            name = entry.get(key)
            if not isinstance(name, str):
                return entry
            if name not in shared[key]:
                raise InvalidInput(f"model manifest {path}: {where} names unknown {key} spec {name!r}")
            return {**entry, key: shared[key][name]}

        models = {}
        for model_id, entry in raw.pop("models", {}).items():
            entry = resolve(resolve(dict(entry), "io", f"model {model_id}"), "swap", f"model {model_id}")
            if isinstance(entry.get("files"), list):
                entry["files"] = [
                    resolve(dict(f), "io", f"a file of {model_id}") if isinstance(f, dict) else f
                    for f in entry["files"]
                ]
            models[model_id] = {"id": model_id, **entry}
        try:
            return cls.model_validate({"models": models, "io": shared["io"], **raw})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the top level"
            raise InvalidInput(f"model manifest {path} is invalid at {where}: {first['msg']}") from exc

    def with_trusted(self, models_dir: Path) -> Manifest:
        """This catalogue with the sha256 recorded by `models fetch --trust-first` (in `models_dir`'s trusted.json)
        filled in for the files that have none published: from then on they are verified like any other file.

        A record counts only for the same file name and URL (a changed URL is another file)."""
        path = models_dir / TRUSTED_FILE
        if not path.is_file():
            return self
        try:
            records = {(str(r["filename"]), str(r["url"])): r for r in json.loads(path.read_text("utf-8"))["trusted"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"{path} is unreadable ({exc}); delete it and fetch again".splitlines()[0]) from None

        def trusted(file: FileSpec) -> FileSpec:
            record = records.get((file.filename, file.url or "")) if file.sha256 is None else None
            if record is None:
                return file
            update = {"sha256": str(record["sha256"]), "size": int(record["size"]), "first_download": True}
            return FileSpec.model_validate({**file.model_dump(), **update})

        return self.model_copy(
            update={
                "models": {
                    model_id: spec.model_copy(update={"files": tuple(trusted(f) for f in spec.files)})
                    for model_id, spec in self.models.items()
                }
            }
        )

    def chain(self, model_id: str) -> list[ModelSpec]:
        """The model and every model it needs, each once, in the order they are needed."""
        out: dict[str, ModelSpec] = {}
        todo = [model_id]
        while todo:
            spec = self.get(todo.pop(0))
            if spec.id not in out:
                out[spec.id] = spec
                todo += list(spec.needs)
        return list(out.values())

    def chain_licence(self, model_id: str) -> str:
        """What a model's whole chain allows, in words: its own licence is not enough when a part it needs is
        more restrictive (GHOST is Apache-2.0; its converter and the ArcFace recogniser it needs are not)."""
        chain = self.chain(model_id)
        if len(chain) == 1:
            return "commercial use allowed" if chain[0].commercial_use else "non-commercial use only"
        blocking = [m.id for m in chain if not m.commercial_use]
        if not blocking:
            return f"the chain ({', '.join(m.id for m in chain)}) allows commercial use"
        verb = "does" if len(blocking) == 1 else "do"
        return f"the chain is NON-COMMERCIAL: {', '.join(blocking)} {verb} not allow commercial use"

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
        return self.model_copy(update={"models": models})

    def get(self, model_id: str) -> ModelSpec:
        """The model `model_id`, or InvalidInput naming the known ids."""
        try:
            return self.models[model_id]
        except KeyError:
            raise InvalidInput(f"unknown model {model_id!r}; known models: {', '.join(sorted(self.models))}") from None

    def for_task(self, task: str) -> list[ModelSpec]:
        return [m for m in self.models.values() if m.task == task]

    def named_io(self, name: str) -> IOSpec:
        """The catalogue's `[io.NAME]` table, or InvalidInput naming the known ones."""
        try:
            return self.io[name]
        except KeyError:
            raise InvalidInput(
                f"the model catalogue has no [io.{name}] table; known: {', '.join(sorted(self.io))}"
            ) from None


def record_trusted(models_dir: Path, model_id: str, file: FileSpec, sha256: str, size: int) -> Path:
    """Record in `models_dir`'s trusted.json the sha256 and size a file without a published sha256 had when it
    was first downloaded (or placed) here; written whole to a temp file, then renamed. Returns the record's path."""
    path = models_dir / TRUSTED_FILE
    entries = json.loads(path.read_text(encoding="utf-8"))["trusted"] if path.is_file() else []
    entries = [e for e in entries if e.get("filename") != file.filename]
    entries.append({"model": model_id, "filename": file.filename, "url": file.url, "sha256": sha256, "size": size})
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(json.dumps({"trusted": entries}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


@lru_cache(maxsize=8)
def _parsed(path: str, text: str) -> Manifest:
    """A memo of parsed catalogues keyed by their whole text: every option validation reads the catalogue (which
    models exist), and parsing it costs ~40 ms; a Manifest is frozen and never changed in place, so sharing one is
    safe, and a changed file is a new key."""
    return Manifest.parse(Path(path), text)
