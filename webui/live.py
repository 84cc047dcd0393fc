"""The studio's Live tab: the camera view with its figures, the camera's size, the microphone, Start,
Stop and Record; handlers that open, update and end the session's stream (webui/live_rtc.py) and put its
recordings in the session's history. Built inside the page's `gr.Tab("Live")` (webui/page.py); its browser side is
webui/live.js."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import gradio as gr
import numpy as np
from fastapi.routing import APIRoute

from engine.core.errors import FacestudioError, InvalidInput
from engine.live.record import Recording
from engine.media import FrameReader
from webui.history import Entry
from webui.live_rtc import LiveHub, ice_servers, routes
from webui.names import output_name, scrub_file
from webui.parts import Page
from webui.privacy import owner_from
from webui.studio import Session, user_message

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SIZES = {"640×480": (640, 480), "1280×720": (1280, 720)}

INTRO = (
    "Swap faces on your camera as it films, with the source and settings of the studio (changes apply from the "
    "next frame). When the chain is slower than the camera, frames are dropped so the picture is never more than "
    "one processing time behind."
)

HTML = """
<div class="fs-live">
  <div class="fs-live-stage">
    <video class="fs-live-out" autoplay playsinline muted></video>
    <video class="fs-live-in" autoplay playsinline muted title="your camera"></video>
  </div>
  <div class="fs-live-bar">
    <label>camera <select class="fs-live-camera"><option value="">default camera</option></select></label>
    <span class="fs-live-stats">not streaming</span>
  </div>
</div>
"""

CSS = """
.fs-live-stage {position: relative; background: #111; border-radius: 6px; min-height: 240px;}
.fs-live-out {display: block; width: 100%; height: min(62vh, 540px); object-fit: contain;}
.fs-live-in {position: absolute; right: 8px; bottom: 8px; width: 22%; max-width: 200px; border: 1px solid #888;
             border-radius: 4px; background: #000;}
.fs-live-bar {display: flex; gap: 12px; align-items: center; flex-wrap: wrap; margin-top: 6px; font-size: .9rem;}
.fs-live-stats {font-variant-numeric: tabular-nums;}
.fs-live-camera {max-width: 16rem; padding: 2px 4px;}
.fs-live-stats.fs-warn {color: #b45309;}
"""


class LiveTab:
    """The Live tab's components and handlers; built inside the page's `gr.Tab("Live")` (webui/page.py)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio
        self.hub = LiveHub(page.studio, on_recorded=self._saved)

    def routes(self, auth: tuple[str, str] | None) -> list[APIRoute]:
        return routes(self.hub, auth=auth)

    def build(self) -> None:
        gr.Markdown(INTRO)
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=360):
                self.view = gr.HTML(
                    html_template=HTML, css_template=CSS, js_on_load=(HERE / "live.js").read_text(encoding="utf-8"),
                    elem_id="live-view", apply_default_css=False,
                )  # fmt: skip
            with gr.Column(scale=2, min_width=280):
                gr.Markdown("Streaming needs the responsible-use consent at the top of the page, for the people on "
                            "camera too.", min_height=0)  # fmt: skip
                self.size = gr.Radio(list(SIZES), value="640×480", label="camera resolution", elem_id="live-size")
                self.mic = gr.Checkbox(label="record the microphone's audio with the stream", elem_id="live-mic")
                with gr.Row():
                    self.start = gr.Button("Start", variant="primary", elem_id="live-start")
                    self.stop = gr.Button("Stop", variant="stop", elem_id="live-stop")
                self.record = gr.Button("Record", elem_id="live-record")
                self.status = gr.Markdown(elem_id="live-status")
                self.recorded = gr.File(
                    label="recording and job sidecar", file_count="multiple", visible=False, elem_id="live-downloads"
                )
        self.config = gr.Textbox(visible=False, elem_id="live-config")
        self._wire()

    def _wire(self) -> None:
        page = self.page
        settings = page.settings.components
        start = self.start.click(
            self.on_start, [page.consent, self.size, self.mic, page.inputs.sources, *settings],
            [self.config, self.status], concurrency_id="live", concurrency_limit=4,
        )  # fmt: skip
        start.then(None, [self.config], None, js="(config) => { window.facestudioLive?.start(config); }")
        self.stop.click(
            self.on_stop, [page.history.version],
            [self.status, self.recorded, self.record, page.history.version, self.config],
            js="(version) => { window.facestudioLive?.stop(); return version; }", concurrency_id="live",
        )  # fmt: skip
        self.record.click(
            self.on_record, [page.history.version], [self.status, self.recorded, self.record, page.history.version],
            concurrency_id="live",
        )  # fmt: skip

    # -- handlers ----------------------------------------------------------------------------------------------------
    def on_start(
        self, agreed: bool, size: str, mic: bool, sources: list[str] | None, request: gr.Request, *values: Any
    ) -> tuple[Any, str]:
        if not agreed:
            return gr.update(value=""), "tick the responsible-use notice (at the top of the page) before streaming"
        session = self._session(request)
        raw = self.page.raw(values)
        needs_source = [p for p in raw["processors"] if self.studio.registry[p].needs_source]
        if needs_source and not sources:
            return gr.update(value=""), "add a source face photo (Source faces, above) first"
        width, height = SIZES.get(size, SIZES["640×480"])
        fps = 30.0
        try:
            stream = self.hub.open(session, raw, sources or [], fps)
            ice = ice_servers()
        except Exception as exc:
            if not isinstance(exc, FacestudioError):
                log.exception("live start failed")
            return gr.update(value=""), f"<span class='fs-warn'>{user_message(exc, session.names)}</span>"
        config = {"token": stream.token, "width": width, "height": height, "fps": fps, "audio": bool(mic),
                  "ice": ice}  # fmt: skip
        return json.dumps(config), "streaming from this browser's camera (allow it when asked); Stop ends it"

    def on_stop(self, version: int, request: gr.Request) -> tuple[Any, ...]:
        session = self._session(request)
        try:
            recording = self.hub.stop(session)
        except Exception as exc:
            if not isinstance(exc, FacestudioError):
                log.exception("live stop failed")
            return (f"<span class='fs-warn'>{user_message(exc, session.names)}</span>", gr.update(),
                    gr.update(value="Record"), gr.update(), "")  # fmt: skip
        if recording is None:
            return "stopped", gr.update(), gr.update(value="Record"), gr.update(), ""
        files, text = self._saved(session, recording)
        return text, gr.update(value=files, visible=True), gr.update(value="Record"), version + 1, ""

    def on_record(self, version: int, request: gr.Request) -> tuple[Any, ...]:
        session = self._session(request)
        try:
            if self.hub.of(session) is None:
                return "start the stream first, then record", gr.update(), gr.update(), version
            recording = self.hub.stop_recording(session)
            if recording is None:
                folder = session.history.new_folder()
                name = output_name(time.strftime("live-%Y%m%d-%H%M%S"), ".mp4", set())
                self.hub.start_recording(session, folder, name)
                return "recording… (press Stop recording to write the file)", gr.update(), "Stop recording", version
        except Exception as exc:
            if not isinstance(exc, FacestudioError):
                log.exception("live recording failed")
            message = user_message(exc, session.names)
            return f"<span class='fs-warn'>recording: {message}</span>", gr.update(), "Record", version
        files, text = self._saved(session, recording)
        return text, gr.update(value=files, visible=True), "Record", version + 1

    def apply(self, session: Session, raw: dict[str, Any], sources: Sequence[str]) -> Any:
        """Apply the studio's settings (`raw`, the preset mapping) and `sources` to the session's stream from its
        next frame; the line for the Live tab's status, or `gr.skip()` when the session has no stream. The page's
        preview calls this, so every settings and source change reaches the stream with no request of its own."""
        if self.hub.of(session) is None:
            return gr.skip()
        try:
            self.hub.update(session, raw, sources)
        except Exception as exc:
            if not isinstance(exc, FacestudioError):
                log.exception("live settings change failed")
            return f"<span class='fs-warn'>the stream keeps its settings: {user_message(exc, session.names)}</span>"
        return "streaming: the new settings apply from the next frame"

    # -- helpers -----------------------------------------------------------------------------------------------------
    def _session(self, request: gr.Request) -> Session:
        """The session of the login or browser the request comes from (as the page's handlers find it)."""
        cookies = dict(getattr(request, "cookies", None) or {})
        return self.studio.session(owner_from(cookies, getattr(request, "username", None)))

    def _saved(self, session: Session, recording: Recording) -> tuple[list[str], str]:
        """A finished recording in the session's history (thumbnail, summary, settings) and shared with it: the
        files for the page and a line about it. Its sidecar names no server path."""
        folder = recording.output.parent
        known = {**session.names, str(recording.output): recording.output.name, str(folder): "",
                 str(folder.resolve()): ""}  # fmt: skip
        scrub_file(recording.sidecar, known)
        data = json.loads(recording.sidecar.read_text(encoding="utf-8"))
        thumb = folder / "thumbnail.jpg"
        frame = _middle_frame(recording)
        small = cv2.resize(frame, (240, max(1, round(frame.shape[0] * 240 / frame.shape[1]))), cv2.INTER_AREA)
        cv2.imwrite(str(thumb), cv2.cvtColor(small, cv2.COLOR_RGB2BGR))
        job = data["job"]
        text = (
            f"recorded {recording.seconds:.1f} s at {recording.size[0]}×{recording.size[1]}, "
            f"{data['live']['frames_processed']} frames processed ({data['live']['processed_fps']:.1f} fps), "
            f"{'with' if recording.audio else 'no'} audio — tagged synthetic"
        )
        settings = self.studio.without_files({k: v for k, v in job.items() if k != "sources"})
        entry = Entry(
            id=folder.name, created=time.time(), folder=str(folder), output=str(recording.output),
            sidecar=str(recording.sidecar), thumbnail=str(thumb), target="browser camera",
            sources=tuple(Path(s).name for s in job.get("sources", [])), processors=tuple(job["processors"]),
            summary=text, settings=settings,
        )  # fmt: skip
        for dropped in session.history.add(entry):
            self.studio.guard.release(session.owner, [dropped.output, dropped.sidecar, dropped.thumbnail or ""])
        files = [self.studio.share(session, recording.output), self.studio.share(session, recording.sidecar)]
        return files, text


def _middle_frame(recording: Recording) -> np.ndarray:
    """The recording's middle frame, H×W×3 uint8 RGB."""
    with FrameReader(recording.output) as reader:
        for i, frame in enumerate(reader):
            if i >= recording.frames // 2:
                return frame
    raise InvalidInput(f"{recording.output.name} cannot be read back")
