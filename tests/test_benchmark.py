"""`launch.py benchmark`: the documented JSON schema, the table, the plot, and the figures' internal consistency."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli
from engine import media
from engine.tools.benchmark import RESULT_KEYS, STAGE_KEYS


@pytest.mark.slow
def test_frame_enhancer_benchmark_writes_schema_table_and_plot(tmp_path: Path, capsys) -> None:
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    args = ["benchmark", "--processors", "frame_enhancer", "--set", "frame_enhancer.scale=2", "--resolution", "180p"]
    assert cli.main([*args, "--frames", "12", "--batch", "4", "--json", str(out), "--plot", str(plot)]) == 0
    result = json.loads(out.read_text())
    assert set(RESULT_KEYS) <= set(result)
    assert [s["name"] for s in result["stages"]] == ["decode", "frame_enhancer", "encode"]
    for stage in result["stages"]:
        assert set(STAGE_KEYS) <= set(stage) and 0 < stage["p50_ms"] <= stage["p95_ms"]
    assert result["frames"] == 12 and result["batch"] == 4 and result["peak_gpu_mb"] is None
    assert result["backend"] == "onnx" and result["provider"] == "CPUExecutionProvider"
    # The whole 320×180 frame fits in memory: nothing is computed twice.
    assert result["tile_waste"] == 1.0
    assert result["overhead_ratio"] == pytest.approx(result["floor_fps"] / result["fps"], rel=1e-2)
    assert result["batch_speedup"] == pytest.approx(result["floor_fps"] / result["batch1_floor_fps"], rel=1e-2)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "overhead ratio" in table and "frame_enhancer" in table and "tile waste 1.000" in table


def test_face_swap_chain_has_a_faces_stage(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert cli.main(["benchmark", "--processors", "face_swapper", "--resolution", "180p", "--frames", "6",
                     "--json", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert [s["name"] for s in result["stages"]] == ["decode", "faces", "face_swapper", "identity_qa", "encode"]
    # Which ffmpeg ran: its children's start-up is most of a run's fixed cost.
    ffmpeg = media.find_ffmpeg()
    version = ".".join(map(str, media.ffmpeg_version(ffmpeg) or ())) or None
    assert result["ffmpeg"] == {"executable": ffmpeg, "version": version, "ffprobe": media.find_ffprobe(ffmpeg)}


def test_bad_resolution_is_a_usage_error(capsys) -> None:
    assert cli.main(["benchmark", "--resolution", "4k"]) == 2
    assert "unknown resolution '4k'; use 180p, 360p, 720p, 1080p" in capsys.readouterr().err
