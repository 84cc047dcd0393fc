"""The web UI without a browser: the `run` API through gradio_client, who may fetch which file (another client,
no cookies), concurrent clients, cells generated from the registry and their option metadata, presets (built-in,
the user's own, from a file), the preview path, names and messages without server paths, the run line, history,
cancel, and the serving flags. The page itself is tested in Chromium (test_webui_browser.py)."""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx
import numpy as np
import pytest
from conftest import Clock
from gradio_client import Client, handle_file
from pydantic import Field

import cli
from engine import media as video
from engine.core.errors import Cancelled, InvalidInput, InvalidJob, ModelUnavailable
from engine.core.options import describe
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.job.settings import Preset, load_preset_raw, preset_names, save_user_preset
from engine.media import demo
from engine.models.manifest import MANIFEST_PATH
from engine.serve.service import Rendered
from processors import REGISTRY, build_registry
from processors.face_swapper import FaceSwapperOptions
from webui.app import Studio, UISettings, launch
from webui.cells import complete, implied
from webui.history import KEEP
from webui.inputs import frames_of, trim_bar, trim_bounds
from webui.models_tab import download_failure, grouped
from webui.names import output_name, plain_name, scrub
from webui.page import Page
from webui.presets import OPENED, choices, owner_folder
from webui.preview import face_pairs
from webui.privacy import COOKIE, Owner, owner_from
from webui.run import RunState
from webui.schedule import RunQueue, Ticket
from webui.studio import Policy, user_message


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


def run_api(url: str, target: Path, sources: list[Path], preset: dict[str, Any]) -> tuple[str, str, dict, Client]:
    client = Client(url, verbose=False)
    output, sidecar, report = client.predict(
        handle_file(str(target)), [handle_file(str(s)) for s in sources], json.dumps(preset), True, api_name="/run"
    )
    return output, sidecar, report, client


def test_api_runs_swap_and_frame_enhancer_on_a_video(ui: tuple[str, Studio], media: dict[str, Path]) -> None:
    url, _ = ui
    preset = {"processors": ["face_swapper", "frame_enhancer"], "frame_enhancer": {"scale": 2}}
    output, sidecar, report, _ = run_api(url, media["clip"], [media["source"]], preset)
    info = video.probe(Path(output))
    assert (info.kind, info.frame_count, info.width, info.height, info.has_audio) == ("video", 8, 320, 180, True)
    assert report["frames"] == 8 and report["faces_processed"] == 8
    # Named after the user's own file, and the sidecar names files as the user uploaded them.
    assert Path(output).name == "clip-facestudio.mp4"
    job = json.loads(Path(sidecar).read_text())
    assert job["job"]["processors"] == ["face_swapper", "frame_enhancer"]
    assert (job["job"]["target"], job["job"]["sources"], job["output"]["path"]) == (
        "clip.mp4",
        ["grace_hopper.jpg"],
        "clip-facestudio.mp4",
    )
    assert '"/' not in Path(sidecar).read_text()  # no absolute path anywhere in it
    assert "Synthetic media" in video.read_video_metadata(Path(output)).get("comment", "")


def test_api_refuses_without_consent(ui: tuple[str, Studio], media: dict[str, Path]) -> None:
    url, _ = ui
    client = Client(url, verbose=False)
    with pytest.raises(Exception, match="consent"):
        client.predict(handle_file(str(media["photo"])), [], "", False, api_name="/run")


def _server_file(studio: Studio, owner_cookie: str, name: str) -> Path:
    """The cached copy of a result `name` shared with the owner of `owner_cookie`."""
    owner = owner_from({COOKIE: owner_cookie}, None)
    assert owner is not None
    (path,) = [p for p in studio.guard.held_by(owner) if p.name == name and "gradio" in str(p)]
    return path


def test_results_and_uploads_are_served_to_their_owner_alone(ui: tuple[str, Studio], media: dict[str, Path]) -> None:
    url, studio = ui
    _, _, _, client = run_api(url, media["photo"], [], {"processors": ["invert"]})
    cookie = client.cookies[COOKIE]
    result = _server_file(studio, cookie, "photo-facestudio.png")
    file_url = f"{url}gradio_api/file={result}"
    assert httpx.get(file_url, cookies={COOKIE: cookie}).status_code == 200
    # Another client (its own cookie), a client without cookies, and a forged cookie: 404.
    assert httpx.get(file_url).status_code == 404
    assert httpx.get(file_url, cookies={COOKIE: "f" * 64}).status_code == 404
    other = httpx.get(f"{url}config")
    assert COOKIE in other.cookies and other.cookies[COOKIE] != cookie
    assert httpx.get(file_url, cookies={COOKIE: other.cookies[COOKIE]}).status_code == 404
    # The same result in the session's private folder, a system file and a traversal are never served.
    (in_work,) = [p for p in studio.work.rglob("photo-facestudio.png")]
    for path in (in_work, Path("/etc/passwd"), result.parent / ".." / ".." / ".." / "etc" / "passwd"):
        assert httpx.get(f"{url}gradio_api/file={path}", cookies={COOKIE: cookie}).status_code in (403, 404), path
    assert httpx.get(f"{url}gradio_api/file=../../../../etc/passwd").status_code in (403, 404)
    # An upload is its uploader's alone too.
    with media["photo"].open("rb") as handle:
        upload = httpx.post(f"{url}gradio_api/upload", files={"files": ("mine.png", handle)}, cookies={COOKIE: cookie})
    (uploaded,) = upload.json()
    assert httpx.get(f"{url}gradio_api/file={uploaded}", cookies={COOKIE: cookie}).status_code == 200
    assert httpx.get(f"{url}gradio_api/file={uploaded}").status_code == 404
    assert httpx.get(f"{url}gradio_api/file={uploaded}", cookies={COOKIE: other.cookies[COOKIE]}).status_code == 404


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
    results: dict[int, tuple[str, str, dict, Client]] = {}
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
    cookies = {i: r[3].cookies[COOKIE] for i, r in results.items()}
    assert len(set(cookies.values())) == 4
    for i, (output, _, _, _) in results.items():
        expected = np.clip(200 + i - original, 0, 255)
        assert np.array_equal(video.read_image(Path(output))[0].astype(int), expected), i
        # Each client's result is served to it, and to none of the other three.
        served = f"{url}gradio_api/file={_server_file(studio, cookies[i], 'photo-facestudio.png')}"
        for j, cookie in cookies.items():
            assert httpx.get(served, cookies={COOKIE: cookie}).status_code == (200 if i == j else 404)


def test_a_registered_processor_gets_its_cell(ui: tuple[str, Studio]) -> None:
    url, _ = ui
    config = httpx.get(f"{url}config").json()
    labels = {c.get("props", {}).get("label") for c in config["components"]}
    assert "Toy inverter" in labels and "use toy inverter" in labels
    assert {"amount", "channels"} <= labels
    amount = next(c for c in config["components"] if c.get("props", {}).get("label") == "amount")
    assert (amount["type"], amount["props"]["minimum"], amount["props"]["maximum"]) == ("slider", 0, 255)


def _component(config: dict, label: str) -> dict:
    return next(c for c in config["components"] if c.get("props", {}).get("label") == label)


def test_a_settings_change_sends_one_request_with_its_cell_alone_and_the_live_stream_follows_it(
    ui: tuple[str, Studio],
) -> None:
    url, _ = ui
    config = httpx.get(f"{url}config").json()
    ids = {c["id"]: c for c in config["components"]}
    blend = _component(config, "blend (%)")["id"]
    live_status = next(c for c in config["components"] if c.get("props", {}).get("elem_id") == "live-status")["id"]
    # The settings widgets (not the frame slider and the debugger toggle every preview sends).
    preview_own = {"frame", "preview-debug"}
    widgets = {
        c["id"] for c in config["components"]
        if c["type"] in ("slider", "dropdown", "checkbox", "number") and c["props"].get("elem_id") not in preview_own
    }  # fmt: skip
    deps = config["dependencies"]
    # Gradio's client sends the requests one change triggers one after another: the preview is the only one, so
    # nothing waits in front of it, and it skips the queue (whose join-and-stream round trip it would wait for).
    sent_on_input = [d for d in deps if [blend, "input"] in d["targets"]]
    assert len(sent_on_input) == 1 and sent_on_input[0]["queue"] is False
    (preview,) = sent_on_input
    # It sends the face swapper's cell and the session's state, not every widget of the page (Gradio's client
    # gathers each input before the request leaves: about a millisecond each).
    sent = [i for i in preview["inputs"] if i in widgets]
    assert blend in sent and len(sent) < len(widgets) / 3
    assert any(ids[i]["type"] == "state" for i in preview["inputs"])
    # Every sent widget belongs to the swapper's cell: its accordion holds them all.
    cell = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "cell-face_swapper")
    assert all(_inside(config["layout"], cell, i) for i in sent)
    # The Live tab's stream takes the new settings in the same request (its status is one of the outputs).
    assert live_status in preview["outputs"]


def _inside(layout: dict, container: int, component: int) -> bool:
    """Whether `component` is somewhere inside `container` in the config's layout tree."""

    def find(node: dict, wanted: int) -> dict | None:
        if node.get("id") == wanted:
            return node
        return next((f for child in node.get("children", []) if (f := find(child, wanted)) is not None), None)

    holder = find(layout, container)
    return holder is not None and find(holder, component) is not None


def test_cells_follow_the_option_metadata(ui: tuple[str, Studio]) -> None:
    url, _ = ui
    config = httpx.get(f"{url}config").json()
    # The frame enhancer's model is a closed set from the catalogue: a dropdown, a model to download labelled with
    # its size (short enough for the column; its licence is said in the cell when it is chosen).
    models = [c for c in config["components"] if c.get("props", {}).get("label") == "model"]
    frame_model = next(m for m in models if ["realesr_animevideov3", "realesr_animevideov3"] in m["props"]["choices"])
    assert frame_model["type"] == "dropdown"
    assert ["real_esrgan_x2plus · download 67 MB", "real_esrgan_x2plus"] in frame_model["props"]["choices"]
    # Units in the labels of bounded numbers, which are sliders.
    assert _component(config, "blend (%)")["type"] == "slider"
    # Options of other models are hidden while the default (landmark_warp) is chosen; its own are shown.
    visible = {
        c["props"]["label"]: c["props"].get("visible", True)
        for c in config["components"]
        if c.get("props", {}).get("label") in {"pixel boost (px)", "poisson", "reshape", "fidelity"}
    }
    assert visible == {"pixel boost (px)": False, "poisson": True, "reshape": True, "fidelity": False}
    # The job's runtime settings have their own cell, and each processor's backend says what it overrides; the
    # server's settings (device, threads, the frame size cap) have no widget: they are its operator's.
    assert _component(config, "batch")["type"] == "dropdown"
    labels = {c.get("props", {}).get("label") for c in config["components"]}
    assert not labels & {"device", "threads", "max pixels (pixels)", "segment frames (frames)", "offline"}
    # A setting that names a file is an upload of the user's own (the lip syncer's speech: a file or the microphone).
    audio = next(c for c in config["components"] if str(c.get("props", {}).get("label")).startswith("audio:"))
    assert audio["type"] == "audio" and audio["props"]["sources"] == ["upload", "microphone"]
    backends = [c for c in config["components"] if c.get("props", {}).get("label") == "backend"]
    assert any(["the job's (auto)", "job"] in b["props"]["choices"] for b in backends)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FACESTUDIO_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_presets_load_into_widgets_save_to_the_users_folder_and_refuse_bad_names(tmp_path: Path, home: Path) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    page = Page(studio)
    page.build()
    for name in ("default", "swap_enhance", "upscale", "anime"):
        preset = Preset.parse(load_preset_raw(name), studio.registry)
        values = page.settings.values_from(preset)
        again = Preset.parse(page.settings.raw_from(values), studio.registry)
        assert again.processors == preset.processors, name
        for pid in preset.processors:
            assert again.options[pid] == preset.options[pid], (name, pid)
        assert (again.faces, again.video, again.runtime) == (preset.faces, preset.video, preset.runtime)
    values = page.settings.values_from(Preset.parse(load_preset_raw("upscale"), studio.registry))
    mine, theirs = _request("m" * 64), _request("t" * 64)
    update, message = page.presets.on_save("my-upscale", None, mine, *values)
    assert message == "saved preset my-upscale (yours, kept for this browser; the shared ones unchanged)"
    # At once in this user's picker (after the shared ones), loadable by name here, valid for `presets check`; not
    # in the shared list, nor in another browser's picker.
    own = owner_folder(page.session(mine))
    assert update["choices"][-1] == ("my-upscale (yours)", "my-upscale") and update["value"] == "my-upscale"
    assert preset_names(own)[-1] == "my-upscale" and "my-upscale" not in preset_names()
    assert "my-upscale" not in [v for _, v in choices(page.session(theirs))]
    assert cli.main(["presets", "check", str(own / "my-upscale.toml")]) == 0
    assert Preset.parse(load_preset_raw("my-upscale", own), studio.registry).processors == ("frame_enhancer",)
    assert page.presets.on_save("my-upscale", None, mine, *values)[1].startswith("replaced preset my-upscale")
    # Names are refused with the rule, never rewritten; built-in and shared names are not taken over.
    for bad in ("my preset", "../x", "", "-x", "a" * 65):
        _, refused = page.presets.on_save(bad, None, mine, *values)
        assert "is not allowed: use 1–64 letters, digits, - or _, starting with a letter or digit" in refused, bad
    assert "'default' is a built-in preset" in page.presets.on_save("default", None, mine, *values)[1]
    save_user_preset("house", Preset.parse(load_preset_raw("default"), studio.registry))
    assert "'house' is a shared preset of this server" in page.presets.on_save("house", None, theirs, *values)[1]
    with pytest.raises(InvalidJob, match="is not allowed"):
        save_user_preset("a/b", Preset.parse(load_preset_raw("default"), studio.registry))


def test_a_preset_file_opens_into_the_widgets_and_a_bad_one_says_why(tmp_path: Path, home: Path) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    page = Page(studio)
    page.build()
    request = _request("o" * 64)
    good = tmp_path / "mine.toml"
    good.write_text('processors = ["frame_enhancer"]\n[frame_enhancer]\nscale = 2\n')
    *values, message, picker, opened = page.presets.on_open(str(good), request)
    assert message == "loaded mine.toml"
    raw = page.settings.raw_from(values)
    assert raw["processors"] == ["frame_enhancer"] and raw["frame_enhancer"]["scale"] == 2.0
    # The picker names the file now, and Load takes it again.
    assert picker["value"] == OPENED and picker["choices"][-1] == ("mine.toml (opened file)", OPENED)
    *again, said = page.presets.on_load(OPENED, opened, request)
    assert said == "loaded mine.toml again" and page.settings.raw_from(again) == raw
    bad = tmp_path / "broken.toml"
    bad.write_text('processors = ["nope"]\n')
    *_, message, picker, _ = page.presets.on_open(str(bad), request)
    assert "broken.toml: unknown processor 'nope'" in message and str(tmp_path) not in message


class _Request:
    def __init__(self, cookie: str) -> None:
        self.cookies = {COOKIE: cookie}
        self.username = None


def _request(cookie: str) -> Any:
    return _Request(cookie)


def _session(studio: Studio, cookie: str = "a" * 64, uploads: Any = ()) -> Any:
    """The session of this cookie's browser, holding `uploads` as its own (as if it had uploaded them)."""
    session = studio.session(owner_from({COOKIE: cookie}, None))
    for path in uploads:
        studio.guard.allow(session.owner, path)
    return session


def test_preview_is_the_run_path_and_numbers_the_faces(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    session = _session(studio, uploads=media.values())
    raw = {"processors": ["face_swapper"]}
    preview = studio.preview(session, raw, str(media["photo"]), [str(media["source"])], 0)
    report, entry = studio.run_for(session, raw, str(media["photo"]), [str(media["source"])], None)
    assert np.array_equal(preview.rendered.after, video.read_image(report.output)[0])
    assert len(preview.rendered.detected) == len(preview.faces) == 1
    # The before image has the face's box and number drawn; the files are the session's alone.
    before = video.read_image(Path(preview.before))[0]
    x1, y1, x2, y2 = (round(v) for v in preview.rendered.detected[0].box)
    assert np.abs(before[y1 + 5 : y2 - 5, x1].astype(int) - [255, 140, 0]).max() < 40  # the box's left edge
    assert studio.guard.allows(session.owner, Path(preview.before).resolve())
    assert not studio.guard.allows(_session(studio, "b" * 64).owner, Path(preview.before).resolve())
    # A processor option change re-runs the chain alone: the faces of the frame are kept.
    again = studio.preview(
        session, {**raw, "face_swapper": {"blend": 50}}, str(media["photo"]), [str(media["source"])], 0
    )
    assert again.rendered.faces_ms < preview.rendered.faces_ms
    assert entry.target == "photo.png" and entry.sources == ("grace_hopper.jpg",)


def test_a_preview_over_max_pixels_is_refused_like_a_run(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work", policy=Policy(server={"runtime": {"max_pixels": 1000}}))
    session = _session(studio, uploads=media.values())
    raw = {"processors": ["frame_enhancer"]}
    with pytest.raises(InvalidInput, match=r"photo.png is 512×512 = 262144 pixels, above runtime.max_pixels=1000") as e:
        studio.preview(session, raw, str(media["photo"]), [], 0)
    # The user cannot raise the server's limit, and is not told to.
    assert user_message(e.value, session.names).endswith(
        "scale it down first (this server's limit: its operator sets it, `ui --max-pixels`)"
    )


def test_faces_of_a_source_without_a_face_are_reported_at_once(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    blank = tmp_path / "empty wall.png"
    video.write_image(blank, np.full((200, 200, 3), 120, np.uint8))
    session = _session(studio, uploads=[*media.values(), blank])
    from engine.job.settings import FacesSettings

    pictures, picks, problems = studio.source_faces(session, [str(media["source"]), str(blank)], FacesSettings())
    assert [caption for _, caption in pictures] == ["grace_hopper.jpg"] and picks == [None]
    assert problems == ["empty_wall.png: no face found — use a photo where one face is clearly visible"]
    picture = video.read_image(Path(pictures[0][0]))[0]
    assert picture.shape == (192, 192, 3)
    # The thumbnail holds the whole face: the detector finds it again, well inside the square.
    (face,) = studio.service.find_faces(picture, FacesSettings())
    assert face.box[0] > 10 and face.box[2] < 182 and face.box[1] > 10 and face.box[3] < 182


def test_a_source_photo_with_several_faces_shows_each_marks_the_one_taken_and_says_a_pick_past_them(
    tmp_path: Path, media: dict[str, Path]
) -> None:
    from test_people_browser import two_people

    from engine.faces.select import source_face_index
    from engine.job.settings import FacesSettings

    studio = Studio(work_dir=tmp_path / "work")
    pair = two_people(tmp_path)["target"]  # the astronaut on the left, Hopper on the right
    session = _session(studio, uploads=[pair])
    image = video.read_image(pair)[0]
    faces = sorted(studio.service.find_faces(image, FacesSettings()), key=lambda f: f.box[0] + f.box[2])
    largest = source_face_index(faces, 0, "pair.png")[1] + 1

    def captions(pick: int) -> tuple[list[str], list[int | None], list[str]]:
        pictures, picks, problems = studio.source_faces(session, [str(pair)], FacesSettings(source_face=pick))
        for path, _ in pictures:  # each a picture of that face, shared with this session alone
            assert studio.guard.allows(session.owner, Path(path).resolve())
        return [caption for _, caption in pictures], picks, problems

    marked = [f"pair.png · {n} of 2{' ✓' if n == largest else ''}" for n in (1, 2)]
    assert captions(0) == (marked, [1, 2], [])
    assert captions(3 - largest)[0] == [f"pair.png · {n} of 2{' ✓' if n != largest else ''}" for n in (1, 2)]
    # A pick past the photo's faces: said, and its faces are still there to click one.
    shown, picks, problems = captions(3)
    assert shown == ["pair.png · 1 of 2", "pair.png · 2 of 2"] and picks == [1, 2]
    assert problems == [
        "faces.source_face=3, but the source image pair.png has 2 faces: choose 1–2 (from the left), or 0 for the "
        "largest"
    ]


def test_a_picked_face_becomes_the_reference_and_is_shown(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    session = _session(studio, uploads=media.values())
    preview = studio.preview(session, {"processors": ["face_swapper"]}, str(media["photo"]), [str(media["source"])], 0)
    reference = studio.reference_from(session, preview.faces[0])
    assert studio.guard.allows(session.owner, Path(reference).resolve())
    raw = {"processors": ["face_swapper"], "faces": {"selector": "reference", "reference_image": reference}}
    report, _ = studio.run_for(session, raw, str(media["photo"]), [str(media["source"])], None)
    assert report.faces_processed == 1
    # Another session cannot make someone else's face picture its reference.
    with pytest.raises(InvalidInput, match="not one of this session's"):
        studio.reference_from(_session(studio, "c" * 64), preview.faces[0])


def test_messages_and_sidecars_name_files_as_the_user_knows_them(tmp_path: Path, media: dict[str, Path]) -> None:
    names = {"/tmp/gradio/abc123/holiday.mp4": "holiday.mp4"}
    message = user_message(InvalidInput("/tmp/gradio/abc123/holiday.mp4 has no video stream; see /srv/x/y.log"), names)
    assert message == "holiday.mp4 has no video stream; see y.log"
    assert scrub("C:\\Users\\me\\models\\a.onnx is missing", {}) == "a.onnx is missing"
    assert plain_name("../../my holiday (1).MP4") == "my_holiday_1.MP4"
    assert output_name("holiday.mp4", ".mp4", {"holiday-facestudio.mp4"}) == "holiday-facestudio-2.mp4"
    studio = Studio(work_dir=tmp_path / "work")
    session = _session(studio, uploads=media.values())
    report, _ = studio.run_for(
        session, {"processors": ["face_swapper"]}, str(media["photo"]), [str(media["source"])], None
    )
    text = report.sidecar.read_text()
    assert str(tmp_path) not in text and str(media["photo"].parent) not in text
    assert json.loads(text)["job"]["target"] == "photo.png"
    # A failure names the upload by its name, not its server path.
    with pytest.raises(InvalidInput) as caught:
        studio.run_for(
            session, {"processors": ["face_swapper"]}, str(media["photo"]), [str(tmp_path / "nope.jpg")], None
        )
    assert str(tmp_path) not in user_message(caught.value, session.names) and "nope.jpg" in user_message(
        caught.value, session.names
    )


def _hold(line: RunQueue, ticket: Ticket, entered: threading.Event, release: threading.Event) -> threading.Thread:
    """A thread that takes `ticket`'s turn, says so, and keeps it until `release`."""

    def hold() -> None:
        try:
            with line.turn(ticket):
                entered.set()
                release.wait(30)
        except Cancelled:
            entered.set()

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_the_run_line_gives_places_and_waits_from_measured_speed() -> None:
    clock = Clock()
    line = RunQueue(clock=clock)
    first = Ticket(("invert",), frames=100, megapixel_frames=100.0)
    second = Ticket(("invert",), frames=50, megapixel_frames=50.0)
    release = threading.Event()
    running, turn = threading.Event(), threading.Event()
    threads = [_hold(line, first, running, release)]
    assert running.wait(10)
    threads.append(_hold(line, second, turn, release))
    while second not in line._line:  # the second job has joined the line
        threading.Event().wait(0.01)
    assert line.place(first).running
    assert line.place(second).ahead == 1 and line.place(second).wait is None  # nothing measured yet
    line.progress(first, 0)
    assert first.started == clock.now
    clock.now += 10.0  # 10 s for the first 25 frames: 0.4 s a frame = 0.4 s per megapixel-frame
    line.progress(first, 25)
    place = line.place(second)
    assert place.ahead == 1 and not place.running
    assert place.wait == pytest.approx(75 * 0.4, rel=0.05)  # the 75 frames left of the running job
    assert not turn.is_set()
    # A job cancelled while it waits leaves the line, saying so.
    late = Ticket(("invert",), 1, 1.0)
    late.cancel.set()
    with pytest.raises(Cancelled, match="cancelled while waiting in line"), line.turn(late):
        pass
    release.set()
    for thread in threads:
        thread.join(10)
    assert turn.is_set()
    assert line.seconds_per_megapixel_frame(("invert",)) == pytest.approx(0.4, rel=0.2)


def test_run_state_says_stage_frames_fps_and_eta() -> None:
    cancel = threading.Event()
    clock = Clock()
    state = RunState(cancel, clock=clock)
    assert state.text().startswith("preparing")
    from webui.schedule import Place

    # Next in line (nothing ahead): no queue line ("waiting: 0th in line — about 0 s" said nothing true).
    state.queued(Place(ahead=0, running=False, wait=0.0))
    assert state.text().startswith("preparing") and "<progress" not in state.html()
    state.queued(Place(ahead=2, running=False, wait=22.0))
    assert state.text() == "waiting: 2nd in line — about 22 s"
    state.stage("frames", 100)
    clock.now += 10.0
    state.advance(20)
    assert state.text() == "rendering: 20 of 100 frames, 2.00 fps, about 40 s left"
    assert state.html().startswith("<progress value='200' max='1000'></progress>")
    state.advance(80)
    assert state.text().startswith("finishing: 100 of 100 frames done")
    cancel.set()
    with pytest.raises(Cancelled, match="cancelled from the UI"):
        state.advance()


def test_the_summary_says_the_audio_as_the_run_report_does() -> None:
    from dataclasses import replace

    from test_media_exact import OURS, _tracks

    from engine.media.info import AudioTrack
    from engine.run.report import RunReport
    from webui.summary import summary

    dub = _tracks(AudioTrack(0, "aac", 2, "stereo", 48000, {"language": "eng"}),
                  AudioTrack(1, "pcm_s16le", 2, "stereo", 48000, {"language": "fra"}))  # fmt: skip
    plan = video.plan_streams(dub, "mp4", OURS)
    report = RunReport(Path("o.mp4"), Path("o.mp4.job.json"), "video", 6, (64, 48), (64, 48), 2.0, audio=True,
                       audio_tracks=plan.audio, notes=plan.notes)  # fmt: skip
    assert summary(report).split("\n\n") == [
        "**6 frames** 64×48 → 64×48 in 2.0 s (3.00 fps) on none; 2 audio tracks kept.",
        "Note: audio: track 2 re-encoded from pcm_s16le to aac (MP4 cannot hold pcm_s16le)",
        "Note: audio: 2 tracks kept (eng, fra)",
    ]
    assert summary(replace(report, audio_tracks=1, notes=())).endswith("; audio kept.")
    assert summary(replace(report, audio=False, audio_tracks=0, notes=())).endswith("; no audio.")


def test_cancel_stops_the_job_and_leaves_no_output(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    session = _session(studio, uploads=media.values())

    class PressCancel(RunState):
        def advance(self, n: int = 1) -> None:
            session.cancel.set()  # the user presses Cancel as soon as the first frames are done
            super().advance(n)

    raw = {"processors": ["frame_enhancer"], "frame_enhancer": {"scale": 1}}
    with pytest.raises(Cancelled, match="cancelled from the UI"):
        studio.run_for(session, raw, str(media["clip"]), [], PressCancel(session.cancel))
    assert not list(session.folder.rglob("*.mp4*")) and session.history.entries() == []


def test_history_is_kept_bounded_and_goes_with_the_session(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=tmp_path / "work")
    session = _session(studio, uploads=media.values())
    for amount in (10, 20):
        studio.run_for(session, {"processors": ["invert"], "invert": {"amount": amount}}, str(media["photo"]), [], None)
    entries = session.history.entries()
    assert [Path(e.output).name for e in entries] == ["photo-facestudio-2.png", "photo-facestudio.png"]
    assert entries[0].settings == {"processors": ["invert"], "invert": {"amount": 20}}
    assert all(Path(e.thumbnail or "").is_file() for e in entries)
    # A new Studio object over the same folder (the page reloaded) finds the same history.
    again = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=tmp_path / "work")
    assert [e.id for e in _session(again).history.entries()] == [e.id for e in entries]
    assert KEEP == 50
    # An idle session expires with its files; one seen recently does not.
    other = _session(studio, "d" * 64)
    studio.seen(other.owner)
    assert studio.expire(idle_seconds=-1) and not session.folder.exists()
    assert studio.expire(idle_seconds=3600) == []


def test_a_forged_cookie_or_login_never_names_a_folder(tmp_path: Path) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    assert owner_from({COOKIE: "../victim"}, None) is None
    assert owner_from({COOKIE: "x" * 10}, None) is None
    with pytest.raises(InvalidInput, match="sent no session cookie"):
        studio.session(None)
    login = owner_from({COOKIE: "a" * 64}, "../../etc")
    assert isinstance(login, Owner) and login.id.isalnum() and login.label == "../../etc (this browser)"
    assert studio.session(login).folder.parent == studio.work
    # One login shared by collaborators: each browser is an owner of its own; a login without the cookie is none.
    assert owner_from({COOKIE: "b" * 64}, "../../etc") != login and owner_from({}, "../../etc") is None


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
    monkeypatch.setenv("FACESTUDIO_MODELS", str(tmp_path / "models"))
    studio = Studio(work_dir=tmp_path / "work")
    status = studio.service.catalogue.status("gfpgan_1_3")
    assert (status.availability, status.downloadable, status.size) == ("missing", True, 200_000)
    calls: list[tuple[int, int | None]] = []
    (path,) = studio.service.catalogue.fetch(
        ["gfpgan_1_3"], progress=lambda _: lambda done, total: calls.append((done, total)), say=lambda _: None
    )
    assert path.read_bytes() == payload and calls[-1] == (len(payload), len(payload))
    status = studio.service.catalogue.status("gfpgan_1_3")
    assert (status.availability, status.downloadable) == ("downloaded", False)


def test_a_failed_download_says_why_beside_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = MANIFEST_PATH.read_text().replace(
        "https://github.com/TencentARC/GFPGAN/releases/download/v1.3.0/GFPGANv1.3.pth", "http://127.0.0.1:9/none.pth"
    )
    (tmp_path / "manifest.toml").write_text(text)
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(tmp_path / "manifest.toml"))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(tmp_path / "models"))
    page = Page(Studio(work_dir=tmp_path / "work"))
    # A model for non-commercial use only is not fetched until its licence is accepted; then an unreachable
    # server is said to be that (no network), by its host.
    refused = page.models.download("gfpgan_1_3")(False, progress=lambda *a, **k: None)
    assert "is licensed for non-commercial use only" in refused and not (tmp_path / "models").exists()
    message = page.models.download("gfpgan_1_3")(True, progress=lambda *a, **k: None)
    assert message.startswith("<span class='fs-warn'>no network: 127.0.0.1 cannot be reached (")
    assert str(tmp_path) not in message


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--share"], "--share makes the app public: add --auth USER:PASS"),
        (["--share", "--auth", "justuser"], "--auth must be USER:PASS"),
        (["--port", "0"], "--port must be 1–65535"),
        (["--keep-hours", "0"], "--keep-hours must be above 0"),
    ],
)
def test_unsafe_or_bad_serving_flags_exit_2(flags: list[str], message: str, capsys) -> None:
    assert cli.main(["ui", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_no_command_means_the_ui(capsys) -> None:
    # UI flags without a command go to `ui` (which refuses a share link without a login, before serving).
    assert cli.main(["--share"]) == 2
    assert "--share makes the app public" in capsys.readouterr().err


def test_trim_bounds_keep_exactly_the_frames_between_the_two_marks(media: dict[str, Path]) -> None:
    """The timeline's Start here / End here: seconds half way between frames, so the engine's span (start
    inclusive, end exclusive) holds exactly the marked frames, both marks included."""
    info = video.probe(media["clip"])  # 8 frames at 24 fps
    for first, last in ((0, 7), (2, 5), (3, 3), (0, 0), (6, 7)):
        start, end = trim_bounds(info, first, last)
        assert frames_of(info, start, end) == (first, last), (first, last)
        assert video.select(info, start, end).frames == last - first + 1
    assert trim_bounds(info, 0, 7) == (0.0, None)  # the whole video: no trim at all
    assert trim_bounds(info, 2, 5) == (pytest.approx(1.5 / 24, abs=1e-6), pytest.approx(5.5 / 24, abs=1e-6))
    assert "output: frames 2–5 (4 frames)" in trim_bar(info, *trim_bounds(info, 2, 5))
    assert "output: the whole video" in trim_bar(info, 0.0, None)


def test_face_by_face_shows_each_changed_face_before_and_after_side_by_side(
    tmp_path: Path, media: dict[str, Path]
) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    rendered = studio.service.preview(
        {"processors": ["face_swapper"]}, media["photo"], [media["source"]], 0
    )  # one face, swapped
    pairs = face_pairs(rendered, size=160)
    assert pairs is not None and pairs.shape == (160, 2 * 160 + 8, 3) and pairs.dtype == np.uint8
    before, after = pairs[:, :160].astype(int), pairs[:, 168:].astype(int)
    assert np.abs(before - after)[40:140, 40:120].mean() > 5  # the face changed
    assert (pairs[:, 160:168] == 255).all()  # the gap between them
    assert face_pairs(Rendered(rendered.before, rendered.before, rendered.detected, ())) is None


def test_an_implied_choice_is_ticked_fixed_and_said_and_conditions_see_it() -> None:
    views = {v.name: v for v in describe(FaceSwapperOptions)}
    mask = views["mask"]
    fixed = implied(mask, {"model": "landmark_warp", "mask": ["box"]})
    assert fixed["elem_classes"] == ["fs-implied", "fs-implied-2"]  # "face", the 2nd box
    assert fixed["info"].endswith("face: always on with model landmark_warp")
    assert implied(mask, {"model": "inswapper_128", "mask": ["box"]})["elem_classes"] == []
    # keep_mouth applies while the face mask is on: with landmark_warp it is, whatever the boxes sent.
    current = complete(list(views.values()), {"model": "landmark_warp", "mask": ["box"]})
    assert current["mask"] == ["box", "face"] and views["keep_mouth"].applies(current)


def test_a_download_that_cannot_connect_says_no_network_by_host() -> None:
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    failure = ModelUnavailable("missing model files (download failed): a.onnx from http://models.example:8080/a.onnx")
    failure.__cause__ = ModelUnavailable("could not download a.onnx")
    failure.__cause__.__cause__ = refused
    said = download_failure(failure)
    assert said.startswith("no network: models.example cannot be reached (") and "Connection refused" in said
    assert download_failure(ModelUnavailable("checksum differs")) == "download failed: checksum differs"


def test_the_models_are_grouped_by_task_and_searched_by_every_word(tmp_path: Path) -> None:
    statuses = Studio(work_dir=tmp_path / "work").service.catalogue.statuses()
    groups = dict(grouped(statuses))
    assert list(groups)[:3] == ["Face swappers", "Face enhancers (restorers)", "Frame enhancers (upscalers)"]
    assert sum(len(g) for g in groups.values()) == len(statuses)
    found = grouped(statuses, "ESRGAN x2")
    assert [(title, [s.id for s in group]) for title, group in found] == [
        ("Frame enhancers (upscalers)", ["real_esrgan_x2plus"])
    ]


def test_a_history_entry_keeps_its_inputs_under_their_names(tmp_path: Path, media: dict[str, Path]) -> None:
    studio = Studio(work_dir=tmp_path / "work")
    upload = tmp_path / "upload-7f3a" / "photo.png"
    upload.parent.mkdir()
    upload.write_bytes(media["photo"].read_bytes())
    session = _session(studio, uploads=[upload, media["source"]])
    _, entry = studio.run_for(session, {"processors": ["face_swapper"]}, str(upload), [str(media["source"])], None)
    session.history.keep_inputs(entry, upload, [media["source"]], {str(upload): "my photo.png"})
    target, sources = session.history.inputs(entry)
    assert target is not None and target.name == "my photo.png" and target.read_bytes() == upload.read_bytes()
    assert [s.name for s in sources] == [media["source"].name]
    upload.unlink()  # the upload goes (Gradio's cache is cleaned): the kept copy stays with the entry
    assert session.history.inputs(entry)[0] == target and target.is_file()
    session.history.remove(entry.id)
    assert not target.exists()
