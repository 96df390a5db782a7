"""The journal server and the run page as an attacker meets them: a real server process on loopback, raw sockets.

Every junk request gets a 4xx in bounded time, never a 500, never a hang, and never an ERROR
traceback in the server's log.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from journal_load import ServerProcess

from relay_runtime.integrations.run_journal import FileStore, RunJournalWriter
from relay_runtime.integrations.run_journal import page as page_module
from relay_runtime.integrations.run_journal.limits import FailedLogins
from relay_runtime.integrations.run_journal.routes import create_app

TOKEN = "attack-test-token"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()


def runs(session_dir: Path) -> None:
    done = RunJournalWriter("s1", "r1", session_dir=session_dir)
    done.append_sse_event("token", {"text": "hi"})
    done.append_sse_event("done", {})
    RunJournalWriter("s1", "live", session_dir=session_dir).append_sse_event("token", {"text": "x"})


def exchange(url: str, data: bytes, *, timeout: float = 10.0, source: str = "127.0.0.1",
             pause_after: int | None = None) -> tuple[int, bytes, float]:
    """Send ``data`` (in two parts with a pause if ``pause_after``), read to the close: (status, reply, seconds)."""
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=timeout, source_address=(source, 0)) as sock:
        if pause_after is None:
            sock.sendall(data)
        else:
            sock.sendall(data[:pause_after])
            time.sleep(0.3)
            sock.sendall(data[pause_after:])
        reply = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                pytest.fail(f"no answer within {timeout}s: {reply[:200]!r}")
            if not chunk:
                break
            reply += chunk
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0
    return status, reply, time.monotonic() - started


def request(method: bytes, path: bytes, headers: bytes = b"", body: bytes = b"") -> bytes:
    length = b"Content-Length: %d\r\n" % len(body) if body else b""
    head = b"%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" % (method, path)
    return head + b"%s%s\r\n%s" % (headers, length, body)


JUNK = {
    "oversized header": request(b"GET", b"/runs/r1", AUTH + b"X-A: " + b"a" * 100_000 + b"\r\n"),
    "too many headers": request(b"GET", b"/runs/r1", AUTH + b"".join(b"X-%d: a\r\n" % i for i in range(500))),
    "oversized query": request(b"GET", b"/runs/r1?session_id=" + b"a" * 100_000, AUTH),
    "static dot-dot": request(b"GET", b"/ui/static/../../page.py"),
    "static encoded dot-dot": request(b"GET", b"/ui/static/%2e%2e%2f%2e%2e%2fpage.py"),
    "static NUL": request(b"GET", b"/ui/static/app.js%00"),
    "static raw NUL": request(b"GET", b"/ui/static/app.js\x00"),
    "static raw unicode": request(b"GET", "/ui/static/äpp.js".encode()),
    "page dot-dot ids": request(b"GET", b"/ui/sessions/%2e%2e/runs/%2e%2e"),
    "page NUL id": request(b"GET", b"/ui/sessions/s1/runs/r%001"),
    "public prefix to a data route": request(b"GET", b"/ui/%2e%2e/runs/r1"),
    "id NUL": request(b"GET", b"/runs/r%001", AUTH),
    "id raw unicode": request(b"GET", "/runs/ré1".encode(), AUTH),
    "id undecodable": request(b"GET", b"/runs/%ff%fe", AUTH),
    "session id undecodable": request(b"GET", b"/runs/r1?session_id=%ff", AUTH),
    "id too long": request(b"GET", b"/runs/" + b"a" * 5000, AUTH),
    "login over the size limit": request(b"POST", b"/ui/login", b"Content-Type: application/json\r\n",
                                         b"{" + b" " * 100_000 + b"}"),
    "login chunked over the limit": b"POST /ui/login HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n" + (b"1000\r\n" + b" " * 4096 + b"\r\n") * 5 + b"0\r\n\r\n",
    "login as XML": request(b"POST", b"/ui/login", b"Content-Type: application/xml\r\n", b"<token>x</token>"),
    "login as a form": request(b"POST", b"/ui/login", b"Content-Type: application/x-www-form-urlencoded\r\n",
                               b"token=" + TOKEN.encode()),
    "login undecodable": request(b"POST", b"/ui/login", b"", b'{"token": "\xff"}'),
    "login lone surrogate": request(b"POST", b"/ui/login", b"", b'{"token": "\\ud800"}'),
    "login nested deep": request(b"POST", b"/ui/login", b"", b"[" * 2000 + b"]" * 2000),
    "login without body": request(b"POST", b"/ui/login"),
    "login by GET": request(b"GET", b"/ui/login"),
    "cookie garbage": request(b"GET", b"/runs/r1", b'Cookie: relay_journal_auth="\\x00\\"; a=\xff; ;;=;\r\n'),
    "cookie huge": request(b"GET", b"/runs/r1", b"Cookie: relay_journal_auth=" + b"a" * 8000 + b"\r\n"),
    "cookie twice": request(b"GET", b"/runs/r1", b"Cookie: relay_journal_auth=x; relay_journal_auth=y\r\n"),
    "HEAD snapshot": request(b"HEAD", b"/runs/r1", AUTH),
    "HEAD stream of a live run": request(b"HEAD", b"/runs/live/events", AUTH),
    "OPTIONS": request(b"OPTIONS", b"/runs/r1", AUTH),
    "DELETE": request(b"DELETE", b"/runs/r1", AUTH),
    "unknown method": request(b"FOO", b"/runs/r1", AUTH),
    "HTTP/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "TLS hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(200)),
    "Content-Length and chunked": b"POST /ui/login HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
}


def test_every_junk_request_is_a_4xx_in_bounded_time_and_no_error_in_the_log(tmp_path):
    runs(tmp_path)
    log = tmp_path / "server.log"
    got = {}
    with ServerProcess(tmp_path, extra=("--token", TOKEN), log=log) as srv:
        for name, data in JUNK.items():
            status, _, seconds = exchange(srv.url, data)
            got[name] = (status, seconds < 5)
        # and the server still serves
        status, reply, _ = exchange(srv.url, request(b"GET", b"/runs/r1", AUTH))
        assert status == 200 and b'"terminal_state":"completed"' in reply
    bad = {name: answer for name, answer in got.items() if not (400 <= answer[0] < 500 and answer[1])}
    assert bad == {}, bad
    text = log.read_text()
    assert "Traceback" not in text and "Error handling request" not in text, text[-3000:]


def test_a_login_body_that_arrives_in_pieces_is_read_whole(tmp_path):
    runs(tmp_path)
    body = json.dumps({"token": TOKEN}).encode()
    data = request(b"POST", b"/ui/login", b"Content-Type: application/json\r\n", body)
    with ServerProcess(tmp_path, extra=("--token", TOKEN)) as srv:
        status, reply, _ = exchange(srv.url, data, pause_after=len(data) - len(body) + 3)
    assert status == 204 and b"relay_journal_auth=" in reply


def test_wrong_tokens_are_answered_late_then_refused_per_address(tmp_path):
    runs(tmp_path)
    wrong = request(b"POST", b"/ui/login", b"", b'{"token": "guess"}')
    right = request(b"POST", b"/ui/login", b"", json.dumps({"token": TOKEN}).encode())
    with ServerProcess(tmp_path, extra=("--token", TOKEN)) as srv:
        for _ in range(10):
            status, _, seconds = exchange(srv.url, wrong)
            assert status == 401 and seconds >= 0.2  # no quick answers to guess against
        # The eleventh try is refused, even with the right token, and so are Bearer guesses.
        status, reply, seconds = exchange(srv.url, right)
        assert status == 429 and b"Retry-After:" in reply and seconds < 0.2
        status, _, _ = exchange(srv.url, request(b"GET", b"/runs/r1", AUTH.replace(b"attack", b"guess")))
        assert status == 429
        # Another address is not held back by the guesser's failures.
        status, _, _ = exchange(srv.url, right, source="127.0.0.2")
        assert status == 204
        status, _, _ = exchange(srv.url, request(b"GET", b"/runs/r1", AUTH), source="127.0.0.2")
        assert status == 200


def test_the_failed_login_table_is_bounded(monkeypatch):
    from relay_runtime.integrations.run_journal import limits

    monkeypatch.setattr(limits, "_MAX_ADDRESSES", 50)
    failures = FailedLogins(limit=2, window=60.0)
    for i in range(1000):
        failures.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(failures._table) == 50
    failures.failed("10.0.3.231")  # the newest address is kept and counted
    assert failures.retry_after("10.0.3.231") > 0 and failures.retry_after("10.0.0.0") == 0


@pytest.mark.asyncio
async def test_one_client_holds_a_bounded_number_of_streams(tmp_path):
    runs(tmp_path)
    app = create_app(session_dir=tmp_path, max_streams_per_client=4, heartbeat=0.2)
    async with TestServer(app, host="127.0.0.1") as srv:
        url = str(srv.make_url("/runs/live/events"))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
            held = [await client.get(url) for _ in range(4)]
            assert [r.status for r in held] == [200] * 4
            async with client.get(url) as refused:
                assert refused.status == 429 and "Retry-After" in refused.headers
            connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
            async with aiohttp.ClientSession(connector=connector) as other, other.get(url) as served:
                assert served.status == 200  # another address has its own allowance
            held.pop().close()
            await asyncio.sleep(0.3)  # the server notices the closed stream at its next keepalive
            async with client.get(url) as again:
                assert again.status == 200
            for resp in held:
                resp.close()
        async with aiohttp.ClientSession() as client, client.get(str(srv.make_url("/stats"))) as resp:
            assert (await resp.json())["sse_refused_per_client"] == 1


class CountingStore(FileStore):
    listed = 0

    def list_runs(self, session_id: str) -> list[dict]:
        self.listed += 1
        return super().list_runs(session_id)


def test_the_run_list_of_thousands_of_sessions_does_bounded_work(tmp_path):
    for i in range(1500):
        RunJournalWriter(f"s{i:04d}", "r", session_dir=tmp_path).append_sse_event("done", {})
    store = CountingStore(tmp_path)
    listed = page_module.list_runs(store)
    assert len(listed) == page_module.MAX_LISTED_RUNS
    assert store.listed <= page_module.MAX_LISTED_RUNS  # not one listing per session
    assert listed[0]["session_id"] == "s1499" and listed[-1]["session_id"] == "s1300"
    assert len(json.dumps({"runs": listed})) < 100_000


@pytest.mark.asyncio
async def test_clients_that_stop_reading_snapshots_do_not_hold_up_everyone_else(tmp_path):
    writer = RunJournalWriter("s1", "big", session_dir=tmp_path)
    for _ in range(2000):
        writer.append_sse_event("token", {"text": "x" * 10_000})  # a 20 MB answer: more than the socket buffers
    writer.append_sse_event("done", {})
    app = create_app(session_dir=tmp_path, write_timeout=6.0)
    async with TestServer(app, host="127.0.0.1") as srv:
        url = srv.make_url("")
        stalled = []
        for _ in range(4):  # as many as one address is sent at once; they never read
            sock = socket.create_connection((url.host, url.port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /runs/big HTTP/1.1\r\nHost: localhost\r\n\r\n")
            stalled.append(sock)
        try:
            await asyncio.sleep(1.0)
            connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as other:
                # Another client is answered now, not after the stalled ones time out.
                started = time.monotonic()
                async with other.get(str(url.with_path("/runs/big"))) as resp:
                    assert resp.status == 200 and len(await resp.read()) > 20_000_000
                assert time.monotonic() - started < 4  # before: after the stalled ones were dropped (6 s)
            # The stalled clients' own address waits its turn, and is served once they are dropped.
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client,
                client.get(str(url.with_path("/runs/big"))) as resp,
            ):
                assert resp.status == 200 and len(await resp.read()) > 20_000_000
        finally:
            for sock in stalled:
                sock.close()


def test_only_the_clients_junk_is_quiet_a_server_fault_is_still_an_error(caplog):
    import logging

    from aiohttp.http_exceptions import LineTooLong

    from relay_runtime.integrations.run_journal.limits import QuietClientErrors

    logger = QuietClientErrors(logging.getLogger("test.quiet"), {})
    caplog.set_level(logging.DEBUG, logger="test.quiet")
    logger.exception("Error handling request from %s", "127.0.0.1", exc_info=LineTooLong("x" * 9000, "8190"))
    try:
        raise RuntimeError("a bug of ours")
    except RuntimeError as exc:
        logger.exception("Error handling request from %s", "127.0.0.1", exc_info=exc)
    levels = [(r.levelno, r.exc_info is not None) for r in caplog.records]
    assert levels == [(logging.INFO, False), (logging.ERROR, True)]
    assert "400" in caplog.records[0].getMessage()
