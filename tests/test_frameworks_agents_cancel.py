"""The Agents SDK's trace processor alone records a cancellation as ``instrument()`` does.

A tool cancelled outside the SDK's own teardown (a task cancelled by the loop's shutdown after the caller
broke off a streamed run, or the tool's own CancelledError) ends its function span with the SDK's "Tool
execution cancelled" error: the processor alone recorded it failed (``agents_span_error``), the managed
call cancelled. And
``RunResultStreaming.cancel()`` after the model's response completed cancels the task that ends the
response span: the processor alone recorded the attempt and its call cancelled, the SDK's attempt success.
Real ``openai-agents`` on the scripted mock transport, as in ``test_frameworks_agents``.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from relay_runtime import adapters
from relay_runtime.adapters import testing as t
from relay_runtime.integrations import openai_agents
from relay_runtime.integrations.openai_agents.processor import RelayTraceProcessor
from tests.framework_support import need, outline
from tests.test_frameworks_agents import scripted, sdk_tracing

agents = need("agents")

__all__ = ["sdk_tracing"]  # the autouse fixture: only our processor, and everything put back


def _use(instrumented: bool | str) -> None:
    """The processor alone (False), with its tools managed (True), or with the SDK's calls instrumented too."""
    if instrumented == "sdk":
        adapters.instrument()
    if instrumented:
        openai_agents.instrument()
    else:
        agents.add_trace_processor(RelayTraceProcessor())


@pytest.mark.parametrize("instrumented", [True, False])
def test_a_tool_cancelled_outside_the_runs_teardown_ends_cancelled(relay_turn, relay_events, instrumented):
    # Its task cancelled by something else than the run's own teardown (here: the tool raises it itself): the
    # SDK reports "Tool execution cancelled" on the span and gives the model an error output.
    _use(instrumented)

    @agents.function_tool
    async def slow(city: str) -> str:
        """Takes its time."""
        raise asyncio.CancelledError()

    call = {"call_id": "call-1", "name": "slow", "arguments": json.dumps({"city": "Paris"})}
    scripted(t.json_reply(t.responses_body("", function_call=call)), t.json_reply(t.responses_body("Done.")))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[slow])
    assert asyncio.run(agents.Runner.run(agent, "Go")).final_output == "Done."
    assert outline(relay_events, skip=("conversation", "turn")) == [
        "agent helper success",
        "  function logical_llm_call success",
        "    llm openai success",
        "  tool slow cancelled",
        "  function logical_llm_call success",
        "    llm openai success",
    ]


@pytest.mark.parametrize("instrumented", ["sdk", True, False])
def test_a_streamed_run_cancelled_after_its_response_completed_keeps_the_call_a_success(
    relay_turn, relay_events, instrumented
):
    _use(instrumented)
    events = t.responses_events(["Hel", "lo", "x", "y"], usage=t.responses_usage(9, 2))
    scripted(t.sse_reply(t.typed_sse(events)))

    async def go() -> None:
        streamed = agents.Runner.run_streamed(agents.Agent(name="streamer", model="gpt-test"), "Hi")
        async for event in streamed.stream_events():
            if event.type == "raw_response_event":
                streamed.cancel()
        await asyncio.sleep(0.1)

    asyncio.run(go())
    assert outline(relay_events, skip=("conversation", "turn")) == [
        "agent streamer cancelled",
        "  function logical_llm_call success",
        "    llm openai success",
    ]
