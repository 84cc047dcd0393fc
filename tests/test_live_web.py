"""Live mode over WebRTC (webui/live_rtc.py), with Python WebRTC clients (aiortc) instead of a browser: each session
gets back its own stream and nothing of another's, a stream starts only from its owner with its token (and the
login when there is one), the page's stamps and clock pings, recording with the microphone, stopping, and the
jitter buffer that hands a frame over at its last packet."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from aiortc import AudioStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription, VideoStreamTrack
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import HeaderExtensions, RtpPacket, unpack_header_extensions
from av import AudioFrame, VideoFrame
from fastapi import FastAPI

from engine import media as video
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.live import testcard
from processors import REGISTRY
from tests.conftest import audio_seconds
from webui.live_rtc import PLAYOUT_DELAY, LiveHub, MarkerJitterBuffer, ZeroPlayoutDelay, _play_at_once, routes
from webui.privacy import COOKIE, owner_from
from webui.studio import Session, Studio


class InvertOptions(ProcessorOptions):
    pass


class Invert(FrameProcessor[InvertOptions]):
    """A processor that needs no model: 255 − every pixel (what comes back tells whose frame it was)."""

    id = "invert"
    title = "Invert"
    Options = InvertOptions

    def process(self, frames: Sequence[np.ndarray], ctxs: Sequence[FrameContext]) -> list[np.ndarray]:
        return [255 - f for f in frames]


class FlipOptions(ProcessorOptions):
    pass


class Flip(FrameProcessor[FlipOptions]):
    """Upside down (what comes back tells which chain made it)."""

    id = "flip"
    title = "Flip"
    Options = FlipOptions

    def process(self, frames: Sequence[np.ndarray], ctxs: Sequence[FrameContext]) -> list[np.ndarray]:
        return [np.ascontiguousarray(f[::-1]) for f in frames]


INVERT = {"processors": ["invert"]}


class Server:
    """The live routes served on a free local port (uvicorn in a thread), around one hub."""

    def __init__(self, hub: LiveHub, auth: tuple[str, str] | None = None) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        app = FastAPI(routes=routes(hub, auth=auth))
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}/live/offer"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def studio(tmp_path: Path) -> Iterator[Studio]:
    studio = Studio({**REGISTRY, "invert": Invert, "flip": Flip}, work_dir=tmp_path / "work")
    yield studio
    studio.close()


@pytest.fixture
def hub(studio: Studio) -> Iterator[LiveHub]:
    hub = LiveHub(studio)
    yield hub
    hub.close()


@pytest.fixture
def server(hub: LiveHub) -> Iterator[Server]:
    served = Server(hub)
    yield served
    served.close()


def browser(studio: Studio) -> tuple[dict[str, str], Session]:
    """A browser's owner cookie and its session."""
    cookies = {COOKIE: secrets.token_hex(32)}
    return cookies, studio.session(owner_from(cookies, None))


class Colour(VideoStreamTrack):
    """A camera that films one colour, with the frame counter drawn in (15 fps, 320×240)."""

    def __init__(self, colour: tuple[int, int, int]) -> None:
        super().__init__()
        self.colour = colour
        self.sent = 0

    async def recv(self) -> VideoFrame:
        pts, _ = await self.next_timestamp()
        image = testcard.draw_counter(np.full((240, 320, 3), self.colour, np.uint8), self.sent)
        self.sent += 1
        frame = VideoFrame.from_ndarray(image, format="rgb24")
        frame.pts, frame.time_base = pts, Fraction(1, 90000)
        await asyncio.sleep(1 / 15 - 1 / 30)  # next_timestamp paces at 30 fps: half that
        return frame


class Tone(AudioStreamTrack):
    """A microphone that hears a 440 Hz tone."""

    def __init__(self) -> None:
        super().__init__()
        self.t = 0

    async def recv(self) -> AudioFrame:
        frame = await super().recv()
        samples = frame.samples
        tone = 0.3 * 32767 * np.sin(2 * np.pi * 440 * (self.t + np.arange(samples)) / frame.sample_rate)
        self.t += samples
        out = AudioFrame.from_ndarray(tone.astype(np.int16).reshape(1, -1), format="s16", layout="mono")
        out.sample_rate, out.pts, out.time_base = frame.sample_rate, frame.pts, frame.time_base
        return out


class Client:
    """A page's side of a stream: its camera (and microphone) out, the results and the data channel's messages
    in."""

    def __init__(self, colour: tuple[int, int, int], audio: bool = False) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.camera = Colour(colour)
        self.pc.addTransceiver(self.camera, direction="sendrecv")
        if audio:
            self.pc.addTransceiver(Tone(), direction="sendonly")
        self.channel = self.pc.createDataChannel("facestudio")
        self.messages: list[dict[str, Any]] = []
        self.channel.on("message", lambda text: self.messages.append(json.loads(text)))
        self.channel.on("open", lambda: self.channel.send(json.dumps({"t": "ping", "c": 12345.0})))
        self.received: list[np.ndarray] = []
        self.tasks: list[asyncio.Task[Any]] = []

        @self.pc.on("track")
        def on_track(track: Any) -> None:
            self.tasks.append(asyncio.ensure_future(self._read(track)))

    async def _read(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            self.received.append(frame.to_ndarray(format="rgb24"))

    async def offer(self, url: str, token: str, cookies: dict[str, str], auth: Any = None) -> httpx.Response:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        body = {"token": token, "sdp": self.pc.localDescription.sdp, "type": "offer"}
        async with httpx.AsyncClient(cookies=cookies, auth=auth) as http:
            response = await http.post(url, json=body, timeout=30)
        if response.status_code == 200:
            await self.pc.setRemoteDescription(RTCSessionDescription(**response.json()))
        return response

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await self.pc.close()


async def until(condition: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


def test_each_session_gets_back_its_own_stream_and_nothing_of_another(
    studio: Studio, hub: LiveHub, server: Server
) -> None:
    colours = {"a": (200, 40, 40), "b": (40, 40, 200)}
    browsers = {name: browser(studio) for name in colours}
    tokens = {name: hub.open(session, INVERT, [], fps=15).token for name, (_, session) in browsers.items()}

    async def scenario() -> dict[str, Client]:
        clients = {name: Client(colour) for name, colour in colours.items()}
        # Another browser's token is refused as an unknown one would be, and nothing connects.
        wrong = Client(colours["a"])
        refused = await wrong.offer(server.url, tokens["a"], browsers["b"][0])
        assert refused.status_code == 404 and "press Start in the Live tab again" in refused.json()["detail"]
        await wrong.close()
        for name, client in clients.items():
            response = await client.offer(server.url, tokens[name], browsers[name][0])
            assert response.status_code == 200, response.text
        await until(lambda: all(len(c.received) >= 20 for c in clients.values()))
        for _, session in browsers.values():
            stream = hub.of(session)
            assert stream is not None
            (receiver,) = [r for r in stream.pc.getReceivers() if r.track.kind == "video"]
            assert isinstance(receiver._RTCRtpReceiver__jitter_buffer, MarkerJitterBuffer)  # wired in
        # A token that has connected cannot connect again.
        again = Client(colours["a"])
        assert (await again.offer(server.url, tokens["a"], browsers["a"][0])).status_code == 404
        await again.close()
        await until(lambda: all(any(m["t"] == "s" for m in c.messages) for c in clients.values()))
        for client in clients.values():
            await client.close()
        return clients

    clients = asyncio.run(scenario())
    for name, client in clients.items():
        expected = 255 - np.array(colours[name])
        for frame in client.received:
            # Every frame that came back is this session's camera, inverted: its colour, its counter.
            assert np.abs(frame[100, 160].astype(int) - expected).max() < 24, name
        counters = [testcard.read_counter(255 - f) for f in client.received]
        readable = [n for n in counters if n is not None]
        assert len(readable) >= 15 and readable == sorted(readable) and len(set(readable)) == len(readable)
        stamps = [m for m in client.messages if m["t"] == "f"]
        assert stamps and all(m["faces"] == 0 and m["proc"] >= 0 for m in stamps)
        assert [m["pts"] for m in stamps] == sorted({m["pts"] for m in stamps})  # strictly increasing
        pong = next(m for m in client.messages if m["t"] == "pong")
        assert pong["c"] == 12345.0 and abs(pong["s"] - time.time() * 1000) < 120_000
        figures = next(m for m in reversed(client.messages) if m["t"] == "s")
        assert figures["state"] == "running" and figures["frames"] >= 10 and 0 <= figures["dropped"] < 1
        assert figures["cap"] >= 10  # the camera is asked for no more than the stream can use


def test_an_unknown_token_and_a_missing_login_are_refused(studio: Studio, hub: LiveHub, server: Server) -> None:
    cookies, session = browser(studio)
    token = hub.open(session, INVERT, [], fps=15).token
    guarded = Server(hub, auth=("ada", "secret"))

    async def scenario() -> None:
        for url, key, status in ((server.url, "not-a-token", 404), (guarded.url, token, 401)):
            client = Client((90, 90, 90))
            assert (await client.offer(url, key, cookies)).status_code == status
            await client.close()
        # Without the owner cookie there is no owner: refused like a stranger.
        client = Client((90, 90, 90))
        assert (await client.offer(server.url, token, {})).status_code == 404
        await client.close()

    try:
        asyncio.run(scenario())
    finally:
        guarded.close()
    assert hub.of(session) is not None  # still waiting for its own page


def test_a_recording_of_the_stream_has_the_microphone_and_stopping_ends_the_connection(
    studio: Studio, hub: LiveHub, server: Server, tmp_path: Path
) -> None:
    cookies, session = browser(studio)
    token = hub.open(session, INVERT, [], fps=15).token
    recording = None
    stopped: tuple[float, float] = (0.0, 0.0)  # how long it had recorded when asked to stop, and once it had

    async def scenario() -> None:
        nonlocal recording, stopped
        client = Client((30, 160, 60), audio=True)
        assert (await client.offer(server.url, token, cookies)).status_code == 200
        await until(lambda: len(client.received) >= 5)
        recorder = hub.start_recording(session, tmp_path, "take.mp4")
        await asyncio.sleep(2.5)
        asked = recorder.seconds
        recording = await asyncio.to_thread(hub.stop_recording, session)
        stopped = (asked, recorder.seconds)
        assert hub.of(session) is not None  # recording ended, the stream goes on
        await asyncio.to_thread(hub.stop, session)
        await until(lambda: client.pc.connectionState == "closed", 30)
        await client.close()

    asyncio.run(scenario())
    assert hub.of(session) is None
    # As long as it recorded: from its start to the moment it was stopped (to the next frame), however loaded the
    # machine is.
    assert recording is not None and recording.audio and 2.5 <= stopped[0] <= recording.seconds <= stopped[1] + 1 / 15
    with video.FrameReader(recording.output) as reader:
        frames = list(reader)
    assert len(frames) == recording.frames and all(np.abs(f[100, 160].astype(int) - (225, 95, 195)).max() < 30
                                                   for f in frames)  # fmt: skip
    assert abs(audio_seconds(recording.output) - recording.seconds) < 0.5
    sidecar = json.loads(recording.sidecar.read_text())
    assert sidecar["synthetic"] is True and sidecar["live"]["camera"] == "browser camera"
    assert video.read_video_metadata(recording.output)["synthetic"] == "true"


def packet(sequence: int, timestamp: int, marker: bool, data: bytes) -> RtpPacket:
    p = RtpPacket(payload_type=96, sequence_number=sequence, timestamp=timestamp, marker=int(marker))
    p._data = data  # type: ignore[attr-defined]  # what aiortc's receiver sets: the depayloaded bytes
    return p


def test_a_frame_is_handed_over_at_its_last_packet_not_at_the_next_frames_first() -> None:
    ours, aiortcs = MarkerJitterBuffer(capacity=512, is_video=True), JitterBuffer(capacity=512, is_video=True)
    frames = [(1000, [b"a1", b"a2", b"a3"]), (4000, [b"b1", b"b2"]), (7000, [b"c1"])]
    handed: dict[str, list[tuple[int, int, bytes]]] = {"ours": [], "aiortc's": []}
    sequence = 0
    for timestamp, parts in frames:
        for i, data in enumerate(parts):
            for name, buffer in (("ours", ours), ("aiortc's", aiortcs)):
                _, frame = buffer.add(packet(sequence, timestamp, i == len(parts) - 1, data))
                if frame is not None:
                    handed[name].append((sequence, frame.timestamp, frame.data))
            sequence += 1
    # Ours: each frame at its own last packet (sequence numbers 2, 4, 5); aiortc's: at the next frame's first.
    assert handed["ours"] == [(2, 1000, b"a1a2a3"), (4, 4000, b"b1b2"), (5, 7000, b"c1")]
    assert handed["aiortc's"] == [(3, 1000, b"a1a2a3"), (5, 4000, b"b1b2")]
    # A frame with a packet missing is not handed over at its marker.
    gappy = MarkerJitterBuffer(capacity=512, is_video=True)
    assert gappy.add(packet(10, 100, False, b"x"))[1] is None
    assert gappy.add(packet(12, 100, True, b"z"))[1] is None


def test_the_results_carry_a_zero_playout_delay_where_the_browser_offers_the_extension() -> None:
    async def answer(offer_extra: str) -> tuple[str, Any]:
        browser, server = RTCPeerConnection(), RTCPeerConnection()
        browser.addTransceiver("video", direction="sendrecv")
        await browser.setLocalDescription(await browser.createOffer())
        offer = browser.localDescription.sdp.replace("a=mid:0\r\n", f"a=mid:0\r\n{offer_extra}")
        await server.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        server.addTrack(VideoStreamTrack())
        _play_at_once(server, offer)
        await server.setLocalDescription(await server.createAnswer())
        (transceiver,) = server.getTransceivers()
        sender_map = transceiver.sender._RTCRtpSender__rtp_header_extensions_map
        sdp = server.localDescription.sdp
        await browser.close()
        await server.close()
        return sdp, sender_map

    sdp, sender_map = asyncio.run(answer(f"a=extmap:9 {PLAYOUT_DELAY}\r\n"))
    assert f"a=extmap:9 {PLAYOUT_DELAY}" in sdp and isinstance(sender_map, ZeroPlayoutDelay)
    # What each packet carries: the extensions aiortc writes, and the playout delay at 0 (min 0, max 0).
    sender_map.configure(RTCRtpParameters(headerExtensions=[
        RTCRtpHeaderExtensionParameters(id=1, uri="urn:ietf:params:rtp-hdrext:sdes:mid"),
        RTCRtpHeaderExtensionParameters(id=9, uri=PLAYOUT_DELAY),
    ]))  # fmt: skip
    assert unpack_header_extensions(*sender_map.set(HeaderExtensions(mid="0"))) == [(1, b"0"), (9, b"\x00\x00\x00")]
    # A browser that does not offer it gets an answer without it, and packets as aiortc makes them.
    sdp, sender_map = asyncio.run(answer(""))
    assert PLAYOUT_DELAY not in sdp and not isinstance(sender_map, ZeroPlayoutDelay)


def test_a_settings_change_applies_from_the_next_frame(studio: Studio, hub: LiveHub, server: Server) -> None:
    cookies, session = browser(studio)
    token = hub.open(session, INVERT, [], fps=15).token

    async def scenario() -> tuple[list[np.ndarray], int]:
        client = Client((200, 120, 40))
        assert (await client.offer(server.url, token, cookies)).status_code == 200
        await until(lambda: len(client.received) >= 5)
        assert await asyncio.to_thread(hub.update, session, {"processors": ["flip"]}, [])
        changed = len(client.received)
        await until(lambda: len(client.received) >= changed + 10)
        stream = hub.of(session)
        assert stream is not None and stream.loop.renderer.job.processors == ("flip",)  # the same stream
        await client.close()
        return client.received, changed

    received, changed = asyncio.run(scenario())
    inverted = [testcard.read_counter(255 - f) is not None for f in received]
    flipped = [testcard.read_counter(np.ascontiguousarray(f[::-1])) is not None for f in received]
    assert all(inverted[:5]) and not any(flipped[:5])
    # From some frame on (one in flight when it changed, at most a few), every frame is the new chain's.
    switch = flipped.index(True)
    assert switch <= changed + 3 and all(flipped[switch:]) and not any(inverted[switch:])


def test_a_recording_is_kept_when_the_page_goes_away_while_it_records(studio: Studio, tmp_path: Path) -> None:
    kept: list[Any] = []
    hub = LiveHub(studio, on_recorded=lambda session, recording: kept.append((session, recording)))
    served = Server(hub)
    cookies, session = browser(studio)
    token = hub.open(session, INVERT, [], fps=15).token

    async def scenario() -> None:
        client = Client((30, 160, 60))
        assert (await client.offer(served.url, token, cookies)).status_code == 200
        await until(lambda: len(client.received) >= 5)
        hub.start_recording(session, tmp_path, "take.mp4")
        await asyncio.sleep(1.5)
        await client.close()  # the tab is closed
        await until(lambda: hub.of(session) is None and bool(kept), 60)

    try:
        asyncio.run(scenario())
    finally:
        hub.close()
        served.close()
    ((owner, recording),) = kept
    assert owner is session and recording.output == tmp_path / "take.mp4" and recording.frames >= 15
    assert json.loads(recording.sidecar.read_text())["synthetic"] is True
