"""The studio never lies about its state (issue 31), in a real headless Chromium as tests/test_webui_browser.py drives
it: one test (or a few) per thing a FaceFusion user found untrue or a dead end — the reference trap, stale status
and state, the frame slider, the layout at 1440×900, 800 px and on a phone, presets, missing models, options that
cannot apply, the page's words, slow previews.

One server for the module, with a test processor ("Test gate") that holds a frame until the test lets it go (a slow
preview, a run caught mid-way, without timing), and a catalogue whose downloads point at a local server that counts
every request (the missing-model line must make none). Screenshots go to $FACESTUDIO_TEST_ARTIFACTS
(studio-1440.png after a run, studio-800.png, studio-390.png); with FACESTUDIO_UPDATE_DOCS=1 the README's picture
is made from the first."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from PIL import Image
from pydantic import Field
from test_people_browser import two_people
from test_webui_browser import ARTIFACTS, CHROMIUM, ROOT, chromium, serving

from engine.core.errors import InvalidJob
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.media import demo
from engine.models.manifest import MANIFEST_PATH
from processors import REGISTRY, build_registry
from webui.app import Studio

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary (apt-get install chromium)")

VIEWPORT = {"width": 1440, "height": 900}
DOCS_PICTURE = ROOT / "docs" / "studio.png"
LONG = 120_000  # ms: the first preview loads models on a loaded 2-core machine
STALE, HIDDEN = re.compile(r"\bfs-stale\b"), re.compile(r"\bhide\b")
# Held by the test processor while a test looks at what the page shows meanwhile; set to let it go.
GATE = threading.Event()


class GateOptions(ProcessorOptions):
    hold_from: int = Field(default=-1, ge=-1, description="frame from which the processor waits for the test")
    refuse: bool = Field(default=False, description="refuse every frame (a chain that cannot render)")


class Gate(FrameProcessor[GateOptions]):
    """A test processor: returns its frames unchanged, after waiting for GATE once a frame at or past
    `hold_from` comes (never, at -1); with `refuse`, refuses them as a processor refuses what it cannot do."""

    id: ClassVar[str] = "gate"
    title: ClassVar[str] = "Test gate"
    Options: ClassVar[type[ProcessorOptions]] = GateOptions

    def process(self, frames: list[Frame], ctxs: list[FrameContext]) -> list[Frame]:
        if self.options.refuse:
            raise InvalidJob("the test gate refuses this frame")
        if self.options.hold_from >= 0 and any(c.index >= self.options.hold_from for c in ctxs):
            assert GATE.wait(120), "the test never let the gate go"
        return list(frames)


class Downloads:
    """A local download server: serves `files`, records every request in `requests`; a file in `held` is sent
    half, then the rest once `release` is set."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.held: set[str] = set()
        self.release = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                name = self.path.lstrip("/")
                owner.requests.append(name)
                body = owner.files.get(name)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                half = len(body) // 2 if name in owner.held else len(body)
                self.wfile.write(body[:half])
                self.wfile.flush()
                if half < len(body):
                    owner.release.wait(120)
                    self.wfile.write(body[half:])

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Downloads, Path]]:
    """The local server and a catalogue pointing at it: GFPGAN v1.3 (non-commercial) served (2 MB, sent in two
    halves), CodeFormer and the XSeg occluder not served (404: a request would be counted), Real-ESRGAN x2plus
    at a port nothing listens on (no network)."""
    server = Downloads()
    thread = threading.Thread(target=server.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    payload = os.urandom(2_000_000)
    server.files["GFPGANv1.3.pth"] = payload
    server.held.add("GFPGANv1.3.pth")
    text = MANIFEST_PATH.read_text(encoding="utf-8")
    start = text.index("[[models.gfpgan_1_3.files]]")
    end = text.index("\n\n", start)
    entry = (f'[[models.gfpgan_1_3.files]]\nformat = "pth"\nfilename = "GFPGANv1.3.pth"\n'
             f'url = "{server.url}/GFPGANv1.3.pth"\nsize = {len(payload)}\n'
             f'sha256 = "{hashlib.sha256(payload).hexdigest()}"')  # fmt: skip
    text = text[:start] + entry + text[end:]
    for upstream in ("https://github.com/sczhou/CodeFormer/releases/download/v0.1.0/",
                     "https://github.com/facefusion/facefusion-assets/releases/download/models-3.0.0/"):  # fmt: skip
        text = text.replace(upstream, f"{server.url}/")
    text = text.replace(
        "https://github.com/xinntao/Real-ESRGAN/releases/download/v0.2.1/RealESRGAN_x2plus.pth",
        f"http://127.0.0.1:{_closed_port()}/RealESRGAN_x2plus.pth",
    )
    manifest = tmp_path_factory.mktemp("catalogue") / "manifest.toml"
    manifest.write_text(text, encoding="utf-8")
    try:
        yield server, manifest
    finally:
        server.release.set()
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.fixture(autouse=True)
def catalogue(downloads: tuple[Downloads, Path], monkeypatch: pytest.MonkeyPatch) -> Downloads:
    """Every test of the module sees the local catalogue (the shared setup clears FACESTUDIO_MANIFEST per test)."""
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(downloads[1]))
    GATE.clear()
    yield downloads[0]
    GATE.set()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("studio-media")
    clip = demo.make_clip(folder / "clip.mp4", 320, 240, 120)
    broken = folder / "broken.mp4"
    broken.write_bytes(clip.read_bytes()[:5000])  # its index (moov) is cut off: not readable
    preset = folder / "mine.toml"
    preset.write_text('processors = ["frame_enhancer"]\n[frame_enhancer]\nscale = 2\n', encoding="utf-8")
    return {**two_people(folder), "source": demo.source_photo(), "clip": clip, "broken": broken, "preset": preset}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, downloads: tuple[Downloads, Path]) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FACESTUDIO_MANIFEST", str(downloads[1]))
        registry = build_registry([*REGISTRY.values(), Gate])
        with serving(tmp_path_factory, lambda work_dir: Studio(registry, work_dir=work_dir)) as url:
            yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


# -- helpers ----------------------------------------------------------------------------------------------------
def open_page(browser: Any, url: str, viewport: dict[str, int] = VIEWPORT, *, agree: bool = True) -> Any:
    from playwright.sync_api import expect

    page = browser.new_context(viewport=viewport).new_page()
    page.goto(url)
    expect(page.locator("#run")).to_be_visible(timeout=60_000)
    if agree:
        page.locator("#consent input[type=checkbox]").check()
    return page


def put(page: Any, field: str, path: Path) -> None:
    """Upload `path` into a file field, replacing what it holds (as a user would: × first)."""
    from playwright.sync_api import expect

    upload = page.locator(f"{field} input[type=file]")
    if upload.count() == 0:
        page.locator(f"{field} button[aria-label='Clear']").first.click()
        expect(upload).to_have_count(1, timeout=30_000)
    upload.set_input_files(str(path))


def load(page: Any, target: Path, source: Path | None = None, shows: str = "frame 0: chain") -> None:
    from playwright.sync_api import expect

    if source is not None:
        put(page, "#sources", source)
        expect(page.locator("#source-status")).to_contain_text("the face that will be put in", timeout=LONG)
    put(page, "#target", target)
    expect(page.locator("#preview-status")).to_contain_text(shows, timeout=LONG)


def open_cell(page: Any, cell: str) -> None:
    """Open a settings cell (an accordion: its widgets are made when it opens)."""
    content = page.locator(f"#{cell} [data-testid=accordion-content]").first
    if not content.is_visible():
        page.locator(f"#{cell} .label-wrap").first.click()


def choose(page: Any, field: Any, option: str) -> None:
    """Pick the dropdown entry whose label starts with `option` (a model id; a model to download says its size)."""
    field.click()
    page.locator("[role=option]").filter(has_text=option).first.click()


def options_of(page: Any, dropdown: Any) -> list[str]:
    dropdown.locator("input").click()
    names = [o.get_attribute("aria-label") for o in page.locator("[role=option]").all()]
    page.keyboard.press("Escape")
    return names


def box(page: Any, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not shown"
    return found


def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path))
    return path


# -- 1. the reference trap -------------------------------------------------------------------------------------
def test_a_picked_reference_counts_only_with_the_reference_selector_and_goes_with_its_target(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    status = page.locator("#preview-status")
    page.locator("#frame-faces img").first.click()
    expect(page.locator("#selector input[value=reference]")).to_be_checked(timeout=30_000)
    expect(page.locator("#reference-picture img")).to_be_visible(timeout=30_000)
    # Back to "one": runs and previews work; the picked face is not shown as if it counted.
    page.locator("#selector label").filter(has_text="one").click()
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("done in", timeout=180_000)
    expect(status).to_contain_text("1 face found, 1 changed", timeout=LONG)
    assert "reference_image" not in status.inner_text()
    expect(page.locator("#reference-picture")).to_be_hidden()
    # Picked again, then a new target: the old target's face goes, and the selector is back to "one".
    page.locator("#frame-faces img").first.click()
    expect(page.locator("#selector input[value=reference]")).to_be_checked(timeout=30_000)
    load(page, media["target"], shows="2 faces found, 1 changed")
    expect(page.locator("#selector input[value=one]")).to_be_checked()
    expect(page.locator("#reference-picture")).to_be_hidden()
    page.context.close()


# -- 2. stale status and state ---------------------------------------------------------------------------------
def test_a_failure_goes_when_the_inputs_that_caused_it_are_fixed(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    run_line = page.locator("#status")
    page.locator("#run").click()
    expect(run_line).to_contain_text("failed — add a target image or video first", timeout=30_000)
    load(page, media["astronaut"], media["source"])
    expect(run_line).to_have_text("")
    # A target that cannot be read, Run, then a good image instead: nothing of the bad one stays.
    put(page, "#target", media["broken"])
    expect(page.locator("#target-info")).to_contain_text("broken.mp4 cannot be read", timeout=30_000)
    page.locator("#run").click()
    expect(run_line).to_contain_text("failed", timeout=30_000)
    load(page, media["astronaut"])
    expect(run_line).to_have_text("")
    expect(page.locator("#target-info")).to_have_text("astronaut.png: image, 512×512")
    page.context.close()


def test_cancel_with_nothing_running_says_so(app: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    page.locator("#cancel").click()
    expect(page.locator("#status")).to_contain_text("nothing is running", timeout=30_000)
    assert "cancelling" not in page.locator("#status").inner_text()
    page.context.close()


def test_people_and_their_selector_go_with_the_target_they_were_found_on(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["target"], media["source"], shows="2 faces found, 1 changed")
    page.get_by_text("People: a source for each person").click()
    page.locator("#people-find").click()
    expect(page.locator("#person-1-picture img")).to_be_visible(timeout=LONG)
    page.locator("#person-1-sources input[type=file]").set_input_files(str(media["astronaut"]))
    expect(page.locator("#selector input[value=map]")).to_be_checked(timeout=30_000)
    expect(page.locator("#preview-status")).to_contain_text("2 faces found, 1 changed", timeout=LONG)
    # Another target: its own faces, no rows of the old one's people, the selector back to "one", a preview.
    load(page, media["astronaut"], shows="1 face found, 1 changed")
    expect(page.locator("#person-1-picture")).to_have_count(0, timeout=30_000)
    expect(page.locator("#person-1-sources")).to_have_count(0)
    expect(page.locator("#selector input[value=one]")).to_be_checked()
    expect(page.locator("#compare img").first).to_be_visible()
    page.context.close()


def test_a_preview_that_cannot_render_marks_the_last_picture_out_of_date(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    compare = page.locator("#compare")
    assert "fs-stale" not in (compare.get_attribute("class") or "")
    open_cell(page, "cell-gate")
    page.locator("#use-gate input[type=checkbox]").check()
    refuse = page.locator("#cell-gate").get_by_label("refuse")
    refuse.check()
    expect(page.locator("#preview-status")).to_contain_text("the test gate refuses this frame", timeout=LONG)
    expect(compare).to_have_class(STALE)
    label = page.evaluate("() => getComputedStyle(document.querySelector('#compare'), '::after').content")
    assert "out of date" in label
    # Fixed: a fresh picture, no longer marked.
    refuse.uncheck()
    expect(page.locator("#preview-status")).to_contain_text("frame 0: chain", timeout=LONG)
    expect(compare).not_to_have_class(STALE)
    page.context.close()


# -- 3. the frame slider ---------------------------------------------------------------------------------------
PLAYER_FRAME = """() => { const v = document.querySelector('#target-video video');
  return v ? Math.floor(v.currentTime * 24) : null; }"""


def test_typed_and_keyed_frames_render_and_the_player_follows(app: str, browser: Any, media: dict[str, Path]) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["clip"], media["source"])
    status = page.locator("#preview-status")
    number = page.locator("#frame input[type=number]")
    number.fill("100")
    number.press("Enter")
    expect(status).to_contain_text("frame 100: chain", timeout=LONG)
    page.wait_for_function(f"() => ({PLAYER_FRAME})() === 100", timeout=30_000)
    # The arrow keys move it one frame, as the mouse would.
    page.locator("#frame input[type=range]").focus()
    page.keyboard.press("ArrowRight")
    expect(status).to_contain_text("frame 101: chain", timeout=LONG)
    page.wait_for_function(f"() => ({PLAYER_FRAME})() === 101", timeout=30_000)
    # A seek in the paused player moves the slider, and the preview with it.
    page.evaluate("() => { const v = document.querySelector('#target-video video'); v.currentTime = 50.5 / 24; }")
    expect(number).to_have_value("50", timeout=30_000)
    expect(status).to_contain_text("frame 50: chain", timeout=LONG)
    page.context.close()


@pytest.mark.slow
def test_the_trim_range_sits_on_the_timeline_and_the_run_keeps_just_those_frames(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["clip"], media["source"])
    number = page.locator("#frame input[type=number]")
    for frame, button in ((30, "#trim-start"), (69, "#trim-end")):
        number.fill(str(frame))
        number.press("Enter")
        expect(page.locator("#preview-status")).to_contain_text(f"frame {frame}: chain", timeout=LONG)
        page.locator(button).click()
    expect(page.locator("#trim-bar")).to_contain_text("output: frames 30–69 (40 frames)", timeout=30_000)
    kept = page.locator("#trim-bar .fs-trim i").bounding_box()
    bar = page.locator("#trim-bar .fs-trim").bounding_box()
    assert kept and bar and abs(kept["x"] - bar["x"] - bar["width"] * 30 / 119) < 3
    # The output settings say the same, in seconds (between two frames' times).
    open_cell(page, "cell-video")
    assert float(page.get_by_label("trim start (s)").input_value()) == pytest.approx(29.5 / 24, abs=1e-6)
    assert float(page.get_by_label("trim end (s)").input_value()) == pytest.approx(69.5 / 24, abs=1e-6)
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("done in", timeout=300_000)
    expect(page.locator("#summary")).to_contain_text("40 frames")
    page.context.close()


# -- 4. layout ---------------------------------------------------------------------------------------------------
@pytest.mark.checkout_writes(str(DOCS_PICTURE.relative_to(ROOT)))  # with FACESTUDIO_UPDATE_DOCS=1
def test_the_tabs_and_the_result_are_on_the_first_screen_and_the_chain_shows_at_a_glance(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("done in", timeout=180_000)
    expect(page.locator("#result-image img")).to_be_visible()
    page.wait_for_timeout(1000)
    assert page.evaluate("window.scrollY") == 0
    for selector in ("[role=tab] >> text=Models", "[role=tab] >> text=Live", "#result-image img", "#download-output"):
        found = box(page, selector)
        assert found["y"] >= 0 and found["y"] + found["height"] <= VIEWPORT["height"] + 0.5, (selector, found)
    shot(page, "studio-1440.png")
    if os.environ.get("FACESTUDIO_UPDATE_DOCS") == "1":
        # The README's picture shows the app's own chain: the test processor's chip is this module's, not the app's.
        page.evaluate(
            "for (const a of document.querySelectorAll('#chain a.fs-chip')) "
            "if (a.textContent.trim() === 'Test gate') a.style.display = 'none'"
        )
        save_small_png(shot(page, "studio-docs.png"), DOCS_PICTURE)
    # The chain with every cell closed: which processors are on, in order, with their model.
    page.locator("#cell-face_swapper .label-wrap").first.click()
    chain = page.locator("#chain")
    expect(chain.locator(".fs-on")).to_have_text(["1 Face swapper · landmark_warp"])
    open_cell(page, "cell-face_enhancer")
    page.locator("#use-face_enhancer input[type=checkbox]").check()
    expect(chain.locator(".fs-on")).to_have_count(2, timeout=LONG)
    assert chain.locator(".fs-on").all_inner_texts()[1].startswith("2 Face enhancer")
    page.locator("#cell-face_enhancer .label-wrap").first.click()
    expect(page.locator("#use-face_enhancer")).to_be_hidden()
    # A chip opens its cell.
    chain.get_by_text("Face enhancer").click()
    expect(page.locator("#use-face_enhancer")).to_be_visible(timeout=30_000)
    page.context.close()


def _order(page: Any) -> list[float]:
    """The tops of: the first input, the preview, Run, the settings (the first cell's toggle)."""
    return [box(page, s)["y"] for s in ("#sources", "#compare", "#run", "#use-face_swapper")]


def test_at_800_px_and_on_a_phone_the_inputs_come_first_then_the_preview_run_and_settings(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    for width, height, name in ((800, 900, "studio-800.png"), (390, 844, "studio-390.png")):
        page = open_page(browser, app, {"width": width, "height": height})
        load(page, media["astronaut"], media["source"])
        tops = _order(page)
        assert tops == sorted(tops), (width, tops)
        if width < 720:
            assert box(page, "#target")["y"] < tops[1]  # the target too, before the preview
        # Every tab is a tab (none behind a "…" menu), inside the window.
        for tab in ("Studio", "History", "Models", "Live"):
            found = box(page, f"[role=tab] >> text={tab}")
            assert found["x"] + found["width"] <= width, (width, tab)
        assert page.locator(".overflow-menu:not(.hide)").count() == 0
        page.evaluate("window.scrollTo(0, 0)")
        shot(page, name)
        page.context.close()


# -- 5. presets ------------------------------------------------------------------------------------------------
def test_a_saved_preset_is_there_after_a_reload_and_in_no_other_browser(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    page.locator("#preset-name input, #preset-name textarea").first.fill("mine")
    page.locator("#preset-save").click()
    said = page.locator("#preset-status")
    expect(said).to_contain_text("saved preset mine (yours, kept for this browser", timeout=30_000)
    page.reload()
    expect(page.locator("#run")).to_be_visible(timeout=60_000)
    page.wait_for_timeout(1000)  # the picker is filled as the page loads
    picked = options_of(page, page.locator("#preset-pick"))
    assert "mine (yours)" in picked and "default" in picked, picked
    other = open_page(browser, app)
    theirs = options_of(other, other.locator("#preset-pick"))
    assert "mine (yours)" not in theirs and "default" in theirs, theirs
    other.context.close()
    # An opened file shows in the picker by its name.
    with page.expect_file_chooser() as chooser:
        page.locator("#preset-open").click()
    chooser.value.set_files(str(media["preset"]))
    expect(page.locator("#preset-status")).to_contain_text("loaded mine.toml", timeout=30_000)
    expect(page.locator("#preset-pick input")).to_have_value("mine.toml (opened file)", timeout=30_000)
    page.context.close()


# -- 6. missing models -----------------------------------------------------------------------------------------
def test_a_missing_model_is_one_line_beside_its_control_and_nothing_is_downloaded(
    app: str, browser: Any, media: dict[str, Path], catalogue: Downloads
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    asked = len(catalogue.requests)
    open_cell(page, "cell-face_enhancer")
    page.locator("#use-face_enhancer input[type=checkbox]").check()
    expect(page.locator("#preview-status")).to_contain_text("frame 0: chain", timeout=LONG)
    choose(page, page.locator("#cell-face_enhancer").get_by_label("model").first, "codeformer")
    expect(page.locator("#preview-status")).to_contain_text(re.compile("codeformer", re.I), timeout=LONG)
    assert catalogue.requests[asked:] == []  # no download started, no request at all
    note = page.locator("#cell-note-face_enhancer")
    expect(note).to_contain_text("is not downloaded (377 MB, non-commercial) — open Models", timeout=LONG)
    assert note.inner_text().count("\n") == 0  # one line
    expect(page.locator("#preview-status")).to_contain_text("is not downloaded", timeout=LONG)
    expect(page.locator("#frame-faces img")).to_have_count(1)  # the faces stay
    # The occlusion mask's model, the same way, in its own cell.
    page.locator("#cell-face_swapper").get_by_text("occlusion", exact=True).click()
    expect(page.locator("#cell-note-face_swapper")).to_contain_text("XSeg", timeout=LONG)
    expect(page.locator("#frame-faces img")).to_have_count(1)
    assert catalogue.requests[asked:] == []  # no download started, no request at all
    # "open Models" opens the Models tab on that model.
    note.get_by_text("open Models").click()
    expect(page.locator("#model-codeformer")).to_be_visible(timeout=30_000)
    expect(page.locator("#model-gfpgan_1_3")).to_have_count(0)
    assert catalogue.requests[asked:] == []
    page.context.close()


def test_the_models_tab_groups_searches_shows_the_licence_and_asks_before_a_non_commercial_download(
    app: str, browser: Any, catalogue: Downloads
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    page.get_by_role("tab", name="Models").click()
    expect(page.get_by_text("Face swappers (14)")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("Frame enhancers (upscalers)")).to_be_visible()
    page.locator("#models-search input, #models-search textarea").first.fill("esrgan x2")
    expect(page.locator("#model-real_esrgan_x2plus")).to_be_visible(timeout=30_000)
    expect(page.locator(".fs-model")).to_have_count(1)
    # Offline: "no network", naming the host.
    page.locator("#model-download-real_esrgan_x2plus").click()
    expect(page.locator("#model-status-real_esrgan_x2plus")).to_contain_text(
        "no network: 127.0.0.1 cannot be reached", timeout=60_000
    )
    # The whole licence, wrapped to the page.
    page.locator("#models-search input, #models-search textarea").first.fill("gfpgan v1.3")
    expect(page.locator(".fs-model")).to_have_count(1, timeout=30_000)
    row = page.locator("#model-row-gfpgan_1_3")
    row.locator(".fs-licence .label-wrap").first.click()
    licence = row.locator(".fs-licence pre").first
    expect(licence).to_be_visible(timeout=30_000)
    assert licence.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    # Non-commercial: not fetched until accepted; then its progress shows in its row.
    asked = len(catalogue.requests)
    page.locator("#model-download-gfpgan_1_3").click()
    row = page.locator("#model-status-gfpgan_1_3")
    expect(row).to_contain_text("licensed for non-commercial use only", timeout=30_000)
    assert catalogue.requests[asked:] == []
    page.locator("#model-accept-gfpgan_1_3 input[type=checkbox]").check()
    page.locator("#model-download-gfpgan_1_3").click()
    expect(row.locator("[data-testid=status-tracker]")).to_contain_text("GFPGANv1.3.pth", timeout=60_000)
    assert catalogue.requests[asked:] == ["GFPGANv1.3.pth"]
    catalogue.release.set()
    expect(row).to_contain_text("downloaded: GFPGANv1.3.pth", timeout=60_000)
    page.context.close()


# -- 7. options that cannot apply ------------------------------------------------------------------------------
def test_the_face_mask_is_not_a_choice_with_landmark_warp(app: str, browser: Any, media: dict[str, Path]) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    mask = page.locator("#cell-face_swapper fieldset").filter(has_text="paste-back masks").first
    face = mask.locator("label").filter(has_text="face").first
    expect(face.locator("input")).to_be_checked()
    face.click(force=True)  # where a user would click to untick it: nothing changes
    page.wait_for_timeout(500)
    expect(face.locator("input")).to_be_checked()
    page.locator("#run").click()  # and the chain runs
    expect(page.locator("#status")).to_contain_text("done in", timeout=180_000)
    expect(mask).to_contain_text("face: always on with model landmark_warp")
    # A model swapper: the face mask is a choice again.
    choose(page, page.locator("#cell-face_swapper").get_by_label("model").first, "inswapper_128")
    expect(mask).not_to_contain_text("always on", timeout=30_000)
    face.click()
    expect(face.locator("input")).not_to_be_checked()
    page.context.close()


# -- 8. words --------------------------------------------------------------------------------------------------
def test_one_face_numbering_and_labels_that_say_things_once(app: str, browser: Any, media: dict[str, Path]) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["target"], media["source"], shows="2 faces found, 1 changed")
    page.get_by_text("People: a source for each person").click()
    page.locator("#people-find").click()
    expect(page.locator("#people-status")).to_contain_text("P0 and P1 in pair.png", timeout=LONG)
    page.locator("#person-1-sources input[type=file]").set_input_files(str(media["astronaut"]))
    expect(page.locator("#people-status")).to_contain_text("P1 ← astronaut.png", timeout=30_000)
    expect(page.locator("#preview-status")).to_contain_text("2 faces found, 1 changed", timeout=LONG)
    # The same names on the faces under the preview and in the people panel.
    expect(page.locator("#frame-faces .caption-label").first).to_contain_text("P", timeout=LONG)
    assert sorted(page.locator("#frame-faces .caption-label").all_inner_texts()) == ["P0", "P1"]
    expect(page.locator("#person-1").get_by_text("P1", exact=True)).to_be_visible()
    # Units not repeated; the two presets told apart; a model's whole name in its dropdown.
    open_cell(page, "cell-video")
    expect(page.get_by_role("slider", name="range slider for CRF")).to_be_visible()
    labels = [t.strip() for t in page.locator("#cell-video [data-testid=block-info]").all_inner_texts()]
    assert "CRF" in labels and "fps" in labels, labels
    body = page.locator("body").inner_text()
    assert "crf (CRF)" not in body and "fps (fps)" not in body
    expect(page.get_by_label("encoder preset")).to_be_visible()
    expect(page.get_by_label("settings preset")).to_be_visible()
    model = page.locator("#cell-face_swapper").get_by_label("model").first
    assert model.evaluate("e => e.scrollWidth <= e.clientWidth")
    page.context.close()


def test_a_broken_video_is_said_once_in_words_and_a_run_shows_a_bar_not_an_empty_line(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["broken"], media["source"], shows="no preview: see the target")
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("failed — the target cannot be read", timeout=30_000)
    body = page.locator("body").inner_text()
    assert body.count("cannot be read as an image or video") == 1 and "moov" not in body
    assert page.locator(".toast-body").count() == 0
    # A run held mid-way by the test processor: a bar, frames, fps and time left, and no place in line.
    page.evaluate("""() => { window.fsSaid = []; new MutationObserver(() => window.fsSaid.push(
        document.querySelector('#status').innerText)).observe(document.querySelector('#status'),
        {subtree: true, childList: true, characterData: true}); }""")
    load(page, media["clip"])
    open_cell(page, "cell-gate")
    page.locator("#use-gate input[type=checkbox]").check()
    field = page.get_by_label("hold from")
    field.fill("24")
    field.press("Enter")
    page.locator("#run").click()
    expect(page.locator("#status progress")).to_be_visible(timeout=180_000)
    expect(page.locator("#status")).to_contain_text("of 120 frames", timeout=60_000)
    expect(page.locator("#status")).to_contain_text("left", timeout=60_000)
    GATE.set()
    expect(page.locator("#status")).to_contain_text("done in", timeout=300_000)
    said = page.evaluate("() => window.fsSaid")
    assert said and not any("in line" in line for line in said), said
    expect(page.locator("#summary")).to_contain_text("120 frames")
    page.context.close()


def test_consent_is_kept_by_the_browser_and_live_asks_for_no_second_one(app: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app, agree=False)
    agreed = page.locator("#consent input[type=checkbox]")
    agreed.check()
    page.reload()
    expect(page.locator("#run")).to_be_visible(timeout=60_000)
    expect(agreed).to_be_checked(timeout=30_000)
    page.get_by_role("tab", name="Live").click()
    expect(page.locator("#live-start")).to_be_visible(timeout=30_000)
    assert page.get_by_label("I have read the responsible-use notice").count() == 1  # one, at the top
    agreed.uncheck()
    page.locator("#live-start").click()
    expect(page.locator("#live-status")).to_contain_text("tick the responsible-use notice (at the top", timeout=30_000)
    page.context.close()


def test_history_loads_a_jobs_settings_and_inputs_and_says_so(app: str, browser: Any, media: dict[str, Path]) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("done in", timeout=180_000)
    said = page.locator("#summary").inner_text()
    page.locator("#target button[aria-label='Clear']").first.click()
    page.locator("#sources button[aria-label='Clear']").first.click()
    expect(page.locator("#preview-status")).to_contain_text("add a target", timeout=30_000)
    page.get_by_role("tab", name="History").click()
    page.get_by_role("button", name="Load these settings and inputs").first.click()
    expect(page.locator("#preset-status")).to_contain_text(
        "loaded the settings and inputs of astronaut-facestudio.png", timeout=30_000
    )
    expect(page.locator("#run")).to_be_visible()  # back in the Studio tab
    expect(page.locator("#target")).to_contain_text(re.compile(r"astronaut\s*\.png"))
    expect(page.locator("#sources")).to_contain_text(re.compile(r"grace_hopper\s*\.jpg"))
    expect(page.locator("#preview-status")).to_contain_text("1 face found, 1 changed", timeout=LONG)
    assert "1 face processed, 0 frames without a face" in said, said  # one face, not "1 faces"
    page.context.close()


def test_a_source_face_name_sits_above_the_face_not_on_its_chin(app: str, browser: Any, media: dict[str, Path]) -> None:
    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    picture = box(page, "#source-faces img")
    chip = box(page, "#source-faces .caption-label")
    assert chip["y"] + chip["height"] <= picture["y"] + picture["height"] * 0.2, (chip, picture)
    page.context.close()


def test_a_source_photo_with_several_faces_shows_each_and_a_click_takes_another(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["target"])  # pair.png as the source: two faces
    captions = page.locator("#source-faces .caption-label")
    expect(captions).to_have_count(2, timeout=LONG)
    expect(page.locator("#source-status")).to_contain_text("the one marked ✓: click another to use it")
    texts = captions.all_inner_texts()
    assert sorted(texts) == sorted(["pair.png · 1 of 2", "pair.png · 2 of 2 ✓"]) or sorted(texts) == sorted(
        ["pair.png · 1 of 2 ✓", "pair.png · 2 of 2"]
    ), texts
    other = next(n for n, text in enumerate(texts, start=1) if "✓" not in text)
    page.locator("#source-faces img").nth(other - 1).click()
    expect(captions.nth(other - 1)).to_have_text(f"pair.png · {other} of 2 ✓", timeout=LONG)
    expect(captions.nth(2 - other)).to_have_text(f"pair.png · {3 - other} of 2")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#source-faces").screenshot(path=str(ARTIFACTS / "studio-source-faces.png"))
    open_cell(page, "cell-faces")
    page.locator("#cell-faces .label-wrap").filter(has_text="advanced").first.click()
    expect(page.get_by_label("source face", exact=True)).to_have_value(str(other))
    page.context.close()


# -- face by face ------------------------------------------------------------------------------------------------
def test_face_by_face_shows_each_changed_face_before_and_after_large(
    app: str, browser: Any, media: dict[str, Path]
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["target"], media["source"], shows="2 faces found, 1 changed")
    page.locator("#view-mode label").filter(has_text="face by face").click()
    pairs = page.locator("#face-pairs img")
    expect(pairs).to_be_visible(timeout=LONG)
    expect(page.locator("#compare")).to_be_hidden()
    size = pairs.evaluate("i => [i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().height]")
    assert size[:2] == [2 * 288 + 8, 288], size  # one changed face: its crop before and after
    assert size[2] >= 250, size  # shown large enough to judge the mouth and eyes
    page.locator("#view-mode label").filter(has_text="frame").first.click()
    expect(page.locator("#compare img").first).to_be_visible(timeout=30_000)
    page.context.close()


# -- 9. slow previews ------------------------------------------------------------------------------------------
def test_a_slow_preview_says_it_is_rendering_and_for_how_long(app: str, browser: Any, media: dict[str, Path]) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, app)
    load(page, media["astronaut"], media["source"])
    open_cell(page, "cell-gate")
    page.locator("#use-gate input[type=checkbox]").check()
    expect(page.locator("#preview-status")).to_contain_text("frame 0: chain", timeout=LONG)
    field = page.get_by_label("hold from")
    field.fill("0")
    field.press("Enter")
    tracker = page.locator("#compare [data-testid=status-tracker]")
    expect(tracker).not_to_have_class(HIDDEN, timeout=30_000)
    expect(tracker).to_be_visible(timeout=30_000)
    # Its timer counts the seconds the preview has taken.
    page.wait_for_function(
        """() => { const t = document.querySelector('#compare [data-testid=status-tracker]');
        const m = /(\\d+\\.\\d)\\s*s/.exec(t.innerText); return m && parseFloat(m[1]) >= 1.0; }""",
        timeout=30_000,
    )
    said = tracker.evaluate("t => getComputedStyle(t, '::before').content")
    assert "rendering" in said, said
    GATE.set()
    expect(tracker).to_have_class(HIDDEN, timeout=LONG)
    expect(page.locator("#preview-status")).to_contain_text("frame 0: chain", timeout=LONG)
    page.context.close()


def save_small_png(shot: Path, out: Path, limit: int = 300_000) -> None:
    """The screenshot as a palette PNG under `limit` bytes (the README's picture)."""
    image = Image.open(shot).convert("RGB")
    for colours, scale in ((256, 1.0), (192, 0.9), (128, 0.8), (96, 0.7)):
        small = image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.LANCZOS)
        buffer = io.BytesIO()
        small.quantize(colours, dither=Image.Dither.FLOYDSTEINBERG).save(buffer, "PNG", optimize=True)
        if buffer.tell() <= limit:
            out.parent.mkdir(exist_ok=True)
            out.write_bytes(buffer.getvalue())
            return
    raise AssertionError(f"no palette PNG of {shot.name} fits {limit} bytes")
