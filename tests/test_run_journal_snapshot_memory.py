# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""The live snapshot folds a run as it streams it from the store: memory per request is bounded by a
page of rows (and the answer itself), never by the run. Against a real server process on loopback."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from journal_load import ServerProcess, get_json, write_run
from redis_support import inject_junk, journal_store, own_redis_server, redis_server  # noqa: F401 - fixtures used by name

from relay_runtime.integrations.run_journal import RunJournalWriter

TIMEOUT = aiohttp.ClientTimeout(total=120)


def tool_heavy_run(session_dir, run_id: str, total_bytes: int) -> int:
    """A 10 MB run of tool rows and little assistant text: its snapshot is small, its rows are not."""
    writer = RunJournalWriter("load", run_id, session_dir=session_dir)
    rows = 0
    while rows * 1000 < total_bytes:
        writer.append_sse_event("tool_call", {"name": "write_file", "arguments": {"text": "y" * 700}})
        writer.append_sse_event("token", {"text": f"step {rows} "})
        rows += 2
    writer.append_sse_event("done", {})
    return rows + 1


async def sixty_snapshots(session_dir) -> tuple[list[dict], int]:
    """Sixty concurrent snapshots of run ``big`` from a server process: the answers, and how much it grew (KiB)."""
    with ServerProcess(session_dir) as srv:
        idle = srv.memory_kib()["VmRSS"]
        async with aiohttp.ClientSession(base_url=srv.url, timeout=TIMEOUT) as client:
            results = await asyncio.gather(*(get_json(client, "/runs/big", timeout=120) for _ in range(60)))
            peak = srv.memory_kib()["VmHWM"]
    assert {status for status, _ in results} == {200}
    return [snapshot for _, snapshot in results], peak - idle


@pytest.mark.asyncio
async def test_sixty_snapshots_of_a_ten_mb_run_in_bounded_memory(tmp_path):
    rows = tool_heavy_run(tmp_path, "big", 10_000_000)
    results, grew = await sixty_snapshots(tmp_path)
    assert {(s["event_count"], s["terminal_state"], s["last_assistant_text"]) for s in results} == {
        (rows, "completed", f"step {rows - 3} ")
    }
    # Before the fold streamed, two snapshots at a time held the whole run each: ~50 MiB.
    assert grew < 20 * 1024, f"server grew by {grew / 1024:.0f} MiB"


@pytest.mark.asyncio
async def test_sixty_snapshots_of_a_run_with_ten_mb_of_text_hold_the_text_about_once(tmp_path):
    rows = write_run(tmp_path, "big", 10_000_000)  # token rows: the last assistant text is ~7.7 MB
    results, grew = await sixty_snapshots(tmp_path)
    text_sizes = {len(s["last_assistant_text"]) for s in results}
    assert {s["event_count"] for s in results} == {rows} and text_sizes == {(rows - 1) * 770}
    # Before, each answer was encoded whole and left in its transport's buffer: ~540 MiB for 60.
    assert grew < 120 * 1024, f"server grew by {grew / 1024:.0f} MiB"  # after: 50-80 MiB (6 answers in flight)


def mixed_rows(store, run_id: str = "run-a") -> None:
    for i in range(700):  # more than one page of the file store and several windows of any other store
        store.append("session-a", run_id, "token", {"text": f"t{i} " + "z" * 200})
        if i % 97 == 0:
            store.append("session-a", run_id, "tool_call", {"name": "x"})
        if i == 300:
            store.append(
                "session-a",
                run_id,
                "runtime_model",
                {
                    "session_id": "session-a",
                    "stream_id": run_id,
                    "model": "m",
                    "provider": "p",
                    "fallback_active": False,
                    "phase": "observed_output",
                },
            )
    store.append("session-a", run_id, "done", {"terminal_state": "tool_limit_reached"})


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_the_paged_snapshot_equals_the_snapshot_of_the_whole_run(tmp_path, kind):
    from journal_support import MemoryStore

    from relay_runtime.integrations.run_journal import FileStore, routes
    from relay_runtime.integrations.run_journal.store import PagedStore

    store = FileStore(tmp_path, page_bytes=4096) if kind == "file" else MemoryStore()
    assert isinstance(store, PagedStore) == (kind == "file")
    mixed_rows(store)
    if kind == "file":  # garbage and a torn last line are counted as malformed, as a whole read counts them
        path = tmp_path / "_run_journal" / "session-a" / "run-a.jsonl"
        with open(path, "ab") as f:
            f.write(b"not json\n[1]\n" + b'{"version":1,"seq":')
    whole = routes._project("session-a", "run-a", store.read("session-a", "run-a"))
    if kind == "memory":  # a store without pages is read in windows of seqs, never whole (nor summarized)
        windows: list[int] = []
        read = store.read
        store.read = lambda *a, **k: (w := read(*a, **k), windows.append(len(w["events"])))[0]  # type: ignore[method-assign]
        store.summary = None  # type: ignore[assignment,method-assign]
    paged = routes._live_snapshot(store, "run-a", None)
    assert paged == whole
    if kind == "memory":
        assert max(windows) == 128 and sum(windows) == whole["event_count"]
    assert whole["event_count"] > 700 and whole["terminal_state"] == "tool_limit_reached"
    assert whole["runtime_model"] is not None and whole["last_assistant_text"].startswith("t680 ")  # tool call at 679
    assert whole["malformed_count"] == (3 if kind == "file" else 0)
    assert routes._live_snapshot(store, "no-such-run", None) is None
    assert routes._live_snapshot(store, "no-such-run", "session-a") is None


def test_the_snapshot_is_folded_page_by_page_on_every_store(journal_store):
    from relay_runtime.integrations.run_journal import routes

    mixed_rows(journal_store)
    inject_junk(journal_store, "session-a", "run-a", "not a row")
    whole = routes._project("session-a", "run-a", journal_store.read("session-a", "run-a"))
    assert routes._live_snapshot(journal_store, "run-a", None) == whole
    assert whole["malformed_count"] == 1 and whole["terminal_state"] == "tool_limit_reached"


async def _first_bytes(client: aiohttp.ClientSession, path: str) -> int:
    """Open an SSE stream, wait for its head (the server has looked the run up), and leave."""
    async with client.get(path) as resp:
        return resp.status


@pytest.mark.asyncio
async def test_sse_streams_opened_on_a_live_redis_run_do_not_each_read_the_whole_run(own_redis_server, tmp_path):
    from relay_runtime.integrations.run_journal import RedisStreamStore

    store = RedisStreamStore(own_redis_server.url)
    try:
        rows = [
            store.prepare("load", "live", "tool_call", {"name": "w", "arguments": {"text": "y" * 900}})
            for _ in range(10_000)
        ]
        for start in range(0, len(rows), 500):
            store.append_many(rows[start : start + 500])
        last = store.run_stats("load", "live")["seq"]
    finally:
        store.close()
    env = {"RELAY_JOURNAL_URL": own_redis_server.url}
    with ServerProcess(None, env=env, heartbeat=60) as srv:
        idle = srv.memory_kib()["VmRSS"]
        async with aiohttp.ClientSession(base_url=srv.url, timeout=TIMEOUT) as client:
            # Reconnects at the end of a live 11 MB run: nothing to replay, and the run has no end row.
            path = f"/runs/live/events?session_id=load&after_seq={last}"
            statuses = await asyncio.gather(*(_first_bytes(client, path) for _ in range(24)))
            peak = srv.memory_kib()["VmHWM"]
    assert set(statuses) == {200}
    grew = peak - idle
    # Before, each stream's lookup read the whole run from Redis at once (~40 MiB each, six at a time):
    # the server grew by some 200 MiB; folded 128 KiB at a time, by a few.
    assert grew < 30 * 1024, f"server grew by {grew / 1024:.0f} MiB"
