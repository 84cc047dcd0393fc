"""A shared studio nobody can read through (docs/SECURITY.md): each claim of the threat model, tested against the
served app as a second browser and a cookie-less client would try it.

The enumerating tests read the app's own description — `/config` (Gradio's dependencies: every event of the
page), `/gradio_api/info` and the FastAPI app's routes — so an event or route added later is covered with no edit
here: every event is replayed through every one of Gradio's ways of calling it, with the first session's upload
and result as its files, from another session and from a client without cookies; every route is called as its
rule in webui/access.py says, and a route missing from the table must be refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import cli
from engine.core.errors import InvalidInput
from engine.job.settings import SETTINGS_GROUPS
from engine.media import demo
from engine.serve.service import file_settings, server_settings
from processors import REGISTRY, build_registry
from tests.test_webui import Invert, free_port
from webui import access
from webui.app import ServeError, Studio, UISettings, launch
from webui.privacy import COOKIE, NOT_YOURS, FileGuard, Owner, owner_from
from webui.studio import Policy

ROOT = Path(__file__).resolve().parents[1]
FILE_META = {"_type": "gradio.FileData"}
# Gradio's ways of calling an event: its queue (the page), and its call API (scripts), by the event's API name.
EVENT_ROUTES = ("/gradio_api/call/{}", "/gradio_api/call/v2/{}", "/gradio_api/run/{}", "/gradio_api/api/{}")


@dataclass
class Served:
    """The app under test: its URL, studio, Gradio app, its temp folder (Gradio's and ours) and the first
    session's client (`a`), its upload and result (server paths) and its Gradio session."""

    url: str
    studio: Studio
    app: Any
    temp: Path
    a: httpx.Client
    upload: str
    result: str
    session_hash: str


def _file(path: str) -> dict[str, Any]:
    return {"path": path, "orig_name": Path(path).name, "meta": FILE_META}


def _call(client: httpx.Client, url: str, api_name: str, data: list[Any]) -> list[Any]:
    """Run an event through Gradio's call API and return its outputs (raises on an error event)."""
    posted = client.post(f"{url}gradio_api/call/{api_name}", json={"data": data})
    posted.raise_for_status()
    stream = client.get(f"{url}gradio_api/call/{api_name}/{posted.json()['event_id']}", timeout=120)
    event, payload = "", ""
    for line in stream.text.splitlines():
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            payload = line.split(":", 1)[1].strip()
    if event != "complete":
        raise AssertionError(f"{api_name}: {event} {payload}")
    return json.loads(payload)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The app (the built-in processors and the toy inverter) with Gradio's files in a folder of its own, and a
    first session that has uploaded a photo and run a job on it."""
    temp = tmp_path_factory.mktemp("gradio-temp")
    old = os.environ.get("GRADIO_TEMP_DIR")
    os.environ["GRADIO_TEMP_DIR"] = str(temp)
    studio = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=tmp_path_factory.mktemp("work"))
    port = free_port()
    app = launch(UISettings(port=port, max_file_size="1mb", jobs_per_user=4), studio, block=False)
    url = f"http://127.0.0.1:{port}/"
    photo = tmp_path_factory.mktemp("media") / "private photo.png"
    _write_photo(photo)
    a = httpx.Client(timeout=120)
    try:
        a.get(f"{url}config").raise_for_status()  # the owner cookie
        with photo.open("rb") as handle:
            (upload,) = a.post(f"{url}gradio_api/upload", files={"files": (photo.name, handle)}).json()
        output, _, _ = _call(a, url, "run", [_file(upload), [], '{"processors": ["invert"]}', True])
        session_hash = "a-session-0001"  # her Gradio session: its first use makes it hers
        a.post(
            f"{url}gradio_api/cancel", json={"session_hash": session_hash, "fn_index": 0, "event_id": "e"}
        ).raise_for_status()
        yield Served(url, studio, app, temp, a, upload, output["path"], session_hash)
    finally:
        a.close()
        app.close()
        if old is None:
            os.environ.pop("GRADIO_TEMP_DIR", None)
        else:
            os.environ["GRADIO_TEMP_DIR"] = old


def _write_photo(path: Path) -> None:
    from engine import media

    media.write_image(path, demo.photo()[::4, ::4])


def _clients(served: Served) -> dict[str, httpx.Client]:
    """Another browser (its own cookie, from its first request) and a client that never sends cookies."""
    other = httpx.Client(timeout=30)
    other.get(f"{served.url}config")
    assert other.cookies[COOKIE] != served.a.cookies[COOKIE]
    return {"another session": other, "no cookies": httpx.Client(timeout=30, cookies=None)}


def _cookieless(client: httpx.Client) -> None:
    client.cookies.clear()


def _files_now(*folders: Path) -> set[Path]:
    return {p for folder in folders if folder.exists() for p in folder.rglob("*")}


def _events(served: Served) -> list[dict[str, Any]]:
    """Every event of the page with a server function, as the served app describes it."""
    config = served.a.get(f"{served.url}config").json()
    return [d for d in config["dependencies"] if d.get("backend_fn")]


def test_every_event_refuses_another_sessions_upload_and_result_and_makes_nothing(served: Served) -> None:
    events = _events(served)
    assert len(events) > 30  # the page's events, the run API, the people panel, live, history, models …
    info = served.a.get(f"{served.url}gradio_api/info").json()["named_endpoints"]
    clients = _clients(served)
    before = _files_now(served.temp, served.studio.work)
    refused = 0
    for name, client in clients.items():
        for which, path in enumerate((served.upload, served.result)):
            for event in events:
                # The file in every input and in the event's data (a gallery's selection carries its file).
                data = [_file(path) for _ in event["inputs"]]
                session_hash = f"{name[:7]}-{which}-{event['id']}".replace(" ", "-")  # a new one each call
                body = {"data": data, "event_data": {"value": _file(path)}, "fn_index": event["id"],
                        "trigger_id": None, "session_hash": session_hash}  # fmt: skip
                calls = [("/gradio_api/queue/join", body)]
                api_name = event.get("api_name")
                if api_name:
                    # An event without inputs takes no file: the file rides in its event data, as a selection's does.
                    plain = {"data": data, "event_data": {"value": _file(path)}}
                    calls += [(route.format(api_name), plain) for route in EVENT_ROUTES if "v2" not in route]
                    parameters = info.get(f"/{api_name}", {}).get("parameters", [])
                    named = {p["parameter_name"]: _file(path) for p in parameters if p.get("parameter_name")}
                    calls.append((EVENT_ROUTES[1].format(api_name), named or {"x": _file(path)}))
                for route, payload in calls:
                    if name == "no cookies":
                        _cookieless(client)
                    answer = client.post(f"{served.url}{route.lstrip('/')}", json=payload)
                    assert (answer.status_code, answer.json()) == (403, {"detail": NOT_YOURS}), (name, route, event)
                    refused += 1
    assert refused >= len(events) * 2 * 2 * 2
    # Nothing was made for anyone: no file, no session folder, nothing registered to the other clients.
    assert _files_now(served.temp, served.studio.work) == before
    other = owner_from({COOKIE: clients["another session"].cookies[COOKIE]}, None)
    assert other is not None and served.studio.guard.held_by(other) == []
    # The same call with the first session's own upload is let through (the refusal is about whose file it is).
    run = next(e for e in events if e.get("api_name") == "run")
    posted = served.a.post(
        f"{served.url}gradio_api/call/run", json={"data": [_file(served.upload), [], "", False]}
    )  # no consent: refused by the handler itself, after the files were found to be hers
    assert posted.status_code == 200 and run["id"] >= 0


def test_a_path_typed_where_a_setting_holds_a_file_shows_and_copies_nothing(served: Served) -> None:
    # The reference face's hidden textbox is the browser's to send: its picture follows it only for the session's
    # own files (it would have copied any file Gradio may serve into its cache, and said whether it exists).
    other = _clients(served)["another session"]
    before = _files_now(served.temp)
    for path in (served.result, served.upload, "/etc/hostname", str(served.studio.work)):
        (picture,) = _call(other, served.url, "on_reference", ["reference", path])
        assert (picture["value"], picture["visible"]) == (None, False), path
    assert _files_now(served.temp) == before
    (own,) = _call(served.a, served.url, "on_reference", ["reference", served.result])
    assert own["visible"] is True and own["value"]["path"] == served.result


def test_an_upload_or_result_is_fetched_by_its_owner_alone_through_every_file_route(served: Served) -> None:
    routes = [r for r in access.served_routes(served.app.server_app) if r.door.check == "file"]
    assert {r.path for r in routes} == {"/gradio_api/file={path_or_url:path}", "/gradio_api/file/{path:path}"}
    clients = _clients(served)
    for route in routes:
        prefix = route.path.split("{")[0]
        for path in (served.upload, served.result):
            assert served.a.get(f"{served.url}{prefix.lstrip('/')}{path}").status_code == 200
            for name, client in clients.items():
                if name == "no cookies":
                    _cookieless(client)
                assert client.get(f"{served.url}{prefix.lstrip('/')}{path}").status_code == 404, (name, route.path)
        # Not even the owner gets a URL fetched, a file by a relative path outside her files, or a server file.
        for wanted in ("http://127.0.0.1:9/x.png", "//example.org/x", "/etc/hostname", "../../../../etc/hostname"):
            assert served.a.get(f"{served.url}{prefix.lstrip('/')}{wanted}").status_code == 404, wanted


def test_every_route_is_in_the_table_or_refused_and_each_rule_holds(served: Served) -> None:
    routes = access.served_routes(served.app.server_app)
    listed = [r for r in routes if r.path in access.ROUTES]
    assert len(listed) > 60
    clients = _clients(served)
    other = clients["another session"]
    for route in routes:
        door = route.door
        url = served.url + _filled(route.path, served).lstrip("/")
        method = "GET" if "GET" in route.methods else sorted(route.methods)[0]
        if door.check == "refused":  # unused Gradio features, and anything a Gradio upgrade adds unlisted
            for client in (served.a, other):
                assert client.request(method, url).status_code == 404, route.path
        elif door.check == "open" and method == "GET" and "{" not in route.path:
            answer = other.get(url)
            assert answer.status_code < 500, route.path
            for secret in (served.upload, served.result, served.session_hash, served.a.cookies[COOKIE]):
                assert secret not in answer.text, (route.path, secret)
        elif door.check == "session":
            # The first session's Gradio session is hers: another owner is answered as for nothing there.
            hers = {"session_hash": served.session_hash}
            answer = other.request(method, url, params=hers, json={**hers, "fn_index": 0, "event_id": "e"})
            assert answer.status_code == 404, route.path
    # The jobs API: a job's routes answer its token alone (another client, with or without cookies: 404).
    with Path(served.upload).open("rb") as handle:
        job = served.a.post(
            f"{served.url}api/jobs", files={"target": ("mine.png", handle)},
            data={"preset": '{"processors": ["invert"]}', "consent": "true"},
        ).json()  # fmt: skip
    for name, client in clients.items():
        if name == "no cookies":
            _cookieless(client)
        for path in ("", "/result", "/result?sidecar=1"):
            assert client.get(f"{served.url}api/jobs/{job['id']}{path}").status_code == 404
        assert client.post(f"{served.url}api/jobs/{job['id']}/cancel").status_code == 404
    assert served.a.get(f"{served.url}api/jobs/{job['id']}", headers={"X-Job-Token": job["token"]}).status_code == 200
    # Live: another's stream token (or none) connects nothing.
    offer = {"token": "x" * 40, "sdp": "v=0", "type": "offer"}
    assert other.post(f"{served.url}live/offer", json=offer).status_code == 404


def _filled(path: str, served: Served) -> str:
    """A route's path with its parameters filled: the first session's Gradio session and upload, else "x"."""
    given = {"session_hash": served.session_hash, "path_or_url": served.upload, "path": served.upload}
    return re.sub(r"{(\w+)(:\w+)?}", lambda m: given.get(m.group(1), "x"), path)


def test_a_gradio_session_is_its_first_owners_alone(served: Served) -> None:
    url, hash_ = served.url, "owned-session-77"
    cancel = {"session_hash": hash_, "fn_index": 0, "event_id": "e"}
    assert served.a.post(f"{url}gradio_api/cancel", json=cancel).status_code == 200
    clients = _clients(served)
    for name, client in clients.items():
        if name == "no cookies":
            _cookieless(client)
        assert client.get(f"{url}gradio_api/queue/data", params={"session_hash": hash_}).status_code == 404
        assert client.get(f"{url}gradio_api/heartbeat/{hash_}").status_code == 404
        assert client.post(f"{url}gradio_api/cancel", json=cancel).status_code == 404
        joined = client.post(f"{url}gradio_api/queue/join", json={"data": [], "fn_index": 0, "session_hash": hash_})
        assert joined.status_code == 404


def test_the_page_has_no_widget_for_a_server_setting_and_users_cannot_set_one(served: Served) -> None:
    from webui.page import Page

    studio = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=served.studio.work / "page")
    page = Page(studio)
    page.build()
    server = server_settings(studio.registry)
    shown = {(e.group, e.name) for e in page.settings.entries}
    assert not {(g, n) for g, names in server.items() for n in names} & shown
    # From the run API (a preset as text) and the jobs API alike, each server setting is refused by name.
    every = [(g, n) for g, names in server.items() for n in names]
    assert (
        ("runtime", "device") in every and ("runtime", "max_pixels") in every and ("video", "segment_frames") in every
    )
    for group, name in every:
        value = getattr(SETTINGS_GROUPS[group](), name) if group in SETTINGS_GROUPS else None
        preset = json.dumps({"processors": ["invert"], group: {name: value}})
        with pytest.raises(AssertionError, match=f"{group}.{name} is the server's to set"):
            _call(served.a, served.url, "run", [_file(served.upload), [], preset, True])
        with Path(served.upload).open("rb") as handle:
            answer = served.a.post(
                f"{served.url}api/jobs", files={"target": ("p.png", handle)}, data={"preset": preset, "consent": "true"}
            )
        assert answer.status_code == 400 and f"{group}.{name} is the server's to set" in answer.json()["detail"]


@pytest.mark.parametrize("setting", ["lip_syncer.audio", "faces.reference_image"])
def test_a_file_setting_takes_the_users_own_upload_never_a_server_path(served: Served, setting: str) -> None:
    assert setting in {f"{g}.{n}" for g, names in file_settings(REGISTRY).items() for n in names}
    group, _, name = setting.partition(".")
    clients = _clients(served)
    other = clients["another session"]
    with Path(served.upload).open("rb") as handle:
        (theirs,) = other.post(f"{served.url}gradio_api/upload", files={"files": ("t.png", handle)}).json()
    for path in ("/etc/hostname", "/nonexistent/file.wav", served.result, served.upload):
        preset = json.dumps({"processors": ["invert"], group: {name: path}})
        # The run API as another session (her files are not its own), and the jobs API (a path is never a file).
        with pytest.raises(AssertionError) as refused:
            _call(other, served.url, "run", [_file(theirs), [], preset, True])
        message = str(refused.value)
        assert f"{setting} takes a file you uploaded to this server" in message and path not in message
        with Path(served.upload).open("rb") as handle:
            answer = other.post(
                f"{served.url}api/jobs", files={"target": ("p.png", handle)}, data={"preset": preset, "consent": "true"}
            )
        assert answer.status_code == 400 and f"{setting} takes a file you uploaded" in answer.json()["detail"]
    # Her own upload is hers to use; the jobs API takes the file as a form field named after the setting.
    preset = json.dumps({"processors": ["invert"], group: {name: theirs}})
    output, _, _ = _call(other, served.url, "run", [_file(theirs), [], preset, True])
    assert Path(output["path"]).is_file()
    with Path(served.upload).open("rb") as target, Path(served.upload).open("rb") as given:
        answer = other.post(
            f"{served.url}api/jobs", files={"target": ("p.png", target), setting: ("mine.png", given)},
            data={"preset": '{"processors": ["invert"]}', "consent": "true"},
        )  # fmt: skip
    assert answer.status_code == 202, answer.text


def test_the_studio_refuses_another_sessions_files_and_server_settings(tmp_path: Path) -> None:
    studio = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=tmp_path / "work")
    photo, own = tmp_path / "photo.png", tmp_path / "theirs.png"
    _write_photo(photo)
    _write_photo(own)
    mine = studio.session(owner_from({COOKIE: "a" * 64}, None))
    theirs = studio.session(owner_from({COOKIE: "b" * 64}, None))
    studio.guard.allow(mine.owner, photo)
    studio.guard.allow(theirs.owner, own)
    preview = studio.preview(mine, {"processors": ["invert"]}, str(photo), [], 0)
    invert = {"processors": ["invert"]}
    for raw, target, refusal in (
        (invert, photo, "photo.png is not a file you uploaded"),
        (invert, own, None),
        ({**invert, "faces": {"reference_image": preview.after}}, own, "faces.reference_image takes a file you"),
        ({**invert, "lip_syncer": {"audio": preview.after}}, own, "lip_syncer.audio takes a file you uploaded"),
        ({**invert, "lip_syncer": {"audio": "/etc/hostname"}}, own, "lip_syncer.audio takes a file you uploaded"),
    ):
        if refusal is None:  # her own target is hers to preview and run
            assert studio.preview(theirs, raw, str(target), [], 0).after
            continue
        with pytest.raises(InvalidInput, match=refusal):
            studio.preview(theirs, raw, str(target), [], 0)
        with pytest.raises(InvalidInput, match=refusal):
            studio.run_for(theirs, raw, str(target), [], None)
    assert theirs.history.entries() == []
    with pytest.raises(InvalidInput, match="runtime.device is the server's to set"):
        studio.preview(mine, {"processors": ["invert"], "runtime": {"device": "cpu"}}, str(photo), [], 0)
    with pytest.raises(InvalidInput, match="not a file you uploaded"):
        studio.people_of(theirs, str(photo), SETTINGS_GROUPS["faces"](), SETTINGS_GROUPS["runtime"]())


def test_limits_a_user_can_exhaust_each_say_which(tmp_path: Path) -> None:
    clip = demo.make_clip(tmp_path / "clip.mp4", 64, 36, 12)
    policy = Policy(server={"runtime": {"max_pixels": 1000}}, max_frames=10, jobs_per_user=1, disk_per_user=10)
    studio = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=tmp_path / "work", policy=policy)
    session = studio.session(owner_from({COOKIE: "a" * 64}, None))
    studio.guard.allow(session.owner, clip)
    raw = {"processors": ["invert"]}
    with pytest.raises(InvalidInput, match=r"this session keeps .* GB here, its limit .*\(ui --disk-per-user-gb\)"):
        studio.run_for(session, raw, str(clip), [], None)
    studio.policy = Policy(server={"runtime": {"max_pixels": 1000}}, max_frames=10, jobs_per_user=1)
    with pytest.raises(InvalidInput, match=r"clip.mp4 has 12 frames to render, above this server's limit of 10"):
        studio.run_for(session, raw, str(clip), [], None)
    studio.policy = Policy(server={"runtime": {"max_pixels": 1000}}, jobs_per_user=1)
    with pytest.raises(InvalidInput, match=r"above runtime.max_pixels=1000"):
        studio.run_for(session, raw, str(clip), [], None)
    session.running = 1  # a run of this session waits or runs
    with pytest.raises(InvalidInput, match=r"already has 1 run\(s\) .* \(ui --jobs-per-user 1\)"):
        studio.run_for(session, raw, str(clip), [], None)


def test_live_streams_are_one_per_session_and_at_most_the_servers_limit(tmp_path: Path) -> None:
    from webui.live_rtc import LiveHub

    studio = Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=tmp_path / "work")
    hub = LiveHub(studio, max_streams=1)
    mine, theirs = (studio.session(owner_from({COOKIE: c * 64}, None)) for c in "ab")
    photo = tmp_path / "face.png"
    _write_photo(photo)
    studio.guard.allow(mine.owner, photo)
    invert = {"processors": ["invert"]}
    try:
        first = hub.open(mine, invert, [str(photo)], fps=15)
        again = hub.open(mine, invert, [str(photo)], fps=15)  # a new Start replaces the session's own stream
        assert hub.of(mine) is again and again is not first
        with pytest.raises(InvalidInput, match=r"at most 1 at once, ui --live-streams\)"):
            hub.open(theirs, invert, [], fps=15)
        hub.max_streams = 2
        with pytest.raises(InvalidInput, match="face.png is not a file you uploaded"):
            hub.open(theirs, invert, [str(photo)], fps=15)  # her source photo is not theirs to stream with
        with pytest.raises(InvalidInput, match="runtime.threads is the server's to set"):
            hub.open(theirs, {**invert, "runtime": {"threads": 64}}, [], fps=15)
        assert hub.of(theirs) is None
    finally:
        hub.close()


def test_the_guard_deletes_only_inside_the_servers_folders(tmp_path: Path) -> None:
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"keep me")
    inside = tmp_path / "work" / "result.png"
    inside.parent.mkdir()
    inside.write_bytes(b"mine")
    guard = FileGuard([tmp_path / "work"])
    owner = Owner("b" + "1" * 24, "this browser")
    guard.allow(owner, outside)
    guard.allow(owner, inside)
    assert guard.allows(owner, tmp_path / "work" / ".." / "outside.png")
    assert not guard.allows(Owner("b" + "2" * 24, "another"), outside) and not guard.allows(None, outside)
    guard.release(owner, [outside, inside])
    assert outside.read_bytes() == b"keep me" and not inside.exists()
    assert not guard.allows(owner, outside)


def test_no_telemetry(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradio import analytics

    assert served.a.get(f"{served.url}config").json()["analytics_enabled"] is False
    called: list[str] = []
    for name in ("version_check", "initiated_analytics", "launched_analytics", "error_analytics"):
        monkeypatch.setattr(analytics, name, lambda *a, _n=name, **k: called.append(_n))
    from webui.page import Page

    Page(Studio(build_registry([*REGISTRY.values(), Invert]), work_dir=served.studio.work / "t")).build()
    assert called == []


def test_refused_and_abandoned_uploads_leave_no_file(served: Served) -> None:
    before = _files_now(served.temp)
    big = os.urandom(1_100_000)
    assert httpx.post(f"{served.url}gradio_api/upload", files={"files": ("big.png", big)}).status_code == 413
    two = [("files", ("a.png", b"small")), ("files", ("b.png", big))]
    assert httpx.post(f"{served.url}gradio_api/upload", files=two).status_code == 413
    answer = httpx.post(f"{served.url}api/jobs", files={"target": ("big.png", big)}, data={"consent": "true"})
    assert answer.status_code == 413
    # A client that goes away in the middle of its upload.
    port = int(served.url.rsplit(":", 1)[1].strip("/"))
    for route, field in (("/gradio_api/upload", "files"), ("/api/jobs", "target")):
        with socket.create_connection(("127.0.0.1", port)) as raw:
            head = f'--B\r\nContent-Disposition: form-data; name="{field}"; filename="x.png"\r\n\r\n'.encode()
            raw.sendall(
                f"POST {route} HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\n"
                f"Content-Length: 900000\r\n\r\n".encode()
                + head
                + os.urandom(200_000)
            )
    served.a.get(f"{served.url}healthz")  # the server has handled what came before
    _wait_until(lambda: _files_now(served.temp) == before)
    assert _files_now(served.temp) == before


def test_an_event_leaves_no_file_but_what_it_gives_its_caller(served: Served) -> None:
    owner = owner_from({COOKIE: served.a.cookies[COOKIE]}, None)
    before = _files_now(served.temp)
    # Events that take uploads (Gradio's File made an empty file in its folder for each, every time).
    output, sidecar, _ = _call(
        served.a, served.url, "run", [_file(served.upload), [], '{"processors": ["invert"]}', True]
    )
    events = {e.get("api_name"): e for e in _events(served)}
    if "on_target_1" in events:  # the target, then (restoring, trim start and end, the session's values)
        _call(served.a, served.url, "on_target_1", [_file(served.upload), None, 0, "", None])
    made = {p for p in _files_now(served.temp) - before if p.is_file()}
    assert {Path(output["path"]), Path(sidecar["path"])} <= made
    assert all(served.studio.guard.allows(owner, p) for p in made), made - set(served.studio.guard.held_by(owner))


def _wait_until(done: Any, seconds: float = 10.0) -> None:
    import time

    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        time.sleep(0.05)


def test_a_port_in_use_is_one_line_exit_2_and_leaves_nothing(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, str(ROOT / "launch.py"), "ui", "--port", str(port)],
            env={**os.environ, "TMPDIR": str(temp), "FACESTUDIO_HOME": str(tmp_path / "home")},
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: port {port} on 127.0.0.1 is in use (another server?): choose another --port"
    ]
    assert list(temp.iterdir()) == []


def test_share_without_network_is_one_line_exit_2_and_serves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gradio import networking

    def offline(*args: object, **kwargs: object) -> str:
        raise RuntimeError("Could not get share link from Gradio API Server.")

    monkeypatch.setattr(networking, "setup_tunnel", offline)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    port = free_port()
    code = cli.main(["ui", "--share", "--auth", "me:long-password", "--port", str(port)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "error: no share link could be made (no network, or Gradio's share server is unreachable), so nothing is "
        "served: start without --share to serve on this machine or network only"
    ]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # nothing listens there any more
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("facestudio-")]


def test_a_server_preset_holds_the_servers_settings_alone(tmp_path: Path) -> None:
    preset = tmp_path / "server.toml"
    preset.write_text('[runtime]\ndevice = "cpu"\nthreads = 2\n')
    from webui.app import policy

    rules = policy(UISettings(server_preset=str(preset), max_pixels=4096), REGISTRY)
    assert rules.server == {"runtime": {"device": "cpu", "threads": 2, "max_pixels": 4096}}
    preset.write_text('processors = ["face_swapper"]\n[runtime]\ndevice = "cpu"\n')
    with pytest.raises(InvalidInput, match=r"a server preset sets only the server's settings .* not processors"):
        policy(UISettings(server_preset=str(preset)), REGISTRY)


def test_launch_refuses_a_taken_port_before_making_anything(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ServeError, match="is in use"):
            launch(UISettings(port=taken.getsockname()[1]), Studio(work_dir=tmp_path / "work"), block=False)


def test_the_security_page_matches_the_route_table_and_names_real_tests() -> None:
    page = (ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")
    rows = [f"| `{path}` | {door.check} | {door.touches} |" for path, door in access.ROUTES.items()]
    table = page.split("<!-- generated from webui/access.py's ROUTES", 1)[1].split("\n\n", 1)[0]
    assert [line for line in table.splitlines() if line.startswith("| `")] == rows, "regenerate the table"
    named = set(re.findall(r"tests/(test_\w+)\.py::(test_\w+)", page))
    assert len(named) > 20
    for module, test in named:
        source = (ROOT / "tests" / f"{module}.py").read_text(encoding="utf-8")
        assert f"def {test}(" in source, f"{module}.py has no {test}"


def test_the_page_asks_nothing_of_another_site(served: Served) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("needs a chromium binary (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    elsewhere: list[str] = []
    failed: list[tuple[int, str]] = []
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=flags)
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.on(
            "request", lambda r: None if r.url.startswith((served.url, "data:", "blob:")) else elsewhere.append(r.url)
        )
        page.on("response", lambda r: failed.append((r.status, r.url)) if r.status >= 400 else None)
        page.goto(served.url)
        page.wait_for_selector("#run")
        page.get_by_text("Runtime: backend, precision, batch").click()
        page.get_by_role("tab", name="History").click()  # a tab rendered on demand: its request and files too
        page.get_by_text("No finished jobs yet").wait_for()
        browser.close()
    assert elsewhere == [] and failed == []
