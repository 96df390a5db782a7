"""Many OpenAI Agents SDK runs at once under ``openai_agents.instrument()`` and ``adapters.instrument()``, each in
a task of its own, each asking about its own city: every run's model calls and tool call nest under its own agent
scope, with its own arguments, and every scope ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from relay_runtime import adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations import openai_agents
from tests.framework_support import need, only_our_agents_processor

agents = need("agents")

RUNS = 1000


@agents.function_tool
async def weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


def answer(request: httpx2.Request) -> httpx2.Response:
    """The model: a tool call for the city the user asked about, then, once the tool answered, its answer."""
    body = json.loads(request.content)
    items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
    result = next((i["output"] for i in items if i.get("type") == "function_call_output"), None)
    if result is not None:
        return t.json_reply(t.responses_body(f"It is {result}.")).response()
    city = next(i["content"] for i in items if i.get("role") == "user").removeprefix("Weather in ").rstrip("?")
    call = {"call_id": f"call-{city}", "name": "weather", "arguments": json.dumps({"city": city})}
    return t.json_reply(t.responses_body("", function_call=call)).response()


@pytest.fixture()
def client() -> Iterator[Any]:
    with only_our_agents_processor():
        made = openai.AsyncOpenAI(api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, max_retries=0,
                                  http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)))  # fmt: skip
        agents.set_default_openai_client(made, use_for_tracing=False)
        yield made


def test_a_thousand_concurrent_agent_runs_each_hold_their_own_calls_and_tools(relay_turn, relay_events, client) -> None:
    openai_agents.instrument()
    adapters.instrument()
    agent = agents.Agent(name="helper", instructions="Answer briefly.", model="gpt-test", tools=[weather])

    async def main() -> list[Any]:
        runs = (agents.Runner.run(agent, f"Weather in city{i}?") for i in range(RUNS))
        return await asyncio.gather(*runs)

    results = asyncio.run(main())
    assert [r.final_output for r in results] == [f"It is sunny in city{i}." for i in range(RUNS)]

    runs = {e.uuid: e for e in relay_events.starts(name="helper")}
    assert len(runs) == RUNS
    tools = {e.parent_uuid: e for e in relay_events.starts(relay_kind=cv.TOOL)}
    calls: dict[str, int] = {}
    for call in relay_events.starts(relay_kind=cv.LOGICAL_CALL):
        calls[call.parent_uuid] = calls.get(call.parent_uuid, 0) + 1
    for uuid in runs:
        # Each run's own tool call, with its own city, and its two model calls, under its own agent scope.
        city = tools[uuid].input["city"]
        assert tools[uuid].metadata["tool_call_id"] == f"call-{city}"
        assert calls[uuid] == 2
    assert len({tool.input["city"] for tool in tools.values()}) == RUNS
    assert len(relay_events.starts(relay_kind=cv.ATTEMPT)) == 2 * RUNS  # one attempt per model call, never two
    ends = relay_events.ends()
    assert len(ends) == len(relay_events.starts())
    assert {e.outcome for e in ends} == {"success"}
    relay, _turn = relay_turn
    assert not relay.diagnostics().get("subscriber_errors")
