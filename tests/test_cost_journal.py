"""Cost in the run journal: one ``cost`` row per attempt, the turn's roll-up on the terminal row, the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, cost, session
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from relay_runtime.integrations.run_journal import (
    JournalSubscriber,
    append_run_event,
    latest_run_summary,
    read_run_events,
)

PRICES = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}


def test_attempt_costs_rows_terminal_row_and_summary(tmp_path: Path, relay_home: Any) -> None:
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    journal = JournalSubscriber(host.relay, session_dir=tmp_path)
    journal.register()
    cost.attach(host, PriceCatalog.from_mapping(PRICES))
    rejected: list[int] = []

    def reject_first(name: str, request: Any, response: Any) -> Any:
        if not rejected:
            rejected.append(1)
            raise RuntimeError("rejected by policy")
        return response

    host.relay.intercepts.register_llm_response("reject-first", 0, False, reject_first)
    body = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1000, 250))  # 0.002 each
    scripted = t.scripted_openai(t.json_reply(body), t.json_reply(body))
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="sess-1", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="run-1", task_id="task")
    with pytest.raises(RuntimeError, match="rejected"):
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    assert journal.flush(timeout=10)
    journal.close()
    rows = read_run_events("sess-1", "run-1", session_dir=tmp_path)["events"]
    costs = [r["payload"] for r in rows if r["event"] == "cost"]
    assert [c["amount"] for c in costs] == pytest.approx([0.002, 0.002])
    assert [c.get("wasted", False) for c in costs] == [True, False]
    assert all(c["currency"] == "USD" and c["model"] == "gpt-x" and c["attempt_id"] for c in costs)
    # The call tree's span rows carry the same costs: each attempt's, and each logical call's roll-up.
    spans = [r["payload"] for r in rows if r["event"] == "span"]
    attempt_costs = [s["cost"]["amount"] for s in spans if s["kind"] == "attempt"]
    assert attempt_costs == pytest.approx([0.002, 0.002])
    calls = [s["cost"] for s in spans if s["kind"] == "logical_call"]  # the rejected call, then the next
    assert [c["total"] for c in calls] == pytest.approx([0.002, 0.002])
    assert [c["wasted"] for c in calls] == pytest.approx([0.002, 0.0])
    done = next(r["payload"] for r in rows if r["event"] == "done")
    assert done["cost"]["total"] == pytest.approx(0.004) and done["cost"]["wasted"] == pytest.approx(0.002)
    summary = latest_run_summary("sess-1", "run-1", session_dir=tmp_path)
    assert summary is not None
    assert summary["cost"] == {
        "total": pytest.approx(0.004),
        "wasted": pytest.approx(0.002),
        "currency": "USD",
        "attempts": 2,
        "unpriced": 0,
    }


def test_a_crashed_run_keeps_its_spend_in_the_summary(tmp_path: Path) -> None:
    append_run_event("s", "r", "status", {"type": "run_started"}, session_dir=tmp_path)
    append_run_event("s", "r", "cost", {"amount": 0.5, "currency": "USD"}, session_dir=tmp_path)
    append_run_event("s", "r", "cost", {"amount": None, "currency": "USD", "missing": ["model"]}, session_dir=tmp_path)
    append_run_event("s", "r", "cost", {"amount": 0.25, "currency": "USD", "wasted": True}, session_dir=tmp_path)
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None and summary["terminal_state"] == "running"
    assert summary["cost"] == {"total": 0.75, "wasted": 0.25, "currency": "USD", "attempts": 2, "unpriced": 1}
    summary["cost"]["total"] = 99.0  # a caller's copy
    assert latest_run_summary("s", "r", session_dir=tmp_path)["cost"]["total"] == 0.75  # type: ignore[index]


def test_no_cost_key_without_cost_rows(tmp_path: Path) -> None:
    append_run_event("s", "r", "status", {"type": "run_started"}, session_dir=tmp_path)
    assert "cost" not in latest_run_summary("s", "r", session_dir=tmp_path)  # type: ignore[operator]


def test_a_charge_that_came_after_its_turn_ended_is_in_the_runs_cost(tmp_path: Path, relay_home: Any) -> None:
    # The turn ends while the provider still works on a call: the attempt ends (cancelled) unpriced, and its
    # answer, billed, is priced later (a late charge). The run's cost said nothing of it.
    from test_cost import _answered_after_its_turn_ended, catalog

    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    journal = JournalSubscriber(session_dir=tmp_path).attach(host)
    cost.attach(host, catalog())
    _answered_after_its_turn_ended(host, "late")  # session "late", turn "t-1": 1000 input tokens, 0.001
    assert journal.close()
    rows = read_run_events("late", "t-1", session_dir=tmp_path)["events"]
    assert [r["event"] for r in rows][-2:] == ["done", "cost"]  # it came after the run's end, and is kept
    (late,) = [r["payload"] for r in rows if r["event"] == "cost"]
    assert late["amount"] == pytest.approx(0.001) and late["wasted"] is True and late["late"] is True
    summary = latest_run_summary("late", "t-1", session_dir=tmp_path)
    assert summary is not None and summary["terminal_state"] == "completed"
    assert summary["cost"]["total"] == pytest.approx(0.001) and summary["cost"]["wasted"] == pytest.approx(0.001)
