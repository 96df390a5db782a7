"""Observed runtime model, durable replay and the HTTP snapshot projection (seed contract)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay_runtime.integrations.run_journal import RunJournalWriter, latest_run_summary, read_run_events


def observation(
    model: str = "backup", *, session_id: str = "session-a", stream_id: str = "run-a", provider: str = "custom"
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "stream_id": stream_id,
        "model": model,
        "provider": provider,
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
    from relay_runtime.integrations import run_journal
    from relay_runtime.integrations.run_journal import routes

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
    import relay_runtime.integrations.run_journal.routes as routes

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
#
# The seed drove a web app's worker with a fake agent. Here a real leased turn makes real SDK calls
# (Anthropic as the primary route, OpenAI as the fallback) through the adapters over MockTransport,
# and the JournalSubscriber on the host's relay writes the run.

import httpx2  # noqa: E402
from journal_support import ProviderFailures, run_turn  # noqa: E402

from relay_runtime import adapters  # noqa: E402
from relay_runtime.adapters.testing import (  # noqa: E402
    Script,
    anthropic_client,
    anthropic_events,
    chat_chunks,
    chat_completion_body,
    error,
    json_reply,
    openai_chat_sse,
    openai_client,
    sse_reply,
    typed_sse,
)

PRIMARY = {"model": "primary", "max_tokens": 64, "messages": [{"role": "user", "content": "new turn"}]}
FALLBACK = {"model": "backup-requested", "messages": [{"role": "user", "content": "new turn"}]}


def dropped() -> httpx2.ReadError:
    return httpx2.ReadError("connection dropped mid-stream")


def consume(stream_call):
    """Iterate a stream the way an agent loop does; a provider failure ends this attempt only."""
    try:
        for _ in stream_call():
            pass
    except ProviderFailures:
        pass


def attempt(call):
    try:
        return call()
    except ProviderFailures:
        return None


def test_worker_observes_serving_runtime_not_requested(tmp_path, monkeypatch):
    # The primary route thinks, then its stream breaks; the turn falls back to another provider,
    # whose response says which model really served.
    primary = Script(
        [sse_reply(typed_sse(anthropic_events([], model="primary", thinking="thinking"))[:5], fail_with=dropped())]
    )
    backup = Script([sse_reply(openai_chat_sse(chat_chunks(["answer"], model="backup")))])

    def body():
        consume(lambda: adapters.stream(anthropic_client(primary, max_retries=0), PRIMARY))
        consume(lambda: adapters.stream(openai_client(backup, max_retries=0), FALLBACK))

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch)
    names = result.names
    assert names.count("runtime_model") == 3  # primary, backup, post-warning correction
    observed = result.payloads("runtime_model")
    assert [value["model"] for value in observed] == ["primary", "backup", "backup"]
    assert observed[0] == {**observation("primary"), "provider": "anthropic", "fallback_active": False}
    assert observed[-1] == observation(provider="openai")
    assert names.index("runtime_model") < names.index("reasoning")
    assert names.index("warning") < len(names) - 1 - names[::-1].index("runtime_model")
    assert result.payloads("reasoning") == [{"text": "thinking"}] and result.payloads("token") == [{"text": "answer"}]
    assert names[-1] == "done"
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary["runtime_model"] == observation(provider="openai")
    # The selection is not overwritten: the session still asked for the primary model.
    assert result.lease.model == "primary"
    assert result.lease.conversation.metadata["model"] == "primary"


def test_worker_does_not_observe_attempt_or_missing_model(tmp_path, monkeypatch):
    primary = Script([error(503)])
    backup = Script([sse_reply(openai_chat_sse(chat_chunks(["partial"], model=""))[:2], fail_with=dropped())])

    def body():
        consume(lambda: adapters.stream(anthropic_client(primary, max_retries=0), PRIMARY))
        consume(lambda: adapters.stream(openai_client(backup, max_retries=0), FALLBACK))

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch, outcome="failed")
    assert not any(name == "runtime_model" for name in result.names)
    assert result.payloads("token") == [{"text": "partial"}]
    assert result.payloads("warning")[0]["type"] == "fallback"
    assert result.names[-1] == "apperror"
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary["terminal_state"] == "errored" and summary["runtime_model"] is None


def test_missing_agent_model_does_not_stamp_requested_as_served(tmp_path, monkeypatch):
    backup = Script([sse_reply(openai_chat_sse(chat_chunks(["partial"], model="")))])

    def body():
        consume(lambda: adapters.stream(openai_client(backup, max_retries=0), {**FALLBACK, "model": "primary"}))

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch)
    assert not any(name == "runtime_model" for name in result.names)
    assert result.payloads("token") == [{"text": "partial"}]
    assert result.lease.conversation.metadata["model"] == "primary"
    usage = next(value["usage"] for value in result.payloads("done"))
    assert not usage.get("used_model")


def test_worker_nonstreaming_success_observes_fallback(tmp_path, monkeypatch):
    primary = Script([error(500)])
    backup = Script([json_reply(chat_completion_body("served answer", model="backup"))])

    def body():
        attempt(lambda: adapters.complete(anthropic_client(primary, max_retries=0), PRIMARY))
        response = attempt(lambda: adapters.complete(openai_client(backup, max_retries=0), FALLBACK))
        assert response.choices[0].message.content == "served answer"

    result = run_turn(tmp_path, body, monkeypatch=monkeypatch)
    observed = result.payloads("runtime_model")
    assert [value["model"] for value in observed] == ["backup"]
    assert observed[0] == {**observation(provider="openai"), "phase": "route_observed"}
    assert result.names.index("warning") < result.names.index("runtime_model") < result.names.index("token")
    assert result.payloads("token") == [{"text": "served answer"}]
    usage = result.payloads("done")[0]["usage"]
    assert usage["used_model"] == "backup" and usage["output_tokens"] == 5
