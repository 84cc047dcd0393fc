"""The web UI: the `run` API through gradio_client, what the server refuses to serve, concurrent clients, cells
generated from the registry, presets, the preview path, and the serving flags."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx
import numpy as np
import pytest
from gradio_client import Client, handle_file
from pydantic import Field

import cli
from engine import demo
from engine import media as video
from engine.errors import Cancelled, InvalidInput
from engine.job import Preset, RuntimeSettings, load_preset_raw
from engine.models.manifest import MANIFEST_PATH
from engine.models.runtime import Runtime
from engine.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.types import Frame
from processors import REGISTRY, build_registry
from webui.app import Studio, UISettings, _UIProgress, launch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InvertOptions(ProcessorOptions):
    amount: int = Field(default=255, ge=0, le=255, description="value the pixels are subtracted from")
    channels: Literal["all", "red"] = Field(default="all", description="which channels to invert")


class Invert(FrameProcessor[InvertOptions]):
    """A toy processor registered only in this test: `amount - pixel` on the chosen channels."""

    id: ClassVar[str] = "invert"
    title: ClassVar[str] = "Toy inverter"
    Options: ClassVar[type[ProcessorOptions]] = InvertOptions

    def process(self, frames: list[Frame], ctxs: list[FrameContext]) -> list[Frame]:
        out = []
        for frame in frames:
            result = frame.copy()
            sl = slice(None) if self.options.channels == "all" else slice(0, 1)
            result[..., sl] = np.clip(self.options.amount - frame[..., sl].astype(int), 0, 255).astype(np.uint8)
            out.append(result)
        return out


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Studio]]:
    """The app with the built-in processors plus the toy one, on a free port, uploads capped at 2 MB."""
    studio = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=tmp_path_factory.mktemp("ui-work"))
    port = free_port()
    app = launch(UISettings(port=port, max_file_size="2mb", queue_size=8), studio, block=False)
    try:
        yield f"http://127.0.0.1:{port}/", studio
    finally:
        app.close()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ui-media")
    clip = demo.make_clip(folder / "clip.mp4", 160, 90, 8)
    photo = folder / "photo.png"
    video.write_image(photo, demo.photo())
    return {"clip": clip, "photo": photo, "source": demo.source_photo()}


def run_api(url: str, target: Path, sources: list[Path], preset: dict[str, Any]) -> tuple[str, str, dict]:
    client = Client(url, verbose=False)
    return client.predict(
        handle_file(str(target)), [handle_file(str(s)) for s in sources], json.dumps(preset), True, api_name="/run"
    )


def test_api_runs_swap_and_frame_enhancer_on_a_video(ui: tuple[str, Studio], media: dict[str, Path]) -> None:
    url, _ = ui
    preset = {"processors": ["face_swapper", "frame_enhancer"], "frame_enhancer": {"scale": 2}}
    output, sidecar, report = run_api(url, media["clip"], [media["source"]], preset)
    info = video.probe(Path(output))
    assert (info.kind, info.frame_count, info.width, info.height, info.has_audio) == ("video", 8, 320, 180, True)
    assert report["frames"] == 8 and report["faces_processed"] == 8
    job = json.loads(Path(sidecar).read_text())
    assert job["job"]["processors"] == ["face_swapper", "frame_enhancer"]
    assert "Synthetic media" in video.read_video_metadata(Path(output)).get("comment", "")


def test_api_refuses_without_consent(ui: tuple[str, Studio], media: dict[str, Path]) -> None:
    url, _ = ui
    client = Client(url, verbose=False)
    with pytest.raises(Exception, match="consent"):
        client.predict(handle_file(str(media["photo"])), [], "", False, api_name="/run")


def test_files_outside_a_sessions_own_results_are_refused(ui: tuple[str, Studio], media: dict[str, Path]) -> None:
    url, studio = ui
    output, _, _ = run_api(url, media["photo"], [], {"processors": ["invert"]})
    # The session's own result, as Gradio handed it back, is served to it.
    assert httpx.get(f"{url}gradio_api/file={output}").status_code == 200
    # The same result in the session's work folder, a system file, and a path climbing out with `..` are not.
    (in_work,) = [p for p in studio.work.rglob("*-photo-facestudio.png") if p.name == Path(output).name]
    for path in (in_work, Path("/etc/passwd"), Path(output).parent / ".." / ".." / ".." / "etc" / "passwd"):
        response = httpx.get(f"{url}gradio_api/file={path}")
        assert response.status_code == 403, path
    # Nor does a plain traversal through the URL escape the cache.
    assert httpx.get(f"{url}gradio_api/file=../../../../etc/passwd").status_code in (403, 404)


def test_upload_over_the_limit_is_refused(ui: tuple[str, Studio], tmp_path: Path) -> None:
    url, _ = ui
    big = tmp_path / "big.png"
    big.write_bytes(os.urandom(3 * 1024 * 1024))
    with big.open("rb") as handle:
        response = httpx.post(f"{url}gradio_api/upload", files={"files": ("big.png", handle, "image/png")})
    assert response.status_code == 413
    small = tmp_path / "small.png"
    small.write_bytes(os.urandom(1024))
    with small.open("rb") as handle:
        assert httpx.post(f"{url}gradio_api/upload", files={"files": ("s.png", handle)}).status_code == 200


def test_four_clients_at_once_get_their_own_results(ui: tuple[str, Studio], media: dict[str, Path]) -> None:
    url, studio = ui
    results: dict[int, tuple[str, str, dict]] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            results[i] = run_api(url, media["photo"], [], {"processors": ["invert"], "invert": {"amount": 200 + i}})
        except BaseException as exc:  # collected and re-raised by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and sorted(results) == [0, 1, 2, 3]
    original = video.read_image(media["photo"])[0].astype(int)
    for i, (output, _, _) in results.items():
        expected = np.clip(200 + i - original, 0, 255)
        assert np.array_equal(video.read_image(Path(output))[0].astype(int), expected), i
    # Each session worked in its own folder, and none of those folders is served to anyone.
    sessions = [p for p in studio.work.iterdir() if p.is_dir() and list(p.glob("*-photo-facestudio.png"))]
    assert len(sessions) >= 4
    for folder in sessions:
        for path in folder.glob("*-photo-facestudio.png"):
            assert httpx.get(f"{url}gradio_api/file={path}").status_code == 403


def test_a_registered_processor_gets_its_cell(ui: tuple[str, Studio]) -> None:
    url, studio = ui
    config = httpx.get(f"{url}config").json()
    labels = {c.get("props", {}).get("label") for c in config["components"]}
    assert "Toy inverter" in labels and "use toy inverter" in labels
    assert {"amount", "channels"} <= labels
    amount = next(c for c in config["components"] if c.get("props", {}).get("label") == "amount")
    assert (amount["type"], amount["props"]["minimum"], amount["props"]["maximum"]) == ("slider", 0, 255)
    assert ("invert", "amount") in studio.keys and ("enable", "invert") in studio.keys


def test_presets_load_into_widgets_and_save_valid(tmp_path: Path) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    studio.build()
    for name in ("default", "swap_enhance", "upscale", "anime"):
        preset = Preset.parse(load_preset_raw(name), studio.registry)
        values = studio.values_from(preset)
        again = Preset.parse(studio.raw_from(values), studio.registry)
        assert again.processors == preset.processors, name
        for pid in preset.processors:
            assert again.options[pid] == preset.options[pid], (name, pid)
        assert (again.faces, again.video, again.runtime) == (preset.faces, preset.video, preset.runtime)
        saved = studio.save_preset(f"mine-{name}", values, tmp_path)
        assert cli.main(["presets", "check", str(saved)]) == 0


def test_preview_is_the_run_path(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    studio.build()
    raw = {"processors": ["frame_enhancer"], "frame_enhancer": {"scale": 2}}
    preview = studio.preview(raw, str(media["photo"]), [], 0)
    report = studio.execute(raw, str(media["photo"]), [], tmp_path, None)
    assert np.array_equal(preview, video.read_image(report.output)[0])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--share"], "--share makes the app public: add --auth USER:PASS"),
        (["--share", "--auth", "justuser"], "--auth must be USER:PASS"),
        (["--port", "0"], "--port must be 1–65535"),
    ],
)
def test_unsafe_or_bad_serving_flags_exit_2(flags: list[str], message: str, capsys) -> None:
    assert cli.main(["ui", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_faces_cell_crops_faces_and_a_picked_one_becomes_the_reference(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    studio.build()
    values = studio.values_from(Preset.parse(load_preset_raw("default"), studio.registry))
    crops = studio.find_faces(str(media["photo"]), 0, values, tmp_path)
    assert len(crops) == 1 and (tmp_path / "face-0.png").is_file()
    raw = {
        "processors": ["face_swapper"],
        "faces": {"selector": "reference", "reference_image": str(tmp_path / "face-0.png")},
    }
    report = studio.execute(raw, str(media["photo"]), [str(media["source"])], tmp_path, None)
    assert report.faces_processed == 1


def test_models_cell_downloads_with_progress(server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = os.urandom(200_000)
    item = server.item("GFPGANv1.3.pth", payload)
    text = MANIFEST_PATH.read_text()
    start = text.index("[[models.gfpgan_1_3.files]]")
    end = text.index("\n\n", start)
    entry = (f'[[models.gfpgan_1_3.files]]\nformat = "pth"\nfilename = "GFPGANv1.3.pth"\nurl = "{item.url}"\n'
             f'size = {item.size}\nsha256 = "{item.sha256}"')  # fmt: skip
    (tmp_path / "manifest.toml").write_text(text[:start] + entry + text[end:])
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(tmp_path / "manifest.toml"))
    runtime = Runtime(RuntimeSettings())
    assert Studio._availability(runtime.manifest.get("gfpgan_1_3"), runtime) == "missing"
    calls: list[tuple[int, int | None]] = []
    (path,) = Studio.download("gfpgan_1_3", runtime, lambda _: lambda done, total: calls.append((done, total)))
    assert path.read_bytes() == payload and calls[-1] == (len(payload), len(payload))
    assert Studio._availability(runtime.manifest.get("gfpgan_1_3"), runtime) == "downloaded"


def test_cancel_stops_the_job_and_leaves_no_output(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    studio.build()
    flag = threading.Event()
    shown: list[Any] = []

    def progress(value: Any, desc: str | None = None, unit: str | None = None) -> None:
        shown.append((value, desc))
        flag.set()  # the user presses Cancel as soon as the first progress shows

    raw = {"processors": ["frame_enhancer"], "frame_enhancer": {"scale": 1}}
    with pytest.raises(Cancelled, match="cancelled from the UI"):
        studio.execute(raw, str(media["clip"]), [], tmp_path, _UIProgress(progress, flag))  # type: ignore[arg-type]
    assert shown[0] == ((0, 8), "frames")
    assert not list(tmp_path.glob("*.mp4*"))


def test_no_command_means_the_ui(capsys) -> None:
    # UI flags without a command go to `ui` (which refuses a share link without a login, before serving).
    assert cli.main(["--share"]) == 2
    assert "--share makes the app public" in capsys.readouterr().err


def test_a_forged_session_hash_cannot_reach_outside_the_work_folder(tmp_path: Path) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    victim = tmp_path / "victim"
    victim.mkdir()

    class Forged:
        session_hash = "../victim"

    with pytest.raises(InvalidInput, match="invalid session"):
        studio.end_session(Forged())  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="invalid session"):
        studio.session_dir(Forged())  # type: ignore[arg-type]
    assert victim.is_dir()
