"""engine/media/probe.py and headers.py against real ffprobe and ffmpeg: every test runs both ways where it can."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from mediakit import H, W, ffmpeg, flash_and_beep, pattern, quadrants, seconds, sine, single_line_error, x264
from PIL import Image

from engine import media
from engine.core.errors import InvalidInput, MediaError, TruncatedInput
from engine.media import MediaInfo, children, headers, probe
from engine.media.info import AudioTrack, Picture
from engine.media.probe import mp4_video_time_base

pytest_plugins = ["mediafixtures"]
# The module (`engine.media.probe` names its function).
probe_module = importlib.import_module("engine.media.probe")


def test_probe_cfr_clip(clips: dict[str, Path], probe_path: str) -> None:
    info = probe(clips["cfr.mp4"])
    assert info == MediaInfo(
        path=clips["cfr.mp4"], kind="video", width=W, height=H, frame_count=25, fps=25.0, fps_rational="25/1",
        duration=1.0, rotation=0, has_audio=True, audio_codec="aac", vfr=False, video_codec="h264",
        pix_fmt="yuv420p", format_name="mov,mp4,m4a,3gp,3g2,mj2",
        time_base=Fraction(1, 12800), timestamps=tuple(range(0, 25 * 512, 512)),
        start_time=Fraction(0), audio_start=Fraction(0), hidden=0,
        picture=Picture(pix_fmt="yuv420p", depth=8, sar=Fraction(1)),
        audio_tracks=(AudioTrack(0, "aac", 1, "mono", 48000, info.audio_tracks[0].tags),),
        tags=info.tags, video_tags=info.video_tags,
    )  # fmt: skip
    assert info.tags["major_brand"] == "isom" and info.audio_tracks[0].tags["handler_name"] == "SoundHandler"


def test_probe_ntsc_rate_is_exact(clips: dict[str, Path], probe_path: str) -> None:
    info = probe(clips["ntsc.mkv"])
    assert (info.frame_count, info.fps_rational, info.vfr) == (30, "30000/1001", False)
    assert info.format_name == "matroska,webm"
    assert (info.has_audio, info.audio_codec) == (True, "opus")


def test_probe_vfr_clip(clips: dict[str, Path], probe_path: str) -> None:
    info = probe(clips["vfr.mp4"])
    assert info.vfr
    assert info.frame_count == 25
    # Gaps of 1/25 s up to frame 10, then 3/25 s; the last frame lasts what the MP4 says it does, its own 1/25 s
    # (not the median gap): (52 + 1) / 25 s, as ffprobe reports the file's duration.
    assert info.duration == pytest.approx(53 / 25)
    assert info.fps_rational == "625/53"


def test_probe_gives_each_frame_of_a_variable_rate_clip_its_time(clips: dict[str, Path], probe_path: str) -> None:
    info = probe(clips["vfr12.mp4"])
    assert seconds(info) == [Fraction(k, 12) for k in range(6)] + [Fraction(1, 2) + Fraction(k, 2) for k in range(6)]


def test_probe_gives_a_gif_its_delays(clips: dict[str, Path], probe_path: str) -> None:
    info = probe(clips["uneven.gif"])
    assert (info.kind, info.format_name, info.time_base) == ("video", "gif", Fraction(1, 100))
    assert info.timestamps == (0, 10, 30, 60, 100, 110)


def test_probe_places_a_video_that_starts_after_its_audio(tmp_path: Path, probe_path: str) -> None:
    clip = flash_and_beep(tmp_path / "late.mp4", 1.0, video_offset=1.0)
    info = probe(clip)
    assert info.start_time == 1 and info.audio_start is not None and abs(info.audio_start) < 0.05
    assert info.timestamps[0] == 0 and info.frame_count == 50


def test_probe_counts_only_the_frames_of_an_open_gop_cut(clips: dict[str, Path], probe_path: str) -> None:
    mkv = probe(clips["open_gop_cut.mkv"])  # the two leading pictures have no timestamp: not frames
    assert mkv.frame_count == 50 and mkv.hidden >= 1
    assert seconds(mkv) == [Fraction(k, 25) for k in range(50)]
    mp4 = probe(clips["open_gop_cut.mp4"])  # an edit list marks the pictures before 2.5 s discarded
    assert mp4.frame_count == 37 and seconds(mp4) == [Fraction(k, 25) for k in range(37)]
    assert mp4.hidden >= 12  # at least the frames 2.0 … 2.44 s of the GOP the cut starts in


@pytest.mark.parametrize(
    "clip",
    ["cfr.mp4", "ntsc.mkv", "vfr.mp4", "vfr12.mp4", "pcm.avi", "rotated.mp4", "uneven.gif", "open_gop_cut.mkv",
     "open_gop_cut.mp4"],
)  # fmt: skip
def test_ffprobe_and_ffmpeg_only_agree(clips: dict[str, Path], monkeypatch: pytest.MonkeyPatch, clip: str) -> None:
    if media.find_ffprobe() is None:
        pytest.skip("no ffprobe on this machine")
    with_ffprobe = probe(clips[clip])
    monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    assert probe(clips[clip]) == with_ffprobe


def test_ffprobe_and_ffmpeg_only_agree_on_a_start_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if media.find_ffprobe() is None:
        pytest.skip("no ffprobe on this machine")
    clip = flash_and_beep(tmp_path / "late.mp4", 0.5, video_offset=1.0)
    with_ffprobe = probe(clip)
    monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    assert probe(clip) == with_ffprobe


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.write_bytes(b""), "is empty"),
        (lambda p: p.mkdir(), "is a folder"),
        (lambda p: p.write_text("hello, this is not a video\n" * 20), "cannot read"),
    ],
    ids=["missing", "empty", "directory", "not-media"],
)
def test_probe_rejects_unusable_files(tmp_path: Path, probe_path: str, make, pattern: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "target.mp4"
    make(path)
    with pytest.raises(InvalidInput, match=pattern) as caught:
        probe(path)
    assert type(caught.value) is InvalidInput
    single_line_error(caught.value, path)


def test_probe_rejects_audio_only(clips: dict[str, Path], probe_path: str) -> None:
    with pytest.raises(InvalidInput, match="no video stream, only audio") as caught:
        probe(clips["audio.m4a"])
    single_line_error(caught.value, clips["audio.m4a"])


def test_probe_rejects_audio_with_cover_art(tmp_path: Path, probe_path: str) -> None:
    song = tmp_path / "song.mp3"
    cover = ["-f", "lavfi", "-i", "color=red:size=32x32:duration=0.04"]
    ffmpeg(*sine(), *cover, "-map", "0", "-map", "1", "-c:a", "libmp3lame", "-c:v", "mjpeg",
           "-disposition:v", "attached_pic", str(song))  # fmt: skip
    with pytest.raises(InvalidInput, match="no video stream"):
        probe(song)


def test_probe_rejects_moov_at_end_cut(clips: dict[str, Path], tmp_path: Path, probe_path: str) -> None:
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(clips["moov_end.mp4"].read_bytes()[:-2000])  # the index (moov) is gone
    with pytest.raises(InvalidInput) as caught:
        probe(cut)
    assert type(caught.value) is InvalidInput
    single_line_error(caught.value, cut)


def test_truncated_faststart_clip_is_refused_naming_the_counts(
    clips: dict[str, Path], tmp_path: Path, probe_path: str
) -> None:
    data = clips["cfr.mp4"].read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 2 // 3])  # index intact, the last frames' data missing
    with pytest.raises(TruncatedInput, match=r"expected 25 frames, the file holds \d+\)") as caught:
        probe(cut)
    single_line_error(caught.value, cut)
    with pytest.raises(TruncatedInput):
        media.FrameReader(cut)


def test_probe_rotation_gives_display_size(clips: dict[str, Path], probe_path: str) -> None:
    info = probe(clips["rotated.mp4"])
    assert (info.rotation, info.width, info.height) == (90, H, W)


@pytest.mark.parametrize("name", ["-x.mp4", "concat:a|b.mp4", "http:clip.mp4", "a:b.mp4"])
def test_a_path_is_never_read_as_an_option_or_a_protocol(
    clips: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe_path: str, name: str
) -> None:
    (tmp_path / name).write_bytes(clips["cfr.mp4"].read_bytes())
    monkeypatch.chdir(tmp_path)
    info = probe(Path(name))  # relative, as a user types it
    assert (info.frame_count, info.path) == (25, Path(name))
    assert media.read_video_metadata(Path(name)) is not None


def test_images_are_recognised_by_content(clips: dict[str, Path], tmp_path: Path) -> None:
    disguised = tmp_path / "photo.jpg"
    Image.fromarray(quadrants(H, W)).save(disguised, format="PNG")
    info = probe(disguised)
    assert (info.kind, info.format_name, info.width, info.height, info.frame_count) == ("image", "PNG", W, H, 1)
    video_named_png = tmp_path / "clip.png"
    video_named_png.write_bytes(clips["cfr.mp4"].read_bytes())
    assert probe(video_named_png).kind == "video"
    with pytest.raises(InvalidInput, match=r"clip\.png"):
        media.read_image(video_named_png)


def test_cut_image_is_rejected(tmp_path: Path) -> None:
    whole = tmp_path / "whole.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (H, W, 3), dtype=np.uint8)).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[:-400])
    with pytest.raises(InvalidInput, match=r"cut\.png"):
        probe(cut)


def _resized_webm(path: Path) -> Path:
    """A VP9 WebM of 6 frames at 64×48 then 6 at 96×64 (its resolution changes at a keyframe)."""
    parts = []
    for n, size in enumerate(("64x48", "96x64")):
        part = path.with_name(f"part{n}.webm")
        ffmpeg(
            *pattern(rate="12", size=size), "-frames:v", "6", "-c:v", "libvpx-vp9", "-deadline", "realtime", str(part)
        )
        parts.append(part)
    listing = path.with_name("parts.txt")
    listing.write_text("".join(f"file '{p}'\n" for p in parts), encoding="utf-8")
    ffmpeg("-f", "concat", "-safe", "0", "-i", str(listing), "-c", "copy", str(path))
    return path


class _Watched:
    """Records when the probe's children start and are read: those beside it (`children.Beside`: the keyframes',
    and the packets' hashes without ffprobe) and its own (ffprobe, or ffmpeg's packet count)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[str] = []
        self.started: list[children.Beside] = []
        beside, result, run = children.Beside.__init__, children.Beside.result, children.run
        run_ffprobe = headers.run_ffprobe

        def name(args: Sequence[str]) -> str:
            return "hashes" if "framecrc" in args else "keyframes"

        def started(child: children.Beside, args: Sequence[str]) -> None:
            beside(child, args)
            self.started.append(child)
            self.events.append(f"{name(args)} started")

        def read(child: children.Beside) -> subprocess.CompletedProcess[str]:
            self.events.append(f"{name(child._args)} read")
            return result(child)

        def probed(args: Sequence[str], path: Path) -> dict[str, Any]:
            self.events.append("probed")
            return run_ffprobe(args, path)

        def ran(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
            self.events.append("counted" if "framecrc" in args else "ran")
            return run(args)

        monkeypatch.setattr(children.Beside, "__init__", started)
        monkeypatch.setattr(children.Beside, "result", read)
        monkeypatch.setattr(headers, "run_ffprobe", probed)
        monkeypatch.setattr(children, "run", ran)


def test_identify_runs_its_children_beside_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe_path: str
) -> None:
    webm = _resized_webm(tmp_path / "call.webm")
    watched = _Watched(monkeypatch)
    info = probe(webm, identify=True)
    # VP9 decodes every frame, keyframe or not: each is listed.
    assert info.sizes == ((64, 48),) * 6 + ((96, 64),) * 6 and (info.width, info.height) == (64, 48)
    assert info.frame_count == 12 and info.content_id is not None
    at = {event: watched.events.index(event) for event in watched.events}
    own = "probed" if probe_path == "ffprobe" else "counted"
    # Started before the probe's own child, read after it.
    assert at["keyframes started"] < at[own] < at["keyframes read"]
    if probe_path == "ffmpeg-only":
        assert at["hashes started"] < at[own] < at["hashes read"]
    else:
        assert "hashes started" not in at
    watched.events.clear()
    assert (
        probe(webm).sizes == () and "keyframes started" not in watched.events and "hashes started" not in watched.events
    )


def test_a_long_vp9s_keyframe_child_is_stopped_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe_path: str
) -> None:
    """Over `_LONGEST_FULL_LOOK` frames (lowered here) VP9's decoder would decode every frame: the child that lists
    the keyframes is stopped, not waited for, and no child is left running."""
    webm = _resized_webm(tmp_path / "call.webm")
    monkeypatch.setattr(probe_module, "_LONGEST_FULL_LOOK", 5)
    watched = _Watched(monkeypatch)
    info = probe(webm, identify=True)
    assert info.sizes == () and "keyframes read" not in watched.events
    keyframes = next(child for child in watched.started if "framecrc" not in child._args)
    assert keyframes._process.returncode is not None  # reaped: stopped when the probe was done
    assert psutil.Process().children(recursive=True) == []


def test_a_child_beside_gives_what_it_printed_and_is_stopped_when_left_unread() -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    with children.Beside([sys.executable, "-c", code]) as child:
        done = child.result()
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    with children.Beside([sys.executable, "-c", "import time; time.sleep(60)"]) as child:
        pass
    assert child._process.returncode is not None and child._process.returncode < 0  # killed, and reaped
    with pytest.raises(MediaError, match="cannot run /no/such/ffprobe"):
        children.Beside(["/no/such/ffprobe"])


def test_an_mp4s_time_base_is_read_from_its_index(clips: dict[str, Path], tmp_path: Path) -> None:
    """What the join reads instead of starting ffprobe: the same time base ffprobe gives."""
    for name in ("cfr.mp4", "moov_end.mp4", "vfr.mp4", "rotated.mp4"):
        assert mp4_video_time_base(clips[name]) == probe(clips[name]).time_base, name
    mov = tmp_path / "ntsc.mov"
    ffmpeg(*pattern(rate="30000/1001"), *x264(), str(mov))
    assert mp4_video_time_base(mov) == probe(mov).time_base == Fraction(1, 30000)
    assert mp4_video_time_base(clips["ntsc.mkv"]) is None
