"""Jobs and presets: one validated, immutable description of a run, built the same way by the CLI, the UI,
preset files and job sidecars (ARCHITECTURE.md §5).

Raw form (TOML presets, `--set` overrides and sidecars all use it)::

    processors = ["frame_enhancer"]
    [frame_enhancer]          # one table per processor id, validated by that processor's Options
    model = "realesr_animevideov3"
    [video]                   # VideoSettings
    [runtime]                 # RuntimeSettings

A job adds `target`, `output` and `sources`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from engine.core.errors import InvalidJob
from engine.core.home import home
from engine.core.options import Shown, ignored
from engine.faces.select import Order, Selector
from engine.job.processor import FrameProcessor, ProcessorOptions
from engine.media.commands import ENCODER_CHOICES, X264_PRESETS

Registry = Mapping[str, type[FrameProcessor]]

PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VideoSettings(_Settings):
    """How video output is encoded, which part of the target it covers and at what rate. Images ignore these.

    encoder: `auto` is resolved once per job, before any work (`engine.media.choose_encoder`): the job that runs,
        and its sidecar, name the encoder that was used.
    crf: constant rate factor (x264: 0 = lossless, 18 ≈ visually lossless); NVENC's constant quality from it.
    fps: output frames per second (None = the target's rate, every frame kept).
    trim_start, trim_end: seconds from the target's first frame; the end is exclusive (None = to the end). The
        audio is cut to the same span.
    segment_frames: output frames per segment: each is encoded to its own file and verified, so an interrupted job
        resumes from its last finished segment (`run --resume`); the output joins them without re-encoding.
    """

    encoder: Literal[ENCODER_CHOICES] = Field(  # type: ignore[valid-type]
        default="auto",
        description="auto: NVENC H.264 where it works here (doctor's test frame), else libx264, with a note; "
        "libx264: H.264, plays everywhere; libx265: HEVC, smaller at the same quality (tagged hvc1); "
        "h264_nvenc, hevc_nvenc, av1_nvenc: NVIDIA's GPU encoders (AV1: MP4 or MKV, Ada or newer)",
    )
    crf: Annotated[int, Shown(unit="CRF")] = Field(
        default=18, ge=0, le=51,
        description="quality: lower is better and bigger (same scale for all; NVENC: its constant quality, AV1 ×63/51)",
    )  # fmt: skip
    # veryfast, as FaceFusion's default: medium costs a 2-core machine twice the encoder time (at 720p about 60 ms
    # of CPU per frame against 30, a third of a face swap job's CPU) for files a few percent smaller at the same crf.
    preset: Annotated[Literal[X264_PRESETS], Shown(label="encoder preset")] = Field(  # type: ignore[valid-type]
        default="veryfast",
        description="encoder speed: slower presets make smaller files at the same quality (NVENC: p1 … p7)",
    )
    keep_audio: bool = Field(
        default=True, description="keep the target's audio tracks (copied where the container holds them)"
    )
    # Images too: the tags, text chunks, EXIF and ICC profile of an image target.
    keep_metadata: bool = Field(
        default=True,
        description="keep the target's tags (title, dates, location, camera EXIF, ICC profile), chapters and "
        "subtitles; off: only the synthetic-media tags",
    )
    alpha: Literal["keep", "drop"] = Field(
        default="keep",
        description="a target with transparency: keep it (ProRes 4444 in .mov, VP9 in .webm/.mkv, a GIF's "
        "transparent colour; MP4 is refused) or drop it (opaque frames)",
    )
    fps: Annotated[float | None, Shown(unit="fps")] = Field(
        default=None,
        ge=1.0,
        le=240.0,
        allow_inf_nan=False,
        description="output frames per second, 1–240 (empty = the target's rate); audio stays in sync",
    )
    trim_start: Annotated[float, Shown(unit="s")] = Field(
        default=0.0, ge=0.0, allow_inf_nan=False, description="seconds into the target where the output starts"
    )
    trim_end: Annotated[float | None, Shown(unit="s")] = Field(
        default=None,
        gt=0.0,
        allow_inf_nan=False,
        description="seconds into the target where the output stops, exclusive (empty = the end)",
    )

    segment_frames: Annotated[int, Shown(unit="frames", advanced=True, server=True)] = Field(
        default=600,
        ge=1,
        description="frames per segment: an interrupted job resumes from its last finished segment (--resume)",
    )
    # Images too: the watermark goes into every output frame (engine/provenance/watermark.py).
    watermark: bool = Field(
        default=False,
        description="invisible watermark in every frame (images too): survives re-encoding and resizing; "
        "`verify` finds it; about 39 dB PSNR",
    )

    @field_validator("trim_end")
    @classmethod
    def _end_after_start(cls, value: float | None, info: ValidationInfo) -> float | None:
        start = info.data.get("trim_start")  # absent when trim_start itself failed validation
        if value is not None and start is not None and value <= start:
            raise ValueError(f"trim_end must be after trim_start ({start:g} s)")
        return value


class RuntimeSettings(_Settings):
    """Where and how models run. `batch`: frames per processor call, "auto" = picked from the memory free where
    the models run (see `engine.backends.memory.auto_batch`); `threads` 0 = one per core; `max_pixels`: the largest
    frame (width × height, pixels) accepted as a target or produced as an output."""

    backend: Literal["auto", "onnx", "torch"] = Field(
        default="auto", description="auto: ONNX Runtime where the model has an ONNX file, else PyTorch"
    )
    device: Annotated[str, Shown(suggest=("auto", "cpu", "cuda", "cuda:0", "cuda:1"), server=True)] = Field(
        default="auto",
        pattern=r"^(auto|cpu|cuda|cuda:\d+)$",
        description="auto (a GPU when there is one), cpu, cuda, cuda:N",
    )
    tensorrt: Annotated[bool, Shown(unless={"device": ("cpu",), "backend": ("torch",)}, server=True)] = Field(
        default=False, description="ONNX Runtime on CUDA: use TensorRT (engine cached)"
    )
    precision: Literal["auto", "fp32", "fp16", "int8"] = Field(
        default="auto",
        description="auto: fp16 on a GPU; on the CPU each model's int8 graph where `models quantize ID` made one that "
        "passed its gate for this CPU, else fp32; fp16: half precision on a GPU (the CPU computes in fp32); fp32: "
        "full precision everywhere; int8: on the CPU, the quantised graphs `models quantize ID` makes (fp16 on a GPU)",
    )
    batch: Annotated[Annotated[int, Field(ge=1, le=256)] | Literal["auto"], Shown(suggest=("auto", 1, 2, 4, 8, 16))] = (
        Field(default="auto", description="frames per model call: auto (from free memory) or a number")
    )
    threads: Annotated[int, Shown(advanced=True, server=True)] = Field(
        default=0, ge=0, le=1024, description="CPU threads per model (0 = one per core)"
    )
    compile: Annotated[bool, Shown(unless={"backend": ("onnx",)}, advanced=True, server=True)] = Field(
        default=False, description="PyTorch: torch.compile the models (slow first call per size)"
    )
    offline: Annotated[bool, Shown(server=True)] = Field(
        default=False, description="never download; fail naming the missing files"
    )
    # 8192×8192: beyond every camera and 8K video, and below Pillow's decompression-bomb refusal (179 MP). A frame
    # this size is already ~200 MB as RGB, times the batch, times each model's working copies.
    max_pixels: Annotated[int, Shown(unit="pixels", advanced=True, server=True)] = Field(
        default=8192 * 8192,
        ge=1,
        description="largest target or output frame, width × height in pixels; bigger jobs are refused up front",
    )
    # engine/provenance/content.py: the classifier, the sampling and what each mode does.
    content_check: Annotated[Literal["off", "warn", "refuse"], Shown(server=True)] = Field(
        default="off",
        description="check sampled target frames for explicit content (open_nsfw): warn notes them, refuse stops",
    )
    content_threshold: Annotated[
        float, Shown(when={"content_check": ("warn", "refuse")}, advanced=True, server=True)
    ] = Field(default=0.8, gt=0.0, le=1.0, description="score (0–1) at which the content check flags a frame")

    # Presets and sidecars written before `precision` say `fp16 = true|false`: read as precision fp16 / fp32.
    LEGACY: ClassVar[Mapping[str, str]] = MappingProxyType({"fp16": "precision"})

    @model_validator(mode="before")
    @classmethod
    def _legacy_fp16(cls, values: Any) -> Any:
        if not isinstance(values, Mapping) or "fp16" not in values:
            return values
        out = {k: v for k, v in values.items() if k != "fp16"}
        if not isinstance(values["fp16"], bool):
            raise ValueError(f"fp16 (older name of precision) takes true or false, got {values['fp16']!r}")
        out.setdefault("precision", "fp16" if values["fp16"] else "fp32")
        return out

    @property
    def fp16(self) -> bool:
        """Whether half precision is asked for where it runs (a GPU)."""
        return self.precision in ("fp16", "auto")


class PersonSources(_Settings):
    """One person of the target (a number `faces scan` lists) and the source images put on them: positions in
    the job's `sources` (several images of one person are averaged into one identity). `thumbnail`: the hash of
    the person's picture in the scan the mapping was made from; when given, a run whose scan gives that number to
    another face is refused instead of swapping the wrong person. No path: a preset or sidecar names people by
    number and picture, the job's sources say where the images are."""

    person: int = Field(ge=0, description="the person's number (`launch.py faces scan`)")
    sources: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        min_length=1, description="which of the job's sources are this person's (0-based positions)"
    )
    thumbnail: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{16}$", description="the scan's picture hash of the person, checked"
    )


class FacesSettings(_Settings):
    """Which faces every face processor works on, and how they are found (one group for the whole chain).

    reference_distance: faces closer than this to the reference are selected, in the analyser's own metric
    (None = the analyser's same-person threshold: dlib 0.6 euclidean, ArcFace 0.6 cosine distance).
    people: with selector "map", the mapped people and their sources; everyone else is left as they are.
    scan_every: seconds between the frames sampled to find a video's people (`faces scan`, the map selector).
    """

    analyser: Literal["embedded", "buffalo_l"] = Field(
        default="embedded", description="embedded: dlib, offline; buffalo_l: InsightFace (download, non-commercial)"
    )
    detector: Annotated[Literal["hog", "cnn"], Shown(when={"analyser": ("embedded",)})] = Field(
        default="hog", description="embedded analyser: HOG (fast) or CNN (slow)"
    )
    selector: Selector = Field(
        default="one",
        description="one face (by order), every face, faces like the reference, or map: a source per person",
    )
    order: Annotated[Order, Shown(when={"selector": ("one",)})] = Field(
        default="largest", description="which face `one` takes first"
    )
    reference_image: Annotated[Path | None, Shown(when={"selector": ("reference",)}, file="image")] = Field(
        default=None, description="image of the person to replace"
    )
    reference_frame: Annotated[int, Shown(when={"selector": ("reference",)})] = Field(
        default=0, ge=0, description="else: the target frame the reference face is taken from"
    )
    reference_distance: Annotated[float | None, Shown(when={"selector": ("reference",)})] = Field(
        default=None, gt=0.0, description="same-person threshold (empty: the analyser's)"
    )
    source_face: Annotated[int, Shown(advanced=True)] = Field(
        default=0,
        ge=0,
        description="which face of a source photo with several: 0 the largest, N the Nth from the left "
        "(`run --source-face N`)",
    )
    min_face: Annotated[float | None, Shown(unit="px", when={"analyser": ("embedded",)}, advanced=True)] = Field(
        default=None,
        ge=10.0,
        le=400.0,
        allow_inf_nan=False,
        description="smallest face the embedded analyser finds, box side in pixels (empty: 40 for HOG, 80 for "
        "CNN); smaller finds smaller faces, slower (each halving about 4×)",
    )
    people: Annotated[tuple[PersonSources, ...], Shown(when={"selector": ("map",)})] = Field(
        default=(),
        description="map: person number → positions of their images in the sources (`run --map N=IMAGE`)",
    )
    # One sample a second costs under a tenth of a render at common frame rates; someone on screen for less may
    # be missed by the scan (a run still numbers them, after the scanned people).
    scan_every: Annotated[float, Shown(unit="s", advanced=True)] = Field(
        default=1.0,
        gt=0.0,
        le=60.0,
        allow_inf_nan=False,
        description="people: seconds between the frames sampled to find who is in a video",
    )
    redetect_every: Annotated[int, Shown(unit="frames", advanced=True)] = Field(
        default=10, ge=1, le=1000, description="frames between full detections"
    )
    qa_every: Annotated[int, Shown(unit="frames", advanced=True)] = Field(
        default=5,
        ge=0,
        description="identity QA on every Nth processed frame, and on every frame of a stretch it flags (0 = off)",
    )

    @field_validator("people")
    @classmethod
    def _each_person_once(cls, value: tuple[PersonSources, ...]) -> tuple[PersonSources, ...]:
        numbers = [p.person for p in value]
        twice = sorted({n for n in numbers if numbers.count(n) > 1})
        if twice:
            raise ValueError(f"person {twice[0]} is mapped twice; give all of a person's images in one entry")
        return value


SETTINGS_GROUPS: Mapping[str, type[_Settings]] = MappingProxyType(
    {"faces": FacesSettings, "video": VideoSettings, "runtime": RuntimeSettings}
)


class Preset(BaseModel):
    """A named, reusable set of choices: the processor chain and every option, without target or output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    processors: tuple[str, ...] = Field(min_length=1)
    options: dict[str, ProcessorOptions] = Field(default_factory=dict)
    faces: FacesSettings = FacesSettings()
    video: VideoSettings = VideoSettings()
    runtime: RuntimeSettings = RuntimeSettings()

    @classmethod
    def parse(cls, raw: Mapping[str, Any], registry: Registry) -> Preset:
        """Validate a raw preset mapping against `registry`; raises InvalidJob with a one-line reason."""
        return cls(**_parse_common(raw, registry, allowed=set()))

    def ignored_settings(self) -> list[str]:
        """Settings given explicitly that do not apply to the rest of the chain's choices (e.g.
        `face_swapper.poisson` with InSwapper), each with its condition; only for processors in the chain."""
        out = [line for pid in self.processors if pid in self.options for line in ignored(self.options[pid], pid)]
        return out + [line for name in SETTINGS_GROUPS for line in ignored(getattr(self, name), name)]

    def to_raw(self) -> dict[str, Any]:
        """The raw mapping (TOML/JSON-ready) that `parse` turns back into an equal object."""
        raw: dict[str, Any] = {"processors": list(self.processors)}
        for pid, opts in self.options.items():
            raw[pid] = opts.model_dump(mode="json", exclude_none=True)
        raw["faces"] = self.faces.model_dump(mode="json")
        raw["video"] = self.video.model_dump(mode="json")
        raw["runtime"] = self.runtime.model_dump(mode="json")
        return raw


class Job(Preset):
    """A preset applied to one target: what `pipeline.run` executes. Paths are as the user gave them."""

    target: Path
    output: Path
    sources: tuple[Path, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any], registry: Registry) -> Job:
        fields = _parse_common(raw, registry, allowed={"target", "output", "sources"})
        for key in ("target", "output"):
            if not raw.get(key):
                raise InvalidJob(f"a job needs {key} (--{key} PATH)")
            if not isinstance(raw[key], str | Path):
                raise InvalidJob(f"{key} must be a path, got {raw[key]!r}")
        sources = raw.get("sources", [])
        if not isinstance(sources, list | tuple) or not all(isinstance(p, str | Path) for p in sources):
            raise InvalidJob(f"sources must be a list of paths, got {sources!r}")
        fields["target"] = Path(raw["target"])
        fields["output"] = Path(raw["output"])
        fields["sources"] = tuple(Path(p) for p in sources)
        return cls(**fields)

    def to_raw(self) -> dict[str, Any]:
        raw = super().to_raw()
        raw.update(target=str(self.target), output=str(self.output), sources=[str(p) for p in self.sources])
        return raw


def _parse_common(raw: Mapping[str, Any], registry: Registry, allowed: set[str]) -> dict[str, Any]:
    known = {"processors", *SETTINGS_GROUPS, *registry, *allowed}
    for key in raw:
        if key not in known:
            raise InvalidJob(f"unknown setting {key!r}; valid: {', '.join(sorted(known))}")
    processors = raw.get("processors")
    if isinstance(processors, str):
        processors = [processors]
    if processors is not None and (
        not isinstance(processors, list | tuple) or not all(isinstance(p, str) for p in processors)
    ):
        raise InvalidJob(f"processors must be a list of processor ids, got {processors!r}")
    if not processors:
        raise InvalidJob(f"no processors chosen; choose from: {', '.join(registry)}")
    for pid in processors:
        if pid not in registry:
            raise InvalidJob(f"unknown processor {pid!r}; available: {', '.join(registry)}")
    if len(set(processors)) != len(processors):
        raise InvalidJob(f"a processor is listed twice in {list(processors)}")
    options: dict[str, ProcessorOptions] = {}
    # Tables of processors outside the chain are kept: a preset may configure a processor that is toggled off.
    for pid in [*processors, *(p for p in registry if p in raw and p not in processors)]:
        options[pid] = _validate(registry[pid].Options, raw.get(pid, {}), pid)
    groups = {name: _validate(model, raw.get(name, {}), name) for name, model in SETTINGS_GROUPS.items()}
    return {"processors": tuple(processors), "options": options, **groups}


def _validate(model: type[BaseModel], values: Any, prefix: str) -> Any:
    if not isinstance(values, Mapping):
        raise InvalidJob(f"{prefix} must be a table of settings, got {values!r}")
    for key in values:
        if key not in model.model_fields and key not in _legacy(model):
            raise InvalidJob(f"unknown setting {prefix}.{key}; valid: {', '.join(model.model_fields)}")
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join([prefix, *(str(p) for p in err["loc"])])
        raise InvalidJob(f"{where}: {err['msg']} (got {err.get('input')!r})") from None


def _legacy(model: type[BaseModel]) -> Mapping[str, str]:
    """Older names a settings model still reads (old name → the field that replaced it)."""
    legacy: Mapping[str, str] = getattr(model, "LEGACY", {})
    return legacy


def parse_value(text: str) -> Any:
    """A `--set` value: TOML syntax when it parses (2, 0.5, true, "x", [1, 2]), else the plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(raw: Mapping[str, Any], sets: Sequence[str], registry: Registry) -> dict[str, Any]:
    """Apply dotted `group.field=value` overrides (`frame_enhancer.scale=2`, `runtime.batch=8`) to a raw mapping.

    Unknown groups or fields are InvalidJob errors naming the valid ones; values are validated later by `parse`.
    """
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    groups: dict[str, type[BaseModel]] = {**{p: cls.Options for p, cls in registry.items()}, **SETTINGS_GROUPS}
    for item in sets:
        key, sep, value = item.partition("=")
        group, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise InvalidJob(f"--set takes GROUP.FIELD=VALUE (e.g. frame_enhancer.scale=2), got {item!r}")
        if group not in groups:
            raise InvalidJob(f"unknown settings group {group!r} in --set {item}; valid: {', '.join(groups)}")
        if name not in groups[group].model_fields and name not in _legacy(groups[group]):
            raise InvalidJob(f"unknown setting {group}.{name}; valid: {', '.join(groups[group].model_fields)}")
        out.setdefault(group, {})[name] = parse_value(value.strip())
    return out


PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
PRESET_NAME_RULE = "1–64 letters, digits, - or _, starting with a letter or digit"


def user_presets_dir() -> Path:
    """Where the user's own presets live: `$FACESTUDIO_HOME/presets` (default ~/.config/facestudio/presets)."""
    return home() / "presets"


def _names_in(folder: Path | None) -> list[str]:
    return (
        sorted(p.stem for p in folder.glob("*.toml") if PRESET_NAME.match(p.stem)) if folder and folder.is_dir() else []
    )


def preset_names(own: Path | None = None) -> list[str]:
    """The built-in presets' names, then the user's own (`user_presets_dir`), then those in `own` (a front end's
    folder for one of its users: the studio keeps one per login or browser); none shadows an earlier one."""
    names = sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))
    for folder in (user_presets_dir(), own):
        names += [n for n in _names_in(folder) if n not in names]
    return names


def save_user_preset(name: str, preset: Preset, folder: Path | None = None) -> tuple[Path, bool]:
    """Write `preset` as preset `name` in `folder` (default `user_presets_dir`; `presets check` accepts the file).
    Returns (its path, whether it replaced a preset of that folder). InvalidJob when the name breaks
    PRESET_NAME_RULE, is built-in, or (saving into another folder) is one of `user_presets_dir`'s, which that
    folder's user may read but not replace."""
    import tomli_w

    name = (name or "").strip()
    if not PRESET_NAME.match(name):
        raise InvalidJob(f"preset name {name!r} is not allowed: use {PRESET_NAME_RULE}")
    if (PRESETS_DIR / f"{name}.toml").is_file():
        raise InvalidJob(f"{name!r} is a built-in preset; choose another name")
    shared = user_presets_dir()
    folder = folder or shared
    if folder != shared and (shared / f"{name}.toml").is_file():
        raise InvalidJob(f"{name!r} is a shared preset of this server; choose another name")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    replaced = path.is_file()
    tmp = folder / f".{name}.toml.partial"
    tmp.write_text(tomli_w.dumps(_without_none(preset.to_raw())), encoding="utf-8")
    tmp.replace(path)
    return path, replaced


def _without_none(raw: Any) -> Any:
    """`raw` without None values (TOML has no null; a missing key means the default)."""
    if isinstance(raw, dict):
        return {k: _without_none(v) for k, v in raw.items() if v is not None}
    if isinstance(raw, list | tuple):
        return [_without_none(v) for v in raw]
    return raw


def load_preset_raw(name_or_path: str | Path, own: Path | None = None) -> dict[str, Any]:
    """Read a preset by name (built-in `presets/NAME.toml`, else the user's own, else `own`'s: see
    `preset_names`) or path; InvalidJob naming the presets when not found."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        folders = [PRESETS_DIR, user_presets_dir(), *([own] if own else [])]
        named = PRESET_NAME.match(str(name_or_path))
        candidates = [f / f"{name_or_path}.toml" for f in folders[: len(folders) if named else 1]]
        path = next((c for c in candidates if c.is_file()), candidates[0])
    if not path.is_file():
        raise InvalidJob(f"preset {str(name_or_path)!r} not found; presets: {', '.join(preset_names(own))}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidJob(f"preset {path} is not valid TOML: {exc}") from None


def preset_schema(registry: Registry) -> dict[str, Any]:
    """JSON Schema of a preset file: the chain, one table per registered processor, video and runtime."""
    props: dict[str, Any] = {
        "processors": {"type": "array", "items": {"enum": list(registry)}, "minItems": 1, "uniqueItems": True}
    }
    for pid, cls in registry.items():
        props[pid] = {**cls.Options.model_json_schema(), "title": cls.title}
    for name, model in SETTINGS_GROUPS.items():
        props[name] = model.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "facestudio preset",
        "type": "object",
        "properties": props,
        "required": ["processors"],
        "additionalProperties": False,
    }
