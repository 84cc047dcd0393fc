"""The front ends' engine API (engine/serve/service.py): single frames by the run's path, what is cached between
previews and what is not, the live mode's tracking, and the model list."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import media as video
from engine.core.errors import InvalidInput
from engine.media import demo
from engine.serve.service import Service
from processors import REGISTRY


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo.make_clip(tmp_path_factory.mktemp("service") / "clip.mp4", 160, 120, 12)


def test_frames_are_decoded_by_index_clamped_and_refused_over_max_pixels(clip: Path) -> None:
    service = Service(REGISTRY)
    with video.FrameReader(clip) as reader:
        frames = list(reader)
    assert np.array_equal(service.frame(clip, 5, 1 << 30), frames[5])
    assert np.array_equal(service.frame(clip, 99, 1 << 30), frames[-1])  # past the end: the last frame
    # Refused whether or not the frame was decoded before (a cached frame is not a way around the cap).
    for _ in range(2):
        with pytest.raises(InvalidInput, match=r"^clip.mp4 is 160×120 = 19200 pixels, above runtime.max_pixels=100:"):
            service.frame(clip, 5, 100)


def test_a_preview_keeps_the_faces_of_a_frame_but_rebuilds_the_chain(clip: Path) -> None:
    service = Service(REGISTRY)
    sources = [demo.source_photo()]
    first = service.preview({"processors": ["face_swapper"]}, clip, sources, 3)
    again = service.preview({"processors": ["face_swapper"], "face_swapper": {"blend": 0}}, clip, sources, 3)
    assert len(first.chosen) == 1 and again.faces_ms < first.faces_ms
    assert again.chosen == first.chosen
    # blend 0 puts the original face back: the chain was rebuilt with the new option, on the same faces.
    assert np.array_equal(again.after, again.before) and not np.array_equal(first.after, first.before)
    # Another frame is analysed anew.
    other = service.preview({"processors": ["face_swapper"]}, clip, sources, 8)
    assert other.faces_ms > 0 and other.chosen[0].box != first.chosen[0].box


def test_a_live_stream_tracks_faces_instead_of_detecting_each_frame(clip: Path) -> None:
    service = Service(REGISTRY)
    raw = {"processors": ["face_swapper"], "faces": {"redetect_every": 5}}
    renderer = service.renderer(raw, clip, [demo.source_photo()])
    renderer.faces.stage.restart()
    with video.FrameReader(clip) as reader:
        rendered = [renderer.render(frame, i, track=True) for i, frame in enumerate(reader)]
    stats = renderer.faces.stage.tracker.stats
    # Detections on frames 0, 5 and 10 (and where a re-fit lost the face), re-fits in between.
    assert stats.frames == 12 and stats.detections <= 4 and stats.refits >= 8
    assert all(len(r.chosen) == 1 for r in rendered)


def test_models_say_what_is_here_and_what_can_be_downloaded() -> None:
    statuses = {m.id: m for m in Service(REGISTRY).catalogue.statuses()}
    embedded = statuses["realesr_animevideov3"]
    assert (embedded.availability, embedded.downloadable, embedded.size) == ("embedded", True, 2504012)
    dlib = statuses["dlib_resnet_v1"]
    assert (dlib.availability, dlib.downloadable) == ("embedded", False)  # nothing published to fetch
    assert statuses["inswapper_128"].commercial_use is False


def test_a_preview_frame_carries_its_time_and_original_and_the_chain_is_bound_to_the_job(clip: Path) -> None:
    from typing import ClassVar

    from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
    from processors import build_registry

    seen: list[tuple[float | None, bool, str]] = []

    class Recorder(FrameProcessor[ProcessorOptions]):
        id: ClassVar[str] = "recorder"
        title: ClassVar[str] = "Recorder"
        Options: ClassVar[type[ProcessorOptions]] = ProcessorOptions

        def bind_job(self, job: object) -> None:
            self.target = job.target.name  # type: ignore[attr-defined]

        def process(self, frames: list, ctxs: list[FrameContext]) -> list:
            for frame, ctx in zip(frames, ctxs, strict=True):
                seen.append((ctx.time, ctx.original is frame, self.target))
            return list(frames)

    service = Service(build_registry([*REGISTRY.values(), Recorder]))
    service.preview({"processors": ["recorder"]}, clip, [], 6)
    info = video.probe(clip)
    assert seen == [(float(info.timestamps[6] * info.time_base), True, "clip.mp4")]
