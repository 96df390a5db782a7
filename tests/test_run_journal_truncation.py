"""A run file cut to nothing (a crash or a full disk while it was rewritten, an operator's ``: > file``) or
removed and started again: seq never goes backwards, so a client resuming after its cursor misses nothing
and sees nothing twice; readers report the rows that were lost."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from test_run_journal_http import TIMEOUT, read_sse, rows_only

from relay_runtime.integrations.run_journal import RunJournalWriter, append_run_event, read_run_events
from relay_runtime.integrations.run_journal.routes import create_app
from relay_runtime.integrations.run_journal.storage import OPEN_FILES


def _path(tmp_path: Path) -> Path:
    return tmp_path / "_run_journal" / "session-a" / "run-a.jsonl"


def _append_in_another_process(tmp_path: Path, event: str) -> int:
    code = (
        "import sys; from relay_runtime.integrations.run_journal import append_run_event; "
        "print(append_run_event('session-a', 'run-a', sys.argv[2], {}, session_dir=sys.argv[1])['seq'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), event], capture_output=True, text=True, timeout=60, check=True
    )
    return int(done.stdout)


@pytest.mark.parametrize("cut", ["truncated", "removed"])
@pytest.mark.asyncio
async def test_a_client_resuming_across_a_cut_run_file_gets_exactly_the_new_rows(tmp_path, cut):
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    for i in range(3):
        writer.append_sse_event("token", {"text": f"t{i}"})
    srv = TestServer(create_app(session_dir=tmp_path, poll_interval=0.01, heartbeat=0.2), host="127.0.0.1")
    await srv.start_server()
    try:
        async with aiohttp.ClientSession(base_url=srv.make_url(""), timeout=TIMEOUT) as client:
            live = await client.get("/runs/run-a/events")
            assert [m["id"] for m in rows_only(await read_sse(live, limit=3))] == [f"run-a:{n}" for n in (1, 2, 3)]
            if cut == "truncated":
                with open(_path(tmp_path), "r+b") as f:
                    f.truncate(0)
            else:
                os.unlink(_path(tmp_path))
            assert writer.append_sse_event("token", {"text": "t3"})["seq"] == 4
            OPEN_FILES.after_fork()  # as a restarted process: nothing of the run remembered
            assert append_run_event("session-a", "run-a", "token", {"text": "t4"}, session_dir=tmp_path)["seq"] == 5
            assert await asyncio.to_thread(_append_in_another_process, tmp_path, "done") == 6
            # The client that stayed, and one that reconnects with the last id it had, get 4, 5, 6 once each.
            stayed = [m["id"] for m in rows_only(await read_sse(live))]
            resumed = await client.get("/runs/run-a/events", headers={"Last-Event-ID": "run-a:3"})
            again = [m["id"] for m in rows_only(await read_sse(resumed))]
            assert stayed == again == ["run-a:4", "run-a:5", "run-a:6"]
            snapshot = await (await client.get("/runs/run-a")).json()
            assert (snapshot["last_seq"], snapshot["terminal"], snapshot["malformed_count"]) == (6, True, 1)
    finally:
        await srv.close()
    # A reader from the start is told what is gone rather than shown a run that starts at 4.
    result = read_run_events("session-a", "run-a", session_dir=tmp_path)
    assert [row["seq"] for row in result["events"]] == [4, 5, 6]
    assert [entry["reason"] for entry in result["malformed"]] == ["rows 1-3 are missing"]


def test_a_follower_notices_a_cut_even_when_the_file_grew_back_past_where_it_was(tmp_path):
    # Cut and written again before the follower looks: the size alone no longer shows it.
    from relay_runtime.integrations.run_journal import FileStore

    store = FileStore(tmp_path, poll=0.01)
    for _ in range(3):
        store.append("session-a", "run-a", "token", {"text": "short"})

    async def follow() -> list[int]:
        seqs: list[int] = []
        async for rows in store.follow("session-a", "run-a", idle=1.0):
            seqs += [row["seq"] for row in rows]
            if seqs == [1, 2, 3]:
                with open(_path(tmp_path), "r+b") as f:
                    f.truncate(0)
                for _ in range(3):
                    store.append("session-a", "run-a", "token", {"text": "longer than the rows it replaced " * 3})
                store.append("session-a", "run-a", "done", {})
        return seqs

    assert asyncio.run(asyncio.wait_for(follow(), 10)) == [1, 2, 3, 4, 5, 6, 7]
