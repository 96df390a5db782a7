"""What the OpenAI Agents SDK integration records for tool calls that did not simply run and return.

A tool input guardrail refusing the call, a run cancelled while a tool runs, a tool the SDK's own
``timeout`` stops; a run an input guardrail's tripwire or a tool the model made up ends, whose error the
SDK puts on the agent's ``turn`` span (which opens no scope) rather than on its ``agent`` span.
Real ``openai-agents`` on the scripted mock transport, as in ``test_frameworks_agents``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations import openai_agents
from relay_runtime.integrations.openai_agents.processor import RelayTraceProcessor
from tests.framework_support import need
from tests.test_frameworks_agents import run, scripted, sdk_tracing, tool_output

agents = need("agents")

__all__ = ["sdk_tracing"]  # the autouse fixture: only our processor, and everything put back

RAN: list[str] = []


def call_then_answer(name: str) -> tuple[t.Reply, t.Reply]:
    call = {"call_id": "call-1", "name": name, "arguments": json.dumps({"city": "Paris"})}
    return t.json_reply(t.responses_body("", function_call=call)), t.json_reply(t.responses_body("Done."))


def cancel_while_a_tool_runs(decorate: Any) -> None:
    """A run with one slow tool (made by ``decorate``), cancelled while that tool runs, as ``asyncio.wait_for``
    cancels at its deadline."""
    started = asyncio.Event()

    @decorate
    async def slow(city: str) -> str:
        """Takes its time."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    scripted(*call_then_answer("slow"))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[slow])

    async def go() -> None:
        task = asyncio.create_task(agents.Runner.run(agent, "Go"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def guarded_tool(behavior: str) -> Any:
    @agents.tool_input_guardrail
    def no_paris(data: Any) -> Any:
        if behavior == "reject":
            return agents.ToolGuardrailFunctionOutput.reject_content("Paris is off limits")
        return agents.ToolGuardrailFunctionOutput.raise_exception(output_info="no")

    @agents.function_tool(tool_input_guardrails=[no_paris])
    def weather(city: str) -> str:
        """The weather of a city."""
        RAN.append(city)
        return "sunny"

    RAN.clear()
    return weather


def use(instrumented: bool) -> None:
    if instrumented:
        openai_agents.instrument()
    else:  # the processor alone: function tools are not wrapped, their spans are the only witness
        agents.add_trace_processor(RelayTraceProcessor())


def ends_of(relay_events: Any, scope_type: str) -> list[Any]:
    return [e for e in relay_events.ends() if e.scope_type == scope_type]


PATHS = pytest.mark.parametrize("instrumented", [True, False], ids=["instrument", "processor-only"])


@PATHS
def test_tool_guardrail_reject_content_records_a_refused_tool(relay_turn, relay_events, instrumented) -> None:
    use(instrumented)
    s = scripted(*call_then_answer("weather"))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[guarded_tool("reject")])
    assert run(agent, "Weather in Paris?").final_output == "Done."
    assert RAN == []
    (tool,) = ends_of(relay_events, "tool")
    assert (tool.name, tool.outcome, tool.error_type) == ("weather", "failed", "GuardrailRejected")
    assert "no_paris" in tool.error_message and "Paris is off limits" in tool.error_message
    (agent_end,) = ends_of(relay_events, "agent")
    assert agent_end.outcome == "success"  # the model was told and answered
    assert tool_output(s.script.bodies()[1]) == "Paris is off limits"
    if instrumented:
        assert tool.metadata[cv.TOOL_CALL_ID] == "call-1"
        assert relay_events.starts(uuid=tool.uuid)[0].input == {"city": "Paris"}


@PATHS
def test_tool_guardrail_raise_exception_records_a_refused_tool(relay_turn, relay_events, instrumented) -> None:
    use(instrumented)
    scripted(*call_then_answer("weather"))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[guarded_tool("raise")])
    with pytest.raises(agents.ToolInputGuardrailTripwireTriggered):
        run(agent, "Weather in Paris?")
    assert RAN == []
    (tool,) = ends_of(relay_events, "tool")
    assert (tool.outcome, tool.error_type) == ("failed", "GuardrailRejected")
    assert "no_paris" in tool.error_message
    (agent_end,) = ends_of(relay_events, "agent")
    assert agent_end.outcome == "failed"


@PATHS
def test_run_cancelled_while_a_tool_runs_is_cancelled(relay_turn, relay_events, instrumented) -> None:
    use(instrumented)
    cancel_while_a_tool_runs(agents.function_tool)
    (agent_end,) = ends_of(relay_events, "agent")
    assert (agent_end.outcome, agent_end.error_type) == ("cancelled", "CancelledError")
    (tool,) = ends_of(relay_events, "tool")
    assert tool.outcome == "cancelled"


def test_run_cancelled_by_wait_for_is_cancelled(relay_turn, relay_events) -> None:
    openai_agents.instrument()

    @agents.function_tool
    async def slow(city: str) -> str:
        """Takes its time."""
        await asyncio.sleep(30)
        return "late"

    scripted(*call_then_answer("slow"))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[slow])

    async def go() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(agents.Runner.run(agent, "Go"), 1.0)

    asyncio.run(go())
    (agent_end,) = ends_of(relay_events, "agent")
    assert agent_end.outcome == "cancelled"


@pytest.mark.parametrize("behavior", ["error_as_result", "raise_exception"])
def test_tool_timeout_is_a_failed_tool(relay_turn, relay_events, behavior) -> None:
    openai_agents.instrument()

    @agents.function_tool(timeout=0.05, timeout_behavior=behavior)
    async def slow(city: str) -> str:
        """Takes too long."""
        await asyncio.sleep(30)
        return "late"

    s = scripted(*call_then_answer("slow"))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[slow])
    if behavior == "raise_exception":
        with pytest.raises(agents.ToolTimeoutError):
            run(agent, "Go")
    else:
        assert run(agent, "Go").final_output == "Done."
        assert "timed out" in tool_output(s.script.bodies()[1])
    (tool,) = ends_of(relay_events, "tool")
    assert (tool.outcome, tool.error_type) == ("failed", "timeout")
    assert tool.error_message == "Tool 'slow' timed out after 0.05 seconds."
    (agent_end,) = ends_of(relay_events, "agent")
    assert agent_end.outcome == ("failed" if behavior == "raise_exception" else "success")


def test_run_cancelled_while_a_tool_with_a_timeout_runs_is_not_a_timeout(relay_turn, relay_events) -> None:
    openai_agents.instrument()
    cancel_while_a_tool_runs(agents.function_tool(timeout=30))  # it has time, but the run is cancelled
    (tool,) = ends_of(relay_events, "tool")
    assert (tool.outcome, tool.error_type) == ("cancelled", "CancelledError")


@PATHS
def test_a_run_an_input_guardrail_tripped_ends_its_agent_failed(relay_turn, relay_events, instrumented) -> None:
    use(instrumented)

    @agents.input_guardrail
    def rude(ctx: Any, agent: Any, text: Any) -> Any:
        return agents.GuardrailFunctionOutput(output_info="rude", tripwire_triggered=True)

    scripted(t.json_reply(t.responses_body("Answer.")))
    with pytest.raises(agents.InputGuardrailTripwireTriggered):
        run(agents.Agent(name="helper", model="gpt-test", input_guardrails=[rude]), "Help")
    (agent_end,) = ends_of(relay_events, "agent")
    assert (agent_end.outcome, agent_end.error_message) == ("failed", "Guardrail tripwire triggered")


@PATHS
def test_a_run_ended_by_a_tool_the_model_made_up_ends_its_agent_failed(relay_turn, relay_events, instrumented) -> None:
    use(instrumented)
    scripted(call_then_answer("no_such_tool")[0])
    with pytest.raises(agents.ModelBehaviorError):
        run(agents.Agent(name="helper", model="gpt-test"), "Weather in Paris?")
    (agent_end,) = ends_of(relay_events, "agent")
    assert (agent_end.outcome, agent_end.error_message) == ("failed", "Tool not found")
