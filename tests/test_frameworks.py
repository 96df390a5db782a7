"""Clients that frameworks create themselves are traced by ``instrument()``: one agent step through each.

The frameworks come with the ``frameworks`` extra (CI installs it); without it the
tests skip locally and fail under ``CI=true``. Everything runs offline: the clients
talk to the scripted mock transport.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter


def need(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = f"{module} is not installed (pip install -e '.[frameworks]'): {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def spans(relay_home: Any) -> Iterator[InMemorySpanExporter]:
    """A real OTel pipeline on the coordinator, the SDK classes instrumented, and one open turn."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    coordinator = session.SESSION_COORDINATOR
    exporter = OTelExporter(provider).attach(coordinator)
    adapters.instrument()
    lease = coordinator.acquire_conversation(
        profile_key=session.current_profile_key(), session_id="fw", platform="test", agent_name="fw-agent"
    )
    turn = coordinator.begin_turn(lease, turn_id="t1", task_id="k1")
    try:
        yield memory
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        adapters.uninstrument()
        exporter.detach()


def attempt_span(memory: InMemorySpanExporter) -> ReadableSpan:
    found = [s for s in memory.get_finished_spans() if s.name.startswith(("chat ", "responses "))]
    assert len(found) == 1, [s.name for s in memory.get_finished_spans()]
    return found[0]


def test_langchain_chat_model_is_traced(spans) -> None:
    langchain_openai = need("langchain_openai")
    script = t.Script([t.json_reply(t.chat_completion_body("from langchain", usage=t.chat_usage(11, 4)))])
    # LangChain builds its own OpenAI client from these settings: nothing of ours is passed in.
    model = langchain_openai.ChatOpenAI(
        model="gpt-test",
        api_key=t.TEST_KEY,
        base_url=t.BASE_OPENAI,
        http_client=httpx2.Client(transport=script.transport()),
        max_retries=0,
    )
    assert model.invoke("hello").content == "from langchain"
    a = attempt_span(spans).attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "gpt-test"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 4)
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert a["gen_ai.conversation.id"] == "fw"


@pytest.mark.asyncio
async def test_openai_agents_step_is_traced(spans) -> None:
    agents = need("agents")
    agents.set_tracing_disabled(True)  # the Agents SDK's own trace export stays off: ours is under test
    scripted = t.scripted_openai(t.json_reply(t.responses_body("from agents", usage=t.responses_usage(21, 6))))
    agents.set_default_openai_client(scripted.aclient, use_for_tracing=False)
    try:
        agent = agents.Agent(name="helper", instructions="Answer briefly.", model="gpt-test")
        result = await agents.Runner.run(agent, "hello")
    finally:
        agents.set_default_openai_client(None, use_for_tracing=False)  # type: ignore[arg-type]
    assert result.final_output == "from agents"
    span = attempt_span(spans)
    a = span.attributes
    assert span.name == "chat gpt-test"  # the Responses API is a chat operation in the GenAI conventions
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (21, 6)
    assert a["gen_ai.response.finish_reasons"] == ("completed",)
    names = {s.name for s in spans.get_finished_spans()}
    assert {"logical_llm_call"} <= names
