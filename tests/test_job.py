"""Jobs, presets and --set overrides: validation errors name the bad key and the valid ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.errors import InvalidJob
from engine.job.settings import Job, Preset, apply_overrides, load_preset_raw, parse_value, preset_schema
from processors import REGISTRY, build_registry
from processors.frame_enhancer import FrameEnhancer, FrameEnhancerOptions

BASE = {"processors": ["frame_enhancer"], "target": "in.mp4", "output": "out.mp4"}


def parse(raw: dict) -> Job:
    return Job.parse(raw, REGISTRY)


def test_defaults_and_round_trip() -> None:
    job = parse(BASE)
    assert job.options["frame_enhancer"] == FrameEnhancerOptions()
    assert job.runtime.backend == "auto" and job.video.crf == 18
    assert parse(job.to_raw()) == job


def test_overrides_are_typed_and_validated() -> None:
    raw = apply_overrides(
        BASE,
        [
            "frame_enhancer.scale=2",
            "frame_enhancer.model=real_esrgan_x4plus",
            "runtime.batch=8",
            "video.crf=20",
            "faces.selector=reference",
            "faces.reference_image=ref.png",
        ],
        REGISTRY,
    )
    job = parse(raw)
    assert job.options["frame_enhancer"].scale == 2.0
    assert job.options["frame_enhancer"].model == "real_esrgan_x4plus"
    assert job.runtime.batch == 8 and job.video.crf == 20
    assert job.faces.selector == "reference" and job.faces.reference_image == Path("ref.png")
    assert BASE.get("frame_enhancer") is None  # the input mapping is not mutated


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["frame_enhancer.scal=2"], "unknown setting frame_enhancer.scal; valid: backend, model, scale, blend, tile"),
        (["nope.x=1"], "unknown settings group 'nope'"),
        (["frame_enhancer"], "--set takes GROUP.FIELD=VALUE"),
        (["runtime.gpu=1"], "unknown setting runtime.gpu; valid: backend, device"),
    ],
)
def test_unknown_override_keys(sets: list[str], message: str) -> None:
    with pytest.raises(InvalidJob, match=message.replace(".", r"\.").replace("(", r"\(")):
        apply_overrides(BASE, sets, REGISTRY)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"frame_enhancer": {"scale": 5}}, "frame_enhancer.scale: Input should be less than or equal to 4"),
        ({"frame_enhancer": {"model": "gfpgan"}}, "frame_enhancer.model: Value error, unknown frame_enhancer model"),
        ({"frame_enhancer": {"tile": 8}}, "frame_enhancer.tile: Value error, tile must be 0"),
        ({"runtime": {"device": "tpu"}}, "runtime.device: String should match pattern"),
        (
            {"processors": ["morpher"]},
            "unknown processor 'morpher'; available: face_swapper, deep_swapper, age_modifier, face_editor, "
            "expression_restorer",
        ),
        ({"processors": []}, "no processors chosen"),
        ({"colour": 1}, "unknown setting 'colour'"),
    ],
)
def test_invalid_jobs_give_one_line(override: dict, fragment: str) -> None:
    with pytest.raises(InvalidJob) as info:
        parse({**BASE, **override})
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_job_needs_target_and_output() -> None:
    with pytest.raises(InvalidJob, match="a job needs output"):
        parse({"processors": ["frame_enhancer"], "target": "x.mp4"})


def test_parse_value() -> None:
    assert parse_value("2") == 2 and parse_value("0.5") == 0.5 and parse_value("true") is True
    assert parse_value("realesr_animevideov3") == "realesr_animevideov3"
    assert parse_value('"2"') == "2"


def test_builtin_presets_validate_and_preset_rejects_target() -> None:
    for path in sorted((Path(__file__).parent.parent / "presets").glob("*.toml")):
        Preset.parse(load_preset_raw(path), REGISTRY)
    with pytest.raises(InvalidJob, match="unknown setting 'target'"):
        Preset.parse({"processors": ["frame_enhancer"], "target": "x"}, REGISTRY)


def test_missing_preset_names_the_builtin_ones() -> None:
    with pytest.raises(InvalidJob) as caught:
        load_preset_raw("nope")
    assert str(caught.value) == (
        "preset 'nope' not found; presets: anime, default, hyperswap, inswapper, lip_sync, photo_x4, swap_enhance,"
        " swap_restore, upscale"
    )


def test_schema_lists_every_processor_and_group() -> None:
    schema = preset_schema(REGISTRY)
    expected = {"processors", "face_swapper", "expression_restorer", "lip_syncer", "face_enhancer", "frame_enhancer"}
    expected |= {"face_debugger", "deep_swapper", "age_modifier", "face_editor", "frame_colourizer"}
    expected |= {"background_remover", "faces", "video", "runtime"}
    assert set(schema["properties"]) == expected
    fe = schema["properties"]["frame_enhancer"]["properties"]
    assert fe["scale"]["anyOf"][0]["maximum"] == 4.0
    assert "realesr_animevideov3" in fe["model"]["enum"]


def test_registry_rejects_duplicate_ids() -> None:
    with pytest.raises(ValueError, match="share the id 'frame_enhancer'"):
        build_registry([FrameEnhancer, FrameEnhancer])


def test_video_settings_defaults_overrides_and_round_trip() -> None:
    job = parse(BASE)
    assert (job.video.encoder, job.video.fps, job.video.trim_start, job.video.trim_end) == ("auto", None, 0.0, None)
    sets = ["video.encoder=libx265", "video.fps=12", "video.trim_start=0.5", "video.trim_end=1.5"]
    job = parse(apply_overrides(BASE, sets, REGISTRY))
    assert (job.video.encoder, job.video.fps, job.video.trim_start, job.video.trim_end) == ("libx265", 12.0, 0.5, 1.5)
    assert parse(job.to_raw()) == job


@pytest.mark.parametrize(
    ("video", "fragment"),
    [
        ({"trim_start": 1.0, "trim_end": 1.0}, "video.trim_end: Value error, trim_end must be after trim_start (1 s)"),
        ({"trim_start": 2, "trim_end": 0.5}, "video.trim_end: Value error, trim_end must be after trim_start (2 s)"),
        ({"trim_end": 0}, "video.trim_end: Input should be greater than 0"),
        ({"trim_start": -0.5}, "video.trim_start: Input should be greater than or equal to 0"),
        ({"trim_start": float("inf")}, "video.trim_start: Input should be a finite number"),
        ({"fps": 0.5}, "video.fps: Input should be greater than or equal to 1"),
        ({"fps": 241}, "video.fps: Input should be less than or equal to 240"),
        ({"fps": float("nan")}, "video.fps: Input should be a finite number"),
        (
            {"encoder": "libaom-av1"},
            "video.encoder: Input should be 'auto', 'libx264', 'libx265', 'h264_nvenc', 'hevc_nvenc', 'av1_nvenc', "
            "'libvpx-vp9' or 'prores_ks'",
        ),
    ],
)
def test_invalid_video_settings_give_one_typed_line(video: dict, fragment: str) -> None:
    with pytest.raises(InvalidJob) as info:
        parse({**BASE, "video": video})
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_every_video_setting_is_described_for_the_ui() -> None:
    video = preset_schema(REGISTRY)["properties"]["video"]["properties"]
    assert {name for name, field in video.items() if not field.get("description")} == set()
    assert video["fps"]["anyOf"][0] == {"type": "number", "minimum": 1.0, "maximum": 240.0}
    assert video["trim_start"]["minimum"] == 0.0
    assert video["encoder"]["enum"] == [
        "auto", "libx264", "libx265", "h264_nvenc", "hevc_nvenc", "av1_nvenc", "libvpx-vp9", "prores_ks",
    ]  # fmt: skip
