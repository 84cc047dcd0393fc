"""A batch of targets (`run --target 'clips/*.mp4' --output 'out/{name}-aged.mp4'`, or several --target): each
target rendered in turn on one service — every model loaded once for the whole batch (counted) — one summary
line per target, a broken target reported in one line while the rest carry on, a total, exit 2 when any failed;
and the usage errors a batch can make, each caught before anything runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import tiny_graphs
import toolbox_kit as kit

import cli
from engine import media
from engine.faces import embedded
from engine.models.runtime import Runtime


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    graphs = {"fran": tmp_path / "fran.onnx", "fairface": tmp_path / "fairface.onnx"}
    tiny_graphs.fran(graphs["fran"])
    tiny_graphs.fairface(graphs["fairface"])
    kit.use(monkeypatch, kit.catalogue(tmp_path, graphs), tmp_path / "models")
    clips = tmp_path / "clips"
    clips.mkdir()
    good = kit.clip(tmp_path)
    for name in ("a.mp4", "c.mp4"):
        (clips / name).write_bytes(good.read_bytes())
    (clips / "b.mp4").write_bytes(good.read_bytes()[: len(good.read_bytes()) // 3])  # cut short: broken
    return tmp_path


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each model session is opened and the embedded face analyser is built."""
    counted: Counter[str] = Counter()
    open_onnx, analyser = Runtime._open_onnx, embedded.EmbeddedAnalyser.__init__

    def counting_open(self, spec, file, graph=None):  # type: ignore[no-untyped-def]
        counted[spec.id] += 1
        return open_onnx(self, spec, file, graph)

    def counting_analyser(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted["embedded analyser"] += 1
        analyser(self, *args, **kwargs)

    monkeypatch.setattr(Runtime, "_open_onnx", counting_open)
    monkeypatch.setattr(embedded.EmbeddedAnalyser, "__init__", counting_analyser)
    return counted


def test_three_targets_one_broken(env: Path, loads: Counter[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = kit.run(
        capsys, "--target", str(env / "clips" / "*.mp4"), "--output", str(env / "out" / "{name}-aged.mp4"),
        "--processors", "age_modifier", "--set", "faces.selector=many",
    )  # fmt: skip
    assert code == 2, err
    # Two right outputs, each with its target's frames, times and sound; none for the broken one.
    for name in ("a", "c"):
        kit.check_timing(env / "clips" / f"{name}.mp4", env / "out" / f"{name}-aged.mp4")
    assert sorted(p.name for p in (env / "out").iterdir()) == [
        "a-aged.mp4", "a-aged.mp4.job.json", "c-aged.mp4", "c-aged.mp4.job.json",
    ]  # fmt: skip
    # One summary line per finished target, in order, then the total; one line for the failure.
    done = [line for line in out.splitlines() if line.startswith("done:")]
    assert len(done) == 2 and done[0].endswith("a-aged.mp4 (+ a-aged.mp4.job.json)")
    assert done[1].endswith("c-aged.mp4 (+ c-aged.mp4.job.json)")
    assert out.splitlines()[-1].startswith("batch: 2 of 3 targets done in ")
    assert out.splitlines()[-1].endswith(f"; failed: {env / 'clips' / 'b.mp4'}")
    failures = [line for line in err.splitlines() if line.startswith("failed:")]
    assert len(failures) == 1 and failures[0].startswith(f"failed: {env / 'clips' / 'b.mp4'}: ")
    # Every model, and the face analyser, loaded once for the whole batch.
    assert loads == {"fran": 1, "fairface": 1, "embedded analyser": 1}


def test_several_targets_by_name_and_index(env: Path, loads: Counter[str], capsys: pytest.CaptureFixture[str]) -> None:
    image = env / "still.png"
    media.write_image(image, kit.frames(env / "clips" / "a.mp4")[0].astype("uint8"))
    code, out, err = kit.run(
        capsys, "--target", str(env / "clips" / "c.mp4"), "--target", str(image),
        "--output", str(env / "{index}-{name}.{ext}"), "--processors", "age_modifier",
    )  # fmt: skip
    assert code == 0, err
    assert (env / "1-c.mp4").is_file() and (env / "2-still.png").is_file()
    assert out.splitlines()[-1].startswith("batch: 2 of 2 targets done in ")
    assert loads["fran"] == 1 and loads["fairface"] == 1


@pytest.mark.parametrize(
    ("targets", "output", "message"),
    [
        (["clips/*.mkv"], "out/{name}.mkv", "--target 'CLIPS/*.mkv' matches no file"),
        (["clips/*.mp4"], "out/same.mp4", "gives two targets the one output"),
        (["clips/*.mp4"], "out/{stem}.mp4", "names {stem}; a template takes {name}, {ext}, {index}"),
    ],
)
def test_a_batch_that_cannot_run_is_refused_before_anything_runs(
    targets: list[str], output: str, message: str, env: Path, loads: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a for t in targets for a in ("--target", str(env / t))]
    code, _, err = kit.run(capsys, *args, "--output", str(env / output), "--processors", "age_modifier")
    assert code == 2 and err.count("\n") == 1
    assert message.replace("CLIPS", str(env / "clips")) in err
    assert not loads and not (env / "out").exists()
    assert cli.main(["run", "--target", str(env / "clips" / "*.mp4"), "--job", str(env / "x.json"), "--yes"]) == 2
