"""The studio's side of the toolbox: several targets of one upload become jobs in turn, each into the history, a
broken one reported in one line while the rest carry on; the deep swapper's file is an upload control (never a
typed path), left out of presets and history entries, and only ever the user's own file."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest
import tiny_graphs
import toolbox_kit as kit

from engine import media
from engine.core.errors import InvalidInput
from engine.core.options import describe
from engine.job.settings import Preset
from engine.media import demo
from engine.serve.service import Access
from processors import REGISTRY
from webui import cells
from webui.app import Studio
from webui.privacy import COOKIE, owner_from


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    graph = tmp_path / "ddcolor.onnx"
    tiny_graphs.ddcolor(graph)
    kit.use(monkeypatch, kit.catalogue(tmp_path, {"ddcolor": graph}), tmp_path / "models")
    return tmp_path


def test_several_targets_of_one_upload_become_jobs_in_the_history(env: Path) -> None:
    studio = Studio(work_dir=env / "work")
    session = studio.session(owner_from({COOKIE: "a" * 64}, None))
    targets = [env / "first.png", env / "broken.mp4", env / "third.jpg"]
    media.write_image(targets[0], demo.photo())
    targets[1].write_bytes(kit.clip(env).read_bytes()[:2000])  # cut short
    media.write_image(targets[2], demo.photo()[::2, ::2])
    for target in targets:  # as if the session had uploaded them
        studio.guard.allow(session.owner, target)
    raw = {"processors": ["frame_colourizer"]}
    named: list[tuple[int, str]] = []
    done = studio.run_batch(
        session, [str(t) for t in targets], lambda target: (raw, []), lambda n, name: named.append((n, name)) or None
    )
    assert [t for t, _ in done] == [str(t) for t in targets]
    assert named == [(1, "first.png"), (2, "broken.mp4"), (3, "third.jpg")]  # the broken one got its turn too
    failure = done[1][1]
    assert isinstance(failure, InvalidInput) and "\n" not in str(failure) and "broken.mp4" in str(failure)
    entries = session.history.entries()
    assert sorted(Path(e.output).name for e in entries) == ["first-facestudio.png", "third-facestudio.jpg"]
    assert {e.target for e in entries} == {"first.png", "third.jpg"}
    assert all(Path(e.output).is_file() for e in entries)


def test_the_dfm_is_an_upload_kept_out_of_presets_and_the_users_own(tmp_path: Path) -> None:
    (view,) = [v for v in describe(REGISTRY["deep_swapper"].Options) if v.name == "model_file"]
    with gr.Blocks():
        widget = cells.widget(view, None)
        settings = cells.Settings({"deep_swapper": REGISTRY["deep_swapper"].Options})
        settings.add("deep_swapper", "model_file", widget, view)
    assert isinstance(widget, gr.File) and widget.file_types == [".dfm"]
    assert cells.user_events(widget) == [widget.upload, widget.clear]  # a File has no input event
    preset = Preset.parse({"processors": ["deep_swapper"], "deep_swapper": {"model_file": "/srv/x.dfm"}}, REGISTRY)
    assert settings.values_from(preset) == [None]  # a preset never fills the session's upload
    studio = Studio(work_dir=tmp_path / "work")
    raw = {"processors": ["deep_swapper"], "deep_swapper": {"model_file": "/tmp/upload/x.dfm", "morph": 50}}
    assert studio.without_files(raw) == {"processors": ["deep_swapper"], "deep_swapper": {"morph": 50}}
    # A user of the studio, the jobs API or live names only a .dfm of their own (the service's one check).
    stranger = Access(owns=lambda path: False)
    with pytest.raises(InvalidInput, match=r"deep_swapper.model_file takes a file you uploaded to this server"):
        studio.service.admit(raw, [], stranger)
    assert studio.service.admit(raw, [], Access(owns=lambda path: True))["deep_swapper"]["morph"] == 50
