"""engine.models.fetch against a local HTTP server (127.0.0.1, random port) and file:// URLs; no internet."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest
from conftest import Item, Server

from engine.core.errors import ChecksumMismatch, ModelUnavailable
from engine.models.fetch import Downloadable, ensure, fetch, sha256_file, verify

PAYLOAD_SIZE = 300_000
CUT_AT = 100_000


@pytest.fixture
def payload() -> bytes:
    return os.urandom(PAYLOAD_SIZE)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_full_http_download(server: Server, payload: bytes, tmp_path: Path) -> None:
    item = server.item("model.onnx", payload)
    calls: list[tuple[int, int | None]] = []
    folder = tmp_path / "models" / "nested"  # created on demand

    path = fetch(item, folder, progress=lambda done, total: calls.append((done, total)))

    assert path == folder / "model.onnx"
    assert path.read_bytes() == payload
    assert not (folder / "model.onnx.part").exists()
    assert server.state.requests == [("model.onnx", None)]
    assert calls[0] == (0, PAYLOAD_SIZE)
    assert calls[-1] == (PAYLOAD_SIZE, PAYLOAD_SIZE)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert verify(item, folder) == "ok"


def test_resume_after_cut(server: Server, payload: bytes, tmp_path: Path) -> None:
    item = server.item("swap.onnx", payload)
    server.state.cut_next_after = CUT_AT

    with pytest.raises(ModelUnavailable) as info:
        fetch(item, tmp_path)
    assert type(info.value) is ModelUnavailable
    message = str(info.value)
    assert "swap.onnx" in message
    assert item.url in message
    assert str(tmp_path) in message
    assert "resume" in message
    assert "\n" not in message
    part = tmp_path / "swap.onnx.part"
    assert part.read_bytes() == payload[:CUT_AT]
    assert not (tmp_path / "swap.onnx").exists()

    calls: list[tuple[int, int | None]] = []
    path = fetch(item, tmp_path, progress=lambda done, total: calls.append((done, total)))

    assert server.state.requests[-1] == ("swap.onnx", f"bytes={CUT_AT}-")
    assert calls[0] == (CUT_AT, PAYLOAD_SIZE)  # progress starts from the bytes already on disk
    assert sha256_file(path) == item.sha256
    assert not part.exists()


def test_server_ignoring_range_restarts_from_zero(server: Server, payload: bytes, tmp_path: Path) -> None:
    item = server.item("gfpgan.pth", payload)
    server.state.ignore_range = True
    # Junk in the .part: appending the full body to it would fail the checksum, so this proves a restart.
    (tmp_path / "gfpgan.pth.part").write_bytes(os.urandom(CUT_AT))

    path = fetch(item, tmp_path)

    assert server.state.requests == [("gfpgan.pth", f"bytes={CUT_AT}-")]
    assert path.read_bytes() == payload
    assert not (tmp_path / "gfpgan.pth.part").exists()


def test_range_not_satisfiable_with_complete_part(server: Server, payload: bytes, tmp_path: Path) -> None:
    item = server.item("det.onnx", payload)
    (tmp_path / "det.onnx.part").write_bytes(payload)

    path = fetch(item, tmp_path)

    assert server.state.requests == [("det.onnx", f"bytes={PAYLOAD_SIZE}-")]  # answered 416, nothing re-sent
    assert path.read_bytes() == payload


def test_range_not_satisfiable_with_bogus_part(server: Server, payload: bytes, tmp_path: Path) -> None:
    item = server.item("det.onnx", payload)
    (tmp_path / "det.onnx.part").write_bytes(os.urandom(PAYLOAD_SIZE))

    path = fetch(item, tmp_path)

    assert server.state.requests == [("det.onnx", f"bytes={PAYLOAD_SIZE}-"), ("det.onnx", None)]
    assert path.read_bytes() == payload


def test_checksum_mismatch_deletes_part(server: Server, payload: bytes, tmp_path: Path) -> None:
    wrong = _sha(b"something else")
    item = server.item("esrgan.pth", payload, sha256=wrong)

    with pytest.raises(ChecksumMismatch) as info:
        fetch(item, tmp_path)

    message = str(info.value)
    assert "esrgan.pth" in message
    assert item.url in message
    assert wrong[:12] in message
    assert _sha(payload)[:12] in message
    assert not (tmp_path / "esrgan.pth.part").exists()
    assert not (tmp_path / "esrgan.pth").exists()


def test_offline_names_every_missing_file(server: Server, payload: bytes, tmp_path: Path) -> None:
    first = server.item("a.pth", payload)
    second = server.item("b.onnx", payload[::-1])
    folder = tmp_path / "models"

    with pytest.raises(ModelUnavailable) as info:
        ensure([first, second], folder, offline=True)

    message = str(info.value)
    assert type(info.value) is ModelUnavailable
    for expected in ("a.pth", "b.onnx", first.url, second.url, str(folder), "offline"):
        assert expected in message
    assert "\n" not in message
    assert server.state.requests == []


def test_present_verified_file_needs_no_request(server: Server, payload: bytes, tmp_path: Path) -> None:
    item = server.item("ready.onnx", payload)
    (tmp_path / "ready.onnx").write_bytes(payload)

    assert fetch(item, tmp_path) == tmp_path / "ready.onnx"
    assert ensure([item], tmp_path, offline=False) == [tmp_path / "ready.onnx"]
    assert ensure([item], tmp_path, offline=True) == [tmp_path / "ready.onnx"]
    assert server.state.requests == []


def test_ensure_downloads_missing_and_reports_failures(server: Server, payload: bytes, tmp_path: Path) -> None:
    present = server.item("present.onnx", payload)
    (tmp_path / "present.onnx").write_bytes(payload)
    fetched = server.item("fetched.onnx", payload[::-1])
    absent = Item("absent.onnx", f"{server.base_url}/absent.onnx", _sha(b"x"), 1)  # the server answers 404
    progress_for: list[str] = []

    def factory(item: Downloadable) -> None:
        progress_for.append(item.filename)

    with pytest.raises(ModelUnavailable) as info:
        ensure([present, fetched, absent], tmp_path, offline=False, progress_factory=factory)

    message = str(info.value)
    assert type(info.value) is ModelUnavailable
    assert "absent.onnx" in message
    assert absent.url in message
    assert str(tmp_path) in message
    assert "fetched.onnx" not in message
    assert "present.onnx" not in message
    assert (tmp_path / "fetched.onnx").read_bytes() == payload[::-1]
    assert progress_for == ["fetched.onnx", "absent.onnx"]

    server.state.files["absent.onnx"] = b"x"
    assert ensure([present, fetched, absent], tmp_path, offline=False) == [
        tmp_path / "present.onnx",
        tmp_path / "fetched.onnx",
        tmp_path / "absent.onnx",
    ]


def test_unreachable_server_is_model_unavailable(payload: bytes, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on once this socket closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    item = Item("m.onnx", f"http://127.0.0.1:{port}/m.onnx", _sha(payload), len(payload))

    with pytest.raises(ModelUnavailable) as info:
        fetch(item, tmp_path, timeout=5)

    assert type(info.value) is ModelUnavailable
    assert "m.onnx" in str(info.value)
    assert item.url in str(info.value)


def test_file_url_full(payload: bytes, tmp_path: Path) -> None:
    source = tmp_path / "mirror" / "model.safetensors"
    source.parent.mkdir()
    source.write_bytes(payload)
    item = Item(source.name, source.as_uri(), _sha(payload), None)  # size unknown: taken from the file
    calls: list[tuple[int, int | None]] = []

    path = fetch(item, tmp_path / "models", progress=lambda done, total: calls.append((done, total)))

    assert path.read_bytes() == payload
    assert calls[-1] == (PAYLOAD_SIZE, PAYLOAD_SIZE)


def test_file_url_resume(payload: bytes, tmp_path: Path) -> None:
    source = tmp_path / "mirror" / "model.onnx"
    source.parent.mkdir()
    source.write_bytes(payload)
    item = Item(source.name, source.as_uri(), _sha(payload), len(payload))
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "model.onnx.part").write_bytes(payload[:CUT_AT])
    calls: list[tuple[int, int | None]] = []

    path = fetch(item, folder, progress=lambda done, total: calls.append((done, total)))

    assert calls[0] == (CUT_AT, PAYLOAD_SIZE)  # only the rest was read
    assert path.read_bytes() == payload
    assert not (folder / "model.onnx.part").exists()


def test_file_url_missing_source(payload: bytes, tmp_path: Path) -> None:
    item = Item("gone.onnx", (tmp_path / "nowhere" / "gone.onnx").as_uri(), _sha(payload), len(payload))

    with pytest.raises(ModelUnavailable) as info:
        fetch(item, tmp_path / "models")

    assert type(info.value) is ModelUnavailable
    assert item.url in str(info.value)


@pytest.mark.parametrize("placed", [b"wrong bytes", os.urandom(PAYLOAD_SIZE)], ids=["wrong-size", "same-size"])
def test_placed_file_with_wrong_sha_is_left_alone(
    server: Server, payload: bytes, tmp_path: Path, placed: bytes
) -> None:
    item = server.item("placed.onnx", payload)
    target = tmp_path / "placed.onnx"
    target.write_bytes(placed)

    with pytest.raises(ChecksumMismatch) as info:
        fetch(item, tmp_path)
    message = str(info.value)
    assert str(target) in message
    assert "delete it" in message
    assert "replace it" in message
    assert item.url in message

    for offline in (True, False):
        with pytest.raises(ChecksumMismatch):
            ensure([item], tmp_path, offline=offline)
    assert verify(item, tmp_path) == "mismatch"
    assert target.read_bytes() == placed
    assert not (tmp_path / "placed.onnx.part").exists()
    assert server.state.requests == []


def test_verify_states(payload: bytes, tmp_path: Path) -> None:
    item = Item("v.onnx", "https://example.invalid/v.onnx", _sha(payload), len(payload))
    assert verify(item, tmp_path) == "missing"
    (tmp_path / "v.onnx").write_bytes(payload)
    assert verify(item, tmp_path) == "ok"
    (tmp_path / "v.onnx").write_bytes(payload[:-1] + bytes([payload[-1] ^ 1]))
    assert verify(item, tmp_path) == "mismatch"


# -- files no public record gives a sha256 for ------------------------------------------------------------------
def test_an_unpinned_file_is_fetched_only_when_trusted(server: Server, payload: bytes, tmp_path: Path) -> None:
    item = Item("ghost.onnx", f"{server.base_url}/ghost.onnx", None, None)  # type: ignore[arg-type]
    server.state.files["ghost.onnx"] = payload
    # Asked for as part of a job (ensure) or fetched plainly: refused before any byte is requested.
    for call in (lambda: ensure([item], tmp_path, offline=False), lambda: fetch(item, tmp_path)):
        with pytest.raises(ModelUnavailable) as info:
            call()
        message = str(info.value)
        assert "no published sha256" in message and "--trust-first" in message and item.url in message
        assert str(tmp_path) in message and "\n" not in message
    assert server.state.requests == []
    # Trusted: downloaded as it comes (resuming a cut like any download), the caller hashes what arrived.
    server.state.cut_next_after = CUT_AT
    with pytest.raises(ModelUnavailable):
        fetch(item, tmp_path, trust_first=True)
    path = fetch(item, tmp_path, trust_first=True)
    assert path.read_bytes() == payload and server.state.requests[-1] == ("ghost.onnx", f"bytes={CUT_AT}-")
    # A copy already there is taken as it is (nothing is requested), and never counts as verified by itself.
    before = len(server.state.requests)
    assert fetch(item, tmp_path, trust_first=True) == path and len(server.state.requests) == before
    assert verify(item, tmp_path) == "missing"


def test_a_mismatch_against_a_single_record_says_so(server: Server, payload: bytes, tmp_path: Path) -> None:
    from engine.models.manifest import FileSpec

    wrong = "0" * 64
    server.state.files["one.onnx"] = payload
    single = FileSpec(format="onnx", filename="one.onnx", url=f"{server.base_url}/one.onnx", sha256=wrong, records=1)
    with pytest.raises(ChecksumMismatch, match="only one public record backed this sha256"):
        fetch(single, tmp_path)
    several = single.model_copy(update={"records": None})
    with pytest.raises(ChecksumMismatch) as info:
        fetch(several, tmp_path)
    assert "record" not in str(info.value)
    # A placed file that does not match is refused with the same note, and left where it is.
    (tmp_path / "one.onnx").write_bytes(payload)
    with pytest.raises(ChecksumMismatch, match="only one public record"):
        ensure([single], tmp_path, offline=True)
    assert (tmp_path / "one.onnx").exists()
