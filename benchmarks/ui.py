"""Studio page benchmark (not a test): how long the first page load takes, and how long a preview takes after an
option change compared with the chain's own time on that frame.

    python benchmarks/ui.py [--resolution 720p] [--repeats 8] [--json ui.json]

It serves the studio on a free local port, opens it in headless Chromium (Debian `chromium`, driven by
playwright) at 1440×900, and measures:
- page ready: from navigation start until the page is interactive: the first processor's cell rendered, the Run
  button visible and the first call to the server answered (median of `--repeats` fresh loads);
- preview after an option change: a source and a `--resolution` target (the demo portrait, scaled) are loaded with
  the default chain, then the face swapper's blend is changed `--repeats` times; each time, from the change in the
  page until the new result is shown (a new result image, fully decoded), against the chain's own time the
  engine measured for that very render (`Rendered.chain_ms`, shown in the same status). Ratio = browser ÷ chain.
- Gradio's floor: the same measurement on a page with one field whose handler only writes the frame as a JPEG
  (`gradio_floor`, outside the queue as the studio's previews are): what any Gradio event with a new image costs
  on this machine, whatever the chain.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import media as video  # noqa: E402
from engine.media import demo  # noqa: E402
from webui.app import Studio, UISettings, launch  # noqa: E402
from webui.studio import write_jpeg  # noqa: E402  (the encoder of the studio's previews)

WATCH = """() => {
  const input = [...document.querySelectorAll('input')]
    .find(i => i.getAttribute('aria-label') === 'number input for blend (%)')
    || document.querySelector('input[type=number]');
  window.__previewShown = new Promise(() => {});
  const state = () => ({
    status: document.querySelector('#preview-status').innerText,
    images: [...document.querySelectorAll('#compare img')].map(i => i.src).join(' '),
  });
  input.addEventListener('input', () => {
    const started = performance.now();
    const old = state();
    window.__previewShown = new Promise(resolve => {
      const poll = () => {
        const now = state();
        const imgs = [...document.querySelectorAll('#compare img')];
        if (now.status.includes('chain') && now.images !== old.images
            && imgs.every(i => i.complete && i.naturalWidth > 0)) {
          resolve(performance.now() - started);
        } else {
          requestAnimationFrame(poll);
        }
      };
      requestAnimationFrame(poll);
    });
  }, true);
}"""
SIZES = {"360p": (640, 360), "720p": (1280, 720), "1080p": (1920, 1080)}
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def target_image(folder: Path, resolution: str) -> Path:
    """The demo portrait centred on a `resolution` canvas (the face at the size it has in a portrait video)."""
    width, height = SIZES[resolution]
    photo = demo.photo()
    side = height
    face = cv2.resize(photo, (side, side), interpolation=cv2.INTER_CUBIC)
    canvas = cv2.resize(photo[:40, :40], (width, height), interpolation=cv2.INTER_LINEAR)
    left = (width - side) // 2
    canvas[:, left : left + side] = face
    path = folder / f"portrait-{resolution}.png"
    video.write_image(path, canvas)
    return path


def previews(page: Any, repeats: int) -> list[tuple[float, float]]:
    """(ms in the browser, the handler's chain ms) of `repeats` previews, each after a change of the first field
    labelled "blend (%)" on `page`, whose `#preview-status` says "chain N ms" and `#compare` shows the result.

    Timed in the page: from the input's `input` event (the value changed: Gradio's number field sends its change
    from it, not from the later DOM `change` on Enter or blur) to the frame on which the new result is shown (a new
    file in the before/after, every image fully decoded, and the status naming a render: its text may repeat, when
    two renders take the same whole milliseconds), so the driver's own keystrokes do not count."""
    status = page.locator("#preview-status")
    blend = page.get_by_label("blend (%)").first
    page.evaluate(WATCH)
    samples = []
    for i in range(repeats):
        blend.fill(str(99 - i))
        # A preview that never shows (an error in the page) ends the benchmark instead of waiting forever.
        seconds = (
            page.evaluate(
                "() => Promise.race([window.__previewShown, new Promise((_, no) => setTimeout("
                "() => no(new Error('no new preview within 60 s')), 60000))])"
            )
            / 1000
        )
        chain_ms = float(re.search(r"chain (\d+) ms", status.inner_text()).group(1))  # type: ignore[union-attr]
        samples.append((seconds * 1000, chain_ms))
    return samples


def summarised(samples: list[tuple[float, float]]) -> dict[str, Any]:
    browser_ms = statistics.median(s[0] for s in samples)
    chain_ms = statistics.median(s[1] for s in samples)
    return {
        "browser_ms_median": round(browser_ms, 1),
        "chain_ms_median": round(chain_ms, 1),
        "ratio": round(browser_ms / chain_ms, 3),
        "samples_ms": [[round(a, 1), b] for a, b in samples],
    }


def floor(browser: Any, work: Path, target: Path, repeats: int) -> dict[str, Any]:
    """Gradio's own round trip, for comparison: a page with one number field and a before/after, whose handler only
    writes `target` as a new JPEG (as the studio's preview writes its result), measured as the studio's preview is.
    Its "chain" is the handler's own time; the browser's time minus it is what any Gradio event costs here. Sent
    outside Gradio's queue, as the studio's previews are."""
    import gradio as gr

    frame = video.read_image(target)[0]
    folder = work / "floor"
    folder.mkdir()
    before = folder / "before.jpg"
    write_jpeg(before, frame)
    count = iter(range(1_000_000))

    def render(_: float) -> tuple[tuple[str, str], str]:
        started = time.perf_counter()
        after = folder / f"after-{next(count)}.jpg"
        write_jpeg(after, frame)
        return (str(before), str(after)), f"chain {(time.perf_counter() - started) * 1000:.0f} ms"

    with gr.Blocks() as blocks:
        field = gr.Number(value=100, label="blend (%)")
        status = gr.Markdown(elem_id="preview-status")
        compare = gr.ImageSlider(type="filepath", elem_id="compare")
        field.input(render, [field], [compare, status], trigger_mode="always_last", queue=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    blocks.launch(server_port=port, prevent_thread_lock=True, quiet=True, allowed_paths=[str(folder)])
    try:
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.goto(f"http://127.0.0.1:{port}/")
        page.get_by_label("blend (%)").first.wait_for()
        render(0)  # the encoder warm
        return summarised(previews(page, repeats))
    finally:
        blocks.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", default="720p", choices=sorted(SIZES))
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: needs a chromium binary (apt-get install chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import expect, sync_playwright

    work = Path(tempfile.mkdtemp(prefix="facestudio-ui-bench-"))
    target = target_image(work, args.resolution)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    app = launch(UISettings(port=port), Studio(work_dir=work / "studio"), block=False)
    result: dict[str, object] = {"resolution": args.resolution, "repeats": args.repeats}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True, args=FLAGS)
            loads = []
            for _ in range(args.repeats + 1):  # the first load warms Gradio's static files: not counted
                context = browser.new_context(viewport={"width": 1440, "height": 900})
                page = context.new_page()
                page.goto(url)
                expect(page.locator("#run")).to_be_visible(timeout=60_000)
                expect(page.locator("#use-face_swapper")).to_be_visible(timeout=60_000)
                # Since navigation start, by the page's own clock (the driver's polling adds at most a frame).
                loads.append(page.evaluate("performance.now()") / 1000)
                context.close()
            result["page_ready_s"] = {"median": statistics.median(loads[1:]), "max": max(loads[1:])}

            page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
            page.goto(url)
            expect(page.locator("#run")).to_be_visible(timeout=60_000)
            page.locator("#sources input[type=file]").set_input_files(str(demo.source_photo()))
            page.locator("#target input[type=file]").set_input_files(str(target))
            status = page.locator("#preview-status")
            expect(status).to_contain_text("frame 0: chain", timeout=180_000)
            samples = previews(page, args.repeats)
            result["gradio_floor"] = floor(browser, work, target, args.repeats)
            browser.close()
    finally:
        app.close()
        shutil.rmtree(work, ignore_errors=True)
    result["preview"] = summarised(samples)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
