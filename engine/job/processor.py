"""The plugin contract every frame processor implements (ARCHITECTURE.md §3)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.core.options import with_implied
from engine.core.types import Face, Frame, Mask

if TYPE_CHECKING:
    from engine.models.runtime import Runtime


class ProcessorOptions(BaseModel):
    """Base of every processor's `Options`: strict (unknown keys are errors) and immutable.

    `backend` overrides the job's `runtime.backend` for this processor alone (None = the job's choice).
    Field descriptions, bounds and `engine.core.options.Shown` metadata (unit, when the option applies, catalogue
    choices) drive the UI's widgets, the CLI's settings help (`presets options`) and the preset schema alike.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["auto", "onnx", "torch"] | None = Field(
        default=None, description="this processor's backend, overriding the job's runtime.backend (empty: the job's)"
    )

    @model_validator(mode="after")
    def _implied_choices(self) -> Self:
        """A multi-choice's `Shown.implied` values are on whenever their condition holds (whatever was given)."""
        values = dict(self)
        for name, value in with_implied(type(self), values).items():
            if value != values[name]:
                # Frozen for everyone else: this completes the model while it is being validated.
                object.__setattr__(self, name, value)
        return self


OptionsT = TypeVar("OptionsT", bound=ProcessorOptions)


@dataclass(frozen=True)
class FrameContext:
    """What a processor knows about one frame besides its pixels.

    index: 0-based frame number in the target. faces: faces found on the *input* frame (empty when no processor
    of the chain needs faces). source: the job's source identity, computed once per job (None without sources).
    time: the frame's presentation time in seconds from the target's first frame (its exact input time, so the
    frames of a variable-rate video carry their real times; a resampled output's frame, the time of its slot;
    0.0 for an image); None where no time is known. original: the input frame as read from the target, before
    any processor of the chain (the one `faces` were found on; None where the caller does not give it).
    people: with `faces.selector = "map"`, each mapped person's own source identity by person number (a face's
    `person`); empty otherwise. `source_for(face)` is the identity a processor puts on a face.
    """

    index: int
    faces: tuple[Face, ...] = ()
    source: Any = None
    time: float | None = None
    original: Frame | None = None
    people: Mapping[int, Any] = field(default_factory=dict)

    def source_for(self, face: Face) -> Any:
        """The source identity to put on `face`: its person's own where the job maps people, else the job's."""
        if face.person is not None and face.person in self.people:
            return self.people[face.person]
        return self.source


class BoundJob(Protocol):
    """What a processor may read of its job (`engine.job.settings.Job` is one; a protocol so this module, which the job
    module builds on, does not import it back): the target, the output and the source images as given, the chain's
    processor ids and options, and the faces and output settings (`engine.job.settings.FacesSettings`,
    `VideoSettings`)."""

    target: Path
    output: Path
    sources: tuple[Path, ...]
    processors: tuple[str, ...]
    options: Mapping[str, ProcessorOptions]
    faces: Any
    video: Any


class FrameProcessor(ABC, Generic[OptionsT]):
    """A step of the chain: frames in, frames out, models loaded once in `__init__`.

    `process` takes a batch so a processor can batch model calls across frames; it never mutates its inputs and
    returns frames of `output_size(width, height)`.
    """

    id: ClassVar[str]
    title: ClassVar[str]
    Options: ClassVar[type[ProcessorOptions]]
    needs_faces: ClassVar[bool] = False
    needs_source: ClassVar[bool] = False
    # A processor that only draws on the frames (the face debugger): it may follow one that resizes them (it
    # scales the faces), and identity QA measures the frames before it.
    draws_only: ClassVar[bool] = False
    # Set by a processor that reads each frame's time in a video (an image target is refused before any work).
    needs_video: ClassVar[bool] = False
    # Set by a processor whose current options need 68-point landmarks (the buffalo_l analyser has only 5).
    needs_landmarks68: bool = False
    # Set by a processor that reads each face's person number and identity (`Face.person`, `Face.embedding`):
    # the face stage then groups tracks into people even when the selector does not need it.
    needs_people: bool = False
    # What a processor found worth telling the user about its run (a fallback it took); the run report lists them.
    notes: tuple[str, ...] = ()
    # Set by a processor whose current options make frames transparent (`alpha`): an image target may then be
    # written as a PNG whatever its own format, to hold the transparency.
    makes_alpha: bool = False

    def __init__(self, options: OptionsT, runtime: Runtime) -> None:
        self.options = options
        self.runtime = runtime

    def bind_job(self, job: BoundJob) -> None:
        """Called once per job before any frame (by `processors.build_chain`): a processor that reads the job's
        target itself (the lip syncer: its audio track) takes what it needs here. Default: nothing."""

    @classmethod
    def model_ids(cls, options: ProcessorOptions) -> list[str]:
        """Manifest ids of the models a processor with these options loads. A classmethod, so prefetch and
        `models fetch --preset` can ask before anything is loaded."""
        return []

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """Size (width, height) in pixels of the frames `process` returns for input frames of this size."""
        return width, height

    def describe(self) -> dict[str, Any]:
        """Provenance for the job sidecar: models, files and providers actually used."""
        return {}

    def computed_pixels(self, width: int, height: int) -> int:
        """Input pixels the model computes for one width×height frame (tiles with context count twice);
        the benchmark's `tile_waste` is this over width × height."""
        return width * height

    def frame_memory(self, width: int, height: int) -> int:
        """Bytes of working memory one width×height frame takes in a model call; `runtime.batch = "auto"` sizes
        batches from it. The default: float32 NCHW copies of the input and output frames, twice over for the
        model's own tensors."""
        out_w, out_h = self.output_size(width, height)
        return (width * height + out_w * out_h) * 3 * 4 * 2

    def alpha(self, index: int) -> Mask | None:
        """The transparency this processor gave output frame `index` of its latest batch (H×W float32 in [0, 1],
        1 = opaque; the frame's size when it was made), where the job's output can hold it; None: none (every
        processor but a background remover). The pipeline writes it as the output's alpha channel."""
        return None

    @abstractmethod
    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        """Process a batch of frames (H×W×3 uint8 RGB) with their contexts; returns new frames in the same order."""
