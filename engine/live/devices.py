"""Local cameras and local sinks for `launch.py live`: a camera number (OpenCV) or a video file played as a
camera; a desktop window (ffplay), a virtual camera (pyvirtualcam), or a folder of frames (the test sink)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Protocol

import cv2
import numpy as np

from engine.core.errors import InvalidInput, MediaError
from engine.core.types import Frame
from engine.live.loop import Processed
from engine.media import FrameReader, probe

log = logging.getLogger(__name__)


class Camera(Protocol):
    """A source of frames in real time: `frames()` yields (frame H×W×3 uint8 RGB, pts) as they come; `width`,
    `height` (pixels) and `fps` are what it says it gives."""

    name: str
    fps: float
    width: int
    height: int

    def frames(self) -> Iterator[tuple[Frame, int | None]]: ...

    def close(self) -> None: ...


class DeviceCamera:
    """A local camera by index (OpenCV: V4L2 on Linux, Media Foundation / DirectShow on Windows, AVFoundation on
    macOS), asked for `width`×`height` at `fps` (it may give another size or rate; `fps` becomes what it gives)."""

    def __init__(self, index: int, width: int | None = None, height: int | None = None, fps: float | None = None):
        self.name = f"camera {index}"
        # OpenCV logs each backend's failure to open a missing camera: the one-line error below says it instead.
        level = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
        try:
            self._capture = cv2.VideoCapture(index)
        finally:
            cv2.utils.logging.setLogLevel(level)
        if not self._capture.isOpened():
            self._capture.release()
            raise InvalidInput(
                f"camera {index} cannot be opened: no such camera, or another program is using it "
                "(try --camera 0, 1 …, or a video file as the camera)"
            )
        # One frame of buffering: the capture thread reads as fast as frames come, so none goes stale in there.
        asked = ((cv2.CAP_PROP_FRAME_WIDTH, width), (cv2.CAP_PROP_FRAME_HEIGHT, height), (cv2.CAP_PROP_FPS, fps),
                 (cv2.CAP_PROP_BUFFERSIZE, 1))  # fmt: skip
        for prop, value in asked:
            if value:
                self._capture.set(prop, float(value))
        given = self._capture.get(cv2.CAP_PROP_FPS)
        self.fps = float(given) if given and math.isfinite(given) and given > 0 else float(fps or 30.0)
        self.width = int(self._capture.get(cv2.CAP_PROP_FRAME_WIDTH)) or width or 640
        self.height = int(self._capture.get(cv2.CAP_PROP_FRAME_HEIGHT)) or height or 480

    def frames(self) -> Iterator[tuple[Frame, int | None]]:
        while True:
            ok, bgr = self._capture.read()
            if not ok:
                raise MediaError(f"{self.name} stopped sending frames (unplugged, or taken by another program)")
            yield cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), None

    def close(self) -> None:
        self._capture.release()


class FileCamera:
    """A video file played as a camera: its frames delivered in real time at its own rate (a slow chain makes the
    stream drop frames, as with a camera), once, or looping."""

    def __init__(self, path: Path, loop: bool = False) -> None:
        self.path = Path(path)
        info = probe(self.path)
        if info.kind != "video":
            raise InvalidInput(f"{self.path.name} is an image; --camera takes a camera number or a video file")
        self.name = self.path.name
        self.fps = info.fps or 30.0
        self.width, self.height = info.width, info.height
        self.info = info
        self.loop = loop
        self._stop = threading.Event()

    def frames(self) -> Iterator[tuple[Frame, int | None]]:
        start = time.monotonic()
        shown = 0
        while True:
            with FrameReader(self.path, self.info) as reader:
                for frame in reader:
                    # Frame `shown` is due at start + shown / fps: wait for it as a camera would deliver it.
                    delay = start + shown / self.fps - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        return
                    if self._stop.is_set():
                        return
                    yield frame, shown
                    shown += 1
            if not self.loop:
                return

    def close(self) -> None:
        self._stop.set()


def open_camera(
    spec: str, width: int | None = None, height: int | None = None, fps: float | None = None, *, loop: bool = False
) -> Camera:
    """`--camera`: a camera number (0, 1 …), asked for this size and rate, or a video file played as a camera at
    its own size and rate (`loop`: over and over)."""
    if spec.isdigit():
        return DeviceCamera(int(spec), width, height, fps)
    path = Path(spec)
    if not path.is_file():
        raise InvalidInput(f"--camera {spec}: not a camera number, and no such video file")
    return FileCamera(path, loop)


class FolderSink:
    """The test sink: each frame as `frame-NNNNNN.png` (its processed index) in `folder`, and one JSON line per
    frame in `frames.jsonl` (index, pts, faces, processing_ms, waited_ms, latency_ms)."""

    label: ClassVar[str] = "the frames folder"  # in the session's summary

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._log = (self.folder / "frames.jsonl").open("a", encoding="utf-8")

    def send(self, out: Processed) -> None:
        cv2.imwrite(str(self.folder / f"frame-{out.index:06d}.png"), cv2.cvtColor(out.frame, cv2.COLOR_RGB2BGR))
        line = {
            "index": out.index,
            "pts": out.pts,
            "faces": out.faces,
            "processing_ms": round(out.processing_ms, 2),
            "waited_ms": round(out.waited_ms, 2),
            "latency_ms": round(out.latency_ms, 2),
        }
        self._log.write(json.dumps(line) + "\n")
        self._log.flush()

    def close(self) -> None:
        self._log.close()


class WindowSink:
    """A desktop window showing the processed frames: ffplay (FFmpeg's player) reading raw frames from a pipe,
    shown as they come (its clock runs far ahead, so no frame waits for its time), reopened if the size changes.
    Closing the window sets `closed` (the CLI stops the stream then)."""

    label: ClassVar[str] = "the window"  # in the session's summary

    def __init__(self, title: str = "facestudio live", closed: threading.Event | None = None) -> None:
        self.title = title
        self.ffplay = shutil.which("ffplay")
        if self.ffplay is None:
            raise InvalidInput(
                "no window: ffplay (part of FFmpeg) is not on PATH; install FFmpeg with ffplay, or use "
                "--virtual-camera or --sink frames:FOLDER"
            )
        self.closed = closed or threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._size: tuple[int, int] | None = None

    def send(self, out: Processed) -> None:
        if self.closed.is_set():
            return
        height, width = out.frame.shape[:2]
        if self._process is None or self._size != (width, height):
            self.close()
            self._size = (width, height)
            self._process = subprocess.Popen(
                [self.ffplay, "-v", "error", "-hide_banner", "-window_title", self.title, "-autoexit",
                 "-fflags", "nobuffer", "-flags", "low_delay", "-framedrop", "-probesize", "32",
                 "-f", "rawvideo", "-pixel_format", "rgb24", "-video_size", f"{width}x{height}",
                 "-framerate", "1000", "-i", "-"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(np.ascontiguousarray(out.frame).data)
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):  # the window was closed (ffplay exited)
            self.closed.set()

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class VirtualCameraSink:
    """A virtual camera other programs (video calls, OBS) can pick (pyvirtualcam: v4l2loopback on Linux, OBS's
    virtual camera on Windows and macOS). Opened at the first frame's size; later frames are scaled to it."""

    label: ClassVar[str] = "the virtual camera"  # in the session's summary

    def __init__(self, fps: float, device: str | None = None) -> None:
        try:
            import pyvirtualcam
        except ImportError:
            raise InvalidInput("--virtual-camera needs pyvirtualcam: pip install '.[virtualcam]'") from None
        self._module = pyvirtualcam
        self.fps = fps
        self.device = device
        self._camera: Any = None

    def open(self, width: int, height: int) -> None:
        """Open the device now (the CLI does this before the stream starts, so a missing driver is said at once)."""
        try:
            self._camera = self._module.Camera(
                width, height, self.fps, fmt=self._module.PixelFormat.RGB, device=self.device
            )
        except RuntimeError as exc:
            raise InvalidInput(f"no virtual camera: {_first_line(exc)}; {virtual_camera_hint()}") from None
        log.info("virtual camera %s open at %d×%d", self._camera.device, width, height)

    @property
    def name(self) -> str:
        return str(self._camera.device) if self._camera is not None else ""

    def send(self, out: Processed) -> None:
        frame = out.frame
        if self._camera is None:
            self.open(frame.shape[1], frame.shape[0])
        size = (self._camera.width, self._camera.height)
        if (frame.shape[1], frame.shape[0]) != size:
            frame = cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
        self._camera.send(np.ascontiguousarray(frame))

    def close(self) -> None:
        if self._camera is not None:
            self._camera.close()
            self._camera = None


def virtual_camera_hint() -> str:
    """What to install for a virtual camera on this platform."""
    if os.name == "nt":
        return "install OBS Studio and start its virtual camera once (or install Unity Capture)"
    if platform.system() == "Darwin":
        return "install OBS Studio (28 or newer) and start its virtual camera once"
    return (
        "load the v4l2loopback kernel module, e.g. sudo apt install v4l2loopback-dkms && "
        "sudo modprobe v4l2loopback devices=1 exclusive_caps=1"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
