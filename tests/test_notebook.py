"""The cloud notebook: valid nbformat, every `launch.py` command in it accepted by the real CLI parser, sharing
only behind a login, the Colab free-tier note present; and its cells executed (nbclient, a real kernel) in the quick
mode it documents: on the CPU, offline, on the demo media, with the GPU, Drive and studio cells skipping
themselves; a broken cell fails the run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from test_quickstart import fresh_clone

import cli
from engine import media as video

NOTEBOOK = ROOT / "notebooks" / "facestudio_cloud.ipynb"
# What the notebook's variables stand for in its shell lines, for the parser.
VARIABLES = {"$USER": "studio", "$PASSWORD": "s3cret", "$DEVICE": "cpu", "{OUTPUTS}": "/content/outputs"}


def launch_commands() -> list[list[str]]:
    """The argument lists of every `!$PYTHON launch.py …` shell line, with notebook variables filled in."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            match = re.search(r"!\$PYTHON launch\.py (.*)$", line)
            if match:
                text = match.group(1)
                for name, value in VARIABLES.items():
                    text = text.replace(name, value)
                found.append(shlex.split(text))
    return found


def test_notebook_is_valid_and_its_commands_parse() -> None:
    nbformat.validate(nbformat.read(NOTEBOOK, as_version=4))
    commands = launch_commands()
    assert {c[0] for c in commands} == {"models", "run", "ui"}
    parser = cli.build_parser()
    for argv in commands:
        args = parser.parse_args(argv)
        if args.command == "ui":
            settings = cli.ui.ui_settings(args)
            assert settings.share and settings.auth == ("studio", "s3cret")
        if args.command == "run":
            assert args.demo and args.offline and args.yes and args.output == Path("/content/outputs/demo.mp4")


def test_notebook_says_what_colab_free_tier_forbids_and_asks_for_consent() -> None:
    text = NOTEBOOK.read_text(encoding="utf-8")
    assert "free tier of Colab forbids creating deepfakes" in text
    assert "consent of the people shown" in text
    assert "--share" in text and "--auth" in text


def session_folder(tmp_path: Path) -> Path:
    """A cloud session's working folder holding a fresh copy of this checkout as `facestudio/` (what the notebook's
    clone makes): the notebook runs there, never in the checkout."""
    folder = tmp_path / "content"
    fresh_clone(folder / "facestudio")
    return folder


def execute(notebook: nbformat.NotebookNode, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every cell in order in a fresh Python kernel started in `folder`, in quick mode."""
    monkeypatch.setenv("FACESTUDIO_NOTEBOOK_QUICK", "1")  # the kernel and its shell commands inherit it
    client = NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": folder}})
    client.execute()


def printed(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.slow
def test_the_notebook_runs_in_quick_mode_and_makes_the_demo_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = session_folder(tmp_path)
    notebook = nbformat.read(folder / "facestudio" / "notebooks" / "facestudio_cloud.ipynb", as_version=4)
    execute(notebook, folder, monkeypatch)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]

    # The cells that cannot run here say so in one line.
    def by(marker: str) -> str:
        (cell,) = [cell for cell in code if marker in cell.source]
        return printed(cell)

    assert by("nvidia-smi") == "GPU cell skipped: no NVIDIA GPU here (or quick mode); facestudio runs on the CPU\n"
    assert by("git clone") == (
        f"facestudio is already here: not cloned again\n{folder / 'facestudio'}\n"
        "quick mode: not installed (this Python has facestudio's requirements)\n"
    )
    assert (
        by("drive.mount") == f"Drive cell skipped: Google Drive not mounted; the results go to {folder / 'outputs'}\n"
    )
    assert by("--share") == "quick mode: the studio is not started (its share link needs the internet)\n"
    # The demo's swap: the output file, whole, with its audio and sidecar, marked synthetic, shown in the notebook.
    output = folder / "outputs" / "demo.mp4"
    info = video.probe(output)
    assert (info.frame_count, info.width, info.height, info.has_audio) == (60, 320, 180, True)
    assert video.read_video_metadata(output)["synthetic"] == "true"
    assert output.with_name("demo.mp4.job.json").is_file()
    (run,) = [cell for cell in code if "--demo" in cell.source]
    assert "done: 60 frames 320×180 → 320×180" in printed(run) and "face_swapper on " in printed(run)
    assert any("video/mp4" in str(o.get("data", {}).get("text/html", "")) for o in run.outputs)


def test_a_broken_cell_fails_the_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that fails (here the demo run given an option it does not have) stops the run with an error
    naming the cell's command; the cells after it do not run."""
    folder = session_folder(tmp_path)
    notebook = nbformat.read(folder / "facestudio" / "notebooks" / "facestudio_cloud.ipynb", as_version=4)
    (run,) = [cell for cell in notebook.cells if "--demo" in cell.source]
    run.source = run.source.replace("--demo", "--demo --no-such-option")
    with pytest.raises(CellExecutionError, match=r"the demo run failed \(exit 2\)"):
        execute(notebook, folder, monkeypatch)
    assert "unrecognized arguments: --no-such-option" in printed(run)
    assert not (folder / "outputs" / "demo.mp4").exists()
    assert notebook.cells[-1].outputs == []  # the studio's cell never ran
