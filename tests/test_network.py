"""The app makes no network call unasked: starting the studio and running an offline job connect to (and look up)
nothing but this machine.

Each runs as a user runs it, `python launch.py …` in a child process, under a socket guard: an audit hook
(`sys.addaudithook`, installed before launch.py runs) that records every `socket.getaddrinfo`,
`socket.gethostbyname`, `socket.connect` and `socket.sendto` whose host is not a loopback address. A look-up is
enough to fail: on a machine without a network it is what costs the time-out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from engine.media import demo

ROOT = Path(__file__).resolve().parent.parent

GUARD = """
import ipaddress, os, runpy, sys

log = open(os.environ["SOCKET_GUARD_LOG"], "a", buffering=1)

def loopback(host):
    if host is None:
        return True
    host = host.decode() if isinstance(host, bytes) else str(host)
    if host.lower() in ("localhost", "localhost.localdomain", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False

def hook(event, args):
    if event in ("socket.getaddrinfo", "socket.gethostbyname"):
        host = args[0]
    elif event in ("socket.connect", "socket.sendto"):
        address = args[1] if event == "socket.connect" else args[2]
        if not isinstance(address, tuple):  # a Unix socket's path: not the network
            return
        host = address[0]
    else:
        return
    if not loopback(host):
        log.write(f"{event} {host!r}\\n")

sys.addaudithook(hook)
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _guarded(tmp_path: Path, *args: str) -> tuple[list[str], Path]:
    """The command line of `launch.py ARGS` under the socket guard, and the file it records to."""
    guard = tmp_path / "socket_guard.py"
    guard.write_text(GUARD, encoding="utf-8")
    log = tmp_path / "network.log"
    log.touch()
    return [sys.executable, str(guard), str(ROOT / "launch.py"), *args], log


def _env(log: Path) -> dict[str, str]:
    # Gradio's own analytics flag is left unset: the studio switches them off itself (webui/app.py, webui/page.py).
    env = {k: v for k, v in os.environ.items() if k not in ("GRADIO_ANALYTICS_ENABLED", "HF_HUB_OFFLINE")}
    return {**env, "SOCKET_GUARD_LOG": str(log)}


def test_the_guard_sees_a_connection_to_another_host(tmp_path: Path) -> None:
    """The guard itself: a look-up of a name outside this machine is recorded (whether or not it resolves)."""
    script = tmp_path / "reach_out.py"
    script.write_text("import socket\ntry:\n    socket.getaddrinfo('example.invalid', 80)\nexcept OSError:\n    pass\n")
    command, log = _guarded(tmp_path, "ignored")
    command[2] = str(script)
    subprocess.run(command, env=_env(log), timeout=60, check=True)
    assert log.read_text().splitlines() == ["socket.getaddrinfo 'example.invalid'"]


@pytest.mark.slow
def test_an_offline_job_opens_no_network_connection(tmp_path: Path) -> None:
    source, target, out = tmp_path / "hopper.png", tmp_path / "astronaut.png", tmp_path / "out.png"
    Image.open(demo.source_photo()).convert("RGB").save(source)
    Image.fromarray(demo.photo()).resize((256, 256)).save(target)
    command, log = _guarded(
        tmp_path, "run", "--source", str(source), "--target", str(target), "--output", str(out), "--offline", "--yes"
    )
    result = subprocess.run(command, env=_env(log), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert out.is_file() and log.read_text() == ""


@pytest.mark.slow
def test_starting_the_studio_opens_no_network_connection(tmp_path: Path) -> None:
    from tests.test_webui import free_port

    port = free_port()
    command, log = _guarded(tmp_path, "ui", "--port", str(port))
    server = subprocess.Popen(command, env=_env(log), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        page = b""
        deadline = time.monotonic() + 300
        while not page and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    page = response.read()
            except OSError:
                time.sleep(0.5)
        assert page, server.stderr.read() if server.poll() is not None else "no answer in 300 s"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=30) as response:
            assert response.status == 200
    finally:
        server.terminate()
        server.wait(timeout=60)
        assert server.stderr is not None
        server.stderr.close()
    assert log.read_text() == ""
