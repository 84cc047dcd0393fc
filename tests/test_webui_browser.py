"""The studio page in a real headless Chromium (Debian `chromium`, driven by playwright) at 1440×900: the common
path fits the first screen, face pictures show whole faces, messages a user can act on, runs with progress,
cancel and the run line, private results, history across a reload, narrow windows. Screenshots are kept in
$FACESTUDIO_TEST_ARTIFACTS (tests/README.md); the README's picture (docs/studio.png) is made by
tests/test_studio_browser.py."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from engine import media as video
from engine.faces.embedded import EmbeddedAnalyser
from engine.media import demo
from webui.app import Studio, UISettings, launch

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ["FACESTUDIO_TEST_ARTIFACTS"])  # screenshots to look at, kept (tests/README.md)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
VIEWPORT = {"width": 1440, "height": 900}
# The served app's frame size cap (`ui --max-pixels`): above every target here but `big`.
MAX_PIXELS = 2_000_000
# What the probe of this machine kind found necessary: without these, Chromium tries the network at start.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

# .ci/run installs Debian's chromium, so this runs in CI; a developer machine without it skips, saying why.
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary (apt-get install chromium)")


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("browser-media")
    photo = folder / "astronaut.png"
    video.write_image(photo, demo.photo())
    wall = folder / "wall.png"
    video.write_image(wall, np.full((240, 240, 3), (90, 120, 150), np.uint8))
    big = folder / "big wall.png"  # 4 MP: over the served app's limit
    video.write_image(big, np.full((2000, 2000, 3), (90, 120, 150), np.uint8))
    return {
        "big": big,
        "photo": photo,
        "source": demo.source_photo(),
        "wall": wall,
        "clip": demo.make_clip(folder / "clip.mp4", 320, 240, 48),
        "long clip": demo.make_clip(folder / "long.mp4", 320, 240, 240),
    }


@contextlib.contextmanager
def serving(
    tmp_path_factory: pytest.TempPathFactory, studio: Callable[..., Studio] | None = None, **settings: Any
) -> Iterator[str]:
    """The studio (`studio(work_dir=…)`, default the built-in processors') served on a free port with these
    `UISettings` while the block runs, its URL. Gradio's upload folder is its own meanwhile: another process's
    server on this machine (the same demo photos, the same content-hash paths) can then never delete an upload of
    this one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))
        work = tmp_path_factory.mktemp("work")
        served = launch(UISettings(port=port, **settings), (studio or Studio)(work_dir=work), block=False)
        try:
            yield f"http://127.0.0.1:{port}/"
        finally:
            served.close()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory, max_pixels=MAX_PIXELS) as url:
        yield url


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by playwright, for the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def open_page(browser: Any, url: str, viewport: dict[str, int] = VIEWPORT) -> Any:
    from playwright.sync_api import expect

    page = browser.new_context(viewport=viewport).new_page()
    page.goto(url)
    expect(page.locator("#run")).to_be_visible(timeout=60_000)
    return page


def load_inputs(page: Any, source: Path, target: Path) -> None:
    from playwright.sync_api import expect

    page.locator("#sources input[type=file]").set_input_files(str(source))
    page.locator("#target input[type=file]").set_input_files(str(target))
    expect(page.locator("#preview-status")).to_contain_text("frame 0: chain", timeout=120_000)


def inside_first_screen(page: Any, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not rendered"
    assert box["x"] >= 0 and box["y"] >= 0, (selector, box)
    assert box["x"] + box["width"] <= VIEWPORT["width"] + 0.5, (selector, box)
    assert box["y"] + box["height"] <= VIEWPORT["height"] + 0.5, (selector, box)
    return box


def test_the_common_path_fits_one_screen_and_face_pictures_show_whole_faces(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load_inputs(page, media["source"], media["photo"])
    # Everything the common path needs is in the first viewport, without scrolling.
    assert page.evaluate("window.scrollY") == 0
    boxes = {
        name: inside_first_screen(page, selector)
        for name, selector in {
            "preview": "#compare img",
            "run": "#run",
            "source thumbnail": "#source-faces img",
            "target": "#target-image img",
            "first processor's toggle": "#use-face_swapper",
        }.items()
    }
    # Three columns side by side: settings left of the inputs, inputs left of the preview.
    assert boxes["first processor's toggle"]["x"] < boxes["source thumbnail"]["x"] < boxes["preview"]["x"]
    # The source's picture is a square crop holding the whole face: the detector finds it in a screenshot of it.
    shot = page.locator("#source-faces img").first.screenshot()
    picture = np.asarray(Image.open(io.BytesIO(shot)).convert("RGB"))
    assert abs(picture.shape[0] - picture.shape[1]) <= 2
    assert len(EmbeddedAnalyser("hog").detect(picture)) == 1
    # The faces of the frame, numbered as on the preview; the selector is visible; a click picks the reference.
    expect(page.locator("#selector")).to_be_visible()
    faces = page.locator("#frame-faces img")
    expect(faces).to_have_count(1)
    expect(page.locator("#preview-status")).to_contain_text("1 face found, 1 changed")
    faces.first.click()
    expect(page.locator("#reference-picture img")).to_be_visible(timeout=30_000)
    expect(page.locator("#selector input[value=reference]")).to_be_checked()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "studio-loaded.png"))
    page.context.close()


def test_the_preview_follows_what_the_widgets_show(app: str, browser: Any, media: dict[str, Path]) -> None:
    """A change sends its cell's widgets alone and the server keeps the session's copy of the rest: the preview
    must render what the page shows after a user's change and after a handler sets the widgets (a preset)."""
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load_inputs(page, media["source"], media["photo"])
    status = page.locator("#preview-status")
    expect(status).to_contain_text("1 face found, 1 changed")
    # The user turns the swapper, the default chain's one processor, off: the preview has nothing to run.
    page.locator("#use-face_swapper input[type=checkbox]").uncheck()
    expect(status).to_contain_text("preview: no processors chosen", timeout=60_000)
    # Loading the default preset ticks it again: the preview swaps again.
    page.locator("#preset-load").click()
    expect(page.locator("#use-face_swapper input[type=checkbox]")).to_be_checked(timeout=30_000)
    expect(status).to_contain_text("1 face found, 1 changed", timeout=60_000)
    page.context.close()


def test_messages_a_user_can_act_on(app: str, browser: Any, media: dict[str, Path]) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    # A source photo without a face says so as soon as it is uploaded.
    page.locator("#sources input[type=file]").set_input_files(str(media["wall"]))
    expect(page.locator("#source-status")).to_contain_text(
        "wall.png: no face found — use a photo where one face is clearly visible", timeout=60_000
    )
    # The preview says what is wrong with the source instead of failing, naming the file as uploaded.
    page.locator("#target input[type=file]").set_input_files(str(media["photo"]))
    expect(page.locator("#preview-status")).to_contain_text("no face found in source image wall.png", timeout=60_000)
    # Without any source, the frame is shown with its faces numbered, and the page says what is missing.
    page.locator("#sources button[aria-label='Clear']").first.click()
    expect(page.locator("#preview-status")).to_contain_text(
        "1 face found; add a source face photo to see the swap", timeout=60_000
    )
    # Run refuses until the notice is acknowledged, saying where it is.
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("tick the responsible-use notice", timeout=30_000)
    # A target over the server's frame size cap is refused as a run would be, and the user is not told to raise
    # a setting only the operator has.
    page.locator("#target button[aria-label='Clear']").first.click()
    page.locator("#target input[type=file]").set_input_files(str(media["big"]))
    expect(page.locator("#preview-status")).to_contain_text(
        f"big wall.png is 2000×2000 = 4000000 pixels, above runtime.max_pixels={MAX_PIXELS}: scale it down first "
        "(this server's limit: its operator sets it, ui --max-pixels)",  # the backticks: Markdown's code
        timeout=60_000,
    )
    text = page.locator("body").inner_text()
    assert "/tmp" not in text and str(ROOT) not in text
    # No panel keeps an error badge: problems are said in their panel, not raised.
    assert page.locator(".error").count() == 0
    page.context.close()


def test_a_run_is_private_kept_in_history_and_pictured(app: str, browser: Any, media: dict[str, Path]) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load_inputs(page, media["source"], media["photo"])
    page.locator("#consent input[type=checkbox]").check()
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("done in", timeout=180_000)
    expect(page.locator("#result-image img")).to_be_visible()
    expect(page.locator("#summary")).to_contain_text("512×512 → 512×512")
    expect(page.locator("#downloads")).to_contain_text("astronaut-facestudio.png")
    page.wait_for_timeout(1000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "studio.png"))
    # The result's URL is this browser's alone: another browser and a client without cookies get 404.
    url = page.locator("#result-image img").get_attribute("src")
    assert url and "/gradio_api/file=" in url
    url = url if url.startswith("http") else app.rstrip("/") + url
    assert page.context.request.get(url).status == 200
    stranger = browser.new_context()
    assert stranger.request.get(url).status == 404
    stranger.close()
    assert httpx.get(url).status_code == 404
    # The job is in the history, also after a reload.
    page.reload()
    expect(page.locator("#run")).to_be_visible(timeout=60_000)
    page.get_by_role("tab", name="History").click()
    expect(page.get_by_text("astronaut-facestudio.png").first).to_be_visible(timeout=30_000)
    expect(page.get_by_role("button", name="Load these settings").first).to_be_visible()
    page.context.close()


def test_a_second_run_waits_in_line_and_cancel_ends_as_cancelled(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    first, second = open_page(browser, app), open_page(browser, app)
    for page in (first, second):
        load_inputs(page, media["source"], media["long clip"])
        page.locator("#consent input[type=checkbox]").check()
    first.locator("#run").click()
    expect(first.locator("#status")).to_contain_text("rendering:", timeout=120_000)
    second.locator("#run").click()
    expect(second.locator("#status")).to_contain_text("waiting: 1st in line", timeout=30_000)
    # A preview is single-frame work: it comes between two batches of the running job, not after the job.
    shown = "() => [...document.querySelectorAll('#compare img')].map(i => i.src).join(' ')"
    before = second.evaluate(shown)
    second.get_by_label("blend (%)").first.fill("60")
    second.wait_for_function(f"(before) => ({shown})() !== before", arg=before, timeout=60_000)
    assert "rendering:" in first.locator("#status").inner_text()
    first.locator("#cancel").click()
    expect(first.locator("#status")).to_contain_text("cancelled — nothing was written", timeout=60_000)
    assert first.locator(".error").count() == 0
    # The waiting run starts once the line is free; a new run clears what the last one showed.
    expect(second.locator("#status")).to_contain_text("rendering:", timeout=120_000)
    second.locator("#cancel").click()
    expect(second.locator("#status")).to_contain_text("cancelled", timeout=60_000)
    for page in (first, second):
        page.context.close()


def test_a_narrow_window_stacks_the_columns(app: str, browser: Any) -> None:
    page = open_page(browser, app, {"width": 700, "height": 900})
    sources = page.locator("#sources").bounding_box()
    toggle = page.locator("#use-face_swapper").bounding_box()
    preview = page.locator("#compare").bounding_box()
    run = page.locator("#run").bounding_box()
    assert sources and toggle and preview and run
    # One column, top to bottom: the inputs, the preview, Run, then the settings.
    assert abs(toggle["x"] - preview["x"]) < 40 and sources["y"] < preview["y"] < run["y"] < toggle["y"]
    assert run["x"] + run["width"] <= 700
    page.context.close()
