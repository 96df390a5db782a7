# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""What every journal store guarantees, run on the file store and on Redis (a real redis-server on loopback).

File-only behaviour (modes, fsync, torn lines) stays in test_run_journal_storage.py;
Redis-only behaviour (row ids, retention, outages) in test_run_journal_redis.py.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from journal_support import run_turn, stream_call
from redis_support import inject_junk, journal_store, redis_server  # noqa: F401 - fixtures used by name
from test_run_journal_http import TIMEOUT, read_sse, rows_only

from relay_runtime import session
from relay_runtime.integrations.run_journal import (
    FileStore,
    RedisStreamStore,
    RunJournalStore,
    RunJournalWriter,
    append_run_event,
    latest_run_summary,
    read_run_events,
)
from relay_runtime.integrations.run_journal.routes import create_app
from relay_runtime.integrations.run_journal.runtime_model import observation
from relay_runtime.integrations.run_journal.storage import is_truncated


def test_the_store_implements_the_interface(journal_store):
    assert isinstance(journal_store, RunJournalStore)


def test_seq_is_gapless_from_1_across_threads(journal_store):
    per_thread, threads = 60, 6
    seen: dict[int, list[int]] = {}

    def write(n: int) -> None:
        writer = RunJournalWriter("s", "r", store=journal_store)
        seen[n] = [writer.append_sse_event("token", {"text": f"{n}:{i}"})["seq"] for i in range(per_thread)]

    workers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    rows = read_run_events("s", "r", store=journal_store)["events"]
    assert [row["seq"] for row in rows] == list(range(1, per_thread * threads + 1))
    for n, seqs in seen.items():
        assert seqs == sorted(seqs)  # each writer's rows land in its own order
        assert [row["payload"]["text"] for row in rows if row["seq"] in set(seqs)] == [
            f"{n}:{i}" for i in range(per_thread)
        ]
    assert all(row["event_id"] == f"r:{row['seq']}" for row in rows)


def test_the_returned_row_is_the_stored_row(journal_store):
    row = append_run_event("s", "r", "token", {"text": "héllo\u2028"}, store=journal_store, created_at=12.5)
    assert row == {
        "version": 1,
        "event_id": "r:1",
        "seq": 1,
        "run_id": "r",
        "session_id": "s",
        "event": "token",
        "type": "token",
        "created_at": 12.5,
        "terminal": False,
        "terminal_state": None,
        "payload": {"text": "héllo\u2028"},
    }
    assert read_run_events("s", "r", store=journal_store)["events"] == [row]
    assert append_run_event("s", "r", "done", None, store=journal_store)["payload"] == {}
    with pytest.raises(ValueError, match="event must be a non-empty string"):
        append_run_event("s", "r", "", {}, store=journal_store)
    with pytest.raises(TypeError, match="not JSON-serializable"):
        append_run_event("s", "r", "token", {"x": object()}, store=journal_store)
    with pytest.raises(ValueError, match="invalid session_id/run_id"):
        append_run_event("../s", "r", "token", {}, store=journal_store)
    with pytest.raises(ValueError, match="seq 9 is not the run's next seq 3"):
        append_run_event("s", "r", "token", {}, seq=9, store=journal_store)
    assert append_run_event("s", "r", "token", {}, seq=3, store=journal_store)["seq"] == 3


def test_reads_after_a_cursor(journal_store):
    for i in range(30):
        journal_store.append("s", "r", "token", {"text": str(i)})

    def seqs(**kwargs: Any) -> list[int]:
        return [row["seq"] for row in read_run_events("s", "r", store=journal_store, **kwargs)["events"]]

    assert seqs() == list(range(1, 31))
    assert seqs(after_seq=0) == list(range(1, 31))
    assert seqs(after_seq=27) == [28, 29, 30]
    assert seqs(after_seq=30) == [] and seqs(after_seq=99) == []
    assert seqs(after_seq=5, max_seq=8) == [6, 7, 8]
    assert seqs(max_seq=2) == [1, 2]
    assert read_run_events("s", "nothing", store=journal_store)["events"] == []
    with pytest.raises(ValueError, match="after_seq must be a non-negative integer"):
        read_run_events("s", "r", after_seq=-1, store=journal_store)


def test_malformed_entries_are_reported_never_fatal(journal_store):
    journal_store.append("s", "r", "token", {"text": "a"})
    journal_store.append("s", "r", "token", {"text": "b"})
    inject_junk(journal_store, "s", "r", "{not json")
    third = journal_store.append("s", "r", "done", {})
    assert third["seq"] == 3  # the junk took no seq
    window = read_run_events("s", "r", store=journal_store)
    assert [row["seq"] for row in window["events"]] == [1, 2, 3]
    assert [(m["reason"], m["text"]) for m in window["malformed"]] == [("invalid JSON", "{not json")]
    summary = latest_run_summary("s", "r", store=journal_store)
    assert summary is not None
    assert (summary["event_count"], summary["last_seq"], summary["terminal_state"]) == (3, 3, "completed")
    assert [row["seq"] for row in read_run_events("s", "r", after_seq=2, store=journal_store)["events"]] == [3]


# Rows covering everything a summary reads: text across a tool call, observations, a fallback, the end.
_SCRIPTS: dict[str, list[tuple[str, Any]]] = {
    "completed": [
        ("status", {"type": "run_started"}),
        ("runtime_model", None),
        ("token", {"text": "Let me "}),
        ("token", {"text": "check."}),
        ("tool", {"name": "search"}),
        ("token", {"text": "Found "}),
        ("warning", {"type": "fallback", "message": "switched"}),
        ("token", {"text": "The answer"}),
        ("runtime_model", "not an object"),
        ("done", {"usage": {"input_tokens": 3}}),
    ],
    "tool_limit": [("token", {"text": "x"}), ("done", {"type": "tool_limit_reached"})],
    "errored": [("token", {"text": "x"}), ("apperror", {"type": "error", "message": "boom"})],
    "cancelled": [("token", {"text": "x"}), ("cancel", {}), ("stream_end", {})],
    "running": [("token", {"text": "still going"})],
}


def _write(store: Any, run_id: str, script: list[tuple[str, Any]]) -> None:
    for i, (event, payload) in enumerate(script):
        if event == "runtime_model" and payload is None:
            payload = observation(
                session_id="s", run_id=run_id, model="m-1", provider="p", fallback_active=False, phase="observed_output"
            )
        store.append("s", run_id, event, payload, created_at=1000.0 + i)


@pytest.mark.parametrize("name", sorted(_SCRIPTS))
def test_summaries_are_identical_on_both_stores(name, tmp_path, redis_server):
    file_store = FileStore(tmp_path)
    redis_store = RedisStreamStore(redis_server.url, prefix=f"relay-test:summary-{name}")
    try:
        for store in (file_store, redis_store):
            _write(store, "r", _SCRIPTS[name])
        assert read_run_events("s", "r", store=redis_store) == read_run_events("s", "r", store=file_store)
        assert latest_run_summary("s", "r", store=redis_store) == latest_run_summary("s", "r", store=file_store)
        assert redis_store.summary("s", "absent") == file_store.summary("s", "absent")
        assert redis_store.summary("nobody", "r") is None and file_store.summary("nobody", "r") is None
    finally:
        redis_store.close()


def test_a_summary_follows_new_rows_and_is_the_callers_copy(journal_store):
    _write(journal_store, "r", _SCRIPTS["running"])
    first = journal_store.summary("s", "r")
    first["last_assistant_text"] = "mutated"
    assert journal_store.summary("s", "r")["last_assistant_text"] == "still going"
    journal_store.append("s", "r", "done", {})
    assert journal_store.summary("s", "r")["terminal_state"] == "completed"


def test_listing_and_locating_runs(journal_store):
    journal_store.append("s1", "a", "token", {})
    journal_store.append("s2", "b", "token", {})
    journal_store.append("s2", "shared", "token", {})
    journal_store.append("s1", "shared", "token", {})  # written last: wins
    assert journal_store.locate("shared") == "s1" and journal_store.locate("nope") is None
    assert {s["session_id"] for s in journal_store.list_sessions()} == {"s1", "s2"}
    assert {r["run_id"] for r in journal_store.list_runs("s2")} == {"b", "shared"}
    assert all(isinstance(r["updated_at"], float) for r in journal_store.list_runs("s2"))
    assert journal_store.list_runs("nobody") == []


def test_the_subscriber_journals_a_turn_on_the_store(journal_store, tmp_path):
    session.reset_for_tests()
    try:
        result = run_turn(
            tmp_path,
            lambda: stream_call("openai", "m", [{"model": "m-1", "text": "hi "}, {"text": "there"}]),
            store=journal_store,
        )
    finally:
        session.reset_for_tests()
    assert result.names == ["status", "runtime_model", "token", "token", "done"]  # and two span rows
    assert [row["seq"] for row in result.rows] == list(range(1, 8))
    summary = journal_store.summary("session-a", "run-a")
    assert (summary["last_assistant_text"], summary["runtime_model"]["model"]) == ("hi there", "m-1")
    assert not result.subscriber.counts


# --- the HTTP routes over each store ---------------------------------------------------------


async def _server(store: Any) -> TestServer:
    srv = TestServer(create_app(store=store, heartbeat=0.2), host="127.0.0.1")
    await srv.start_server()
    return srv


@pytest.mark.asyncio
async def test_sse_replays_after_the_cursor_then_follows_live_rows(journal_store):
    for i in range(5):
        journal_store.append("s", "r", "token", {"text": str(i)})
    srv = await _server(journal_store)
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
            resp = await client.get(srv.make_url("/runs/r/events"), headers={"Last-Event-ID": "r:3"})
            assert resp.status == 200
            first = rows_only(await read_sse(resp, limit=2))
            assert [m["id"] for m in first] == ["r:4", "r:5"]

            async def later() -> None:
                for i in range(5, 8):
                    await asyncio.to_thread(journal_store.append, "s", "r", "token", {"text": str(i)})
                await asyncio.to_thread(journal_store.append, "s", "r", "done", {})

            writer = asyncio.create_task(later())
            rest = rows_only(await read_sse(resp))
            await writer
            assert [m["id"] for m in rest] == ["r:6", "r:7", "r:8", "r:9"]
            assert rest[-1]["event"] == "done" and rest[-1]["data"]["terminal_state"] == "completed"
            # A reconnect after the end replays exactly what follows its cursor, then ends.
            again = await client.get(srv.make_url("/runs/r/events"), params={"after_seq": "7"})
            assert [m["id"] for m in rows_only(await read_sse(again))] == ["r:8", "r:9"]
            snapshot = await (await client.get(srv.make_url("/runs/r"))).json()
            assert (snapshot["last_seq"], snapshot["terminal"], snapshot["malformed_count"]) == (9, True, 0)
            assert (await client.get(srv.make_url("/runs/nope/events"))).status == 404
    finally:
        await srv.close()


@pytest.mark.asyncio
async def test_reconnect_cursors_mean_the_same_on_both_stores(journal_store):
    for i in range(5):
        journal_store.append("s", "r", "token", {"text": str(i)})
    cases: list[tuple[dict[str, str], dict[str, str], int]] = [
        ({}, {}, 0),
        ({"after_seq": "2"}, {}, 2),
        ({}, {"Last-Event-ID": "r:2"}, 2),
        ({"after_seq": "1"}, {"Last-Event-ID": "r:4"}, 1),  # ?after_seq= wins over the header
        ({}, {"Last-Event-ID": "nope"}, 0),  # a cursor that does not parse replays the run
        ({}, {"Last-Event-ID": "other:3"}, 0),  # another run's id too
        ({"after_seq": "²"}, {}, 0),
        ({"after_seq": "9" * 5000}, {}, 0),
        ({"after_seq": "99"}, {}, 0),  # past the run's last row: the whole run
    ]
    srv = await _server(journal_store)
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
            streams = []
            for params, headers, _ in cases:
                resp = await client.get(srv.make_url("/runs/r/events"), params=params, headers=headers)
                assert resp.status == 200, (params, headers)
                streams.append(resp)
            await asyncio.sleep(0.2)  # every stream is following the live run now
            await asyncio.to_thread(journal_store.append, "s", "r", "done", {})
            results = await asyncio.gather(*(read_sse(resp) for resp in streams))
    finally:
        await srv.close()
    for (params, headers, after), messages in zip(cases, results, strict=True):
        assert [m["id"] for m in rows_only(messages)] == [f"r:{n}" for n in range(after + 1, 7)], (params, headers)


@pytest.mark.asyncio
async def test_following_with_a_cursor_past_the_end_ends_with_the_run(journal_store):
    journal_store.append("s", "r", "token", {})
    got: list[list[int]] = []

    async def follow() -> None:
        async for rows in journal_store.follow("s", "r", after_seq=99, idle=0.2):
            got.append([row["seq"] for row in rows])

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.3)
    await asyncio.to_thread(journal_store.append, "s", "r", "token", {})
    await asyncio.to_thread(journal_store.append, "s", "r", "done", {})
    await asyncio.wait_for(task, 5)  # the terminal row (seq 3 <= 99) ends it
    assert all(batch == [] for batch in got)


@pytest.mark.parametrize("kind", ["file", "redis"])
def test_the_row_cap_stores_a_large_payload_truncated_on_both_stores(kind, tmp_path, redis_server):
    cap = 16 * 1024
    if kind == "file":
        store: Any = FileStore(tmp_path, max_row_bytes=cap)
    else:
        store = RedisStreamStore(redis_server.url, prefix=f"relay-test:cap-{tmp_path.name}", max_row_bytes=cap)
    store.append("s", "r", "token", {"text": "before"})
    big = store.append("s", "r", "tool_result", {"name": "read_file", "result": "é" * 100_000})
    store.append("s", "r", "done", {})
    rows = read_run_events("s", "r", store=store)["events"]
    assert [row["seq"] for row in rows] == [1, 2, 3]
    assert rows[1] == big and is_truncated(big)
    payload = big["payload"]
    assert (payload["name"], payload["max_row_bytes"], payload["original_bytes"]) == ("read_file", cap, 200_032)
    assert payload["preview"].startswith('{"name":"read_file","result":"éé')
    assert "result" not in payload
