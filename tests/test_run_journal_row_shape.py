# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""A line that parses and carries a seq, but is not a row as the writers lay them out, is damage like any other.

It takes no seq, is never served, never counted in a summary, and is reported under ``malformed``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from redis_support import journal_store, redis_server  # noqa: F401 - fixtures used by name

from relay_runtime.integrations.run_journal import FileStore, read_run_events

_GOOD = {
    "version": 1, "event_id": "r:{seq}", "seq": 0, "run_id": "r", "session_id": "s", "event": "token",
    "type": "token", "created_at": 1.5, "terminal": False, "terminal_state": None, "payload": {"text": "x"},
}  # fmt: skip


def _row(seq: int, **changes: Any) -> dict[str, Any]:
    row = {**_GOOD, "seq": seq, "event_id": f"r:{seq}", **changes}
    return {key: value for key, value in row.items() if value is not _DROP}


_DROP = object()

# Each: a row the writer would never write, and the reason a reader gives.
_WRONG = [
    ({"event": 5}, "event"),
    ({"type": "done"}, "type"),
    ({"payload": _DROP}, "payload"),
    ({"created_at": "yesterday"}, "created_at"),
    ({"terminal": "no"}, "terminal"),
    ({"terminal_state": "finished"}, "terminal_state"),
    ({"terminal": True}, "terminal"),  # says it ends the run, names no state
    ({"run_id": ["r"]}, "run_id"),
    ({"session_id": None}, "session_id"),
    ({"event_id": "r:999"}, "event_id"),
    ({"version": "1"}, "version"),
]


def _inject(store: Any, seq: int, row: dict[str, Any]) -> None:
    """Store ``row`` where the run's row ``seq`` would go, as a foreign writer (or a hand edit) would."""
    line = json.dumps(row, separators=(",", ":"))
    if isinstance(store, FileStore):
        with open(Path(store.session_dir) / "_run_journal" / "s" / "r.jsonl", "a") as f:
            f.write(line + "\n")
        return
    store.client.xadd(store.keys.stream("s", "r"), {"r": line}, id=f"{seq}-0")
    store.client.hset(store.keys.meta("s", "r"), "seq", seq)


@pytest.mark.parametrize(("change", "field"), _WRONG, ids=[field for _, field in _WRONG])
def test_a_row_of_the_wrong_shape_is_damage_on_every_store(journal_store, change, field):
    journal_store.append("s", "r", "token", {"text": "a"})
    _inject(journal_store, 2, _row(2, **change))
    result = read_run_events("s", "r", store=journal_store)
    assert [row["seq"] for row in result["events"]] == [1]
    assert len(result["malformed"]) == 1 and field in result["malformed"][0]["reason"], result["malformed"]
    summary = journal_store.summary("s", "r")
    assert (summary["event_count"], summary["last_seq"], summary["last_event"]) == (1, 1, "token")
    assert summary["terminal"] is False
    # Followers are not sent it either; the run's end still ends them.
    last = journal_store.append("s", "r", "done", {})
    if isinstance(journal_store, FileStore):
        assert last["seq"] == 2  # the damage took no seq
    got = asyncio.run(asyncio.wait_for(_followed(journal_store), 10))
    assert got == [1, last["seq"]]


async def _followed(store: Any) -> list[int]:
    seqs: list[int] = []
    async for rows in store.follow("s", "r", idle=1.0):
        seqs += [row["seq"] for row in rows]
    return seqs


def test_a_damaged_row_with_a_high_seq_does_not_advance_the_file_stores_seq(tmp_path):
    store = FileStore(tmp_path)
    store.append("s", "r", "token", {"text": "a"})
    _inject(store, 50, _row(50, payload=_DROP))
    assert store.append("s", "r", "token", {"text": "b"})["seq"] == 2
    # A new process (nothing cached) seeds from the file the same way.
    _inject(store, 70, _row(70, created_at=None))
    from relay_runtime.integrations.run_journal.storage import OPEN_FILES

    OPEN_FILES.after_fork()
    assert store.append("s", "r", "done", {})["seq"] == 3
    assert [row["seq"] for row in store.read("s", "r")["events"]] == [1, 2, 3]
    assert [row["seq"] for row in store.read("s", "r", after_seq=2)["events"]] == [3]


def test_a_damaged_line_laid_out_like_a_row_does_not_move_a_cursor(tmp_path):
    # The cursor is found backwards from the end by each line's first bytes: a damaged line whose
    # seq is low must not be taken for the place the cursor stands, skipping the rows before it.
    store = FileStore(tmp_path)
    for i in range(5):
        store.append("s", "r", "token", {"text": str(i)})
    _inject(store, 1, _row(1, event=None))
    store.append("s", "r", "token", {"text": "5"})
    assert [row["seq"] for row in store.read("s", "r", after_seq=3)["events"]] == [4, 5, 6]


@pytest.mark.parametrize("created_at", ["2026-01-01", float("nan"), True, [1]])
def test_the_writers_refuse_a_created_at_that_readers_would_take_for_damage(journal_store, created_at):
    with pytest.raises(ValueError, match="created_at must be a finite number"):
        journal_store.append("s", "r", "token", {}, created_at=created_at)
    assert journal_store.append("s", "r", "token", {}, created_at=7)["seq"] == 1
    assert read_run_events("s", "r", store=journal_store)["events"][0]["created_at"] == 7
