"""Observed runtime model, durable replay and the HTTP snapshot projection (seed contract)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from integrations.run_journal import RunJournalWriter, latest_run_summary, read_run_events


def observation(model: str = "backup", *, session_id: str = "session-a", stream_id: str = "run-a") -> dict[str, Any]:
    return {
        "session_id": session_id,
        "stream_id": stream_id,
        "model": model,
        "provider": "custom",
        "fallback_active": True,
        "phase": "observed_output",
    }


def summary_model(tmp_path: Any, run_id: str = "run-a") -> Any:
    summary = latest_run_summary("session-a", run_id, session_dir=tmp_path)
    assert summary is not None
    return summary["runtime_model"]


def test_journal_runtime_is_owned_and_invalidated(tmp_path):
    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "answer"})
    first = writer.append_sse_event("runtime_model", observation())
    assert read_run_events("session-a", "run-a", session_dir=tmp_path)["events"][-1] == first
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary is not None
    assert summary["runtime_model"] == observation()
    summary["runtime_model"]["model"] = "corrupted"
    assert summary_model(tmp_path) == observation()
    writer.append_sse_event("warning", {"type": "fallback", "message": "Trying another route"})
    assert summary_model(tmp_path) is None
    writer.append_sse_event("runtime_model", {**observation(), "stream_id": "foreign"})
    assert summary_model(tmp_path) is None
    writer.append_sse_event("runtime_model", observation("recovered"))
    assert summary_model(tmp_path)["model"] == "recovered"
    writer.append_sse_event("runtime_model", "malformed observation")
    assert summary_model(tmp_path) is None
    writer.append_sse_event("runtime_model", observation("recovered-again"))
    assert summary_model(tmp_path)["model"] == "recovered-again"
    assert summary_model(tmp_path, "another-run") is None


@pytest.mark.parametrize("malformed", ["bad observation", ["bad observation"], None])
def test_non_object_observation_invalidates_summary_and_http_snapshot(tmp_path, monkeypatch, malformed):
    from integrations import run_journal
    from integrations.run_journal import routes

    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    writer.append_sse_event("runtime_model", observation("first"))
    writer.append_sse_event("token", malformed)
    assert summary_model(tmp_path)["model"] == "first"
    writer.append_sse_event("runtime_model", malformed if malformed is not None else {"placeholder": True})
    if malformed is None:
        # The writer normalizes None to {}; exercise a legacy/raw null journal row.
        path = run_journal._run_path("session-a", "run-a", session_dir=tmp_path)
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows[-1]["payload"] = None
        path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    assert summary_model(tmp_path) is None
    monkeypatch.setattr(
        routes, "find_run_summary", lambda rid: latest_run_summary("session-a", rid, session_dir=tmp_path)
    )
    monkeypatch.setattr(routes, "read_run_events", lambda sid, rid: read_run_events(sid, rid, session_dir=tmp_path))
    snapshot = routes._run_journal_live_snapshot("run-a")
    assert snapshot is not None
    assert snapshot["runtime_model"] is None
    assert routes._runtime_journal_snapshot_for_session_payload(snapshot)["runtime_model"] is None


@pytest.mark.parametrize("suffix,expected", [("", "backup"), ("warning", None), ("foreign", None)])
def test_http_snapshot_projects_exact_journal_window(tmp_path, monkeypatch, suffix, expected):
    import integrations.run_journal.routes as routes

    writer = RunJournalWriter("session-a", "run-a", session_dir=tmp_path)
    writer.append_sse_event("runtime_model", observation())
    writer.append_sse_event("token", {"text": "answer"})
    if suffix == "warning":
        writer.append_sse_event("warning", {"type": "fallback"})
    elif suffix == "foreign":
        writer.append_sse_event("runtime_model", {**observation(), "session_id": "foreign"})
    monkeypatch.setattr(
        routes, "find_run_summary", lambda rid: latest_run_summary("session-a", rid, session_dir=tmp_path)
    )
    monkeypatch.setattr(routes, "read_run_events", lambda sid, rid: read_run_events(sid, rid, session_dir=tmp_path))
    snapshot = routes._run_journal_live_snapshot("run-a")
    assert snapshot is not None
    assert snapshot["last_assistant_text"] == "answer"
    value = snapshot["runtime_model"]
    assert (value["model"] if value else None) == expected
    assert routes._runtime_journal_snapshot_for_session_payload(snapshot)["runtime_model"] == value


# --- the journal subscriber on a real relay turn (the seed's run_worker) ----------------------------

from test_run_journal_support import complete_call, run_turn, stream_call  # noqa: E402


def test_worker_observes_serving_runtime_not_requested(tmp_path, monkeypatch):
    def body():
        # The primary route thinks, then breaks; the turn falls back to another provider and model.
        stream_call("anthropic", "primary", [{"model": "primary", "reasoning": "thinking"}], fail=True)
        stream_call("custom", "backup-requested", [{"model": "backup", "text": "answer"}], call_id="call-2")

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch)
    names = result.names
    assert names.count("runtime_model") == 3  # primary, backup, post-warning correction
    observed = result.payloads("runtime_model")
    assert [value["model"] for value in observed] == ["primary", "backup", "backup"]
    assert observed[0] == {**observation("primary"), "provider": "anthropic", "fallback_active": False}
    assert observed[-1] == observation()
    assert names.index("runtime_model") < names.index("reasoning")
    assert names.index("warning") < len(names) - 1 - names[::-1].index("runtime_model")
    assert names[-1] == "done"
    assert latest_run_summary("session-a", "run-a", session_dir=tmp_path)["runtime_model"] == observation()
    # The selection is not overwritten: the session still asked for the primary model.
    assert result.lease.model == "primary"
    assert result.lease.conversation.metadata["model"] == "primary"


def test_worker_does_not_observe_attempt_or_missing_model(tmp_path, monkeypatch):
    def body():
        stream_call("anthropic", "primary", [], fail_on_open=True)
        stream_call("custom", "backup", [{"model": None, "text": "partial"}], fail=True, call_id="call-2")

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch, outcome="failed")
    assert not any(name == "runtime_model" for name in result.names)
    assert result.payloads("token") == [{"text": "partial"}]
    assert result.payloads("warning")[0]["type"] == "fallback"
    assert result.names[-1] == "apperror"
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary["terminal_state"] == "errored" and summary["runtime_model"] is None


def test_missing_agent_model_does_not_stamp_requested_as_served(tmp_path, monkeypatch):
    def body():
        stream_call("custom", "primary", [{"model": None, "text": "partial"}])

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch)
    assert not any(name == "runtime_model" for name in result.names)
    assert result.lease.conversation.metadata["model"] == "primary"
    usage = next(value["usage"] for value in result.payloads("done"))
    assert not usage.get("used_model")
    assert usage["output_tokens"] == 1


def test_worker_nonstreaming_success_observes_fallback(tmp_path, monkeypatch):
    def body():
        complete_call("anthropic", "primary", None)
        complete_call("custom", "backup", {"model": "backup", "text": "served answer"}, call_id="call-2")

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch)
    observed = result.payloads("runtime_model")
    assert [value["model"] for value in observed] == ["backup"]
    assert observed[0] == {**observation(), "phase": "route_observed"}
    assert result.names.index("warning") < result.names.index("runtime_model") < result.names.index("token")
    assert result.payloads("token") == [{"text": "served answer"}]
    assert result.payloads("done")[0]["usage"]["used_model"] == "backup"
