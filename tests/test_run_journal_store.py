"""The store interface: the file store implements it; the calls, subscriber, routes and CLI serve any store."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from journal_support import MemoryStore, run_turn, stream_call
from test_run_journal_http import TIMEOUT, read_sse, rows_only

from relay_runtime import session
from relay_runtime.integrations.run_journal import (
    FileStore,
    JournalSubscriber,
    RunJournalStore,
    RunJournalWriter,
    append_run_event,
    latest_run_summary,
    read_run_events,
)
from relay_runtime.integrations.run_journal import listing as listing_module
from relay_runtime.integrations.run_journal import page as page_module
from relay_runtime.integrations.run_journal import storage as storage_module
from relay_runtime.integrations.run_journal.cli import main as cli_main
from relay_runtime.integrations.run_journal.routes import create_app, find_run_summary


def test_both_stores_implement_the_interface(tmp_path):
    assert isinstance(FileStore(tmp_path), RunJournalStore)
    assert isinstance(MemoryStore(), RunJournalStore)


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_public_calls_take_a_store(tmp_path, kind):
    store: Any = FileStore(tmp_path) if kind == "file" else MemoryStore()
    writer = RunJournalWriter("s", "r", store=store)
    first = writer.append_sse_event("token", {"text": "a"})
    second = append_run_event("s", "r", "done", None, store=store)
    assert (first["seq"], second["seq"], second["payload"], second["terminal_state"]) == (1, 2, {}, "completed")
    assert read_run_events("s", "r", store=store)["events"] == [first, second]
    assert read_run_events("s", "r", after_seq=1, store=store)["events"] == [second]
    summary = latest_run_summary("s", "r", store=store)
    assert summary is not None and (summary["event_count"], summary["last_assistant_text"]) == (2, "a")
    with pytest.raises(ValueError, match="seq 5 is not the run's next seq 3"):
        append_run_event("s", "r", "token", {}, seq=5, store=store)
    with pytest.raises(ValueError, match="not both"):
        read_run_events("s", "r", store=store, session_dir=tmp_path)
    with pytest.raises(ValueError, match="not both"):
        RunJournalWriter("s", "r", store=store, session_dir=tmp_path)
    assert [r["run_id"] for r in store.list_runs("s")] == ["r"]
    assert [s["session_id"] for s in store.list_sessions()] == ["s"]
    assert store.locate("r") == "s" and store.locate("nope") is None


def test_listing_sessions_and_runs_newest_first(tmp_path):
    store = FileStore(tmp_path)
    for session_id, run_id, when in (("s1", "a", 100), ("s1", "b", 300), ("s2", "c", 200)):
        store.append(session_id, run_id, "token", {"text": run_id})
        os.utime(tmp_path / "_run_journal" / session_id / f"{run_id}.jsonl", (when, when))
        os.utime(tmp_path / "_run_journal" / session_id, (when, when))
    assert [(r["run_id"], r["updated_at"]) for r in store.list_runs("s1")] == [("b", 300), ("a", 100)]
    assert [s["session_id"] for s in store.list_sessions()] == ["s1", "s2"]
    assert store.list_runs("nobody") == [] and FileStore(tmp_path / "empty").list_sessions() == []
    with pytest.raises(ValueError, match="invalid session_id/run_id"):
        store.list_runs("../x")


def test_a_long_run_of_an_older_session_stays_on_the_run_list_while_it_is_written(tmp_path, monkeypatch):
    # The run list reads the newest sessions only (``MAX_LISTED_RUNS`` of them). A session is as new as its
    # last written run, as in the Redis store, not as the last run it started: a long run begun before other
    # sessions started theirs stays listed while it goes on.
    monkeypatch.setattr(storage_module, "SESSION_TOUCH_SECONDS", 0.0)
    store = FileStore(tmp_path)
    store.append("old", "long", "token", {"text": "a"})
    root = tmp_path / "_run_journal"
    for path in (root / "old", root / "old" / "long.jsonl"):
        os.utime(path, (100, 100))  # begun long ago
    for i in range(3):
        store.append(f"new{i}", "r", "token", {"text": "b"})
        for path in (root / f"new{i}", root / f"new{i}" / "r.jsonl"):
            os.utime(path, (200 + i, 200 + i))  # begun since (a file system's clock may tick coarser than a test)
    assert "old" not in [run["session_id"] for run in page_module.list_runs(store, limit=3)]
    store.append("old", "long", "token", {"text": "c"})  # the long run goes on
    listed = page_module.list_runs(store, limit=3)
    assert (listed[0]["session_id"], listed[0]["run_id"], listed[0]["terminal_state"]) == ("old", "long", "running")
    assert store.list_sessions()[0]["session_id"] == "old"


def test_a_run_marks_its_session_written_at_most_once_a_second(tmp_path, monkeypatch):
    touched: list[str] = []
    monkeypatch.setattr(storage_module, "_touch_session", touched.append)
    store = FileStore(tmp_path)
    for i in range(50):
        store.append("s", "r", "token", {"text": str(i)})
    assert touched == [str(tmp_path / "_run_journal" / "s")]  # one system call, not one per row


def test_finding_a_run_does_not_stat_every_session(tmp_path, monkeypatch):
    store = FileStore(tmp_path)
    for i in range(300):
        store.append(f"session-{i}", f"run-{i}", "token", {"text": "x"})
    store.append("session-7", "shared", "token", {})
    store.append("session-250", "shared", "token", {})  # written last: wins
    calls: list[str] = []
    real_stat, real_scandir = os.stat, os.scandir

    def counting_stat(path: Any, *a: Any, **k: Any) -> Any:
        calls.append(f"stat {path}")
        return real_stat(path, *a, **k)

    def counting_scandir(path: Any = ".") -> Any:
        calls.append(f"scandir {path}")
        return real_scandir(path)

    monkeypatch.setattr(os, "stat", counting_stat)
    monkeypatch.setattr(os, "scandir", counting_scandir)
    summary = find_run_summary("run-123", store=store)
    assert summary is not None and summary["session_id"] == "session-123"
    assert find_run_summary("nope", store=store) is None
    assert store.locate("shared") == "session-250"
    assert len(calls) < 20, calls


def test_runs_written_before_the_index_are_found_once_indexed(tmp_path):
    store = FileStore(tmp_path)
    store.append("old-session", "old-run", "token", {})
    index = tmp_path / "_run_journal" / listing_module.INDEX_DIRNAME
    for entry in sorted(index.rglob("*"), reverse=True):  # as a journal from before the index
        entry.rmdir() if entry.is_dir() else entry.unlink()
    index.rmdir()
    assert store.locate("old-run") == "old-session"
    assert (index / "old-run" / "old-session").exists()


@pytest.mark.asyncio
async def test_the_routes_serve_another_store_unchanged():
    store = MemoryStore()
    writer = RunJournalWriter("session-m", "run-m", store=store)
    writer.append_sse_event("token", {"text": "from memory"})
    app = create_app(store=store, heartbeat=0.2)
    async with (
        TestServer(app, host="127.0.0.1") as srv,
        aiohttp.ClientSession(base_url=srv.make_url(""), timeout=TIMEOUT) as client,
    ):
        snapshot = await (await client.get("/runs/run-m")).json()
        assert snapshot["last_assistant_text"] == "from memory" and snapshot["session_id"] == "session-m"
        resp = await client.get("/runs/run-m/events")
        first = rows_only(await read_sse(resp, limit=1))

        def finish() -> None:
            writer.append_sse_event("token", {"text": "!"})
            writer.append_sse_event("done", {})

        threading.Timer(0.05, finish).start()
        rest = rows_only(await read_sse(resp))
        assert [m["id"] for m in first + rest] == ["run-m:1", "run-m:2", "run-m:3"]
        assert rest[-1]["data"] == read_run_events("session-m", "run-m", store=store)["events"][-1]
        assert (await client.get("/runs/nope")).status == 404
    assert store.waits > 0  # it followed by blocking on its condition, not by polling the routes
    with pytest.raises(ValueError, match="not both"):
        create_app(store=store, session_dir="/tmp")


def test_the_cli_reads_another_store(capsys):
    store = MemoryStore()
    store.append("s", "r", "token", {"text": "hi"})
    store.append("s", "r", "done", {})
    assert cli_main(["show", "s", "r", "--json", "--no-summary"], store=store) == 0
    assert [json.loads(line)["seq"] for line in capsys.readouterr().out.splitlines()] == [1, 2]
    assert cli_main(["tail", "s", "r", "--after-seq", "1", "--json", "--timeout", "5"], store=store) == 0
    assert [json.loads(line)["event"] for line in capsys.readouterr().out.splitlines()] == ["done"]


def test_the_subscriber_writes_to_another_store(tmp_path):
    session.reset_for_tests()
    store = MemoryStore()
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(str(tmp_path / "profile"))
    subscriber = JournalSubscriber(host.relay, store=store)
    subscriber.register()
    host.retain_managed_execution("run_journal")
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="r", task_id="t")
    stream_call("openai", "m", [{"model": "m", "text": "hello"}])
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    host.release_managed_execution("run_journal")
    assert subscriber.flush(timeout=10) and subscriber.close()
    names = [row["event"] for row in store.read("s", "r")["events"]]
    assert names == ["status", "runtime_model", "token", "span", "span", "done"]  # spans: the attempt, its call
    assert not (tmp_path / "_run_journal").exists()
    with pytest.raises(ValueError, match="not both"):
        JournalSubscriber(host.relay, store=store, session_dir=tmp_path)
    session.reset_for_tests()


def test_the_file_store_is_what_the_default_calls_write(tmp_path):
    result = run_turn(tmp_path, lambda: stream_call("openai", "m", [{"model": "m", "text": "x"}]))
    assert FileStore(tmp_path).read("session-a", "run-a")["events"] == result.rows


async def follow_a_live_run(store: FileStore, after_seq: int, batches: int, *events: str) -> list[list[dict[str, Any]]]:
    """Follow run r of session s; after ``batches`` batches, append ``events``. Fails after 10 s."""
    got: list[list[dict[str, Any]]] = []

    async def consume() -> None:
        async for rows in store.follow("s", "r", after_seq=after_seq, idle=0.05):
            got.append(rows)
            if len(got) == batches:
                for event in events:
                    await asyncio.to_thread(store.append, "s", "r", event, {})

    await asyncio.wait_for(consume(), 10)
    return got


@pytest.mark.asyncio
async def test_follow_yields_idle_ticks_and_ends_after_the_terminal_row(tmp_path):
    store = FileStore(tmp_path, poll=0.01)
    store.append("s", "r", "token", {"text": "a"})
    got = await follow_a_live_run(store, 0, 3, "done")
    assert [r["seq"] for r in got[0]] == [1] and got[1] == [] and got[2] == []
    assert [r["event"] for r in got[-1]] == ["done"]
    # An ended run with nothing after the cursor ends at once.
    assert [rows async for rows in store.follow("s", "r", after_seq=2, idle=0.05)] == []


def test_bad_file_store_settings(tmp_path):
    with pytest.raises(ValueError, match="poll must be a positive"):
        FileStore(tmp_path, poll=0)
    with pytest.raises(ValueError, match="fsync policy"):
        FileStore(tmp_path, fsync="sometimes")
    assert "FileStore(" in repr(FileStore(Path(tmp_path)))


@pytest.mark.asyncio
async def test_follow_from_past_the_end_of_a_live_run_ends_with_the_run(tmp_path):
    store = FileStore(tmp_path, poll=0.01)
    store.append("s", "r", "token", {"text": "a"})
    got = await follow_a_live_run(store, 99, 2, "token", "done")  # nothing comes after seq 99, but the run ends
    assert got == [[], []]


def test_tail_from_past_the_end_of_a_live_run_exits_when_it_ends(tmp_path, capsys):
    store = FileStore(tmp_path)
    store.append("s1", "r1", "token", {"text": "a"})
    threading.Timer(0.3, lambda: store.append("s1", "r1", "done", {})).start()
    argv = ["tail", "s1", "r1", "--session-dir", str(tmp_path), "--after-seq", "50", "--poll", "0.01"]
    assert cli_main([*argv, "--timeout", "10"]) == 0
    assert capsys.readouterr().out == ""
