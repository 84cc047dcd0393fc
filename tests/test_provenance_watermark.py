"""The invisible watermark (`video.watermark`): found after an ffmpeg re-encode at CRF 28 scaled to half, not found
in unmarked media, and what it costs in PSNR. Media are generated (the demo's drifting, zooming photo)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import skimage.data
from PIL import Image

import cli
from engine import media as video
from engine.job.settings import Job
from engine.media import demo
from engine.models.runtime import Runtime
from engine.provenance import watermark
from engine.run import pipeline
from tests.test_provenance import Same


def run_same(target: Path, output: Path, mark: bool) -> None:
    raw = {"processors": ["same"], "target": str(target), "output": str(output), "video": {"watermark": mark}}
    job = Job.parse(raw, {"same": Same})
    pipeline.run(job, [Same()], Runtime(job.runtime))


def recode_half_crf28(path: Path, out: Path) -> Path:
    """What an upload site does: re-encode with x264 at CRF 28, scaled to half (audio dropped)."""
    subprocess.run(
        [video.find_ffmpeg(), "-v", "error", "-y", "-i", str(path), "-vf", "scale=iw/2:ih/2", "-c:v", "libx264",
         "-crf", "28", "-an", str(out)],
        check=True,
    )  # fmt: skip
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(255.0**2 / np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo.make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", width=480, height=360, count=24, fps=24)


@pytest.mark.slow
def test_the_watermark_survives_crf28_at_half_size_and_is_absent_unmarked(
    clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marked, plain = tmp_path / "marked.mp4", tmp_path / "plain.mp4"
    run_same(clip, marked, True)
    run_same(clip, plain, False)
    marked_small = recode_half_crf28(marked, tmp_path / "marked_small.mp4")
    plain_small = recode_half_crf28(plain, tmp_path / "plain_small.mp4")
    assert (video.probe(marked_small).width, video.probe(marked_small).height) == (240, 180)
    found = watermark.detect(marked_small, "video")
    assert found.found and found.z >= found.threshold
    absent = watermark.detect(plain_small, "video")
    assert not absent.found and absent.z < 4.0
    assert not watermark.detect(clip, "video").found
    # verify says so, though the re-encode dropped the credentials and the container's tags.
    assert cli.main(["verify", str(marked_small)]) == 0
    out = capsys.readouterr().out
    assert "Content Credentials: none" in out and "watermark: found" in out and "tags:" not in out
    assert cli.main(["verify", str(plain_small)]) == 0
    assert "watermark: not found" in capsys.readouterr().out


def test_an_image_keeps_the_mark_through_jpeg_at_half_size(tmp_path: Path) -> None:
    target = tmp_path / "photo.png"
    Image.fromarray(skimage.data.chelsea()).save(target)
    marked, plain = tmp_path / "marked.png", tmp_path / "plain.png"
    run_same(target, marked, True)
    run_same(target, plain, False)
    for name, expected in ((marked, True), (plain, False)):
        frame, _ = video.read_image(name)
        small = cv2.resize(frame, (frame.shape[1] // 2, frame.shape[0] // 2), interpolation=cv2.INTER_AREA)
        out = tmp_path / f"{name.stem}_small.jpg"
        Image.fromarray(small).save(out, quality=75)
        assert watermark.detect(out, "image").found is expected
        assert watermark.detect(name, "image").found is expected


def test_the_cost_is_about_39_db_psnr_and_only_luma_moves() -> None:
    frames = demo.frames(640, 360, 8)
    marker = watermark.Marker()
    marked = [marker(f) for f in frames]
    costs = [psnr(m, f) for m, f in zip(marked, frames, strict=True)]
    assert min(costs) >= 38.0 and max(costs) <= 41.0
    for before, after in zip(frames, marked, strict=True):
        delta = after.astype(np.int16) - before
        inside = (after > 0).all(axis=2) & (after < 255).all(axis=2)  # no channel clipped at 0 or 255
        # The same change on R, G and B (up to rounding): luma moves, chroma does not.
        assert np.abs(delta[inside, 0] - delta[inside, 1]).max() <= 1
        assert np.abs(delta[inside, 0] - delta[inside, 2]).max() <= 1
        assert marked[0].dtype == np.uint8 and after.shape == before.shape


def test_unmarked_pictures_score_like_noise() -> None:
    """The score is a standard normal deviate for unmarked pictures whatever they show: none of these reach the
    threshold, and the mean and spread are those of N(0, 1) within sampling error."""
    names = [
        "astronaut",
        "camera",
        "chelsea",
        "coffee",
        "rocket",
        "brick",
        "grass",
        "gravel",
        "moon",
        "text",
        "page",
        "coins",
        "hubble_deep_field",
        "immunohistochemistry",
        "horse",
        "clock",
        "motorcycle_left",
        "cat",
    ]
    scores = []
    for name in names:
        if not hasattr(skimage.data, name):
            continue
        image = np.asarray(getattr(skimage.data, name)())
        for crop in (image, image[: image.shape[0] // 2], image[:, image.shape[1] // 3 :]):
            scores.append(watermark.score(crop.astype(np.float32).mean(axis=2) if crop.ndim == 3 else crop))
    assert len(scores) >= 45
    assert max(scores) < watermark.threshold(1)
    assert abs(float(np.mean(scores))) < 0.6 and 0.5 < float(np.std(scores)) < 1.6
    assert watermark.threshold(1) == pytest.approx(4.7534, abs=1e-3)
    assert watermark.threshold(32) > watermark.threshold(1)
