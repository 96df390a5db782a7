"""A LangGraph run paused in one process and resumed in another (``tests/graph_resume_worker.py``, run twice as
real processes): the resumed run continues under the same conversation and turn ids, in the same journal run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime.integrations.run_journal import read_run_events
from relay_runtime.jsonl import read_events
from tests.framework_support import need

need("langgraph.checkpoint.memory")

ROOT = Path(__file__).resolve().parent.parent


def _phase(phase: str, where: Path) -> dict[str, Any]:
    env = {**os.environ, "RELAY_HOME": str(where / "home"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "graph_resume_worker.py"), phase, str(where)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return said


def test_a_graph_paused_in_one_process_resumes_in_another_under_the_same_ids(tmp_path: Path) -> None:
    assert _phase("pause", tmp_path)["said"] == "Send the email?"
    assert _phase("resume", tmp_path)["said"] == "approved: yes"

    paused, resumed = (list(read_events(tmp_path / f"events-{p}.jsonl")) for p in ("pause", "resume"))
    for events in (paused, resumed):
        (turn,) = [e for e in events if e["kind"] == "scope_start" and e["name"] == "turn"]
        assert (turn["metadata"][cv.SESSION_ID], turn["metadata"][cv.TURN_ID]) == ("chat-7", "turn-7")
        assert [e["outcome"] for e in events if e["kind"] == "scope_end" and e["name"] in ("approval", "ask")] == [
            "success",
            "success",
        ]
    (interrupt,) = [e for e in paused if e["name"] == "graph.interrupt"]
    assert interrupt["data"]["interrupts"][0]["value"] == {"question": "Send the email?"}
    (resume,) = [e for e in resumed if e["name"] == "graph.resume"]
    # The resume names the checkpoint the other process paused at, and the value it was resumed with.
    assert resume["data"]["resume"] == "yes"
    assert resume["data"]["checkpoint_id"] == interrupt["data"]["checkpoint_id"]

    # One journal run: the second process's rows continue the first's, gapless, nothing malformed.
    journal = read_run_events("chat-7", "turn-7", session_dir=tmp_path / "sessions")
    assert journal["malformed"] == []
    rows = journal["events"]
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["event"] for r in rows].count("done") == 2
    spans = [(r["payload"]["name"], r["payload"]["outcome"]) for r in rows if r["event"] == "span"]
    assert spans == [("ask", "success"), ("approval", "success")] * 2
