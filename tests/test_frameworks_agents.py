"""The OpenAI Agents SDK under ``relay_runtime.integrations.openai_agents.instrument()``.

Real ``openai-agents`` with an ``AsyncOpenAI`` client on the scripted mock transport (no network).
The SDK's own trace processors are cleared for each test (they would export to OpenAI) and put back.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from relay_runtime import GuardrailRejected, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations import openai_agents
from tests import framework_support
from tests.framework_support import attempts, logical_calls, need, only_our_agents_processor, outline

agents = need("agents")

RAN: list[str] = []


@agents.function_tool
def weather(city: str) -> str:
    """The weather of a city."""
    RAN.append(city)
    if city == "Atlantis":
        raise RuntimeError("no such city")
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def sdk_tracing() -> Iterator[None]:
    """Only our processor: the SDK's default one would export to OpenAI."""
    RAN.clear()
    with only_our_agents_processor():
        yield


otel_spans = framework_support.otel_spans  # the fixture, under its name here


def scripted(*replies: t.Reply, max_retries: int = 0) -> t.Scripted:
    s = t.scripted_openai(*replies, max_retries=max_retries)
    agents.set_default_openai_client(s.aclient, use_for_tracing=False)
    return s


def tool_then_answer(city: str = "Paris") -> tuple[t.Reply, t.Reply]:
    call = {"call_id": "call-1", "name": "weather", "arguments": json.dumps({"city": city})}
    return (
        t.json_reply(t.responses_body("", function_call=call)),
        t.json_reply(t.responses_body("Done.", usage=t.responses_usage(30, 3))),
    )


def run(agent: Any, question: str) -> Any:
    return asyncio.run(agents.Runner.run(agent, question))


def helper(**options: Any) -> Any:
    return agents.Agent(name="helper", instructions="Answer briefly.", model="gpt-test", tools=[weather], **options)


def tool_output(body: dict[str, Any]) -> Any:
    return next(item for item in body["input"] if item.get("type") == "function_call_output")["output"]


TREE = [
    "agent helper success",
    "  function logical_llm_call success",
    "    llm openai success",
    "  tool weather success",
    "  function logical_llm_call success",
    "    llm openai success",
]


def test_tree_with_instrumented_sdk_calls(relay_turn, relay_events, otel_spans) -> None:
    adapters.instrument()
    openai_agents.instrument()
    s = scripted(*tool_then_answer())
    result = run(helper(), "Weather in Paris?")
    assert result.final_output == "Done."
    assert outline(relay_events) == TREE
    tried = attempts(relay_events)
    assert len(tried) == len(s.script.requests) == 2  # the SDK calls are the attempts: none twice
    assert tried[1].annotated_response.usage.input_tokens == 30
    chat = [sp for sp in otel_spans.get_finished_spans() if sp.name.startswith("chat ")]
    assert len(chat) == 2
    names = {sp.name for sp in otel_spans.get_finished_spans()}
    assert {"invoke_agent helper", "execute_tool weather"} <= names
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert relay_events.starts(uuid=tool.uuid)[0].input == {"city": "Paris"}
    assert (tool.output, tool.metadata["tool_call_id"]) == ("sunny in Paris", "call-1")


def test_the_agents_own_client_instrumented_records_each_model_call_once(relay_turn, relay_events) -> None:
    """``instrument(client)`` on the agent's client, not the SDK's classes: its attempts are the model calls'
    attempts, never beside one made up from the SDK's spans."""
    openai_agents.instrument()
    s = scripted(*tool_then_answer())
    adapters.instrument(s.aclient)
    result = run(helper(), "Weather in Paris?")
    assert result.final_output == "Done."
    assert outline(relay_events) == TREE
    tried = attempts(relay_events)
    assert len(tried) == len(s.script.requests) == 2
    assert tried[1].annotated_response.usage.input_tokens == 30


def test_attempts_from_the_sdk_spans_without_instrument(relay_turn, relay_events) -> None:
    openai_agents.instrument()
    scripted(*tool_then_answer())
    assert run(helper(), "Weather in Paris?").final_output == "Done."
    assert outline(relay_events) == TREE
    first, second = attempts(relay_events)
    assert second.annotated_response.usage.input_tokens == 30
    assert second.annotated_response.model == "gpt-test"
    assert first.annotated_response.tool_calls[0]["name"] == "weather"
    assert [c.output["model"] for c in logical_calls(relay_events)] == ["gpt-test", "gpt-test"]


def test_guardrail_refuses_a_function_tool(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn

    def no_paris(name: str, args: Any) -> Any:
        if args.get("city") == "Paris":
            raise GuardrailRejected("geo-fence", "Paris is off limits")
        return args

    relay.intercepts.register_tool_request("geo-fence", 0, False, no_paris)
    openai_agents.instrument()
    s = scripted(*tool_then_answer())
    assert run(helper(), "Weather in Paris?").final_output == "Done."
    assert RAN == []
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type) == ("failed", "GuardrailRejected")
    assert tool_output(s.script.bodies()[1]) == "Tool call refused: Paris is off limits"


def test_tool_request_intercept_rewrites_arguments(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_tool_request("upper", 0, False, lambda name, args: {"city": args["city"].upper()})
    openai_agents.instrument()
    s = scripted(*tool_then_answer())
    run(helper(), "Weather in Paris?")
    assert RAN == ["PARIS"]
    assert tool_output(s.script.bodies()[1]) == "sunny in PARIS"


def test_error_inside_a_tool(relay_turn, relay_events) -> None:
    openai_agents.instrument()
    s = scripted(*tool_then_answer("Atlantis"))
    assert run(helper(), "Weather in Atlantis?").final_output == "Done."
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type, tool.error_message) == ("failed", "RuntimeError", "no such city")
    assert "error occurred while running the tool" in tool_output(s.script.bodies()[1])


def test_retried_model_call_is_one_logical_call(relay_turn, relay_events) -> None:
    adapters.instrument()
    openai_agents.instrument()
    scripted(t.error(500), t.json_reply(t.responses_body("Recovered.")))
    retry = agents.ModelRetrySettings(
        max_retries=1, backoff={"initial_delay": 0}, policy=agents.retry_policies.http_status([500])
    )
    settings = agents.ModelSettings(retry=retry)
    agent = agents.Agent(name="helper", model="gpt-test", model_settings=settings)
    assert run(agent, "Hi").final_output == "Recovered."
    first, second = attempts(relay_events)
    assert (first.outcome, second.outcome) == ("failed", "success")
    assert (first.metadata[cv.RETRY_COUNT], second.metadata[cv.RETRY_COUNT]) == (0, 1)
    (call,) = logical_calls(relay_events)
    assert call.outcome == "success" and call.uuid == first.parent_uuid == second.parent_uuid


def test_failed_model_call_fails_its_logical_call_and_agent(relay_turn, relay_events) -> None:
    adapters.instrument()
    openai_agents.instrument()
    scripted(t.error(400))
    with pytest.raises(Exception, match=r"400|scripted failure"):
        run(agents.Agent(name="helper", model="gpt-test"), "Hi")
    (attempt,) = attempts(relay_events)
    (call,) = logical_calls(relay_events)
    (agent,) = [e for e in relay_events.ends() if e.scope_type == "agent"]
    assert (attempt.outcome, call.outcome, agent.outcome) == ("failed", "failed", "failed")


@pytest.mark.parametrize("instrumented", [False, True], ids=["spans", "with-instrument"])
def test_streamed_run(relay_turn, relay_events, otel_spans, instrumented) -> None:
    if instrumented:
        adapters.instrument()
    openai_agents.instrument()
    events = t.responses_events(["Hel", "lo"], usage=t.responses_usage(9, 2))
    scripted(t.sse_reply(t.typed_sse(events)))

    async def go() -> str:
        streamed = agents.Runner.run_streamed(agents.Agent(name="streamer", model="gpt-test"), "Hi")
        deltas = [
            e.data.delta
            async for e in streamed.stream_events()
            if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"
        ]
        return "".join(deltas)

    assert asyncio.run(go()) == "Hello"
    (attempt,) = attempts(relay_events)
    assert attempt.outcome == "success"
    assert attempt.annotated_response.usage.output_tokens == 2
    # One GenAI client span (named "chat" alone when only the SDK's span saw the call: it names no model).
    assert len([sp for sp in otel_spans.get_finished_spans() if sp.name.split()[0] == "chat"]) == 1


def test_handoff_and_guardrail_scopes(relay_turn, relay_events) -> None:
    openai_agents.instrument()

    @agents.input_guardrail
    def polite(ctx: Any, agent: Any, text: Any) -> Any:
        return agents.GuardrailFunctionOutput(output_info="ok", tripwire_triggered=False)

    expert = agents.Agent(name="expert", model="gpt-test")
    triage = agents.Agent(name="triage", model="gpt-test", handoffs=[expert], input_guardrails=[polite])
    handoff = {"call_id": "call-h", "name": "transfer_to_expert", "arguments": "{}"}
    scripted(t.json_reply(t.responses_body("", function_call=handoff)), t.json_reply(t.responses_body("Expert here.")))
    assert run(triage, "Help").final_output == "Expert here."
    names = [line.strip() for line in outline(relay_events)]
    assert "agent triage success" in names and "agent expert success" in names
    assert "function guardrail polite success" in names
    assert "function handoff success" in names


def test_uninstrument_restores_tools_and_records_nothing(relay_turn, relay_events) -> None:
    openai_agents.instrument()
    scripted(*tool_then_answer(), *tool_then_answer())
    run(helper(), "Weather in Paris?")
    assert relay_events.ends()
    openai_agents.uninstrument()
    assert not openai_agents.is_instrumented()
    relay_events.clear()
    run(helper(), "Weather in Paris?")
    assert relay_events.events == []
    assert not hasattr(weather.on_invoke_tool._invoke_tool_impl, "__relay_managed_tool__")


def test_missing_agents_sdk_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)
    with pytest.raises(ImportError, match=r"pip install 'relay-runtime\[agents\]'"):
        openai_agents.instrument()
