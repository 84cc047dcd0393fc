"""The toolbox's options are declared once and every front end follows: the CLI's settings help (`presets
options`), the preset schema and the studio's widget views show their ranges, units and conditions; the deep
swapper's file is a file setting: an upload from the studio and the jobs API, a path only from the CLI."""

from __future__ import annotations

import json

import pytest

import cli
from engine.core.options import describe
from engine.job.settings import preset_schema
from engine.models.manifest import Manifest
from processors import REGISTRY

NEW = ("age_modifier", "face_editor", "frame_colourizer", "background_remover", "deep_swapper")


def test_the_cli_help_states_ranges_units_and_conditions(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["presets", "options", *NEW, "face_swapper"]) == 0
    text = capsys.readouterr().out
    for line in (
        "age_modifier.amount  -100–100 years; default 20",
        "age_modifier.present_age  1–100 (empty: default) years; default: none; applies when model in [fran]",
        "face_editor.head_yaw  -30–30 °; default 0",
        "face_editor.eyes  -100–100 %; default 0",
        "frame_colourizer.size  192 | 256 | 384 | 512 px; default 256",
        "background_remover.background  transparent | colour; default 'transparent'",
        "background_remover.colour  text; default '#00b140'",
        "deep_swapper.model_file  text (empty: default); default: none; a path to the .dfm file (web and API: an "
        "upload)",
        "deep_swapper.morph  0–100 %; default 100",
        "face_swapper.secondary_blend  0–100 %; default 50; applies when model not in [landmark_warp]",
    ):
        assert line in text, line


def test_the_schema_and_the_studio_views_follow() -> None:
    props = preset_schema(REGISTRY)["properties"]
    amount = props["age_modifier"]["properties"]["amount"]
    assert (amount["minimum"], amount["maximum"], amount["x-facestudio"]["unit"]) == (-100, 100, "years")
    assert props["face_editor"]["properties"]["head_pitch"]["maximum"] == 20
    assert props["deep_swapper"]["properties"]["model_file"]["x-facestudio"] == {"file": ".dfm"}
    assert props["background_remover"]["properties"]["colour"]["pattern"] == "^#[0-9a-fA-F]{6}$"
    views = {v.name: v for v in describe(REGISTRY["face_editor"].Options)}
    assert views["smile"].kind == "slider" and (views["smile"].low, views["smile"].high, views["smile"].step) == (
        -100,
        100,
        1.0,
    )
    colouriser = {v.name: v for v in describe(REGISTRY["frame_colourizer"].Options)}
    assert colouriser["model"].kind == "choice" and colouriser["size"].choices == (192, 256, 384, 512)
    deep = {v.name: v for v in describe(REGISTRY["deep_swapper"].Options)}
    assert deep["model_file"].shown.file == ".dfm"


def test_models_list_shows_the_new_models_with_licence_use_and_pin(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["models", "list", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    catalogue = Manifest.load()
    expected = {
        "fran": ("age_modifier", True),
        "styleganex_age": ("age_modifier", False),
        "fairface": ("face_classifier", True),
        "live_portrait_stitcher": ("face_editor", True),
        "ddcolor": ("frame_colourizer", True),
        "deoldify_stable": ("frame_colourizer", True),
        "modnet": ("background_remover", True),
        "rmbg_2_0": ("background_remover", False),
        "ben_2": ("background_remover", True),
    }
    for model_id, (task, commercial) in expected.items():
        row = rows[model_id]
        assert (row["task"], row["commercial_use"]) == (task, commercial), model_id
        assert row["licence"] == catalogue.get(model_id).licence
    assert cli.main(["models", "list"]) == 0
    text = capsys.readouterr().out
    assert "no published sha256: `models fetch styleganex_age --trust-first` records one" in text
    line = next(line for line in text.splitlines() if line.startswith("rmbg_2_0 "))
    assert "CC BY-NC 4.0" in line and "[NON-COMMERCIAL]" in line
