"""``relay-runtime journal show|tail``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from process_support import LineReader

from relay_runtime.integrations.run_journal import RunJournalWriter, latest_run_summary
from relay_runtime.integrations.run_journal.cli import main


def write_run(tmp_path: Path, *, done: bool = True) -> RunJournalWriter:
    writer = RunJournalWriter("s1", "r1", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "héllo "})
    writer.append_sse_event("token", {"text": "world"})
    if done:
        writer.append_sse_event("done", {"usage": {"output_tokens": 2}})
    return writer


def test_show_prints_rows_and_summary(tmp_path, capsys):
    write_run(tmp_path)
    assert main(["show", "s1", "r1", "--session-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["1", "token", '{"text":"héllo', '"}']
    assert lines[2].split()[:2] == ["3", "done"]
    summary = json.loads("\n".join(lines[3:]))
    assert summary == latest_run_summary("s1", "r1", session_dir=tmp_path)
    assert summary["last_assistant_text"] == "héllo world" and summary["terminal_state"] == "completed"


def test_show_raw_json_after_a_cursor_and_malformed_lines(tmp_path, capsys):
    write_run(tmp_path)
    with open(tmp_path / "_run_journal" / "s1" / "r1.jsonl", "ab") as f:
        f.write(b"garbage\n")
    assert main(["show", "s1", "r1", "--session-dir", str(tmp_path), "--after-seq", "1", "--json", "--no-summary"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line)["seq"] for line in captured.out.splitlines()] == [2, 3]
    assert "malformed line at byte" in captured.err and "invalid JSON" in captured.err


@pytest.mark.parametrize(
    "argv,code,message",
    [
        (["show", "../s", "r1"], 2, "invalid session_id/run_id"),
        (["tail", "s1", "a/b"], 2, "invalid session_id/run_id"),
        (["show", "s1", "nope"], 1, "no run 'nope' in session 's1'"),
        (["show", "s1", "r1", "--after-seq", "-2"], 2, "--after-seq must be a non-negative integer"),
    ],
)
def test_show_and_tail_refuse_bad_input(tmp_path, capsys, argv, code, message):
    write_run(tmp_path)
    assert main([*argv, "--session-dir", str(tmp_path)]) == code
    assert message in capsys.readouterr().err
    journals = tmp_path / "_run_journal"
    assert sorted(p.name for p in journals.rglob("*") if "@runs" not in p.parts) == ["r1.jsonl", "s1"]
    assert sorted(p.name for p in (journals / "@runs").rglob("*")) == [".complete", "r1", "s1"]  # the run index


def test_tail_gives_up_after_its_timeout(tmp_path, capsys):
    write_run(tmp_path, done=False)
    assert main(["tail", "s1", "r1", "--session-dir", str(tmp_path), "--poll", "0.01", "--timeout", "0.2"]) == 1
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and "did not end in 0.2s" in captured.err


def test_tail_of_an_ended_run_returns_at_once(tmp_path, capsys):
    write_run(tmp_path)
    assert main(["tail", "s1", "r1", "--session-dir", str(tmp_path), "--after-seq", "3", "--timeout", "5"]) == 0
    assert capsys.readouterr().out == ""


def test_relay_runtime_command_tails_a_live_run_until_its_terminal_row(tmp_path):
    command = shutil.which("relay-runtime", path=str(Path(sys.executable).parent))
    assert command is not None, "the relay-runtime console script is not installed in this environment"
    writer = write_run(tmp_path, done=False)
    proc = subprocess.Popen(
        [command, "journal", "tail", "s1", "r1", "--session-dir", str(tmp_path), "--poll", "0.01", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        output = LineReader(proc.stdout)
        first = [json.loads(output.next()) for _ in range(2)]  # the replay, before anything new
        assert [row["seq"] for row in first] == [1, 2]
        assert proc.poll() is None
        writer.append_sse_event("token", {"text": "!"})
        rest = [json.loads(output.next())]  # followed live
        writer.append_sse_event("apperror", {"type": "provider_error", "message": "boom"})
        rest.append(json.loads(output.next()))
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert [(row["seq"], row["event"]) for row in rest] == [(3, "token"), (4, "apperror")]
    assert rest[-1]["terminal_state"] == "errored"
    shown = subprocess.run(
        [command, "journal", "show", "s1", "r1", "--session-dir", str(tmp_path), "--json", "--no-summary"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 4
