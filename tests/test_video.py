"""engine/video.py against real ffmpeg: media is generated at test time (lavfi testsrc2 + sine, numpy, Pillow).

Runs with whichever ffmpeg `find_ffmpeg` picks (system FFmpeg on CI, the imageio-ffmpeg binary otherwise).
The ffprobe path is compared with the ffmpeg-only path (`FACESTUDIO_FFPROBE=none`) where ffprobe exists.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import ffmpeg_children, make_rotated
from PIL import Image

from engine import video
from engine.errors import InvalidInput, MediaError, TruncatedInput
from engine.video import FrameReader, FrameWriter, MediaInfo, probe

W, H = 64, 48


def _ffmpeg(*args: str) -> None:
    """Run the ffmpeg under test to make media; fail the test with ffmpeg's stderr if it fails."""
    done = subprocess.run(
        [video.find_ffmpeg(), "-nostdin", "-v", "error", "-y", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def _testsrc(rate: str = "25", duration: str = "1", size: str = f"{W}x{H}") -> list[str]:
    return ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}:duration={duration}"]


def _sine(duration: str = "1") -> list[str]:
    return ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=48000:duration={duration}"]


def _x264() -> list[str]:
    return ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]


def _audio_seconds(path: Path) -> float:
    """Decoded length of the first audio stream, measured by decoding it (works without ffprobe)."""
    done = subprocess.run(
        [video.find_ffmpeg(), "-nostdin", "-v", "error", "-i", str(path), "-map", "0:a:0",
         "-f", "s16le", "-ac", "1", "-ar", "48000", "pipe:1"],
        capture_output=True, check=True,
    )  # fmt: skip
    return len(done.stdout) / 2 / 48000


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small clips shared by the tests of this module (generated once: ffmpeg runs dominate the test time)."""
    root = tmp_path_factory.mktemp("media")
    clips = {
        # 25 frames at 25 fps with 1 s of AAC, moov at the front (faststart).
        "cfr": [*_testsrc(), *_sine(), *_x264(), "-c:a", "aac", "-movflags", "+faststart"],
        # Same content, moov at the end (the default).
        "moov_end": [*_testsrc(), *_sine(), *_x264(), "-c:a", "aac"],
        # 30 frames at 30000/1001 with Opus audio.
        "ntsc_mkv": [*_testsrc(rate="30000/1001"), *_sine(), *_x264(), "-c:a", "libopus"],
        # 25 frames 1/25 s apart up to frame 10, then 3/25 s apart: variable frame rate.
        "vfr": [
            *_testsrc(),
            "-vf",
            "setpts='if(lt(N,10),N,10+(N-10)*3)/(25*TB)'",
            "-fps_mode",
            "passthrough",
            *_x264(),
        ],
        # 24 fps MPEG-4 with PCM audio, which MP4 cannot hold as it is.
        "pcm_avi": [*_testsrc(rate="24"), *_sine(), "-c:v", "mpeg4", "-c:a", "pcm_s16le"],
        "audio_only": [*_sine(), "-c:a", "aac"],
    }
    names = {"cfr": "cfr.mp4", "moov_end": "moov_end.mp4", "ntsc_mkv": "ntsc.mkv", "vfr": "vfr.mp4",
             "pcm_avi": "pcm.avi", "audio_only": "audio.m4a"}  # fmt: skip
    paths = {}
    for key, args in clips.items():
        paths[key] = root / names[key]
        _ffmpeg(*args, str(paths[key]))
    paths["rotated"] = root / "rotated.mp4"
    make_rotated(paths["cfr"], paths["rotated"])
    return paths


@pytest.fixture(params=["ffprobe", "ffmpeg-only"])
def probe_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once with ffprobe (skipped where there is none) and once with ffmpeg alone."""
    if request.param == "ffmpeg-only":
        monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    elif video.find_ffprobe() is None:
        pytest.skip("no ffprobe on this machine")
    return str(request.param)


def _read_all(path: Path, info: MediaInfo | None = None, span: video.Span | None = None) -> list[np.ndarray]:
    with FrameReader(path, info, span) as reader:
        return list(reader)


# ---------------------------------------------------------------------------------------------------------------
# Finding ffmpeg


def test_find_ffmpeg_runs() -> None:
    done = subprocess.run([video.find_ffmpeg(), "-version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("ffmpeg version")


def test_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    real = video.find_ffmpeg()
    monkeypatch.setenv("FACESTUDIO_FFMPEG", real)
    assert video.find_ffmpeg() == real
    monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    assert video.find_ffprobe() is None
    monkeypatch.setenv("FACESTUDIO_FFMPEG", "/no/such/ffmpeg")
    with pytest.raises(InvalidInput, match="FACESTUDIO_FFMPEG=/no/such/ffmpeg"):
        video.find_ffmpeg()


# ---------------------------------------------------------------------------------------------------------------
# probe


def test_probe_cfr_clip(media: dict[str, Path], probe_path: str) -> None:
    info = probe(media["cfr"])
    assert info == MediaInfo(
        path=media["cfr"], kind="video", width=W, height=H, frame_count=25, fps=25.0, fps_rational="25/1",
        duration=1.0, rotation=0, has_audio=True, audio_codec="aac", vfr=False, video_codec="h264",
        pix_fmt="yuv420p", format_name="mov,mp4,m4a,3gp,3g2,mj2",
        time_base=Fraction(1, 12800), timestamps=tuple(range(0, 25 * 512, 512)),
    )  # fmt: skip


def test_probe_ntsc_rate_is_exact(media: dict[str, Path], probe_path: str) -> None:
    info = probe(media["ntsc_mkv"])
    assert (info.frame_count, info.fps_rational, info.vfr) == (30, "30000/1001", False)
    assert info.format_name == "matroska,webm"
    assert (info.has_audio, info.audio_codec) == (True, "opus")


def test_probe_vfr_clip(media: dict[str, Path], probe_path: str) -> None:
    info = probe(media["vfr"])
    assert info.vfr
    assert info.frame_count == 25
    # Gaps of 1/25 s up to frame 10, then 3/25 s; the last frame lasts the median gap: (52 + 3) / 25 s.
    assert info.duration == pytest.approx(55 / 25)
    assert info.fps_rational == "125/11"


@pytest.mark.parametrize("clip", ["cfr", "ntsc_mkv", "vfr", "pcm_avi", "rotated"])
def test_ffprobe_and_ffmpeg_only_agree(media: dict[str, Path], monkeypatch: pytest.MonkeyPatch, clip: str) -> None:
    if video.find_ffprobe() is None:
        pytest.skip("no ffprobe on this machine")
    with_ffprobe = probe(media[clip])
    monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    assert probe(media[clip]) == with_ffprobe


def _single_line_error(error: InvalidInput, path: Path) -> None:
    assert str(path) in str(error)
    assert "\n" not in str(error)


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
    _single_line_error(caught.value, path)


def test_probe_rejects_audio_only(media: dict[str, Path], probe_path: str) -> None:
    with pytest.raises(InvalidInput, match="no video stream, only audio") as caught:
        probe(media["audio_only"])
    _single_line_error(caught.value, media["audio_only"])


def test_probe_rejects_audio_with_cover_art(tmp_path: Path, probe_path: str) -> None:
    song = tmp_path / "song.mp3"
    cover = ["-f", "lavfi", "-i", "color=red:size=32x32:duration=0.04"]
    _ffmpeg(*_sine(), *cover, "-map", "0", "-map", "1", "-c:a", "libmp3lame", "-c:v", "mjpeg",
            "-disposition:v", "attached_pic", str(song))  # fmt: skip
    with pytest.raises(InvalidInput, match="no video stream"):
        probe(song)


def test_probe_rejects_moov_at_end_cut(media: dict[str, Path], tmp_path: Path, probe_path: str) -> None:
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(media["moov_end"].read_bytes()[:-2000])  # the index (moov) is gone
    with pytest.raises(InvalidInput) as caught:
        probe(cut)
    assert type(caught.value) is InvalidInput
    _single_line_error(caught.value, cut)


def test_probe_rotation_gives_display_size(media: dict[str, Path], probe_path: str) -> None:
    info = probe(media["rotated"])
    assert (info.rotation, info.width, info.height) == (90, H, W)


# ---------------------------------------------------------------------------------------------------------------
# FrameReader


def test_reader_reads_every_frame(media: dict[str, Path]) -> None:
    frames = _read_all(media["cfr"])
    assert len(frames) == 25
    assert all(f.shape == (H, W, 3) and f.dtype == np.uint8 for f in frames)
    assert frames[0].flags.writeable
    assert not np.array_equal(frames[0], frames[-1])  # testsrc2 moves: these are distinct frames


def test_reader_reads_all_vfr_frames(media: dict[str, Path]) -> None:
    assert len(_read_all(media["vfr"])) == 25


def test_reader_ntsc_mkv(media: dict[str, Path]) -> None:
    assert len(_read_all(media["ntsc_mkv"])) == 30


def test_reader_applies_rotation(media: dict[str, Path]) -> None:
    info = probe(media["rotated"])
    rotated = _read_all(media["rotated"], info)
    upright = _read_all(media["cfr"])
    assert rotated[0].shape == (W, H, 3)
    # Stream copy: same compressed pixels, so the decoded frames are exact quarter turns of each other.
    for stored, shown in zip(upright, rotated, strict=True):
        np.testing.assert_array_equal(shown, np.rot90(stored, info.rotation // 90))


def test_truncated_faststart_clip_is_refused_naming_the_counts(
    media: dict[str, Path], tmp_path: Path, probe_path: str
) -> None:
    data = media["cfr"].read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 2 // 3])  # index intact, the last frames' data missing
    with pytest.raises(TruncatedInput, match=r"expected 25 frames, the file holds \d+\)") as caught:
        probe(cut)
    _single_line_error(caught.value, cut)
    with pytest.raises(TruncatedInput):
        FrameReader(cut)


def test_reader_damaged_clip(media: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(media["cfr"].read_bytes())
    middle = len(data) // 2
    data[middle : middle + 600] = bytes((i * 37) % 256 for i in range(600))  # garbage inside the frame data
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    assert probe(damaged).frame_count == 25  # the container is intact: only decoding finds the damage
    with pytest.raises(TruncatedInput, match=r"expected 25 frames, decoded \d+; ffmpeg: ") as caught:
        _read_all(damaged)
    _single_line_error(caught.value, damaged)
    assert ffmpeg_children() == []


def test_reader_fewer_frames_than_counted(media: dict[str, Path]) -> None:
    info = dataclasses.replace(probe(media["cfr"]), frame_count=30)
    with pytest.raises(TruncatedInput, match="expected 30 frames, decoded 25"):
        _read_all(media["cfr"], info)


def test_reader_abandoned_in_with_block_leaves_no_child(media: dict[str, Path]) -> None:
    with FrameReader(media["cfr"]) as reader:
        frames = iter(reader)
        next(frames)
        assert len(ffmpeg_children()) == 1
    assert ffmpeg_children() == []


def test_reader_abandoned_loop_leaves_no_child(media: dict[str, Path]) -> None:
    for _ in FrameReader(media["cfr"]):
        break
    assert ffmpeg_children() == []


def test_reader_exception_leaves_no_child(media: dict[str, Path]) -> None:
    with pytest.raises(KeyError), FrameReader(media["cfr"]) as reader:
        for _ in reader:
            raise KeyError("boom")
    assert ffmpeg_children() == []


def test_reader_closed_mid_stream_ends_quietly(media: dict[str, Path]) -> None:
    # What the pipeline does when it stops: close() from one thread while the decode thread holds the iterator.
    reader = FrameReader(media["cfr"])
    frames = iter(reader)
    next(frames)
    reader.close()
    assert list(frames) == []
    assert ffmpeg_children() == []


def test_reader_iterates_once(media: dict[str, Path]) -> None:
    with FrameReader(media["cfr"]) as reader:
        list(reader)
        with pytest.raises(RuntimeError, match="only once"):
            iter(reader)


def test_reader_of_an_image_gives_its_frame(tmp_path: Path) -> None:
    path = tmp_path / "still.png"
    pixels = np.random.default_rng(1).integers(0, 256, (H, W, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    frames = _read_all(path)
    assert len(frames) == 1
    np.testing.assert_array_equal(frames[0], pixels)


# ---------------------------------------------------------------------------------------------------------------
# FrameWriter


def _gradient(count: int, width: int = W, height: int = H) -> Iterator[np.ndarray]:
    """Smooth frames (a moving gradient): H.264 reproduces them closely, so pixels can be compared."""
    y, x = np.mgrid[0:height, 0:width]
    for i in range(count):
        yield np.stack([(x * 3 + i * 4) % 256, (y * 4) % 256, np.full_like(x, 128)], axis=2).astype(np.uint8)


def test_writer_round_trip(media: dict[str, Path], tmp_path: Path, probe_path: str) -> None:
    target = media["cfr"]
    info = probe(target)
    output = tmp_path / "result.mp4"
    metadata = {"facestudio_job": '{"processors": ["face_swapper"]}', "comment": "made by a test"}
    with FrameWriter(output, info.width, info.height, info.fps_rational, target, metadata) as writer:
        for frame in _read_all(target):
            writer.write(frame)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.mp4"]  # the temp file is gone
    result = probe(output)
    assert (result.frame_count, result.width, result.height, result.fps_rational) == (25, W, H, "25/1")
    assert (result.has_audio, result.audio_codec) == (True, "aac")
    assert abs(_audio_seconds(output) - _audio_seconds(target)) <= 1 / info.fps
    tags = video.read_video_metadata(output)
    assert {k: tags[k] for k in metadata} == metadata


def test_writer_keeps_pixels(tmp_path: Path, probe_path: str) -> None:
    output = tmp_path / "smooth.mkv"
    frames = list(_gradient(10))
    with FrameWriter(output, W, H, "25", None, {"synthetic": "true"}, crf=10) as writer:
        for frame in frames:
            writer.write(frame)
    back = _read_all(output)
    assert len(back) == 10
    assert not probe(output).has_audio
    assert video.read_video_metadata(output)["synthetic"] == "true"  # Matroska stores it as SYNTHETIC
    error = np.abs(np.stack(back).astype(int) - np.stack(frames).astype(int)).mean()
    assert error < 3


def test_writer_vfr_target_keeps_every_frame_and_duration(media: dict[str, Path], tmp_path: Path) -> None:
    info = probe(media["vfr"])
    output = tmp_path / "vfr_out.mp4"
    with FrameWriter(output, info.width, info.height, info.fps_rational, media["vfr"], {}) as writer:
        for frame in _read_all(media["vfr"], info):
            writer.write(frame)
    result = probe(output)
    assert result.frame_count == 25
    assert not result.has_audio
    assert result.duration == pytest.approx(info.duration)


def test_writer_pads_odd_sizes_by_edge_replication(tmp_path: Path) -> None:
    output = tmp_path / "odd.mp4"
    frames = list(_gradient(5, width=W - 1, height=H - 1))
    with FrameWriter(output, W - 1, H - 1, "25", None, {}, crf=10) as writer:
        for frame in frames:
            writer.write(frame)
    info = probe(output)
    assert (info.width, info.height, info.frame_count) == (W, H, 5)
    padded = np.stack([np.pad(f, ((0, 1), (0, 1), (0, 0)), mode="edge") for f in frames]).astype(int)
    assert np.abs(np.stack(_read_all(output)).astype(int) - padded).mean() < 3


def test_writer_reencodes_audio_mp4_cannot_hold(media: dict[str, Path], tmp_path: Path) -> None:
    info = probe(media["pcm_avi"])
    output = tmp_path / "from_avi.mp4"
    with FrameWriter(output, info.width, info.height, info.fps_rational, media["pcm_avi"], {}) as writer:
        for frame in _gradient(info.frame_count):
            writer.write(frame)
    result = probe(output)
    assert (result.frame_count, result.audio_codec, result.fps_rational) == (24, "aac", "24/1")
    assert abs(_audio_seconds(output) - _audio_seconds(media["pcm_avi"])) <= 1 / info.fps


def test_writer_exception_leaves_nothing(tmp_path: Path) -> None:
    output = tmp_path / "failed.mp4"
    with pytest.raises(KeyError), FrameWriter(output, W, H, "25", None, {}) as writer:
        for frame in _gradient(3):
            writer.write(frame)
        raise KeyError("processor failed")
    assert list(tmp_path.iterdir()) == []
    assert ffmpeg_children() == []


def test_writer_cannot_be_closed_after_abort(tmp_path: Path) -> None:
    writer = FrameWriter(tmp_path / "aborted.mp4", W, H, "25", None, {})
    writer.write(next(_gradient(1)))
    writer.abort()
    with pytest.raises(MediaError, match="aborted"):
        writer.close()
    assert list(tmp_path.iterdir()) == []
    assert ffmpeg_children() == []


def test_writer_without_frames_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="no frames"), FrameWriter(tmp_path / "empty.mp4", W, H, "25", None, {}):
        pass
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_wrong_frames(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="takes 64×48"), FrameWriter(tmp_path / "x.mp4", W, H, "25", None, {}) as w:
        w.write(np.zeros((H, W + 2, 3), np.uint8))
    with pytest.raises(TypeError, match="uint8"), FrameWriter(tmp_path / "x.mp4", W, H, "25", None, {}) as w:
        w.write(np.zeros((H, W, 3), np.float32))
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_unsupported_output(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"x\.webm"):
        FrameWriter(tmp_path / "x.webm", W, H, "25", None, {})
    with pytest.raises(InvalidInput, match="does not exist"):
        FrameWriter(tmp_path / "missing" / "x.mp4", W, H, "25", None, {})


# ---------------------------------------------------------------------------------------------------------------
# Spans: trimming and resampling at decode


def _ffmpeg_builds() -> dict[str, str | None]:
    """The ffmpeg builds on this machine that the span tests run under: the fps filter and its end-of-stream
    handling are ffmpeg's, so each build is checked against the same expectations."""
    import shutil

    system = shutil.which("ffmpeg")
    if system is not None and (video._ffmpeg_version(system) or (99, 0)) < (5, 1):
        system = None
    try:
        import imageio_ffmpeg

        bundled: str | None = imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        bundled = None
    return {"system": system, "imageio-ffmpeg": bundled}


@pytest.fixture(params=["system", "imageio-ffmpeg"])
def ffmpeg_build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    path = _ffmpeg_builds()[request.param]
    if path is None:
        pytest.skip(f"no {request.param} ffmpeg (5.1 or newer) on this machine")
    monkeypatch.setenv("FACESTUDIO_FFMPEG", path)
    return path


def _times(info: MediaInfo) -> list[Fraction]:
    return [t * info.time_base for t in info.timestamps]


def _expected_source(info: MediaInfo, start: float, end: float | None, fps: float | None, k: int) -> int:
    """Index, in the full decode, of output frame `k` of a span, from the definition (the tests' starts and ends
    lie on the clips' time bases): the k-th frame in [start, end), or for a rate R the frame on screen at
    start + k/R (the first frame of the span before that one appears)."""
    times = _times(info)
    lo, hi = Fraction(str(start)), None if end is None else Fraction(str(end))
    kept = [i for i, t in enumerate(times) if t >= lo and (hi is None or t < hi)]
    if fps is None:
        return kept[k]
    on_screen = [i for i in kept if times[i] <= lo + k / video.output_rate(fps)]
    return on_screen[-1] if on_screen else kept[0]


def _certain_count(info: MediaInfo, start: float, end: float | None, fps: float | None) -> int:
    """Frames a span certainly holds: every frame in it, or for a rate R every slot before its end; at the end of
    the video, every slot before the last frame starts (how long ffmpeg shows the last frame decides the rest)."""
    times = _times(info)
    lo, hi = Fraction(str(start)), None if end is None else Fraction(str(end))
    if fps is None:
        return sum(1 for t in times if t >= lo and (hi is None or t < hi))
    stop = hi if hi is not None and hi <= times[-1] else times[-1]
    return math.ceil((stop - lo) * video.output_rate(fps))


SPANS = [
    pytest.param(0.2, 0.6, None, id="trim"),
    pytest.param(0.2, None, None, id="trim-start"),
    pytest.param(0.2, None, 10.0, id="10fps-to-end"),
    pytest.param(0.0, 0.6, 60.0, id="60fps-trimmed"),
    pytest.param(0.2, 0.7, 29.97, id="ntsc-trimmed"),
]


@pytest.mark.parametrize(("start", "end", "fps"), SPANS)
@pytest.mark.parametrize("clip", ["cfr", "vfr", "ntsc_mkv", "rotated"])
def test_reader_span_yields_the_defined_frames(  # type: ignore[no-untyped-def]
    media: dict[str, Path], ffmpeg_build: str, clip: str, start, end, fps
) -> None:
    info = probe(media[clip])
    full = _read_all(media[clip], info)
    span = video.select(info, start, end, fps)
    got = _read_all(media[clip], info, span)
    if not span.resample:  # the clip's own constant rate (29.97 on the NTSC clip): every frame once
        fps = None
    assert len(got) >= _certain_count(info, start, end, fps) == span.minimum
    if not (span.resample and span.end_pts is None):  # all but a resampled run to the end are exact
        assert len(got) == span.frames
    # Same decoder, so a selected frame is bit-identical to the same frame of a full decode.
    for k, frame in enumerate(got):
        np.testing.assert_array_equal(frame, full[_expected_source(info, start, end, fps, k)], err_msg=f"frame {k}")


def test_select_whole_video_and_spans(media: dict[str, Path]) -> None:
    info = probe(media["cfr"])  # 25 frames, 1/25 s apart, time base 1/12800
    whole = video.select(info)
    assert whole == video.Span(Fraction(0), None, 0, None, Fraction(25), False, 25, 25)
    assert whole.fps_rational == "25/1"
    trim = video.select(info, 0.2, 0.6)
    assert (trim.start, trim.end, trim.start_pts, trim.end_pts, trim.frames) == (
        Fraction(1, 5),
        Fraction(3, 5),
        2560,
        7680,
        10,
    )
    assert video.select(info, 0.2, 60.0) == video.select(info, 0.2)  # an end past the last frame: to the end
    assert video.select(info, 0.01).start == Fraction(1, 100)  # frame 0 (at 0 s) is before it
    assert video.select(info, 0.01).frames == 24
    assert not video.select(info, fps=25).resample  # the video's own constant rate: every frame once
    halved = video.select(info, fps=12.5)
    assert (halved.resample, halved.fps_rational, halved.frames, halved.minimum) == (True, "25/2", 13, 12)
    assert video.select(info, 0.2, 0.6, fps=10).frames == 4


def test_select_resamples_vfr_even_at_its_average_rate(media: dict[str, Path]) -> None:
    info = probe(media["vfr"])  # last frame at 52/25 s; with the median gap the video ends at 55/25 s
    span = video.select(info, fps=float(Fraction(info.fps_rational)))
    assert span.resample
    ten = video.select(info, fps=10)
    assert (ten.frames, ten.minimum) == (22, 21)


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (1.0, None, r"trim start 1 s is past the end of .*cfr\.mp4 \(1\.000 s long\): choose a start before 1\.000"),
        (5.0, 6.0, r"trim start 5 s is past the end"),
        (0.97, None, r"trim start 0\.97 s is after the last frame of .*cfr\.mp4 \(at 0\.960 s\)"),
        (0.41, 0.42, r"the span 0\.41–0\.42 s of .*cfr\.mp4 holds no frame \(frames are 0\.040 s apart on average\)"),
    ],
)
def test_select_refuses_spans_without_frames(
    media: dict[str, Path], start: float, end: float | None, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        video.select(probe(media["cfr"]), start, end)
    assert type(caught.value) is InvalidInput
    _single_line_error(caught.value, media["cfr"])


def test_select_ignores_spans_for_an_image(tmp_path: Path) -> None:
    path = tmp_path / "still.png"
    Image.fromarray(_quadrants(H, W)).save(path)
    span = video.select(probe(path), 5.0, 6.0, fps=12)
    assert (span.frames, span.resample) == (1, False)
    assert len(_read_all(path, span=span)) == 1


@pytest.mark.parametrize(
    ("fps", "rate"),
    [
        (29.97, Fraction(30000, 1001)),
        (23.976, Fraction(24000, 1001)),
        (59.94, Fraction(60000, 1001)),
        (24.0, Fraction(24)),
        (1.0, Fraction(1)),  # 1000/1001 is within 0.005 of 1, but 1 is closer
        (12.5, Fraction(25, 2)),
        (240, Fraction(240)),
    ],
)
def test_output_rate(fps: float, rate: Fraction) -> None:
    assert video.output_rate(fps) == rate


def _claiming_more(info: MediaInfo, extra: int) -> MediaInfo:
    """`info` as an index would describe the file if `extra` more frames, at the same spacing, followed."""
    gap = info.timestamps[1] - info.timestamps[0]
    stamps = info.timestamps + tuple(info.timestamps[-1] + gap * (i + 1) for i in range(extra))
    duration = info.duration + float(extra * gap * info.time_base)
    return dataclasses.replace(info, frame_count=info.frame_count + extra, timestamps=stamps, duration=duration)


@pytest.mark.parametrize(
    ("start", "end", "fps", "message"),
    [
        (0.2, None, None, "expected 25 frames, decoded 20"),
        (0.2, 1.1, None, "expected 23 frames, decoded 20"),
        (0.2, None, 10.0, "expected 10 frames, decoded 8"),
        (0.2, 1.1, 10.0, "expected 9 frames, decoded 8"),
    ],
)
def test_reader_span_detects_missing_frames(  # type: ignore[no-untyped-def]
    media: dict[str, Path], ffmpeg_build: str, start, end, fps, message: str
) -> None:
    # The index claims 1.2 s (30 frames); the stream ends at 1.0 s: each span falls short of its count.
    info = _claiming_more(probe(media["cfr"]), 5)
    with pytest.raises(TruncatedInput, match=message) as caught:
        _read_all(media["cfr"], info, video.select(info, start, end, fps))
    _single_line_error(caught.value, media["cfr"])
    assert ffmpeg_children() == []


def test_reader_span_of_a_damaged_clip(media: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(media["cfr"].read_bytes())
    middle = len(data) // 2
    data[middle : middle + 600] = bytes((i * 37) % 256 for i in range(600))
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    info = probe(damaged)
    with pytest.raises(TruncatedInput, match=r"; ffmpeg: "):
        _read_all(damaged, info, video.select(info, 0.2, fps=10))


def _fake_ffmpeg(tmp_path: Path, encoders: list[str]) -> str:
    """An 'ffmpeg' that only answers `-encoders`, listing `encoders` the way ffmpeg does."""
    script = tmp_path / "ffmpeg"
    lines = "\n".join(f" V....D {name:<20} {name} encoder" for name in encoders)
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\nEncoders:\n V..... = Video\n ------\n{lines}\nEOF\n")
    script.chmod(0o755)
    return str(script)


def test_available_encoders_of_the_real_ffmpeg() -> None:
    assert {"libx264", "aac"} <= video.available_encoders(video.find_ffmpeg())


def test_missing_encoder_is_one_actionable_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_ffmpeg(tmp_path, ["libx264", "aac"])
    video.check_encoder("libx264", fake)
    with pytest.raises(InvalidInput) as caught:
        video.check_encoder("libx265", fake)
    assert str(caught.value) == (
        f"the ffmpeg in use ({fake}) has no libx265 encoder: install an FFmpeg built with libx265 "
        "(imageio-ffmpeg's has it) and point FACESTUDIO_FFMPEG at it, or choose video.encoder=libx264"
    )
    # The writer checks before it starts ffmpeg, so nothing is left behind.
    monkeypatch.setenv("FACESTUDIO_FFMPEG", fake)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InvalidInput, match="has no libx265 encoder"):
        FrameWriter(out / "x.mp4", W, H, "25", None, {}, encoder="libx265")
    assert list(out.iterdir()) == []


def test_writer_x265_round_trip(tmp_path: Path, probe_path: str) -> None:
    if "libx265" not in video.available_encoders(video.find_ffmpeg()):
        pytest.skip(f"the ffmpeg in use ({video.find_ffmpeg()}) was built without libx265")
    output = tmp_path / "hevc.mp4"
    frames = list(_gradient(10))
    with FrameWriter(output, W, H, "25", None, {"synthetic": "true"}, crf=10, encoder="libx265") as writer:
        for frame in frames:
            writer.write(frame)
    info = probe(output)
    assert (info.video_codec, info.frame_count, info.width, info.height) == ("hevc", 10, W, H)
    assert writer.written == info
    assert video.read_video_metadata(output)["synthetic"] == "true"
    assert np.abs(np.stack(_read_all(output)).astype(int) - np.stack(frames).astype(int)).mean() < 3


def test_writer_cuts_audio_to_the_span(media: dict[str, Path], tmp_path: Path, probe_path: str) -> None:
    target = media["cfr"]  # 1 s of AAC
    info = probe(target)
    span = video.select(info, 0.2, 0.6)
    output = tmp_path / "cut.mp4"
    with FrameWriter(
        output, W, H, span.fps_rational, target, {}, audio_start=float(span.start), audio_end=float(span.end)
    ) as writer:
        for frame in _read_all(target, info, span):
            writer.write(frame)
    result = probe(output)
    assert (result.frame_count, result.duration, result.audio_codec) == (10, 0.4, "aac")
    assert abs(_audio_seconds(output) - 0.4) <= 1024 / 48000  # one AAC frame
    assert writer.written is not None and writer.written.has_audio


def test_writer_cut_after_the_audio_ends_writes_no_audio(media: dict[str, Path], tmp_path: Path) -> None:
    short = tmp_path / "short_audio.mp4"
    _ffmpeg(*_testsrc(duration="2"), *_sine(duration="0.5"), *_x264(), "-c:a", "aac", str(short))
    info = probe(short)
    span = video.select(info, 1.0, 1.5)
    with FrameWriter(
        tmp_path / "silent.mp4", W, H, span.fps_rational, short, {}, audio_start=1.0, audio_end=1.5
    ) as writer:
        for frame in _read_all(short, info, span):
            writer.write(frame)
    assert writer.written is not None
    assert (writer.written.frame_count, writer.written.has_audio) == (13, False)


# ---------------------------------------------------------------------------------------------------------------
# Images


def _quadrants(height: int, width: int) -> np.ndarray:
    """Four flat colour blocks: survives JPEG well and shows any rotation or mirroring."""
    image = np.zeros((height, width, 3), np.uint8)
    image[: height // 2, : width // 2] = (255, 0, 0)
    image[: height // 2, width // 2 :] = (0, 255, 0)
    image[height // 2 :, : width // 2] = (0, 0, 255)
    image[height // 2 :, width // 2 :] = (255, 255, 255)
    return image


def test_read_image_applies_exif_orientation(tmp_path: Path) -> None:
    path = tmp_path / "phone.jpg"
    stored = _quadrants(32, 48)  # 48 wide, 32 high as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    Image.fromarray(stored).save(path, quality=95, exif=exif)
    frame, alpha = video.read_image(path)
    assert frame.shape == (48, 32, 3)
    assert alpha is None
    assert np.abs(frame.astype(int) - np.rot90(stored, -1)).mean() < 4
    info = probe(path)
    assert (info.kind, info.width, info.height, info.rotation, info.format_name) == ("image", 32, 48, 270, "JPEG")


def test_read_image_cmyk_jpeg(tmp_path: Path) -> None:
    path = tmp_path / "print.jpg"
    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(path, quality=95)  # no cyan or black: red
    frame, alpha = video.read_image(path)
    assert frame.dtype == np.uint8 and frame.shape == (16, 16, 3)
    assert np.abs(frame.astype(int) - [255, 0, 0]).max() <= 3
    assert alpha is None


def test_read_image_16_bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    path = tmp_path / "deep.png"
    Image.fromarray(np.array([[65535, 32768, 257, 0]], dtype=np.uint16)).save(path)
    frame, _ = video.read_image(path)
    np.testing.assert_array_equal(frame[0, :, 0], [255, 128, 1, 0])
    np.testing.assert_array_equal(frame[..., 0], frame[..., 2])


def test_read_image_palette_png(tmp_path: Path) -> None:
    path = tmp_path / "palette.png"
    image = Image.new("P", (4, 2))
    image.putpalette([10, 20, 30, 200, 100, 50])
    image.putdata([0, 1, 0, 1, 1, 0, 1, 0])
    image.save(path)
    frame, alpha = video.read_image(path)
    assert alpha is None
    assert frame[0, 0].tolist() == [10, 20, 30]
    assert frame[0, 1].tolist() == [200, 100, 50]


def test_read_image_palette_transparency_gives_alpha(tmp_path: Path) -> None:
    path = tmp_path / "palette_alpha.png"
    image = Image.new("P", (2, 1))
    image.putpalette([10, 20, 30, 200, 100, 50])
    image.putdata([0, 1])
    image.save(path, transparency=0)
    frame, alpha = video.read_image(path)
    assert alpha is not None and alpha.tolist() == [[0, 255]]
    assert frame[0, 1].tolist() == [200, 100, 50]


@pytest.mark.parametrize("mode", ["L", "LA", "1"])
def test_read_image_greyscale_becomes_rgb(tmp_path: Path, mode: str) -> None:
    path = tmp_path / f"grey_{mode}.png"
    Image.new(mode, (3, 2), 1 if mode == "1" else (200 if mode == "L" else (200, 77))).save(path)
    frame, alpha = video.read_image(path)
    grey = 255 if mode == "1" else 200
    assert frame.shape == (2, 3, 3) and (frame == grey).all()
    assert (alpha is not None) == (mode == "LA")


def test_rgba_png_alpha_survives_a_round_trip(tmp_path: Path) -> None:
    source = tmp_path / "logo.png"
    rgba = np.random.default_rng(2).integers(0, 256, (H, W, 4), dtype=np.uint8)
    Image.fromarray(rgba).save(source)
    frame, alpha = video.read_image(source)
    assert alpha is not None
    np.testing.assert_array_equal(frame, rgba[..., :3])
    np.testing.assert_array_equal(alpha, rgba[..., 3])
    output = tmp_path / "out.png"
    video.write_image(output, frame, alpha)
    frame2, alpha2 = video.read_image(output)
    np.testing.assert_array_equal(frame2, frame)
    assert alpha2 is not None
    np.testing.assert_array_equal(alpha2, alpha)


def test_write_image_resizes_alpha_to_the_frame(tmp_path: Path) -> None:
    output = tmp_path / "upscaled.webp"
    frame = np.full((2 * H, 2 * W, 3), 90, np.uint8)
    video.write_image(output, frame, np.full((H, W), 200, np.uint8))
    back, alpha = video.read_image(output)
    assert back.shape == frame.shape
    assert alpha is not None and alpha.shape == (2 * H, 2 * W) and np.abs(alpha.astype(int) - 200).max() <= 2


def test_write_image_drops_alpha_for_jpeg(tmp_path: Path) -> None:
    output = tmp_path / "flat.jpg"
    video.write_image(output, np.full((H, W, 3), 90, np.uint8), np.zeros((H, W), np.uint8))
    assert video.read_image(output)[1] is None


@pytest.mark.parametrize("extension", [".png", ".jpg", ".jpeg", ".webp", ".tif"])
def test_image_metadata_round_trip(tmp_path: Path, extension: str) -> None:
    output = tmp_path / f"result{extension}"
    metadata = {"software": "facestudio 0.1", "facestudio_job": '{"seed": 1}', "note": "café"}
    video.write_image(output, np.full((H, W, 3), 90, np.uint8), metadata=metadata)
    assert video.read_image_metadata(output) == metadata
    assert probe(output).format_name == video.IMAGE_FORMATS[extension]
    assert [p.name for p in tmp_path.iterdir()] == [output.name]  # no temp file left


def test_write_image_bmp_has_no_metadata(tmp_path: Path) -> None:
    output = tmp_path / "plain.bmp"
    video.write_image(output, np.full((H, W, 3), 90, np.uint8), metadata={"k": "v"})
    assert video.read_image_metadata(output) == {}
    assert video.read_image(output)[0].shape == (H, W, 3)


def test_write_image_rejects_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"result\.gif"):
        video.write_image(tmp_path / "result.gif", np.zeros((H, W, 3), np.uint8))
    assert list(tmp_path.iterdir()) == []


def test_images_are_recognised_by_content(media: dict[str, Path], tmp_path: Path) -> None:
    disguised = tmp_path / "photo.jpg"
    Image.fromarray(_quadrants(H, W)).save(disguised, format="PNG")
    info = probe(disguised)
    assert (info.kind, info.format_name, info.width, info.height, info.frame_count) == ("image", "PNG", W, H, 1)
    video_named_png = tmp_path / "clip.png"
    video_named_png.write_bytes(media["cfr"].read_bytes())
    assert probe(video_named_png).kind == "video"
    with pytest.raises(InvalidInput, match=r"clip\.png"):
        video.read_image(video_named_png)


def test_cut_image_is_rejected(tmp_path: Path) -> None:
    whole = tmp_path / "whole.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (H, W, 3), dtype=np.uint8)).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[:-400])
    with pytest.raises(InvalidInput, match=r"cut\.png"):
        probe(cut)
