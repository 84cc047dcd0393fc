"""Fixtures of the `engine.media` tests (a plugin: `pytest_plugins = ["mediafixtures"]`): `clips` (small clips,
made once per session), `probe_path` (a test run once with ffprobe and once with ffmpeg alone) and `ffmpeg_build`
(once with each ffmpeg build on the machine)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_rotated
from mediakit import VFR_SETPTS, ffmpeg, pattern, sine, x264

from engine import media


def _ffmpeg_builds() -> dict[str, str | None]:
    """The ffmpeg builds on this machine: the system's (5.1 or newer) and the one imageio-ffmpeg ships."""
    system = shutil.which("ffmpeg")
    if system is not None and (media.ffmpeg_version(system) or (99, 0)) < (5, 1):
        system = None
    try:
        import imageio_ffmpeg

        bundled: str | None = imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        bundled = None
    return {"system": system, "imageio-ffmpeg": bundled}


@pytest.fixture(params=["system", "imageio-ffmpeg"])
def ffmpeg_build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once with each ffmpeg build on the machine (skipped where there is none)."""
    path = _ffmpeg_builds()[request.param]
    if path is None:
        pytest.skip(f"no {request.param} ffmpeg (5.1 or newer) on this machine")
    monkeypatch.setenv("FACESTUDIO_FFMPEG", path)
    return path


@pytest.fixture(params=["ffprobe", "ffmpeg-only"])
def probe_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once with ffprobe (skipped where there is none) and once with ffmpeg alone."""
    if request.param == "ffmpeg-only":
        monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    elif media.find_ffprobe() is None:
        pytest.skip("no ffprobe on this machine")
    return str(request.param)


@pytest.fixture(scope="session")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small clips shared by the media tests (generated once: ffmpeg runs dominate the test time)."""
    root = tmp_path_factory.mktemp("media")
    made = {
        # 25 frames at 25 fps with 1 s of AAC, moov at the front (faststart).
        "cfr.mp4": [*pattern(), *sine(), *x264(), "-c:a", "aac", "-movflags", "+faststart"],
        # Same content, moov at the end (the default).
        "moov_end.mp4": [*pattern(), *sine(), *x264(), "-c:a", "aac"],
        # 30 frames at 30000/1001 with Opus audio.
        "ntsc.mkv": [*pattern(rate="30000/1001"), *sine(), *x264(), "-c:a", "libopus"],
        # 25 frames 1/25 s apart up to frame 10, then 3/25 s apart: variable frame rate.
        "vfr.mp4": [*pattern(), "-vf", "setpts='if(lt(N,10),N,10+(N-10)*3)/(25*TB)'", "-fps_mode", "passthrough",
                    *x264()],  # fmt: skip
        # 12 frames, VFR_SETPTS: the example of a clip whose frame durations change.
        "vfr12.mp4": [*pattern(rate="12", duration="1"), "-vf", VFR_SETPTS, "-fps_mode", "passthrough", *x264()],
        # 24 fps MPEG-4 with PCM audio, which MP4 cannot hold as it is.
        "pcm.avi": [*pattern(rate="24"), *sine(), "-c:v", "mpeg4", "-c:a", "pcm_s16le"],
        "audio.m4a": [*sine(), "-c:a", "aac"],
        # An animated GIF with uneven delays: 10, 20, 30, 40, 10, 20 hundredths of a second.
        "uneven.gif": [*pattern(rate="100", duration="1.3"), "-vf",
                       "select='eq(n,0)+eq(n,10)+eq(n,30)+eq(n,60)+eq(n,100)+eq(n,110)'", "-fps_mode", "passthrough"],
        # 4 s of H.264 with open GOPs (B-frames before each I-frame refer back across it), 25 fps, keyframe every 1 s.
        "open_gop.mp4": [*pattern(duration="4"), "-c:v", "libx264", "-preset", "medium", "-pix_fmt", "yuv420p",
                         "-x264-params", "open-gop=1:keyint=25:min-keyint=25:scenecut=0:bframes=3"],
    }  # fmt: skip
    paths = {}
    for name, args in made.items():
        paths[name] = root / name
        ffmpeg(*args, str(paths[name]))
    paths["rotated.mp4"] = root / "rotated.mp4"
    make_rotated(paths["cfr.mp4"], paths["rotated.mp4"])
    # The open-GOP cut: stream-copied from 2.5 s into Matroska, so its first packets are the leading
    # pictures of the I-frame at 2 s, which refer to frames the cut removed.
    paths["open_gop_cut.mkv"] = root / "open_gop_cut.mkv"
    ffmpeg("-ss", "2.5", "-i", str(paths["open_gop.mp4"]), "-c", "copy", str(paths["open_gop_cut.mkv"]))
    # The same cut in MP4: the leading pictures are kept but marked discarded by an edit list.
    paths["open_gop_cut.mp4"] = root / "open_gop_cut.mp4"
    ffmpeg("-ss", "2.5", "-i", str(paths["open_gop.mp4"]), "-c", "copy", str(paths["open_gop_cut.mp4"]))
    return paths


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """An empty folder on a 1 MiB tmpfs, so a real write fills it (needs the right to mount; skipped elsewhere,
    where the `dev_full` tests simulate the same refusal)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
