"""Video jobs end to end: trimming, output frame rate and the HEVC encoder, through the CLI and `pipeline.run`.

The target is a 2 s demo clip (48 frames of 64×48 at 24 fps with an AAC tone) made at test time. Most runs use
an identity processor that records what it is given, so the frames a span selects can be compared with a full
decode pixel for pixel; one run goes through `cli.main` with a real processor, as a user would.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import audio_seconds, ffmpeg_children

import cli
from engine import media as video
from engine.core.errors import DiskFull, InvalidInput, MediaError, NoFaceInSource
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.job.settings import Job
from engine.media import demo, tools
from engine.models.runtime import Runtime
from engine.run import pipeline

FPS, COUNT = 24, 48


class Recorder(FrameProcessor[ProcessorOptions]):
    """Returns its frames unchanged and keeps a copy of each, so a test sees exactly what processors get."""

    id = "recorder"
    title = "Recorder"
    Options = ProcessorOptions

    def __init__(self) -> None:
        super().__init__(ProcessorOptions(), None)  # type: ignore[arg-type]  # runs no model
        self.seen: list[Frame] = []

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        self.seen += [frame.copy() for frame in frames]
        return list(frames)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo.make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", width=64, height=48, count=COUNT, fps=FPS)


@pytest.fixture(scope="module")
def full(clip: Path) -> np.ndarray:
    """Every frame of the clip, decoded by the same decoder the runs use."""
    with video.FrameReader(clip) as reader:
        return np.stack(list(reader))


def run(target: Path, output: Path, **settings: Any) -> tuple[pipeline.RunReport, Recorder]:
    """`pipeline.run` on `target` with the Recorder as the chain and `settings` as the job's [video] table."""
    raw = {"processors": ["recorder"], "target": str(target), "output": str(output), "video": settings}
    job = Job.parse(raw, {"recorder": Recorder})
    recorder = Recorder()
    return pipeline.run(job, [recorder], Runtime(job.runtime)), recorder


def sidecar(output: Path) -> dict[str, Any]:
    return json.loads(pipeline.sidecar_path(output).read_text())


def test_cli_trimmed_run(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "trimmed.mp4"
    code = cli.main([
        "run", "--target", str(clip), "--output", str(output), "--processors", "frame_enhancer",
        "--set", "frame_enhancer.scale=1", "--set", "video.trim_start=0.5", "--set", "video.trim_end=1.5", "--yes",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("done: 24 frames 64×48 → 64×48")
    info = video.probe(output)
    assert (info.frame_count, info.fps_rational, info.duration) == (24, "24/1", 1.0)
    assert abs(audio_seconds(output) - 1.0) <= 0.05
    written = sidecar(output)
    assert written["output"] == {
        "path": str(output), "frames": 24, "width": 64, "height": 48, "audio": True, "audio_tracks": 1,
    }  # fmt: skip
    assert written["span"] == {"start": 0.5, "end": 1.5, "fps": "24/1"}
    assert written["job"]["video"]["trim_start"] == 0.5 and written["job"]["video"]["trim_end"] == 1.5


def test_trim_gives_processors_exactly_the_span(clip: Path, full: np.ndarray, tmp_path: Path) -> None:
    output = tmp_path / "trimmed.mp4"
    report, recorder = run(clip, output, trim_start=0.5, trim_end=1.5)
    # Frames 12–35 start at 0.5 s … 1.458 s; the one at 1.5 s is the first left out.
    np.testing.assert_array_equal(np.stack(recorder.seen), full[12:36])
    info = video.probe(output)
    assert report.frames == info.frame_count == sidecar(output)["output"]["frames"] == 24
    assert info.duration == 1.0
    assert report.audio and abs(audio_seconds(output) - 1.0) <= 0.05


def test_fps_halves_the_frames_and_keeps_the_duration(clip: Path, full: np.ndarray, tmp_path: Path) -> None:
    output = tmp_path / "12fps.mp4"
    report, recorder = run(clip, output, fps=12)
    # Output frame k stands for k/12 s, where input frame 2k is on screen.
    np.testing.assert_array_equal(np.stack(recorder.seen), full[::2])
    info = video.probe(output)
    assert (report.frames, info.frame_count, info.fps_rational, info.duration) == (24, 24, "12/1", 2.0)
    assert abs(audio_seconds(output) - audio_seconds(clip)) <= 0.05
    assert sidecar(output)["span"] == {"start": 0.0, "end": None, "fps": "12/1"}


def test_fps_and_trim_together(clip: Path, full: np.ndarray, tmp_path: Path) -> None:
    output = tmp_path / "both.mkv"
    report, recorder = run(clip, output, fps=12, trim_start=0.5, trim_end=1.5)
    np.testing.assert_array_equal(np.stack(recorder.seen), full[12:36:2])
    info = video.probe(output)
    assert (report.frames, info.frame_count, info.duration) == (12, 12, 1.0)
    assert abs(audio_seconds(output) - 1.0) <= 0.05


def test_x265_output_is_hevc_tagged_for_apple_players(clip: Path, tmp_path: Path) -> None:
    if "libx265" not in video.available_encoders(video.find_ffmpeg()):
        pytest.skip(f"the ffmpeg in use ({video.find_ffmpeg()}) was built without libx265")
    output = tmp_path / "hevc.mp4"
    report, _ = run(clip, output, encoder="libx265", preset="ultrafast", trim_end=0.5)
    info = video.probe(output)
    assert (info.video_codec, info.frame_count, report.frames) == ("hevc", 12, 12)
    described = subprocess.run(
        [video.find_ffmpeg(), "-hide_banner", "-i", str(output)], capture_output=True, text=True, check=False
    ).stderr
    assert "hevc (Main) (hvc1 /" in described


def test_missing_encoder_fails_before_any_frame(clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ffmpeg = video.find_ffmpeg()
    monkeypatch.setattr(tools, "available_encoders", lambda path: frozenset({"libx264", "aac"}))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(InvalidInput) as caught:
        run(clip, out_dir / "x.mp4", encoder="libx265")
    assert str(caught.value).startswith(f"the ffmpeg in use ({ffmpeg}) has no libx265 encoder: install")
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ["video.trim_start=1", "video.trim_end=1"],
            "error: video.trim_end: Value error, trim_end must be after trim_start (1 s) (got 1)",
        ),
        (["video.trim_start=5"], "error: trim start 5 s is past the end of {clip} (2.000 s long): choose a start"),
    ],
)
def test_invalid_spans_are_one_line_and_leave_nothing(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str], message: str
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["run", "--target", str(clip), "--output", str(out_dir / "x.mp4"), "--processors", "frame_enhancer"]
    code = cli.main([*args, "--set", "frame_enhancer.scale=1", *(a for s in sets for a in ("--set", s)), "--yes"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(message.format(clip=clip)) and err.count("\n") == 1
    assert list(out_dir.iterdir()) == []


def test_an_image_target_ignores_the_video_settings(tmp_path: Path) -> None:
    target = tmp_path / "still.png"
    video.write_image(target, demo.photo()[:48, :64])
    report, recorder = run(target, tmp_path / "out.png", trim_start=5, fps=12, encoder="libx265")
    assert (report.kind, report.frames, len(recorder.seen)) == ("image", 1, 1)
    assert "span" not in sidecar(tmp_path / "out.png")


def test_an_output_whose_sidecar_cannot_be_written_is_removed(
    clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_text = Path.write_text

    def full_disk_for_the_sidecar(self: Path, *args: Any, **kwargs: Any) -> int:
        if self.name.endswith(".job.partial"):
            self.write_bytes(b"{")  # half written when the disk filled up
            raise OSError(28, "No space left on device")
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk_for_the_sidecar)
    out = tmp_path / "o.mp4"
    with pytest.raises(DiskFull, match=r"the disk of .* is full \(writing the sidecar o\.mp4\.job\.json\)"):
        run(clip, out, trim_end=0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output without provenance, no .partial


@pytest.mark.parametrize(
    ("suffix", "encoder", "depth", "asked"),
    [
        (".mp4", "auto", 8, [("libx264", "beside")]),
        (".webm", "auto", 8, [("libvpx-vp9", "beside")]),
        (".mkv", "libx265", 8, [("libx265", "beside")]),
        # auto takes 10-bit HEVC for a deeper target, which only the probe tells: asked after it.
        (".mp4", "auto", 10, [("libx264", "beside"), ("libx265", "after")]),
    ],
)
def test_the_encoders_pixel_formats_are_listed_beside_the_targets_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, encoder: str, depth: int, asked: list[Any]
) -> None:
    """Validation asks ffmpeg for the pixel formats of the encoder the job most likely takes on a thread of its
    own while the target is probed (two children side by side), once; another encoder is asked after the probe."""
    from engine.run import validate as validation

    target = tmp_path / f"target-{depth}.mkv"
    pix_fmt = "yuv420p10le" if depth > 8 else "yuv420p"
    codec = ["-c:v", "ffv1"] if depth > 8 else ["-c:v", "libx264"]
    subprocess.run([tools.find_ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=12",
                    "-frames:v", "3", "-pix_fmt", pix_fmt, *codec, str(target)], check=True)  # fmt: skip
    calls: list[tuple[str, str]] = []
    real = video.encoder_pixel_formats

    def listed(name: str, ffmpeg: str | None = None) -> frozenset[str]:
        calls.append((name, "beside" if threading.current_thread().name.startswith("facestudio-validate") else "after"))
        return real(name, ffmpeg)

    monkeypatch.setattr(video, "encoder_pixel_formats", listed)
    for module in (validation, importlib.import_module("engine.media.encode")):  # no NVENC: the same on every machine
        monkeypatch.setattr(module, "gpu_visible", lambda: False)
    raw = {"processors": ["recorder"], "target": str(target), "output": str(tmp_path / f"out{suffix}"),
           "video": {"encoder": encoder}}  # fmt: skip
    job = Job.parse(raw, {"recorder": Recorder})
    if "libx265" in {name for name, _ in asked} and "libx265" not in tools.available_encoders(tools.find_ffmpeg()):
        pytest.skip("the ffmpeg in use was built without libx265")
    checked = validation.validate(job, [Recorder()])
    assert calls == asked
    assert checked.picture is not None and checked.picture.encoder == asked[-1][0]
    assert (checked.picture.pix_fmt or "").startswith("yuv420p10" if depth > 8 else "yuv420p")


def test_the_last_segment_is_checked_in_the_joined_output_the_others_on_their_own(
    clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each segment but the plan's last is read back as it is finished; the last is checked in the joined output,
    which the join reads back right after (one ffprobe fewer per job, every frame still checked)."""
    read_back: list[str] = []
    for name in ("engine.media.encode", "engine.media.join"):
        module = importlib.import_module(name)
        real = module.probe

        def recorded(path: Path, *args: Any, real: Any = real, **kwargs: Any) -> video.MediaInfo:
            read_back.append(Path(path).name)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(module, "probe", recorded)
    output = tmp_path / "out.mp4"
    report, _ = run(clip, output, segment_frames=16)
    assert report.frames == COUNT and report.segments is not None and report.segments["count"] == 3
    assert read_back[:2] == [".seg-00000.partial.mp4", ".seg-00001.partial.mp4"]
    assert len(read_back) == 3 and "seg-" not in read_back[2]
    assert video.probe(output).frame_count == COUNT


def test_a_last_segment_short_of_a_frame_fails_the_join_and_leaves_nothing(
    clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    monkeypatch.setenv("FACESTUDIO_JOBS", str(jobs))
    write = video.FrameWriter.write

    def dropping(writer: video.FrameWriter, frame: Frame, alpha: Any = None) -> None:
        if writer._checked_later and writer.frames_written == 0:  # the last segment's first frame never reaches ffmpeg
            writer.frames_written += 1
            return
        write(writer, frame, alpha)

    monkeypatch.setattr(video.FrameWriter, "write", dropping)
    output = tmp_path / "out.mp4"
    with pytest.raises(MediaError) as caught:
        run(clip, output, segment_frames=16)
    # Named as the user knows it, not by the staged file's temp name.
    assert str(caught.value) == f"{output} holds {COUNT - 1} frames, {COUNT} were written"
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["jobs"])  # no output, partial file or sidecar
    assert not jobs.exists() or list(jobs.iterdir()) == []  # and the job folder is removed


@pytest.mark.parametrize("resume", [False, True])
def test_a_fresh_jobs_decoder_starts_while_its_faces_are_analysed_and_stops_with_a_refusal(
    clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resume: bool
) -> None:
    """A fresh job decodes from the span's first frame: ffmpeg is started before the source faces are analysed
    (its start-up overlaps theirs). A resumed job starts where its folder says, known only later. A refusal in
    between stops and reaps that ffmpeg and writes nothing."""
    running: list[list[str]] = []

    def refusing(*args: Any) -> None:
        running.append(ffmpeg_children())
        raise NoFaceInSource("no face was found in the source image")

    monkeypatch.setattr(pipeline, "face_stage", refusing)
    output = tmp_path / "out.mp4"
    job = Job.parse({"processors": ["recorder"], "target": str(clip), "output": str(output)}, {"recorder": Recorder})
    with pytest.raises(NoFaceInSource):
        pipeline.run(job, [Recorder()], Runtime(job.runtime), resume=resume)
    (children,) = running
    assert len(children) == (0 if resume else 1) and all(" ffmpeg" in child for child in children)
    assert ffmpeg_children() == [] and not output.exists()
