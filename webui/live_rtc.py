"""The Live tab's transport: the browser's camera to the server over WebRTC (aiortc), each frame into a live loop
(engine/live: newest wins, tracker kept from frame to frame), and the result back over the same connection.

    browser (webui/live.js)                          server (aiortc, on the app's event loop)
    getUserMedia ─ video (+ microphone) ─► RTCPeerConnection ─► LatestFrame ─► LiveLoop ─► ResultTrack ─┐
    <video> ◄──────────────── result ─────────────────────────────────────────────────────────────────┘
    stats line ◄─ data channel: each result's stamp; figures twice a second; clock pings; why a stream ended

WebRTC is aiortc with a page of our own (fastrtc 0.0.34, the current release, requires gradio < 6 and its
component does not load in Gradio 6: see docs/guide/live.md). Signalling is one route, `POST /live/offer`, next to
Gradio's on the same port.

What the studio guards holds here too: a stream is opened only by the Live tab's Start (webui/live.py), which
refuses without the consent tick; Start gives the page a one-time secret (the stream's token) that `/live/offer`
accepts from the same owner only (the same browser's owner cookie, and the same login with one; with a login, a request
without it gets 401), and another session's token is answered 404 like an unknown one. Every stream has its own
loop, renderer (tracker) and result track: nothing one session sends reaches another. A stream is built with the
session's `Access` (its own source photos and reference face, the server's settings: engine/serve/service.py), and
its recording goes into the session's own folder and history, shared with it alone. At most one stream per
session (a new Start replaces it) and `max_streams` at once (`ui --live-streams`).

Latency on the page: the server stamps every result with the time its input arrived (its clock) and the
processing time; the page maps each frame it shows back to its stamp (RTP timestamps), converts the server's
clock to its own (ping/pong, least round trip kept), and adds the camera → server leg from WebRTC's statistics
(the encoder's time per frame and half the round trip). benchmarks/live.py checks this figure against the truth:
a frame counter drawn into the camera's frames and read back from the results.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import (
    HeaderExtensions,
    HeaderExtensionsMap,
    RtpPacket,
    pack_header_extensions,
    unpack_header_extensions,
)
from aiortc.sdp import SessionDescription
from av import VideoFrame
from av.audio.resampler import AudioResampler
from fastapi import APIRouter, HTTPException, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field

from engine.core.errors import FacestudioError, InvalidInput
from engine.live.faces import track_live
from engine.live.loop import Captured, LiveLoop, Processed, SinkThread
from engine.live.record import Recorder, Recording
from webui.privacy import _gradio_user, owner_from
from webui.studio import Session, Studio

log = logging.getLogger(__name__)

# WebRTC's clock for video: 90 kHz.
_VIDEO_TIME_BASE = Fraction(1, 90000)
# A stream whose page never sent its offer is forgotten after this many seconds.
_OFFER_WAIT_S = 60.0
# How often the page is sent the stream's figures (seconds).
_FIGURES_EVERY_S = 0.5
# The camera sends at most this many frames per processed frame, and at least _CAP_MIN_FPS a second.
_CAP_PER_PROCESSED = 2.5
_CAP_MIN_FPS = 10


def ice_servers() -> list[dict[str, Any]]:
    """The STUN/TURN servers both ends use, from $FACESTUDIO_ICE_SERVERS (JSON: a list of {"urls", "username",
    "credential"}); none by default: the browser reaches the server directly (this machine, a LAN, a VPN)."""
    text = os.environ.get("FACESTUDIO_ICE_SERVERS", "").strip()
    if not text:
        return []
    try:
        servers = json.loads(text)
    except ValueError:
        raise InvalidInput('FACESTUDIO_ICE_SERVERS is not JSON: give a list of {"urls": …} objects') from None
    if not isinstance(servers, list) or not all(isinstance(s, dict) and "urls" in s for s in servers):
        raise InvalidInput('FACESTUDIO_ICE_SERVERS must be a JSON list of {"urls": …} objects')
    return servers


def _rgb(frame: Any) -> np.ndarray:
    """A decoded WebRTC frame (av.VideoFrame) as H×W×3 uint8 RGB."""
    return frame.to_ndarray(format="rgb24")


class InputLag:
    """How far behind the camera the decoded frames reach the server (ms): arrival time against the frame's RTP
    timestamp (90 kHz, the browser's capture clock), relative to the least difference seen. It grows when frames
    wait to be decoded — before the newest-wins mailbox, where nothing can be dropped."""

    def __init__(self) -> None:
        self.ms = 0.0
        self._base: float | None = None
        self._last: int | None = None
        self._wraps = 0

    def frame(self, arrived: float, pts: int | None) -> None:
        if pts is None:
            return
        if self._last is not None and pts < self._last - (1 << 31):
            self._wraps += 1  # the 32-bit RTP timestamp wrapped
        self._last = pts
        difference = arrived - (pts + (self._wraps << 32)) / 90000
        self._base = difference if self._base is None else min(self._base, difference)
        self.ms = (difference - self._base) * 1000


@dataclass
class WebStream:
    """One browser's live stream: its render loop, the WebRTC connection once the page has sent its offer, the
    output track, the data channel, and the recording if one is running. `token`: the one-time secret the page
    connects with; `owner`: the session's owner id."""

    token: str
    session: Session
    loop: LiveLoop
    camera_fps: float
    created: float = field(default_factory=time.monotonic)
    pc: Any = None
    event_loop: asyncio.AbstractEventLoop | None = None
    channel: Any = None
    output: Any = None
    recorder: Recorder | None = None
    recorder_thread: SinkThread | None = None
    lag: InputLag = field(default_factory=InputLag)
    claimed: bool = False  # the page's offer came (a second one with the same token is refused)
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return self.session.owner.id

    # -- frames out (the loop's thread) ---------------------------------------------------------------------------
    def emit(self, out: Processed) -> None:
        """A result: to the recorder, and to the browser with its stamp (converted here, off the event loop)."""
        recorder = self.recorder_thread
        if recorder is not None:
            recorder.send(out)
        if self.event_loop is None or self.output is None:
            return
        frame = VideoFrame.from_ndarray(np.ascontiguousarray(out.frame), format="rgb24").reformat(format="yuv420p")
        arrived = time.time() - (time.monotonic() - out.arrived)
        stamp = {"t": "f", "arrived": arrived * 1000, "proc": round(out.processing_ms, 1),
                 "wait": round(out.waited_ms, 1), "queued": round((out.started - out.arrived) * 1000, 1),
                 "faces": out.faces}  # fmt: skip
        with contextlib.suppress(RuntimeError):  # the event loop has closed: the server is stopping
            self.event_loop.call_soon_threadsafe(self.output.put, frame, stamp, out.done)

    def send(self, message: dict[str, Any]) -> None:
        """A message to the page over the data channel (on the event loop; dropped when it is not open)."""
        channel = self.channel
        if channel is not None and channel.readyState == "open":
            with contextlib.suppress(Exception):  # the channel closed meanwhile: the page is going away
                channel.send(json.dumps(message))

    def figures(self) -> dict[str, Any]:
        """The stream's figures for the page, with `cap`: the frame rate the page's camera should send at most."""
        f = self.loop.figures()
        recording = self.recorder.seconds if self.recorder is not None else None
        # Frames beyond a few per processed one are decoded only to be dropped: the camera's encoder, the network
        # and the server's decoder (all frames must be decoded) spend CPU the chain could use.
        cap = None if f.fps <= 0 else max(_CAP_MIN_FPS, math.ceil(_CAP_PER_PROCESSED * f.fps))
        return {"t": "s", "fps": round(f.fps, 2), "in": round(f.input_fps, 2), "dropped": round(f.dropped, 3),
                "proc": round(f.processing_ms, 1), "lat": round(f.latency_ms, 1), "lag": round(self.lag.ms, 1),
                "state": f.state, "frames": f.frames, "recording": recording, "cap": cap}  # fmt: skip

    # -- the connection (the event loop) --------------------------------------------------------------------------
    async def connect(
        self, sdp: str, kind: str, ice: Sequence[Mapping[str, Any]], on_closed: Callable[[WebStream], None]
    ) -> dict[str, str]:
        """Answer the page's offer (SDP `sdp` of type `kind`): receive its camera (and microphone), send the results
        back; `on_closed(stream)` once the connection fails or closes."""
        self.event_loop = asyncio.get_running_loop()
        self.pc = pc = RTCPeerConnection(RTCConfiguration(iceServers=[RTCIceServer(**s) for s in ice]))
        self.output = ResultTrack(self.send)

        @pc.on("datachannel")
        def on_channel(channel: Any) -> None:
            self.channel = channel

            @channel.on("message")
            def on_message(text: Any) -> None:
                self._on_message(text)

        @pc.on("track")
        def on_track(track: Any) -> None:
            if track.kind == "video":
                _hand_over_at_marker(next(t.receiver for t in pc.getTransceivers() if t.receiver.track is track))
                pc.addTrack(self.output)
                self._tasks.append(asyncio.ensure_future(self._receive_video(track)))
            elif track.kind == "audio":
                self._tasks.append(asyncio.ensure_future(self._receive_audio(track)))

        @pc.on("connectionstatechange")
        async def on_state() -> None:
            if pc.connectionState in ("failed", "closed"):
                on_closed(self)

        await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type=kind))
        _play_at_once(pc, sdp)
        await pc.setLocalDescription(await pc.createAnswer())
        self._tasks.append(asyncio.ensure_future(self._report()))
        return {"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}

    def _on_message(self, text: Any) -> None:
        try:
            message = json.loads(text)
        except (TypeError, ValueError):
            return
        if isinstance(message, dict) and message.get("t") == "ping":
            self.send({"t": "pong", "c": message.get("c"), "s": time.time() * 1000})

    async def _receive_video(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            now = time.monotonic()
            self.lag.frame(now, frame.pts)
            self.loop.submit(Captured(frame, now, frame.pts, _rgb))

    async def _receive_audio(self, track: Any) -> None:
        """The microphone: resampled to mono 48 kHz and recorded while a recording runs (read always: unread
        frames would pile up in aiortc)."""
        resampler = AudioResampler(format="s16", layout="mono", rate=48000)
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            recorder = self.recorder
            if recorder is None:
                continue
            arrived = time.monotonic()
            for mono in resampler.resample(frame):
                recorder.add_audio(mono.to_ndarray().reshape(-1), arrived)

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(_FIGURES_EVERY_S)
            self.send(self.figures())

    async def close(self) -> None:
        """Close the connection (the loop and the recording are ended by the hub, off the event loop)."""
        for task in self._tasks:
            task.cancel()
        if self.pc is not None:
            await self.pc.close()


class MarkerJitterBuffer(JitterBuffer):
    """aiortc's video jitter buffer hands a frame to the decoder when the first packet of the next one arrives, a
    whole camera frame late (33 ms at 30 fps, 67 at 15). This one also hands it over at its last packet — the RTP
    marker bit, which browsers set on the last packet of a video frame — once every packet from its first one is
    there; otherwise (a packet lost or late) aiortc's own rule applies."""

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        pli, frame = super().add(packet)
        if frame is None and packet.marker:
            frame = self._ending_with(packet)
        return pli, frame

    def _ending_with(self, last: RtpPacket) -> JitterFrame | None:
        packets = []
        for count in range(self.capacity):
            packet = self._packets[(self._origin + count) % self.capacity]  # type: ignore[operator]
            if packet is None or packet.timestamp != last.timestamp:
                return None
            packets.append(packet)
            if packet is last:
                self.remove(count + 1)
                return JitterFrame(b"".join(p._data for p in packets), last.timestamp)  # type: ignore[attr-defined]
        return None


def _hand_over_at_marker(receiver: Any) -> None:
    """Give a video receiver the MarkerJitterBuffer (aiortc keeps its buffer in a private attribute: when a later
    aiortc renames it, the stream works as before, one frame later)."""
    name = "_RTCRtpReceiver__jitter_buffer"
    if isinstance(getattr(receiver, name, None), JitterBuffer):
        setattr(receiver, name, MarkerJitterBuffer(capacity=512, is_video=True))
    else:
        log.info("aiortc's jitter buffer was not found; live frames reach the server one camera frame later")


PLAYOUT_DELAY = "http://www.webrtc.org/experiments/rtp-hdrext/playout-delay"


class ZeroPlayoutDelay(HeaderExtensionsMap):
    """aiortc's header extensions, and on every packet the playout-delay extension with a minimum and maximum of 0
    (3 bytes: two 12-bit delays in 10 ms units): the browser then decodes and shows each frame as soon as it is
    whole, instead of holding it in its jitter buffer for a target delay (measured ≈ 31 ms a frame here, with
    `jitterBufferTarget = 0` asked for: that is only the minimum). The RTP timestamps are the times frames are
    sent (ResultTrack), so nothing would be gained by smoothing their playout."""

    def __init__(self) -> None:
        super().__init__()
        self._id: int | None = None

    def configure(self, parameters: RTCRtpParameters) -> None:
        super().configure(parameters)
        self._id = next((e.id for e in parameters.headerExtensions if e.uri == PLAYOUT_DELAY), None)

    def set(self, values: HeaderExtensions) -> tuple[int, bytes]:
        profile, data = super().set(values)
        if self._id is None:
            return profile, data
        return pack_header_extensions([*unpack_header_extensions(profile, data), (self._id, b"\x00\x00\x00")])


def _play_at_once(pc: RTCPeerConnection, offer: str) -> None:
    """Negotiate the playout-delay extension for the results' video where the browser offers it, and send it as
    ZeroPlayoutDelay. aiortc neither knows this extension nor exposes where it keeps a transceiver's extensions
    and a sender's map (private attributes): when a later aiortc moves them, the stream works as before, with the
    browser's own playout delay."""
    offered = {}
    for index, media in enumerate(SessionDescription.parse(offer).media):
        ids = [e.id for e in media.rtp.headerExtensions if e.uri == PLAYOUT_DELAY]
        if media.kind == "video" and ids:
            offered[index] = ids[0]
    mapped = 0
    for transceiver in pc.getTransceivers():
        index = getattr(transceiver, "_get_mline_index", lambda: None)()
        extensions = getattr(transceiver, "_headerExtensions", None)
        name = "_RTCRtpSender__rtp_header_extensions_map"
        if index not in offered or not isinstance(extensions, list) or not hasattr(transceiver.sender, name):
            continue
        extensions.append(RTCRtpHeaderExtensionParameters(id=offered[index], uri=PLAYOUT_DELAY))
        setattr(transceiver.sender, name, ZeroPlayoutDelay())
        mapped += 1
    if offered and not mapped:
        log.info("aiortc's header extensions were not found; the browser holds live results for its playout delay")


class ResultTrack(MediaStreamTrack):
    """The video track sent back: the newest result (one the encoder has not taken yet is replaced). Each frame is
    timestamped when the encoder takes it (90 kHz, strictly increasing), so its RTP timestamps follow the times
    frames are sent and the browser's jitter buffer, seeing no jitter, holds nothing back; its stamp goes to the
    page (`stamped`) with that timestamp and `handover`: the ms from the result's end (`done`, monotonic s) to the
    encoder taking it, for the page to find it again."""

    kind = "video"

    def __init__(self, stamped: Callable[[dict[str, Any]], None]) -> None:
        super().__init__()
        self._stamped = stamped
        self._queue: asyncio.Queue[tuple[Any, dict[str, Any], float]] = asyncio.Queue(maxsize=1)
        self._t0: float | None = None
        self._pts = -1

    def put(self, frame: Any, stamp: dict[str, Any], done: float) -> None:
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait((frame, stamp, done))

    async def recv(self) -> Any:
        frame, stamp, done = await self._queue.get()
        now = time.monotonic()
        self._t0 = now if self._t0 is None else self._t0
        self._pts = max(round((now - self._t0) * 90000), self._pts + 1)
        frame.pts, frame.time_base = self._pts, _VIDEO_TIME_BASE
        self._stamped({**stamp, "pts": self._pts, "handover": round((now - done) * 1000, 1)})
        return frame


class LiveHub:
    """Every live stream of the server (thread-safe): at most one per session, `max_streams` at once."""

    def __init__(
        self, studio: Studio, max_streams: int = 4, on_recorded: Callable[[Session, Recording], Any] | None = None
    ) -> None:
        """`on_recorded(session, recording)`: told of a recording written because its stream ended on its own (the
        page went away, Start again, the server stopping); the page's own Stop and Stop recording return theirs."""
        self.studio = studio
        self.service = studio.service
        self.max_streams = max_streams
        self.on_recorded = on_recorded
        self._streams: dict[str, WebStream] = {}
        self._lock = threading.Lock()

    # -- from the page's handlers (worker threads) -----------------------------------------------------------------
    def open(self, session: Session, raw: dict[str, Any], sources: Sequence[str], fps: float) -> WebStream:
        """A stream for the session, ready for its page's offer (the session's previous stream is stopped). The
        renderer is built here (models load, the source face is analysed): typed errors say what is wrong."""
        previous = self.of(session)
        if previous is not None:
            self._end(previous, "Start was pressed again (in this or another tab of this session)")
        self._forget_unconnected()
        with self._lock:
            if len(self._streams) >= self.max_streams:
                raise InvalidInput(
                    f"the server is already streaming for {len(self._streams)} sessions (at most "
                    f"{self.max_streams} at once, ui --live-streams); try again when one has stopped"
                )
        with self.service.model_lock.brief():
            renderer = self.service.live_renderer(
                raw, [Path(s) for s in sources], fps=fps, access=self.studio.access(session)
            )
            track_live(renderer, fps)  # loads the live detections' analyser now, not on the first frame
        loop = LiveLoop(renderer, self.service.model_lock, lambda out: None, fps=fps,
                        max_pixels=renderer.job.runtime.max_pixels)  # fmt: skip
        stream = WebStream(secrets.token_urlsafe(32), session, loop, fps)
        loop.emit = stream.emit
        loop.start()
        with self._lock:
            self._streams[stream.token] = stream
        return stream

    def of(self, session: Session) -> WebStream | None:
        with self._lock:
            return next((s for s in self._streams.values() if s.owner == session.owner.id), None)

    def update(self, session: Session, raw: dict[str, Any], sources: Sequence[str]) -> bool:
        """Apply changed settings to the session's stream from its next frame; False when it has none."""
        stream = self.of(session)
        if stream is None:
            return False
        with self.service.model_lock.brief():
            current = stream.loop.renderer
            renderer = self.service.live_update(
                current, raw, [Path(s) for s in sources], fps=stream.loop.fps, access=self.studio.access(session)
            )
        if renderer is not current:
            stream.loop.replace(renderer)
        if stream.recorder is not None:
            stream.recorder.job = renderer.job  # its sidecar names the settings it ended with
        return True

    def start_recording(self, session: Session, folder: Path, name: str) -> Recorder:
        stream = self.of(session)
        if stream is None:
            raise InvalidInput("start the stream first, then record")
        if stream.recorder is not None:
            return stream.recorder
        renderer = stream.loop.renderer
        processors = {p.id: p.describe() for p in renderer.chain}
        stream.recorder = Recorder(folder / name, stream.camera_fps, renderer.job, "browser camera", processors)
        stream.recorder_thread = SinkThread(stream.recorder, "live-recorder")
        return stream.recorder

    def stop_recording(self, session: Session) -> Recording | None:
        """End the session's recording and write it (None when none runs)."""
        stream = self.of(session)
        return self._finish_recording(stream) if stream is not None else None

    def stop(self, session: Session) -> Recording | None:
        """Stop the session's stream and write its recording (returned; a recording that cannot be written raises,
        once the stream has stopped)."""
        stream = self.of(session)
        if stream is None:
            return None
        try:
            return self._finish_recording(stream)
        finally:
            self._end(stream, "stopped")

    def forget(self, owners: Sequence[str]) -> None:
        """The sessions of these owners expired: their streams stop, and recordings in progress are discarded
        (their folders go with the session)."""
        with self._lock:
            gone = [s for s in self._streams.values() if s.owner in owners]
        for stream in gone:
            recorder, thread = stream.recorder, stream.recorder_thread
            stream.recorder = stream.recorder_thread = None
            if recorder is not None and thread is not None:
                thread.close()
                recorder.abort()
            self._end(stream, "this session expired")

    def close(self) -> None:
        """Stop every stream (the server is stopping); recordings in progress are written."""
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            with contextlib.suppress(Exception):  # one stream failing to close must not keep the others open
                self._end(stream, "the server is stopping")

    # -- from the offer route (the event loop) ----------------------------------------------------------------------
    def claim(self, token: str, owner: str | None) -> WebStream | None:
        """The stream waiting for this token's offer, if `owner` is its owner; it is taken (once only)."""
        with self._lock:
            stream = self._streams.get(token)
        if stream is None or owner is None or not secrets.compare_digest(stream.owner, owner) or stream.claimed:
            return None
        stream.claimed = True
        return stream

    def closed(self, stream: WebStream) -> None:
        """The connection failed or was closed (the page went away): end the stream off the event loop."""
        threading.Thread(target=self._end, args=(stream, "the connection closed"), name="facestudio-live-end",
                         daemon=True).start()  # fmt: skip

    # -- ending ------------------------------------------------------------------------------------------------------
    def _end(self, stream: WebStream, reason: str) -> None:
        """End a stream: its loop, its recording (written, `on_recorded`), its connection (the page is told
        `reason` first)."""
        with self._lock:
            if self._streams.get(stream.token) is not stream:
                return
            del self._streams[stream.token]
        if stream.event_loop is not None and not stream.event_loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the event loop has closed meanwhile
                stream.event_loop.call_soon_threadsafe(stream.send, {"t": "end", "reason": reason})
        stream.loop.stop()
        try:
            recording = self._finish_recording(stream)
            if recording is not None and self.on_recorded is not None:
                self.on_recorded(stream.session, recording)
        except Exception as exc:  # the stream ends whatever became of its recording
            if not isinstance(exc, FacestudioError):
                log.exception("a live recording could not be kept")
            log.info("live recording not kept: %s", exc)
        _close_connection(stream)

    def _finish_recording(self, stream: WebStream) -> Recording | None:
        recorder, thread = stream.recorder, stream.recorder_thread
        if recorder is None or thread is None:
            return None
        stream.recorder = stream.recorder_thread = None
        thread.close()
        try:
            return recorder.finish()
        except BaseException:
            with contextlib.suppress(OSError):  # the folder made for it, when nothing else is in there
                recorder.output.parent.rmdir()
            raise

    def _forget_unconnected(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [s for s in self._streams.values() if not s.claimed and now - s.created > _OFFER_WAIT_S]
        for stream in stale:
            self._end(stream, "the page never connected")


def _close_connection(stream: WebStream) -> None:
    """Close the stream's connection on its event loop: waited for from another thread, scheduled from the loop's
    own (the server is stopping)."""
    loop = stream.event_loop
    if loop is None or loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.create_task(stream.close())
        return
    future = asyncio.run_coroutine_threadsafe(stream.close(), loop)
    with contextlib.suppress(Exception):  # the loop stopped meanwhile: the connection went with it
        future.result(10)


class Offer(BaseModel):
    """What the page sends to start its stream: the token Start gave it and its WebRTC offer."""

    token: str = Field(max_length=128)
    sdp: str = Field(max_length=60_000)
    type: str = Field(pattern="^offer$")


def routes(hub: LiveHub, *, auth: tuple[str, str] | None) -> list[APIRoute]:
    """`POST /live/offer`: the page's offer for the stream its Start made → the server's answer (JSON
    {"sdp", "type"}). 401 without the login when the app has one; 404 for a token that is unknown, of another
    owner, already connected or expired."""
    router = APIRouter()

    @router.post("/live/offer", max_body_size=1 << 16)
    async def offer(request: Request, body: Offer) -> dict[str, str]:
        cookies = dict(request.cookies)
        user = _gradio_user(request.scope, cookies)
        if auth is not None and user is None:
            raise HTTPException(401, "log in first (open the studio and sign in)")
        stream = hub.claim(body.token, getattr(owner_from(cookies, user), "id", None))
        if stream is None:
            raise HTTPException(404, "no live stream waits for this page: press Start in the Live tab again")
        try:
            return await stream.connect(body.sdp, body.type, ice_servers(), hub.closed)
        except Exception as exc:
            hub.closed(stream)
            raise HTTPException(400, f"the browser's offer could not be answered: {exc}") from None

    return [r for r in router.routes if isinstance(r, APIRoute)]
