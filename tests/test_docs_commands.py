"""Every `launch.py` command shown in a shell block of the README and the user guide is run here, as documented —
or excused by name with a reason from REASONS. The commands are read from the markdown, never repeated here, so a
command added to the docs is run (or this test fails until it is excused): none is skipped silently.

Each runs as a user would run it with no terminal: a child process in a new session, stdin /dev/null, in a folder
of its own holding generated media under the names the docs use (`me.jpg`, `clip.mp4` …), with this test's fresh
FACESTUDIO_HOME. It must exit 0 without a traceback and write the `--output` it names. The studio (`launch.py` /
`launch.py ui`) is started on a free port instead of 7860, asked for /healthz, and stopped once it answers.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import cv2
import peoplekit
import pytest

from engine import media
from engine.core import consent
from engine.media import demo
from engine.models.manifest import Manifest

ROOT = Path(__file__).resolve().parent.parent
# The README, the guide (the site's pages) and the changelog; docs/ARCHITECTURE.md is the design, whose command
# synopses (`run --target PATH …`) are forms, not commands.
DOCS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / "docs" / "index.md",
    *sorted((ROOT / "docs" / "guide").glob("*.md")),
]
SHELL = {"bash", "sh", "shell", "console", "zsh"}

# Why a command is not run here. Each names what the command needs that a test machine has not, and where the
# path it takes is tested instead.
DOWNLOAD = "downloads a model (tests have no network; downloads are tested against a local server: test_fetch.py)"
GPU = "needs an NVIDIA GPU (CUDA)"
CAMERA = "needs a camera (test_live.py streams a video file as the camera, as the guide's last live line does)"
CLUSTER = "starts or joins a Ray cluster (test_cluster.py runs jobs on a local one)"
SHARE = "opens a public link through Gradio's share servers (network)"
QUICK_START = "the quick start: test_quickstart.py runs it with no terminal on a fresh copy of the checkout"
QUANTIZE = (
    "quantising calibrates and gates the embedded upscaler for minutes on 2 CPU cores (test_quantize.py runs the "
    "same path on a generated graph, and the README's command on the embedded upscaler in its slow test)"
)
NEEDS_INT8 = "needs the int8 graph `models quantize realesr_animevideov3` makes (excused: QUANTIZE)"
USER_MODEL = "needs the user's own .dfm model (test_deep_swapper.py runs stand-in .dfm graphs of its signature)"
REASONS = {DOWNLOAD, GPU, CAMERA, CLUSTER, SHARE, QUICK_START, QUANTIZE, NEEDS_INT8, USER_MODEL}

EXCUSED = {
    "run --demo --yes": QUICK_START,
    "models fetch --preset inswapper": DOWNLOAD,
    "live --camera 0 --source me.jpg --yes": CAMERA,
    "live --camera 0 --source me.jpg --virtual-camera --record take.mp4 --yes": CAMERA,
    "run --source me.jpg --target clip.mp4 --output out.mp4 --preset inswapper --set faces.selector=reference "
    "--set faces.reference_image=ref.png --yes": DOWNLOAD,
    "run --source me.jpg --target clip.mp4 --output out.mp4 --preset hyperswap --yes": DOWNLOAD,
    "models fetch wav2lip_gan_96 --trust-first": DOWNLOAD,
    "run --target clip.mp4 --output synced.mp4 --preset lip_sync --set lip_syncer.audio=speech.wav --yes": DOWNLOAD,
    "run --target clip.mp4 --output out.mp4 --backend torch --device cuda:0 --yes": GPU,
    "models fetch xseg_1 bisenet_resnet_34": DOWNLOAD,
    "run --target clip.mp4 --output out.mp4 --source me.jpg --processors face_swapper "
    "--set face_swapper.mask=box,face,occlusion --yes": DOWNLOAD,
    "models quantize realesr_animevideov3": QUANTIZE,
    "models quantize gfpgan_1_4 --calibration ~/my_faces": DOWNLOAD,
    "run --target in.mp4 --output out.mp4 --processors frame_enhancer --set runtime.precision=int8": NEEDS_INT8,
    "run --target in.mp4 --output out.mp4 --cluster local --workers 2": CLUSTER,
    "run --target /shared/in.mp4 --output /shared/out.mp4 --cluster auto": CLUSTER,
    "run --target /shared/in.mp4 --output /shared/out.mp4 --cluster ray://HEAD:10001": CLUSTER,
    "ui --share --auth me:a-long-password": SHARE,
    "run --target photo.jpg --output cut.png --processors background_remover --yes": DOWNLOAD,
    "run --target clip.mp4 --output deep.mp4 --processors deep_swapper --set deep_swapper.model_file=person.dfm "
    "--yes": USER_MODEL,
}


# -- reading the docs ------------------------------------------------------------------------------------------
def fenced_blocks(path: Path) -> Iterator[tuple[str, int, list[str]]]:
    """(language, line number of the opening fence, lines) of every fenced block of a markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        yield opening.group(2), start, body
        i += 1


def commands(path: Path) -> Iterator[tuple[int, str]]:
    """(line, arguments after `launch.py`) of each launch.py command in the file's shell blocks: continuation
    lines joined, comments dropped, the launch.py step taken out of `… && python launch.py …`."""
    for language, start, body in fenced_blocks(path):
        if language not in SHELL:
            continue
        joined: list[tuple[int, str]] = []
        for n, line in enumerate(body, start + 1):
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line.strip())
            else:
                joined.append((n, line.strip()))
        for n, line in joined:
            for step in line.split("&&"):
                words = shlex.split(step, comments=True)
                if "launch.py" in words[:2]:
                    yield n, " ".join(words[words.index("launch.py") + 1 :])


def documented() -> dict[str, str]:
    """Every distinct documented command (its arguments) → where it is first shown (file:line)."""
    found: dict[str, str] = {}
    for path in DOCS:
        for n, args in commands(path):
            found.setdefault(args, f"{path.relative_to(ROOT)}:{n}")
    return found


DOCUMENTED = documented()


def test_commands_are_found_in_the_docs() -> None:
    """The reader finds the README's and the guide's commands (a broken reader would pass everything)."""
    assert "run --demo --yes" in DOCUMENTED and DOCUMENTED["run --demo --yes"] == "README.md:21"
    assert "doctor --json" in DOCUMENTED and DOCUMENTED["doctor --json"].startswith("docs/guide/doctor.md:")
    # Continuation lines are joined and comments dropped.
    assert DOCUMENTED["run --source me.jpg --target clip.mp4 --output out.mp4 --yes"] == "README.md:49"
    assert "" in DOCUMENTED and "faces scan --target clip.mp4 --json" in DOCUMENTED
    assert len(DOCUMENTED) >= 30


def test_no_launch_py_command_hides_in_a_block_of_another_language() -> None:
    hidden = [
        f"{path.relative_to(ROOT)}:{start}"
        for path in DOCS
        for language, start, body in fenced_blocks(path)
        if language not in SHELL and any(re.match(r"\s*(\S*python3?\s+)?launch\.py\b", line) for line in body)
    ]
    assert hidden == []


def test_every_excuse_is_a_documented_command_with_a_declared_reason() -> None:
    assert set(EXCUSED) <= set(DOCUMENTED), set(EXCUSED) - set(DOCUMENTED)
    assert set(EXCUSED.values()) <= REASONS


def test_the_guide_quotes_the_notice_as_the_code_has_it() -> None:
    guide = (ROOT / "docs" / "guide" / "provenance.md").read_text(encoding="utf-8")
    quoted = " ".join(line[2:] for line in guide.splitlines() if line.startswith("> "))
    assert quoted == consent.NOTICE


def test_the_readme_counts_are_the_catalogue_s() -> None:
    """The feature table's model counts are the catalogue's (the peers' come from their own code)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    models = Manifest.load().models.values()
    count = {task: sum(m.task == task for m in models) for task in ("face_swapper", "face_enhancer", "frame_enhancer")}
    # landmark_warp is the catalogue's offline swapper; the face enhancer's embedded `real_esrgan_face` runs a frame
    # enhancer model, so it is an option of the processor, not a catalogue entry of its own.
    assert f"| Swappers other than InSwapper | Y (the same {count['face_swapper'] - 1} + an offline one) |" in readme
    assert f"| Face enhancers | Y ({count['face_enhancer'] + 1}) |" in readme
    assert f"| Frame upscalers | Y ({count['frame_enhancer']}) |" in readme


# -- the media the docs name -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def docs_media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the documented commands name, generated from the demo's public-domain portraits: `clip.mp4`
    (two people, Hopper and the astronaut, 1 s at 8 fps, 360×180, a tone track), `in.mp4` the same, `pair.png`
    its first frame, `me.jpg` / `alice.jpg` Hopper, `bob.jpg` / `bob2.jpg` / `ref.png` the astronaut, `photo.jpg`
    a 96 px photo, `speech.wav`; and `out.mp4` with its sidecar, made by the default job."""
    folder = tmp_path_factory.mktemp("docs-media")
    patches = peoplekit.portraits()
    size, fps, count = (360, 180), 8, 8
    frames = [
        cv2.resize(peoplekit.frame(peoplekit.CROSSING + i, patches), size, interpolation=cv2.INTER_AREA)
        for i in range(count)
    ]
    demo.write_tone(folder / "speech.wav", count / fps)
    audio = media.Audio(folder / "speech.wav", None, Fraction(0), None, cut=False)
    with media.FrameWriter(folder / "clip.mp4", *size, media.FrameTimes.constant(Fraction(fps)), audio) as writer:
        for frame in frames:
            writer.write(frame)
    shutil.copyfile(folder / "clip.mp4", folder / "in.mp4")
    media.write_image(folder / "pair.png", frames[0])
    for name in ("me.jpg", "alice.jpg"):
        shutil.copyfile(demo.source_photo(), folder / name)
    astronaut = demo.photo()[20:300, 100:380]
    for name in ("bob.jpg", "bob2.jpg", "ref.png"):
        media.write_image(folder / name, astronaut)
    media.write_image(folder / "photo.jpg", cv2.resize(demo.photo(), (96, 96), interpolation=cv2.INTER_AREA))
    made = launch(["run", "--source", "me.jpg", "--target", "clip.mp4", "--output", "out.mp4", "--yes"], folder)
    assert made.returncode == 0, made.stderr
    return folder


def launch(argv: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), *argv], cwd=cwd, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, start_new_session=True, timeout=900, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def workdir(media_dir: Path, dest: Path, writes: str | None) -> Path:
    """A folder of the docs' media, less the file the command writes (and its sidecar)."""
    dest.mkdir()
    for item in media_dir.iterdir():
        if item.is_file() and writes not in (item.name, item.name.removesuffix(".job.json")):
            shutil.copy2(item, dest / item.name)
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_until_healthy(argv: list[str], cwd: Path) -> None:
    """Start the studio on a free port, wait for /healthz to answer 200, stop it (its whole session)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "launch.py"), *argv, "--port", str(port)], cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                    assert answer.status == 200
                    return
            except OSError:
                assert time.monotonic() < deadline, "the studio did not answer /healthz in 300 s"
                time.sleep(0.5)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("args", sorted(DOCUMENTED), ids=lambda a: a or "(no command: the studio)")
def test_the_documented_command_runs(args: str, docs_media: Path, tmp_path: Path) -> None:
    if args in EXCUSED:
        pytest.skip(f"{DOCUMENTED[args]}: {EXCUSED[args]}")
    argv = shlex.split(args)
    output = argv[argv.index("--output") + 1] if "--output" in argv else None
    cwd = workdir(docs_media, tmp_path / "work", output)
    if argv[:1] in ([], ["ui"]):
        serve_until_healthy(argv, cwd)
        return
    done = launch(argv, cwd)
    assert done.returncode == 0, f"{DOCUMENTED[args]}: exit {done.returncode}\n{done.stderr}"
    assert "Traceback" not in done.stderr
    if output is not None:  # a batch's output template names each target's output: one for each
        written = sorted(cwd.glob(re.sub(r"\{\w+\}", "*", output))) if "{" in output else [cwd / output]
        assert len(written) >= argv.count("--target") and all(p.is_file() for p in written), output
