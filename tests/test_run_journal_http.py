"""The journal over HTTP: live snapshot and server-sent events with reconnect, on a real aiohttp server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from relay_runtime.integrations.run_journal import RunJournalWriter, latest_run_summary, read_run_events
from relay_runtime.integrations.run_journal.routes import create_app

TIMEOUT = aiohttp.ClientTimeout(total=20)


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[TestServer]:
    srv = TestServer(create_app(session_dir=tmp_path, poll_interval=0.01, heartbeat=0.2), host="127.0.0.1")
    await srv.start_server()
    try:
        yield srv
    finally:
        await srv.close()


async def read_sse(resp: aiohttp.ClientResponse, limit: int | None = None) -> list[dict[str, Any]]:
    """Messages until the server ends the stream (or ``limit`` messages); comments are kept as such."""
    messages: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    while limit is None or len(messages) < limit:
        raw = await asyncio.wait_for(resp.content.readline(), timeout=10)
        if not raw:
            break
        line = raw.decode().rstrip("\n")
        if line == "":
            if current:
                messages.append(current)
                current = {}
            continue
        if line.startswith(":"):
            messages.append({"comment": line[1:].strip()})
            continue
        field, _, value = line.partition(": ")
        current[field] = json.loads(value) if field == "data" else value
    return messages


def rows_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if "comment" not in m]


class LiveRun:
    """Writes a run's rows from another thread, a few milliseconds apart, while clients follow it."""

    def __init__(self, tmp_path: Path, count: int, delay: float = 0.005) -> None:
        self.writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
        self.count = count
        self.delay = delay
        self.started = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.writer.append_sse_event("runtime_model", {"model": "m"})
        self.started.set()
        self.release.wait(timeout=10)
        for i in range(self.count):
            self.writer.append_sse_event("token", {"text": f"t{i} "})
            threading.Event().wait(self.delay)
        self.writer.append_sse_event("done", {"usage": {"output_tokens": self.count}})

    def __enter__(self) -> LiveRun:
        self.thread.start()
        assert self.started.wait(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(timeout=20)


@pytest.mark.asyncio
async def test_sse_reconnect_from_several_cursors_against_a_live_run(server, tmp_path):
    total = 30 + 2
    with LiveRun(tmp_path, count=30) as run:
        async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
            url = "/runs/run-a/events"
            full = await client.get(url)
            from_query = await client.get(url, params={"after_seq": "1"})
            from_header = await client.get(url, headers={"Last-Event-ID": "run-a:1"})
            assert full.status == from_query.status == from_header.status == 200
            assert full.headers["Content-Type"].startswith("text/event-stream")
            first = rows_only(await read_sse(full, limit=1))
            run.release.set()
            # Drop after a few live rows and come back with the last id we saw, as a browser does.
            dropped = await client.get(url, headers={"Last-Event-ID": "run-a:1"})
            partial = rows_only(await read_sse(dropped, limit=5))
            dropped.close()
            resumed = await client.get(url, headers={"Last-Event-ID": partial[-1]["id"]})
            # An explicit ?after_seq= wins over Last-Event-ID, as in the web UI this journal generalises.
            both = await client.get(url, params={"after_seq": "1"}, headers={"Last-Event-ID": "run-a:4"})
            results = await asyncio.gather(
                read_sse(full), read_sse(from_query), read_sse(from_header), read_sse(resumed), read_sse(both)
            )
    rows = read_run_events("session-a", "run-a", session_dir=tmp_path)["events"]
    assert len(rows) == total and rows[-1]["event"] == "done"
    ids = [f"run-a:{row['seq']}" for row in rows]

    def check(messages: list[dict[str, Any]], after: int) -> None:
        got = rows_only(messages)
        assert [m["id"] for m in got] == ids[after:]
        assert [m["data"] for m in got] == rows[after:]
        assert [m["event"] for m in got] == [row["event"] for row in rows[after:]]

    check(first + results[0], 0)
    check(results[1], 1)
    check(results[2], 1)
    check(partial + results[3], 1)
    check(results[4], 1)


@pytest.mark.asyncio
async def test_sse_replays_a_finished_run_and_ends(server, tmp_path):
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    for text in ("a", "b"):
        writer.append_sse_event("token", {"text": text})
    writer.append_sse_event("cancel", {})
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        resp = await client.get("/runs/run-a/events", params={"after_seq": "1"})
        got = rows_only(await read_sse(resp))
        assert [m["id"] for m in got] == ["run-a:2", "run-a:3"]
        assert got[-1]["data"]["terminal_state"] == "interrupted-by-user"
        # Reconnecting after the end: nothing left, the stream closes at once.
        resp = await client.get("/runs/run-a/events", headers={"Last-Event-ID": "run-a:3"})
        assert resp.status == 200 and rows_only(await read_sse(resp)) == []


@pytest.mark.asyncio
async def test_sse_keeps_an_idle_connection_alive(server, tmp_path):
    RunJournalWriter("session-a", "run-a", session_dir=tmp_path).append_sse_event("token", {"text": "a"})
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        resp = await client.get("/runs/run-a/events")
        messages = await read_sse(resp, limit=2)
        assert messages[0]["id"] == "run-a:1" and messages[1] == {"comment": "keepalive"}
        resp.close()
        # The server noticed nothing fatal: it still answers.
        again = await client.get("/runs/run-a")
        assert again.status == 200


@pytest.mark.asyncio
async def test_snapshot_endpoint(server, tmp_path):
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    observed = {
        "session_id": "session-a",
        "stream_id": "run-a",
        "model": "backup",
        "provider": "custom",
        "fallback_active": True,
        "phase": "observed_output",
    }
    writer.append_sse_event("runtime_model", observed)
    writer.append_sse_event("token", {"text": "héllo"})
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        for params in ({}, {"session_id": "session-a"}):
            resp = await client.get("/runs/run-a", params=params)
            assert resp.status == 200
            body = await resp.json()
            summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
            assert summary is not None
            assert {k: body[k] for k in summary} == summary
            assert body["runtime_model"] == observed and body["last_assistant_text"] == "héllo"
            assert body["terminal_state"] == "running" and body["malformed_count"] == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "path,params,headers,status,message",
    [
        ("/runs/bad%20id", {}, {}, 400, "invalid session_id/run_id"),
        ("/runs/bad%20id/events", {}, {}, 400, "invalid session_id/run_id"),
        ("/runs/%2E%2E", {}, {}, 400, "invalid session_id/run_id"),
        ("/runs/a%00b/events", {}, {}, 400, "invalid session_id/run_id"),
        ("/runs/run-a", {"session_id": "../x"}, {}, 400, "invalid session_id/run_id"),
        ("/runs/run-a/events", {"session_id": "a b"}, {}, 400, "invalid session_id/run_id"),
        ("/runs/nope", {}, {}, 404, "no run 'nope'"),
        ("/runs/nope/events", {}, {}, 404, "no run 'nope'"),
        ("/runs/run-a", {"session_id": "other"}, {}, 404, "no run 'run-a'"),
    ],
)
async def test_bad_requests(server, tmp_path, path, params, headers, status, message):
    RunJournalWriter("session-a", "run-a", session_dir=tmp_path).append_sse_event("token", {"text": "a"})
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        url = server.make_url("").with_path(path, encoded=True)  # keep %2E%2E from being normalised away
        resp = await client.get(url, params=params, headers=headers)
        assert resp.status == status
        assert message in (await resp.json())["error"]


@pytest.mark.asyncio
async def test_sse_follows_a_turn_journaled_by_the_subscriber(server, tmp_path):
    from journal_support import run_turn, stream_call

    from relay_runtime import session

    session.reset_for_tests()
    go = threading.Event()

    def body() -> None:
        assert go.wait(timeout=10)
        for i in range(5):
            stream_call("openai", "m", [{"model": "m-1", "text": f"part {i} "}], call_id=f"c{i}")
            threading.Event().wait(0.01)

    turn = asyncio.create_task(asyncio.to_thread(run_turn, tmp_path, body))
    async with aiohttp.ClientSession(base_url=server.make_url(""), timeout=TIMEOUT) as client:
        for _ in range(500):  # until the turn's first row is on disk
            summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
            if summary and summary["event_count"]:
                break
            await asyncio.sleep(0.01)
        resp = await client.get("/runs/run-a/events")
        assert resp.status == 200
        go.set()
        messages = rows_only(await read_sse(resp))
    result = await turn
    assert [m["data"] for m in messages] == result.rows
    assert messages[-1]["event"] == "done"
    assert "".join(m["data"]["payload"]["text"] for m in messages if m["event"] == "token") == "".join(
        f"part {i} " for i in range(5)
    )
    session.reset_for_tests()


@pytest.mark.asyncio
async def test_a_bearer_token_guards_every_route(tmp_path):
    RunJournalWriter("session-a", "run-a", session_dir=tmp_path).append_sse_event("done", {})
    app = create_app(session_dir=tmp_path, bearer_token="journal-secret")
    async with (
        TestServer(app, host="127.0.0.1") as srv,
        aiohttp.ClientSession(base_url=srv.make_url(""), timeout=TIMEOUT) as client,
    ):
        for path in ("/runs/run-a", "/runs/run-a/events", "/runs/nope"):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic journal-secret"}):
                resp = await client.get(path, headers=headers)
                assert resp.status == 401, (path, headers)
                assert await resp.json() == {"error": "unauthorized"}
        good = {"Authorization": "Bearer journal-secret"}
        assert (await client.get("/runs/run-a", headers=good)).status == 200
        resp = await client.get("/runs/run-a/events", headers=good)
        assert resp.status == 200 and [m["id"] for m in rows_only(await read_sse(resp))] == ["run-a:1"]
    with pytest.raises(ValueError, match="bearer_token"):
        create_app(session_dir=tmp_path, bearer_token="")
