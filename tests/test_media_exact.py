"""Issue 32's classes of odd media — colour, geometry, alpha, the edges of time, metadata, a source with several
faces, resume, provenance, mid-stream changes, audio layouts, encoder limits, and two unclear messages — each case
generated here with ffmpeg and numpy, run through `cli.main` as a user runs it (the corpus's `run_case`: one
`error:` line and its exit code, nothing left behind), and checked as a viewer sees the output: ffprobe's colour
fields, SAR/DAR, pixel format and alpha plane, durations and per-frame times, tags and track counts.

The guide's table "What happens with unusual inputs" (docs/guide/inputs.md) names every case here with its outcome.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT
from PIL import Image, ImageCms, PngImagePlugin
from test_corpus import ENHANCE, SIZE, Case, Setup, clip, ffmpeg, run_case

import cli
from engine import media as video
from engine.core.errors import InvalidInput
from engine.media import demo
from engine.media.info import AudioTrack, MediaInfo, Picture
from engine.run import jobdir, segments

pytest_plugins = ["mediafixtures"]

# The colour of the example, which a BT.2020 clip written as BT.709 showed as (251, 110, 0).
ORANGE = (255, 76, 21)


# -- what a viewer's tools say ----------------------------------------------------------------------------------


def ffprobe(path: Path) -> dict[str, Any]:
    """ffprobe's own JSON for `path`: format, streams, chapters and the video stream's packets."""
    done = subprocess.run(
        [shutil.which("ffprobe") or "ffprobe", "-v", "error", "-print_format", "json", "-show_format",
         "-show_streams", "-show_chapters", "-show_entries", "packet=stream_index,pts_time,duration_time",
         str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def stream(data: dict[str, Any], kind: str = "video", n: int = 0) -> dict[str, Any]:
    return [s for s in data["streams"] if s["codec_type"] == kind][n]


def decoded(path: Path, frame: int = 0, decoder: str | None = None, alpha: bool = False) -> np.ndarray:
    """Frame `frame` as ffmpeg shows it (its own colour conversion from the file's tags): H×W×3 RGB, or the alpha
    plane H×W (with `decoder`: libvpx-vp9 for VP9's alpha)."""
    info = ffprobe(path)
    video_stream = stream(info)
    width, height = int(video_stream["width"]), int(video_stream["height"])
    args = [video.find_ffmpeg(), "-nostdin", "-v", "error", *(["-c:v", decoder] if decoder else []), "-i", str(path),
            "-map", "0:v:0", "-vf", f"select=eq(n\\,{frame})" + (",format=rgba,alphaextract" if alpha else ""),
            "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "gray" if alpha else "rgb24", "-"]  # fmt: skip
    raw = subprocess.run(args, capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape((height, width) if alpha else (height, width, 3))


def times(data: dict[str, Any]) -> list[Fraction]:
    """The video stream's frame times, seconds from its first, in presentation order."""
    index = stream(data)["index"]
    stamps = sorted(Fraction(p["pts_time"]) for p in data["packets"] if p["stream_index"] == index)
    return [t - stamps[0] for t in stamps]


def duration(data: dict[str, Any]) -> Fraction:
    return Fraction(data["format"]["duration"])


# -- targets ------------------------------------------------------------------------------------------------------


def colour_clip(path: Path, matrix: str, primaries: str, transfer: str, *, codec: tuple[str, ...],
                size: tuple[int, int] = SIZE, frames: int = 6, full: bool = False, pix_fmt: str = "yuv420p",
                tag: bool = True) -> Path:  # fmt: skip
    """`frames` frames of a flat ORANGE and a testsrc2 strip, converted to YCbCr with `matrix` (swscale's name)
    and tagged with the file's colour description (`tag`)."""
    colour = "0x{:02X}{:02X}{:02X}".format(*ORANGE)
    graph = (f"color=c={colour}:size={size[0]}x{size[1]}:rate=12[bg];testsrc2=size={size[0]}x{size[1] // 4}:"
             f"rate=12[strip];[bg][strip]overlay=0:{size[1] * 3 // 4},"
             f"scale=out_color_matrix={matrix}:out_range={'pc' if full else 'tv'},format={pix_fmt}")  # fmt: skip
    tags = []
    if tag:
        space = {"bt2020": "bt2020nc", "bt601": "smpte170m"}.get(matrix, matrix)
        tags = ["-colorspace", space, "-color_primaries", primaries, "-color_trc", transfer,
                "-color_range", "pc" if full else "tv"]  # fmt: skip
    ffmpeg("-f", "lavfi", "-i", graph, "-frames:v", str(frames), *codec, *tags, str(path))
    return path


X265_10 = ("-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=error")
X264 = ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p")


def alpha_frame(width: int = SIZE[0], height: int = SIZE[1]) -> np.ndarray:
    """The alpha plane of the alpha targets: a transparent left third, a half-transparent middle, an opaque right."""
    plane = np.full((height, width), 255, np.uint8)
    plane[:, : width // 3] = 0
    plane[:, width // 3 : 2 * width // 3] = 128
    return plane


def alpha_clip(path: Path, codec: tuple[str, ...], frames: int = 6) -> Path:
    """`frames` frames of testsrc2 with `alpha_frame` as their alpha, through a lossless RGBA pipe."""
    raw = subprocess.run(
        [video.find_ffmpeg(), "-nostdin", "-v", "error", "-f", "lavfi", "-i",
         f"testsrc2=size={SIZE[0]}x{SIZE[1]}:rate=12", "-frames:v", str(frames), "-f", "rawvideo", "-pix_fmt",
         "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    rgb = np.frombuffer(raw, np.uint8).reshape(frames, SIZE[1], SIZE[0], 3)
    rgba = b"".join(np.dstack([frame, alpha_frame()]).tobytes() for frame in rgb)
    subprocess.run(
        [video.find_ffmpeg(), "-nostdin", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgba",
         "-s", f"{SIZE[0]}x{SIZE[1]}", "-r", "12", "-i", "pipe:0", *codec, str(path)],
        input=rgba, check=True,
    )  # fmt: skip
    return path


def transparent_gif(path: Path) -> Path:
    """A 4-frame GIF whose left third is transparent in every frame (alpha 0 or 255: GIF has no partial alpha)."""
    frames = []
    for i in range(4):
        rgba = np.zeros((SIZE[1], SIZE[0], 4), np.uint8)
        rgba[..., 0] = 40 * i + 60
        rgba[..., 1] = np.arange(SIZE[0])[None, :] * 3
        rgba[..., 3] = np.where(np.arange(SIZE[0])[None, :] < SIZE[0] // 3, 0, 255)
        frames.append(Image.fromarray(rgba, "RGBA"))
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0, disposal=2)
    return path


def long_last_gif(path: Path) -> Path:
    """A GIF with delays of 10, 20, 43 and 49 hundredths: 1.22 s, its last frame the longest."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={SIZE[0]}x{SIZE[1]}:rate=100:duration=2", "-vf",
           "select='eq(n,0)+eq(n,10)+eq(n,30)+eq(n,73)'", "-fps_mode", "passthrough", "-final_delay", "49",
           str(path))  # fmt: skip
    return path


def held_last_frame(path: Path) -> Path:
    """A screen recording's ending: 6 frames 1/12 s apart, the last held for 2 s (its own duration in the MP4)."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={SIZE[0]}x{SIZE[1]}:rate=12", "-frames:v", "6", "-c:v",
           "libx264", "-pix_fmt", "yuv420p", "-bf", "0", str(path.with_name("raw.mp4")))  # fmt: skip
    # The last sample's duration is written from its packet's: give frame 5 two seconds (12288 ticks a second).
    ffmpeg("-i", str(path.with_name("raw.mp4")), "-c", "copy", "-bsf:v",
           "setts=pts=PTS:dts=DTS:duration='if(eq(N,5),2*12288,DURATION)'", str(path))  # fmt: skip
    path.with_name("raw.mp4").unlink()
    return path


def tagged_clip(path: Path) -> Path:
    """A clip whose container says who made it, when and where, and whose video stream has a language and title."""
    clip(path.with_name("plain.mp4"))
    ffmpeg("-i", str(path.with_name("plain.mp4")), "-c", "copy", "-metadata", "title=Birthday",
           "-metadata", "creation_time=2020-01-02T03:04:05.000000Z", "-metadata", "comment=Grandma's 90th",
           "-metadata", "artist=Ann", "-metadata:s:v:0", "language=swe", "-metadata:s:a:0", "language=swe",
           str(path))  # fmt: skip
    path.with_name("plain.mp4").unlink()
    return path


def two_audio_tracks(path: Path) -> Path:
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={SIZE[0]}x{SIZE[1]}:rate=12", "-f", "lavfi", "-i",
           "sine=frequency=440:duration=0.5", "-f", "lavfi", "-i", "sine=frequency=880:duration=0.5",
           "-frames:v", "6", "-map", "0", "-map", "1", "-map", "2", *X264, "-c:a", "aac",
           "-metadata:s:a:0", "language=eng", "-metadata:s:a:1", "language=fra", str(path))  # fmt: skip
    return path


def chapters_and_subtitles(path: Path) -> Path:
    """Matroska with two chapters and an English SubRip track, as an editor exports it."""
    (path.parent / "subs.srt").write_text("1\n00:00:00,000 --> 00:00:00,400\nHello\n", encoding="utf-8")
    (path.parent / "chapters.txt").write_text(
        ";FFMETADATA1\n[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=250\ntitle=One\n"
        "[CHAPTER]\nTIMEBASE=1/1000\nSTART=250\nEND=500\ntitle=Two\n",
        encoding="utf-8",
    )
    clip(path.with_name("plain.mp4"), audio=False)
    ffmpeg("-i", str(path.with_name("plain.mp4")), "-i", str(path.parent / "subs.srt"), "-i",
           str(path.parent / "chapters.txt"), "-map", "0", "-map", "1", "-map_chapters", "2", "-c:v", "copy",
           "-c:s", "srt", "-metadata:s:s:0", "language=eng", str(path))  # fmt: skip
    for name in ("plain.mp4", "subs.srt", "chapters.txt"):
        (path.parent / name).unlink()
    return path


def many_channels(path: Path, channels: int = 12, rate: int = 48000) -> Path:
    """A camera-like MOV with `channels` channels of PCM at `rate` Hz (half a second of each)."""
    inputs = "".join(f"sine=frequency={200 + 50 * c}:sample_rate={rate}[a{c}];" for c in range(channels))
    merge = "".join(f"[a{c}]" for c in range(channels)) + f"amerge=inputs={channels}[a]"
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={SIZE[0]}x{SIZE[1]}:rate=12", "-filter_complex", inputs + merge,
           "-map", "0:v", "-map", "[a]", "-t", "0.5", *X264, "-c:a", "pcm_s16le", str(path))  # fmt: skip
    return path


def joined_ts(path: Path) -> Path:
    """Two recordings joined end to end (a stream recorder's parts): 64×48, then 96×64, the second's timestamps
    starting over."""
    parts = []
    for n, size in enumerate(((64, 48), (96, 64))):
        part = path.with_name(f"part{n}.ts")
        ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={size[0]}x{size[1]}:rate=12", "-frames:v", "6", *X264, str(part))
        parts.append(part)
    path.write_bytes(b"".join(p.read_bytes() for p in parts))
    for part in parts:
        part.unlink()
    return path


def resized_webm(path: Path, second: tuple[int, int] = (96, 64)) -> Path:
    """A WebM whose resolution changes at its 7th frame (a video call's recording), timestamps continuous."""
    names = []
    for n, size in enumerate(((64, 48), second)):
        part = path.with_name(f"part{n}.webm")
        ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={size[0]}x{size[1]}:rate=12", "-frames:v", "6", "-c:v",
               "libvpx-vp9", "-deadline", "realtime", str(part))  # fmt: skip
        names.append(part)
    listing = path.with_name("parts.txt")
    listing.write_text("".join(f"file '{p}'\n" for p in names), encoding="utf-8")
    ffmpeg("-f", "concat", "-safe", "0", "-i", str(listing), "-c", "copy", str(path))
    for leftover in (*names, listing):
        leftover.unlink()
    return path


def faces_of_two_sizes(path: Path) -> Path:
    """A photo of the same face twice: ~65 px wide on the left, ~100 px on the right."""
    crop = demo.photo()[30:230, 130:330]
    small = np.asarray(Image.fromarray(crop).resize((130, 130)))
    canvas = np.full((200, 340, 3), 90, np.uint8)
    canvas[35:165, 0:130] = small
    canvas[:, 140:340] = crop
    Image.fromarray(canvas).save(path)
    return path


def one_face(path: Path, side: int = 200) -> Path:
    """The astronaut's face on a 200×200 grey card, scaled to a `side`-px crop (the face ≈ side / 2 wide)."""
    crop = np.asarray(Image.fromarray(demo.photo()[30:230, 130:330]).resize((side, side)))
    card = np.full((200, 200, 3), 90, np.uint8)
    at = (200 - side) // 2
    card[at : at + side, at : at + side] = crop
    Image.fromarray(card).save(path)
    return path


# -- checks -------------------------------------------------------------------------------------------------------


def _same_colour(setup: Setup, sidecar: dict) -> None:
    """The output shows the target's colours: the flat area decodes (each by its own tags) to the same RGB, and the
    output carries the target's matrix, primaries, transfer and range."""
    data_in, data_out = ffprobe(setup.target), ffprobe(setup.output)
    for key in ("color_space", "color_primaries", "color_transfer", "color_range"):
        assert stream(data_out).get(key) == stream(data_in).get(key), key
    flat_in = decoded(setup.target)[:24].reshape(-1, 3).mean(axis=0)
    flat_out = decoded(setup.output)[:24].reshape(-1, 3).mean(axis=0)
    # Within what the enhancer itself changes (a few levels); the BT.709 mislabel moved green by 34.
    assert np.abs(flat_out - flat_in).max() <= 6, (flat_in, flat_out)


def _ten_bit_hevc(setup: Setup, sidecar: dict) -> None:
    _same_colour(setup, sidecar)
    out = stream(ffprobe(setup.output))
    assert (out["codec_name"], out["pix_fmt"]) == ("hevc", "yuv420p10le")
    assert sidecar["job"]["video"]["encoder"] == "libx265"


def _ten_bit_h264(setup: Setup, sidecar: dict) -> None:
    out = stream(ffprobe(setup.output))
    assert (out["codec_name"], out["pix_fmt"], out["profile"]) == ("h264", "yuv420p10le", "High 10")


def _untagged_hd(setup: Setup, sidecar: dict) -> None:
    """An HD clip that names no matrix is shown by players as BT.709: the output says BT.709 and shows those
    colours (decoded as BT.601, as ffmpeg alone would, they would be off)."""
    out = stream(ffprobe(setup.output))
    assert (out["color_space"], out["color_primaries"], out["color_transfer"]) == ("bt709", "bt709", "bt709")
    as_player = _decode_as(setup.target, "bt709")
    as_601 = _decode_as(setup.target, "bt601")
    shown = decoded(setup.output)[:400].reshape(-1, 3).mean(axis=0)
    assert np.abs(shown - as_player).max() <= 6 < np.abs(shown - as_601).max(), (shown, as_player, as_601)


def _decode_as(path: Path, matrix: str) -> np.ndarray:
    raw = subprocess.run(
        [video.find_ffmpeg(), "-nostdin", "-v", "error", "-i", str(path), "-frames:v", "1", "-vf",
         f"scale=in_color_matrix={matrix}:in_range=tv", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(720, 1280, 3)[:400].reshape(-1, 3).mean(axis=0)


def _geometry(sar: str, dar: str) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        out = stream(ffprobe(setup.output))
        assert (out["sample_aspect_ratio"], out["display_aspect_ratio"]) == (sar, dar)

    return check


def _square_gif(setup: Setup, sidecar: dict) -> None:
    out = stream(ffprobe(setup.output))
    assert (out["width"], out["height"]) == (76, 48)  # 64 × 32/27 = 75.9: the width it was shown at


def _alpha_kept(codec: str, decoder: str | None = None, tolerance: int = 1) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        out = stream(ffprobe(setup.output))
        assert out["codec_name"] == codec
        for frame in (0, 5):
            plane = decoded(setup.output, frame, decoder, alpha=True).astype(int)
            assert np.abs(plane - alpha_frame()).max() <= tolerance, frame

    return check


def _opaque(setup: Setup, sidecar: dict) -> None:
    out = stream(ffprobe(setup.output))
    assert (out["codec_name"], out["pix_fmt"]) == ("h264", "yuv420p")


def _gif_transparent(setup: Setup, sidecar: dict) -> None:
    plane = decoded(setup.output, 1, alpha=True)
    assert plane[:, : SIZE[0] // 3 - 1].max() == 0 and plane[:, SIZE[0] // 3 + 1 :].min() == 255


def _lasts(seconds: Fraction, frames: int | None = None) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        data = ffprobe(setup.output)
        assert abs(duration(data) - seconds) <= Fraction(1, 100), duration(data)
        if frames is not None:
            assert len(times(data)) == frames

    return check


def _same_times_and_end(setup: Setup, sidecar: dict) -> None:
    data_in, data_out = ffprobe(setup.target), ffprobe(setup.output)
    assert times(data_out) == times(data_in)
    assert abs(duration(data_out) - duration(data_in)) <= Fraction(1, 100)


def _gif_delays_kept(setup: Setup, sidecar: dict) -> None:
    data = ffprobe(setup.output)
    delays = [Fraction(p["duration_time"]) for p in data["packets"]]
    assert delays == [Fraction(d, 100) for d in (10, 20, 43, 49)]
    assert duration(data) == Fraction(122, 100)


def _tags_kept(setup: Setup, sidecar: dict) -> None:
    data = ffprobe(setup.output)
    tags = {k.lower(): v for k, v in data["format"]["tags"].items()}
    assert tags["title"] == "Birthday" and tags["artist"] == "Ann"
    assert tags["creation_time"].startswith("2020-01-02T03:04:05")
    assert tags["comment"].startswith("Grandma's 90th\n") and "Synthetic media" in tags["comment"]
    assert tags["synthetic"] == "true"
    assert stream(data)["tags"]["language"] == stream(data, "audio")["tags"]["language"] == "swe"


def _tags_stripped(setup: Setup, sidecar: dict) -> None:
    tags = {k.lower(): v for k, v in ffprobe(setup.output)["format"]["tags"].items()}
    assert "title" not in tags and "artist" not in tags and tags["synthetic"] == "true"
    assert tags["comment"].startswith("Synthetic media")


def _two_tracks(setup: Setup, sidecar: dict) -> None:
    data = ffprobe(setup.output)
    audio = [s for s in data["streams"] if s["codec_type"] == "audio"]
    assert [s["tags"]["language"] for s in audio] == ["eng", "fra"]
    assert sidecar["output"]["audio_tracks"] == 2


def _chapters_and_subtitles(setup: Setup, sidecar: dict) -> None:
    data = ffprobe(setup.output)
    assert [c["tags"]["title"] for c in data["chapters"]] == ["One", "Two"]
    subtitles = stream(data, "subtitle")
    assert (subtitles["codec_name"], subtitles["tags"]["language"]) == (
        "mov_text" if setup.output.suffix == ".mp4" else "subrip",
        "eng",
    )


def _channels(count: int, codec: str, rate: int = 48000) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        audio = stream(ffprobe(setup.output), "audio")
        assert (audio["channels"], audio["codec_name"], int(audio["sample_rate"])) == (count, codec, rate)

    return check


def _letterboxed(setup: Setup, sidecar: dict) -> None:
    """Every frame at the first size; those of the larger second part fitted in with black bars above and below;
    12 frames 1/12 s apart."""
    data = ffprobe(setup.output)
    assert all(abs(t - Fraction(k, 12)) < Fraction(1, 1000) for k, t in enumerate(times(data)))
    assert len(times(data)) == 12
    first, later = decoded(setup.output, 0), decoded(setup.output, 9)
    assert first[0].mean() > 40  # the first part fills the frame
    # (the bars bleed a little through the enhancer and the encoder: darker than any row of the picture)
    assert later[0].mean() < 25 and later[-1].mean() < 25 and later[SIZE[1] // 2].max() > 100


def _face_choice(used: int, by: str) -> Callable[[Setup, dict], None]:
    def check(setup: Setup, sidecar: dict) -> None:
        (choice,) = sidecar["faces"]["sources"]
        assert (choice["faces"], choice["used"], choice["largest"], choice["by"]) == (2, used, 2, by)

    return check


def _rotated_sar(path: Path) -> Path:
    plain = clip(path.with_name("plain.mp4"), extra=("-vf", "setsar=32/27"))
    try:
        ffmpeg("-display_rotation", "-90", "-i", str(plain), "-c", "copy", str(path))
    except subprocess.CalledProcessError:  # older FFmpeg: the `rotate` tag
        ffmpeg("-i", str(plain), "-c", "copy", "-metadata:s:v", "rotate=90", str(path))
    plain.unlink()
    return path


SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def _tagged_png(path: Path) -> Path:
    text = PngImagePlugin.PngInfo()
    text.add_text("Title", "Grandma")
    text.add_text("Author", "Ann")
    Image.fromarray(_pattern()).save(path, pnginfo=text, icc_profile=SRGB)
    return path


def _pattern() -> np.ndarray:
    y, x = np.mgrid[0 : SIZE[1], 0 : SIZE[0]]
    return np.dstack([x * 4, y * 5, (x // 8 + y // 8) % 2 * 200]).astype(np.uint8)


def _png_kept(setup: Setup, sidecar: dict) -> None:
    image = Image.open(setup.output)
    image.load()
    assert image.text["Title"] == "Grandma" and image.text["Author"] == "Ann" and image.text["synthetic"] == "true"
    assert image.info["icc_profile"] == Image.open(setup.target).info["icc_profile"]


def _camera_jpeg(path: Path) -> Path:
    exif = Image.Exif()
    exif[0x010F], exif[0x0110], exif[0x0112] = "Canon", "EOS R6", 6  # make, model, orientation: turned 90°
    exif.get_ifd(0x8769)[0x9003] = "2020:01:02 03:04:05"  # DateTimeOriginal
    exif.get_ifd(0x8825).update({1: "N", 2: (48.0, 51.0, 30.0)})  # GPS latitude
    Image.fromarray(_pattern()).save(path, exif=exif, icc_profile=SRGB, quality=95)
    return path


def _jpeg_kept(setup: Setup, sidecar: dict) -> None:
    image = Image.open(setup.output)
    exif = image.getexif()
    assert (exif[0x010F], exif[0x0110], exif.get(0x0112)) == ("Canon", "EOS R6", 1)
    assert exif.get_ifd(0x8769)[0x9003] == "2020:01:02 03:04:05" and exif.get_ifd(0x8825)[1] == "N"
    assert image.info["icc_profile"] == Image.open(setup.target).info["icc_profile"]
    assert video.read_image_metadata(setup.output)["synthetic"] == "true"


def _jpeg_stripped(setup: Setup, sidecar: dict) -> None:
    image = Image.open(setup.output)
    exif = image.getexif()
    assert 0x010F not in exif and not exif.get_ifd(0x8825) and "icc_profile" not in image.info
    assert video.read_image_metadata(setup.output)["synthetic"] == "true"


# -- cases --------------------------------------------------------------------------------------------------------


def _swap(target: Path, output: Path, source: Path, *more: str) -> Setup:
    return Setup(target, output, ["--processors", "face_swapper", "--source", str(source), *more])


CASES: dict[str, Case] = {
    # 1. colour description
    "10-bit HEVC tagged BT.2020": Case(
        lambda d: Setup(
            colour_clip(d / "hevc10.mp4", "bt2020", "bt2020", "bt2020-10", codec=X265_10, pix_fmt="yuv420p10le"),
            d / "out" / "out.mp4",
        ),
        frames=6,
        size=SIZE,
        check=_ten_bit_hevc,
    ),  # fmt: skip
    "full-range BT.601 phone video": Case(
        lambda d: Setup(
            colour_clip(d / "phone.mp4", "bt601", "smpte170m", "smpte170m", codec=X264, full=True),
            d / "out" / "out.mp4",
        ),
        frames=6,
        size=SIZE,
        check=_same_colour,
    ),  # fmt: skip
    "untagged HD video": Case(
        lambda d: Setup(
            colour_clip(d / "hd.mp4", "bt709", "", "", codec=X264, size=(1280, 720), frames=1, tag=False),
            d / "out" / "out.mp4",
        ),
        frames=1,
        size=(1280, 720),
        check=_untagged_hd,
    ),  # fmt: skip
    "10-bit video, video.encoder=libx264": Case(
        lambda d: Setup(
            colour_clip(
                d / "ten.mp4",
                "bt709",
                "bt709",
                "bt709",
                pix_fmt="yuv420p10le",
                codec=("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le"),
            ),
            d / "out" / "out.mp4",
            [*ENHANCE, "--set", "video.encoder=libx264"],
        ),
        frames=6,
        size=SIZE,
        check=_ten_bit_h264,
    ),  # fmt: skip
    "YCgCo colour matrix": Case(
        lambda d: Setup(clip(d / "ycgco.mp4", audio=False, extra=("-colorspace", "ycgco")), d / "out" / "out.mp4"),
        2,
        "uses the ycgco colour matrix, which this ffmpeg cannot convert exactly",
    ),  # fmt: skip
    "BT.2020 video to an animated GIF": Case(
        lambda d: Setup(
            colour_clip(d / "wide.mp4", "bt2020", "bt2020", "bt2020-10", codec=X265_10, pix_fmt="yuv420p10le"),
            d / "out" / "out.gif",
        ),
        frames=6,
        size=SIZE,
    ),  # fmt: skip
    # 2. display geometry
    "anamorphic video (SAR 32:27)": Case(
        lambda d: Setup(clip(d / "dvd.mp4", extra=("-vf", "setsar=32/27")), d / "out" / "out.mp4"),
        frames=6,
        size=SIZE,
        check=_geometry("32:27", "128:81"),
    ),  # fmt: skip
    "anamorphic video to Matroska and MOV": Case(
        lambda d: Setup(clip(d / "hdv.mkv", extra=("-vf", "setsar=4/3")), d / "out" / "out.mov"),
        frames=6,
        size=SIZE,
        check=_geometry("4:3", "16:9"),
    ),  # fmt: skip
    "anamorphic phone video rotated 90°": Case(
        lambda d: Setup(_rotated_sar(d / "r90.mp4"), d / "out" / "out.mp4"),
        frames=6,
        size=(48, 64),
        check=_geometry("27:32", "81:128"),
    ),  # fmt: skip
    "anamorphic video to an animated GIF": Case(
        lambda d: Setup(clip(d / "dvd.mp4", extra=("-vf", "setsar=32/27")), d / "out" / "out.gif"),
        frames=6,
        size=(76, 48),
        check=_square_gif,
    ),  # fmt: skip
    # 3. alpha
    "QuickTime Animation with alpha to .mov": Case(
        lambda d: Setup(alpha_clip(d / "argb.mov", ("-c:v", "qtrle", "-pix_fmt", "argb")), d / "out" / "out.mov"),
        frames=6,
        size=SIZE,
        check=_alpha_kept("prores"),
    ),  # fmt: skip
    "QuickTime Animation with alpha to .mp4": Case(
        lambda d: Setup(alpha_clip(d / "argb.mov", ("-c:v", "qtrle", "-pix_fmt", "argb")), d / "out" / "out.mp4"),
        2,
        "has transparency (an alpha channel), which MP4 cannot hold: write .mov (ProRes 4444), .webm or .mkv",
    ),  # fmt: skip
    "PNG-in-MOV with alpha to .webm": Case(
        lambda d: Setup(alpha_clip(d / "png.mov", ("-c:v", "png", "-pix_fmt", "rgba")), d / "out" / "out.webm"),
        frames=6,
        size=SIZE,
        check=_alpha_kept("vp9", "libvpx-vp9", tolerance=24),
    ),  # fmt: skip
    "VP9 with alpha (WebM) to .mov": Case(
        lambda d: Setup(
            alpha_clip(d / "alpha.webm", ("-c:v", "libvpx-vp9", "-pix_fmt", "yuva420p", "-deadline", "realtime")),
            d / "out" / "out.mov",
        ),
        frames=6,
        size=SIZE,
        check=_alpha_kept("prores", tolerance=24),
    ),  # fmt: skip
    "alpha to .mp4, video.alpha=drop": Case(
        lambda d: Setup(
            alpha_clip(d / "argb.mov", ("-c:v", "qtrle", "-pix_fmt", "argb")),
            d / "out" / "out.mp4",
            [*ENHANCE, "--set", "video.alpha=drop"],
        ),
        frames=6,
        size=SIZE,
        check=_opaque,
    ),  # fmt: skip
    "alpha to .mov, video.encoder=libx264": Case(
        lambda d: Setup(
            alpha_clip(d / "argb.mov", ("-c:v", "qtrle", "-pix_fmt", "argb")),
            d / "out" / "out.mov",
            [*ENHANCE, "--set", "video.encoder=libx264"],
        ),
        2,
        "which libx264 cannot keep: use video.encoder=auto (prores_ks in this container)",
    ),  # fmt: skip
    "transparent GIF to GIF": Case(
        lambda d: Setup(transparent_gif(d / "sticker.gif"), d / "out" / "out.gif"),
        frames=4,
        size=SIZE,
        check=_gif_transparent,
    ),  # fmt: skip
    # 4. the edges of time
    "one-frame video, its frame's duration": Case(
        lambda d: Setup(clip(d / "one.mp4", frames=1, audio=False), d / "out" / "out.mp4"),
        frames=1,
        size=SIZE,
        check=_lasts(Fraction(1, 12), 1),
    ),  # fmt: skip
    "one-frame video to Matroska": Case(
        lambda d: Setup(clip(d / "one.mp4", frames=1, audio=False), d / "out" / "out.mkv"),
        frames=1,
        size=SIZE,
        check=_lasts(Fraction(1, 12), 1),
    ),  # fmt: skip
    "GIF whose last frame is the longest, GIF output": Case(
        lambda d: Setup(long_last_gif(d / "long.gif"), d / "out" / "out.gif"),
        frames=4,
        size=SIZE,
        check=_gif_delays_kept,
    ),  # fmt: skip
    "GIF whose last frame is the longest, video output": Case(
        lambda d: Setup(long_last_gif(d / "long.gif"), d / "out" / "out.mp4"),
        frames=4,
        size=SIZE,
        check=_same_times_and_end,
    ),  # fmt: skip
    "screen recording with a held last frame": Case(
        lambda d: Setup(held_last_frame(d / "screen.mp4"), d / "out" / "out.mp4"),
        frames=6,
        size=SIZE,
        check=_same_times_and_end,
    ),  # fmt: skip
    # 5. metadata
    "MP4 with title, date, comment and languages": Case(
        lambda d: Setup(tagged_clip(d / "tagged.mp4"), d / "out" / "out.mp4"),
        frames=6,
        size=SIZE,
        check=_tags_kept,
    ),  # fmt: skip
    "MP4 with tags, --strip-metadata": Case(
        lambda d: Setup(tagged_clip(d / "tagged.mp4"), d / "out" / "out.mp4", [*ENHANCE, "--strip-metadata"]),
        frames=6,
        size=SIZE,
        check=_tags_stripped,
    ),  # fmt: skip
    "two audio tracks with languages": Case(
        lambda d: Setup(two_audio_tracks(d / "dub.mp4"), d / "out" / "out.mp4"),
        frames=6,
        size=SIZE,
        check=_two_tracks,
    ),  # fmt: skip
    "Matroska with chapters and subtitles": Case(
        lambda d: Setup(chapters_and_subtitles(d / "edit.mkv"), d / "out" / "out.mkv"),
        frames=6,
        size=SIZE,
        check=_chapters_and_subtitles,
    ),  # fmt: skip
    "Matroska with chapters and subtitles to MP4": Case(
        lambda d: Setup(chapters_and_subtitles(d / "edit.mkv"), d / "out" / "out.mp4"),
        frames=6,
        size=SIZE,
        check=_chapters_and_subtitles,
    ),  # fmt: skip
    "PNG with text chunks and an ICC profile": Case(
        lambda d: Setup(_tagged_png(d / "scan.png"), d / "out" / "out.png"),
        size=SIZE,
        check=_png_kept,
    ),  # fmt: skip
    "camera JPEG with EXIF, GPS and an ICC profile": Case(
        lambda d: Setup(_camera_jpeg(d / "camera.jpg"), d / "out" / "out.jpg"),
        size=(48, 64),
        check=_jpeg_kept,
    ),  # fmt: skip
    "camera JPEG, --strip-metadata": Case(
        lambda d: Setup(_camera_jpeg(d / "camera.jpg"), d / "out" / "out.jpg", [*ENHANCE, "--strip-metadata"]),
        size=(48, 64),
        check=_jpeg_stripped,
    ),  # fmt: skip
    # 6. a source with several faces
    "source photo with two faces": Case(
        lambda d: _swap(one_face(d / "target.png"), d / "out" / "out.png", faces_of_two_sizes(d / "two.png")),
        size=(200, 200),
        check=_face_choice(2, "largest"),
    ),  # fmt: skip
    "source photo with two faces, --source-face 1": Case(
        lambda d: _swap(
            one_face(d / "target.png"), d / "out" / "out.png", faces_of_two_sizes(d / "two.png"), "--source-face", "1"
        ),
        size=(200, 200),
        check=_face_choice(1, "source_face"),
    ),  # fmt: skip
    "source photo with two faces, --source-face 3": Case(
        lambda d: _swap(
            one_face(d / "target.png"), d / "out" / "out.png", faces_of_two_sizes(d / "two.png"), "--source-face", "3"
        ),
        2,
        "faces.source_face=3, but the source image",
    ),  # fmt: skip
    # 9. mid-stream changes
    "recordings joined end to end, resolution changes": Case(
        lambda d: Setup(joined_ts(d / "stream.ts"), d / "out" / "out.mp4"),
        frames=12,
        size=SIZE,
        check=_letterboxed,
    ),  # fmt: skip
    "WebM whose resolution changes mid-way": Case(
        lambda d: Setup(resized_webm(d / "call.webm"), d / "out" / "out.mp4"),
        frames=12,
        size=SIZE,
        check=_letterboxed,
    ),  # fmt: skip
    # 10. audio layouts
    "12-channel audio into MP4": Case(
        lambda d: Setup(many_channels(d / "array.mov"), d / "out" / "out.mp4"),
        2,
        "audio track 1 has 12 channels, and aac in MP4 holds at most 8: write MOV or Matroska",
    ),  # fmt: skip
    "12-channel audio into Matroska": Case(
        lambda d: Setup(many_channels(d / "array.mov"), d / "out" / "out.mkv"),
        frames=6,
        size=SIZE,
        check=_channels(12, "pcm_s16le"),
    ),  # fmt: skip
    "5.1 PCM from a camera into MP4": Case(
        lambda d: Setup(many_channels(d / "camera.mov", 6), d / "out" / "out.mp4"),
        frames=6,
        size=SIZE,
        check=_channels(6, "aac"),
    ),  # fmt: skip
    "192 kHz audio into MP4": Case(
        lambda d: Setup(many_channels(d / "recorder.mov", 2, 192000), d / "out" / "out.mp4"),
        frames=6,
        size=SIZE,
        check=_channels(2, "aac", 48000),
    ),  # fmt: skip
    "AAC audio into WebM": Case(
        lambda d: Setup(clip(d / "clip.mp4"), d / "out" / "out.webm"),
        frames=6,
        size=SIZE,
        check=_channels(1, "opus", 48000),
    ),  # fmt: skip
    # 11. encoder limits
    "8×8 video, video.encoder=libx265": Case(
        lambda d: Setup(
            clip(d / "tiny.mp4", size=(8, 8)), d / "out" / "out.mp4", [*ENHANCE, "--set", "video.encoder=libx265"]
        ),
        2,
        "the output would be 8×8 pixels, and libx265 encodes at least 16×16",
    ),  # fmt: skip
    "64×48 video, video.encoder=h264_nvenc": Case(
        lambda d: Setup(clip(d / "clip.mp4"), d / "out" / "out.mp4", [*ENHANCE, "--set", "video.encoder=h264_nvenc"]),
        2,
        "the output would be 64×48 pixels, and h264_nvenc encodes at least 146×145",
    ),  # fmt: skip
    "64×48 video, video.encoder=av1_nvenc": Case(
        lambda d: Setup(clip(d / "clip.mp4"), d / "out" / "out.mkv", [*ENHANCE, "--set", "video.encoder=av1_nvenc"]),
        2,
        "and av1_nvenc encodes at least 128×128",
    ),  # fmt: skip
    "ProRes into MP4": Case(
        lambda d: Setup(clip(d / "clip.mp4"), d / "out" / "out.mp4", [*ENHANCE, "--set", "video.encoder=prores_ks"]),
        2,
        "cannot write prores_ks video to out.mp4: MP4 cannot hold it; use .mov, .mkv",
    ),  # fmt: skip
    "VP9 output beyond libvpx's largest size": Case(
        lambda d: Setup(
            clip(d / "strip.mp4", size=(4100, 16), frames=2, audio=False),
            d / "out" / "out.webm",
            ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=4"],
        ),
        2,
        "the output would be 16400×64 pixels, and libvpx-vp9 encodes at most 16384×16384",
    ),  # fmt: skip
    # the unclear ones
    "a face of about 28 px": Case(
        lambda d: _swap(one_face(d / "small.png", 56), d / "out" / "out.png", one_face(d / "source.png")),
        2,
        "(searched for faces of at least 40 px; faces.min_face=20 finds smaller ones, more slowly)",
    ),  # fmt: skip
    "a face of about 28 px, faces.min_face=20": Case(
        lambda d: _swap(
            one_face(d / "small.png", 56),
            d / "out" / "out.png",
            one_face(d / "source.png"),
            "--set",
            "faces.min_face=20",
        ),
        size=(200, 200),
    ),  # fmt: skip
}


@pytest.mark.skipif(not Path("/proc").is_dir() or shutil.which("ffprobe") is None, reason="needs /proc and ffprobe")
@pytest.mark.parametrize("name", list(CASES))
def test_media_exact(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_case(CASES[name], tmp_path, monkeypatch, capsys)


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


# -- 7. resume knows its input by content -------------------------------------------------------------------------


def _raw_clip(path: Path, source: str) -> Path:
    """12 uncompressed frames of a lavfi `source`: any picture gives a file of the same size."""
    ffmpeg("-f", "lavfi", "-i", f"{source}=size={SIZE[0]}x{SIZE[1]}:rate=12", "-frames:v", "12", "-c:v", "rawvideo",
           "-pix_fmt", "rgb24", str(path))  # fmt: skip
    return path


def _replace_keeping_size_and_time(path: Path, other: Path) -> None:
    """`cp -p` of other bytes over `path`: the same size and modification time, other content."""
    stat = path.stat()
    shutil.copyfile(other, path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)


def _interrupt_after_a_segment(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Stop the next run as Ctrl-C would, once its first segment is recorded; returns the undo."""
    finish = jobdir.JobFolder.finish

    def finish_then_stop(self: jobdir.JobFolder, *args: Any, **kwargs: Any) -> None:
        finish(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(jobdir.JobFolder, "finish", finish_then_stop)
    return lambda: monkeypatch.setattr(jobdir.JobFolder, "finish", finish)


def test_resume_refuses_a_target_replaced_with_the_same_size_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target, other = _raw_clip(tmp_path / "clip.mov", "testsrc2"), _raw_clip(tmp_path / "bars.mov", "smptebars")
    out = tmp_path / "out.mp4"
    monkeypatch.setenv("FACESTUDIO_JOBS", str(tmp_path / "jobs"))
    args = ["run", "--target", str(target), "--output", str(out), *ENHANCE, "--set", "video.segment_frames=6",
            "--yes"]  # fmt: skip
    undo = _interrupt_after_a_segment(monkeypatch)
    assert cli.main(args) == 4
    undo()
    _replace_keeping_size_and_time(target, other)
    capsys.readouterr()
    assert cli.main([*args, "--resume"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: cannot resume: the target ") and "is not the file the interrupted job for" in line
    assert line.endswith("(its frames differ); run without --resume to start over") and not out.exists()
    # Started over, every frame is the new target's.
    assert cli.main(args) == 0
    first = np.asarray(decoded(out, 0), np.int16)
    assert np.abs(first - np.asarray(decoded(other, 0), np.int16)).mean() < 8
    assert np.abs(first - np.asarray(decoded(_raw_clip(tmp_path / "again.mov", "testsrc2"), 0), np.int16)).mean() > 30


def test_resume_refuses_a_source_photo_replaced_with_the_same_size_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = clip(tmp_path / "clip.mp4", frames=12, audio=False)
    source, other = tmp_path / "face.bmp", tmp_path / "other.bmp"  # BMP: the same size whatever the pixels
    Image.open(one_face(tmp_path / "face.png")).save(source)
    Image.fromarray(np.asarray(Image.open(source))[:, ::-1]).save(other)
    monkeypatch.setenv("FACESTUDIO_JOBS", str(tmp_path / "jobs"))
    args = ["run", "--target", str(target), "--output", str(tmp_path / "out.mp4"), "--processors", "face_swapper",
            "--source", str(source), "--set", "video.segment_frames=6", "--yes"]  # fmt: skip
    undo = _interrupt_after_a_segment(monkeypatch)
    assert cli.main(args) == 4
    undo()
    _replace_keeping_size_and_time(source, other)
    capsys.readouterr()
    assert cli.main([*args, "--resume"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "cannot resume: the interrupted job for" in line and "(source_files differ)" in line


def test_a_job_folder_refuses_another_target_content(tmp_path: Path) -> None:
    plan = segments.plan(12, 6)
    folder = jobdir.JobFolder.open(tmp_path, "0" * 16, {"target_content": "a"}, plan, {"target": "t", "output": "o"},
                                   resume=False)  # fmt: skip
    folder.manifest["done"]["0"] = {"frames": 6, "bytes": 0}
    (tmp_path / ("0" * 16) / segments.segment_name(0)).write_bytes(b"")
    jobdir._write_json(folder.path / jobdir.MANIFEST_FILE, folder.manifest)
    with pytest.raises(InvalidInput, match=r"^cannot resume: the target t is not the file the interrupted job for o"):
        jobdir.JobFolder.open(tmp_path, "0" * 16, {"target_content": "b"}, plan, {"target": "t", "output": "o"},
                              resume=True)  # fmt: skip


# -- 8. verify, both ways -----------------------------------------------------------------------------------------


def _verify(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["verify", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("suffix", [".mp4", ".png"])
def test_verify_checks_the_sidecar_against_what_was_signed_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    target = clip(tmp_path / "clip.mp4") if suffix == ".mp4" else _tagged_png(tmp_path / "card.png")
    out = tmp_path / f"out{suffix}"
    assert cli.main(["run", "--target", str(target), "--output", str(out), *ENHANCE, "--yes"]) == 0
    side = out.with_name(out.name + ".job.json")
    for given in (out, side):
        code, text, _ = _verify(capsys, given)
        assert code == 0 and f"sidecar: {side.name} matches what was signed" in text, text
    data = json.loads(side.read_text(encoding="utf-8"))
    data["output"]["frames"] += 1  # one number changed, the JSON still valid
    side.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    for given in (out, side):
        code, text, _ = _verify(capsys, given)
        assert code == 2 and f"sidecar: {side.name} was EDITED after signing" in text, text
    side.unlink()
    code, text, _ = _verify(capsys, out)
    assert code == 0 and f"sidecar: {side.name} none beside the file" in text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: (d / "empty.mp4").write_bytes(b"") or d / "empty.mp4",
         "error: empty.mp4 is empty (0 bytes): nothing was ever signed in it"),
        (lambda d: (d / "notes.txt").write_text("hello\n") and d / "notes.txt",
         "error: notes.txt is not a media file (no image or video, and no Content Credentials in it)"),
        (lambda d: (d / "gone.mp4.job.json").write_text("{}") and d / "gone.mp4.job.json",
         "error: gone.mp4.job.json is a job sidecar, but its file gone.mp4 is not beside it"),
    ],
)  # fmt: skip
def test_verify_says_what_was_never_signed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path], message: str
) -> None:
    code, _, err = _verify(capsys, make(tmp_path))
    (line,) = err.splitlines()
    assert code == 2 and line.startswith(message), line


# -- the read-only models folder ----------------------------------------------------------------------------------


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on a read-only file system (a tmpfs mounted `ro`); where nothing can be mounted, one whose
    permission bits forbid writing, unless they do not bind (root): then the test is skipped."""
    folder = tmp_path / "models"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)]).returncode == 0:
        yield folder
        subprocess.run(["umount", "-l", str(folder)], check=False)
        return
    folder.chmod(0o555)
    try:
        (folder / "probe").write_bytes(b"")
    except OSError:
        yield folder
    else:
        pytest.skip("permission bits do not bind here and no read-only tmpfs can be mounted")
    finally:
        folder.chmod(0o755)


def test_fetch_into_a_read_only_folder_names_it(server: Any, read_only_folder: Path) -> None:
    from engine.core.errors import ModelUnavailable
    from engine.models.fetch import ensure, fetch

    item = server.item("model.onnx", b"x" * 1000)
    for folder in (read_only_folder, read_only_folder / "sub"):
        for call in (lambda at: ensure([item], at, offline=False), lambda at: fetch(item, at)):
            with pytest.raises(ModelUnavailable) as raised:
                call(folder)
            message = str(raised.value)
            assert message.startswith(f"cannot download model.onnx into {folder}: {read_only_folder} is read-only")
            assert "FACESTUDIO_MODELS" in message and "network" not in message and "\n" not in message
    assert server.state.requests == []


# -- the plans, decided before any work ---------------------------------------------------------------------------


def _info(**picture: Any) -> MediaInfo:
    return MediaInfo(Path("t.mp4"), "video", 64, 48, 6, 12.0, "12/1", 0.5, 0, False, None, False, "h264",
                     picture.get("pix_fmt", "yuv420p"), "mov,mp4", Fraction(1, 12288), tuple(range(0, 6144, 1024)),
                     picture=Picture(**picture))  # fmt: skip


@pytest.mark.parametrize(
    ("picture", "encoder", "muxer", "pix_fmt", "tags", "note"),
    [
        ({"pix_fmt": "yuv420p10le", "depth": 10, "matrix": "bt2020nc", "primaries": "bt2020",
          "transfer": "bt2020-10", "range": "tv"}, "libx265", "mp4", "yuv420p10le",
         ("bt2020nc", "bt2020", "bt2020-10", "tv"), "depth: 10-bit (libx265, yuv420p10le) like the target"),
        ({"pix_fmt": "yuv420p10le", "depth": 10}, "hevc_nvenc", "mp4", "p010le", ("bt709", "bt709", "bt709", "tv"),
         "depth: 10-bit"),
        ({"pix_fmt": "yuv420p10le", "depth": 10}, "h264_nvenc", "mp4", "yuv420p", ("bt709", "bt709", "bt709", "tv"),
         "depth: 8-bit, since h264_nvenc writes no 10-bit video here (the target is 10-bit): set "
         "video.encoder=libx265 to keep 10 bits"),
        ({"pix_fmt": "yuvj420p", "matrix": "smpte170m"}, "libx264", "mp4", "yuv420p",
         ("smpte170m", "smpte170m", "smpte170m", "pc"), None),
        ({"pix_fmt": "bgr0"}, "libx264", "mkv", "yuv420p", ("bt709", "bt709", "bt709", "tv"), None),
        ({"pix_fmt": "yuv420p", "sar": Fraction(32, 27)}, "libx264", "mov", "yuv420p",
         ("bt709", "bt709", "bt709", "tv"), "aspect: pixels kept 32:27 (shown 128:81)"),
        ({"pix_fmt": "argb", "alpha": True}, "prores_ks", "mov", "yuva444p10le", ("bt709", "bt709", "bt709", "tv"),
         "alpha: kept"),
    ],
)  # fmt: skip
def test_plan_picture_keeps_the_description(
    picture: dict, encoder: str, muxer: str, pix_fmt: str, tags: tuple, note: str | None
) -> None:
    planned = video.plan_picture(_info(**picture), encoder, {"mkv": "matroska"}.get(muxer, muxer))
    assert planned.pix_fmt == pix_fmt
    assert (planned.colorspace, planned.primaries, planned.transfer, planned.range) == tags
    assert note is None or any(n.startswith(note) for n in planned.notes), planned.notes


def test_plan_picture_refuses_alpha_where_it_cannot_be_kept() -> None:
    info = _info(pix_fmt="argb", alpha=True)
    with pytest.raises(InvalidInput, match=r"^t\.mp4 has transparency .*MP4 cannot hold: write \.mov"):
        video.plan_picture(info, "libx264", "mp4")
    with pytest.raises(InvalidInput, match="which libx264 cannot keep: use video.encoder=auto"):
        video.plan_picture(info, "libx264", "mov")
    dropped = video.plan_picture(info, "libx264", "mp4", alpha="drop")
    assert not dropped.alpha and dropped.notes[0].startswith("alpha: the target's transparency is dropped")
    gif = video.plan_picture(info, "libx264", "gif")
    assert (gif.encoder, gif.pix_fmt, gif.alpha) == ("qtrle", "argb", True)


def test_a_gif_of_wide_gamut_video_is_converted_to_srgb() -> None:
    info = _info(pix_fmt="yuv420p10le", depth=10, matrix="bt2020nc", primaries="bt2020", transfer="bt2020-10")
    planned = video.plan_picture(info, "libx264", "gif")
    assert planned.convert == ("colorspace=all=bt709:iprimaries=bt2020:itrc=bt2020-10:ispace=bt2020ncl:format=yuv444p")
    assert any(n.startswith("colour: converted from bt2020 to BT.709 (sRGB) for the GIF") for n in planned.notes)


def _tracks(*tracks: AudioTrack, other: tuple = (), tags: dict | None = None) -> MediaInfo:
    return MediaInfo(Path("t.mov"), "video", 64, 48, 6, 12.0, "12/1", 0.5, 0, bool(tracks), None, False, "h264",
                     "yuv420p", "mov,mp4", Fraction(1, 12288), tuple(range(0, 6144, 1024)), audio_tracks=tracks,
                     other_streams=other, tags=tags or {})  # fmt: skip


OURS = {"comment": "Synthetic media", "synthetic": "true"}


def test_plan_streams_copies_converts_and_refuses_audio_before_work() -> None:
    pcm12 = AudioTrack(0, "pcm_s16le", 12, "", 48000)
    with pytest.raises(InvalidInput, match=r"^t\.mov's audio track 1 has 12 channels, and aac in MP4 holds at most "
                                           r"8: write MOV or Matroska, which keep its pcm_s16le as it is, or set "
                                           r"video\.keep_audio=false$"):  # fmt: skip
        video.plan_streams(_tracks(pcm12), "mp4", OURS)
    with pytest.raises(InvalidInput, match=r"holds at most 8: set video\.keep_audio=false$"):
        video.plan_streams(_tracks(pcm12), "mov", OURS, cut=True)  # a cut re-encodes, whatever the container
    assert video.plan_streams(_tracks(pcm12), "matroska", OURS).tracks == (video.Track("a", 0),)
    hi = video.plan_streams(_tracks(AudioTrack(0, "pcm_s24le", 2, "stereo", 192000)), "mp4", OURS)
    assert hi.tracks == (video.Track("a", 0, "aac", 48000),) and "resampled from 192000 Hz" in hi.notes[0]
    web = video.plan_streams(_tracks(AudioTrack(0, "aac", 2, "stereo", 44100), AudioTrack(1, "opus", 2, "", 48000)),
                             "webm", OURS)  # fmt: skip
    assert web.tracks == (video.Track("a", 0, "libopus", 48000), video.Track("a", 1)) and web.audio == 2
    gif = video.plan_streams(_tracks(AudioTrack(0, "aac", 2, "stereo", 44100)), "gif", OURS)
    assert gif.tracks == () and gif.notes == ("audio: not kept, a GIF holds no sound",)


def test_plan_streams_adds_our_tags_to_the_users() -> None:
    info = _tracks(tags={"title": "Birthday", "comment": "Grandma", "major_brand": "isom", "encoder": "Lavf"},
                   other=(("subtitle", "hdmv_pgs_subtitle"), ("subtitle", "subrip"), ("data", "gpmd")))  # fmt: skip
    plan = video.plan_streams(info, "mp4", OURS)
    assert plan.tags == {"title": "Birthday", "comment": "Grandma\nSynthetic media", "synthetic": "true"}
    assert plan.tracks == (video.Track("s", 1, "mov_text"),)
    assert plan.notes == (
        "subtitles: track 1 (hdmv_pgs_subtitle) not kept, MP4 cannot hold it: write .mkv to keep it",
        "streams: not kept: gpmd (a camera's data, attachments or further video)",
    )
    stripped = video.plan_streams(info, "mp4", OURS, keep_metadata=False)
    assert stripped.tags == OURS and stripped.tracks == () and not stripped.chapters
    assert stripped.notes[0].startswith("metadata: the target's tags and chapters are not kept")


def test_choose_encoder_keeps_depth_and_alpha(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.media import encode

    monkeypatch.setattr(encode, "gpu_visible", lambda: False)
    assert video.choose_encoder("auto", 64, 48, muxer="mov", alpha=True) == ("prores_ks", None)
    assert video.choose_encoder("auto", 64, 48, muxer="matroska", alpha=True) == ("libvpx-vp9", None)
    assert video.choose_encoder("auto", 64, 48, muxer="webm") == ("libvpx-vp9", None)
    encoder, note = video.choose_encoder("auto", 64, 48, depth=10)
    assert (
        encoder == "libx265" and note is not None and note.startswith("encoder: libx265 (HEVC, keeps the target's 10")
    )
    assert video.choose_encoder("auto", 8, 8, depth=10)[0] == "libx264"  # under x265's 16×16


def test_decoding_uses_the_files_matrix_or_the_one_players_assume() -> None:
    from engine.media.decode import decoding

    assert (decoding(_info()).matrix, decoding(_info()).range) == ("smpte170m", None)  # SD, untagged
    hd = dataclasses.replace(_info(), width=1280, height=720)
    assert decoding(hd).matrix == "bt709"
    tagged = decoding(_info(matrix="bt2020nc", range="pc"))
    assert (tagged.matrix, tagged.range, tagged.size, tagged.letterbox) == ("bt2020", "pc", (64, 48), False)
    assert decoding(dataclasses.replace(_info(), sizes=((64, 48), (96, 64)))).letterbox


def test_timestamps_that_jump_back_or_repeat_are_mended() -> None:
    from engine.media.timing import mend

    # Two recordings joined: each GOP a keyframe, then B-frames; the second starts over at 0.
    pts = [0, 3, 1, 2, 4, 0, 3, 1, 2, 4]
    keys = [True, False, False, False, False, True, False, False, False, False]
    mended, note = mend(pts, keys)
    assert mended == list(range(10)) and note is not None and "jump back 1 time" in note
    assert mend([0, 2, 1, 3], [True, False, False, False]) == ([0, 1, 2, 3], None)  # reordering, not a jump
    repeated, note = mend([0, 10, 10, 20], [True, True, True, True])
    assert repeated == [0, 10, 20, 30] and note is not None and "repeat for 1 frame" in note


def test_the_ending_filter_gives_the_last_frame_its_duration() -> None:
    from engine.media import commands as cmd

    assert cmd.Ending(4096, 22528).bsf() == [
        "-bsf:v", "setts=pts=PTS:dts=DTS:duration='if(gte(PTS-STARTPTS,4096),18432,DURATION)'",
    ]  # fmt: skip
