"""The unusual-inputs corpus: every kind of odd file a user may hand the CLI, generated here with ffmpeg and numpy,
run through `cli.main` as a user runs it.

Each case ends in a correct output or a typed one-line `error:` with its exit code, as the guide's table "What
happens with unusual inputs" says (docs/guide/inputs.md; the test checks that table names every case with its exit
code). After every
case: no traceback, no warning, no output, partial file or folder left by a failed job, no new file but the output
and its sidecar after a good one, nothing at all left in the temp folder, and no ffmpeg child left running or
unreaped. Timing is measured on the output: frame times against the target's, and a flash against a beep.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, ffmpeg_children
from mediakit import VFR_SETPTS, beep_time, flash_and_beep, flash_time, seconds
from PIL import Image

import cli
import cli.run
from engine import media as video
from engine.core.types import Frame
from engine.media import demo
from engine.run import jobdir, pipeline, segmented

pytest_plugins = ["mediafixtures"]

# The fastest chain that still runs a real model: the embedded Real-ESRGAN at ×1 (no size change).
ENHANCE = ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=1"]
SIZE = (64, 48)


def ffmpeg(*args: str) -> None:
    subprocess.run([video.find_ffmpeg(), "-nostdin", "-v", "error", "-y", *args], check=True, capture_output=True)


def clip(
    path: Path,
    *,
    size: tuple[int, int] = SIZE,
    frames: int = 6,
    audio: bool = True,
    codec: tuple[str, ...] = ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"),
    extra: tuple[str, ...] = (),
) -> Path:
    """`frames` frames of ffmpeg's testsrc2 at 12 fps, H.264, with a sine tone unless `audio` is False."""
    inputs = ["-f", "lavfi", "-i", f"testsrc2=size={size[0]}x{size[1]}:rate=12"]
    if audio:
        inputs += ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-c:a", "aac", "-shortest"]
    ffmpeg(*inputs, "-frames:v", str(frames), *codec, *extra, str(path))
    return path


def rotated(path: Path, degrees: int) -> Path:
    """A clip whose container asks players to turn it `degrees` clockwise (stream copy, pixels as stored)."""
    plain = clip(path.with_name(f"plain_{path.name}"))
    try:  # FFmpeg ≥ 6: a display matrix on the input; its angle is counter-clockwise
        ffmpeg("-display_rotation", str(-degrees), "-i", str(plain), "-c", "copy", str(path))
    except subprocess.CalledProcessError:  # older FFmpeg: the `rotate` tag, clockwise
        ffmpeg("-i", str(plain), "-c", "copy", "-metadata:s:v", f"rotate={degrees}", str(path))
    plain.unlink()
    return path


def still(path: Path, frame: Frame | None = None, **save: object) -> Path:
    Image.fromarray(frame if frame is not None else pattern()).save(path, **save)
    return path


def pattern(size: tuple[int, int] = SIZE) -> Frame:
    """A frame with structure in both directions, so a wrong rotation or flip shows."""
    y, x = np.mgrid[0 : size[1], 0 : size[0]]
    return np.dstack([x * 255 // size[0], y * 255 // size[1], (x // 8 + y // 8) % 2 * 200]).astype(np.uint8)


def faces(count: int) -> Frame:
    """`count` copies of the astronaut's face side by side: a 200×200 crop each (face ≈ 100 px wide)."""
    crop = demo.photo()[30:230, 130:330]
    return np.ascontiguousarray(np.concatenate([crop] * count, axis=1))


def read_frames(path: Path) -> list[Frame]:
    with video.FrameReader(path) as reader:
        return list(reader)


def upright_reference(path: Path) -> Frame:
    """The first frame as ffmpeg itself shows it (its autorotate applies the display matrix)."""
    png = path.with_name(f"{path.stem}_reference.png")
    ffmpeg("-i", str(path), "-frames:v", "1", str(png))
    frame = np.asarray(Image.open(png).convert("RGB"))
    png.unlink()
    return frame


def diff(a: Frame, b: Frame) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()) if a.shape == b.shape else 255.0


@dataclass
class Setup:
    """What a case made: the target, the output to ask for, and the rest of the command line."""

    target: Path
    output: Path
    args: list[str] = field(default_factory=lambda: list(ENHANCE))
    keep: bytes | None = None  # content of a file already at `output`, which a refused run must not touch
    cwd: Path | None = None  # run from this folder (target and output relative to it)
    env: dict[str, str] = field(default_factory=dict)
    # Changes to the engine while it runs (something else filling a disk mid-render), given the monkeypatch.
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    cleanup: list[Callable[[], None]] = field(default_factory=list)


@dataclass(frozen=True)
class Case:
    make: Callable[[Path], Setup]
    code: int = 0
    error: str = ""  # part of the one `error:` line (failures)
    frames: int | None = None  # good video outputs: frames written
    size: tuple[int, int] | None = None  # good outputs: (width, height) of the file
    check: Callable[[Setup, dict], None] | None = None  # more assertions on a good output, given its sidecar
    after: Callable[[Setup], None] | None = None  # more assertions on a refused run


def video_case(name: str, **kw: object) -> Callable[[Path], Setup]:
    return lambda d: Setup(clip(d / name, **kw), d / "out" / "out.mp4")  # type: ignore[arg-type]


def image_case(name: str, make: Callable[[Path], Path], out_suffix: str) -> Callable[[Path], Setup]:
    return lambda d: Setup(make(d / name), d / "out" / f"out{out_suffix}")


def swap(target: Path, output: Path, source: Path | None = None, *more: str) -> Setup:
    source = source or demo.source_photo()
    return Setup(target, output, ["--processors", "face_swapper", "--source", str(source), *more])


def _empty(d: Path) -> Setup:
    (d / "empty.mp4").write_bytes(b"")
    return Setup(d / "empty.mp4", d / "out" / "out.mp4")


def _cut(d: Path, faststart: bool) -> Setup:
    whole = clip(d / "whole.mp4", frames=12, extra=("-movflags", "+faststart") if faststart else ())
    data = whole.read_bytes()
    whole.unlink()
    (d / "cut.mp4").write_bytes(data[: len(data) * 2 // 3])
    return Setup(d / "cut.mp4", d / "out" / "out.mp4")


def _text(d: Path) -> Setup:
    (d / "notes.mp4").write_text("this is a text file, not a video\n")
    return Setup(d / "notes.mp4", d / "out" / "out.mp4")


def _audio_only(d: Path) -> Setup:
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=0.5", "-c:a", "aac", str(d / "tone.m4a"))
    return Setup(d / "tone.m4a", d / "out" / "out.mp4")


def _odd(d: Path) -> Setup:
    # 4:4:4, because H.264 4:2:0 cannot store an odd size; the output is padded to 64×48 (4:2:0).
    x264 = ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv444p")
    target = clip(d / "odd.mp4", codec=x264, extra=("-vf", "scale=63:47"))
    assert (video.probe(target).width, video.probe(target).height) == (63, 47)
    return Setup(target, d / "out" / "out.mp4")


def _audio(kept: bool) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        assert video.probe(setup.output).has_audio is kept is sidecar["output"]["audio"]

    return check


def _vfr(d: Path) -> Setup:
    # Frames 0–4 1/12 s apart, then 3/12 s apart.
    setpts = "setpts='if(lt(N,5),N,5+(N-5)*3)/(12*TB)'"
    target = clip(d / "vfr.mp4", frames=9, audio=False, extra=("-vf", setpts, "-fps_mode", "passthrough"))
    assert video.probe(target).vfr
    return Setup(target, d / "out" / "out.mp4")


def _rotation_check(degrees: int) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        out = read_frames(setup.output)[0]
        reference = upright_reference(setup.target)
        # Closest to ffmpeg's own upright frame, and not to a wrong turn of it.
        wrong = [np.rot90(reference, k) for k in (1, 2, 3)]
        assert diff(out, reference) < 12 and all(diff(out, w) > 2 * diff(out, reference) for w in wrong)
        assert video.probe(setup.output).rotation == 0

    return check


def _hdr(d: Path, transfer: str = "smpte2084") -> Setup:
    x265 = ("-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=error")
    tags = ("-color_primaries", "bt2020", "-color_trc", transfer, "-colorspace", "bt2020nc")
    return Setup(clip(d / "hdr.mp4", audio=False, codec=x265 + tags), d / "out" / "out.mp4")


def _animated(d: Path, name: str, out_suffix: str) -> Setup:
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:rate=12", "-frames:v", "6", "-loop", "0", str(d / name))
    return Setup(d / name, d / "out" / f"out{out_suffix}")


def _multipage_tiff(d: Path) -> Setup:
    first, second = Image.fromarray(pattern()), Image.fromarray(pattern()[::-1])
    first.save(d / "pages.tif", save_all=True, append_images=[second])
    return Setup(d / "pages.tif", d / "out" / "out.tif")


def _exif_rotated(d: Path) -> Setup:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 64×48, shown turned 90° clockwise: 48×64
    return Setup(still(d / "phone.jpg", exif=exif, quality=95), d / "out" / "out.jpg")


def _exif_check(setup: Setup, sidecar: dict) -> None:
    out, _ = video.read_image(setup.output)
    upright = np.rot90(pattern(), -1)
    assert diff(out, upright) < 25 and diff(out, upright) < diff(out, upright[::-1, ::-1]) / 2
    assert Image.open(setup.output).getexif().get(0x0112, 1) == 1  # pixels upright, no turn left to apply


def _cmyk(d: Path) -> Setup:
    Image.fromarray(pattern()).convert("CMYK").save(d / "cmyk.jpg", quality=95)
    assert Image.open(d / "cmyk.jpg").mode == "CMYK"
    return Setup(d / "cmyk.jpg", d / "out" / "out.jpg")


def _png16_colour(d: Path) -> Setup:
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48", "-frames:v", "1", "-pix_fmt", "rgb48be", str(d / "deep.png"))
    return Setup(d / "deep.png", d / "out" / "out.png")


def _png16_grey(d: Path) -> Setup:
    ramp = (np.arange(64 * 48, dtype=np.uint16).reshape(48, 64) * 21).astype(np.uint16)
    Image.fromarray(ramp).save(d / "grey16.png")
    assert Image.open(d / "grey16.png").mode.startswith("I")
    return Setup(d / "grey16.png", d / "out" / "out.png")


def _palette(d: Path) -> Setup:
    Image.fromarray(pattern()).convert("P", palette=Image.Palette.ADAPTIVE).save(d / "palette.png")
    return Setup(d / "palette.png", d / "out" / "out.png")


def _alpha(d: Path) -> Setup:
    alpha = np.full(SIZE[::-1], 255, np.uint8)
    alpha[:, :16] = 0
    Image.fromarray(np.dstack([pattern(), alpha]), "RGBA").save(d / "alpha.png")
    return Setup(d / "alpha.png", d / "out" / "out.png")


def _alpha_check(setup: Setup, sidecar: dict) -> None:
    _, alpha = video.read_image(setup.output)
    assert alpha is not None and alpha[:, :15].max() == 0 and alpha[:, 17:].min() == 255


def _too_big(d: Path) -> Setup:
    setup = Setup(clip(d / "big.mp4"), d / "out" / "out.mp4")
    setup.args += ["--set", "runtime.max_pixels=2000"]
    return setup


def _output_too_big(d: Path) -> Setup:
    target = still(d / "small.png", pattern((40, 30)))
    setup = Setup(target, d / "out" / "out.png", ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=2"])
    setup.args += ["--set", "runtime.max_pixels=2000"]
    return setup


def _faces_check(count: int) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        assert sidecar["faces"]["processed"] == count

    return check


def _names(d: Path) -> Setup:
    folder = d / "медиа 映像 ü"
    folder.mkdir()
    return Setup(clip(folder / "clip é 1.mp4"), folder / "out" / "вывод 出力.mp4")


def _read_only(d: Path) -> Setup:
    folder = d / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").write_bytes(b"")
    except OSError:
        pass
    else:  # permission bits do not bind root: use a folder no one can create files in
        (folder / "probe").unlink()
        folder = Path("/proc/sys")
    return Setup(clip(d / "clip.mp4"), folder / "out.mp4")


def _existing(d: Path, overwrite: bool) -> Setup:
    setup = Setup(clip(d / "clip.mp4"), d / "out" / "out.mp4")
    setup.output.parent.mkdir()
    setup.output.write_bytes(b"an earlier result")
    if overwrite:
        setup.args.append("--overwrite")
    else:
        setup.keep = b"an earlier result"
    return setup


def _same_as_target(d: Path) -> Setup:
    target = clip(d / "clip.mp4")
    return Setup(target, target, [*ENHANCE, "--overwrite"], keep=target.read_bytes())


def _source_is_video(d: Path) -> Setup:
    return swap(still(d / "face.png", faces(1)), d / "out" / "out.png", clip(d / "clip.mp4"))


# -- timing and sync --------------------------------------------------------------------------------------------


def _in_sync(setup: Setup, sidecar: dict) -> None:
    """The output's flash and beep are within one frame of each other, as in the target, and its picture starts
    at its time 0."""
    info = video.probe(setup.output)
    frame = Fraction(info.duration) / info.frame_count
    assert abs(flash_time(setup.target) - beep_time(setup.target)) <= frame
    assert abs(flash_time(setup.output) - beep_time(setup.output)) <= frame
    assert info.start_time == 0


def _same_times(tick: Fraction = Fraction(0)) -> Callable[[Setup, dict], None]:
    """Every output frame is shown at its target frame's time (to `tick`, the output container's resolution)."""

    def check(setup: Setup, sidecar: dict) -> None:
        got, want = seconds(video.probe(setup.output)), seconds(video.probe(setup.target))
        assert len(got) == len(want)
        assert all(abs(g - w) <= tick for g, w in zip(got, want, strict=True)), (got, want)

    return check


def _late_video(d: Path) -> Setup:
    return Setup(flash_and_beep(d / "late.mp4", 0.8, video_offset=1.0), d / "out" / "out.mp4")


def _late_audio(d: Path) -> Setup:
    # The picture starts first, the sound half a second later: a copy of the audio keeps its delay.
    plain = flash_and_beep(d / "plain.mp4", 0.8)
    ffmpeg("-i", str(plain), "-itsoffset", "0.5", "-i", str(plain), "-map", "0:v", "-map", "1:a", "-c", "copy",
           str(d / "late_audio.mp4"))  # fmt: skip
    plain.unlink()
    # The beep moved with the audio: 1.3 s; the flash stays at 0.8 s. Sync is kept, so they stay 0.5 s apart.
    return Setup(d / "late_audio.mp4", d / "out" / "out.mp4")


def _late_audio_check(setup: Setup, sidecar: dict) -> None:
    assert abs(beep_time(setup.output) - flash_time(setup.output) - 0.5) <= 0.04


def _edit_list_cut(d: Path) -> Setup:
    # `-ss 0.5 -c copy`: both tracks get an edit list that starts them mid-packet.
    source = flash_and_beep(d / "source.mp4", 1.2)
    ffmpeg("-ss", "0.5", "-i", str(source), "-c", "copy", str(d / "cut.mp4"))
    source.unlink()
    return Setup(d / "cut.mp4", d / "out" / "out.mp4")


def _vfr_beep(d: Path) -> Setup:
    return Setup(flash_and_beep(d / "vfr.mp4", 2.5, vfr=True), d / "out" / "out.mp4")


def _uneven_gif(d: Path, out_suffix: str) -> Setup:
    # Delays of 10, 20, 30, 40, 10 and 20 hundredths of a second.
    select = "select='eq(n,0)+eq(n,10)+eq(n,30)+eq(n,60)+eq(n,100)+eq(n,110)'"
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={SIZE[0]}x{SIZE[1]}:rate=100:duration=1.3", "-vf", select,
           "-fps_mode", "passthrough", str(d / "uneven.gif"))  # fmt: skip
    return Setup(d / "uneven.gif", d / "out" / f"out{out_suffix}")


def _gif_check(setup: Setup, sidecar: dict) -> None:
    assert video.probe(setup.output).timestamps == video.probe(setup.target).timestamps == (0, 10, 30, 60, 100, 110)
    assert "synthetic=true" in video.read_video_metadata(setup.output)["comment"]


def _fps_by_time(d: Path) -> Setup:
    target = clip(d / "vfr12.mp4", frames=12, audio=False, extra=("-vf", VFR_SETPTS, "-fps_mode", "passthrough"))
    return Setup(target, d / "out" / "out.mp4", [*ENHANCE, "--set", "video.fps=4"])


def _fps_check(setup: Setup, sidecar: dict) -> None:
    """A constant 4 fps: slot k at k/4 s (which frame fills each slot is pinned, bit for bit, in
    test_media_decode.py)."""
    out = video.probe(setup.output)
    assert seconds(out) == [Fraction(k, 4) for k in range(out.frame_count)] and not out.vfr
    assert sidecar["span"]["fps"] == "4/1"


# -- valid files that look damaged ------------------------------------------------------------------------------


def _open_gop_cut(d: Path, suffix: str, hevc: bool = False) -> Setup:
    if hevc:
        codec = ("-c:v", "libx265", "-preset", "fast", "-x265-params",
                 "log-level=error:keyint=12:min-keyint=12:open-gop=1:bframes=3:scenecut=0")  # fmt: skip
    else:
        codec = ("-c:v", "libx264", "-preset", "medium", "-pix_fmt", "yuv420p",
                 "-x264-params", "open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3")  # fmt: skip
    source = clip(d / "gop.mp4", frames=36, codec=codec)
    ffmpeg("-ss", "1.25", "-i", str(source), "-c", "copy", str(d / f"cut{suffix}"))
    source.unlink()
    return Setup(d / f"cut{suffix}", d / "out" / "out.mp4")


def _all_frames(setup: Setup, sidecar: dict) -> None:
    assert video.probe(setup.output).frame_count == video.probe(setup.target).frame_count > 0


# -- paths that are not what they look like ---------------------------------------------------------------------


def _dash_target(d: Path) -> Setup:
    clip(d / "-x.mp4")
    return Setup(Path("-x.mp4"), Path("out") / "out.mp4", cwd=d)


def _dash_output(d: Path) -> Setup:
    clip(d / "clip.mp4")
    return Setup(Path("clip.mp4"), Path("-o.mp4"), cwd=d)


def _protocol_path(d: Path) -> Setup:
    clip(d / "concat:a|b.mp4")
    return Setup(Path("concat:a|b.mp4"), Path("out") / "http:o.mp4", cwd=d)


# -- limits of the file system and the formats ------------------------------------------------------------------


def _long_name(d: Path) -> Setup:
    return Setup(clip(d / "clip.mp4"), d / "out" / ("o" * 246 + ".mp4"))


def _wide_webp(d: Path) -> Setup:
    target = still(d / "strip.webp", pattern((4200, 8)), lossless=True)
    return Setup(target, d / "out" / "out.webp", ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=4"])


def _wide_video(d: Path) -> Setup:
    return Setup(clip(d / "strip.mp4", size=(4100, 16), frames=2, audio=False), d / "out" / "out.mp4",
                 ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=4"])  # fmt: skip


def _huge_png(d: Path) -> Setup:
    # 90 million 1-bit pixels: valid, small on disk, above Pillow's decompression-bomb warning (89.5 million).
    Image.new("1", (9500, 9500)).save(d / "huge.png")
    return Setup(d / "huge.png", d / "out" / "out.png")


# -- races, full disks and leftovers ----------------------------------------------------------------------------


def _output_taken(d: Path) -> Setup:
    """Another facestudio process holds the output (it claimed it and is rendering)."""
    output = d / "out" / "out.mp4"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
         "from engine.run.outputs import OutputClaim; OutputClaim.claim(Path(sys.argv[2]), False); print(flush=True); "
         "time.sleep(120)", str(ROOT), str(output)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == b"\n"
    setup = Setup(clip(d / "clip.mp4"), output)
    setup.cleanup.append(lambda: (holder.kill(), holder.wait()))
    return setup


def _mount(d: Path, setup: Setup, name: str, size: str) -> Path:
    """A tmpfs of `size` beside the case's folder `d` (the case is skipped where no tmpfs can be mounted)."""
    folder = d.parent / name
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (the media tests simulate a full disk instead)")
    setup.cleanup.append(lambda: subprocess.run(["umount", "-l", str(folder)], check=False))
    (folder / "filler").touch()
    return folder


def _only_the_filler(setup: Setup) -> None:
    """Nothing of the refused run is left on the full disk: no output, staged file, lock or folder."""
    assert [p.name for p in setup.output.parent.iterdir()] == ["filler"]


def _fill(folder: Path, leave: int) -> None:
    """Fill the disk of `folder` until `leave` bytes are free (another program writing there)."""
    with (folder / "filler").open("wb") as f:
        while (free := jobdir.free_bytes(folder)) > leave:
            f.write(b"\0" * min(free - leave, 1 << 20))
            f.flush()


def _full_jobs_disk(d: Path) -> Setup:
    """The jobs folder's disk fills up while the second of three segments is being rendered."""
    setup = Setup(
        clip(d / "noise.mp4", size=(64, 64), frames=18, audio=False, extra=("-vf", "noise=alls=100:allf=t")),
        d / "out" / "out.mp4",
        [*ENHANCE, "--set", "video.segment_frames=6", "--set", "video.crf=0"],
    )
    jobs = _mount(d, setup, "jobs", "24m")
    setup.env["FACESTUDIO_JOBS"] = str(jobs)
    finish = jobdir.JobFolder.finish

    def finish_then_fill(self: jobdir.JobFolder, *args: object, **kwargs: object) -> None:
        finish(self, *args, **kwargs)  # type: ignore[arg-type]
        if len(self.done) == 1:
            _fill(jobs, 4096)

    setup.patch = lambda monkeypatch: monkeypatch.setattr(jobdir.JobFolder, "finish", finish_then_fill)
    return setup


def _kept_segments(setup: Setup) -> None:
    (folder,) = Path(setup.env["FACESTUDIO_JOBS"]).glob("[0-9a-f]" * 16)
    assert sorted(p.name for p in folder.glob("seg-*.mp4")) == ["seg-00000.mp4"]


def _full_output_disk(d: Path) -> Setup:
    """The output's disk fills up after every segment is rendered, before they are joined."""
    setup = Setup(
        clip(d / "noise.mp4", size=(64, 64), frames=12, audio=False, extra=("-vf", "noise=alls=100:allf=t")),
        d / "out" / "out.mp4",
        [*ENHANCE, "--set", "video.segment_frames=6", "--set", "video.crf=0"],
    )
    disk = _mount(d, setup, "disk", "20m")
    setup.output = disk / "out.mp4"
    join = segmented.VideoJob.join

    def fill_then_join(self: segmented.VideoJob, output: Path, *rest: object) -> video.MediaInfo:
        _fill(disk, 4096)
        return join(self, output, *rest)  # type: ignore[arg-type]

    setup.patch = lambda monkeypatch: monkeypatch.setattr(segmented.VideoJob, "join", fill_then_join)
    setup.env["FACESTUDIO_JOBS"] = str(d.parent / "jobs")
    return setup


def _full_image_disk(d: Path) -> Setup:
    noise = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    setup = Setup(still(d / "noise.png", noise), d / "out.png")
    disk = _mount(d, setup, "disk", "1m")
    _fill(disk, 64 * 1024)  # room for the lock, not for the image
    setup.output = disk / "out.png"
    return setup


def _fails_after_validation(d: Path) -> Setup:
    # No face in the image: found only when its faces are looked for, after the output's folders were made.
    return swap(still(d / "card.png"), d / "new" / "nested" / "out.png")


CASES: dict[str, Case] = {
    "ordinary video with audio": Case(video_case("clip.mp4"), frames=6, size=SIZE, check=_audio(True)),
    "missing file": Case(lambda d: Setup(d / "nope.mp4", d / "out" / "out.mp4"), 2, "does not exist"),
    "zero-length file": Case(_empty, 2, "is empty (0 bytes)"),
    "truncated MP4, index at the end": Case(lambda d: _cut(d, faststart=False), 2, "moov atom not found"),
    "truncated MP4, faststart": Case(lambda d: _cut(d, faststart=True), 2, "is cut short (expected 12 frames"),
    "text file named .mp4": Case(_text, 2, "as an image or video ("),
    "audio only": Case(_audio_only, 2, "has no video stream, only audio"),
    "video without audio": Case(video_case("silent.mp4", audio=False), frames=6, size=SIZE, check=_audio(False)),
    "odd width and height": Case(_odd, frames=6, size=SIZE),
    "variable frame rate": Case(_vfr, frames=9, size=SIZE),
    "phone video rotated 90°": Case(
        lambda d: Setup(rotated(d / "r90.mp4", 90), d / "o" / "o.mp4"),
        frames=6,
        size=(48, 64),
        check=_rotation_check(90),
    ),  # fmt: skip
    "phone video rotated 180°": Case(
        lambda d: Setup(rotated(d / "r180.mp4", 180), d / "o" / "o.mp4"),
        frames=6,
        size=SIZE,
        check=_rotation_check(180),
    ),  # fmt: skip
    "phone video rotated 270°": Case(
        lambda d: Setup(rotated(d / "r270.mp4", 270), d / "o" / "o.mp4"),
        frames=6,
        size=(48, 64),
        check=_rotation_check(270),
    ),  # fmt: skip
    "10-bit video": Case(
        video_case("ten.mp4", codec=("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le")),
        frames=6,
        size=SIZE,
    ),
    "HDR video (PQ, BT.2020, 10-bit)": Case(_hdr, 2, "is HDR10 (PQ) HDR video"),
    "HDR video (HLG)": Case(lambda d: _hdr(d, "arib-std-b67"), 2, "is HLG HDR video"),
    "one-frame video": Case(video_case("one.mp4", frames=1), frames=1, size=SIZE),
    "animated GIF, image output": Case(
        lambda d: _animated(d, "anim.gif", ".png"), 2, "is an animated GIF, which is processed as a video"
    ),  # fmt: skip
    "animated GIF, video output": Case(lambda d: _animated(d, "anim.gif", ".mp4"), frames=6, size=SIZE),
    "animated WebP": Case(lambda d: _animated(d, "anim.webp", ".webp"), 2, "is an animated or multi-page WEBP"),
    "animated PNG (APNG)": Case(lambda d: _animated(d, "anim.apng", ".png"), 2, "is an animated or multi-page PNG"),
    "multi-page TIFF": Case(_multipage_tiff, 2, "is an animated or multi-page TIFF of 2 frames"),
    "EXIF-rotated JPEG": Case(_exif_rotated, size=(48, 64), check=_exif_check),
    "CMYK JPEG": Case(_cmyk, size=SIZE),
    "16-bit colour PNG": Case(_png16_colour, size=SIZE),
    "16-bit greyscale PNG": Case(_png16_grey, size=SIZE),
    "palette PNG": Case(_palette, size=SIZE),
    "PNG with alpha": Case(_alpha, size=SIZE, check=_alpha_check),
    "frame above runtime.max_pixels": Case(_too_big, 2, "is 64×48 = 3072 pixels, above runtime.max_pixels=2000"),
    "output above runtime.max_pixels": Case(_output_too_big, 2, "the output would be 80×60 = 4800 pixels"),
    "no face in the source": Case(
        lambda d: swap(still(d / "face.png", faces(1)), d / "out" / "out.png", still(d / "card.png")),
        2,
        "no face found in source image",
    ),
    "no face in any frame of a video": Case(
        lambda d: swap(clip(d / "clip.mp4"), d / "out" / "out.mp4"), frames=6, size=SIZE, check=_faces_check(0)
    ),
    "no face in an image": Case(
        lambda d: swap(still(d / "card.png"), d / "out" / "out.png"), 2, "no face to process was found in"
    ),
    "many faces": Case(
        lambda d: swap(still(d / "crowd.png", faces(3)), d / "out" / "out.png", None, "--set", "faces.selector=many"),
        size=(600, 200),
        check=_faces_check(3),
    ),
    "many faces, default selector": Case(
        lambda d: swap(still(d / "crowd.png", faces(3)), d / "out" / "out.png"), size=(600, 200), check=_faces_check(1)
    ),
    "source is a video": Case(_source_is_video, 2, "is a video: give a still image"),
    "non-Latin and space-containing paths": Case(_names, frames=6, size=SIZE),
    "read-only output folder": Case(_read_only, 2, "is not a writable folder"),
    "output file already exists": Case(lambda d: _existing(d, False), 2, "already exists: choose another output"),
    "output file exists, --overwrite": Case(lambda d: _existing(d, True), frames=6, size=SIZE),
    "output is the target": Case(_same_as_target, 2, "is one of the inputs"),
    "video to an .avi output": Case(
        lambda d: Setup(clip(d / "clip.mp4"), d / "out" / "out.avi"), 2, "use one of .gif, .m4v, .mkv, .mov, .mp4"
    ),
    "PNG to a .gif output": Case(image_case("card.png", still, ".gif"), 2, "the output must be PNG (.png)"),
    "video stream starts 1 s after its audio": Case(_late_video, frames=50, size=SIZE, check=_in_sync),
    "audio starts 0.5 s after the video": Case(_late_audio, frames=50, size=SIZE, check=_late_audio_check),
    "MP4 cut by stream copy (edit lists)": Case(_edit_list_cut, frames=37, size=SIZE, check=_in_sync),
    "variable frame rate, frame durations change": Case(
        _vfr_beep, frames=12, size=SIZE, check=lambda s, d: (_same_times()(s, d), _in_sync(s, d))
    ),
    "variable frame rate to Matroska": Case(
        lambda d: Setup(_vfr_beep(d).target, d / "out" / "out.mkv"),
        frames=12,
        size=SIZE,
        check=_same_times(Fraction(1, 1000)),
    ),  # fmt: skip
    "animated GIF with uneven delays, video output": Case(
        lambda d: _uneven_gif(d, ".mp4"), frames=6, size=SIZE, check=_same_times()
    ),
    "animated GIF with uneven delays, GIF output": Case(
        lambda d: _uneven_gif(d, ".gif"), frames=6, size=SIZE, check=_gif_check
    ),
    "video to an animated GIF": Case(lambda d: Setup(clip(d / "clip.mp4"), d / "out" / "out.gif"), frames=6, size=SIZE),
    "variable frame rate, video.fps=4": Case(_fps_by_time, frames=13, size=SIZE, check=_fps_check),
    "open-GOP cut in Matroska (H.264)": Case(
        lambda d: _open_gop_cut(d, ".mkv"), frames=24, size=SIZE, check=_all_frames
    ),  # fmt: skip
    "open-GOP cut in Matroska (HEVC)": Case(
        lambda d: _open_gop_cut(d, ".mkv", hevc=True), frames=24, size=SIZE, check=_all_frames
    ),  # fmt: skip
    "open-GOP cut in MP4 (edit list)": Case(
        lambda d: _open_gop_cut(d, ".mp4"), frames=21, size=SIZE, check=_all_frames
    ),  # fmt: skip
    "target path that starts with -": Case(_dash_target, frames=6, size=SIZE),
    "output path that starts with -": Case(_dash_output, frames=6, size=SIZE),
    "paths that look like protocols (concat:, http:)": Case(_protocol_path, frames=6, size=SIZE),
    "output name of 250 characters": Case(_long_name, 2, "with its sidecar's .job.json it must fit in 255"),
    "image output beyond its format's largest size": Case(_wide_webp, 2, "WEBP images are at most 16383×16383"),
    "video output beyond the encoder's largest size": Case(_wide_video, 2, "libx264 encodes at most 16384×16384"),
    "large valid PNG (a decompression-bomb warning in Pillow)": Case(_huge_png, 2, "above runtime.max_pixels"),
    "another run is writing the same output": Case(_output_taken, 2, "is writing"),
    "jobs folder's disk fills up mid-render": Case(
        _full_jobs_disk,
        2,
        "is full (writing seg-00001.mp4); 1 of 3 segments (6 of 18 frames) are kept in",
        after=_kept_segments,
    ),
    "output's disk fills up at the join": Case(
        _full_output_disk, 2, "; 2 of 2 segments (12 of 12 frames) are kept in", after=_only_the_filler
    ),
    "image output onto a full disk": Case(
        _full_image_disk, 2, "is full (writing the image out.png): free at least", after=_only_the_filler
    ),
    "job fails after validation, output folders new": Case(_fails_after_validation, 2, "no face to process"),
}


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def _entries(folder: Path) -> set[Path]:
    """Every file and folder under `folder`."""
    return set(folder.rglob("*"))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("name", list(CASES))
def test_unusual_input(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_case(CASES[name], tmp_path, monkeypatch, capsys)


def run_case(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Make `case`'s inputs in a folder of `tmp_path`, run it with a temp folder of its own, then undo what its
    setup did (permissions, mounts) whatever the outcome."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    work = tmp_path / "case"
    work.mkdir()
    setup = case.make(work)
    try:
        _run_case(case, setup, work, temp, monkeypatch, capsys)
    finally:
        for cleanup in setup.cleanup:
            cleanup()


def _run_case(
    case: Case,
    setup: Setup,
    work: Path,
    temp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before, entries = _files(work), _entries(work)
    # A private temp folder, so a leftover is this run's and no other test's.
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for key, value in setup.env.items():
        monkeypatch.setenv(key, value)
    if setup.cwd is not None:
        monkeypatch.chdir(setup.cwd)
    if setup.patch is not None:
        setup.patch(monkeypatch)
    capsys.readouterr()

    code = cli.main([
        "run", f"--target={setup.target}", f"--output={setup.output}", "--yes", *setup.args
    ])  # fmt: skip

    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "Warning" not in err
    assert code == case.code, err
    assert os.listdir(temp) == []  # nothing in TMPDIR, not even ONNX Runtime's telemetry file
    assert ffmpeg_children() == []
    if setup.cwd is not None:
        setup.target, setup.output = setup.cwd / setup.target, setup.cwd / setup.output
    sidecar = pipeline.sidecar_path(setup.output)
    if case.code != 0:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and case.error in lines[0], err
        assert _entries(work) == entries  # nothing written, nothing partial, no folder made
        if setup.keep is not None:
            assert setup.output.read_bytes() == setup.keep
        if case.after is not None:
            case.after(setup)
        return
    assert "error" not in err, err
    assert out.startswith("done: ")
    assert _files(work) == before | {setup.output, sidecar}
    info = video.probe(setup.output)
    data = json.loads(sidecar.read_text(encoding="utf-8"))
    if case.frames is not None:
        assert info.kind == "video" and info.frame_count == case.frames == data["output"]["frames"]
        assert len(read_frames(setup.output)) == case.frames
    else:
        assert info.kind == "image"
    assert (info.width, info.height) == case.size
    if case.check is not None:
        case.check(setup, data)


def test_hdr_advice_gives_a_video_that_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tone-mapping command the HDR refusal prints turns the HDR clip into one the run accepts."""
    hdr = _hdr(tmp_path).target
    assert cli.main(["run", "--target", str(hdr), "--output", str(tmp_path / "o.mp4"), "--yes", *ENHANCE]) == 2
    advice = re.search(r"e\.g\. ffmpeg (.*)$", capsys.readouterr().err.strip())
    assert advice is not None
    sdr = tmp_path / "sdr.mp4"
    ffmpeg(*[{"IN": str(hdr), "OUT.mp4": str(sdr)}.get(a, a) for a in advice.group(1).split()])
    assert video.probe(sdr).color_transfer not in ("smpte2084", "arib-std-b67")
    assert cli.main(["run", "--target", str(sdr), "--output", str(tmp_path / "o.mp4"), "--yes", *ENHANCE]) == 0


def test_hdr_is_recognised_without_ffprobe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hdr = _hdr(tmp_path).target
    with_ffprobe = video.probe(hdr).color_transfer
    monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    assert video.probe(hdr).color_transfer == with_ffprobe == "smpte2084"


def test_the_guide_table_lists_every_case() -> None:
    text = (ROOT / "docs" / "guide" / "inputs.md").read_text(encoding="utf-8")
    section = text.split("## What happens with unusual inputs", 1)[1].split("\n## ", 1)[0]
    rows = {
        cells[0]: cells[1]
        for cells in (
            [c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines() if "|" in line
        )
    }
    for name, case in CASES.items():
        assert name in rows, f"the guide's table has no row for {name!r}"
        expected = "output" if case.code == 0 else f"exit {case.code}"
        assert rows[name].startswith(expected), (name, rows[name])


def test_demo_remakes_its_own_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --demo` writes to its own output each time; an existing file is only refused when the user named it."""
    make_clip = demo.make_clip
    monkeypatch.setattr(cli.run, "DEMO_DIR", tmp_path)
    monkeypatch.setattr(demo, "make_clip", lambda path: make_clip(path, *SIZE, count=2, fps=12))
    for _ in range(2):
        assert cli.main(["run", "--demo", "--yes", *ENHANCE]) == 0
    assert video.probe(tmp_path / "astronaut_out.mp4").frame_count == 2
    assert cli.main(["run", "--demo", "--yes", "--output", str(tmp_path / "astronaut_out.mp4"), *ENHANCE]) == 2
