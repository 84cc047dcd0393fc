"""The processor registry: explicit, ordered, duplicate ids rejected; entry-point plugins appended.

A new processor is one file in this folder plus one line in `_BUILTIN`. Third-party processors register an entry
point in the group `facestudio.processors` pointing at their FrameProcessor subclass.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from types import MappingProxyType

from engine.job.processor import FrameProcessor
from engine.job.settings import Job
from engine.models.runtime import Runtime
from processors.age_modifier import AgeModifier
from processors.background_remover import BackgroundRemover
from processors.deep_swapper import DeepSwapper
from processors.expression_restorer import ExpressionRestorer
from processors.face_debugger import FaceDebugger
from processors.face_editor import FaceEditor
from processors.face_enhancer import FaceEnhancer
from processors.face_swapper import FaceSwapper
from processors.frame_colourizer import FrameColourizer
from processors.frame_enhancer import FrameEnhancer
from processors.lip_syncer import LipSyncer

log = logging.getLogger(__name__)

_BUILTIN: tuple[type[FrameProcessor], ...] = (
    FaceSwapper,
    DeepSwapper,
    AgeModifier,
    FaceEditor,
    ExpressionRestorer,
    LipSyncer,
    FaceEnhancer,
    FrameColourizer,
    BackgroundRemover,
    FrameEnhancer,
    FaceDebugger,
)


def build_registry(classes: Iterable[type[FrameProcessor]]) -> Mapping[str, type[FrameProcessor]]:
    """An immutable id → class mapping in the given order; a duplicate id is a ValueError naming it."""
    registry: dict[str, type[FrameProcessor]] = {}
    for cls in classes:
        if cls.id in registry:
            raise ValueError(f"two frame processors share the id {cls.id!r}: {registry[cls.id]} and {cls}")
        registry[cls.id] = cls
    return MappingProxyType(registry)


def _plugins() -> list[type[FrameProcessor]]:
    found = []
    for ep in entry_points(group="facestudio.processors"):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, FrameProcessor)):
            raise ValueError(f"entry point {ep.name} ({ep.value}) is not a FrameProcessor subclass")
        found.append(cls)
    return found


REGISTRY: Mapping[str, type[FrameProcessor]] = build_registry([*_BUILTIN, *_plugins()])


def build_chain(job: Job, runtime: Runtime) -> list[FrameProcessor]:
    """Instantiate the job's processors in order; each loads its models now (once per job) and is bound to the job."""
    chain = [REGISTRY[pid](job.options[pid], runtime) for pid in job.processors]
    for processor in chain:
        processor.bind_job(job)
    return chain
