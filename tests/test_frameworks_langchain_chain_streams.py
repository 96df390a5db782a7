"""A LangChain chain streamed under ``RelayCallbackHandler``: between its chunks the caller's own code runs where the
chain began, with the chain's scope still set there; what that code calls is not the chain's (``inside``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from relay_runtime import Recorder
from relay_runtime import conventions as cv
from tests.framework_support import need

runnables = need("langchain_core.runnables")
fakes = need("langchain_core.language_models.fake_chat_models")

from relay_runtime.integrations.langchain import RelayCallbackHandler  # noqa: E402

CONFIG = {"callbacks": [RelayCallbackHandler()]}


def parents_of_calls(relay_turn: Any, events: Recorder) -> list[str]:
    """The name of the scope each logical call nests under ("turn" for the turn's)."""
    names = {e.uuid: e.name for e in events.starts()}
    names[relay_turn[1].scope.uuid] = "turn"
    return [names[call.parent_uuid] for call in events.starts(relay_kind=cv.LOGICAL_CALL)]


def model(name: str) -> Any:
    return fakes.FakeListChatModel(responses=[name], name=name)


def repeat(inputs: Iterator[str]) -> Iterator[str]:
    for text in inputs:
        yield text
        yield text


async def arepeat(inputs: AsyncIterator[str]) -> AsyncIterator[str]:
    async for text in inputs:
        yield text
        yield text


def test_a_call_the_caller_makes_between_a_streamed_chains_chunks_is_not_the_chains(relay_turn, relay_events) -> None:
    chain = runnables.RunnableGenerator(repeat).with_config(run_name="streamer")
    for i, _chunk in enumerate(chain.stream("ab", config=CONFIG)):
        if i == 0:
            model("between").invoke("Checked?", config=CONFIG)
    assert parents_of_calls(relay_turn, relay_events) == ["turn"]
    assert [e.outcome for e in relay_events.ends(name="streamer")] == ["success"]


def test_an_async_streamed_chains_caller_calls_are_not_the_chains(relay_turn, relay_events) -> None:
    chain = runnables.RunnableGenerator(repeat, arepeat).with_config(run_name="streamer")

    async def main() -> None:
        i = 0
        async for _chunk in chain.astream("ab", config=CONFIG):
            if i == 0:
                await model("between").ainvoke("Checked?", config=CONFIG)
            i += 1

    asyncio.run(main())
    assert parents_of_calls(relay_turn, relay_events) == ["turn"]


def test_a_call_a_chains_step_makes_with_callbacks_of_its_own_is_the_chains(relay_turn, relay_events) -> None:
    """Inside the chain's step, a model run given its own callbacks has no parent run (LangChain drops it), and
    nests under the chain's scope all the same: LangChain's config there is the chain's."""

    def step(text: str) -> str:
        return str(model("inner").invoke(text, config=CONFIG).content)

    runnables.RunnableLambda(step).with_config(run_name="outer").invoke("hi", config=CONFIG)
    assert parents_of_calls(relay_turn, relay_events) == ["outer"]


def test_a_call_between_the_chunks_of_a_chain_streamed_inside_another_chains_step_is_the_outer_chains(
    relay_turn, relay_events
) -> None:
    inner = runnables.RunnableGenerator(repeat).with_config(run_name="inner")

    def step(text: str) -> str:
        said = []
        for i, chunk in enumerate(inner.stream(text, config=CONFIG)):
            if i == 0:
                model("between").invoke("Checked?", config=CONFIG)
            said.append(chunk)
        return "".join(said)

    assert runnables.RunnableLambda(step).with_config(run_name="outer").invoke("ab", config=CONFIG) == "abab"
    assert parents_of_calls(relay_turn, relay_events) == ["outer"]


def test_a_call_between_a_streamed_graphs_chunks_is_not_the_graphs(relay_turn, relay_events) -> None:
    graph_mod = need("langgraph.graph")
    from relay_runtime.integrations.langgraph import configure_graph

    def ask(state: Any) -> Any:
        return {"messages": [model("node").invoke(state["messages"])]}

    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("ask", ask)
    builder.add_node("wrap_up", lambda state: {"messages": []})
    builder.add_edge(graph_mod.START, "ask")
    builder.add_edge("ask", "wrap_up")
    graph = configure_graph(builder.compile(name="graph"))
    for i, _chunk in enumerate(graph.stream({"messages": [("user", "hi")]})):
        if i == 0:
            model("between").invoke("Checked?", config=CONFIG)
    assert sorted(parents_of_calls(relay_turn, relay_events)) == ["ask", "turn"]
