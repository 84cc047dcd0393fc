"""Option metadata declared once beside each field (engine/core/options.py), read alike by every front end."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from cli import main
from cli.presets import settings_help
from engine.core.options import OptionView, Shown, describe, ignored, view
from engine.job.settings import Preset, RuntimeSettings, preset_schema
from processors import REGISTRY


class _Opts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Literal["a", "b"] = "a"
    boost: Annotated[Literal[1, 2], Shown(when={"model": ("b",)}, unit="px")] = 1
    strength: Annotated[int, Shown(unit="%")] = Field(default=50, ge=0, le=100)
    gain: float = Field(default=0.5, ge=0.0, le=1.0)
    far: int = Field(default=3, ge=0)
    optional: float | None = Field(default=None, ge=1.0, le=4.0)
    on: Annotated[bool, Shown(unless={"model": ("a",)})] = False
    name: str = "x"
    batch: Annotated[int | Literal["auto"], Shown(suggest=("auto", 1, 4))] = "auto"
    listed: Annotated[str, Shown(models="frame_enhancer")] = "m1"


def _views() -> dict[str, OptionView]:
    return {v.name: v for v in describe(_Opts, model_choices=lambda task: [f"{task}:m1", f"{task}:m2"])}


def test_kinds_follow_the_field_types_and_bounds() -> None:
    views = _views()
    assert {name: v.kind for name, v in views.items()} == {
        "model": "choice",
        "boost": "choice",
        "strength": "slider",
        "gain": "slider",
        "far": "number",  # bounded on one side only
        "optional": "number",  # empty means the default, which a slider cannot say
        "on": "switch",
        "name": "text",
        "batch": "open_choice",
        "listed": "choice",
    }
    assert views["boost"].choices == (1, 2)
    assert views["listed"].choices == ("frame_enhancer:m1", "frame_enhancer:m2")
    assert (views["strength"].low, views["strength"].high, views["strength"].step) == (0.0, 100.0, 1.0)
    assert views["gain"].step == 0.01
    assert views["batch"].choices == ("auto", 1, 4)
    assert views["strength"].shown.unit == "%"


def test_applies_reads_the_siblings_values() -> None:
    views = _views()
    assert not views["boost"].applies({"model": "a"})
    assert views["boost"].applies({"model": "b"})
    assert views["on"].applies({"model": "b"}) and not views["on"].applies({"model": "a"})
    assert views["strength"].applies({"model": "a"})
    assert views["boost"].help_line() == "1 | 2 px; default 1; applies when model in [b]"


def test_explicitly_given_settings_that_do_not_apply_are_reported() -> None:
    assert ignored(_Opts(model="a", boost=2), "p") == ["p.boost (applies when model in [b])"]
    assert ignored(_Opts(model="b", boost=2), "p") == []
    assert ignored(_Opts(model="a"), "p") == []  # defaults are never "given"
    preset = Preset.parse(
        {"processors": ["face_swapper"], "face_swapper": {"model": "inswapper_128", "poisson": True}}, REGISTRY
    )
    assert preset.ignored_settings() == ["face_swapper.poisson (applies when model in [landmark_warp])"]


def test_the_preset_schema_carries_the_same_facts() -> None:
    props = preset_schema(REGISTRY)["properties"]
    boost = props["face_swapper"]["properties"]["pixel_boost"]
    assert boost["x-facestudio"] == {
        "unless": {"model": ["landmark_warp"]},
        "unit": "px",
        "suggest": [128, 256, 384, 512, 768, 1024],
    }
    # The swapper's model is a catalogue id: the schema lists the catalogue's face swappers.
    assert {"landmark_warp", "inswapper_128", "hyperswap_1a_256"} <= set(
        props["face_swapper"]["properties"]["model"]["enum"]
    )
    assert props["face_enhancer"]["properties"]["fidelity"]["x-facestudio"] == {"when": {"model": ["codeformer"]}}
    assert props["runtime"]["properties"]["batch"]["x-facestudio"]["suggest"] == ["auto", 1, 2, 4, 8, 16]


def test_the_cli_settings_help_lists_every_setting_with_its_condition(capsys: pytest.CaptureFixture[str]) -> None:
    text = settings_help(["face_enhancer", "runtime"])
    assert "  face_enhancer.fidelity  0–1; default 0.5; applies when model in [codeformer];" in text
    assert "  runtime.tensorrt  true | false; default False; applies when device not in [cpu]" in text
    # The frame enhancer's model is a string checked against the catalogue: its choices come from there.
    assert "frame_enhancer.model  realesr_animevideov3 | real_esrgan_x4plus" in settings_help(["frame_enhancer"])
    assert main(["presets", "options", "nope"]) == 2
    assert "unknown settings group nope; valid: face_swapper" in capsys.readouterr().err


def test_every_registered_option_has_a_view_and_bounded_numbers_are_sliders() -> None:
    for cls in REGISTRY.values():
        for option in describe(cls.Options, frozenset({"backend"})):
            if option.kind == "number":
                assert option.optional or option.low is None or option.high is None, option.name
    views = {v.name: v for v in describe(RuntimeSettings)}
    assert views["device"].kind == "open_choice"
    assert view("blend", REGISTRY["face_swapper"].Options.model_fields["blend"]).kind == "slider"
