"""What the LangGraph integration adds, beside LangGraph alone, in one managed turn with one subscriber.

Two graphs of the real ``langgraph``, each compiled twice: bare, and under the integration.

- A one-node graph whose node calls a fake chat model ``MODEL_CALLS`` times, and the same node making
  no call: ``configure_graph``'s cost per graph run (the graph's scope and its node's) and per model
  call (its logical call and attempt: the difference between the two graphs, divided by the calls),
  budget 20 us per model call, as for the other integrations (``bench_frameworks``); beside it, what a
  handler doing nothing costs (LangGraph's own cost of any callback handler).
- A tool node given one model answer calling one tool: ``create_tool_node`` beside LangGraph's own
  ``ToolNode``: what a managed tool call adds, budget 20 us.

Run: ``python -m benchmarks langgraph`` (needs the ``frameworks`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.bench_core import Timing, _line, compare_async, compare_sync
from benchmarks.bench_frameworks import BUDGET_US, ROUNDS, _fake_model, _noop_handler, managed_turn, run_benches

CALLS = 300
MODEL_CALLS = 5


def _graph(node: Callable[[Any], Any], name: str) -> Any:
    from langgraph.graph import END, START, MessagesState, StateGraph

    builder = StateGraph(MessagesState)
    builder.add_node("agent", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(name=name)


def _noop(graph: Any) -> Any:
    """``graph`` with a handler that does nothing in its base config, as ``configure_graph`` adds ours: LangGraph's
    own cost of running any callback handler (``bench_frameworks._noop_handler``)."""
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.runnables.config import merge_configs

    graph.config = merge_configs(graph.config or {}, {"callbacks": [_noop_handler(BaseCallbackHandler)]})
    return graph


def _graph_calls() -> dict[str, Callable[[], Any]]:
    """Each graph run compared: with ``MODEL_CALLS`` model calls in its node or none; bare, with a no-op
    handler, or configured."""
    from langchain_core.messages import HumanMessage

    from relay_runtime.integrations.langgraph import configure_graph

    model = _fake_model()
    question = {"messages": [HumanMessage(content="hello")]}

    def calling(state: Any) -> Any:
        answers = []
        for _ in range(MODEL_CALLS):
            model.i = 0
            answers.append(model.invoke(state["messages"]))
        return {"messages": answers}

    def idle(state: Any) -> Any:
        return {"messages": []}

    graphs = {}
    for node, label in ((calling, "calls"), (idle, "idle")):
        graphs[f"{label}-bare"] = _graph(node, "bench")
        graphs[f"{label}-noop"] = _noop(_graph(node, "bench"))
        graphs[f"{label}-ours"] = configure_graph(_graph(node, "bench"))
    return {name: (lambda g=graph: g.invoke(question)) for name, graph in graphs.items()}


def _tool_calls() -> dict[str, Callable[[], Any]]:
    """A graph whose one node is a tool node, run on a model answer calling one tool: LangGraph's ``ToolNode``
    and ours (a tool node runs inside a graph: it reads the graph's runtime)."""
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode

    from relay_runtime.integrations.langgraph import create_tool_node

    @tool
    async def weather(city: str) -> str:
        """The weather of a city."""
        return f"sunny in {city}"

    asked = AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}])
    state = {"messages": [asked]}
    bare, ours = _graph(ToolNode([weather]), "tools"), _graph(create_tool_node([weather]), "tools")
    # Async, and an async tool: a sync tool node (or a sync tool in an async one) runs its calls on a thread pool,
    # whose hand-offs (hundreds of microseconds, varying as much) would drown what is measured.
    return {"tool-bare": lambda: bare.ainvoke(state), "tool-ours": lambda: ours.ainvoke(state)}


def bench_graph() -> None:
    times = _timed(_graph_calls())
    print(f"LangGraph graph run, one node (configure_graph; the node making {MODEL_CALLS} model calls or none)")
    _line("bare graph run, its node making no call", times["idle-bare"])
    _line(f"bare graph run, its node making {MODEL_CALLS} model calls", times["calls-bare"])
    for label, added in (("a no-op callback handler", "noop"), ("relay configure_graph", "ours")):
        per_run = times[f"idle-{added}"] - times["idle-bare"]
        per_call = (times[f"calls-{added}"] - times["calls-bare"] - per_run) / MODEL_CALLS
        budget = BUDGET_US if added == "ours" else None
        _line(f"added by {label} per graph run (no model call)", per_run)
        _line(f"added by {label} per model call in a graph", per_call, budget)


def bench_tool_node() -> None:
    with managed_turn():
        times = compare_async(_tool_calls(), CALLS, ROUNDS)
    print("LangGraph tool node, one tool call (create_tool_node beside ToolNode)")
    _line("bare ToolNode", times["tool-bare"])
    _line("added by create_tool_node per tool call", times["tool-ours"] - times["tool-bare"], BUDGET_US)


def _timed(calls: dict[str, Callable[[], Any]]) -> dict[str, Timing]:
    with managed_turn():
        return compare_sync(calls, CALLS, ROUNDS)


def main() -> None:
    run_benches(bench_graph, bench_tool_node)


if __name__ == "__main__":
    main()
