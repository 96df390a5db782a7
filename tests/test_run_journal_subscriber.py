"""JournalSubscriber on real relay turns: rows, outcomes, tools, auxiliary calls, slow and failing disks."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from journal_support import (
    CONSUMER,
    ProviderError,
    ScriptedCodec,
    complete_call,
    run_turn,
    stream_call,
)

from relay_runtime import LLMRequest, calls, session
from relay_runtime import conventions as cv
from relay_runtime.integrations.run_journal import JournalSubscriber, latest_run_summary, read_run_events
from relay_runtime.integrations.run_journal import background as background_module


@pytest.fixture(autouse=True)
def clean_sessions():
    session.reset_for_tests()
    yield
    session.reset_for_tests()


def test_a_streamed_turn_becomes_a_run(tmp_path):
    chunks = [
        {"model": "m-1", "reasoning": "let me think"},
        {"model": "m-1", "text": "Hel"},
        {"model": "m-1", "text": "lo ✓"},
        {"model": "m-1"},  # a chunk with nothing to say writes nothing
    ]
    result = run_turn(tmp_path, lambda: stream_call("openai", "m", chunks))
    assert result.names == ["status", "runtime_model", "reasoning", "token", "token", "done"]
    assert [row["seq"] for row in result.rows] == list(range(1, len(result.rows) + 1))
    assert result.payloads("status") == [{"type": "run_started", "task_id": "task-1"}]
    assert result.payloads("runtime_model") == [
        {
            "session_id": "session-a",
            "stream_id": "run-a",
            "model": "m-1",
            "provider": "openai",
            "fallback_active": False,
            "phase": "observed_output",
        }
    ]
    assert result.payloads("token") == [{"text": "Hel"}, {"text": "lo ✓"}]
    assert result.payloads("done") == [
        {"usage": {"input_tokens": 3, "output_tokens": 4, "used_model": "m-1", "used_provider": "openai"}}
    ]
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary is not None
    assert summary["last_assistant_text"] == "Hello ✓" and summary["terminal_state"] == "completed"
    assert summary["runtime_model"]["model"] == "m-1"


def test_a_retry_on_the_same_route_is_not_a_fallback(tmp_path):
    def body():
        stream_call("openai", "m", [{"model": "m-1", "text": "par"}], fail=True)
        stream_call("openai", "m", [{"model": "m-1", "text": "full answer"}])

    result = run_turn(tmp_path, body)
    assert "warning" not in result.names
    assert len(result.payloads("runtime_model")) == 1
    assert result.payloads("runtime_model")[0]["fallback_active"] is False


def _broken_then(provider: str, model: str) -> Any:
    """A stream that broke after its first words, then the answer streamed again (same route or another)."""

    def body() -> None:
        stream_call("openai", "m", [{"model": "m-1", "text": "one "}], call_id="call-0")
        stream_call("openai", "m", [{"model": "m-1", "text": "The ans"}], fail=True)
        stream_call(
            provider, model, [{"model": f"{model}-1", "text": "The "}, {"model": f"{model}-1", "text": "answer"}]
        )

    return body


@pytest.mark.parametrize(("provider", "model"), [("openai", "m"), ("anthropic", "claude")])
def test_the_last_assistant_text_is_the_answer_streamed_again_after_a_broken_stream(tmp_path, provider, model):
    # A retry's words are the answer again, not more of it ("The ansThe answer" was no one's message); a
    # fallback's first words come before its warning and are its answer's, not lost ("answer" alone).
    result = run_turn(tmp_path, _broken_then(provider, model))
    assert [p["text"] for p in result.payloads("token")] == ["one ", "The ans", "The ", "answer"]
    assert ("warning" in result.names) == (provider != "openai")
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary is not None and summary["last_assistant_text"] == "The answer"


def test_a_stream_that_broke_with_nothing_after_it_is_the_last_text(tmp_path):
    result = run_turn(tmp_path, lambda: stream_call("openai", "m", [{"model": "m-1", "text": "The ans"}], fail=True))
    assert result.payloads("token") == [{"text": "The ans"}]
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary is not None and summary["last_assistant_text"] == "The ans"  # what was said last, cut short


def test_a_changed_serving_model_is_observed_again_without_a_fallback(tmp_path):
    def body():
        stream_call("openai", "m", [{"model": "m-1", "text": "one"}])
        stream_call("openai", "m", [{"model": "m-2", "text": "two"}], call_id="call-2")

    result = run_turn(tmp_path, body)
    assert [p["model"] for p in result.payloads("runtime_model")] == ["m-1", "m-2"]
    assert result.names == ["status", "runtime_model", "token", "runtime_model", "token", "done"]


def test_a_later_call_after_a_failed_call_on_another_route_is_a_fallback(tmp_path):
    def body():
        complete_call("anthropic", "claude", None)
        stream_call("openai", "gpt", [{"model": "gpt-served", "text": "ok"}], call_id="call-2")

    result = run_turn(tmp_path, body)
    [warning] = result.payloads("warning")
    assert warning == {
        "type": "fallback",
        "message": "Switched to fallback: gpt-served (openai)",
        "from_provider": "anthropic",
        "from_model": "claude",
        "to_provider": "openai",
        "to_model": "gpt-served",
    }
    assert [p["fallback_active"] for p in result.payloads("runtime_model")] == [True, True]


def test_the_call_tree_is_written_as_span_rows(tmp_path):
    def body():
        complete_call("anthropic", "claude", None)
        stream_call("openai", "gpt", [{"model": "gpt-served", "text": "ok"}], call_id="call-2")

    result = run_turn(tmp_path, body)
    spans = result.spans
    # Each node is written when it ends: an attempt before the logical call that holds it.
    assert [(s["kind"], s["outcome"]) for s in spans] == [
        ("attempt", "failed"),
        ("logical_call", "failed"),
        ("attempt", "success"),
        ("logical_call", "success"),
    ]
    failed_attempt, failed_call, attempt, call = spans
    assert failed_attempt["parent_id"] == failed_call["id"] and attempt["parent_id"] == call["id"]
    assert failed_attempt["provider"] == "anthropic" and failed_attempt["model"] == "claude"
    assert failed_attempt["error_type"] == "ProviderError"
    assert attempt["provider"] == "openai" and attempt["model"] == "gpt-served"  # who served, not who was asked
    assert call[cv.API_REQUEST_ID] == "call-2"
    assert all(s["duration_s"] >= 0 for s in spans)
    # The tree is beside the story: the summary and the run's text do not change.
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary["last_assistant_text"] == "ok" and summary["terminal_state"] == "completed"


def test_cancelled_turn_and_an_early_break(tmp_path):
    def body():
        stream = calls.stream_current(
            LLMRequest({}, {"model": "m"}),
            lambda r: iter([{"model": "m-1", "text": "a"}, {"model": "m-1", "text": "b"}]),
            name="openai",
            model_name="m",
            codec=ScriptedCodec("openai"),
        )
        for _chunk in stream:
            break
        stream.close()

    result = run_turn(tmp_path, body, outcome="cancelled")
    assert result.names == ["status", "runtime_model", "token", "cancel"]
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary is not None and summary["terminal_state"] == "interrupted-by-user"


def test_failed_turn_carries_the_last_error(tmp_path):
    result = run_turn(tmp_path, lambda: complete_call("openai", "m", None), outcome="failed")
    assert result.names == ["status", "apperror"]
    assert result.payloads("apperror") == [
        {"type": "error", "error_type": "ProviderError", "message": "openai unavailable"}
    ]


def test_a_failed_turn_does_not_blame_an_error_it_recovered_from(tmp_path):
    # The provider failed, the retry answered, then the turn failed for some other reason: the run's error
    # row named the provider's error, which the run got over.
    def body():
        complete_call("openai", "m", None)
        complete_call("openai", "m", {"model": "m-1", "text": "fine"})

    result = run_turn(tmp_path, body, outcome="failed")
    assert result.payloads("apperror") == [{"type": "error", "error_type": "error", "message": "the turn failed"}]
    summary = latest_run_summary("session-a", "run-a", session_dir=tmp_path)
    assert summary is not None and summary["terminal_state"] == "errored"


def test_tools_and_tool_calls(tmp_path):
    def body():
        relay = session.active_turn().relay  # type: ignore[union-attr]
        response = {"model": "m-1", "text": None, "tool_calls": [{"id": "t1", "name": "search", "arguments": "{}"}]}
        complete_call("openai", "m", response)
        assert relay.tools.execute("search", {"q": "weather"}, lambda args: {"hits": 3}) == {"hits": 3}
        with pytest.raises(KeyError):
            relay.tools.execute("lookup", {"key": object()}, lambda args: {}["missing"])
        stream_call("openai", "m", [{"model": "m-1", "text": "It is sunny."}], call_id="call-2")

    result = run_turn(tmp_path, body)
    assert result.names == [
        "status",
        "runtime_model",
        "tool_call",
        "tool",
        "tool_result",
        "tool",
        "tool_result",
        "token",
        "done",
    ]
    assert result.payloads("runtime_model")[0]["phase"] == "route_observed"
    assert result.payloads("tool_call") == [{"calls": [{"id": "t1", "name": "search", "arguments": "{}"}]}]
    tools = result.payloads("tool")
    assert tools[0] == {"name": "search", "args": {"q": "weather"}}
    # Arguments that are not JSON keep their row: such a value is recorded as its text.
    assert tools[1]["name"] == "lookup" and tools[1]["args"]["key"].startswith("<object object at")
    assert "journal.unserializable" not in result.diagnostics
    results = result.payloads("tool_result")
    assert results[0]["outcome"] == "success" and results[0]["duration_ms"] >= 0
    assert results[0]["result"] == {"hits": 3}
    assert results[1]["outcome"] == "failed" and results[1]["error"]["type"] == "KeyError"


def test_auxiliary_calls_only_count_usage(tmp_path):
    def body():
        complete_call("cheap", "title-model", {"model": "title-served", "text": "A title"}, role="auxiliary:title")
        stream_call("cheap", "title-model", [{"model": "t", "text": "x"}], call_id="aux-2", role="auxiliary:x")
        stream_call("openai", "m", [{"model": "m-1", "text": "answer"}], call_id="call-2")

    result = run_turn(tmp_path, body)
    assert [p["model"] for p in result.payloads("runtime_model")] == ["m-1"]
    assert result.payloads("token") == [{"text": "answer"}]
    assert result.payloads("done")[0]["usage"]["input_tokens"] == 5 + 3 + 3


def test_invalid_turn_ids_are_counted_not_journaled(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="relay_runtime.integrations.run_journal")
    result = run_turn(tmp_path, lambda: stream_call("openai", "m", [{"model": "m", "text": "x"}]), run_id="../escape")
    assert result.diagnostics["journal.invalid_ids"] == 1
    assert not (tmp_path / "_run_journal").exists()
    # Said once in the log, so a deployment whose ids never fit learns why its journal stays empty,
    # and without the id itself (it may be personal data).
    said = [r.getMessage() for r in caplog.records if "not a journal id" in r.getMessage()]
    assert len(said) == 1 and "journal.invalid_ids" in said[0] and "escape" not in said[0]


class StuckDisk:
    """Journal writes wait at a gate until the test opens it, and say which threads made them.

    A write on the agent's (the test's) thread is let through, so a journal that wrongly writes
    there fails the thread check at once instead of hanging on the gate.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.agent = threading.current_thread()
        self.gate = threading.Event()
        self.writer_threads: set[threading.Thread] = set()
        self._real = background_module.append_run_event
        monkeypatch.setattr(background_module, "append_run_event", self._append)

    def _append(self, *args: Any, **kwargs: Any) -> Any:
        self.writer_threads.add(threading.current_thread())
        if threading.current_thread() is not self.agent:
            self.gate.wait(timeout=10)
        return self._real(*args, **kwargs)

    @property
    def agent_never_waited(self) -> bool:
        return self.agent not in self.writer_threads


def test_a_slow_disk_does_not_slow_the_agent(tmp_path, monkeypatch):
    # The disk stays blocked until the agent's stream is over: the agent finishes anyway, and every
    # row is written by the journal's own thread.
    disk = StuckDisk(monkeypatch)
    chunks = [{"model": "m", "text": f"{i} "} for i in range(40)]

    def body():
        stream_call("openai", "m", chunks)
        disk.gate.set()

    result = run_turn(tmp_path, body)
    assert disk.writer_threads and disk.agent_never_waited
    assert result.names.count("token") == 40 and result.names[-1] == "done"


def test_a_failing_disk_is_counted_and_never_raised(tmp_path, monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(background_module, "append_run_event", broken)
    result = run_turn(tmp_path, lambda: stream_call("openai", "m", [{"model": "m", "text": "x"}]))
    assert result.rows == []
    assert result.diagnostics["journal.write_errors"] == 6  # status, runtime_model, token, 2 spans, done


def test_a_full_queue_drops_and_counts_but_never_the_runs_end(tmp_path, monkeypatch):
    # Rows dropped under load leave holes; dropping the terminal row too would leave the run
    # "running" for ever (and its SSE followers waiting). The end row goes in, and admits the holes.
    disk = StuckDisk(monkeypatch)
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(str(tmp_path / "profile"))
    subscriber = JournalSubscriber(host.relay, session_dir=tmp_path, queue_size=2)
    subscriber.register()
    host.retain_managed_execution(CONSUMER)
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="r", task_id="t")
    stream_call("openai", "m", [{"model": "m", "text": str(i)} for i in range(20)])
    coordinator.end_turn(turn, outcome="success")
    assert subscriber.flush(timeout=0.05) is False  # the writer is still stuck
    assert disk.agent_never_waited
    disk.gate.set()
    assert subscriber.flush(timeout=10)
    written = read_run_events("s", "r", session_dir=tmp_path)["events"]
    dropped = host.relay.diagnostics()["journal.dropped"]
    # status + runtime_model + 20 tokens + 2 spans + done were produced; what was not written was counted.
    assert len(written) + dropped == 25 and dropped > 0
    assert [row["seq"] for row in written] == list(range(1, len(written) + 1))
    assert written[-1]["event"] == "done" and written[-1]["payload"]["dropped_rows"] == dropped
    summary = latest_run_summary("s", "r", session_dir=tmp_path)
    assert summary is not None and summary["terminal"] and summary["terminal_state"] == "completed"
    coordinator.release_conversation(lease)
    assert subscriber.close() and subscriber.close()
    # Closed: deregistered, and nothing more is journaled.
    assert "run_journal" not in host.relay.subscribers.names()


def test_concurrent_turns_in_threads(tmp_path):
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(str(tmp_path / "profile"))
    subscriber = JournalSubscriber(host.relay, session_dir=tmp_path)
    subscriber.register()
    host.retain_managed_execution(CONSUMER)
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=f"s{i}", platform="t")
            turn = coordinator.begin_turn(lease, turn_id=f"r{i}", task_id="t")
            start.wait(timeout=10)
            stream_call("openai", "m", [{"model": f"m{i}", "text": f"{i}:{k} "} for k in range(30)])
            coordinator.end_turn(turn, outcome="success")
            coordinator.release_conversation(lease)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert subscriber.flush(timeout=10)
    for i in range(6):
        rows = read_run_events(f"s{i}", f"r{i}", session_dir=tmp_path)["events"]
        assert [row["seq"] for row in rows] == list(range(1, 36))  # 33 rows of the story, 2 of its call tree
        assert [row["payload"]["text"] for row in rows if row["event"] == "token"] == [f"{i}:{k} " for k in range(30)]
        assert rows[1]["payload"]["model"] == f"m{i}"
    subscriber.close()


@pytest.mark.asyncio
async def test_async_streams_in_concurrent_tasks(tmp_path):
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(str(tmp_path / "profile"))
    subscriber = JournalSubscriber(host.relay, session_dir=tmp_path)
    subscriber.register()
    host.retain_managed_execution(CONSUMER)

    async def one_turn(i: int) -> None:
        lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=f"s{i}", platform="t")
        turn = coordinator.begin_turn(lease, turn_id=f"r{i}", task_id="t")

        async def chunks(request: LLMRequest) -> Any:
            for k in range(10):
                await asyncio.sleep(0)
                yield {"model": f"m{i}", "text": f"{k}"}
            if i == 2:
                raise ProviderError("mid-stream")

        stream = await calls.stream_current_async(
            LLMRequest({}, {"model": "m"}),
            chunks,
            name="openai",
            model_name="m",
            metadata={cv.API_REQUEST_ID: f"c{i}"},
            codec=ScriptedCodec("openai"),
        )
        outcome = "success"
        try:
            async for _ in stream:
                pass
        except ProviderError:
            outcome = "failed"
        coordinator.end_turn(turn, outcome=outcome)
        coordinator.release_conversation(lease)

    await asyncio.gather(*(one_turn(i) for i in range(4)))
    assert await asyncio.to_thread(subscriber.flush, 10)
    for i in range(4):
        summary = latest_run_summary(f"s{i}", f"r{i}", session_dir=tmp_path)
        assert summary is not None
        assert summary["last_assistant_text"] == "0123456789"
        assert summary["terminal_state"] == ("errored" if i == 2 else "completed")
        assert summary["runtime_model"]["model"] == f"m{i}"
    subscriber.close()


def test_a_bad_fsync_policy_is_refused_when_the_subscriber_is_made(tmp_path, monkeypatch):
    # Found per row on the writer thread, a typo would only count write errors while nothing is journaled.
    with pytest.raises(ValueError, match="fsync policy"):
        JournalSubscriber(session_dir=tmp_path, fsync="sometimes")
    monkeypatch.setenv("RELAY_JOURNAL_FSYNC", "always")
    with pytest.raises(ValueError, match="fsync policy"):
        JournalSubscriber(session_dir=tmp_path)
    monkeypatch.setenv("RELAY_JOURNAL_FSYNC", "eager")
    assert JournalSubscriber(session_dir=tmp_path).close()


def test_a_rejected_auxiliary_answer_is_a_warning_row_and_its_tokens_count(tmp_path):
    from relay_runtime import adapters, auxiliary
    from relay_runtime.adapters import testing as t

    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body("", model="title-served", usage=t.chat_usage(7, 0))),
        t.json_reply(t.chat_completion_body("A title", model="title-served", usage=t.chat_usage(7, 2))),
    )

    @auxiliary.auxiliary_call
    def title(task):
        auxiliary.set_route("openai", "title-model", "chat_completions")
        try:
            return auxiliary.validate_response(adapters.complete(scripted.client, {"model": "t", "messages": []}), task)
        except RuntimeError:
            return auxiliary.validate_response(adapters.complete(scripted.client, {"model": "t", "messages": []}), task)

    try:
        result = run_turn(tmp_path, lambda: title("title"))
    finally:
        scripted.client.close()
    (warning,) = result.payloads("warning")
    assert warning["type"] == "response_rejected"
    assert warning["message"] == "Auxiliary title: LLM returned invalid response (empty message content)"
    assert (warning["provider"], warning["model"]) == ("openai", "title-served")
    assert (warning["call_role"], warning["retry_count"]) == ("auxiliary:title", 0)
    # Both answers were paid for; the auxiliary call still observes no model for the run.
    usage = result.payloads("done")[0]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (14, 2)
    assert result.payloads("runtime_model") == []
