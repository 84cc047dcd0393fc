"""The people panel in a real headless Chromium (as tests/test_webui_browser.py drives the studio): a two-person
target, "Find the people" shows both, a source photo for one of them switches the selector to `map`, and the
preview changes that face alone. The screenshot is kept in $FACESTUDIO_TEST_ARTIFACTS/people.png."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from PIL import Image
from test_webui_browser import ARTIFACTS, CHROMIUM, chromium, open_page, serving

from engine import media as video
from engine.media import demo
from webui.studio import write_jpeg

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary (apt-get install chromium)")


def two_people(folder: Path) -> dict[str, Path]:
    """pair.png: the astronaut (left, person 0) beside Hopper (right, person 1), 948×512; astronaut.png alone."""
    hopper = video.read_image(demo.source_photo())[0]
    hopper = cv2.resize(hopper, (hopper.shape[1] * 512 // hopper.shape[0], 512), interpolation=cv2.INTER_AREA)
    video.write_image(folder / "pair.png", np.ascontiguousarray(np.concatenate([demo.photo(), hopper[:, :512]], 1)))
    video.write_image(folder / "astronaut.png", demo.photo())
    return {"target": folder / "pair.png", "astronaut": folder / "astronaut.png"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return two_people(tmp_path_factory.mktemp("people-browser"))


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def _picture(page: Any, src: str) -> np.ndarray:
    response = page.request.get(src)
    assert response.ok, src
    return np.asarray(Image.open(io.BytesIO(response.body())).convert("RGB")).astype(int)


def test_two_people_shown_a_source_for_one_and_the_preview_changes_that_face_alone(
    app: str, browser: Any, pair: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    page.locator("#target input[type=file]").set_input_files(str(pair["target"]))
    expect(page.locator("#preview-status")).to_contain_text("frame 0:", timeout=120_000)
    page.get_by_text("People: a source for each person").click()
    page.locator("#people-find").click()
    expect(page.locator("#people-status")).to_contain_text("P0 and P1 in pair.png", timeout=120_000)
    for number in (0, 1):
        expect(page.locator(f"#person-{number}-picture img")).to_be_visible(timeout=30_000)
    page.locator("#person-1-sources input[type=file]").set_input_files(str(pair["astronaut"]))
    expect(page.locator("#people-status")).to_contain_text("P1 ← astronaut.png", timeout=30_000)
    expect(page.locator("#selector input[value=map]")).to_be_checked(timeout=30_000)
    expect(page.locator("#preview-status")).to_contain_text("2 faces found, 1 changed", timeout=120_000)
    images = page.locator("#compare img")
    expect(images).to_have_count(2)
    before, after = (_picture(page, images.nth(i).get_attribute("src")) for i in range(2))
    assert before.shape == after.shape == (512, 948, 3)
    # The astronaut (left half, person 0, not mapped) is exactly the target through the preview's JPEG encoder
    # (its 16 px blocks depend on their own pixels; the halves meet on a block edge); Hopper's face is swapped.
    target = video.read_image(pair["target"])[0]
    untouched = video.read_image(write_jpeg(pair["target"].with_name("target.jpg"), target))[0]
    assert np.array_equal(after[:, :512], untouched[:, :512])
    assert np.abs(after[130:260, 680:810] - target[130:260, 680:810]).mean() > 5
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#people").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "people.png"), full_page=True)
    page.context.close()
