"""The Live tab in a real headless Chromium whose camera is a fake one playing the moving-portrait demo clip with
a frame counter drawn in (engine/live/testcard.py, made here as a .y4m): consent before streaming, the frames that
come back are swapped and keep coming for 20 s with no growth in latency (read from the counter), the stats line,
and a recording with the (fake) microphone's audio that lands in the history, tagged synthetic; all of it on a
studio shared with a login."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import socket
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from engine import media as video
from engine.faces.embedded import EmbeddedAnalyser
from engine.live import testcard
from engine.media import demo
from tests.test_live import swapped_towards_source
from webui.app import Studio, UISettings, launch

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ["FACESTUDIO_TEST_ARTIFACTS"])  # screenshots to look at, kept (tests/README.md)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]  # fmt: skip
FPS = 15
LOOP = 120  # frames in the fake camera's clip (it loops): 8 s
LOGIN = ("ada", "a-long-password")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary (apt-get install chromium)")

# The frame the result video shows now, as a PNG data URL.
GRAB = """() => {
  const video = document.querySelector('#live-view .fs-live-out');
  const canvas = document.createElement('canvas');
  canvas.width = video.videoWidth;
  canvas.height = video.videoHeight;
  canvas.getContext('2d').drawImage(video, 0, 0);
  return canvas.toDataURL('image/png');
}"""


@pytest.fixture(scope="module")
def camera(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return testcard.write(tmp_path_factory.mktemp("live-camera") / "camera.y4m", 640, 480, FPS, LOOP)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("live-work")


@pytest.fixture(scope="module")
def app(work: Path) -> Iterator[str]:
    """The studio shared with a login (`--auth`): the stream must start for the logged-in user."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    served = launch(UISettings(port=port, auth=LOGIN), Studio(work_dir=work), block=False)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        served.close()


@pytest.fixture(scope="module")
def browser(camera: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=[*FLAGS, f"--use-file-for-fake-video-capture={camera}"]
        )
        yield chromium
        chromium.close()


def live_tab(browser: Any, url: str) -> Any:
    from playwright.sync_api import expect

    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    page.goto(url)
    page.get_by_label("username").fill(LOGIN[0])
    page.get_by_label("password").fill(LOGIN[1])
    page.get_by_role("button", name="Login").click()
    expect(page.locator("#run")).to_be_visible(timeout=60_000)
    page.get_by_role("tab", name="Live").click()
    expect(page.locator("#live-start")).to_be_visible(timeout=30_000)
    return page


def test_nothing_streams_before_the_notice_is_acknowledged(app: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = live_tab(browser, app)
    page.locator("#live-start").click()
    expect(page.locator("#live-status")).to_contain_text("tick the responsible-use notice", timeout=30_000)
    page.wait_for_timeout(1500)
    assert page.evaluate("() => !window.facestudioLive || !window.facestudioLive.pc")
    assert page.locator("#live-view .fs-live-stats").inner_text() == "not streaming"
    # Ticked, but without a source face for the swapper: says what is missing, still nothing streams.
    page.locator("#consent input[type=checkbox]").check()
    page.locator("#live-start").click()
    expect(page.locator("#live-status")).to_contain_text("add a source face photo", timeout=30_000)
    assert page.evaluate("() => !window.facestudioLive || !window.facestudioLive.pc")
    page.context.close()


def picture(data_url: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("RGB"))


def result_frame(page: Any) -> np.ndarray:
    """The frame the result video shows now; taken again, 100 ms later, while its counter cannot be read (at most 5
    tries: the fifth is returned as it is, and the counter check below fails on it)."""
    for _ in range(4):
        frame = picture(page.evaluate(GRAB))
        if testcard.read_counter(frame) is not None:
            return frame
        page.wait_for_timeout(100)
    return picture(page.evaluate(GRAB))


@pytest.mark.slow
def test_a_camera_stream_comes_back_swapped_for_20_s_with_no_growth_in_latency_and_records(
    app: str, browser: Any, work: Path
) -> None:
    from playwright.sync_api import expect

    page = live_tab(browser, app)
    page.locator("#sources input[type=file]").set_input_files(str(demo.source_photo()))
    expect(page.locator("#source-status")).to_contain_text("the face that will be put in", timeout=60_000)
    page.locator("#consent input[type=checkbox]").check()
    page.locator("#live-mic input[type=checkbox]").check()
    page.locator("#live-start").click()
    page.wait_for_function("() => window.facestudioLive && window.facestudioLive.remote", timeout=120_000)
    # The stream started for the logged-in user; without the login the offer route answers 401, whatever the body.
    refused = httpx.post(app + "live/offer", json={"token": "x", "sdp": "v=0", "type": "offer"})
    assert refused.status_code == 401
    page.add_script_tag(content=testcard.COUNTER_JS + testcard.LATENCY_JS)
    page.evaluate(f"() => window.fsWatch({LOOP / FPS * 1000})")
    page.wait_for_timeout(4000)  # the first frames: models warm, the tracker re-timed
    page.evaluate("() => { window.fsShown = []; }")
    grabs = []
    for _ in range(4):  # 20 s, a look at what comes back every 5 s
        page.wait_for_timeout(5000)
        grabs.append(result_frame(page))
    shown = page.evaluate("() => window.fsShown")
    stats = page.locator("#live-view .fs-live-stats").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "live.png"))

    # Frames kept coming through the 20 s, each quarter of it.
    times = [s[1] for s in shown]
    start = times[0]
    quarters = [[s for s in shown if start + 5000 * q <= s[1] < start + 5000 * (q + 1)] for q in range(4)]
    assert all(len(q) >= 5 for q in quarters), [len(q) for q in quarters]
    # No growth in latency (a queue would add most of each second: several seconds by the end).
    first, last = (statistics.median(s[2] for s in q) for q in (quarters[0], quarters[-1]))
    assert last <= 1.5 * first + 150, (first, last)
    assert max(s[2] for s in shown) < 3000
    # The page says how it goes: fps, processing time and latency.
    assert re.search(r"\d+\.\d fps · processing \d+ ms · latency \d+ ms · camera \d+ fps, \d+% dropped", stats), stats
    # A recording, with the fake microphone's beeps, lands in the downloads and the history, tagged synthetic.
    page.locator("#live-record").click()
    expect(page.locator("#live-status")).to_contain_text("recording…", timeout=30_000)
    page.wait_for_timeout(3000)
    page.locator("#live-record").click()
    expect(page.locator("#live-status")).to_contain_text("recorded", timeout=60_000)
    links = page.locator("#live-downloads a")
    expect(links).to_have_count(2)
    assert [Path(links.nth(i).get_attribute("href") or "").suffix for i in range(2)] == [".mp4", ".json"]
    (output,) = work.glob("*/jobs/*/live-*.mp4")
    sidecar = output.with_name(output.name + ".job.json")
    info = video.probe(output)
    assert info.has_audio and (info.width, info.height) == (640, 480) and info.duration >= 2.5
    assert video.read_video_metadata(output)["synthetic"] == "true"
    text = sidecar.read_text()
    data = json.loads(text)
    assert data["synthetic"] is True and data["live"]["camera"] == "browser camera"
    assert str(work) not in text and "/tmp/" not in text  # no server path in what the user downloads
    page.locator("#live-stop").click()
    expect(page.locator("#live-view .fs-live-stats")).to_have_text("not streaming", timeout=30_000)
    expect(page.locator("#live-status")).to_contain_text("stopped", timeout=30_000)
    page.get_by_role("tab", name="History").click()
    expect(page.get_by_text(output.name).first).to_be_visible(timeout=30_000)
    page.context.close()

    # What came back is swapped: the embedded recogniser puts it closer to the source than to the camera's face
    # (checked once the stream has stopped, not to take its cores).
    analyser = EmbeddedAnalyser("hog")
    card = testcard.frames(640, 480, LOOP)
    for grab in grabs:
        n = testcard.read_counter(grab)
        assert n is not None and n < LOOP
        assert swapped_towards_source(grab, card[n], analyser)
