# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""Trajectories of runs recorded in the past: the file journal and Redis give back the live exports."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import pytest
from redis_support import journal_store, redis_server  # noqa: F401 - fixtures
from trajectory_support import MODEL, MODES, SESSION, TURN, run_ours

from relay_runtime import adapters, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.run_journal import FileStore, JournalSubscriber, RedisStreamStore, read_run_events
from relay_runtime.integrations.trajectory import (
    AtifExporter,
    AtofExporter,
    atif_from_journal,
    atof_from_journal,
    validate_atif,
)


@pytest.fixture(autouse=True)
def clean_sessions():
    session.reset_for_tests()
    yield
    session.reset_for_tests()


_STRUCTURE = ("kind", "scope_category", "uuid", "parent_uuid", "propagation_root_uuid", "timestamp", "name", "category")


def _turn_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live lines the journal can give back: the turn's scopes (not the conversation's, nor stream chunks)."""
    return [
        line
        for line in lines
        if line["kind"] == "scope" and (line["metadata"] or {}).get("relay.kind") != "conversation"
    ]


@pytest.mark.parametrize("mode", MODES)
def test_a_journaled_run_exports_as_it_did_live(mode, journal_store):
    ours = run_ours(mode, store=journal_store)
    live = ours.atif.export()
    assert ours.journal is not None and ours.journal.close()
    # One run, and every run of the session: the same trajectory as the live exporter's, timestamps included.
    assert atif_from_journal(SESSION, TURN, store=journal_store, model_name=MODEL) == live
    assert atif_from_journal(SESSION, store=journal_store, model_name=MODEL) == live
    assert validate_atif(live) == [] and len(live["steps"]) == 3
    # ATOF: the same scope tree, line for line, and what each line carries that the journal keeps.
    rebuilt = atof_from_journal(SESSION, TURN, store=journal_store)
    expected = _turn_lines(ours.atof_lines)
    assert [[line[k] for k in _STRUCTURE] for line in rebuilt] == [[line[k] for k in _STRUCTURE] for line in expected]
    for got, want in zip(rebuilt, expected, strict=True):
        if want["category"] == "tool":
            assert got["data"] == want["data"] and got["category_profile"] == want["category_profile"]
        if want["category"] == "llm" and want["scope_category"] == "start":
            # The request, rebuilt from deltas: the full conversation the provider got, and its other kwargs.
            assert got["data"] == want["data"]
            assert got["category_profile"]["model_name"] == want["category_profile"]["model_name"]
        if want["scope_category"] == "end":
            assert got["metadata"]["relay.outcome"] == want["metadata"]["relay.outcome"]


def _chat(turns: list[str], store: Any, *, big: str | None = None, end_last: bool = True) -> AtifExporter:
    """A conversation of several runs, one LLM call each, the history growing as agents send it."""
    coordinator = session.SESSION_COORDINATOR
    atif = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(store=store).attach(coordinator)
    replies = [testing.json_reply(testing.chat_completion_body(f"answer {i}", model=MODEL)) for i in range(len(turns))]
    scripted = testing.scripted_openai(*replies, max_retries=0)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="chat", platform="t")
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i, text in enumerate(turns):
        turn = coordinator.begin_turn(lease, turn_id=f"run-{i + 1}", task_id=f"task-{i + 1}")
        history.append({"role": "user", "content": text if big is None or i == 0 else text + big})
        reply = adapters.complete(scripted.client, {"model": MODEL, "messages": list(history)})
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
        if end_last or i < len(turns) - 1:
            coordinator.end_turn(turn, outcome="success")
    journal.close()
    atif.detach()
    return atif


def test_each_row_holds_a_calls_new_messages_only(journal_store):
    atif = _chat(["one", "two", "three", "four"], journal_store)
    sizes = []
    for i in range(1, 5):
        rows = journal_store.read("chat", f"run-{i}")["events"]
        (attempt,) = [r["payload"]["traj"] for r in rows if r["event"] == "span" and r["payload"]["kind"] == "attempt"]
        sizes.append(len(attempt["req"]["new"]))
        if i > 1:  # the earlier history is named, not written again
            assert attempt["req"]["base"] and attempt["req"]["keep"] == 2 * (i - 1)
    assert sizes == [2, 2, 2, 2]  # system + first question, then the last answer and the new question
    whole = atif_from_journal("chat", store=journal_store)
    assert whole == atif.export()
    assert [s["message"] for s in whole["steps"]] == [
        "one", "answer 0", "two", "answer 1", "three", "answer 2", "four", "answer 3",
    ]  # fmt: skip
    # One run alone: its question and its answer, although its request named the history by reference.
    third = atif_from_journal("chat", "run-3", store=journal_store)
    assert [(s["source"], s["message"]) for s in third["steps"]] == [("user", "three"), ("agent", "answer 2")]
    # Its ATOF start line rebuilds the whole conversation the provider got, from earlier runs' rows.
    (start,) = [
        e for e in atof_from_journal("chat", "run-3", store=journal_store)
        if e["category"] == "llm" and e["scope_category"] == "start"
    ]  # fmt: skip
    assert [m["content"] for m in start["data"]["content"]["messages"]] == [
        "You are terse.", "one", "answer 0", "two", "answer 1", "three",
    ]  # fmt: skip


def test_a_run_in_progress_is_marked_incomplete_until_it_ends(journal_store):
    _chat(["one", "two"], journal_store, end_last=False)
    running = atif_from_journal("chat", "run-2", store=journal_store)
    assert running["extra"] == {"incomplete": True}
    assert [s["message"] for s in running["steps"]] == ["two", "answer 1"]
    assert "extra" not in atif_from_journal("chat", "run-1", store=journal_store)
    assert validate_atif(running) == []


def _small_store(kind: str, tmp_path: Any, redis_server: Any) -> Any:
    if kind == "file":
        return FileStore(tmp_path / "journal", max_row_bytes=16 * 1024)
    return RedisStreamStore(redis_server.url, prefix=f"relay-test:{uuid.uuid4().hex[:12]}", max_row_bytes=16 * 1024)


@pytest.mark.parametrize("kind", ["file", "redis"])
def test_a_row_cut_by_the_cap_is_a_step_marked_truncated(kind, tmp_path, request):
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    store = _small_store(kind, tmp_path, server)
    _chat(["short", "long"], store, big="x" * 40_000)
    rows = store.read("chat", "run-2")["events"]
    assert any(r["payload"].get("truncated") for r in rows if r["event"] == "span")
    trajectory = atif_from_journal("chat", store=store)
    assert validate_atif(trajectory) == []
    steps = trajectory["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "agent"]  # the long question's row was cut
    assert steps[2]["extra"]["truncated"] is True and steps[2]["model_name"] == MODEL
    assert steps[2]["metrics"]["prompt_tokens"] == 12  # what the cut row still says
    assert "truncated" not in steps[1]["extra"]


def test_a_streams_reasoning_is_the_steps_reasoning_content(tmp_path):
    from journal_support import run_turn, stream_call

    atif = AtifExporter().attach(session.SESSION_COORDINATOR)
    chunks = [
        {"model": "m-1", "reasoning": "let me "},
        {"model": "m-1", "reasoning": "think"},
        {"model": "m-1", "text": "Hi"},
    ]
    run_turn(tmp_path, lambda: stream_call("openai", "m", chunks))
    live = atif.export()
    user, step = live["steps"]
    assert user["source"] == "user" and step["reasoning_content"] == "let me think"
    assert step["message"] == "Hi" and step["model_name"] == "m-1"
    assert atif_from_journal("session-a", "run-a", session_dir=tmp_path) == live


def test_export_errors_name_what_was_wrong(tmp_path):
    with pytest.raises(ValueError, match="invalid session_id"):
        atif_from_journal("../etc", session_dir=tmp_path)
    with pytest.raises(ValueError, match="invalid run_id"):
        atof_from_journal("chat", "a/b", session_dir=tmp_path)
    with pytest.raises(LookupError, match="no trajectory recorded for session 'nobody'"):
        atif_from_journal("nobody", session_dir=tmp_path)


def test_rows_written_before_trajectories_existed_export_nothing_rather_than_break(tmp_path):
    store = FileStore(tmp_path)
    store.append("old", "run-1", "status", {"type": "run_started"})
    store.append("old", "run-1", "span", {"kind": "attempt", "id": "a1", "model": "m"})
    store.append("old", "run-1", "done", {"usage": {}})
    with pytest.raises(LookupError):
        atif_from_journal("old", "run-1", store=store)
    assert read_run_events("old", "run-1", session_dir=tmp_path)["events"]


def test_the_journal_records_carry_no_secret(tmp_path):
    from relay_runtime import redaction

    key = "sk-live-0123456789abcdef"
    redaction.remember_secret(key)
    try:
        coordinator = session.SESSION_COORDINATOR
        atif = AtifExporter().attach(coordinator)
        atof_out = io.StringIO()
        atof = AtofExporter(stream=atof_out).attach(coordinator)
        journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
        scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body(f"echo {key}", model=MODEL)))
        lease = coordinator.acquire_conversation(
            profile_key=session.current_profile_key(), session_id="s", platform="t"
        )
        turn = coordinator.begin_turn(lease, turn_id="r", task_id="t")
        adapters.complete(
            scripted.client,
            {"model": MODEL, "messages": [{"role": "user", "content": f"my key is {key}"}],
             "extra_body": {"api_key": "hunter2-body-secret"}, "extra_headers": {"Authorization": f"Bearer {key}"}},
        )  # fmt: skip
        lease.host.relay.tools.execute(
            "login", {"password": "hunter2-tool-secret", "user": "me"}, lambda a: {"token": key}
        )
        coordinator.end_turn(turn, outcome="success")
        journal.close()
        atof.shutdown()
        live = json.dumps(atif.export())
        rows = (tmp_path / "_run_journal" / "s" / "r.jsonl").read_text()
        exported = json.dumps(atif_from_journal("s", "r", session_dir=tmp_path))
        lines = json.dumps(atof_from_journal("s", "r", session_dir=tmp_path))
        for text in (live, rows, exported, lines, atof_out.getvalue()):
            assert key not in text and "hunter2" not in text
        assert "my key is [redacted]" in exported
    finally:
        redaction.forget_secrets()


def _responses_turns(requests: list[dict[str, Any]], tmp_path: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """One Responses API call per turn: the live trajectory, and the one rebuilt from the file journal."""
    coordinator = session.SESSION_COORDINATOR
    live = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    bodies = [testing.responses_body(f"answer {i}", model=MODEL, id=f"resp_{i}") for i in range(len(requests))]
    scripted = testing.scripted_openai(*(testing.json_reply(body) for body in bodies), max_retries=0)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="r", platform="t")
    for i, request in enumerate(requests):
        turn = coordinator.begin_turn(lease, turn_id=f"turn-{i}", task_id="t")
        adapters.complete(scripted.client, {"model": MODEL, **request}, api_mode="responses")
        coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    assert journal.close()
    return live.export("r"), atif_from_journal("r", store=FileStore(tmp_path))


def test_a_user_repeating_themselves_to_a_conversation_the_provider_keeps_is_heard_each_time(tmp_path):
    # With previous_response_id a request sends its new items only: the second "yes" is not the first sent again.
    yes = [{"role": "user", "content": "yes"}]
    live, rebuilt = _responses_turns(
        [{"input": yes}, {"input": yes, "previous_response_id": "resp_0"}, {"input": yes, "conversation": "conv_1"}],
        tmp_path,
    )
    said = [(s["source"], s["message"]) for s in live["steps"]]
    assert said == [pair for i in range(3) for pair in (("user", "yes"), ("agent", f"answer {i}"))]
    assert rebuilt == live and validate_atif(live) == []


def test_a_conversation_given_as_one_text_is_the_users_step(tmp_path):
    # input="..." is the user's message (the SDK's own shorthand), sent again or not.
    live, rebuilt = _responses_turns(
        [{"input": "What is 2+2?"}, {"input": "And 3+3?"}, {"input": "And 3+3?", "previous_response_id": "resp_1"}],
        tmp_path,
    )
    said = [(s["source"], s["message"]) for s in live["steps"]]
    asked = ("What is 2+2?", "And 3+3?", "And 3+3?")
    assert said == [pair for i in range(3) for pair in (("user", asked[i]), ("agent", f"answer {i}"))]
    assert rebuilt == live and validate_atif(live) == []


def test_a_run_whose_writer_dropped_rows_is_no_complete_trajectory(tmp_path, monkeypatch):
    # Under load the writer drops rows (their records with them) and its end row counts them: a trajectory
    # rebuilt from what is left must not read as the whole run.
    from test_run_journal_subscriber import StuckDisk

    disk = StuckDisk(monkeypatch)
    coordinator = session.SESSION_COORDINATOR
    journal = JournalSubscriber(session_dir=tmp_path, queue_size=2).attach(coordinator)
    bodies = [testing.chat_completion_body(f"answer {i}", model=MODEL) for i in range(3)]
    scripted = testing.scripted_openai(*(testing.json_reply(body) for body in bodies), max_retries=0)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="d", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="run-d", task_id="t")
    for i in range(3):
        adapters.complete(scripted.client, {"model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}]})
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    disk.gate.set()
    assert journal.close()
    rows = read_run_events("d", "run-d", session_dir=tmp_path)["events"]
    dropped = rows[-1]["payload"]["dropped_rows"]
    assert rows[-1]["event"] == "done" and dropped > 0
    trajectory = atif_from_journal("d", "run-d", store=FileStore(tmp_path))
    assert len([s for s in trajectory["steps"] if s["source"] == "agent"]) < 3  # what the dropped rows held is gone
    assert trajectory["extra"] == {"incomplete": True, "dropped_rows": dropped}
    assert validate_atif(trajectory) == []


def test_a_redis_run_whose_rows_the_size_cap_refused_is_no_complete_trajectory(redis_server):
    # The Redis store refuses a run's rows past its size cap (their trajectory records with them) and only
    # counts them (run_stats()["refused"]); the run's end still fits: a trajectory rebuilt from what is left
    # must not read as the whole run, as one whose writer dropped rows does not.
    store = RedisStreamStore(redis_server.url, prefix=f"relay-test:{uuid.uuid4().hex[:12]}", max_run_bytes=9000)
    try:
        coordinator = session.SESSION_COORDINATOR
        journal = JournalSubscriber(store=store).attach(coordinator)
        bodies = [testing.chat_completion_body(f"answer {i} " + "w" * 400, model=MODEL) for i in range(8)]
        scripted = testing.scripted_openai(*(testing.json_reply(body) for body in bodies), max_retries=0)
        lease = coordinator.acquire_conversation(
            profile_key=session.current_profile_key(), session_id="r", platform="t"
        )
        turn = coordinator.begin_turn(lease, turn_id="run-r", task_id="t")
        for i in range(8):
            adapters.complete(scripted.client, {"model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}]})
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        assert journal.close()
        refused = store.run_stats("r", "run-r")["refused"]
        rows = store.read("r", "run-r")["events"]
        assert refused > 0 and rows[-1]["event"] == "done"  # the cap refused rows; the run's end is recorded
        trajectory = atif_from_journal("r", "run-r", store=store)
        assert len([s for s in trajectory["steps"] if s["source"] == "agent"]) < 8  # what the refused rows held
        assert trajectory["extra"] == {"incomplete": True, "dropped_rows": refused}
        assert validate_atif(trajectory) == []
    finally:
        store.close()
