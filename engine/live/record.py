"""Recording a live stream: the processed frames (and the microphone's audio) to a video file, tagged synthetic
like every output: container tags, signed C2PA Content Credentials, the watermark when `video.watermark` is on,
and its `.job.json` sidecar."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import tempfile
import threading
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from engine.core.errors import InvalidInput
from engine.core.types import Frame
from engine.job.settings import Job
from engine.live.loop import Processed, percentile
from engine.media import FrameTimes, FrameWriter, join_segments, output_rate
from engine.media.commands import Audio, muxer_for
from engine.models.fetch import sha256_file
from engine.provenance import credentials, keys, watermark
from engine.run.sidecar import VERSION, sidecar_path, synthetic_metadata

# A gap in the microphone's audio longer than this (seconds) is filled with silence; shorter ones are jitter.
_AUDIO_GAP_S = 0.1


@dataclass(frozen=True)
class Recording:
    """A finished recording: the video file (H.264 or HEVC, with AAC audio when the microphone was recorded), its
    sidecar, its frames, length (s), whether it has audio, and its frame size (pixels, before even-size padding)."""

    output: Path
    sidecar: Path
    frames: int
    seconds: float
    audio: bool
    size: tuple[int, int]


class Recorder:
    """Records a live stream's processed frames, and the microphone, to `output` (.mp4, .mkv or .mov).

    Video at `fps` frames per second: output frame k shows the newest processed frame whose input arrived by
    `start + k / fps`, so the recording keeps the stream's real timing (a frame repeats until the next one is
    processed) and never holds an unprocessed frame. Frames of another size than the first are scaled to it.
    Audio: mono 16-bit samples at `audio_rate`, placed by their arrival time (a gap is filled with silence), so
    picture and sound stay together. Encoded with the job's video encoder (`auto` resolved by the writer) and CRF at
    the `veryfast` preset (it runs in real time). Signed with `signing` (else `keys.resolve()`: checked here,
    before anything records), its ingredients the sources; an .mkv cannot carry credentials and is written without
    them, as a run's is. Nothing appears at `output` until `finish` has written it whole with its sidecar; `abort`,
    or a failure, leaves nothing behind.

    A Sink (`send`) for a SinkThread: a slow encoder makes it skip processed frames, never slows the stream.
    `clock`: seconds, the clock the frames' and the audio's arrival times are given in (`time.monotonic`)."""

    def __init__(
        self,
        output: Path,
        fps: float,
        job: Job,
        camera: str,
        processors: dict[str, dict[str, Any]],
        *,
        audio_rate: int = 48000,
        signing: keys.SigningKey | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.output = Path(output)
        muxer_for(self.output)  # an extension that cannot hold the video fails now, not at the end
        if not self.output.parent.is_dir():
            raise InvalidInput(f"cannot record to {self.output.name}: its folder does not exist")
        self.key = signing or keys.resolve()
        credentials.check_key(self.key)
        self.ingredients = tuple(
            credentials.Ingredient(f"source {i}", credentials.FORMATS.get(p.suffix.lower()), sha256_file(p), "inputTo")
            for i, p in enumerate(job.sources, 1)
        )
        self._mark = watermark.marker(job.video.watermark)
        self.rate = output_rate(fps)
        self.job = job
        self.camera = camera
        self.processors = processors
        self.audio_rate = audio_rate
        self.clock = clock
        self.start = clock()
        self.started_at = datetime.now(UTC)
        self._work = Path(tempfile.mkdtemp(prefix=".facestudio-live-", dir=self.output.parent))
        self._writer: FrameWriter | None = None
        self._size: tuple[int, int] | None = None
        self._current: Frame | None = None
        self._written = 0
        self._processed = 0
        self._faces = 0
        self._latency: list[float] = []
        self._wav: wave.Wave_write | None = None
        self._samples = 0
        self._lock = threading.Lock()
        self._done = False

    @property
    def seconds(self) -> float:
        return self.clock() - self.start

    def send(self, out: Processed) -> None:
        """A processed frame: the slots up to its input's arrival show the one before it, then it is current."""
        with self._lock:
            if self._done or out.arrived < self.start:
                return
            frame = out.frame
            if self._writer is None:
                self._size = (frame.shape[1], frame.shape[0])
                self._writer = FrameWriter(
                    self._work / "video.mp4", *self._size, FrameTimes.constant(self.rate), metadata={},
                    crf=self.job.video.crf, preset="veryfast", encoder=self.job.video.encoder,
                )  # fmt: skip
            elif (frame.shape[1], frame.shape[0]) != self._size:
                frame = cv2.resize(frame, self._size, interpolation=cv2.INTER_AREA)
            frame = self._mark(frame)
            self._fill(self._slot(out.arrived), self._current if self._current is not None else frame)
            self._current = frame
            self._processed += 1
            self._faces += out.faces
            self._latency.append(out.latency_ms)

    def add_audio(self, samples: np.ndarray, arrived: float) -> None:
        """Mono int16 samples at `audio_rate`; `arrived`: when the last of them arrived (on `clock`)."""
        with self._lock:
            if self._done:
                return
            due = round((arrived - self.start) * self.audio_rate) - len(samples)  # where the first one belongs
            if due + len(samples) <= 0:
                return  # from before the recording started
            if self._wav is None:
                self._wav = wave.open(str(self._work / "audio.wav"), "wb")  # noqa: SIM115 (open while recording)
                self._wav.setnchannels(1)
                self._wav.setsampwidth(2)
                self._wav.setframerate(self.audio_rate)
            if self._samples == 0 and due < 0:
                samples, due = samples[-due:], 0
            gap = due - self._samples
            if gap > _AUDIO_GAP_S * self.audio_rate:
                self._wav.writeframes(np.zeros(gap, "<i2").tobytes())
                self._samples += gap
            self._wav.writeframes(np.asarray(samples, "<i2").tobytes())
            self._samples += len(samples)

    def close(self) -> None:
        """Nothing to do as a sink: `finish` or `abort` ends the recording."""

    def _slot(self, moment: float) -> int:
        """The first output frame at or after `moment` (on `clock`); micro-second rounding keeps a moment
        that is exactly a frame's time on that frame."""
        return max(0, math.ceil(round((moment - self.start) * float(self.rate), 6)))

    def _fill(self, slots: int, frame: Frame) -> None:
        assert self._writer is not None
        while self._written < slots:
            self._writer.write(frame)
            self._written += 1

    def finish(self) -> Recording:
        """Write the file, with its synthetic tags and its sidecar. InvalidInput when no frame was processed while
        it recorded (nothing is written then)."""
        with self._lock:
            if self._done:
                raise InvalidInput("this recording has already ended")
            self._done = True
        try:
            if self._writer is None or self._current is None:
                raise InvalidInput("nothing was recorded: no frame was processed while recording")
            self._fill(max(self._slot(self.clock()), self._written + 1), self._current)
            self._writer.close()
            seconds = self._written / float(self.rate)
            audio = None
            if self._wav is not None:
                self._wav.close()
                audio = self._work / "audio.wav"
            sound = None if audio is None else Audio(audio, "pcm_s16le", Fraction(0), Fraction(seconds), cut=True)
            joined = self._work / f"joined{self.output.suffix}"
            join_segments(
                [(self._work / "video.mp4", self._written)], joined, FrameTimes.constant(self.rate), 1 / self.rate,
                self._work / "concat.txt", sound, synthetic_metadata(self.job), self._writer.encoder,
            )  # fmt: skip
            signed = self._seal(joined)
            os.replace(joined, self.output)
            assert self._size is not None
            recording = Recording(
                self.output, sidecar_path(self.output), self._written, seconds, audio is not None, self._size
            )
            try:
                self._write_sidecar(recording, signed)
            except BaseException:
                self.output.unlink(missing_ok=True)  # an output without its provenance would look finished
                raise
            return recording
        except BaseException:
            self._discard()
            raise
        finally:
            shutil.rmtree(self._work, ignore_errors=True)

    def abort(self) -> None:
        """End without writing anything (what was recorded so far is deleted)."""
        with self._lock:
            self._done = True
            self._discard()
        shutil.rmtree(self._work, ignore_errors=True)

    def _discard(self) -> None:
        if self._writer is not None:
            self._writer.abort()
        if self._wav is not None:
            with contextlib.suppress(Exception):  # already closed, or its file already gone
                self._wav.close()

    def _seal(self, path: Path) -> dict[str, Any]:
        """Sign the finished file at `path` (its extension is the output's) in place; what the sidecar says of it."""
        if not credentials.supports(self.output):
            return {"signed": False, "reason": f"{self.output.suffix} files cannot carry C2PA Content Credentials"}
        when = datetime.now(UTC).isoformat(timespec="seconds")
        assertion = {"synthetic": True, "generator": f"facestudio {VERSION}", "processors": self.processors,
                     "watermark": self.job.video.watermark, "live": {"camera": self.camera}}  # fmt: skip
        definition = credentials.manifest(
            self.output.name, VERSION, list(self.processors), self.ingredients, when, assertion
        )
        credentials.sign(path, definition, self.key)
        key = "user" if self.key.origin == "user" else "this installation (self-issued)"
        return {"signed": True, "standard": "C2PA", "signer": self.key.subject, "key": key, "when": when}

    def _write_sidecar(self, recording: Recording, signed: dict[str, Any]) -> None:
        """The sidecar every output has (`<output>.job.json`, "synthetic": true; the job as a preset with its
        sources), with what a live recording adds: where its frames came from and how the stream ran."""
        raw = self.job.to_raw()
        for key in ("target", "output"):
            raw.pop(key, None)
        raw["sources"] = [str(Path(p).resolve()) for p in self.job.sources]
        if self.job.faces.reference_image is not None:
            raw["faces"]["reference_image"] = str(Path(self.job.faces.reference_image).resolve())
        latency = self._latency
        data = {
            "facestudio": VERSION,
            "synthetic": True,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "job": raw,
            "live": {
                "camera": self.camera,
                "started": self.started_at.isoformat(timespec="seconds"),
                "frames_processed": self._processed,
                "processed_fps": round(self._processed / recording.seconds, 2) if recording.seconds else 0.0,
                "arrival_to_result_ms": {
                    "median": round(statistics.median(latency), 1) if latency else None,
                    "p95": round(percentile(latency, 95), 1) if latency else None,
                },
            },
            "output": {
                "path": str(recording.output.resolve()),
                "frames": recording.frames,
                "seconds": round(recording.seconds, 3),
                "width": recording.size[0] + recording.size[0] % 2,
                "height": recording.size[1] + recording.size[1] % 2,
                "fps": f"{self.rate.numerator}/{self.rate.denominator}",
                "audio": recording.audio,
            },
            "processors": self.processors,
            "faces": {"processed": self._faces},
            "provenance": {
                "credentials": signed,
                "ingredients": [{"title": i.title, "sha256": i.sha256} for i in self.ingredients],
                "watermark": self.job.video.watermark,
            },
        }
        tmp = recording.sidecar.with_name(f".{recording.sidecar.name}.partial")
        try:
            tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, recording.sidecar)
        finally:
            tmp.unlink(missing_ok=True)
