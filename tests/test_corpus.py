"""The unusual-inputs corpus: every kind of odd file a user may hand the CLI, generated here with ffmpeg and numpy,
run through `cli.main` as a user runs it.

Each case ends in a correct output or a typed one-line `error:` with its exit code, as README's table "What
happens with unusual inputs" says (the test checks that table names every case with its exit code). After every
case: no traceback, no output or partial file left by a failed job, no new file but the output and its sidecar
after a good one, nothing left in the temp folder, and no ffmpeg child left running or unreaped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import ffmpeg_children
from PIL import Image

import cli
from engine import demo, pipeline, video
from engine.types import Frame

ROOT = Path(__file__).resolve().parent.parent
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


@dataclass(frozen=True)
class Case:
    make: Callable[[Path], Setup]
    code: int = 0
    error: str = ""  # part of the one `error:` line (failures)
    frames: int | None = None  # good video outputs: frames written
    size: tuple[int, int] | None = None  # good outputs: (width, height) of the file
    check: Callable[[Setup, dict], None] | None = None  # more assertions on a good output, given its sidecar


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
        lambda d: Setup(clip(d / "clip.mp4"), d / "out" / "out.avi"), 2, "use one of .m4v, .mkv, .mov, .mp4"
    ),
    "PNG to a .gif output": Case(image_case("card.png", still, ".gif"), 2, "the output must be PNG (.png)"),
}


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("name", list(CASES))
def test_unusual_input(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[name]
    temp = tmp_path / "tmp"
    temp.mkdir()
    work = tmp_path / "case"
    work.mkdir()
    setup = case.make(work)
    before = _files(work)
    # A private temp folder, so a leftover is this run's and no other test's.
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    capsys.readouterr()

    code = cli.main(["run", "--target", str(setup.target), "--output", str(setup.output), "--yes", *setup.args])

    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == case.code, err
    assert [p for p in os.listdir(temp) if p.startswith("facestudio")] == []  # (ONNX Runtime leaves a .ses)
    assert ffmpeg_children() == []
    sidecar = pipeline.sidecar_path(setup.output)
    if case.code != 0:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and case.error in lines[0], err
        assert _files(work) == before  # nothing written, nothing partial
        if setup.keep is not None:
            assert setup.output.read_bytes() == setup.keep
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


def test_readme_table_lists_every_case() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## What happens with unusual inputs", 1)[1].split("\n## ", 1)[0]
    rows = {
        cells[0]: cells[1]
        for cells in (
            [c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines() if "|" in line
        )
    }
    for name, case in CASES.items():
        assert name in rows, f"README's table has no row for {name!r}"
        expected = "output" if case.code == 0 else f"exit {case.code}"
        assert rows[name].startswith(expected), (name, rows[name])


def test_demo_remakes_its_own_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --demo` writes to its own output each time; an existing file is only refused when the user named it."""
    make_clip = demo.make_clip
    monkeypatch.setattr(cli, "DEMO_DIR", tmp_path)
    monkeypatch.setattr(demo, "make_clip", lambda path: make_clip(path, *SIZE, count=2, fps=12))
    for _ in range(2):
        assert cli.main(["run", "--demo", "--yes", *ENHANCE]) == 0
    assert video.probe(tmp_path / "astronaut_out.mp4").frame_count == 2
    assert cli.main(["run", "--demo", "--yes", "--output", str(tmp_path / "astronaut_out.mp4"), *ENHANCE]) == 2
