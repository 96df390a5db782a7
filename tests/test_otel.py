"""OTelExporter against a real OTel SDK pipeline (in-memory span exporter and metric reader).

Scope trees are driven through relay_runtime itself: sessions, turns, managed
calls (``relay_runtime.calls`` / ``relay.llm``) with a hand-written codec,
tools, streams, and the failure and abandonment paths.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Pipeline, span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import LLMRequest, Relay, ScopeType, session
from relay_runtime import calls as relay_calls
from relay_runtime import conventions as cv
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.otel import metrics as otel_metrics
from relay_runtime.recorder import Recorder
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, TokenUsage

pytestmark = pytest.mark.usefixtures("span_path")

# -- a hand-written codec over plain dict "SDK" kwargs and responses ------------------------------


class DictCodec:
    """Chat-completions-like kwargs in, dict responses out; streams of {"delta", ...} chunks."""

    operation = "chat"

    def __init__(self, provider: str = "openai") -> None:
        self.provider = provider

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        params = {k: v for k, v in content.items() if k not in ("model", "messages", "system", "stream")}
        return AnnotatedLLMRequest(
            model=content.get("model"),
            messages=list(content.get("messages", [])),
            system=content.get("system"),
            params=params,
            stream=bool(content.get("stream")),
            provider=self.provider,
            operation=self.operation,
        )

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        out = dict(content)
        for key, value in changes.items():
            if key == "params":
                out.update(value)
            else:
                out[key] = value
        return out

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        usage = response.get("usage", {})
        return AnnotatedLLMResponse(
            model=response.get("model"),
            id=response.get("id"),
            finish_reasons=[response.get("finish_reason", "stop")],
            usage=TokenUsage(
                input_tokens=usage.get("input"),
                output_tokens=usage.get("output"),
                cache_read_tokens=usage.get("cache_read"),
                cache_creation_tokens=usage.get("cache_write"),
                reasoning_tokens=usage.get("reasoning"),
            ),
            output_text=response.get("text"),
            tool_calls=response.get("tool_calls", []),
        )

    def accumulator(self) -> Accumulator:
        return Accumulator(self)


class Accumulator:
    def __init__(self, codec: DictCodec) -> None:
        self.codec = codec
        self.text: list[str] = []
        self.last: dict[str, Any] = {}

    def add(self, chunk: Any) -> ChunkDelta | None:
        self.last = chunk
        self.text.append(chunk.get("delta", ""))
        return ChunkDelta(text=chunk.get("delta", ""), model=chunk.get("model"))

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        response = {**self.last, "text": "".join(self.text)}
        return response, self.codec.annotate_response(response)


def response(model: str = "gpt-test-0613", **usage: int) -> dict[str, Any]:
    return {
        "id": "resp-1",
        "model": model,
        "text": "hello there",
        "finish_reason": "stop",
        "usage": usage or {"input": 12, "output": 5},
    }


def request(model: str = "gpt-test", **extra: Any) -> LLMRequest:
    content = {"model": model, "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2, **extra}
    return LLMRequest({"authorization": "Bearer sk-secret-123", "x-team": "a"}, content)


# -- the OTel pipeline -----------------------------------------------------------------------------


@pytest.fixture
def pipeline() -> Pipeline:
    return Pipeline()


@pytest.fixture
def host(relay_home: Any) -> session.Host:
    return session.SESSION_COORDINATOR.host(session.current_profile_key())


@pytest.fixture
def exporter(pipeline: Pipeline, host: session.Host) -> Iterator[OTelExporter]:
    exp = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(host)
    try:
        yield exp
    finally:
        exp.detach()


@pytest.fixture
def recorder(host: session.Host) -> Iterator[Recorder]:
    rec = Recorder()
    host.relay.subscribers.register(rec, name="test.recorder")
    try:
        yield rec
    finally:
        host.relay.subscribers.deregister("test.recorder")


def open_turn(host: session.Host, session_id: str = "sess-1", turn_id: str = "turn-1") -> session.Turn:
    lease = session.SESSION_COORDINATOR.acquire_conversation(
        profile_key=host.profile_key, session_id=session_id, platform="cli", model="gpt-test"
    )
    return session.SESSION_COORDINATOR.begin_turn(lease, turn_id=turn_id, task_id="task-7")


def agent_of(host: session.Host) -> str:
    return session.DEFAULT_AGENT_NAME  # conversations opened without an agent_name


def close_turn(turn: session.Turn, outcome: str = "success") -> None:
    session.SESSION_COORDINATOR.end_turn(turn, outcome=outcome)
    session.SESSION_COORDINATOR.release_conversation(turn.lease)


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    for s in spans:
        if s.context.span_id == span.parent.span_id:
            return s
    raise AssertionError(f"parent of {span.name} not exported")


# -- the tree ------------------------------------------------------------------------------------


def test_session_tree_names_kinds_parentage_and_times(pipeline, host, exporter, recorder):
    turn = open_turn(host)
    result = relay_calls.execute_current(
        request(max_tokens=64, top_p=0.9, stop="END"),
        lambda req: response(),
        name="openai",
        metadata={cv.API_REQUEST_ID: "req-1", cv.CALL_ROLE: "primary", cv.SERVER_ADDRESS: "api.example.com:8443"},
        codec=DictCodec(),
    )
    assert result["text"] == "hello there"
    tool_result = host.relay.tools.execute("search", {"q": "x"}, lambda args: {"hits": 3})
    assert tool_result == {"hits": 3}
    close_turn(turn)

    spans = pipeline.finished()
    assert sorted(s.name for s in spans) == sorted(
        [f"invoke_agent {agent_of(host)}", "turn", "logical_llm_call", "chat gpt-test", "execute_tool search"]
    )
    conv = pipeline.one(f"invoke_agent {agent_of(host)}")
    turn_span = pipeline.one("turn")
    logical = pipeline.one("logical_llm_call")
    attempt = pipeline.one("chat gpt-test")
    tool = pipeline.one("execute_tool search")

    assert parent_of(conv, spans) is None
    assert parent_of(turn_span, spans) is conv
    assert parent_of(logical, spans) is turn_span
    assert parent_of(attempt, spans) is logical
    assert parent_of(tool, spans) is turn_span
    assert len({s.context.trace_id for s in spans}) == 1
    assert attempt.kind is SpanKind.CLIENT
    assert {s.kind for s in spans if s is not attempt} == {SpanKind.INTERNAL}

    # Real start and end times: the events' own nanosecond timestamps.
    for name, kind in [("turn", cv.TURN), ("logical_llm_call", cv.LOGICAL_CALL), ("openai", cv.ATTEMPT)]:
        (start,) = recorder.starts(relay_kind=kind)
        (end,) = recorder.ends(relay_kind=kind)
        span = {"turn": turn_span, "logical_llm_call": logical, "openai": attempt}[name]
        assert span.start_time == start.timestamp
        assert span.end_time == end.timestamp

    a = attempt.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "gpt-test"
    assert a["gen_ai.request.temperature"] == 0.2
    assert a["gen_ai.request.max_tokens"] == 64
    assert a["gen_ai.request.top_p"] == 0.9
    assert a["gen_ai.request.stop_sequences"] == ("END",)
    assert a["gen_ai.response.model"] == "gpt-test-0613"
    assert a["gen_ai.response.id"] == "resp-1"
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert a["gen_ai.usage.input_tokens"] == 12
    assert a["gen_ai.usage.output_tokens"] == 5
    assert a["gen_ai.conversation.id"] == "sess-1"
    assert a["server.address"] == "api.example.com"
    assert a["server.port"] == 8443
    assert a["relay.api_request_id"] == "req-1"
    assert a["relay.call_role"] == "primary"
    assert a["relay.retry_count"] == 0
    assert a["relay.outcome"] == "success"
    assert "error.type" not in a
    assert attempt.status.status_code is StatusCode.UNSET

    c = conv.attributes
    assert c["gen_ai.operation.name"] == "invoke_agent"
    assert c["gen_ai.agent.name"] == "agent"  # the coordinator's default, never a path's tail
    assert "relay.profile_key" not in c
    assert c["relay.profile_id"] == session.profile_id(host.profile_key)
    assert len(c["relay.profile_id"]) == 12
    assert c["gen_ai.conversation.id"] == "sess-1"
    assert c["relay.platform"] == "cli"
    t = turn_span.attributes
    assert (t["relay.turn_id"], t["relay.task_id"], t["relay.outcome"]) == ("turn-1", "task-7", "success")
    assert t["gen_ai.conversation.id"] == "sess-1"
    lg = logical.attributes
    assert (lg["relay.api_request_id"], lg["relay.outcome"], lg["relay.provider"]) == ("req-1", "success", "openai")
    tl = tool.attributes
    assert (tl["gen_ai.operation.name"], tl["gen_ai.tool.name"]) == ("execute_tool", "search")
    assert "gen_ai.tool.call.arguments" not in tl  # content is opt-in

    # Credentials never reach a span, and neither do headers at all.
    dumped = json.dumps([dict(s.attributes) for s in spans])
    assert "sk-secret" not in dumped and "authorization" not in dumped.lower()
    # Nor does the profile's home directory: its path names the user.
    assert host.profile_key not in dumped and str(Path(host.profile_key).parent) not in dumped
    assert exporter.diagnostics()["otel.open_spans"] == 0


def test_agent_name_comes_from_the_caller_or_the_coordinators_default(pipeline, host, exporter):
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(
        profile_key=host.profile_key, session_id="named", platform="cli", agent_name="research-bot"
    )
    coordinator.release_conversation(lease)
    coordinator.agent_name = "support-desk"
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="default", platform="cli")
    coordinator.release_conversation(lease)
    names = {s.attributes["gen_ai.conversation.id"]: s for s in pipeline.finished()}
    assert names["named"].name == "invoke_agent research-bot"
    assert names["named"].attributes["gen_ai.agent.name"] == "research-bot"
    assert names["default"].attributes["gen_ai.agent.name"] == "support-desk"
    with pytest.raises(ValueError, match="agent_name must be a non-empty string"):
        coordinator.acquire_conversation(profile_key=host.profile_key, session_id="x", platform="cli", agent_name="")


def test_anthropic_cache_tokens_are_added_into_input_tokens(pipeline, host, exporter):
    turn = open_turn(host)
    relay_calls.execute_current(
        request("claude-test"),
        lambda req: response("claude-test-1", input=10, output=7, cache_read=100, cache_write=25, reasoning=3),
        name="anthropic",
        codec=DictCodec("anthropic"),
    )
    close_turn(turn)
    a = pipeline.one("chat claude-test").attributes
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.usage.input_tokens"] == 10 + 100 + 25
    assert a["gen_ai.usage.cache_read.input_tokens"] == 100
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 25
    assert a["gen_ai.usage.output_tokens"] == 7
    assert a["gen_ai.usage.reasoning.output_tokens"] == 3
    (point,) = [p for p in pipeline.histogram(otel_metrics.TOKEN_USAGE) if p.attributes["gen_ai.token.type"] == "input"]
    assert point.sum == 135


def test_openai_cached_tokens_are_not_added_again(pipeline, host, exporter):
    turn = open_turn(host)
    relay_calls.execute_current(
        request(), lambda req: response(input=120, output=4, cache_read=100), name="openai", codec=DictCodec()
    )
    close_turn(turn)
    a = pipeline.one("chat gpt-test").attributes
    assert a["gen_ai.usage.input_tokens"] == 120
    assert a["gen_ai.usage.cache_read.input_tokens"] == 100


def test_retry_then_fallback_share_one_logical_span(pipeline, host, exporter):
    turn = open_turn(host)

    class RateLimitError(Exception):
        pass

    def failing(req: LLMRequest) -> Any:
        raise RateLimitError("429 slow down")

    with pytest.raises(RateLimitError):
        relay_calls.execute_current(
            request(),
            failing,
            name="openai",
            metadata={cv.API_REQUEST_ID: "r"},
            defer_logical_completion=True,
            codec=DictCodec(),
        )
    relay_calls.execute_current(
        request("claude-test"),
        lambda req: response("claude-test-1"),
        name="anthropic",
        metadata={cv.API_REQUEST_ID: "r"},
        defer_logical_completion=True,
        codec=DictCodec("anthropic"),
    )
    assert relay_calls.complete_logical_call("r", outcome="success")
    close_turn(turn)

    spans = pipeline.finished()
    logical = pipeline.one("logical_llm_call")
    failed = pipeline.one("chat gpt-test")
    fallback = pipeline.one("chat claude-test")
    assert parent_of(failed, spans) is logical and parent_of(fallback, spans) is logical
    assert failed.attributes["relay.retry_count"] == 0 and fallback.attributes["relay.retry_count"] == 1
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "RateLimitError: 429 slow down"
    assert failed.attributes["error.type"] == "RateLimitError"
    assert failed.attributes["relay.outcome"] == "failed"
    (exc_event,) = failed.events
    assert exc_event.name == "exception" and exc_event.attributes["exception.type"] == "RateLimitError"
    assert fallback.status.status_code is StatusCode.UNSET
    assert logical.attributes["relay.outcome"] == "success"

    durations = pipeline.histogram(otel_metrics.OPERATION_DURATION)
    by_error = {p.attributes.get("error.type"): p for p in durations}
    assert set(by_error) == {None, "RateLimitError"}
    assert by_error["RateLimitError"].attributes["gen_ai.provider.name"] == "openai"
    assert list(by_error[None].explicit_bounds) == list(otel_metrics.DURATION_BUCKETS)


def test_stream_records_time_to_first_chunk_and_metrics(pipeline, host, exporter):
    turn = open_turn(host)
    chunks = [
        {"delta": "hel", "model": "gpt-test-0613"},
        {"delta": "lo", "model": "gpt-test-0613", "id": "s1", "usage": {"input": 9, "output": 2}},
    ]
    stream = relay_calls.stream_current(
        request(stream=True), lambda req: iter(chunks), name="openai", codec=DictCodec()
    )
    got = list(stream)
    assert got == chunks
    close_turn(turn)

    a = pipeline.one("chat gpt-test").attributes
    assert a["gen_ai.request.stream"] is True
    ttfc = a["gen_ai.response.time_to_first_chunk"]
    assert isinstance(ttfc, float) and 0 <= ttfc < 5
    assert a["gen_ai.usage.input_tokens"] == 9 and a["gen_ai.usage.output_tokens"] == 2

    (ttfc_point,) = pipeline.histogram(otel_metrics.TIME_TO_FIRST_CHUNK)
    assert ttfc_point.count == 1 and ttfc_point.sum == pytest.approx(ttfc)
    assert list(ttfc_point.explicit_bounds) == list(otel_metrics.DURATION_BUCKETS)
    tokens = {p.attributes["gen_ai.token.type"]: p for p in pipeline.histogram(otel_metrics.TOKEN_USAGE)}
    assert (tokens["input"].sum, tokens["output"].sum) == (9, 2)
    assert list(tokens["input"].explicit_bounds) == [float(b) for b in otel_metrics.TOKEN_BUCKETS]
    assert tokens["input"].attributes["gen_ai.response.model"] == "gpt-test-0613"


def test_stream_broken_off_early_is_cancelled_not_an_error(pipeline, host, exporter):
    turn = open_turn(host)
    stream = relay_calls.stream_current(
        request(stream=True), lambda req: iter([{"delta": "a"}, {"delta": "b"}]), name="openai", codec=DictCodec()
    )
    for _chunk in stream:
        break
    stream.close()
    close_turn(turn)
    span = pipeline.one("chat gpt-test")
    assert span.attributes["relay.outcome"] == "cancelled"
    assert "error.type" not in span.attributes
    assert span.status.status_code is StatusCode.UNSET


def test_stream_failing_mid_way_is_an_error(pipeline, host, exporter):
    turn = open_turn(host)

    def source(req: LLMRequest) -> Iterator[dict[str, Any]]:
        yield {"delta": "a"}
        raise ConnectionError("reset by peer")

    stream = relay_calls.stream_current(request(stream=True), source, name="openai", codec=DictCodec())
    with pytest.raises(ConnectionError):
        list(stream)
    close_turn(turn, "failed")
    span = pipeline.one("chat gpt-test")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "ConnectionError"
    assert pipeline.one("turn").attributes["relay.outcome"] == "failed"


@pytest.mark.asyncio
async def test_async_execute_and_async_stream(pipeline, host, exporter):
    turn = open_turn(host)

    async def call(req: LLMRequest) -> Any:
        await asyncio.sleep(0)
        return response()

    async def chunks() -> Any:
        for c in ({"delta": "x", "model": "m-1"}, {"delta": "y", "usage": {"input": 1, "output": 1}}):
            await asyncio.sleep(0)
            yield c

    await relay_calls.execute_current_async(request(), call, name="openai", codec=DictCodec())
    stream = await relay_calls.stream_current_async(
        request("gpt-stream", stream=True), lambda req: chunks(), name="openai", codec=DictCodec()
    )
    assert [c["delta"] async for c in stream] == ["x", "y"]
    close_turn(turn)
    assert pipeline.one("chat gpt-test").attributes["gen_ai.usage.input_tokens"] == 12
    streamed = pipeline.one("chat gpt-stream")
    assert "gen_ai.response.time_to_first_chunk" in streamed.attributes
    assert len(pipeline.by_name("logical_llm_call")) == 2


@pytest.mark.asyncio
async def test_cancelled_task_ends_its_attempt_as_cancelled(pipeline, host, exporter):
    turn = open_turn(host)
    started = asyncio.Event()

    async def hang(req: LLMRequest) -> Any:
        started.set()
        await asyncio.sleep(30)

    task = asyncio.ensure_future(relay_calls.execute_current_async(request(), hang, name="openai", codec=DictCodec()))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    close_turn(turn, "cancelled")
    span = pipeline.one("chat gpt-test")
    assert span.attributes["relay.outcome"] == "cancelled"
    assert span.status.status_code is StatusCode.UNSET
    assert pipeline.one("logical_llm_call").attributes["relay.outcome"] == "cancelled"


# -- never stuck --------------------------------------------------------------------------------


def test_open_stream_is_ended_cancelled_by_the_relay_when_its_turn_ends(pipeline, host, exporter):
    turn = open_turn(host)
    stream = relay_calls.stream_current(
        request(stream=True), lambda req: iter([{"delta": "a"}, {"delta": "b"}]), name="openai", codec=DictCodec()
    )
    next(stream)
    close_turn(turn, "failed")  # the caller crashed out with the stream still open

    # The relay itself ends the attempt, then its logical call, then the turn: nothing is left
    # for the exporter to abandon.
    span = pipeline.one("chat gpt-test")
    assert span.attributes["relay.outcome"] == "cancelled"
    logical, turn_span = pipeline.one("logical_llm_call"), pipeline.one("turn")
    assert span.end_time <= logical.end_time <= turn_span.end_time
    before = len(pipeline.finished())

    assert list(stream) == [{"delta": "b"}]  # the caller still reads the provider's chunks, unrecorded
    stream.close()
    assert len(pipeline.finished()) == before
    assert exporter.diagnostics().get("otel.unmatched_ends", 0) == 0
    assert exporter.diagnostics().get("otel.spans_abandoned", 0) == 0
    assert exporter.diagnostics()["otel.open_spans"] == 0


def test_scope_left_open_by_a_crash_is_ended_by_the_turn(pipeline, host, exporter):
    turn = open_turn(host)
    host.relay.scope.push("plan", ScopeType.FUNCTION)
    inner = host.relay.scope.push("step", ScopeType.CUSTOM)
    assert inner is not None
    # Neither is popped: end_turn finds them still on the stack.
    session.SESSION_COORDINATOR.end_turn(turn, outcome="failed")
    plan, step = pipeline.one("plan"), pipeline.one("step")
    for s in (plan, step):
        assert s.status.status_code is StatusCode.ERROR
        assert s.attributes["relay.outcome"] == "abandoned"
    assert step.end_time <= plan.end_time <= pipeline.one("turn").end_time
    session.SESSION_COORDINATOR.release_conversation(turn.lease)
    assert exporter.diagnostics()["otel.open_spans"] == 0
    assert len(pipeline.finished()) == 4


def test_releasing_the_conversation_ends_everything_below(pipeline, host, exporter):
    turn = open_turn(host)
    host.relay.scope.push("dangling", ScopeType.FUNCTION, parent=turn.scope, attach=False)
    session.SESSION_COORDINATOR.release_conversation(turn.lease)  # no end_turn first
    names = sorted(s.name for s in pipeline.finished())
    assert names == sorted(["dangling", "turn", f"invoke_agent {agent_of(host)}"])
    assert pipeline.one("dangling").attributes["relay.outcome"] == "abandoned"
    assert pipeline.one("turn").attributes["relay.outcome"] == "cancelled"
    assert exporter.diagnostics()["otel.open_spans"] == 0


def test_every_span_ends_once_across_threads(pipeline, host, exporter):
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            turn = open_turn(host, session_id=f"s-{i}", turn_id=f"t-{i}")
            for _ in range(5):
                relay_calls.execute_current(request(), lambda req: response(), name="openai", codec=DictCodec())
            close_turn(turn)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    spans = pipeline.finished()
    assert len(spans) == 8 * (2 + 5 * 2)
    assert len({s.context.span_id for s in spans}) == len(spans)
    assert len({s.context.trace_id for s in spans}) == 8
    assert exporter.diagnostics()["otel.open_spans"] == 0


def test_leaked_scopes_are_bounded_by_max_open_spans(pipeline):
    relay = Relay()
    exp = OTelExporter(pipeline.tracer_provider, max_open_spans=3).attach(relay)
    handles = [relay.scope.push(f"leak-{i}", ScopeType.FUNCTION, attach=False) for i in range(5)]
    ended = pipeline.finished()
    assert [s.name for s in ended] == ["leak-0", "leak-1"]
    assert all(s.attributes["relay.outcome"] == "abandoned" for s in ended)
    assert exp.diagnostics()["otel.open_spans"] == 3
    for h in handles:
        relay.scope.pop(h)
    assert len(pipeline.finished()) == 5
    assert exp.diagnostics()["otel.unmatched_ends"] == 2


def test_shutdown_ends_open_spans_and_detaches(pipeline):
    relay = Relay()
    exp = OTelExporter(pipeline.tracer_provider).attach(relay)
    h = relay.scope.push("still-open", ScopeType.FUNCTION)
    exp.shutdown()
    (span,) = pipeline.finished()
    assert span.attributes["relay.outcome"] == "abandoned"
    assert relay.subscribers.names() == []
    relay.scope.pop(h)
    assert len(pipeline.finished()) == 1


def test_sampled_out_calls_export_no_spans_but_still_count_in_metrics(pipeline):
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    sampled_out.add_span_processor(SimpleSpanProcessor(pipeline.spans))
    relay = Relay()
    exp = OTelExporter(sampled_out, pipeline.meter_provider).attach(relay)

    class Overloaded(Exception):
        pass

    def failing(req: LLMRequest) -> Any:
        raise Overloaded("529")

    with relay.scope.scope("agent run", ScopeType.AGENT):
        relay.llm.execute("openai", request(), lambda req: response(), codec=DictCodec())
        with pytest.raises(Overloaded):
            relay.llm.execute("openai", request(), failing, codec=DictCodec())
    assert pipeline.finished() == []
    assert exp.diagnostics()["otel.open_spans"] == 0
    durations = pipeline.histogram(otel_metrics.OPERATION_DURATION)
    assert sorted(str(p.attributes.get("error.type")) for p in durations) == ["None", "Overloaded"]
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in pipeline.histogram(otel_metrics.TOKEN_USAGE)}
    assert tokens == {"input": 12, "output": 5}


# -- plain relay.llm, marks, root context --------------------------------------------------------


def test_plain_relay_llm_execute_without_a_session(pipeline):
    relay = Relay()
    OTelExporter(pipeline.tracer_provider).attach(relay)
    with relay.scope.scope("agent run", ScopeType.AGENT):
        relay.llm.execute("openai", request(), lambda req: response(), codec=DictCodec())
        relay.scope.mark("checkpoint", {"step": 2}, metadata={"phase": "plan"})
    spans = pipeline.finished()
    agent, attempt = pipeline.one("invoke_agent agent run"), pipeline.one("chat gpt-test")
    assert parent_of(attempt, spans) is agent
    assert attempt.attributes["gen_ai.usage.output_tokens"] == 5
    assert "gen_ai.conversation.id" not in attempt.attributes
    (mark,) = agent.events
    assert mark.name == "checkpoint"
    assert mark.attributes["relay.phase"] == "plan"
    assert "relay.data.step" not in mark.attributes  # mark data is content: opt-in only


def test_root_scope_joins_the_active_otel_span_unless_told_not_to(pipeline):
    tracer = pipeline.tracer_provider.get_tracer("app")
    linked, unlinked = Relay(), Relay()
    OTelExporter(pipeline.tracer_provider).attach(linked)
    OTelExporter(pipeline.tracer_provider, link_to_current_context=False).attach(unlinked)
    with tracer.start_as_current_span("POST /chat") as server:
        with linked.scope.scope("linked", ScopeType.FUNCTION):
            pass
        with unlinked.scope.scope("unlinked", ScopeType.FUNCTION):
            pass
    assert pipeline.one("linked").parent.span_id == server.get_span_context().span_id
    assert pipeline.one("unlinked").parent is None


def test_openinference_conventions(pipeline, host):
    exp = OTelExporter(pipeline.tracer_provider, conventions=("gen_ai", "openinference")).attach(host)
    turn = open_turn(host)
    relay_calls.execute_current(
        request("claude-test"),
        lambda req: response("claude-test-1", input=10, output=7, cache_read=100, cache_write=25),
        name="anthropic",
        codec=DictCodec("anthropic"),
    )
    host.relay.tools.execute("lookup", {"id": 1}, lambda a: "ok")
    close_turn(turn)
    exp.detach()
    kinds = {s.name: s.attributes["openinference.span.kind"] for s in pipeline.finished()}
    assert kinds == {
        f"invoke_agent {agent_of(host)}": "AGENT",
        "turn": "CHAIN",
        "logical_llm_call": "CHAIN",
        "chat claude-test": "LLM",
        "execute_tool lookup": "TOOL",
    }
    a = pipeline.one("chat claude-test").attributes
    assert a["llm.model_name"] == "claude-test-1"
    assert a["llm.provider"] == "anthropic"
    assert (a["llm.token_count.prompt"], a["llm.token_count.completion"], a["llm.token_count.total"]) == (135, 7, 142)
    assert a["llm.token_count.prompt_details.cache_read"] == 100
    assert a["llm.token_count.prompt_details.cache_write"] == 25
    assert json.loads(a["llm.invocation_parameters"]) == {"temperature": 0.2}
    assert a["session.id"] == "sess-1"
    assert pipeline.one("execute_tool lookup").attributes["tool.name"] == "lookup"
    assert "llm.input_messages.0.message.content" not in a


def test_bad_options_are_refused_with_clear_errors(pipeline):
    with pytest.raises(ValueError, match="conventions must include 'gen_ai'"):
        OTelExporter(pipeline.tracer_provider, conventions=("openinference",))
    with pytest.raises(ValueError, match="'zipkin'"):
        OTelExporter(pipeline.tracer_provider, conventions=("gen_ai", "zipkin"))
    with pytest.raises(TypeError, match="redact must be callable"):
        OTelExporter(pipeline.tracer_provider, redact="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="attach\\(\\) takes a Relay"):
        OTelExporter(pipeline.tracer_provider).attach(object())
    with pytest.raises(ValueError, match="max_open must be at least 1"):
        OTelExporter(pipeline.tracer_provider, max_open_spans=0)


def test_eviction_takes_the_oldest_leaf_and_keeps_the_live_parent(pipeline):
    relay = Relay()
    exp = OTelExporter(pipeline.tracer_provider, max_open_spans=3).attach(relay)
    run = relay.scope.push("run", ScopeType.AGENT, attach=False)
    leaks = [relay.scope.push(f"leak-{i}", ScopeType.FUNCTION, parent=run, attach=False) for i in range(4)]
    assert [s.name for s in pipeline.finished()] == ["leak-0", "leak-1"]
    assert exp.diagnostics()["otel.spans_abandoned"] == 2
    for h in reversed(leaks):
        relay.scope.pop(h)
    relay.scope.pop(run)
    spans = pipeline.finished()
    assert [s.name for s in spans] == ["leak-0", "leak-1", "leak-3", "leak-2", "invoke_agent run"]
    agent = spans[-1]
    assert agent.status.status_code is StatusCode.UNSET
    assert all(s.parent.span_id == agent.context.span_id for s in spans[:-1])


def test_scope_metadata_becomes_relay_attributes_in_its_order_and_only_when_exportable():
    """Known metadata keys go under relay.*, in the metadata's order; empty strings, values
    that are no primitive and keys the exporter does not know stay out."""
    pipe = Pipeline()
    relay = Relay()
    OTelExporter(pipe.tracer_provider).attach(relay)
    metadata = {
        cv.CALL_ROLE: "fallback",
        "unknown": "x",
        cv.API_REQUEST_ID: "req-1",
        cv.TURN_ID: "",
        cv.TASK_ID: {"not": "primitive"},
        cv.RETRY_COUNT: 2,
        cv.PLATFORM: "cli",
    }
    with relay.scope.scope("work", ScopeType.FUNCTION, metadata=metadata):
        pass
    span = pipe.one("work")
    relay_keys = [k for k in span.attributes if k.startswith("relay.") and k != "relay.outcome"]
    assert relay_keys == ["relay.call_role", "relay.api_request_id", "relay.retry_count", "relay.platform"]
    assert span.attributes["relay.retry_count"] == 2


def test_the_relay_calls_each_kinds_method_and_a_subclass_with_its_own_call_is_called() -> None:
    """The exporter hands the relay its method per event kind (``relay_kind_handlers``: no dispatch per event);
    a subclass that handles events in its own ``__call__`` gets every event there, as before."""
    seen: list[str] = []

    class Counting(OTelExporter):
        def __call__(self, event: Any) -> None:
            seen.append(event.kind)
            super().__call__(event)

    for cls in (OTelExporter, Counting):
        pipeline = Pipeline()
        relay = Relay()
        exporter = cls(pipeline.tracer_provider, pipeline.meter_provider)
        relay.subscribers.register(exporter, name="otel", kinds=exporter.KINDS)
        with relay.scope.scope("outer"):
            relay.scope.mark("note")
            with relay.scope.scope("inner"):
                pass
        assert [s.name for s in pipeline.finished()] == ["inner", "outer"]
        assert [e.name for e in pipeline.one("outer").events] == ["note"]
    assert seen == ["scope_start", "mark", "scope_start", "scope_end", "scope_end"]
    assert not hasattr(Counting(Pipeline().tracer_provider), "relay_kind_handlers")
