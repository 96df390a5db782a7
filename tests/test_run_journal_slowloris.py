"""Slow clients cannot starve the journal server: a request head must arrive within the header timeout,
and one address holds a bounded number of connections.

The main test runs ``relay-runtime journal serve`` in its own process with a low file-descriptor limit
(``RLIMIT_NOFILE`` 256), opens 400 slowloris connections from 127.0.0.2 that trickle their headers, and
has a normal client on 127.0.0.1 served all along.
"""

from __future__ import annotations

import asyncio
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from process_support import LineReader
from test_run_journal_http import TIMEOUT

from relay_runtime.integrations.run_journal import RunJournalWriter
from relay_runtime.integrations.run_journal.routes import create_app
from relay_runtime.integrations.run_journal.serving import ConnectionsPerClient

SLOW_CLIENTS = 400
CAP = 32
HEADER_TIMEOUT = 2.0
FILE_LIMIT = 256


def _low_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


@pytest.fixture
def journal_server(tmp_path: Path) -> Iterator[int]:
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "hello"})
    writer.append_sse_event("done", {})
    command = [str(Path(sys.executable).parent / "relay-runtime"), "journal", "serve", "--port", "0"]
    command += ["--session-dir", str(tmp_path), "--header-timeout", str(HEADER_TIMEOUT)]
    command += ["--max-connections-per-client", str(CAP)]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_low_file_limit
    )
    try:
        line = LineReader(proc.stdout).next(timeout=30)  # type: ignore[arg-type]
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, line
        yield int(found.group(1))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _slow_connection(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
    sock.sendall(b"GET /api/runs HTTP/1.1\r\nHost: localhost\r\n")  # and never the blank line
    sock.setblocking(False)
    return sock


def _closed_by_server(sock: socket.socket) -> bytes | None:
    """What the server said before closing ``sock`` (b"" if nothing), or None while it is still open."""
    data = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except BlockingIOError:
            return None
        except OSError:
            return data
        if not chunk:
            return data
        data += chunk


def _normal_request(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5) as answer:
        assert b"run-a" in answer.read()
        return int(answer.status)


def test_hundreds_of_slowloris_sockets_do_not_starve_a_normal_client(journal_server: int) -> None:
    port = journal_server
    slow = [_slow_connection(port) for _ in range(SLOW_CLIENTS)]
    stop = threading.Event()

    def trickle() -> None:  # a header line now and then, as slowloris does, so no idle timer fires
        while not stop.wait(0.3):
            for sock in slow:
                try:
                    sock.send(b"X-Slow: 1\r\n")
                except OSError:
                    pass

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        # A normal client is served at once, again and again, while the slow ones hold on.
        for _ in range(5):
            assert _normal_request(port) == 200
            time.sleep(0.1)
        # Past the cap, the address's connections were answered 503 and closed at once.
        time.sleep(0.5)
        ends = [_closed_by_server(sock) for sock in slow]
        refused = [end for end in ends if end is not None]
        assert len(refused) >= SLOW_CLIENTS - CAP, f"{len(refused)} of {SLOW_CLIENTS} turned away"
        # Each was told 503 first; a client that kept writing to the closed socket may see a reset
        # instead (its kernel drops what it had not read), so not every one shows the answer.
        assert sum(end.startswith(b"HTTP/1.1 503") for end in refused) >= (SLOW_CLIENTS - CAP) // 2
        answer = next(end for end in refused if end.startswith(b"HTTP/1.1 503"))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert f"Content-Length: {len(body)}".encode() in head and b"too many connections" in body
        # The admitted ones never finish their head: each is closed after the header timeout.
        deadline = time.monotonic() + HEADER_TIMEOUT + 8
        open_ones = [sock for sock, end in zip(slow, ends, strict=True) if end is None]
        while open_ones and time.monotonic() < deadline:
            select.select(open_ones, [], [], 0.2)
            open_ones = [sock for sock in open_ones if _closed_by_server(sock) is None]
            assert _normal_request(port) == 200
        assert not open_ones, f"{len(open_ones)} slow connections were still open after the header timeout"
        # Its address's slots are free again: a new connection from it is served.
        with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0)) as sock:
            sock.sendall(b"GET /api/runs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        stop.set()
        trickler.join(5)
        for sock in slow:
            sock.close()


@pytest.mark.asyncio
async def test_the_header_timeout_never_cuts_a_stream_or_a_request_in_progress(tmp_path: Path) -> None:
    RunJournalWriter("session-a", "run-live", session_dir=tmp_path).append_sse_event("token", {"text": "a"})
    app = create_app(session_dir=tmp_path, poll_interval=0.01, heartbeat=0.2, header_timeout=0.5)
    async with TestServer(app, host="127.0.0.1") as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(b"GET /runs/run-live HTTP/1.1\r\nHost: localhost\r\n")
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, with nothing said
        assert time.monotonic() - started < 5
        writer.close()
        # An SSE stream on a live run lasts well past the header timeout: keepalives keep coming.
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as client,
            client.get(srv.make_url("/runs/run-live/events")) as resp,
        ):
            assert resp.status == 200
            started = time.monotonic()
            received = b""
            while time.monotonic() - started < 2.0:
                received += await asyncio.wait_for(resp.content.readany(), 5)
            assert received.count(b": keepalive") >= 3 and b"run-live:1" in received
    with pytest.raises(ValueError, match="header_timeout must be a positive number"):
        create_app(session_dir=tmp_path, header_timeout=0)


def test_the_connection_table_counts_per_address() -> None:
    table = ConnectionsPerClient(2)
    assert table.take("a") and table.take("a") and not table.take("a") and table.take("b")
    assert table.refused == 1
    table.release("a")
    assert table.take("a") and table.held("a") == 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_connections_per_client must be a positive integer"):
            ConnectionsPerClient(bad)  # type: ignore[arg-type]
