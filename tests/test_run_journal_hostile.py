"""Reconnects as browsers make them, and hostile input: never a 400 that stops EventSource, never a 500."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from test_run_journal_http import TIMEOUT, LiveRun, read_sse, rows_only
from test_run_journal_http import server as server  # the same fixture: a real server on loopback

from relay_runtime.integrations.run_journal import RunJournalWriter, append_run_event
from relay_runtime.integrations.run_journal.routes import STATS, create_app


def finished_run(tmp_path: Path, tokens: int = 4) -> list[str]:
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    for i in range(tokens):
        writer.append_sse_event("token", {"text": str(i)})
    writer.append_sse_event("done", {})
    return [f"run-a:{seq}" for seq in range(1, tokens + 2)]


async def ids_of(client: aiohttp.ClientSession, params: dict[str, str], headers: dict[str, str]) -> list[str]:
    resp = await client.get("/runs/run-a/events", params=params, headers=headers)
    assert resp.status == 200, await resp.text()
    return [m["id"] for m in rows_only(await read_sse(resp))]


EVERYTHING = None  # the whole run is replayed


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "params,headers,after",
    [
        ({}, {"Last-Event-ID": "run-a:3"}, 3),
        ({}, {"Last-Event-ID": " run-a:3 "}, 3),
        ({"after_seq": "2"}, {}, 2),
        # ?after_seq= wins over Last-Event-ID whenever it is given, even when it does not parse.
        ({"after_seq": "1"}, {"Last-Event-ID": "run-a:4"}, 1),
        ({"after_seq": "junk"}, {"Last-Event-ID": "run-a:4"}, EVERYTHING),
        ({"after_seq": ""}, {"Last-Event-ID": "run-a:4"}, 4),
        # Cursors that do not parse replay from the start.
        ({}, {"Last-Event-ID": "garbage"}, EVERYTHING),
        ({}, {"Last-Event-ID": "run-b:3"}, EVERYTHING),  # another run's id
        ({}, {"Last-Event-ID": "3"}, EVERYTHING),  # no run id
        ({}, {"Last-Event-ID": "run-a:²"}, EVERYTHING),  # isdigit() says yes, int() says no
        ({"after_seq": "²"}, {}, EVERYTHING),
        ({"after_seq": "9" * 5000}, {}, EVERYTHING),  # more digits than int() will parse
        ({}, {"Last-Event-ID": "run-a:" + "1" * 5000}, EVERYTHING),
        ({"after_seq": "-1"}, {}, EVERYTHING),
        ({"after_seq": "1.5"}, {}, EVERYTHING),
        ({"after_seq": "0x3"}, {}, EVERYTHING),
        ({"after_seq": "٣"}, {}, EVERYTHING),  # an Arabic-Indic three
        # Past the run's last row: the whole run.
        ({"after_seq": "99"}, {}, EVERYTHING),
        ({}, {"Last-Event-ID": "run-a:6"}, EVERYTHING),
        # At the last row: nothing is left, the stream ends.
        ({}, {"Last-Event-ID": "run-a:5"}, 5),
    ],
)
async def test_cursors_as_eventsource_sends_them(server, tmp_path, params, headers, after):
    ids = finished_run(tmp_path)
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        got = await ids_of(client, params, headers)
    assert got == ids[after or 0 :]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "headers",
    [{"Last-Event-ID": "run-a:999"}, {"Last-Event-ID": "nonsense"}, {"Last-Event-ID": "run-a:1"}, {}],
)
async def test_a_stream_on_a_live_run_ends_at_its_terminal_row_whatever_the_cursor(server, tmp_path, headers):
    with LiveRun(tmp_path, count=10) as run:
        async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
            resp = await client.get("/runs/run-a/events", headers=headers)
            assert resp.status == 200
            run.release.set()
            got = rows_only(await read_sse(resp))  # read_sse fails if the stream does not end
    assert got[-1]["event"] == "done" and got[-1]["id"] == "run-a:12"
    first = 2 if headers.get("Last-Event-ID") == "run-a:1" else 1
    assert [m["id"] for m in got] == [f"run-a:{seq}" for seq in range(first, 13)]


def raw_request(url: str, head: bytes, timeout: float = 10.0) -> bytes:
    """Send request bytes as given (headers a client library would refuse to send) and read the reply."""
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "authorization",
    [b"Bearer \xff\xfe\xfd", "Bearer héllo-secret".encode(), b"Bearer \xed\xa0\x80", "Bèarer x".encode(), b"\x80"],
)
@pytest.mark.parametrize("path", [b"/runs/run-a", b"/runs/run-a/events", b"/stats"])
async def test_undecodable_authorization_is_a_401(tmp_path, authorization, path):
    finished_run(tmp_path)
    app = create_app(session_dir=tmp_path, bearer_token="journal-secret")
    async with TestServer(app, host="127.0.0.1") as srv:
        head = b"GET %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: %s\r\nConnection: close\r\n\r\n" % (
            path,
            authorization,
        )
        reply = await asyncio.to_thread(raw_request, str(srv.make_url("")), head)
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    assert b'{"error": "unauthorized"}' in reply


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "target",
    [
        b"/runs/r%C3%A9n/events",
        b"/runs/%FF%FE",
        b"/runs/run-a/events?session_id=%FF",
        b"/runs/run-a?session_id=s%C3%A9",
        b"/runs/" + b"a" * 201,
        b"/runs/run-a/events?session_id=" + b"%2E%2E",
    ],
)
async def test_invalid_ids_are_a_400(server, tmp_path, target):
    finished_run(tmp_path)
    head = b"GET " + target + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    reply = await asyncio.to_thread(raw_request, str(server.make_url("")), head)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"invalid session_id/run_id" in reply


@pytest.mark.asyncio
async def test_undecodable_cursor_headers_replay_from_the_start(server, tmp_path):
    ids = finished_run(tmp_path)
    head = (
        b"GET /runs/run-a/events HTTP/1.1\r\nHost: localhost\r\n"
        b"Last-Event-ID: run-a:\xff\xb2\r\nConnection: close\r\n\r\n"
    )
    reply = await asyncio.to_thread(raw_request, str(server.make_url("")), head)
    assert reply.startswith(b"HTTP/1.1 200")
    assert [line[4:].decode() for line in reply.split(b"\n") if line.startswith(b"id: ")] == ids


@pytest.mark.asyncio
async def test_rows_holding_lone_surrogates_stream_without_failing(server, tmp_path):
    path = tmp_path / "_run_journal" / "session-a" / "run-a.jsonl"
    append_run_event("session-a", "run-a", "token", {"text": "ok"}, session_dir=tmp_path)
    with open(path, "ab") as f:  # valid JSON, but no UTF-8 can carry it as it is
        f.write(b'{"version":1,"event_id":"run-a:2","seq":2,"run_id":"run-a","session_id":"session-a",'
                b'"event":"token","type":"token","created_at":1,"terminal":false,"terminal_state":null,'
                b'"payload":{"text":"\\ud800"}}\n')
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        resp = await client.get("/runs/run-a/events")
        got = rows_only(await read_sse(resp, limit=2))
        resp.close()
        assert got[1]["data"]["payload"]["text"] == "\ud800"
        assert (await client.get("/runs/run-a")).status == 200


@pytest.mark.asyncio
async def test_a_row_naming_another_run_with_line_breaks_cannot_forge_sse_messages(server, tmp_path):
    # A row in the run's file (or stream) written by someone else: its run_id carries CR/LF, which
    # EventSource reads as line breaks. The id line names the run asked for, so no message is forged.
    path = tmp_path / "_run_journal" / "session-a" / "run-a.jsonl"
    append_run_event("session-a", "run-a", "token", {"text": "ok"}, session_dir=tmp_path)
    with open(path, "ab") as f:
        forged = "run-a\r\nevent: done\r\ndata: {}\r\n"  # laid out as a row in every other way
        row = {"version": 1, "event_id": f"{forged}:2", "seq": 2, "run_id": forged, "session_id": "session-a",
               "event": "token", "type": "token", "created_at": 1, "terminal": False, "terminal_state": None,
               "payload": {"text": "x"}}  # fmt: skip
        f.write(json.dumps(row).encode() + b"\n")
    append_run_event("session-a", "run-a", "done", {}, session_dir=tmp_path)
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        body = await (await client.get("/runs/run-a/events")).read()
    # Every line break EventSource would see (CR, LF or CRLF) is one the server meant.
    lines = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    assert [line for line in lines if line.startswith(b"id:")] == [b"id: run-a:1", b"id: run-a:2", b"id: run-a:3"]
    assert [line for line in lines if line.startswith(b"event:")] == [b"event: token", b"event: token", b"event: done"]


@pytest.mark.asyncio
async def test_a_client_that_goes_away_is_a_debug_line_not_an_error(tmp_path, caplog):
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    for _ in range(400):
        writer.append_sse_event("token", {"text": "x" * 4000})  # more than the socket buffers hold
    app = create_app(session_dir=tmp_path, poll_interval=0.01, heartbeat=0.05)
    caplog.set_level(logging.DEBUG)
    async with TestServer(app, host="127.0.0.1") as srv:
        url = srv.make_url("")
        # One reader drops mid-replay, one while the run is quiet (noticed at the next keepalive).
        for limit in (3, 401):
            sock = socket.create_connection((url.host, url.port), timeout=10)
            sock.sendall(b"GET /runs/run-a/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            received = 0
            while received < 3 * 4000 if limit == 3 else received < 400 * 4000:
                chunk = await asyncio.to_thread(sock.recv, 65536)
                assert chunk
                received += len(chunk)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()  # a reset, as a closed browser tab
        for _ in range(200):
            if app[STATS]["sse_disconnected"] == 2:
                break
            await asyncio.sleep(0.05)
        assert app[STATS]["sse_disconnected"] == 2 and app[STATS]["sse_open"] == 0, app[STATS]
        assert (await asyncio.to_thread(raw_request, str(url), b"GET /runs/run-a HTTP/1.1\r\nHost: localhost\r\n"
                                         b"Connection: close\r\n\r\n")).startswith(b"HTTP/1.1 200")
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
    assert any("went away" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


@pytest.mark.asyncio
async def test_snapshots_read_whole_runs_two_at_a_time(tmp_path, monkeypatch):
    from relay_runtime.integrations.run_journal import routes

    finished_run(tmp_path)
    running, most = 0, 0
    real = routes._live_snapshot

    def counted(*args: object) -> object:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            time.sleep(0.05)
            return real(*args)  # type: ignore[arg-type]
        finally:
            running -= 1

    monkeypatch.setattr(routes, "_live_snapshot", counted)
    async with (
        TestServer(create_app(session_dir=tmp_path), host="127.0.0.1") as srv,
        aiohttp.ClientSession(base_url=srv.make_url(""), timeout=TIMEOUT) as client,
    ):

        async def one() -> int:
            async with client.get("/runs/run-a") as resp:
                await resp.read()
                return resp.status

        assert await asyncio.gather(*(one() for _ in range(12))) == [200] * 12
    assert most == 2


@pytest.mark.asyncio
async def test_a_snapshot_client_that_goes_away_or_stalls_is_no_error(tmp_path, caplog):
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    for _ in range(1000):
        writer.append_sse_event("token", {"text": "x" * 10_000})  # a 10 MB last_assistant_text
    app = create_app(session_dir=tmp_path, write_timeout=0.5)
    caplog.set_level(logging.DEBUG)
    async with TestServer(app, host="127.0.0.1") as srv:
        url = srv.make_url("")
        gone = socket.create_connection((url.host, url.port), timeout=10)
        gone.sendall(b"GET /runs/run-a HTTP/1.1\r\nHost: localhost\r\n\r\n")
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        gone.close()
        stalled = socket.create_connection((url.host, url.port), timeout=10)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(b"GET /runs/run-a HTTP/1.1\r\nHost: localhost\r\n\r\n")
        try:
            await asyncio.sleep(1.5)  # past the write timeout
            reply = await asyncio.to_thread(
                raw_request, str(url), b"GET /runs/run-a HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            assert reply.startswith(b"HTTP/1.1 200") and len(reply) > 10_000_000
        finally:
            stalled.close()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
    assert any("was not taken in time" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["heartbeat", "write_timeout", "header_timeout"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), True, 0, -1])
def test_the_servers_timeouts_are_finite_positive_seconds(tmp_path, name, value):
    # inf was taken: a client that stopped reading (or never finished its headers) held its socket for ever.
    with pytest.raises(ValueError, match=f"{name} must be a positive number of seconds"):
        create_app(session_dir=tmp_path, **{name: value})
