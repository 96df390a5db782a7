# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""The Redis store's own behaviour: row ids, the size cap, retention, outages, blocking tail reads.

Every test runs against a real redis-server on loopback (``redis_support``), with
its append-only file fsynced on every write; the outage tests SIGKILL it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from journal_support import run_turn
from redis_support import DroppingProxy, own_redis_server, redis_prefix, redis_server  # noqa: F401 - fixtures
from test_run_journal_http import TIMEOUT, read_sse, rows_only

from relay_runtime import session
from relay_runtime.integrations import run_journal
from relay_runtime.integrations.run_journal import (
    JournalUnavailable,
    RedisStreamStore,
    RunFull,
    RunJournalWriter,
    append_run_event,
    default_store,
    latest_run_summary,
    read_run_events,
)
from relay_runtime.integrations.run_journal.background import RowWriter
from relay_runtime.integrations.run_journal.routes import STORE, create_app
from relay_runtime.integrations.run_journal.storage import EncodedRow


@pytest.fixture
def store(redis_server, redis_prefix) -> Any:
    s = RedisStreamStore(redis_server.url, prefix=redis_prefix, retention=3600)
    yield s
    s.close()


def _seqs(store: RedisStreamStore, session_id: str = "s", run_id: str = "r") -> list[int]:
    return [row["seq"] for row in store.read(session_id, run_id)["events"]]


# --- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "http://x"}, "Redis URL must start with"),
        ({"retention": 0}, "retention must be at least 1 second"),
        ({"max_run_bytes": 0}, "max_run_bytes must be a positive integer"),
        ({"prefix": ""}, "prefix must be a non-empty string"),
        ({"prefix": "a b"}, "prefix must be a non-empty string"),
        ({"retries": -1}, "retries must be a non-negative integer"),
    ],
)
def test_bad_configuration_is_a_clear_error(kwargs, message):
    args = {"url": "redis://127.0.0.1:1/0", **kwargs}
    with pytest.raises(ValueError, match=message):
        RedisStreamStore(args.pop("url"), **args)


def test_the_password_in_the_url_never_shows(redis_prefix):
    store = RedisStreamStore("redis://:hunter2-secret@127.0.0.1:1/0", prefix=redis_prefix, retries=0)
    with pytest.raises(JournalUnavailable) as caught:
        store.append("s", "r", "token", {})
    assert "hunter2" not in str(caught.value) and "hunter2" not in repr(store)
    assert "127.0.0.1:1" in str(caught.value)


def test_relay_journal_url_makes_redis_the_default_everywhere(redis_server, redis_prefix, tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_JOURNAL_URL", redis_server.url)
    monkeypatch.setattr(run_journal, "_default_session_dir", lambda: tmp_path)
    default = default_store.env_store()
    assert isinstance(default, RedisStreamStore) and default is default_store.env_store()
    run_id = f"{redis_prefix.replace(':', '-')}-run"
    RunJournalWriter("s", run_id).append_sse_event("token", {"text": "a"})
    append_run_event("s", run_id, "done", {})
    assert [r["seq"] for r in read_run_events("s", run_id)["events"]] == [1, 2]
    assert latest_run_summary("s", run_id)["terminal_state"] == "completed"
    assert default.run_stats("s", run_id)["seq"] == 2
    assert not (tmp_path / "_run_journal").exists()  # nothing went to files
    # A session_dir still names the file store.
    append_run_event("s", run_id, "token", {}, session_dir=tmp_path)
    assert (tmp_path / "_run_journal" / "s" / f"{run_id}.jsonl").exists()
    # The subscriber (no store, no session_dir) and the routes find it too.
    session.reset_for_tests()
    try:
        turn = run_turn(tmp_path, lambda: None, monkeypatch=monkeypatch, run_id=f"{run_id}-turn")
    finally:
        session.reset_for_tests()
    assert turn.rows == []  # run_turn reads the files: there are none
    assert [r["event"] for r in default.read("session-a", f"{run_id}-turn")["events"]] == ["status", "done"]
    assert create_app()[STORE] is default
    monkeypatch.setenv("RELAY_JOURNAL_URL", "postgres://nope")
    with pytest.raises(ValueError, match="RELAY_JOURNAL_URL must be a redis://"):
        append_run_event("s", run_id, "token", {})


# --- row ids: a retried append is written once ----------------------------------------------


def test_the_same_row_id_is_written_once(store):
    first = store.append("s", "r", "token", {"text": "a"}, row_id="row-1", created_at=1.0)
    again = store.append("s", "r", "token", {"text": "changed"}, row_id="row-1", created_at=2.0)
    assert again == first  # the caller sees what was stored, not what it sent the second time
    assert store.append("s", "r", "token", {"text": "b"}, row_id="row-2")["seq"] == 2
    assert _seqs(store) == [1, 2]


def test_an_append_whose_reply_was_lost_is_retried_and_written_once(redis_server, redis_prefix):
    proxy = DroppingProxy(redis_server.port)
    store = RedisStreamStore(proxy.url, prefix=redis_prefix)
    try:
        store.append("s", "r", "token", {"text": "warm"})  # script loaded, connection up
        proxy.drop_next_reply.set()
        row = store.append("s", "r", "token", {"text": "lost reply"})
        assert proxy.dropped == 1
        assert row["seq"] == 2 and row["payload"] == {"text": "lost reply"}
        assert store.append("s", "r", "done", {})["seq"] == 3
        assert _seqs(store) == [1, 2, 3]
        # A pipelined batch whose reply was lost: resent whole, each row written once.
        rows = [(EncodedRow("s", "r", "token", {"text": str(i)}, None), f"batch-{i}") for i in range(50)]
        proxy.drop_next_reply.set()
        with pytest.raises(JournalUnavailable):
            RedisStreamStore(proxy.url, prefix=redis_prefix, retries=0).append_many(rows)
        results = store.append_many(rows)
        assert [r["seq"] for r in results] == list(range(4, 54))
        assert _seqs(store) == list(range(1, 54))
    finally:
        store.close()
        proxy.close()


# --- the size cap ---------------------------------------------------------------------------


def test_a_run_at_its_cap_refuses_rows_never_trims_and_still_records_its_end(redis_server, redis_prefix):
    store = RedisStreamStore(redis_server.url, prefix=redis_prefix, max_run_bytes=2000)
    try:
        written = []
        with pytest.raises(RunFull, match="reached its size cap of 2000 bytes"):
            for i in range(100):
                written.append(store.append("s", "r", "token", {"text": f"{i:03d}" * 10}))
        assert 5 < len(written) < 20
        with pytest.raises(RunFull):
            store.append("s", "r", "token", {"text": "small"})
        stats = store.run_stats("s", "r")
        assert stats["refused"] == 2 and stats["bytes"] <= 2000
        end = store.append("s", "r", "done", {})  # a terminal row fits in the reserve
        assert end["seq"] == len(written) + 1
        assert _seqs(store) == list(range(1, len(written) + 2))  # gapless from 1, nothing trimmed
        assert store.summary("s", "r")["terminal_state"] == "completed"
        # The background writer counts what the cap refuses and goes on.
        counts: list[str] = []
        writer = RowWriter(session_dir=None, fsync=None, maxsize=10, count=counts.append, store=store)
        writer.submit(("s", "r", "token", {"text": "x" * 100}))
        writer.submit(("s", "other", "token", {"text": "fits"}))
        assert writer.close(timeout=10)
        assert counts == ["journal.run_full"] and _seqs(store, run_id="other") == [1]
    finally:
        store.close()


def test_a_refused_row_whose_reply_was_lost_is_counted_refused_once(redis_server, redis_prefix):
    proxy = DroppingProxy(redis_server.port)
    store = RedisStreamStore(proxy.url, prefix=redis_prefix, max_run_bytes=400)
    try:
        store.append("s", "r", "token", {"text": "fits"})
        with pytest.raises(RunFull):
            store.append("s", "r", "token", {"text": "x" * 500})
        proxy.drop_next_reply.set()  # the next refusal runs on the server; its answer is cut on the way back
        with pytest.raises(RunFull):
            store.append("s", "r", "token", {"text": "y" * 500})
        assert proxy.dropped == 1
        assert store.run_stats("s", "r")["refused"] == 2  # two rows refused, one of them sent twice
        # A run at its cap keeps the ids of the last refusal only, however many rows it refuses.
        for i in range(20):
            with pytest.raises(RunFull):
                store.append("s", "r", "token", {"text": "z" * 500}, row_id=f"row-{i}")
        assert store.run_stats("s", "r")["refused"] == 22
        held = store.client.hget(store.keys.meta("s", "r"), "refused_ids")
        assert json.loads(held) == ["row-19"]
    finally:
        store.close()
        proxy.close()


def test_the_background_writer_counts_rows_stored_truncated(redis_server, redis_prefix):
    store = RedisStreamStore(redis_server.url, prefix=redis_prefix, max_row_bytes=16 * 1024)
    counts: list[str] = []
    writer = RowWriter(session_dir=None, fsync=None, maxsize=10, count=counts.append, store=store)
    try:
        writer.submit(("s", "r", "tool_call", {"calls": ["x" * 50_000]}))
        writer.submit(("s", "r", "token", {"text": object()}))
        assert writer.close(timeout=10)
        rows = store.read("s", "r")["events"]
        assert counts == ["journal.unserializable", "journal.truncated"]
        assert rows[0]["payload"]["truncated"] is True and rows[1]["payload"]["unserializable"].startswith("{'text'")
    finally:
        store.close()


# --- retention ------------------------------------------------------------------------------


def test_finished_runs_expire_running_runs_stay(redis_server, redis_prefix):
    store = RedisStreamStore(redis_server.url, prefix=redis_prefix, retention=1)
    client = store.client
    try:
        store.append("s", "open-run", "token", {})
        store.append("s", "done-run", "token", {})
        store.append("s", "done-run", "done", {})
        keys = store.keys
        assert all(client.ttl(k) == -1 for k in (keys.stream("s", "open-run"), keys.meta("s", "open-run")))
        for key in (keys.stream("s", "done-run"), keys.meta("s", "done-run"), keys.ids("s", "done-run")):
            assert client.ttl(key) == 1
        assert client.ttl(keys.runs("s")) == -1  # a run of the session is still open
        assert store.summary("s", "done-run")["last_assistant_text"] == ""
        time.sleep(2.2)
        assert store.read("s", "done-run")["events"] == [] and store.locate("done-run") is None
        # The same ids again, as many rows: a new run, not the summary cached for the expired one.
        store.append("s", "done-run", "token", {"text": "new"})
        store.append("s", "done-run", "done", {})
        assert store.summary("s", "done-run")["last_assistant_text"] == "new"
        time.sleep(2.2)
        assert [r["run_id"] for r in store.list_runs("s")] == ["open-run"]  # the expired run is pruned
        assert _seqs(store, run_id="open-run") == [1]
        store.append("s", "open-run", "cancel", {})
        time.sleep(2.2)
        assert store.list_runs("s") == [] and store.list_sessions() == []
        assert not client.exists(keys.runs("s")) and not client.exists(keys.open("s"))
    finally:
        store.close()


def test_default_retention_is_seven_days(store, redis_server, redis_prefix):
    default = RedisStreamStore(redis_server.url, prefix=redis_prefix)
    try:
        default.append("s", "r", "done", {})
        assert 7 * 24 * 3600 - 5 <= default.client.ttl(default.keys.stream("s", "r")) <= 7 * 24 * 3600
    finally:
        default.close()


# --- entries the journal did not write ------------------------------------------------------


def test_foreign_entries_are_reported_and_block_nothing_they_do_not_collide_with(store):
    store.append("s", "r", "token", {"text": "a"})
    stream = store.keys.stream("s", "r")
    store.client.xadd(stream, {"other": "field"}, id="1-5")
    row = store.read("s", "r")["events"][0]
    store.client.xadd(stream, {"r": json.dumps({**row, "seq": 7, "event_id": "r:7"})}, id="1-6")
    store.client.xadd(stream, {"r": "[1, 2]"}, id="1-7")
    assert store.append("s", "r", "done", {})["seq"] == 2
    window = store.read("s", "r")
    assert [row["seq"] for row in window["events"]] == [1, 2]
    assert [(m["offset"], m["reason"]) for m in window["malformed"]] == [
        ("1-5", "stream entry without a row"),
        ("1-6", "row seq 7 does not match its stream entry"),
        ("1-7", "not a JSON object"),
    ]
    # An entry past the run's next seq would make the next row's id impossible: a clear error, nothing written.
    store.client.xadd(stream, {"r": "junk"}, id="99-0")
    with pytest.raises(Exception, match="holds an entry at or past 3-0 that the journal did not write"):
        store.append("s", "r", "token", {})
    assert store.run_stats("s", "r")["seq"] == 2


@pytest.mark.asyncio
async def test_a_row_another_writer_stored_across_lines_reaches_sse_clients_as_one_message(store):
    # A foreign writer (a copy tool, a script) may store a row as indented JSON: a newline is JSON whitespace,
    # but an SSE line break, so sent on as stored the row was cut into a message of "{" and ignored lines.
    store.append("s", "r", "token", {"text": "a"})
    row = store.read("s", "r")["events"][0]
    done = {**row, "seq": 2, "event_id": "r:2", "event": "done", "type": "done", "terminal": True}
    done = {**done, "terminal_state": "completed", "payload": {"text": "line\nbreak"}}
    store.client.xadd(store.keys.stream("s", "r"), {"r": json.dumps(done, indent=2)}, id="2-0")
    store.client.hset(store.keys.meta("s", "r"), mapping={"seq": 2, "done": 1})
    srv = TestServer(create_app(store=store, heartbeat=0.2), host="127.0.0.1")
    await srv.start_server()
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
            resp = await client.get(srv.make_url("/runs/r/events"))
            body = (await asyncio.wait_for(resp.read(), 10)).decode()
    finally:
        await srv.close()
    messages = [m for m in body.split("\n\n") if m.strip()]
    assert [m.splitlines()[0] for m in messages] == ["id: r:1", "id: r:2"]
    for message, want in zip(messages, (row, done), strict=True):
        lines = message.splitlines()
        assert len(lines) == 3 and lines[2].startswith("data: ")
        assert json.loads(lines[2].removeprefix("data: ")) == want


# --- live tail ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_follow_blocks_in_redis_instead_of_polling(store):
    store.append("s", "r", "token", {"text": "first"})
    before = _xread_calls(store)
    got: list[list[int]] = []

    async def follow() -> None:
        async for rows in store.follow("s", "r", after_seq=0, idle=0.5):
            got.append([row["seq"] for row in rows])

    task = asyncio.create_task(follow())
    await asyncio.sleep(1.3)  # idle: a poller would have asked many times
    t0 = time.perf_counter()
    await asyncio.to_thread(store.append, "s", "r", "token", {"text": "live"})
    while [2] not in got:
        await asyncio.sleep(0.001)
    latency = time.perf_counter() - t0
    await asyncio.to_thread(store.append, "s", "r", "done", {})
    await asyncio.wait_for(task, 5)

    assert got[0] == [1] and [2] in got and got[-1] == [3]
    assert got.count([]) == 2  # one keepalive tick per idle period, nothing in between
    assert _xread_calls(store) - before <= 6
    assert latency < 0.5  # woken by the append, not by a timer


def _xread_calls(store: RedisStreamStore) -> int:
    stats: Any = store.client.info("commandstats")
    return int(stats.get("cmdstat_xread", {}).get("calls", 0))


@pytest.mark.asyncio
async def test_follow_of_an_ended_run_returns_what_follows_the_cursor_and_ends(store):
    for event in ("token", "token", "done"):
        store.append("s", "r", event, {})
    followed = [rows async for rows in store.follow("s", "r", after_seq=1)]
    assert [[row["seq"] for row in rows] for rows in followed] == [[2, 3]]
    stored = store.client.xrange(store.keys.stream("s", "r"), "2-0", "2-0")[0][1][b"r"]
    assert followed[0][0].raw == stored  # sent on as stored, not encoded again
    assert [rows async for rows in store.follow("s", "r", after_seq=3)] == []


@pytest.mark.asyncio
async def test_follow_batches_stay_bounded_with_large_rows(store):
    big = "x" * 300_000
    for _ in range(12):
        store.append("s", "r", "tool_result", {"result": big})
    store.append("s", "r", "done", {})
    batches = [[row["seq"] for row in rows] async for rows in store.follow("s", "r")]
    assert [seq for batch in batches for seq in batch] == list(range(1, 14))
    assert max(len(batch) for batch in batches) <= 3  # about 1 MiB at a time, not the whole run


# --- outages --------------------------------------------------------------------------------


def test_acknowledged_rows_survive_sigkill_and_seq_stays_gapless(own_redis_server, redis_prefix):
    server = own_redis_server
    store = RedisStreamStore(server.url, prefix=redis_prefix, retries=1)
    try:
        acknowledged = [store.append("s", "r", "token", {"text": str(i)})["seq"] for i in range(200)]
        server.kill()
        with pytest.raises(JournalUnavailable, match="unavailable"):
            store.append("s", "r", "token", {"text": "during"})
        with pytest.raises(JournalUnavailable):
            store.read("s", "r")
        server.start()
        assert _seqs(store) == acknowledged == list(range(1, 201))
        assert store.append("s", "r", "done", {})["seq"] == 201
    finally:
        store.close()


def test_the_background_writer_buffers_through_an_outage_and_writes_in_order(own_redis_server, redis_prefix, caplog):
    server = own_redis_server
    store = RedisStreamStore(server.url, prefix=redis_prefix, retries=0)
    counts: list[str] = []
    writer = RowWriter(session_dir=None, fsync=None, maxsize=50, count=counts.append, store=store)
    try:
        for i in range(10):
            assert writer.submit(("s", "r", "token", {"text": f"before {i}"}))
        assert writer.flush(timeout=10)
        server.kill()
        caplog.set_level(logging.WARNING, logger="relay_runtime.integrations.run_journal")
        started = time.perf_counter()
        accepted = [writer.submit(("s", "r", "token", {"text": f"during {i}"})) for i in range(80)]
        assert time.perf_counter() - started < 0.5  # the agent is never held up
        assert accepted.count(True) == 50 and accepted.count(False) == 30  # held: at most maxsize rows
        assert counts.count("journal.dropped") == accepted.count(False)
        assert not writer.flush(timeout=0.3)
        server.start()
        assert writer.flush(timeout=20)
        for i in range(5):
            assert writer.submit(("s", "r", "token", {"text": f"after {i}"}))
        writer.submit(("s", "r", "done", {}))
        assert writer.close(timeout=20)
    finally:
        store.close()
    rows = RedisStreamStore(server.url, prefix=redis_prefix).read("s", "r")["events"]
    texts = [row["payload"].get("text") for row in rows]
    kept = [f"during {i}" for i, ok in enumerate(accepted) if ok]
    assert texts == [f"before {i}" for i in range(10)] + kept + [f"after {i}" for i in range(5)] + [None]
    assert [row["seq"] for row in rows] == list(range(1, len(rows) + 1))
    drops = [r for r in caplog.records if "dropping rows" in r.getMessage()]
    assert len(drops) == 1  # logged once for the whole outage
    assert counts.count("journal.store_unavailable") == 1 and "journal.write_errors" not in counts


def test_closing_the_writer_during_an_outage_counts_what_it_gives_up(own_redis_server, redis_prefix):
    server = own_redis_server
    store = RedisStreamStore(server.url, prefix=redis_prefix, retries=0)
    counts: list[str] = []
    writer = RowWriter(session_dir=None, fsync=None, maxsize=100, count=counts.append, store=store)
    try:
        server.kill()
        for i in range(20):
            assert writer.submit(("s", "r", "token", {"text": str(i)}))
        assert not writer.close(timeout=0.5)
        deadline = time.monotonic() + 10
        while counts.count("journal.dropped_closed") < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert counts.count("journal.dropped_closed") == 20
        assert not writer.submit(("s", "r", "token", {}))
    finally:
        store.close()


@pytest.mark.asyncio
async def test_routes_answer_503_while_redis_is_down(own_redis_server, redis_prefix):
    server = own_redis_server
    store = RedisStreamStore(server.url, prefix=redis_prefix, retries=0)
    store.append("s", "r", "token", {"text": "a"})
    srv = TestServer(create_app(store=store, heartbeat=0.2), host="127.0.0.1")
    await srv.start_server()
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
            live = await client.get(srv.make_url("/runs/r/events"))
            assert [m["id"] for m in rows_only(await read_sse(live, limit=1))] == ["r:1"]
            server.kill()
            for path in ("/runs/r", "/runs/r/events"):
                resp = await client.get(srv.make_url(path))
                assert resp.status == 503, path
                assert resp.headers["Retry-After"] == "1"
                assert "unavailable" in (await resp.json())["error"]
            assert rows_only(await read_sse(live)) == []  # the open stream ended cleanly
            await asyncio.to_thread(server.start)
            resp = await client.get(srv.make_url("/runs/r/events"), headers={"Last-Event-ID": "r:0"})
            assert resp.status == 200
            await asyncio.to_thread(store.append, "s", "r", "done", {})
            assert [m["id"] for m in rows_only(await read_sse(resp))] == ["r:1", "r:2"]
    finally:
        await srv.close()

        store.close()


def test_direct_appends_from_many_threads_race_a_restart_without_gaps(own_redis_server, redis_prefix):
    server = own_redis_server
    store = RedisStreamStore(server.url, prefix=redis_prefix, retries=0)
    acknowledged: list[int] = []
    failures = 0
    lock = threading.Lock()
    stop = threading.Event()

    def write() -> None:
        nonlocal failures
        while not stop.is_set():
            try:
                seq = store.append("s", "r", "token", {})["seq"]
            except JournalUnavailable:
                with lock:
                    failures += 1
                time.sleep(0.01)
                continue
            with lock:
                acknowledged.append(seq)

    threads = [threading.Thread(target=write) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.3)
        server.kill()
        time.sleep(0.3)
        server.start()
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join()
    stored = _seqs(store)
    assert failures > 0
    assert stored == list(range(1, len(stored) + 1))
    assert set(acknowledged) <= set(stored)  # whatever was acknowledged is there
    assert len(stored) - len(acknowledged) <= 4  # at most the appends in flight at the kill landed unacknowledged
    store.close()


# --- the test server itself -----------------------------------------------------------------


@pytest.mark.parametrize(("ci", "code", "outcome"), [("true", 1, "1 error"), ("", 0, "1 skipped")])
def test_without_redis_server_tests_skip_outside_ci_and_fail_under_it(tmp_path, ci, code, outcome):
    probe = tmp_path / "test_probe.py"
    probe.write_text("from redis_support import redis_server  # noqa: F401\n\n\ndef test_probe(redis_server): ...\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "CI": ci, "PYTHONPATH": str(Path(__file__).parent)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(probe)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code and outcome in result.stdout, result.stdout
    assert "redis-server is not installed" in result.stdout
