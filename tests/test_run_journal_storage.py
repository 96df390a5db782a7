"""Run journal storage: row format, seq across threads/processes/crashes, torn lines, ids, fsync."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from relay_runtime.integrations import run_journal
from relay_runtime.integrations.run_journal import (
    RunJournalWriter,
    append_run_event,
    latest_run_summary,
    read_run_events,
    storage,
)
from relay_runtime.integrations.run_journal import journal as journal_module
from relay_runtime.integrations.run_journal import paths as paths_module

REPO = Path(__file__).resolve().parents[1]


def rows_of(tmp_path: Path, session_id: str = "s", run_id: str = "r") -> list[dict[str, Any]]:
    return read_run_events(session_id, run_id, session_dir=tmp_path)["events"]


def seqs(tmp_path: Path, session_id: str = "s", run_id: str = "r") -> list[int]:
    return [row["seq"] for row in rows_of(tmp_path, session_id, run_id)]


# --- rows and files ---------------------------------------------------------------------------------


def test_row_shape_file_layout_and_encoding(tmp_path):
    row = append_run_event("sess-1", "run.1", "token", {"text": "héllo ✓\u2028next"}, session_dir=tmp_path)
    path = tmp_path / "_run_journal" / "sess-1" / "run.1.jsonl"
    assert run_journal._run_path("sess-1", "run.1", session_dir=tmp_path) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    raw = path.read_bytes()
    # Compact UTF-8, not ASCII-escaped, one line; U+2028 inside a string does not split the row.
    assert "héllo ✓".encode() in raw and b"\\u00e9" not in raw and b", " not in raw
    assert raw.count(b"\n") == 1 and raw.endswith(b"\n")
    assert json.loads(raw) == row
    assert row == {
        "version": 1,
        "event_id": "run.1:1",
        "seq": 1,
        "run_id": "run.1",
        "session_id": "sess-1",
        "event": "token",
        "type": "token",
        "created_at": row["created_at"],
        "terminal": False,
        "terminal_state": None,
        "payload": {"text": "héllo ✓\u2028next"},
    }
    assert abs(row["created_at"] - time.time()) < 60
    assert rows_of(tmp_path, "sess-1", "run.1") == [row]


def test_none_payload_explicit_created_at_and_bad_events(tmp_path):
    row = append_run_event("s", "r", "status", None, session_dir=tmp_path, created_at=12.5)
    assert row["payload"] == {} and row["created_at"] == 12.5
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="event must be a non-empty string"):
            append_run_event("s", "r", bad, {}, session_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="payload is not JSON-serializable"):
        append_run_event("s", "r", "token", {"x": object()}, session_dir=tmp_path)
    with pytest.raises(TypeError, match="payload is not JSON-serializable"):
        append_run_event("s", "r", "token", {"x": float("nan")}, session_dir=tmp_path)
    # Nothing half-written by the refused appends.
    assert seqs(tmp_path) == [1]
    assert read_run_events("s", "r", session_dir=tmp_path)["malformed"] == []


def test_explicit_seq_is_a_conditional_append(tmp_path):
    assert append_run_event("s", "r", "token", {}, session_dir=tmp_path, seq=1)["seq"] == 1
    with pytest.raises(ValueError, match="seq 5 is not the run's next seq 2"):
        append_run_event("s", "r", "token", {}, session_dir=tmp_path, seq=5)
    with pytest.raises(ValueError, match="seq must be a positive integer"):
        append_run_event("s", "r", "token", {}, session_dir=tmp_path, seq=0)
    assert append_run_event("s", "r", "token", {}, session_dir=tmp_path, seq=2)["seq"] == 2
    assert seqs(tmp_path) == [1, 2]


def test_default_session_dir_is_looked_up_on_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(run_journal, "_default_session_dir", lambda: tmp_path / "elsewhere")
    RunJournalWriter("s", "r").append_sse_event("token", {"text": "x"})
    assert (tmp_path / "elsewhere" / "_run_journal" / "s" / "r.jsonl").exists()
    assert read_run_events("s", "r")["events"][0]["payload"] == {"text": "x"}


def test_default_session_dir_follows_relay_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_HOME", str(tmp_path))
    assert run_journal._default_session_dir() == tmp_path / "sessions"
    monkeypatch.delenv("RELAY_HOME")
    assert run_journal._default_session_dir() == Path.home() / ".relay-runtime" / "sessions"


# --- ids --------------------------------------------------------------------------------------------

BAD_IDS = ["../x", "a/b", "", "..", ".", "a\x00b", "x" * 201, "a\nb", "a b", "/abs", "a\\b", None, 7]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_odd_ids_are_rejected_before_touching_disk(tmp_path, monkeypatch, bad):
    def no_paths(_: object) -> Path:
        raise AssertionError("a path was built from an invalid id")

    monkeypatch.setattr(paths_module, "resolve_session_dir", no_paths)
    calls = [
        lambda s, r: append_run_event(s, r, "token", {}, session_dir=tmp_path),
        lambda s, r: RunJournalWriter(s, r, session_dir=tmp_path),
        lambda s, r: read_run_events(s, r, session_dir=tmp_path),
        lambda s, r: read_run_events(s, r, session_dir=tmp_path, after_seq=3),
        lambda s, r: latest_run_summary(s, r, session_dir=tmp_path),
        lambda s, r: run_journal._run_path(s, r, session_dir=tmp_path),
    ]
    for call in calls:
        for session_id, run_id in ((bad, "run"), ("session", bad)):
            with pytest.raises(ValueError, match=r"^invalid session_id/run_id$"):
                call(session_id, run_id)
    assert list(tmp_path.iterdir()) == []


def test_longest_valid_id_is_accepted(tmp_path):
    long_id = "x" * 200
    append_run_event(long_id, long_id, "token", {}, session_dir=tmp_path)
    assert seqs(tmp_path, long_id, long_id) == [1]


# --- torn and malformed lines -----------------------------------------------------------------------


def test_torn_last_line_is_reported_and_the_next_append_starts_fresh(tmp_path):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "a"})
    writer.append_sse_event("token", {"text": "b"})
    path = run_journal._run_path("s", "r", session_dir=tmp_path)
    with open(path, "ab") as f:  # a crash in the middle of row 3
        f.write(b'{"version":1,"event_id":"r:3","seq":3,"run_id":"r","sess')
    result = read_run_events("s", "r", session_dir=tmp_path)
    assert [row["seq"] for row in result["events"]] == [1, 2]
    assert len(result["malformed"]) == 1
    assert result["malformed"][0]["reason"].startswith("torn last line")
    assert result["malformed"][0]["text"].startswith('{"version":1,"event_id":"r:3"')
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None
    assert (summary["event_count"], summary["last_seq"], summary["last_assistant_text"]) == (2, 2, "ab")
    # A fresh writer (as after a restart) continues the sequence on a line of its own.
    third = RunJournalWriter("s", "r", session_dir=tmp_path).append_sse_event("done", {})
    assert third["seq"] == 3
    result = read_run_events("s", "r", session_dir=tmp_path)
    assert [row["seq"] for row in result["events"]] == [1, 2, 3]
    assert [m["reason"] for m in result["malformed"]] == ["invalid JSON"]
    assert read_run_events("s", "r", session_dir=tmp_path, after_seq=2)["events"] == [third]


def test_garbage_lines_are_reported_never_fatal(tmp_path):
    append_run_event("s", "r", "token", {"text": "a"}, session_dir=tmp_path)
    path = run_journal._run_path("s", "r", session_dir=tmp_path)
    with open(path, "ab") as f:
        f.write(b'not json\n["a", "list"]\n{"no": "seq"}\n\xff\xfe\n\n   \n')
    append_run_event("s", "r", "token", {"text": "b"}, session_dir=tmp_path)
    result = read_run_events("s", "r", session_dir=tmp_path)
    assert [row["seq"] for row in result["events"]] == [1, 2]
    assert [m["reason"] for m in result["malformed"]] == [
        "invalid JSON",
        "not a JSON object",
        "row without a positive integer seq",
        "invalid JSON",
    ]
    offsets = [m["offset"] for m in result["malformed"]]
    assert offsets == sorted(offsets) and path.read_bytes()[offsets[0] : offsets[0] + 8] == b"not json"
    after = read_run_events("s", "r", session_dir=tmp_path, after_seq=1)
    assert [row["seq"] for row in after["events"]] == [2]
    assert after["malformed"] == result["malformed"]


def test_file_replaced_under_a_cached_writer(tmp_path):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    writer.append_sse_event("token", {})
    path = run_journal._run_path("s", "r", session_dir=tmp_path)
    path.unlink()
    # The open descriptor points at the removed file; the writer must notice and start a new one,
    # without handing out a seq again (test_run_journal_truncation.py): the lost row is reported.
    assert writer.append_sse_event("token", {})["seq"] == 2
    assert seqs(tmp_path) == [2]
    assert [m["reason"] for m in read_run_events("s", "r", session_dir=tmp_path)["malformed"]] == ["row 1 is missing"]


# --- reading after a cursor -------------------------------------------------------------------------


def test_reads_after_every_cursor_match_a_full_read(tmp_path):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    for i in range(60):
        # Some rows longer than the reader's first block, to cross block boundaries mid-line.
        writer.append_sse_event("token", {"text": ("x" * 20000 if i % 17 == 3 else str(i))})
    full = rows_of(tmp_path)
    for cursor in [0, 1, 2, 3, 4, 5, 16, 20, 21, 37, 58, 59, 60, 61, 1000]:
        got = read_run_events("s", "r", session_dir=tmp_path, after_seq=cursor)
        assert got["events"] == [row for row in full if row["seq"] > cursor], cursor
        assert got["malformed"] == []
    window = read_run_events("s", "r", session_dir=tmp_path, after_seq=10, max_seq=15)["events"]
    assert [row["seq"] for row in window] == [11, 12, 13, 14, 15]
    assert [row["seq"] for row in read_run_events("s", "r", session_dir=tmp_path, max_seq=2)["events"]] == [
        1,
        2,
    ]
    with pytest.raises(ValueError, match="after_seq must be a non-negative integer"):
        read_run_events("s", "r", session_dir=tmp_path, after_seq=-1)
    with pytest.raises(ValueError, match="max_seq must be a non-negative integer"):
        read_run_events("s", "r", session_dir=tmp_path, max_seq="3")  # type: ignore[arg-type]


def test_cursor_read_cost_follows_rows_after_the_cursor(tmp_path, monkeypatch):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    for i in range(5000):
        writer.append_sse_event("token", {"text": f"row {i}"})
    size = run_journal._run_path("s", "r", session_dir=tmp_path).stat().st_size
    read_sizes: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, f: Any) -> None:
            self._f = f

        def read(self, n: int = -1) -> bytes:
            data = self._f.read(n)
            read_sizes.append(len(data))
            return data

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

    monkeypatch.setattr("builtins.open", lambda *a, **k: Counting(real_open(*a, **k)))
    got = read_run_events("s", "r", session_dir=tmp_path, after_seq=4990)["events"]
    assert [row["seq"] for row in got] == list(range(4991, 5001))
    assert sum(read_sizes) < 20000 < size


def test_no_journal_reads_empty(tmp_path):
    assert read_run_events("s", "r", session_dir=tmp_path) == {
        "session_id": "s",
        "run_id": "r",
        "events": [],
        "malformed": [],
    }
    assert read_run_events("s", "r", session_dir=tmp_path, after_seq=4)["events"] == []


# --- summaries and terminal states ------------------------------------------------------------------


@pytest.mark.parametrize(
    "event,payload,state",
    [
        ("done", {}, "completed"),
        ("stream_end", {}, "completed"),
        ("done", {"type": "tool_limit_reached"}, "tool_limit_reached"),
        ("done", {"tool_limit_reached": True}, "tool_limit_reached"),
        ("cancel", {}, "interrupted-by-user"),
        ("apperror", {"type": "tool_limit_reached"}, "tool_limit_reached"),
        ("error", {"type": "cancelled"}, "interrupted-by-user"),
        ("apperror", {"type": "canceled"}, "interrupted-by-user"),
        ("apperror", {"type": "interrupted"}, "interrupted-by-crash"),
        ("apperror", {"type": "provider_error"}, "errored"),
        ("error", "not an object", "errored"),
        ("apperror", {}, "errored"),
        # As the web UI: a completion's own terminal_state, and error types in any case or spacing.
        ("done", {"terminal_state": "tool_limit_reached"}, "tool_limit_reached"),
        ("stream_end", {"terminal_state": " Tool_Limit_Reached\n"}, "tool_limit_reached"),
        ("done", {"terminal_state": "errored"}, "completed"),
        ("done", {"terminal_state": "interrupted-by-user"}, "completed"),
        ("done", {"terminal_state": 7}, "completed"),
        ("apperror", {"type": " Cancelled "}, "interrupted-by-user"),
        ("error", {"type": "CANCELED"}, "interrupted-by-user"),
        ("apperror", {"type": "Interrupted\t"}, "interrupted-by-crash"),
        ("apperror", {"type": " TOOL_LIMIT_REACHED"}, "tool_limit_reached"),
        ("apperror", {"type": ["cancelled"]}, "errored"),
    ],
)
def test_terminal_states(tmp_path, event, payload, state):
    append_run_event("s", "r", "token", {"text": "x"}, session_dir=tmp_path)
    row = append_run_event("s", "r", event, payload, session_dir=tmp_path)
    assert (row["terminal"], row["terminal_state"]) == (True, state)
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None
    assert (summary["terminal"], summary["terminal_state"], summary["last_event"]) == (True, state, event)


def test_stream_end_yields_to_other_terminal_rows(tmp_path):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "x"})
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None and (summary["terminal"], summary["terminal_state"]) == (False, "running")
    writer.append_sse_event("apperror", {"type": "interrupted"})
    writer.append_sse_event("stream_end", {})
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None
    assert summary["terminal_state"] == "interrupted-by-crash" and summary["last_event"] == "stream_end"
    assert (summary["event_count"], summary["last_seq"], summary["last_event_id"]) == (3, 3, "r:3")


def test_summary_without_a_journal(tmp_path):
    assert latest_run_summary("nobody", "r", session_dir=tmp_path) is None
    append_run_event("s", "r", "token", {}, session_dir=tmp_path)
    empty = latest_run_summary("s", "other", session_dir=tmp_path)
    assert empty is not None
    assert (empty["event_count"], empty["terminal_state"], empty["runtime_model"]) == (0, None, None)


def test_last_assistant_text_follows_the_last_message(tmp_path):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    for event, payload in [
        ("token", {"text": "Let me "}),
        ("token", {"text": "check."}),
        ("tool", {"name": "search"}),
        ("reasoning", {"text": "hmm"}),
        ("token", {"text": "Found "}),
        ("token", {"text": "it"}),
        ("token", "not an object"),
    ]:
        writer.append_sse_event(event, payload)
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None and summary["last_assistant_text"] == "Found it"
    writer.append_sse_event("warning", {"type": "fallback"})
    writer.append_sse_event("token", {"text": "Again"})
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None and summary["last_assistant_text"] == "Again"


def test_summary_is_cached_by_file_signature_and_copied(tmp_path, monkeypatch):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "a"})
    reads = []
    real = journal_module.summarize_file
    monkeypatch.setattr(journal_module, "summarize_file", lambda *a: reads.append(1) or real(*a))
    first = latest_run_summary("s", "r", session_dir=tmp_path)
    second = latest_run_summary("s", "r", session_dir=tmp_path)
    assert first == second and first is not second and len(reads) == 1
    assert first is not None
    first["last_assistant_text"] = "changed"
    assert latest_run_summary("s", "r", session_dir=tmp_path) == second
    writer.append_sse_event("token", {"text": "b"})
    third = latest_run_summary("s", "r", session_dir=tmp_path)
    assert third is not None and third["last_assistant_text"] == "ab" and len(reads) == 2


def test_summary_read_that_raced_an_append_is_not_cached(tmp_path, monkeypatch):
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "a"})
    path = run_journal._run_path("s", "r", session_dir=tmp_path)
    real = journal_module.summarize_file
    raced = []

    def racing_read(*args: Any) -> Any:
        if not raced:
            raced.append(1)
            writer.append_sse_event("token", {"text": "b"})  # lands between the stat and the read
        return real(*args)

    monkeypatch.setattr(journal_module, "summarize_file", racing_read)
    before = os.stat(path)
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None and summary["last_assistant_text"] == "ab"
    sig = (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    assert journal_module.SUMMARY_CACHE.get(os.fspath(path), sig) is None
    assert latest_run_summary("s", "r", session_dir=tmp_path) == summary


# --- fsync policy -----------------------------------------------------------------------------------


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_fsync_terminal_rows_and_new_directories(tmp_path, monkeypatch):
    monkeypatch.delenv(storage.FSYNC_ENV, raising=False)
    synced = _record_fsyncs(monkeypatch)
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    writer.append_sse_event("token", {})
    assert "file" not in synced and synced.count("dir") >= 2  # the file's dir and the dirs made for it
    synced.clear()
    writer.append_sse_event("token", {})
    assert synced == []
    writer.append_sse_event("done", {})
    assert synced == ["file"]


def test_fsync_eager_policy(tmp_path, monkeypatch):
    synced = _record_fsyncs(monkeypatch)
    monkeypatch.setenv(storage.FSYNC_ENV, "eager")
    append_run_event("s", "r", "token", {}, session_dir=tmp_path)
    synced.clear()
    append_run_event("s", "r", "token", {}, session_dir=tmp_path)
    assert synced == ["file"]
    monkeypatch.setenv(storage.FSYNC_ENV, "sometimes")
    with pytest.raises(ValueError, match="fsync policy must be one of"):
        append_run_event("s", "r", "token", {}, session_dir=tmp_path)
    synced.clear()
    RunJournalWriter("s", "r", session_dir=tmp_path, fsync="eager").append_sse_event("token", {})
    assert synced == ["file"]


# --- concurrency ------------------------------------------------------------------------------------


def test_threads_share_one_gapless_sequence(tmp_path):
    writers = [RunJournalWriter("s", "r", session_dir=tmp_path) for _ in range(8)]
    start = threading.Barrier(8)

    def work(w: RunJournalWriter) -> None:
        start.wait(timeout=10)
        for _ in range(200):
            w.append_sse_event("token", {"text": "x"})

    threads = [threading.Thread(target=work, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seqs(tmp_path) == list(range(1, 1601))


def _append_many(session_dir: str, worker: int, count: int, barrier: Any) -> None:
    barrier.wait(timeout=30)
    writer = RunJournalWriter("s", "r", session_dir=session_dir)
    for i in range(count):
        writer.append_sse_event("token", {"worker": worker, "i": i})


def test_four_processes_append_to_one_run(tmp_path):
    # The parent holds the run's file open when it forks: the children must not inherit its lock state.
    append_run_event("s", "r", "status", {"who": "parent"}, session_dir=tmp_path)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(4)
    count = 300
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, count, barrier)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    result = read_run_events("s", "r", session_dir=tmp_path)
    assert result["malformed"] == []
    assert [row["seq"] for row in result["events"]] == list(range(1, 4 * count + 2))
    per_worker: dict[int, list[int]] = {}
    for row in result["events"][1:]:
        per_worker.setdefault(row["payload"]["worker"], []).append(row["payload"]["i"])
    assert per_worker == {w: list(range(count)) for w in range(4)}
    assert append_run_event("s", "r", "done", {}, session_dir=tmp_path)["seq"] == 4 * count + 2


def _append_with(writer: RunJournalWriter, worker: int, count: int, barrier: Any) -> None:
    barrier.wait(timeout=30)
    for i in range(count):
        writer.append_sse_event("token", {"worker": worker, "i": i})


def test_forked_children_appending_through_the_parents_writer(tmp_path):
    # The writer object itself crosses the fork, open descriptor and all: each child must reopen.
    writer = RunJournalWriter("s", "r", session_dir=tmp_path)
    writer.append_sse_event("status", {"who": "parent"})
    for i in range(storage._MAX_OPEN + 5):  # push its file out of the process's cache of open files,
        append_run_event("s", f"other-{i}", "token", {}, session_dir=tmp_path)
    writer.append_sse_event("status", {"who": "parent"})  # so it reopened one the fork handler does not know
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_append_with, args=(writer, w, 200, barrier)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert writer.append_sse_event("done", {})["seq"] == 603
    assert seqs(tmp_path) == list(range(1, 604))


_KILLED_WRITER = """
import sys
from relay_runtime.integrations.run_journal import RunJournalWriter
writer = RunJournalWriter("s", "r", session_dir=sys.argv[1])
i = 0
while True:
    writer.append_sse_event("token", {"text": "x" * (i % 5000), "i": i})
    i += 1
"""


def test_writer_killed_mid_appends(tmp_path):
    path = run_journal._run_path("s", "r", session_dir=tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 2_000_000):
            time.sleep(0.01)
        assert path.exists() and path.stat().st_size >= 2_000_000
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    result = read_run_events("s", "r", session_dir=tmp_path)
    n = len(result["events"])
    assert n > 10 and [row["seq"] for row in result["events"]] == list(range(1, n + 1))
    assert [row["payload"]["i"] for row in result["events"]] == list(range(n))
    assert len(result["malformed"]) <= 1  # at most the row the kill cut short
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None
    assert (summary["event_count"], summary["last_seq"], summary["terminal_state"]) == (n, n, "running")
    # The dead writer's lock went with it; the sequence continues after its last whole row.
    row = append_run_event("s", "r", "apperror", {"type": "interrupted"}, session_dir=tmp_path)
    assert row["seq"] == n + 1
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None and summary["terminal_state"] == "interrupted-by-crash"
    assert read_run_events("s", "r", session_dir=tmp_path, after_seq=n)["events"] == [row]
