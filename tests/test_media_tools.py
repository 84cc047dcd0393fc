"""engine/media/tools.py and children.py: finding ffmpeg, what it can do, and its failures as typed errors."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest

from engine import media
from engine.core.errors import DiskFull, InvalidInput, MediaError
from engine.media.children import first_error, write_errno, write_error


def test_find_ffmpeg_runs() -> None:
    done = subprocess.run([media.find_ffmpeg(), "-version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("ffmpeg version")
    assert (media.ffmpeg_version(media.find_ffmpeg()) or (99, 0)) >= (5, 1)


def test_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    real = media.find_ffmpeg()
    monkeypatch.setenv("FACESTUDIO_FFMPEG", real)
    assert media.find_ffmpeg() == real
    monkeypatch.setenv("FACESTUDIO_FFPROBE", "none")
    assert media.find_ffprobe() is None
    monkeypatch.setenv("FACESTUDIO_FFMPEG", "/no/such/ffmpeg")
    with pytest.raises(InvalidInput, match="FACESTUDIO_FFMPEG=/no/such/ffmpeg"):
        media.find_ffmpeg()


def _fake_ffmpeg(tmp_path: Path, encoders: list[str]) -> str:
    """An 'ffmpeg' that only answers `-encoders`, listing `encoders` the way ffmpeg does."""
    script = tmp_path / "ffmpeg"
    lines = "\n".join(f" V....D {name:<20} {name} encoder" for name in encoders)
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\nEncoders:\n V..... = Video\n ------\n{lines}\nEOF\n")
    script.chmod(0o755)
    return str(script)


def test_available_encoders_of_the_real_ffmpeg() -> None:
    assert {"libx264", "libx264rgb", "aac", "gif"} <= media.available_encoders(media.find_ffmpeg())


def test_missing_encoder_is_one_actionable_line(tmp_path: Path) -> None:
    fake = _fake_ffmpeg(tmp_path, ["libx264", "aac"])
    media.check_encoder("libx264", fake)
    with pytest.raises(InvalidInput) as caught:
        media.check_encoder("libx265", fake)
    assert str(caught.value) == (
        f"the ffmpeg in use ({fake}) has no libx265 encoder: install an FFmpeg built with libx265 "
        "(imageio-ffmpeg's has it) and point FACESTUDIO_FFMPEG at it, or choose video.encoder=libx264"
    )


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("[out#0/mp4 @ 0x55] Error writing trailer: No space left on device", errno.ENOSPC),
        ("av_interleaved_write_frame(): Disk quota exceeded", errno.EDQUOT),
        ("Error submitting a packet to the muxer: File too large", errno.EFBIG),
        ("/x/y.mp4: File name too long", errno.ENAMETOOLONG),
        ("Invalid data found when processing input", None),
    ],
)
def test_file_system_refusals_are_recognised_in_ffmpegs_messages(line: str, code: int | None) -> None:
    assert write_errno(line) == code


def test_each_refusal_is_its_own_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "out.mp4"
    full = write_error(errno.ENOSPC, path, "out.mp4")
    assert isinstance(full, DiskFull) and full.folder == tmp_path and full.exit_code == 2
    assert str(full) == f"the disk of {tmp_path} is full (writing out.mp4)"
    assert "over its quota" in str(write_error(errno.EDQUOT, path, "out.mp4"))
    too_big = write_error(errno.EFBIG, path, "out.mp4")
    assert type(too_big) is InvalidInput and "FAT32 stops at 4 GiB" in str(too_big)
    assert type(write_error(errno.ENAMETOOLONG, path, "out.mp4")) is InvalidInput
    assert type(write_error(errno.EIO, path, "out.mp4")) is MediaError


def test_first_error_drops_prefixes_and_the_file_url() -> None:
    path = Path("/m/-x.mp4")
    assert first_error("  Stream #0:0: Video\n[mov @ 0x1] file:/m/-x.mp4: moov atom not found\n", path) == (
        "moov atom not found"
    )
