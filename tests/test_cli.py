"""The command line end to end: the issue's acceptance run on both backends, bad input, offline, consent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import audio_seconds, live_children
from gate import Gate

import cli
from engine import media as video
from engine.core.errors import ConsentRequired
from engine.media import demo

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 frames of 96×64 real-photo content at 12 fps with a 1 s tone track."""
    return demo.make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", width=96, height=64, count=12, fps=12)


def read_frames(path: Path) -> np.ndarray:
    with video.FrameReader(path) as reader:
        return np.stack(list(reader))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


@pytest.fixture(scope="module")
def enhanced(clip: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The issue's acceptance command, once per backend, as a user runs it (a child process)."""
    out_dir = tmp_path_factory.mktemp("enhanced")
    outputs = {}
    for backend in ("onnx", "torch"):
        out = out_dir / f"out_{backend}.mp4"
        result = run_cli(
            "run", "--target", str(clip), "--output", str(out), "--processors", "frame_enhancer",
            "--set", "frame_enhancer.model=realesr_animevideov3", "--set", "frame_enhancer.scale=2",
            "--backend", backend, "--yes",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("done: 12 frames 96×64 → 192×128"), result.stdout
        assert f"on {backend} (" in result.stdout and "audio kept" in result.stdout
        outputs[backend] = out
    return outputs


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_acceptance_run(clip: Path, enhanced: dict[str, Path], backend: str) -> None:
    out = enhanced[backend]
    source, info = video.probe(clip), video.probe(out)
    assert info.frame_count == source.frame_count == 12
    assert (info.width, info.height) == (2 * source.width, 2 * source.height)
    assert info.has_audio
    assert abs(audio_seconds(out) - audio_seconds(clip)) <= 1 / 12
    assert abs(info.duration - source.duration) <= 1 / 12
    tags = video.read_video_metadata(out)
    assert tags["synthetic"] == "true" and tags["processors"] == "frame_enhancer"
    assert tags["generator"].startswith("facestudio")
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    assert sidecar["synthetic"] is True
    assert sidecar["job"]["runtime"]["backend"] == backend
    assert sidecar["processors"]["frame_enhancer"]["backend"] == backend
    assert sidecar["output"] == {
        "path": str(out), "frames": 12, "width": 192, "height": 128, "audio": True, "audio_tracks": 1,
    }  # fmt: skip
    # The enhancer really enhanced: the output is not a plain resize of the input.
    up = read_frames(out)[5]
    plain = np.repeat(np.repeat(read_frames(clip)[5], 2, axis=0), 2, axis=1)
    assert psnr(up, plain) < 40


def test_backends_agree(enhanced: dict[str, Path]) -> None:
    assert psnr(read_frames(enhanced["onnx"]), read_frames(enhanced["torch"])) >= 40


def test_job_sidecar_replays_exactly(enhanced: dict[str, Path], tmp_path: Path) -> None:
    first = enhanced["onnx"]
    replay = tmp_path / "replay.mp4"
    code = cli.main(["run", "--job", str(first) + ".job.json", "--output", str(replay), "--yes"])
    assert code == 0
    np.testing.assert_array_equal(read_frames(replay), read_frames(first))
    a = json.loads((tmp_path / "replay.mp4.job.json").read_text())["job"]
    b = json.loads(Path(str(first) + ".job.json").read_text())["job"]
    assert {**a, "output": None} == {**b, "output": None}


def test_image_target_keeps_alpha_and_is_tagged(tmp_path: Path) -> None:
    from PIL import Image

    rgb = demo.photo()[200:248, 180:244]
    alpha = np.full(rgb.shape[:2], 255, np.uint8)
    alpha[:, :16] = 0
    Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(tmp_path / "in.png")
    out = tmp_path / "out.png"
    assert (
        cli.main(["run", "--target", str(tmp_path / "in.png"), "--output", str(out), "--preset", "upscale", "--yes"])
        == 0
    )
    frame, out_alpha = video.read_image(out)
    assert frame.shape == (96, 128, 3)
    assert out_alpha is not None and out_alpha[:, :31].max() == 0 and out_alpha[:, 33:].min() == 255
    assert video.read_image_metadata(out)["synthetic"] == "true"


def _make_bad_inputs(tmp: Path, clip: Path) -> dict[str, Path]:
    empty = tmp / "empty.mp4"
    empty.write_bytes(b"")
    text = tmp / "notes.mp4"
    text.write_text("this is not a video\n")
    faststart = tmp / "faststart.mp4"
    subprocess.run(
        [video.find_ffmpeg(), "-v", "error", "-i", str(clip), "-c", "copy", "-movflags", "+faststart", str(faststart)],
        check=True,
    )
    data = faststart.read_bytes()
    truncated = tmp / "truncated.mp4"  # index at the front, last third of the frames missing
    truncated.write_bytes(data[: len(data) * 2 // 3])
    data = clip.read_bytes()
    truncated_tail = tmp / "truncated_tail.mp4"  # index at the end: cut off with the data
    truncated_tail.write_bytes(data[: len(data) * 2 // 3])
    audio_only = tmp / "tone.wav"
    demo.write_tone(audio_only, 0.5)
    return {
        "missing": tmp / "nope.mp4",
        "empty": empty,
        "not media": text,
        "truncated": truncated,
        "truncated, index at the end": truncated_tail,
        "no video stream": audio_only,
    }


def test_bad_inputs_exit_2_with_one_line_and_no_output(clip: Path, tmp_path: Path) -> None:
    for name, target in _make_bad_inputs(tmp_path, clip).items():
        out = tmp_path / f"out_{name.replace(' ', '_').replace(',', '')}.mp4"
        result = run_cli("run", "--target", str(target), "--output", str(out), "--yes")
        assert result.returncode == 2, (name, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, result.stderr)
        assert "Traceback" not in result.stderr
        assert str(target) in lines[0] or target.name in lines[0], (name, lines[0])
        left = [p.name for p in tmp_path.iterdir() if p.name.startswith((out.name, f".{out.stem}"))]
        assert left == [], (name, left)


def test_truncated_video_names_the_counts(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truncated = _make_bad_inputs(tmp_path, clip)["truncated"]
    assert cli.main(["run", "--target", str(truncated), "--output", str(tmp_path / "o.mp4"), "--yes"]) == 2
    err = capsys.readouterr().err
    assert "expected 12 frames" in err and "cut short" in err, err


def test_offline_missing_model_exits_3_naming_file_url_folder(clip: Path, tmp_path: Path) -> None:
    result = run_cli(
        "run", "--target", str(clip), "--output", str(tmp_path / "o.mp4"), "--offline",
        "--set", "frame_enhancer.model=real_esrgan_x2plus", "--processors", "frame_enhancer", "--yes",
    )  # fmt: skip
    assert result.returncode == 3
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "RealESRGAN_x2plus.pth" in line
    assert "https://github.com/xinntao/Real-ESRGAN/releases/download/v0.2.1/RealESRGAN_x2plus.pth" in line
    assert os.environ["FACESTUDIO_MODELS"] in line
    assert not (tmp_path / "o.mp4").exists()


def test_consent_is_required_without_a_terminal(clip: Path, tmp_path: Path) -> None:
    args = ["run", "--target", str(clip), "--output", str(tmp_path / "o.mp4")]
    result = run_cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: acknowledge the responsible-use notice first: rerun with --yes, set FACESTUDIO_ACCEPT=1, "
        "or run once in a terminal and answer the prompt"
    )
    assert not (tmp_path / "o.mp4").exists()


def test_consent_prompt_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.core import consent

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda _: "no")
    with pytest.raises(ConsentRequired, match="was not acknowledged"):
        cli.common.require_consent(yes=False)
    assert not consent.is_acknowledged()
    monkeypatch.setattr("builtins.input", lambda _: "yes")
    cli.common.require_consent(yes=False)
    assert consent.is_acknowledged()
    monkeypatch.setattr("builtins.input", lambda _: pytest.fail("asked twice"))
    cli.common.require_consent(yes=False)


def test_a_changed_notice_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.core import consent

    consent.acknowledge()
    assert consent.is_acknowledged()
    monkeypatch.setattr(consent, "NOTICE", consent.NOTICE + " Outputs also carry a visible mark.")
    assert not consent.is_acknowledged()
    # An acknowledgement recorded by an older facestudio (a version number, no digest) does not count either.
    consent.state_file().write_text('{"version": 1, "acknowledged": "2026-01-01T00:00:00+00:00"}')
    monkeypatch.undo()
    assert not consent.is_acknowledged()


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--set", "frame_enhancer.scal=2", "--target", "a.mp4", "--output", "b.mp4"]) == 2
    assert capsys.readouterr().err == (
        "error: unknown setting frame_enhancer.scal; valid: backend, model, scale, blend, tile\n"
    )
    assert cli.main(["frobnicate"]) == 2
    assert capsys.readouterr().err.startswith("error: argument command: invalid choice: 'frobnicate'")
    assert cli.main(["run", "--target", "a.mp4", "--yes"]) == 2
    assert capsys.readouterr().err == "error: a job needs output (--output PATH)\n"


def test_output_kind_must_match_target(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--target", str(clip), "--output", str(tmp_path / "o.png"), "--yes"]) == 2
    assert "the target is a video but the output ends in .png" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_ctrl_c_cancels_cleanly(tmp_path: Path) -> None:
    """Ctrl-C while the first frame is being encoded (the run is held there: tests/gate.py) cancels the run and
    leaves nothing: no output, no job folder, no ffmpeg."""
    import signal

    target = demo.make_clip(tmp_path / "long.mp4", width=160, height=96, count=96, fps=24)
    out = tmp_path / "out.mp4"
    gate = Gate.start(
        ["run", "--target", str(target), "--output", str(out), "--yes", "--set", "runtime.batch=1", "--preset",
         "upscale"],
        at="engine.media.encode:FrameWriter.write",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        # Ctrl-C reaches a terminal's foreground job; a suite started in the background (`cmd &` in a script, as CI
        # may) has SIGINT ignored, inherited by its children, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    child = gate.process
    jobs = Path(os.environ["FACESTUDIO_JOBS"])  # segments are encoded in the job folder
    try:
        gate.reached()  # the first frame went to the encoder: ffmpeg runs, no segment is finished
        children = live_children(child.pid)
        assert children, "no ffmpeg child while encoding"
        child.send_signal(signal.SIGINT)
    finally:
        gate.close()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 4, err
    assert err.strip() == "error: cancelled by the user; nothing was written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.mp4"]
    assert list(jobs.iterdir()) == []  # no segment was finished: nothing to resume, the job folder is gone
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]


def test_rotated_and_vfr_targets_through_the_whole_run(tmp_path: Path) -> None:
    from conftest import make_rotated

    ffmpeg = video.find_ffmpeg()
    base = ["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=48x32:rate=25:duration=0.6"]
    x264 = ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
    upright = tmp_path / "upright.mp4"
    subprocess.run([ffmpeg, *base, *x264, str(upright)], check=True)
    rotated = tmp_path / "rotated.mp4"
    make_rotated(upright, rotated)
    vfr = tmp_path / "vfr.mp4"
    setpts = "setpts='if(lt(N,5),N,5+(N-5)*3)/(25*TB)'"
    subprocess.run([ffmpeg, *base, "-vf", setpts, "-fps_mode", "passthrough", *x264, str(vfr)], check=True)

    for target, size in ((rotated, (64, 96)), (vfr, (96, 64))):
        out = tmp_path / f"out_{target.name}"
        assert cli.main(["run", "--target", str(target), "--output", str(out), "--preset", "upscale", "--yes"]) == 0
        src, res = video.probe(target), video.probe(out)
        assert res.frame_count == src.frame_count == 15
        assert (res.width, res.height) == size and res.rotation == 0
        assert abs(res.duration - src.duration) <= 1 / src.fps


def test_presets_check_reports_invalid_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('processors = ["frame_enhancer"]\n[frame_enhancer]\nscale = 3\n')
    bad.write_text('processors = ["frame_enhancer"]\n[frame_enhancer]\nblend = 150\n')
    assert cli.main(["presets", "check", str(good)]) == 0
    assert cli.main(["presets", "check", str(good), str(bad)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"invalid  {bad}: frame_enhancer.blend: Input should be less than or equal to 100 (got 150)"
    assert cli.main(["presets", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["properties"]["frame_enhancer"]["title"].startswith("Frame enhancer")


def test_unwritable_output_is_refused_before_any_work(clip: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker / "o.mp4", Path("/proc/o.mp4")):
        result = run_cli("run", "--target", str(clip), "--output", str(out), "--yes")
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "is not a writable folder" in result.stderr


def test_image_output_must_keep_the_target_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    Image.fromarray(demo.photo()[:40, :40]).save(tmp_path / "in.jpg")
    assert cli.main(["run", "--target", str(tmp_path / "in.jpg"), "--output", str(tmp_path / "o.png"), "--yes"]) == 2
    assert "the target is a JPEG image, so the output must be JPEG (.jpg, .jpeg)" in capsys.readouterr().err
    Image.fromarray(demo.photo()[:40, :40]).save(tmp_path / "in.bmp")
    args = ["run", "--target", str(tmp_path / "in.bmp"), "--output", str(tmp_path / "o.png"), "--preset", "upscale"]
    assert cli.main([*args, "--yes"]) == 0
    assert video.read_image_metadata(tmp_path / "o.png")["synthetic"] == "true"


def test_failed_download_is_one_line(clip: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manifest = (
        (ROOT / "engine" / "models" / "manifest.toml")
        .read_text()
        .replace("https://github.com/xinntao/Real-ESRGAN/releases/download/v0.2.1/", f"http://127.0.0.1:{port}/")
    )
    (tmp_path / "m.toml").write_text(manifest)
    result = run_cli(
        "run", "--target", str(clip), "--output", str(tmp_path / "o.mp4"), "--yes",
        "--set", "frame_enhancer.model=real_esrgan_x2plus", "--processors", "frame_enhancer",
        env={"FACESTUDIO_MANIFEST": str(tmp_path / "m.toml")},
    )  # fmt: skip
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: missing model files")
    assert f"http://127.0.0.1:{port}/RealESRGAN_x2plus.pth" in result.stderr


def test_scale_above_native_is_refused(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "run",
        "--target",
        str(clip),
        "--output",
        str(tmp_path / "o.mp4"),
        "--yes",
        "--processors",
        "frame_enhancer",
    ]
    sets = ["--set", "frame_enhancer.model=real_esrgan_x2plus", "--set", "frame_enhancer.scale=3", "--offline"]
    assert cli.main([*args, *sets]) == 2
    assert capsys.readouterr().err == (
        "error: frame_enhancer.scale 3 is above real_esrgan_x2plus's native ×2; use a ×4 model or a scale ≤ 2\n"
    )
