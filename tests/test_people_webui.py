"""The studio's people panel through the page's own handlers: find the people of a two-person target, give one of
them a source, and the preview changes that person's face alone; the run's mapping names people by number and
picture hash, never by an upload's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from engine import media as video
from engine.core.errors import InvalidInput
from engine.job.settings import Preset
from engine.media import demo
from processors.face_debugger import PALETTE
from webui.app import Studio
from webui.cells import Values
from webui.page import Page
from webui.privacy import COOKIE
from webui.studio import write_jpeg


class _Request:
    def __init__(self, cookie: str) -> None:
        self.cookies = {COOKIE: cookie}
        self.username = None


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The astronaut (left) and Grace Hopper (right) side by side, 1024×512, and where each face is."""
    folder = tmp_path_factory.mktemp("people-ui")
    hopper = video.read_image(demo.source_photo())[0]
    hopper = cv2.resize(hopper, (hopper.shape[1] * 512 // hopper.shape[0], 512), interpolation=cv2.INTER_AREA)
    image = np.ascontiguousarray(np.concatenate([demo.photo(), hopper[:, :512]], axis=1))
    video.write_image(folder / "pair.png", image)
    astronaut = folder / "astronaut.png"
    video.write_image(astronaut, demo.photo())
    return {"target": folder / "pair.png", "image": image, "astronaut": astronaut}


def test_people_gallery_a_source_for_one_and_the_preview_changes_that_face_alone(
    pair: dict[str, Any], tmp_path: Path
) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    page = Page(studio)
    page.build()
    request = _Request("d" * 64)
    for upload in (pair["target"], pair["astronaut"]):  # the session's own files, as if it had uploaded them
        studio.guard.allow(page.session(request).owner, upload)
    preset = Preset.parse({"processors": ["face_swapper"], "faces": {"selector": "map"}}, studio.registry)
    values = page.settings.values_from(preset)
    heard = Values(values)  # what the page's session state holds for these widgets
    target = str(pair["target"])

    version, status = page.people.on_find(target, 0, heard, request)
    assert version == 1 and status.startswith("**People** — P0 and P1 in pair.png")
    session = page.people._session(request)
    state = session.people
    assert [p.number for p in state.scan.people] == [0, 1]
    # Each person's picture is a file this session (and no other) may fetch, showing their face.
    other = page.people._session(_Request("e" * 64))
    for picture in state.pictures:
        assert studio.guard.allows(session.owner, Path(picture).resolve())
        assert not studio.guard.allows(other.owner, Path(picture).resolve())
        shown = video.read_image(Path(picture))[0]
        assert shown.shape == (192, 192, 3) and len(studio.service.find_faces(shown, preset.faces)) == 1
    left, right = state.scan.people
    assert left.box[2] < 512 <= right.box[0]  # person 0 the astronaut on the left, person 1 Hopper

    # Before anyone has photos, a map preview says what to do.
    _, _, _, _, message = page.preview.on_preview(target, [], 0, [], False, "frame", "", heard, request)[:5]
    assert "give at least one person source photos" in message

    selector, summary = page.people._given(1)([str(pair["astronaut"])], request)
    assert selector == "map" and summary.startswith("**People** — P1 ← astronaut.png")
    compare, _, gallery, _, message = page.preview.on_preview(target, [], 0, [], False, "frame", "", heard, request)[:5]
    assert "2 faces found, 1 changed" in message, message
    # The faces on the preview and under it are labelled with their people's numbers, as in the panel.
    assert sorted(caption for _, caption in gallery) == ["P0", "P1"]
    raw, sources = page.people.apply(session, page.settings.raw_from(values), target, [])
    rendered = studio.preview(session, raw, target, sources, 0).rendered
    shown = rendered.detected
    assert sorted((f.box[0] >= 512, f.person) for f in shown) == [(False, 0), (True, 1)]
    # The mapped face was embedded once, by the face stage: its label reuses that embedding.
    (mapped,) = rendered.chosen
    assert next(f for f in shown if f.box == mapped.box).embedding is mapped.embedding
    before, after = (video.read_image(Path(p))[0] for p in compare["value"])
    image = pair["image"]
    # The preview is a JPEG: the target through the same encoder is what an untouched half looks like (its
    # 16 px blocks depend on their own pixels alone, and the halves meet on a block edge).
    unchanged = video.read_image(write_jpeg(tmp_path / "target.jpg", image))[0]
    assert np.array_equal(after[:, :512], unchanged[:, :512])  # the astronaut: untouched
    x1, y1, x2, y2 = (round(v) for v in right.box)
    assert np.abs(after[y1:y2, x1:x2].astype(int) - image[y1:y2, x1:x2]).mean() > 5  # Hopper: swapped

    # The preview's debugger toggle draws on the preview alone: Hopper's box in person 1's colour.
    compare, _, _, _, message = page.preview.on_preview(target, [], 0, [], True, "frame", "", heard, request)[:5]
    drawn = video.read_image(Path(compare["value"][1]))[0]
    edge = drawn[y1 + 5 : y2 - 5, x1 + 1]
    assert (np.abs(edge.astype(int) - PALETTE[1]).max(axis=1) <= 40).mean() > 0.9
    assert "face_debugger" not in page.settings.raw_from(values)["processors"]

    # What a run gets: the mapped person's photos, named in the job by number and picture hash.
    raw, sources = page.people.apply(session, page.settings.raw_from(values), target, [])
    assert sources == [str(pair["astronaut"])]
    assert raw["faces"]["people"] == [{"person": 1, "sources": [0], "thumbnail": right.thumbnail_hash}]
    # Another target: the mapping no longer applies.
    with pytest.raises(InvalidInput, match="find the people of this target"):
        page.people.apply(session, page.settings.raw_from(values), str(pair["astronaut"]), [])
    # Cleared: back to nobody mapped.
    _, summary = page.people._given(1)(None, request)
    assert "no one has source photos yet" in summary
