"""A stream the provider ends without its terminal marker: the caller's iteration ends as the provider's did,
and the record (events, spans, journal, cost) says the answer was cut short: failed, ``IncompleteStream``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from relay_runtime import Recorder, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.run_journal import JournalSubscriber, read_run_events


class Api:
    def __init__(
        self,
        scripted: Callable[[], t.Scripted],
        kwargs: dict[str, Any],
        frames: Callable[[bool], list[bytes]],
        api_mode: str | None = None,
    ) -> None:
        self.scripted = scripted
        self.kwargs = kwargs
        self.frames = frames  # frames(complete)
        self.api_mode = api_mode


def _chat(complete: bool) -> list[bytes]:
    chunks = t.chat_chunks(["Hel", "lo"])
    return t.openai_chat_sse(chunks if complete else chunks[:-1])  # [DONE] still comes: no finish_reason


def _responses(complete: bool) -> list[bytes]:
    events = t.responses_events(["Hel", "lo"])
    return t.typed_sse(events if complete else events[:-1])  # no response.completed


def _messages(complete: bool) -> list[bytes]:
    events = t.anthropic_events(["Hel", "lo"])
    return t.typed_sse(events if complete else events[:-1])  # no message_stop


APIS = {
    "chat": Api(t.scripted_openai, {"model": "gpt-x", "messages": []}, _chat),
    "responses": Api(t.scripted_openai, {"model": "gpt-x", "input": "hi"}, _responses, "responses"),
    "messages": Api(t.scripted_anthropic, {"model": "claude-x", "max_tokens": 9, "messages": []}, _messages),
}


def _read(api: Api, scripted: t.Scripted, flavour: str) -> int:
    """Read the whole stream the caller's way; the number of chunks it yielded."""
    if flavour == "sync":
        return sum(1 for _ in adapters.stream(scripted.client, api.kwargs, api_mode=api.api_mode))

    async def read() -> int:
        stream = await adapters.astream(scripted.aclient, api.kwargs, api_mode=api.api_mode)
        return len([c async for c in stream])

    return asyncio.run(read())


def _attempt(events: Recorder) -> Any:
    (end,) = events.ends(relay_kind=cv.ATTEMPT)
    return end


def _logical_outcomes(events: Recorder) -> list[Any]:
    return [(e.output or {}).get("outcome") for e in events.ends(relay_kind=cv.LOGICAL_CALL)]


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_stream_without_its_terminal_marker_ends_failed_incomplete_and_nothing_is_raised(
    relay_turn, relay_events, api_name: str, flavour: str
) -> None:
    api = APIS[api_name]
    scripted = api.scripted()
    scripted.add(t.sse_reply(api.frames(False)))
    try:
        read = _read(api, scripted, flavour)  # the caller's iteration ends normally
    finally:
        scripted.client.close()
    assert read == len(api.frames(False)) - (1 if api_name == "chat" else 0)  # every chunk (not [DONE])
    attempt = _attempt(relay_events)
    assert attempt.outcome == "failed" and attempt.error_type == "IncompleteStream"
    assert "terminal marker" in attempt.error_message
    assert attempt.annotated_response.output_text == "Hello"  # what did arrive stays on record
    assert _logical_outcomes(relay_events) == ["failed"]


@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_stream_with_its_terminal_marker_is_a_success(relay_turn, relay_events, api_name: str) -> None:
    api = APIS[api_name]
    scripted = api.scripted()
    scripted.add(t.sse_reply(api.frames(True)))
    try:
        _read(api, scripted, "sync")
    finally:
        scripted.client.close()
    attempt = _attempt(relay_events)
    assert attempt.outcome == "success" and attempt.error_type is None
    assert _logical_outcomes(relay_events) == ["success"]


def test_an_incomplete_stream_is_told_as_failed_by_spans_journal_and_cost(tmp_path: Path, relay_home: Any) -> None:
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    exporter = OTelExporter(tracer).attach(host)
    journal = JournalSubscriber(session_dir=tmp_path).attach(host)
    cost.attach(host, PriceCatalog.from_mapping({"anthropic": {"claude-x": {"input": 1.0, "output": 4.0}}}))
    scripted = t.scripted_anthropic(t.sse_reply(_messages(False)))
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="sess-1", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="run-1", task_id="task")
    try:
        text = "".join(
            e.delta.text for e in adapters.stream(scripted.client, APIS["messages"].kwargs)
            if e.type == "content_block_delta"
        )  # fmt: skip
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        scripted.client.close()
        assert journal.flush(timeout=10)
        journal.detach()
        exporter.shutdown()
    assert text == "Hello"
    (span,) = [s for s in spans.get_finished_spans() if s.name == "chat claude-x"]
    assert span.status.status_code is StatusCode.ERROR and span.attributes["error.type"] == "IncompleteStream"
    (logical,) = [s for s in spans.get_finished_spans() if s.name == "logical_llm_call"]
    assert logical.status.status_code is StatusCode.ERROR
    rows = read_run_events("sess-1", "run-1", session_dir=tmp_path)["events"]
    attempt_rows = [r["payload"] for r in rows if r["event"] == "span" and r["payload"]["kind"] == "attempt"]
    assert [(r["outcome"], r.get("error_type")) for r in attempt_rows] == [("failed", "IncompleteStream")]
    (charge,) = [r["payload"] for r in rows if r["event"] == "cost"]
    # anthropic_events' usage: 30 input tokens at message_start, 9 output at message_delta; all of it wasted.
    assert charge["amount"] == pytest.approx((30 * 1.0 + 9 * 4.0) * 1e-6) and charge["wasted"] is True
