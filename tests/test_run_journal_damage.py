"""Journals damaged by a crash or by hand: what every reader makes of them (rows neither lost nor invented)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from relay_runtime.integrations.run_journal import append_run_event, latest_run_summary, read_run_events
from relay_runtime.integrations.run_journal.store import FileStore


def _run_file(tmp_path: Path) -> Path:
    return tmp_path / "_run_journal" / "s" / "r.jsonl"


async def _followed(store: FileStore, after_seq: int = 0) -> list[int]:
    seqs: list[int] = []
    async for rows in store.follow("s", "r", after_seq=after_seq, idle=1.0):
        seqs += [row["seq"] for row in rows]
    return seqs


def test_follow_sends_a_whole_last_row_that_lost_its_newline(tmp_path):
    # A short write (full disk) or a cut at the newline: the terminal row is whole, only its "\n" is gone.
    append_run_event("s", "r", "token", {"text": "a"}, session_dir=tmp_path)
    append_run_event("s", "r", "done", {}, session_dir=tmp_path)
    path = _run_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-1])
    assert [row["seq"] for row in read_run_events("s", "r", session_dir=tmp_path)["events"]] == [1, 2]
    assert latest_run_summary("s", "r", session_dir=tmp_path)["terminal"] is True  # type: ignore[index]
    store = FileStore(tmp_path, poll=0.01)
    # The replay must carry the terminal row the summary reports, not end without it.
    assert asyncio.run(asyncio.wait_for(_followed(store), 5)) == [1, 2]
    assert asyncio.run(asyncio.wait_for(_followed(store, after_seq=1), 5)) == [2]
    # The next writer starts on a fresh line; followers see each row once.
    append_run_event("s", "r", "stream_end", {}, session_dir=tmp_path)
    assert asyncio.run(asyncio.wait_for(_followed(store), 5)) == [1, 2, 3]
    assert [row["seq"] for row in read_run_events("s", "r", session_dir=tmp_path)["events"]] == [1, 2, 3]
