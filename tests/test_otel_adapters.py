"""Spans for every adapter, with real OpenAI and Anthropic SDK clients over ``httpx2.MockTransport``.

OpenAI chat completions and responses, Anthropic messages; sync, async and
streamed; SDK retries, a fallback across providers, failures, cancellation,
and the attempt's ``traceparent`` reaching the HTTP request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Pipeline, span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import adapters, auxiliary, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter

pytestmark = pytest.mark.usefixtures("span_path")


@pytest.fixture
def spans(relay_home: Any) -> Iterator[Pipeline]:
    out = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(out.tracer_provider, out.meter_provider).attach(host, propagate_context=True)
    lease = session.SESSION_COORDINATOR.acquire_conversation(
        profile_key=host.profile_key, session_id="chat-42", platform="test"
    )
    turn = session.SESSION_COORDINATOR.begin_turn(lease, turn_id="turn-1", task_id="task-1")
    try:
        yield out
    finally:
        session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
        session.SESSION_COORDINATOR.release_conversation(lease)
        exporter.detach()
        assert exporter.diagnostics()["otel.open_spans"] == 0


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def check_attempt(span: ReadableSpan, *, provider: str, model: str, response_model: str, tokens: tuple[int, int]):
    a = span.attributes
    assert span.kind is SpanKind.CLIENT
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == provider
    assert a["server.address"] == ("openai.test" if provider == "openai" else "anthropic.test")
    assert a["gen_ai.request.model"] == model
    assert a["gen_ai.response.model"] == response_model
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == tokens
    assert a["gen_ai.conversation.id"] == "chat-42"
    assert a["relay.outcome"] == "success"
    assert span.status.status_code is StatusCode.UNSET


MESSAGES = [{"role": "user", "content": "hi"}]


# -- OpenAI chat completions ------------------------------------------------------------------


def test_openai_chat_complete(spans):
    s = t.scripted_openai(t.json_reply(t.chat_completion_body("hello", model="gpt-test-0613")))
    out = adapters.complete(s.client, {"model": "gpt-test", "messages": MESSAGES, "temperature": 0.5})
    assert out.choices[0].message.content == "hello"
    span = spans.one("chat gpt-test")
    check_attempt(span, provider="openai", model="gpt-test", response_model="gpt-test-0613", tokens=(12, 5))
    assert span.attributes["gen_ai.request.temperature"] == 0.5
    assert span.attributes["gen_ai.response.id"] == "chatcmpl-1"
    assert span.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    # The attempt's trace context went out with the HTTP request.
    (request,) = s.script.requests
    assert request.headers["traceparent"] == traceparent_of(span)
    assert "sk-test" not in str(dict(span.attributes))


@pytest.mark.asyncio
async def test_openai_chat_acomplete(spans):
    s = t.scripted_openai(
        t.json_reply(t.chat_completion_body("hi", usage=t.chat_usage(100, 3, cached=80, reasoning=2)))
    )
    await adapters.acomplete(s.aclient, {"model": "gpt-test", "messages": MESSAGES})
    span = spans.one("chat gpt-test")
    check_attempt(span, provider="openai", model="gpt-test", response_model="gpt-test", tokens=(100, 3))
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 80
    assert span.attributes["gen_ai.usage.reasoning.output_tokens"] == 2
    assert s.script.requests[0].headers["traceparent"] == traceparent_of(span)


def test_openai_chat_stream(spans):
    chunks = t.chat_chunks(["hel", "lo"], model="gpt-test-0613", usage=t.chat_usage(7, 2))
    s = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)))
    stream = adapters.stream(
        s.client, {"model": "gpt-test", "messages": MESSAGES, "stream_options": {"include_usage": True}}
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "hello"
    span = spans.one("chat gpt-test")
    check_attempt(span, provider="openai", model="gpt-test", response_model="gpt-test-0613", tokens=(7, 2))
    assert span.attributes["gen_ai.request.stream"] is True
    assert span.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert s.script.requests[0].headers["traceparent"] == traceparent_of(span)


@pytest.mark.asyncio
async def test_openai_chat_astream_cancelled_mid_stream(spans):
    chunks = t.chat_chunks(["a", "b", "c"])
    s = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)))
    got_first = asyncio.Event()

    async def consume() -> None:
        stream = await adapters.astream(s.aclient, {"model": "gpt-test", "messages": MESSAGES})
        try:
            async for _chunk in stream:
                got_first.set()
                await asyncio.sleep(30)
        finally:
            await stream.aclose()

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(got_first.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    span = spans.one("chat gpt-test")
    assert span.attributes["relay.outcome"] == "cancelled"
    assert span.status.status_code is StatusCode.UNSET


def test_openai_chat_sdk_retries_stay_one_attempt(spans):
    s = t.scripted_openai(t.error(500), t.json_reply(t.chat_completion_body("ok")))
    adapters.complete(s.client, {"model": "gpt-test", "messages": MESSAGES})
    span = spans.one("chat gpt-test")
    assert span.attributes["relay.sdk_retries"] == 1
    assert span.attributes["relay.outcome"] == "success"
    assert len(s.script.requests) == 2
    # Both HTTP tries of the one attempt carry its trace context.
    assert {r.headers["traceparent"] for r in s.script.requests} == {traceparent_of(span)}


def test_openai_chat_provider_error(spans):
    s = t.scripted_openai(t.error(400, "bad model"))
    import openai

    with pytest.raises(openai.BadRequestError):
        adapters.complete(s.client, {"model": "gpt-nope", "messages": MESSAGES})
    span = spans.one("chat gpt-nope")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "BadRequestError"
    assert "bad model" in span.status.description
    assert spans.one("logical_llm_call").attributes["relay.outcome"] == "failed"
    durations = [
        p
        for rm in spans.reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "gen_ai.client.operation.duration"
        for p in m.data.data_points
    ]
    assert [p.attributes["error.type"] for p in durations] == ["BadRequestError"]


# -- OpenAI responses ---------------------------------------------------------------------------


def test_openai_responses_complete(spans):
    s = t.scripted_openai(t.json_reply(t.responses_body("hello", model="gpt-r-1", usage=t.responses_usage(20, 7))))
    adapters.complete(s.client, {"model": "gpt-r", "input": "hi"}, api_mode="responses")
    span = spans.one("chat gpt-r")
    check_attempt(span, provider="openai", model="gpt-r", response_model="gpt-r-1", tokens=(20, 7))
    assert span.attributes["gen_ai.response.id"] == "resp_1"


@pytest.mark.asyncio
async def test_openai_responses_astream(spans):
    events = t.responses_events(["he", "llo"], model="gpt-r-1", usage=t.responses_usage(4, 2))
    s = t.scripted_openai(t.sse_reply(t.typed_sse(events)))
    stream = await adapters.astream(s.aclient, {"model": "gpt-r", "input": "hi"}, api_mode="responses")
    seen = [e async for e in stream]
    assert len(seen) == len(events)
    span = spans.one("chat gpt-r")
    check_attempt(span, provider="openai", model="gpt-r", response_model="gpt-r-1", tokens=(4, 2))
    assert "gen_ai.response.time_to_first_chunk" in span.attributes


# -- Anthropic messages ---------------------------------------------------------------------------


def test_anthropic_complete_adds_cache_tokens(spans):
    usage = t.anthropic_usage(10, 9, cache_read=200, cache_creation=50)
    s = t.scripted_anthropic(t.json_reply(t.anthropic_message_body("hi", model="claude-test-1", usage=usage)))
    adapters.complete(s.client, {"model": "claude-test", "max_tokens": 100, "messages": MESSAGES})
    span = spans.one("chat claude-test")
    check_attempt(span, provider="anthropic", model="claude-test", response_model="claude-test-1", tokens=(260, 9))
    assert span.attributes["gen_ai.request.max_tokens"] == 100
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 200
    assert span.attributes["gen_ai.usage.cache_creation.input_tokens"] == 50
    assert span.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert s.script.requests[0].headers["traceparent"] == traceparent_of(span)
    assert "x-api-key" not in str(dict(span.attributes))


@pytest.mark.asyncio
async def test_anthropic_acomplete(spans):
    s = t.scripted_anthropic(t.json_reply(t.anthropic_message_body("hi")))
    await adapters.acomplete(s.aclient, {"model": "claude-test", "max_tokens": 10, "messages": MESSAGES})
    check_attempt(
        spans.one("chat claude-test"),
        provider="anthropic",
        model="claude-test",
        response_model="claude-test",
        tokens=(30, 9),
    )


def test_anthropic_stream_and_early_close(spans):
    events = t.anthropic_events(["he", "llo"], input_usage=t.anthropic_usage(5, 1, cache_read=10), output_tokens=4)
    s = t.scripted_anthropic(t.sse_reply(t.typed_sse(events)), t.sse_reply(t.typed_sse(events)))
    kwargs = {"model": "claude-test", "max_tokens": 10, "messages": MESSAGES}
    assert len(list(adapters.stream(s.client, kwargs))) == len(events)
    stream = adapters.stream(s.client, kwargs)
    next(iter(stream))
    stream.close()
    done, closed = spans.by_name("chat claude-test")
    assert done.attributes["relay.outcome"] == "success"
    assert done.attributes["gen_ai.usage.input_tokens"] == 15
    assert done.attributes["gen_ai.usage.output_tokens"] == 4
    assert closed.attributes["relay.outcome"] == "cancelled"
    assert closed.status.status_code is StatusCode.UNSET


@pytest.mark.asyncio
async def test_anthropic_astream_failing_mid_stream(spans):
    events = t.anthropic_events(["he", "llo"])
    s = t.scripted_anthropic(t.sse_reply(t.typed_sse(events[:3]), fail_with=ConnectionResetError("peer reset")))
    stream = await adapters.astream(s.aclient, {"model": "claude-test", "max_tokens": 10, "messages": MESSAGES})
    with pytest.raises(Exception):  # noqa: B017 - whichever error the SDK wraps the reset in
        async for _event in stream:
            pass
    span = spans.one("chat claude-test")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["relay.outcome"] == "failed"
    assert span.attributes["error.type"]


# -- a fallback across providers, one logical call ---------------------------------------------------


def test_auxiliary_fallback_from_openai_to_anthropic(spans):
    import openai

    primary = t.scripted_openai(t.error(400, "context too long"))
    fallback = t.scripted_anthropic(t.json_reply(t.anthropic_message_body("summary")))

    @auxiliary.auxiliary_call
    def summarize(task: str) -> Any:
        auxiliary.set_route("openai", "gpt-test", "chat_completions")
        try:
            return auxiliary.validate_response(
                adapters.complete(primary.client, {"model": "gpt-test", "messages": MESSAGES}), task
            )
        except openai.BadRequestError:
            auxiliary.set_route("anthropic", "claude-test", "anthropic_messages")
            response = adapters.complete(
                fallback.client, {"model": "claude-test", "max_tokens": 50, "messages": MESSAGES}
            )
            return auxiliary.validate_response(response, task)

    assert summarize("compression").content[0].text == "summary"
    logical = spans.one("logical_llm_call")
    failed, ok = spans.one("chat gpt-test"), spans.one("chat claude-test")
    assert failed.parent.span_id == ok.parent.span_id == logical.context.span_id
    assert (failed.attributes["relay.retry_count"], ok.attributes["relay.retry_count"]) == (0, 1)
    assert failed.attributes["relay.api_request_id"] == ok.attributes["relay.api_request_id"]
    assert logical.attributes["relay.call_role"] == "auxiliary:compression"
    assert failed.status.status_code is StatusCode.ERROR
    assert logical.attributes["relay.outcome"] == "success"


def test_a_rejected_auxiliary_answer_is_an_error_span_saying_why(spans: Pipeline) -> None:
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body("   ", usage=t.chat_usage(7, 1))),
        t.json_reply(t.chat_completion_body("ok", usage=t.chat_usage(7, 1))),
    )

    @auxiliary.auxiliary_call
    def title(task: str) -> Any:
        auxiliary.set_route("openai", "m", "chat_completions")
        try:
            return auxiliary.validate_response(adapters.complete(scripted.client, {"model": "m", "messages": []}), task)
        except RuntimeError:
            return auxiliary.validate_response(adapters.complete(scripted.client, {"model": "m", "messages": []}), task)

    try:
        title("title")
    finally:
        scripted.client.close()
    rejected, accepted = sorted(spans.by_name("chat m"), key=lambda s: s.start_time)
    assert rejected.attributes["error.type"] == "response_rejected"
    assert rejected.status.status_code is StatusCode.ERROR
    assert "invalid response (empty message content)" in (rejected.status.description or "")
    assert rejected.attributes["gen_ai.usage.input_tokens"] == 7  # its tokens stay on the span
    assert accepted.status.status_code is not StatusCode.ERROR and "error.type" not in accepted.attributes
    assert spans.one("logical_llm_call").attributes["relay.outcome"] == "success"


def test_a_call_in_flight_when_its_turn_ends_is_one_cancelled_span_and_one_metric_point(relay_home: Any) -> None:
    """The turn's end ends a provider call still waiting for its answer as cancelled: its span says so (not an
    abandoned error), it is counted once in metrics, and its late answer adds no second record."""
    import contextvars
    import threading

    import httpx2
    import openai

    out = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(out.tracer_provider, out.meter_provider).attach(host)
    lease = session.SESSION_COORDINATOR.acquire_conversation(
        profile_key=host.profile_key, session_id="chat-42", platform="test"
    )
    turn = session.SESSION_COORDINATOR.begin_turn(lease, turn_id="turn-1", task_id="task-1")
    inside, answer = threading.Event(), threading.Event()

    def handler(request: httpx2.Request) -> httpx2.Response:
        inside.set()
        answer.wait(5)
        return httpx2.Response(200, json=t.chat_completion_body("late", model="gpt-test-0613"))

    client = openai.OpenAI(
        api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )  # fmt: skip
    got: list[Any] = []
    context = contextvars.copy_context()
    caller = threading.Thread(
        target=lambda: got.append(context.run(adapters.complete, client, {"model": "gpt-test", "messages": MESSAGES}))
    )
    caller.start()
    try:
        assert inside.wait(5)
        session.SESSION_COORDINATOR.end_turn(turn, outcome="cancelled")
        session.SESSION_COORDINATOR.release_conversation(lease)
    finally:
        answer.set()
        caller.join(5)
    client.close()
    assert got and got[0].choices[0].message.content == "late"  # the caller still gets its answer
    attempt = out.one("chat gpt-test")
    assert attempt.attributes["relay.outcome"] == "cancelled"
    assert attempt.status.status_code is StatusCode.UNSET and "error.type" not in attempt.attributes
    logical = out.one("logical_llm_call")
    assert attempt.parent is not None and attempt.parent.span_id == logical.context.span_id
    assert attempt.end_time <= logical.end_time <= out.one("turn").end_time
    assert exporter.diagnostics().get("otel.spans_abandoned", 0) == 0
    assert exporter.diagnostics().get("otel.unmatched_ends", 0) == 0
    assert exporter.diagnostics()["otel.open_spans"] == 0
    (duration,) = out.histogram("gen_ai.client.operation.duration")
    assert duration.count == 1
    exporter.detach()


def test_a_call_whose_span_was_evicted_still_counts_in_metrics_when_it_ends(relay_home: Any) -> None:
    """Past ``max_open_spans`` the oldest open leaf is ended early; if that is a provider call still running,
    the call itself still happens: its duration and tokens are recorded when it ends."""
    from relay_runtime import ScopeType

    out = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    # conversation, turn, logical call and the call itself fill the table; one more scope evicts the call's span.
    exporter = OTelExporter(out.tracer_provider, out.meter_provider, max_open_spans=4).attach(host)
    lease = session.SESSION_COORDINATOR.acquire_conversation(
        profile_key=host.profile_key, session_id="chat-42", platform="test"
    )
    turn = session.SESSION_COORDINATOR.begin_turn(lease, turn_id="turn-1", task_id="task-1")
    s = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b"], usage=t.chat_usage()))))
    stream = adapters.stream(s.client, {"model": "gpt-test", "messages": MESSAGES, "stream": True})
    leak = host.relay.scope.push("leak", ScopeType.FUNCTION, parent=turn.scope, attach=False)
    assert exporter.diagnostics()["otel.spans_abandoned"] == 1
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "ab"
    host.relay.scope.end(leak)
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    session.SESSION_COORDINATOR.release_conversation(lease)
    s.client.close()
    assert out.one("chat gpt-test").attributes["relay.outcome"] == "abandoned"
    (duration,) = out.histogram("gen_ai.client.operation.duration")
    assert duration.count == 1 and duration.attributes["gen_ai.response.model"] == "gpt-test"
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in out.histogram("gen_ai.client.token.usage")}
    assert tokens == {"input": 12, "output": 5}
    (ttfc,) = out.histogram("gen_ai.client.operation.time_to_first_chunk")
    assert ttfc.count == 1
    exporter.detach()
