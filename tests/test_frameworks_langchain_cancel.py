"""A chat model run cancelled with the run around it, under ``RelayCallbackHandler``.

LangChain reports no end for an async model call whose task is cancelled while it runs (``agenerate``
awaits the provider call in a ``gather``, and the gather's cancellation skips the callbacks): the handler
ends its logical call cancelled with the run it nests under, before that run, rather than leave it open
until the turn's end closes it with the turn's outcome (a success, for a call that never answered).
Real LangChain and LangGraph, with LangChain's generic fake chat model made slow.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay_runtime import conventions as cv
from tests.framework_support import attempts, logical_calls, need, outline

fake = need("langchain_core.language_models.fake_chat_models")
runnables = need("langchain_core.runnables")
graph_mod = need("langgraph.graph")

from relay_runtime.integrations.langchain import RelayCallbackHandler  # noqa: E402
from relay_runtime.integrations.langgraph import configure_graph  # noqa: E402


class SlowChatModel(fake.GenericFakeChatModel):
    """Answers after a long wait: the caller's timeout comes first."""

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(30)
        return await super()._agenerate(*args, **kwargs)


def timed_out(runnable: Any, value: Any, **config: Any) -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(runnable.ainvoke(value, config=config or None), 0.2)

    asyncio.run(main())


def assert_cancelled_before(relay_events: Any, parent: str) -> None:
    """Every record of the model call ended, cancelled, before the run it nested under."""
    (attempt,) = attempts(relay_events)
    (call,) = logical_calls(relay_events)
    assert (attempt.outcome, call.outcome) == ("cancelled", "cancelled")
    ends = [e.name for e in relay_events.ends()]
    assert ends.index(attempt.name) < ends.index("logical_llm_call") < ends.index(parent)


def test_a_model_call_cancelled_with_its_chain_ends_cancelled_with_it(relay_turn, relay_events) -> None:
    model = SlowChatModel(messages=iter(["too late"]))
    chain = runnables.RunnableLambda(lambda text: text).with_config(run_name="prepare") | model
    timed_out(chain, "hi", callbacks=[RelayCallbackHandler()])
    assert outline(relay_events) == [
        "agent RunnableSequence cancelled",
        "  function prepare success",
        "  function logical_llm_call cancelled",
        "    llm slowchatmodel cancelled",
    ]
    assert_cancelled_before(relay_events, "RunnableSequence")


def test_a_model_call_cancelled_with_its_graph_node_ends_cancelled_with_it(relay_turn, relay_events) -> None:
    model = SlowChatModel(messages=iter(["too late"]))

    async def call_model(state: Any) -> Any:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("agent", call_model)
    builder.add_edge(graph_mod.START, "agent")
    graph = configure_graph(builder.compile(name="slow-graph"))
    timed_out(graph, {"messages": [{"role": "user", "content": "hi"}]})
    assert outline(relay_events) == [
        "agent slow-graph cancelled",
        "  function agent cancelled",
        "    function logical_llm_call cancelled",
        "      llm slowchatmodel cancelled",
    ]
    assert_cancelled_before(relay_events, "agent")
    (call,) = logical_calls(relay_events)
    assert call.output["outcome"] == "cancelled" and call.metadata[cv.KIND] == cv.LOGICAL_CALL
