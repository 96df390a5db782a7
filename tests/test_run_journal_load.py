"""The journal under large rows and load, against a real server process on loopback (every wait bounded).

Reads that could spin run in a child process with a timeout, so a regression fails the test
instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import aiohttp
import pytest
from journal_load import ServerProcess, closed_by_peer, get_json, replay, stalled_reader, write_run
from journal_support import run_turn

from relay_runtime import session
from relay_runtime.integrations.run_journal import FileStore, JournalSubscriber, RunJournalWriter, read_run_events
from relay_runtime.integrations.run_journal import storage as storage_module

TIMEOUT = aiohttp.ClientTimeout(total=120)
MiB = 1024 * 1024


def run_python(code: str, timeout: float = 60.0) -> dict:
    """Run ``code`` (which prints one JSON line last) in a child process; fail, never hang, past ``timeout``."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the read did not finish in {timeout}s")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def large_row_run(tmp_path: Path) -> Path:
    """A run with a 1.2 MB tool argument written by the subscriber, then a 4 MB row torn by a crash, then more."""
    session.reset_for_tests()

    def body() -> None:
        relay = session.active_turn().relay  # type: ignore[union-attr]
        relay.tools.execute("write_file", {"content": "y" * 1_200_000}, lambda args: {"ok": True})

    run_turn(tmp_path, body)  # status, tool (1.2 MB), tool_result, done
    session.reset_for_tests()
    path = tmp_path / "_run_journal" / "session-a" / "run-a.jsonl"
    with open(path, "ab") as f:  # a crash in the middle of a 4 MB row
        f.write(b'{"version":1,"event_id":"run-a:5","seq":5,"run_id":"run-a","payload":{"text":"' + b"z" * 4 * MiB)
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "after the crash"})  # seq 5, on a fresh line
    writer.append_sse_event("done", {})  # seq 6
    return path


def test_rows_of_any_size_are_read_after_every_cursor(tmp_path):
    large_row_run(tmp_path)
    got = run_python(
        f"""
        import json
        from relay_runtime.integrations.run_journal import latest_run_summary, read_run_events
        out = {{}}
        for cursor in range(8):
            r = read_run_events("session-a", "run-a", after_seq=cursor, session_dir={str(tmp_path)!r})
            out[cursor] = [[e["seq"] for e in r["events"]], [m["reason"] for m in r["malformed"]]]
        s = latest_run_summary("session-a", "run-a", session_dir={str(tmp_path)!r})
        out["summary"] = [s["event_count"], s["last_seq"], s["terminal_state"]]
        print(json.dumps(out))
        """
    )
    torn = ["invalid JSON"]  # the torn row, ended by the next writer's newline
    assert got["0"] == [[1, 2, 3, 4, 5, 6], torn]
    assert got["1"] == [[2, 3, 4, 5, 6], torn]
    assert got["2"] == [[3, 4, 5, 6], torn]
    assert got["4"] == [[5, 6], torn]
    assert got["5"] == [[6], []]
    assert got["6"] == got["7"] == [[], []]
    assert got["summary"] == [6, 6, "completed"]
    rows = read_run_events("session-a", "run-a", session_dir=tmp_path)["events"]
    assert rows[1]["event"] == "tool" and len(rows[1]["payload"]["args"]["content"]) == 1_200_000


def test_a_torn_row_beyond_the_cap_is_skipped_not_held(tmp_path):
    store = FileStore(tmp_path, max_row_bytes=64 * 1024)
    store.append("s", "r", "token", {"text": "a"})
    path = tmp_path / "_run_journal" / "s" / "r.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"version":1,"event_id":"r:2","seq":2,"payload":"' + b"q" * 3 * MiB)
    result = store.read("s", "r")
    assert [row["seq"] for row in result["events"]] == [1]
    assert [m["reason"] for m in result["malformed"]] == ["torn last line (row longer than 65536 bytes)"]
    assert result["malformed"][0]["text"] == ""  # nothing of it was kept
    store.append("s", "r", "done", {})  # the next append starts a fresh line
    for cursor in (0, 1, 2):
        got = store.read("s", "r", after_seq=cursor)
        assert [row["seq"] for row in got["events"]] == [s for s in (1, 2) if s > cursor]
        assert [m["reason"] for m in got["malformed"]] == (["row longer than 65536 bytes"] if cursor < 2 else [])
    summary = store.summary("s", "r")
    assert summary is not None and (summary["event_count"], summary["terminal_state"]) == (2, "completed")


def test_the_writer_truncates_rows_over_the_cap_with_a_marker(tmp_path, monkeypatch):
    store = FileStore(tmp_path, max_row_bytes=64 * 1024)
    before = storage_module.COUNTS["journal.truncated"]
    big = {"type": "tool_limit_reached", "name": "dump", "blob": "é" * 40_000}  # 80 KB encoded
    row = store.append("s", "r", "done", big)
    payload = row["payload"]
    encoded = json.dumps(big, ensure_ascii=False, separators=(",", ":")).encode()
    assert payload["truncated"] is True and payload["original_bytes"] == len(encoded)
    assert payload["max_row_bytes"] == 64 * 1024 and payload["preview"].startswith('{"type":"tool_limit_reached"')
    assert (payload["type"], payload["name"], "blob" not in payload) == ("tool_limit_reached", "dump", True)
    assert row["terminal_state"] == "tool_limit_reached"
    assert storage_module.COUNTS["journal.truncated"] == before + 1
    line = (tmp_path / "_run_journal" / "s" / "r.jsonl").read_bytes()
    assert len(line) <= 64 * 1024 and json.loads(line) == row
    assert store.read("s", "r")["events"] == [row]
    summary = store.summary("s", "r")
    assert summary is not None and summary["terminal_state"] == "tool_limit_reached"
    # Just under the cap is stored whole.
    fits = store.append("s", "r", "token", {"text": "a" * (60 * 1024)})
    assert fits["payload"] == {"text": "a" * (60 * 1024)}
    # The cap is configurable, also through the environment; nonsense is refused.
    monkeypatch.setenv(storage_module.MAX_ROW_ENV, "20000")
    assert FileStore(tmp_path).max_row_bytes == 20000
    monkeypatch.setenv(storage_module.MAX_ROW_ENV, "lots")
    with pytest.raises(ValueError, match="RELAY_JOURNAL_MAX_ROW_BYTES must be a whole number"):
        FileStore(tmp_path)
    with pytest.raises(ValueError, match="max_row_bytes must be an integer of at least 16384"):
        FileStore(tmp_path, max_row_bytes=100)
    with pytest.raises(ValueError, match="event names are at most 256 characters"):
        store.append("s", "r", "e" * 300, {})


def test_the_subscriber_counts_what_it_stored_truncated(tmp_path, monkeypatch):
    monkeypatch.setenv(storage_module.MAX_ROW_ENV, str(64 * 1024))
    session.reset_for_tests()

    def body() -> None:
        relay = session.active_turn().relay  # type: ignore[union-attr]
        relay.tools.execute("write_file", {"content": "y" * 1_200_000}, lambda args: {"ok": True})

    result = run_turn(tmp_path, body)
    session.reset_for_tests()
    assert result.names == ["status", "tool", "tool_result", "done"]  # nothing dropped
    tool = result.payloads("tool")[0]
    assert tool["truncated"] is True and tool["name"] == "write_file" and tool["original_bytes"] > 1_200_000
    assert result.diagnostics["journal.truncated"] == 1
    assert isinstance(result.subscriber, JournalSubscriber) and result.subscriber.counts["journal.truncated"] == 1


@pytest.mark.asyncio
async def test_sse_and_snapshot_serve_large_rows_and_the_server_stops(tmp_path):
    large_row_run(tmp_path)
    with ServerProcess(tmp_path) as srv:
        async with aiohttp.ClientSession(base_url=srv.url, timeout=TIMEOUT) as client:
            stream = asyncio.create_task(replay(client, "/runs/run-a/events?after_seq=1", timeout=60))
            status, snapshot = await get_json(client, "/runs/run-a", timeout=20)  # not stalled by the stream
            assert status == 200 and snapshot["terminal_state"] == "completed" and snapshot["malformed_count"] == 1
            got = await stream
            assert (got.status, got.messages, got.last_id) == (200, 5, "run-a:6")
            assert got.bytes > 1_200_000
            status, stats = await get_json(client, "/stats")
            assert stats["sse_completed"] == 1 and stats["sse_open"] == 0
        assert srv.stop(timeout=20) == 0  # SIGTERM is honoured: nothing is left spinning


@pytest.mark.asyncio
async def test_twenty_clients_replay_a_large_run_in_bounded_memory(tmp_path):
    rows = write_run(tmp_path, "big", 4_000_000)
    with ServerProcess(tmp_path) as srv:
        idle = srv.memory_kib()["VmRSS"]
        async with aiohttp.ClientSession(base_url=srv.url, timeout=TIMEOUT) as client:
            results = await asyncio.gather(*(replay(client, "/runs/big/events", timeout=120) for _ in range(20)))
            assert {(r.status, r.messages, r.last_id) for r in results} == {(200, rows, f"big:{rows}")}
            peak = srv.memory_kib()["VmHWM"]
            _, stats = await get_json(client, "/stats")
    assert stats["sse_completed"] == 20
    # Every client was sent the whole 4 MB run; the server held pieces of it, not copies.
    assert peak - idle < 60 * 1024, f"server grew by {(peak - idle) / 1024:.0f} MiB"


@pytest.mark.asyncio
async def test_stalled_readers_are_dropped_after_the_write_timeout(tmp_path):
    rows = write_run(tmp_path, "big", 10_000_000)
    with ServerProcess(tmp_path, write_timeout=1.0) as srv:
        idle = srv.memory_kib()["VmRSS"]
        stalled = [stalled_reader(srv.url, "/runs/big/events") for _ in range(40)]
        try:
            async with aiohttp.ClientSession(base_url=srv.url, timeout=TIMEOUT) as client:
                # A reader that does read is served meanwhile.
                got = await replay(client, "/runs/big/events", timeout=60)
                assert (got.messages, got.last_id) == (rows, f"big:{rows}")
                deadline = time.monotonic() + 60
                stats: dict = {}
                while time.monotonic() < deadline:
                    _, stats = await get_json(client, "/stats")
                    if stats.get("sse_dropped_slow", 0) == 40:
                        break
                    await asyncio.sleep(0.2)
                assert stats.get("sse_dropped_slow") == 40 and stats.get("sse_open") == 0, stats
            peak = srv.memory_kib()["VmHWM"]
            assert all(closed_by_peer(sock) for sock in stalled)
        finally:
            for sock in stalled:
                sock.close()
    assert peak - idle < 60 * 1024, f"server grew by {(peak - idle) / 1024:.0f} MiB"


@pytest.mark.asyncio
async def test_sigterm_stops_a_server_with_live_and_stalled_streams(tmp_path):
    write_run(tmp_path, "live", 2_000_000, done=False)  # a run that never ends: its streams never end either
    with ServerProcess(tmp_path) as srv:
        stalled = [stalled_reader(srv.url, "/runs/live/events") for _ in range(3)]
        try:
            async with aiohttp.ClientSession(base_url=srv.url, timeout=TIMEOUT) as client:
                resp = await client.get("/runs/live/events")
                assert (await asyncio.wait_for(resp.content.readline(), 10)).startswith(b"id: live:1")
                await asyncio.sleep(0.5)
                started = time.monotonic()
                assert await asyncio.to_thread(srv.stop, 20) == 0
                assert time.monotonic() - started < 10
        finally:
            for sock in stalled:
                sock.close()


def test_writers_with_different_caps_share_one_sequence(tmp_path):
    big = FileStore(tmp_path, max_row_bytes=2 * MiB)
    small = FileStore(tmp_path, max_row_bytes=64 * 1024)
    big.append("s", "r", "token", {"text": "a"})
    big.append("s", "r", "tool", {"args": "x" * MiB})  # whole under its writer's cap
    row = small.append("s", "r", "token", {"text": "b"})
    assert row["seq"] == 3  # not 2: the long row was seen although it is over this writer's cap
    # A long torn line at the end is passed over to the last valid row, read once.
    path = tmp_path / "_run_journal" / "s" / "r.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"version":1,"event_id":"r:4","seq":4,' + b"g" * 20 * MiB)
    started = time.monotonic()
    assert RunJournalWriter("s", "r", session_dir=tmp_path).append_sse_event("done", {})["seq"] == 4
    assert time.monotonic() - started < 5
    assert [r["seq"] for r in big.read("s", "r")["events"]] == [1, 2, 3, 4]
