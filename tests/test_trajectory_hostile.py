"""Trajectories against hostile input: sinks pointed at bad endpoints or handed odd session ids,
``validate`` on files made to break it, journal rows that are not what we wrote."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import cli
from relay_runtime.integrations.run_journal.store import FileStore
from relay_runtime.integrations.trajectory import (
    DamagedJournal,
    FileSink,
    HttpSink,
    atif_from_journal,
    atof_from_journal,
)

SECRET = "Bearer sk-sink-credential-0123456789"


class _Hostile(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]] = []

    def do_POST(self) -> None:
        type(self).seen.append(("POST", self.path, self.headers.get("Authorization")))
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/trickle":
            self._trickle()
            return
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        # /endless: a 200 whose body never ends
        self.send_response(200)
        self.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(100_000):
                self.wfile.write(chunk)
        except OSError:
            pass  # the sink hung up: what it should do

    def _trickle(self) -> None:
        # A status line, then one byte of a header every 50 ms: each read is quick, the answer never ends.
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        try:
            for _ in range(600):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass

    def do_GET(self) -> None:
        type(self).seen.append(("GET", self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[tuple[str, type[_Hostile]]]:
    handler = type("Handler", (_Hostile,), {"seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_an_http_sink_follows_no_redirect(hostile):
    base, handler = hostile
    sink = HttpSink(f"{base}/redirect", headers={"Authorization": SECRET}, retries=2, backoff=0.01)
    # Followed, the POST became a GET of /elsewhere (with our credentials) whose 200 counted as delivered.
    with pytest.raises(RuntimeError, match=r"refused the trajectory \(302\)"):
        sink.send("s1", {"a": 1})
    assert handler.seen == [("POST", "/redirect", SECRET)]
    assert sink.attempts == 1  # a redirect is an answer, not a failure to retry


def test_an_endless_answer_does_not_hold_the_sink(hostile):
    base, _ = hostile
    sink = HttpSink(f"{base}/endless", retries=0)
    done = threading.Event()

    def deliver() -> None:
        sink.send("s1", {"a": 1})
        done.set()

    threading.Thread(target=deliver, daemon=True).start()
    # Read whole, 6.5 GB would have to arrive first (and be held in memory).
    assert done.wait(30)


def test_an_answer_trickled_byte_by_byte_is_cut_off_at_the_deadline(hostile):
    base, _ = hostile
    sink = HttpSink(f"{base}/trickle", retries=0, timeout=2, deadline=0.5)
    failures: list[BaseException] = []

    def deliver() -> None:
        try:
            sink.send("s1", {"a": 1})
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=deliver, daemon=True)
    thread.start()
    thread.join(15)  # before: each byte came well within the timeout, so the try lasted as long as the trickle
    assert not thread.is_alive()
    assert len(failures) == 1 and "more than its deadline of 0.5s" in str(failures[0])


def test_sink_failures_name_no_credential_of_the_url():
    sink = HttpSink("http://user:pw-0123456789@127.0.0.1:9/atif?token=tok-0123456789", retries=0, timeout=2)
    with pytest.raises(RuntimeError) as failure:
        sink.send("s1", {})
    text = str(failure.value)
    assert "'http://127.0.0.1:9/atif'" in text
    assert "pw-0123456789" not in text and "tok-0123456789" not in text and "user" not in text


def test_sink_timing_arguments_are_checked():
    for bad in (float("nan"), float("inf"), -1, True):
        with pytest.raises(ValueError, match="timeout"):
            HttpSink("http://x", timeout=bad)
        with pytest.raises(ValueError, match="deadline"):
            HttpSink("http://x", deadline=bad)
    with pytest.raises(ValueError, match="port"):
        HttpSink("http://x:notaport/atif")
    with pytest.raises(ValueError, match="with a host"):
        HttpSink("http:///atif")
    for bad in (float("nan"), float("inf"), -0.5):
        with pytest.raises(ValueError, match="backoff"):
            HttpSink("http://x", backoff=bad)


@pytest.mark.parametrize("session_id", ["../../escaped", "..", "a/b", "a\\b", "\x00x", ""])
def test_a_session_id_names_one_file_inside_the_file_sinks_directory(tmp_path, session_id):
    out = tmp_path / "a" / "b" / "out"
    FileSink(str(out / "{session_id}.json")).send(session_id, {"x": 1})
    FileSink(str(out / "{session_id}" / "t.json")).send(session_id, {"x": 2})
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(written) == 2 and all(out in p.parents for p in written), written
    assert sorted(json.loads(p.read_text())["x"] for p in written) == [1, 2]


def test_plain_session_ids_name_their_files_as_they_are(tmp_path):
    FileSink(str(tmp_path / "{session_id}.json")).send("chat-1.v2_x", {"x": 1})
    assert (tmp_path / "chat-1.v2_x.json").exists()


# -- validate ----------------------------------------------------------------------------------

_VALID = {"schema_version": "ATIF-v1.7", "session_id": "s", "agent": {"name": "a", "version": "1"}}


def _validate(tmp_path: Path, capsys: Any, text: str) -> tuple[int, str, str]:
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    status = cli.main(["trajectory", "validate", str(path)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "RecursionError"),
        ('{"steps": [' + "9" * 5000 + "]}", "digits"),
        (json.dumps({**_VALID, "steps": []})[:-1] + ', "final_metrics": {"total_cost_usd": NaN}}', "NaN"),
        (json.dumps({**_VALID, "steps": []})[:-1] + ', "final_metrics": {"total_cost_usd": -Infinity}}', "-Infinity"),
    ],
)
def test_validate_reports_files_json_cannot_hold_without_a_traceback(tmp_path, capsys, text, reason):
    status, out, err = _validate(tmp_path, capsys, text)
    assert status == 1 and err == ""
    assert out.count("\n") == 1 and ": $: not JSON" in out and reason in out


def test_a_hostile_key_cannot_write_the_validators_report(tmp_path, capsys):
    key = "x\nforged.json: valid ATIF (ATIF-v1.7, 9 steps)\x1b[2J"
    step = {"step_id": 1, "source": "user", "message": "m", key: 1}
    status, out, _ = _validate(tmp_path, capsys, json.dumps({**_VALID, "steps": [step]}))
    assert status == 1
    assert out.count("\n") == 1 and "\x1b" not in out  # one line: the key cannot add a forged one
    assert '$.steps[0]["x\\nforged.json' in out


def test_validate_messages_are_bounded(tmp_path, capsys):
    status, out, _ = _validate(tmp_path, capsys, json.dumps({**_VALID, "steps": [], "schema_version": "v" * 100_000}))
    assert status == 1 and "must be an ATIF v1.x version" in out and len(out) < 400


def test_validate_atif_refuses_non_finite_numbers():
    from relay_runtime.integrations.trajectory import validate_atif

    steps = [{"step_id": 1, "source": "agent", "message": "m", "metrics": {"cost_usd": float("nan")}}]
    errors = validate_atif({**_VALID, "steps": steps, "final_metrics": {"total_cost_usd": float("inf")}})
    assert errors == [
        "$.steps[0].metrics.cost_usd: must be a number, got nan",
        "$.final_metrics.total_cost_usd: must be a number, got inf",
    ]


# -- journal rows that are not ours ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "named"),
    [
        ([{"traj": {"k": "turn"}}], "'id' must be a string"),
        ([{"traj": {"k": "attempt", "id": 7}}], "'id' must be a string"),
        ([{"traj": {"k": "tool", "id": "t1", "os": "x"}}, {"traj": {"k": "tool", "id": "t2", "os": 1}}], "'os'"),
        ([{"traj": {"k": "turn", "id": "a", "start": "yesterday", "os": 1}}], "'start' must be a whole number"),
        ([{"traj": {"k": "call", "id": "c", "os": 1, "parent": ["x"]}}], "'parent' must be a string"),
        # Times RFC 3339 cannot write: past the platform's clock, before 1970, in the year 10000.
        ([{"traj": {"k": "turn", "id": "a", "start": 10**30, "os": 1}}], "'start' must be nanoseconds from 1970"),
        ([{"traj": {"k": "attempt", "id": "a", "start": 1, "end": -(10**30), "os": 1, "oe": 2}}], "'end' must be"),
        ([{"traj": {"k": "tool", "id": "t", "start": 253_402_300_800 * 10**9, "os": 1}}], "to the end of 9999"),
    ],
)
def test_damaged_trajectory_records_are_a_clear_error(tmp_path, capsys, rows, named):
    store = FileStore(tmp_path)
    for row in rows:
        store.append("s", "r1", "span", row)
    for export in (atif_from_journal, atof_from_journal):
        with pytest.raises(DamagedJournal, match=rf"session 's' run 'r1' row 0: .*{named}"):
            export("s", "r1", store=store)
    for fmt in ("atif", "atof"):
        status = cli.main(["trajectory", "export", "s", "r1", "--format", fmt, "--session-dir", str(tmp_path)])
        captured = capsys.readouterr()
        assert status == 1 and captured.out == "" and named in captured.err


_ATTEMPT = {"k": "attempt", "id": "a", "os": 1, "oe": 2}


@pytest.mark.parametrize(
    ("record", "named"),
    [
        ({**_ATTEMPT, "resp": {"text": {"x": 1}}}, "$.steps[0].message: must be a string"),
        ({**_ATTEMPT, "resp": {"model": 5}}, "$.steps[0].model_name: must be a string"),
        ({**_ATTEMPT, "reasoning": 5}, "$.steps[0].reasoning_content: must be a string"),
        ({**_ATTEMPT, "resp": {"usage": {"input_tokens": -5}}}, "prompt_tokens: must be a whole number >= 0"),
        ({**_ATTEMPT, "resp": {"tool_calls": [{"id": 5, "name": "x"}]}}, "tool_call_id: must be a string"),
    ],
)
def test_records_that_would_make_a_false_trajectory_are_a_clear_error(tmp_path, capsys, record, named):
    store = FileStore(tmp_path)
    store.append("s", "r1", "span", {"traj": record})
    with pytest.raises(DamagedJournal, match=r"session 's' run 'r1': its trajectory records make no valid ATIF: "):
        atif_from_journal("s", "r1", store=store)
    status = cli.main(["trajectory", "export", "s", "r1", "--format", "atif", "--session-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 1 and captured.out == "" and named in captured.err


def test_a_requests_new_messages_as_a_string_are_not_one_user_step_per_character(tmp_path):
    store = FileStore(tmp_path)
    store.append("s", "r1", "span", {"traj": {**_ATTEMPT, "req": {"new": "hello"}}})
    assert [s["source"] for s in atif_from_journal("s", "r1", store=store)["steps"]] == ["agent"]


def test_a_cut_row_stamped_past_any_clock_still_exports(tmp_path, capsys):
    store = FileStore(tmp_path)
    cut = {"kind": "attempt", "id": "a1", "outcome": "success", "input_tokens": 7, "truncated": True}
    store.append("s", "r1", "span", {**cut, "original_bytes": 9_000_000}, created_at=1e300)
    (step,) = atif_from_journal("s", "r1", store=store)["steps"]
    assert step["extra"]["truncated"] is True and "timestamp" not in step
    assert cli.main(["trajectory", "export", "s", "-", "--format", "atof", "--session-dir", str(tmp_path)]) == 0


def test_a_record_the_builder_cannot_read_is_a_clear_error(tmp_path, capsys):
    store = FileStore(tmp_path)
    store.append("s", "r1", "span", {"traj": {"k": "call", "id": "c", "os": 1}})  # a logical call with no end
    with pytest.raises(DamagedJournal, match=r"session 's' run 'r1': a trajectory record in the journal is damaged"):
        atof_from_journal("s", "r1", store=store)
    assert cli.main(["trajectory", "export", "s", "-", "--format", "atof", "--session-dir", str(tmp_path)]) == 1
    assert "is damaged (KeyError: 'oe')" in capsys.readouterr().err


def test_an_fsspec_sink_with_a_url_it_cannot_write_is_refused_when_made():
    from relay_runtime.integrations.trajectory import FsspecSink

    with pytest.raises(ValueError, match=r"FsspecSink cannot write 'nosuchproto://bucket/.*Protocol not known") as bad:
        FsspecSink("nosuchproto://key:secret-0123456789@bucket/{session_id}.json")
    assert "secret-0123456789" not in str(bad.value)
    FsspecSink("memory://atif/{session_id}.json")  # a protocol it has


class _Stuck:
    """A sink that hangs until released (an endpoint that never answers, a mount that froze)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def send(self, session_id: str, trajectory: dict[str, Any]) -> None:
        self.entered.set()
        self.release.wait(30)


def test_flush_and_close_keep_their_timeout_when_a_stuck_sink_filled_the_queue():
    from relay_runtime.integrations.trajectory.sinks import SinkWorker

    stuck = _Stuck()
    worker = SinkWorker([stuck], lambda session_id: {"session": session_id}, max_pending=2)
    worker.submit("s0")
    assert stuck.entered.wait(10)  # the worker holds s0 in the sink; s1 and s2 fill the queue
    worker.submit("s1")
    worker.submit("s2")
    outcomes: list[bool] = []
    caller = threading.Thread(target=lambda: outcomes.extend([worker.flush(0.2), worker.close(0.2)]), daemon=True)
    caller.start()
    caller.join(15)  # before: flush waited for room in the queue for as long as the sink hung
    assert not caller.is_alive() and outcomes == [False, False]
    stuck.release.set()


def test_a_schema_version_carries_nothing_into_the_valid_line(tmp_path, capsys):
    version = "ATIF-v1.7\nforged.json: valid ATIF\x1b[2J"
    status, out, _ = _validate(tmp_path, capsys, json.dumps({**_VALID, "schema_version": version, "steps": []}))
    assert status == 1 and out.count("\n") == 1 and "\x1b" not in out
    assert "$.schema_version: must be an ATIF v1.x version" in out
    status, out, _ = _validate(tmp_path, capsys, json.dumps({**_VALID, "steps": []}))
    assert status == 0 and out.endswith(": valid ATIF (ATIF-v1.7, 0 steps)\n")


def test_export_to_a_path_it_cannot_write_is_a_clear_error(tmp_path, capsys):
    from trajectory_support import SESSION, TURN, run_ours

    from relay_runtime import session

    session.reset_for_tests()
    try:
        ours = run_ours("sync", journal_dir=tmp_path / "journal")
        assert ours.journal is not None and ours.journal.close()
    finally:
        session.reset_for_tests()
    (tmp_path / "a-dir").mkdir()
    argv = ["trajectory", "export", SESSION, TURN, "--format", "atif", "--session-dir", str(tmp_path / "journal")]
    assert cli.main([*argv, "-o", str(tmp_path / "a-dir")]) == 2  # before: IsADirectoryError's traceback
    err = capsys.readouterr().err
    assert err.startswith(f"relay-runtime trajectory: cannot write {tmp_path / 'a-dir'}: ") and err.count("\n") == 1
    assert cli.main([*argv, "-o", str(tmp_path / "out.json")]) == 0 and (tmp_path / "out.json").exists()


def test_export_from_a_journal_store_that_is_down_is_a_clear_error(capsys):
    import socket

    from relay_runtime.integrations.run_journal.redis_store import RedisStreamStore

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    from relay_runtime.integrations.trajectory import cli as trajectory_cli

    store = RedisStreamStore(f"redis://127.0.0.1:{port}/0")
    assert trajectory_cli.main(["export", "s", "r1", "--format", "atof"], store=store) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"relay-runtime trajectory: run journal on 127.0.0.1:{port}/0 unavailable")


@pytest.mark.parametrize(
    "make",
    [
        lambda url: HttpSink(url),
        lambda url: __import__("relay_runtime.cost", fromlist=["x"]).RedisSpendStore(url),
        lambda url: __import__("relay_runtime.integrations.run_journal.default_store", fromlist=["x"]).open_store(url),
        lambda url: __import__("relay_runtime.integrations.run_journal.redis_store", fromlist=["x"]).RedisStreamStore(
            url
        ),
    ],
)
def test_a_url_of_the_wrong_kind_is_refused_without_its_credentials(make):
    url = "ftp://admin:pw-0123456789@store.example:21/db?token=tok-0123456789"
    with pytest.raises(ValueError) as refused:
        make(url)
    text = str(refused.value)
    assert "'ftp://store.example:21/db'" in text  # what was wrong is still named
    assert "pw-0123456789" not in text and "tok-0123456789" not in text and "admin" not in text


@pytest.mark.parametrize(
    "timestamp",
    ["2026-01-01T00:00:00.\u0663\u0663Z", "20260101T000000Z", "2026-01-01T00:00:00+0000", "2026-01-01T00:00Z",
     "2026-13-01T00:00:00Z"],
)  # fmt: skip
def test_validate_takes_rfc_3339_times_only(timestamp):
    from relay_runtime.integrations.trajectory import validate_atif

    step = {"step_id": 1, "source": "user", "message": "m", "timestamp": timestamp}
    errors = validate_atif({**_VALID, "steps": [step]})
    assert errors == [f"$.steps[0].timestamp: must be an RFC 3339 time with its offset, got {timestamp!r}"]


def test_validate_takes_the_times_our_exporters_write():
    from relay_runtime.integrations.trajectory import validate_atif
    from relay_runtime.integrations.trajectory.plain import rfc3339

    for timestamp in (rfc3339(1_767_225_600_123_456_789), "2026-01-01T00:00:00.5+05:30"):
        assert validate_atif({**_VALID, "steps": [{"step_id": 1, "source": "user", "message": "m",
                                                    "timestamp": timestamp}]}) == []  # fmt: skip
