"""`relay-runtime voice serve`: starts on loopback with the stub provider and prints a device token."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from process_support import LineReader

from relay_runtime.integrations.voice_relay.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_refuses_non_loopback_and_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "not a loopback address" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"]) == 2
    assert "invalid port" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])


@pytest.mark.asyncio
async def test_serve_prints_token_that_opens_a_session(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "relay_runtime.integrations.voice_relay.cli", "serve"),
            *("--port", "0", "--run-dir", str(tmp_path)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        output = LineReader(proc.stdout)
        lines = [output.next() for _ in range(3)]
        url = lines[0].strip().rsplit(" ", 1)[-1]
        token = lines[2].strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:") and "provider: stub" in lines[1]
        async with aiohttp.ClientSession(url) as http:
            async with http.post("/voice/realtime-agent/session", json={}) as resp:
                assert resp.status == 401
            headers = {"Authorization": f"Bearer {token}"}
            async with http.post("/voice/realtime-agent/session", json={}, headers=headers) as resp:
                assert resp.status == 200
                body = await resp.json()
            assert body["provider"] == "stub"
            async with http.ws_connect(body["websocket_path"], headers=headers) as ws:
                ready = await ws.receive_json(timeout=5)
                assert ready["type"] == "voice.session.ready"
                await ws.send_json({"type": "response.create", "text": "hello"})
                for _ in range(100):
                    event = await ws.receive_json(timeout=5)
                    if event["type"] == "voice.turn.metrics":
                        break
                assert event["type"] == "voice.turn.metrics" and event["perceived_latency_ms"] > 0
            # The server prints each turn's latency too.
            turn_line = output.next()
            assert "turn 1 (text)" in turn_line and "perceived_latency_ms=" in turn_line
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.stderr is not None:
                proc.stderr.close()


def test_example_client_round_trip_and_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import voice_client
    finally:
        sys.path.remove(str(ROOT / "examples"))
    assert voice_client.main(["--task", "count the words here"]) == 0
    out = capsys.readouterr().out
    assert '"type": "voice.tool_call"' in out and "count the words here" in out
    # The latency of the turn, printed without any tracing backend.
    (line,) = [line for line in out.splitlines() if line.startswith("turn 1 (text): ")]
    assert "perceived_latency=" in line and "time_to_first_audio=" in line and "hop_latency=" in line
    with pytest.raises(SystemExit):
        voice_client.main(["--url", "http://127.0.0.1:9"])
    assert "--url and --token go together" in capsys.readouterr().err


SLOW_CLIENTS = 400
FILE_LIMIT = 256


def _low_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


def test_hundreds_of_idle_sockets_from_one_address_do_not_starve_a_phone(tmp_path: Path) -> None:
    # More connections than the process has file descriptors, all from 127.0.0.2, none sending a whole head.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "relay_runtime.integrations.voice_relay.cli", "serve", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--run-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
        preexec_fn=_low_file_limit,
    )
    slow: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        output = LineReader(proc.stdout)
        url = output.next().strip().rsplit(" ", 1)[-1]
        port = int(url.rsplit(":", 1)[1])
        for _ in range(SLOW_CLIENTS):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2, source_address=("127.0.0.2", 0))
            except TimeoutError:
                break  # the server no longer accepts anyone: the phone below will not be served either
            slow.append(sock)
            with contextlib.suppress(OSError):  # one turned away may be closed already
                sock.sendall(b"GET /voice/realtime-agent/config HTTP/1.1\r\nHost: relay\r\n")  # never the blank line
        # The phone, from its own address, is answered at once (401: it sent no token), again and again.
        for _ in range(5):
            request = urllib.request.Request(f"{url}/voice/realtime-agent/config")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            assert refused.value.code == 401
    finally:
        for sock in slow:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
