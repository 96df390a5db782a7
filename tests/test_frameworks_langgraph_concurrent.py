"""A thousand runs of one LangGraph agent graph at once (``configure_graph``, a ``create_tool_node`` tool node), each
in a task of its own and asking about its own city: every run's model calls and managed tool call nest under its
own graph's scope, with its own arguments, and every scope ends."""

from __future__ import annotations

import asyncio
from typing import Any

from relay_runtime import conventions as cv
from tests.framework_support import need

need("langgraph.graph")
chat_models = need("langchain_core.language_models.chat_models")
messages = need("langchain_core.messages")
outputs = need("langchain_core.outputs")
tools_mod = need("langchain_core.tools")

from tests.test_frameworks_langgraph import tool_loop_graph  # noqa: E402

RUNS = 1000


@tools_mod.tool
async def weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


class WeatherModel(chat_models.BaseChatModel):  # type: ignore[misc,name-defined]
    """Calls ``weather`` for the city the user asked about; once the tool answered, says what it said."""

    @property
    def _llm_type(self) -> str:
        return "weather-model"

    def _generate(self, msgs: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError("async only")

    async def _agenerate(self, msgs: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        last = msgs[-1]
        if isinstance(last, messages.ToolMessage):
            answer = messages.AIMessage(content=f"It is {last.content}.")
        else:
            city = str(last.content).removeprefix("Weather in ").rstrip("?")
            call = {"name": "weather", "args": {"city": city}, "id": f"call-{city}"}
            answer = messages.AIMessage(content="", tool_calls=[call])
        return outputs.ChatResult(generations=[outputs.ChatGeneration(message=answer)])


def agent_graph() -> Any:
    model = WeatherModel()

    async def call_model(state: Any) -> Any:
        return {"messages": [await model.ainvoke(state["messages"])]}

    return tool_loop_graph(call_model, [weather])


def test_a_thousand_concurrent_graph_runs_each_hold_their_own_calls_and_tools(relay_turn, relay_events) -> None:
    graph = agent_graph()

    async def main() -> list[Any]:
        runs = (graph.ainvoke({"messages": [{"role": "user", "content": f"Weather in city{i}?"}]}) for i in range(RUNS))
        return await asyncio.gather(*runs)

    results = asyncio.run(main())
    assert [r["messages"][-1].content for r in results] == [f"It is sunny in city{i}." for i in range(RUNS)]

    starts = {e.uuid: e for e in relay_events.starts()}

    def graph_of(event: Any) -> str:
        """The graph run a scope is part of: its outermost ancestor among the recorded scopes."""
        while event.parent_uuid in starts:
            event = starts[event.parent_uuid]
        return event.uuid

    graphs = [e for e in relay_events.starts(name="weather-graph")]
    assert len(graphs) == RUNS
    tools_by_graph = {graph_of(e): e for e in relay_events.starts(relay_kind=cv.TOOL)}
    assert len(tools_by_graph) == RUNS  # one managed tool call per run, each under its own graph
    calls_by_graph: dict[str, int] = {}
    for call in relay_events.starts(relay_kind=cv.LOGICAL_CALL):
        key = graph_of(call)
        calls_by_graph[key] = calls_by_graph.get(key, 0) + 1
    for run in graphs:
        tool = tools_by_graph[run.uuid]
        asked = run.input["messages"][0]["content"]
        assert asked == f"Weather in {tool.input['city']}?"  # the tool call made of this run's own question
        assert tool.metadata["tool_call_id"] == f"call-{tool.input['city']}"
        assert calls_by_graph[run.uuid] == 2
    ends = relay_events.ends()
    assert len(ends) == len(relay_events.starts())
    assert {e.outcome for e in ends} == {"success"}
    relay, _turn = relay_turn
    assert not relay.diagnostics().get("subscriber_errors")
