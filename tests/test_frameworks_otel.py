"""One GenAI client span per provider call with OpenInference or opentelemetry-instrumentation-openai-v2 on.

Real instrumentors on the real OpenAI SDK over the scripted mock transport, one real OTel SDK pipeline
(in-memory exporter) shared by them and ``OTelExporter``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.otel.one_span import DROPPED
from tests.framework_support import need

OURS = "relay_runtime.otel"
PEERS = {
    "openinference": ("openinference.instrumentation.openai", "openinference.instrumentation.openai"),
    "openai-v2": ("opentelemetry.instrumentation.openai_v2", "opentelemetry.instrumentation.openai_v2"),
}
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=sorted(PEERS))
def peer(request: Any) -> Iterator[tuple[str, TracerProvider, InMemorySpanExporter]]:
    """A tracer provider with another instrumentation of the OpenAI SDK exporting to it."""
    module_name, scope = PEERS[request.param]
    instrumentor = need(module_name).OpenAIInstrumentor()
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield scope, provider, memory
    finally:
        instrumentor.uninstrument()


def in_turn(exporter: OTelExporter, call: Any) -> Any:
    coordinator = session.SESSION_COORDINATOR
    exporter.attach(coordinator)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="s1", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="t1", task_id="k1")
    try:
        return call()
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.detach()
        adapters.uninstrument()


def client_spans(memory: InMemorySpanExporter) -> list[Any]:
    return [s for s in memory.get_finished_spans() if s.name.startswith("chat") or s.name == "ChatCompletion"]


def by_name(memory: InMemorySpanExporter, name: str) -> Any:
    return next(s for s in memory.get_finished_spans() if s.name == name)


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_ours_is_the_one_span_by_default(relay_home, peer, mode) -> None:
    scope, provider, memory = peer
    exporter = OTelExporter(provider)
    adapters.instrument()
    if mode == "stream":
        scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b"]))))
    else:
        scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("ok")))

    def call() -> Any:
        if mode == "sync":
            return scripted.client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        if mode == "stream":
            return list(scripted.client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True))
        return asyncio.run(scripted.aclient.chat.completions.create(model="gpt-test", messages=MESSAGES))

    in_turn(exporter, call)
    (span,) = client_spans(memory)
    assert span.instrumentation_scope.name == OURS
    assert span.parent.span_id == by_name(memory, "logical_llm_call").context.span_id
    if scope.endswith("openai_v2"):  # it ignores suppression: its span was made, and dropped
        assert exporter.diagnostics()[DROPPED] == 1


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_defer_to_other_instrumentation_keeps_theirs_in_our_tree(relay_home, peer, use_async) -> None:
    scope, provider, memory = peer
    exporter = OTelExporter(provider, defer_to_other_instrumentation=True)
    adapters.instrument()
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("ok")))

    def call() -> Any:
        if use_async:
            return asyncio.run(scripted.aclient.chat.completions.create(model="gpt-test", messages=MESSAGES))
        return scripted.client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    in_turn(exporter, call)
    (span,) = client_spans(memory)
    assert span.instrumentation_scope.name == scope
    assert span.parent.span_id == by_name(memory, "logical_llm_call").context.span_id
    assert exporter.diagnostics().get("otel.unmatched_ends", 0) == 0


def test_defer_without_another_instrumentation_keeps_ours(relay_home) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = OTelExporter(provider, defer_to_other_instrumentation=True)
    adapters.instrument()
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("ok")))
    in_turn(exporter, lambda: scripted.client.chat.completions.create(model="gpt-test", messages=MESSAGES))
    (span,) = client_spans(memory)
    assert span.instrumentation_scope.name == OURS


def test_spans_outside_managed_calls_pass_the_filter(relay_home, peer) -> None:
    """The peer's own spans for calls we do not manage (no turn) are kept: only duplicates go."""
    scope, provider, memory = peer
    exporter = OTelExporter(provider)
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("ok")), t.json_reply(t.chat_completion_body("ok")))
    in_turn(exporter, lambda: None)
    scripted.client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    (span,) = client_spans(memory)
    assert span.instrumentation_scope.name == scope
