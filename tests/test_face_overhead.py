"""Where a video's faces are found and its identity checked does not change what a run makes: on the processing
thread (fewer than 4 cores, engine/run/render.py) or on threads of their own (4 or more), the same default face job
writes the same frames and the same identity figures, and only the latter starts the analysis and QA threads."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import cli
from engine import media
from engine.media import demo
from engine.run import render


def _run(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> tuple[list[np.ndarray], str]:
    clip = tmp_path / "clip.mp4"
    if not clip.exists():
        demo.make_clip(clip, 320, 180, 24)
        Image.open(demo.source_photo()).convert("RGB").save(tmp_path / "source.png")
    out = tmp_path / f"{name}.mp4"
    capsys.readouterr()
    code = cli.main(["run", "--source", str(tmp_path / "source.png"), "--target", str(clip), "--output", str(out),
                     "--set", "faces.qa_every=2", "--yes"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    with media.FrameReader(out) as reader:
        frames = list(reader)
    (identity,) = [line for line in captured.out.splitlines() if line.startswith("identity:")]
    return frames, identity


@pytest.mark.slow
def test_faces_and_identity_qa_inline_or_on_threads_give_the_same_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(render, "usable_cores", lambda: 2)
    inline, inline_identity = _run(tmp_path, "inline", capsys)
    assert "facestudio-faces" not in started and "facestudio-qa" not in started
    started.clear()
    monkeypatch.setattr(render, "usable_cores", lambda: render.AHEAD_CORES)
    ahead, ahead_identity = _run(tmp_path, "ahead", capsys)
    assert "facestudio-faces" in started and "facestudio-qa" in started
    assert len(inline) == len(ahead) == 24
    assert all(np.array_equal(a, b) for a, b in zip(inline, ahead, strict=True))
    assert inline_identity == ahead_identity and "0 of 12 checked faces flagged" in inline_identity
