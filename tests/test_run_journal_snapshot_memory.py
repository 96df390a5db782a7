"""The live snapshot folds a run as it streams it from the store: memory per request is bounded by a
page of rows (and the answer itself), never by the run. Against a real server process on loopback."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from journal_load import ServerProcess, get_json

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


@pytest.mark.asyncio
async def test_sixty_snapshots_of_a_ten_mb_run_in_bounded_memory(tmp_path):
    rows = tool_heavy_run(tmp_path, "big", 10_000_000)
    with ServerProcess(tmp_path) as srv:
        idle = srv.memory_kib()["VmRSS"]
        async with aiohttp.ClientSession(base_url=srv.url, timeout=TIMEOUT) as client:
            results = await asyncio.gather(*(get_json(client, "/runs/big", timeout=120) for _ in range(60)))
            peak = srv.memory_kib()["VmHWM"]
    assert {status for status, _ in results} == {200}
    assert {(s["event_count"], s["terminal_state"], s["last_assistant_text"]) for _, s in results} == {
        (rows, "completed", f"step {rows - 3} ")
    }
    assert peak - idle < 40 * 1024, f"server grew by {(peak - idle) / 1024:.0f} MiB"
