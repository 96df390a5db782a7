"""Journals damaged by a crash or by hand: what every reader makes of them (rows neither lost nor invented)."""

# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from journal_support import complete_call, run_turn
from redis_support import journal_store, redis_server  # noqa: F401 - fixtures

from relay_runtime import session
from relay_runtime.integrations.run_journal import RunFull, append_run_event, latest_run_summary, read_run_events
from relay_runtime.integrations.run_journal.background import RowWriter
from relay_runtime.integrations.run_journal.store import FileStore
from relay_runtime.redaction import forget_secrets, remember_secret


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


def _deep(secret: str) -> dict:
    return {"cfg": [{"auth": {"API_Key": secret, "nested": {"password": secret}}}], "ok": "kept"}


def test_secrets_nested_deep_in_a_payload_are_redacted_on_write(journal_store):
    row = journal_store.append("s", "r", "tool", {"name": "login", "args": _deep("sk-live-0123456789")})
    journal_store.append("s", "r", "done", {"result": {"session": {"access_token": "tok-abcdefgh"}}})
    remember_secret("client-key-remembered-42")
    try:
        journal_store.append("s", "r", "error", {"detail": ["client-key-remembered-42"]})
    finally:
        forget_secrets()
    stored = journal_store.read("s", "r")["events"]
    text = json.dumps(stored)
    for secret in ("sk-live-0123456789", "tok-abcdefgh", "client-key-remembered-42"):
        assert secret not in text
    assert row["payload"]["args"]["cfg"][0]["auth"] == {"API_Key": "[redacted]", "nested": {"password": "[redacted]"}}
    assert stored[0]["payload"] == row["payload"] and stored[0]["payload"]["args"]["ok"] == "kept"
    assert stored[1]["payload"] == {"result": {"session": {"access_token": "[redacted]"}}}
    assert stored[2]["payload"] == {"detail": ["[redacted]"]}


def test_a_tools_arguments_and_result_reach_the_journal_without_credentials(tmp_path):
    def body():
        relay = session.active_turn().relay  # type: ignore[union-attr]
        relay.tools.execute("login", _deep("sk-live-SECRET1"), lambda a: {"session": {"access_token": "tok-SECRET2"}})
        complete_call("openai", "m", {"model": "m-1", "text": "ok"})

    run_turn(tmp_path, body)
    text = (tmp_path / "_run_journal" / "session-a" / "run-a.jsonl").read_text()
    assert "SECRET1" not in text and "SECRET2" not in text
    rows = read_run_events("session-a", "run-a", session_dir=tmp_path)["events"]
    tool = next(row for row in rows if row["event"] == "tool")
    assert tool["payload"]["args"]["cfg"][0]["auth"]["API_Key"] == "[redacted]"


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "import sys; from relay_runtime.cli import main; sys.exit(main())"]
    return subprocess.run(
        [*command, "journal", *argv, "--session-dir", str(tmp_path)], capture_output=True, text=True, timeout=60
    )


def test_journal_show_on_a_file_of_only_damaged_lines_names_it_and_exits_2(tmp_path):
    path = _run_file(tmp_path)
    path.parent.mkdir(parents=True)
    # Torn garbage, a row that is not UTF-8, and JSON that is not a row: nothing readable, but not "no run".
    path.write_bytes(b'garbage\n{"version":1,"seq":1,"payload":{"text":"\xff\xfe"}}\n[1,2]\n{"version":1,"se')
    shown = _cli(tmp_path, "show", "s", "r")
    assert shown.returncode == 2, shown
    assert "Traceback" not in shown.stderr and shown.stdout == ""
    assert f"{path} holds no readable row" in shown.stderr
    assert shown.stderr.count("malformed line at byte") == 4 and f"of {path}" in shown.stderr


def test_journal_show_names_the_file_of_each_damaged_line(tmp_path):
    append_run_event("s", "r", "done", {}, session_dir=tmp_path)
    with open(_run_file(tmp_path), "ab") as f:
        f.write(b"garbage\n")
    shown = _cli(tmp_path, "show", "s", "r", "--no-summary")
    assert shown.returncode == 0 and "done" in shown.stdout
    assert "malformed line at byte 0" not in shown.stderr
    assert f"of {_run_file(tmp_path)}: invalid JSON" in shown.stderr


def test_a_lone_surrogate_is_stored_escaped_and_reads_back_the_same(journal_store, tmp_path):
    # A stream cut inside a surrogate pair: the row (and the terminal row after it) must not be lost.
    torn = "caf\ud83d"
    row = journal_store.append("s", "r", "token", {"text": torn, "\udcff key": [torn]})
    journal_store.append("s", "r", "done", {"note": torn})
    events = journal_store.read("s", "r")["events"]
    assert [e["seq"] for e in events] == [1, 2] and row["seq"] == 1
    assert events[0]["payload"] == {"text": torn, "\udcff key": [torn]} and events[1]["payload"] == {"note": torn}
    summary = journal_store.summary("s", "r")
    assert summary["terminal_state"] == "completed" and summary["last_assistant_text"] == torn
    if isinstance(journal_store, FileStore):
        text = next(Path(journal_store.session_dir).rglob("r.jsonl")).read_bytes().decode("utf-8")  # strict UTF-8
        assert "\\ud83d" in text
        shown = _cli(Path(journal_store.session_dir), "show", "s", "r")
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
        assert "caf\\ud83d" in shown.stdout


def test_a_terminal_row_with_a_non_json_value_keeps_how_the_run_ended(journal_store):
    # NaN (or any object) somewhere in a terminal payload: the row is written with its repr, and the
    # fields that decide the terminal state must survive, or the run's end is recorded falsely.
    counts: list[str] = []
    writer = RowWriter(session_dir=None, fsync=None, maxsize=1, count=counts.append, store=journal_store)
    writer.submit(("s", "r", "token", {"text": "a"}))
    writer.flush(5)
    for _ in range(3):  # dropped while the queue is full: the terminal row says so
        writer._pending += 1
        writer.submit(("s", "r", "token", {"text": "lost"}))
        writer._pending -= 1
    writer.submit(("s", "r", "apperror", {"type": "cancelled", "cost": {"total": float("nan")}, "note": object()}))
    assert writer.close(5)
    rows = journal_store.read("s", "r")["events"]
    assert [row["event"] for row in rows] == ["token", "apperror"]
    payload = rows[-1]["payload"]
    assert payload["type"] == "cancelled" and payload["dropped_rows"] == 3
    assert payload["unserializable"].startswith("{'type': 'cancelled'") and "note" not in payload
    assert rows[-1]["terminal_state"] == "interrupted-by-user"
    assert journal_store.summary("s", "r")["terminal_state"] == "interrupted-by-user"
    assert "journal.unserializable" in counts


def test_a_terminal_row_larger_than_the_reserve_still_ends_a_full_redis_run(redis_server):
    from relay_runtime.integrations.run_journal import RedisStreamStore

    store = RedisStreamStore(redis_server.url, prefix=f"relay-test:end-{uuid.uuid4().hex[:8]}", max_run_bytes=2000)
    try:
        while store.run_stats("s", "r")["refused"] == 0:
            try:
                store.append("s", "r", "token", {"text": "x" * 100})
            except RunFull:
                pass
        # An error report with a long traceback: larger than the 64 KiB reserve, smaller than a row's cap.
        end = store.append("s", "r", "apperror", {"type": "cancelled", "message": "m", "trace": "t" * 100_000})
        assert end["terminal_state"] == "interrupted-by-user" and end["payload"]["truncated"] is True
        assert end["payload"]["type"] == "cancelled" and end["payload"]["message"] == "m"
        assert store.summary("s", "r")["terminal_state"] == "interrupted-by-user"
        # The background writer's batches too.
        counts: list[str] = []
        writer = RowWriter(session_dir=None, fsync=None, maxsize=10, count=counts.append, store=store)
        writer.submit(("s", "r2", "token", {"text": "y" * 1900}))
        writer.submit(("s", "r2", "token", {"text": "y" * 100}))
        writer.submit(("s", "r2", "done", {"usage": {"output_tokens": 2}, "log": "z" * 100_000}))
        assert writer.close(timeout=10)
        assert counts == ["journal.run_full", "journal.truncated"]
        summary = store.summary("s", "r2")
        assert summary["terminal_state"] == "completed" and summary["event_count"] == 2
        asyncio.run(asyncio.wait_for(_drain(store.follow("s", "r2", idle=1.0)), 10))
    finally:
        store.close()


async def _drain(rows_iter: Any) -> None:
    async for _ in rows_iter:  # ends: the run's terminal row is stored
        pass


def test_a_line_with_nan_or_infinity_is_malformed_not_a_row(journal_store):
    # No writer stores them (payloads with NaN are refused), and a browser's JSON.parse rejects them:
    # served on, they would break the page that follows the run.
    journal_store.append("s", "r", "token", {"text": "a"})
    for constant in ("NaN", "Infinity", "-Infinity"):
        seq = journal_store.run_stats("s", "r")["seq"] if hasattr(journal_store, "run_stats") else None
        line = '{"version":1,"event_id":"r:%d","seq":%d,"run_id":"r","session_id":"s","event":"cost",'
        line += '"type":"cost","created_at":1,"terminal":false,"terminal_state":null,"payload":{"amount":%s}}'
        if seq is None:
            n = len(journal_store.read("s", "r")["events"]) + 1
            with open(_run_file(Path(journal_store.session_dir)), "a") as f:
                f.write(line % (n, n, constant) + "\n")
        else:
            stream = journal_store.keys.stream("s", "r")
            journal_store.client.xadd(stream, {"r": line % (seq + 1, seq + 1, constant)}, id=f"{seq + 1}-0")
            journal_store.client.hset(journal_store.keys.meta("s", "r"), "seq", seq + 1)
    result = journal_store.read("s", "r")
    assert [row["event"] for row in result["events"]] == ["token"]
    assert [entry["reason"] for entry in result["malformed"]] == ["invalid JSON"] * 3
    assert journal_store.summary("s", "r")["event_count"] == 1


def test_journal_show_and_tail_on_an_unreachable_store_exit_2_without_a_traceback(capsys):
    from relay_runtime.integrations.run_journal import RedisStreamStore
    from relay_runtime.integrations.run_journal.cli import main

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStreamStore(f"redis://127.0.0.1:{port}/0", retries=0, connect_timeout=0.5)
    try:
        for argv in (["show", "s", "r"], ["tail", "s", "r", "--timeout", "5"]):
            assert main(argv, store=store) == 2
            err = capsys.readouterr().err
            assert "cannot read the journal" in err and f"127.0.0.1:{port}" in err and "Traceback" not in err
    finally:
        store.close()
