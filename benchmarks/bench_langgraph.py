"""What the LangGraph integration adds, beside LangGraph alone and NeMo Relay's LangGraph integration, in one
managed turn with one subscriber.

Two graphs of the real ``langgraph``, each compiled once per variant: bare, with a handler doing nothing
(LangGraph's own cost of any callback handler), under ours, and under NeMo Relay's (``nemo_relay``'s
``configure_graph`` and ``create_tool_node``, same names, when it is installed: ``make bench``; its events
flushed inside each sample, as ``bench_frameworks`` does for its middleware).

- A one-node graph whose node calls a fake chat model ``MODEL_CALLS`` times, and the same node making
  no call: ``configure_graph``'s cost per graph run (the graph's scope and its node's) and per model
  call (its logical call and attempt: the difference between the two graphs, divided by the calls),
  budget 20 us per model call, as for the other integrations (``bench_frameworks``).
- A graph whose one node is a tool node, given a model answer calling one tool (async, an async tool):
  ``create_tool_node`` beside LangGraph's own ``ToolNode``: what a managed tool call adds, budget 20 us.

Run: ``python -m benchmarks langgraph`` (needs the ``frameworks`` extra).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.bench_core import Timing, _line, _ratio, compare_async, compare_sync, sink
from benchmarks.bench_frameworks import BUDGET_US, ROUNDS, _fake_model, _noop_handler, managed_turn, run_benches

CALLS = 300
MODEL_CALLS = 5


def _nemo() -> Any:
    """NeMo Relay's LangGraph integration, or None when it is not installed."""
    try:
        from nemo_relay.integrations import langgraph
    except ImportError as exc:
        print(f"nemo-relay's LangGraph integration not run: {exc} (make bench installs the [bench] extra)")
        return None
    return langgraph


@contextlib.contextmanager
def _nemo_scope(nemo: Any) -> Iterator[None]:
    """A NeMo Relay scope with one subscriber, as its own managed runs expect (no-op without NeMo)."""
    if nemo is None:
        yield
        return
    import nemo_relay

    nemo_relay.subscribers.register("bench", sink)
    try:
        with nemo_relay.scope.scope("bench", nemo_relay.ScopeType.Agent):
            yield
    finally:
        nemo_relay.subscribers.deregister("bench")


def _graph(node: Callable[[Any], Any], name: str) -> Any:
    from langgraph.graph import END, START, MessagesState, StateGraph

    builder = StateGraph(MessagesState)
    builder.add_node("agent", node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(name=name)


def _noop(graph: Any) -> Any:
    """``graph`` with a handler that does nothing in its base config, as ``configure_graph`` adds ours."""
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.runnables.config import merge_configs

    graph.config = merge_configs(graph.config or {}, {"callbacks": [_noop_handler(BaseCallbackHandler)]})
    return graph


def _graph_calls(nemo: Any) -> dict[str, Callable[[], Any]]:
    """Each graph run compared: with ``MODEL_CALLS`` model calls in its node or none, in each variant."""
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

    setups: dict[str, Callable[[Any], Any]] = {"bare": lambda g: g, "noop": _noop, "ours": configure_graph}
    if nemo is not None:
        setups["nemo"] = nemo.configure_graph
    graphs = {
        f"{label}-{variant}": setup(_graph(node, "bench"))
        for node, label in ((calling, "calls"), (idle, "idle"))
        for variant, setup in setups.items()
    }
    return {name: (lambda g=graph: g.invoke(question)) for name, graph in graphs.items()}


def _tool_calls(nemo: Any) -> dict[str, Callable[[], Any]]:
    """A graph whose one node is a tool node, run on a model answer calling one tool: LangGraph's ``ToolNode``,
    ours and NeMo's (a tool node runs inside a graph: it reads the graph's runtime)."""
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
    nodes = {"bare": ToolNode([weather]), "ours": create_tool_node([weather])}
    if nemo is not None:
        nodes["nemo"] = nemo.create_tool_node([weather])
    graphs = {f"tool-{variant}": _graph(node, "tools") for variant, node in nodes.items()}
    # Async, and an async tool: a sync tool node (or a sync tool in an async one) runs its calls on a thread pool,
    # whose hand-offs (hundreds of microseconds, varying as much) would drown what is measured.
    return {name: (lambda g=graph: g.ainvoke(state)) for name, graph in graphs.items()}


def bench_graph() -> None:
    nemo = _nemo()
    flush = {} if nemo is None else {name: _nemo_flush() for name in ("idle-nemo", "calls-nemo")}
    with managed_turn(), _nemo_scope(nemo):
        times = compare_sync(_graph_calls(nemo), CALLS, ROUNDS, after=flush)
    print(f"LangGraph graph run, one node (configure_graph; the node making {MODEL_CALLS} model calls or none)")
    _line("bare graph run, its node making no call", times["idle-bare"])
    _line(f"bare graph run, its node making {MODEL_CALLS} model calls", times["calls-bare"])
    per_call: dict[str, Timing] = {}
    labels = {"noop": "a no-op callback handler", "ours": "relay configure_graph", "nemo": "nemo configure_graph"}
    for variant, label in labels.items():
        if f"idle-{variant}" not in times:
            continue
        per_run = times[f"idle-{variant}"] - times["idle-bare"]
        per_call[variant] = (times[f"calls-{variant}"] - times["calls-bare"] - per_run) / MODEL_CALLS
        _line(f"added by {label} per graph run (no model call)", per_run)
        _line(
            f"added by {label} per model call in a graph", per_call[variant], BUDGET_US if variant == "ours" else None
        )
    if "nemo" in per_call and per_call["ours"].cpu > 0:
        _ratio("nemo added / ours added, per model call", per_call["nemo"].cpu / per_call["ours"].cpu, 1.0)


def bench_tool_node() -> None:
    nemo = _nemo()
    flush = {} if nemo is None else {"tool-nemo": _nemo_aflush()}
    with managed_turn(), _nemo_scope(nemo):
        times = compare_async(_tool_calls(nemo), CALLS, ROUNDS, after=flush)
    print("LangGraph tool node, one tool call (create_tool_node beside ToolNode)")
    _line("bare ToolNode", times["tool-bare"])
    ours = times["tool-ours"] - times["tool-bare"]
    _line("added by relay create_tool_node per tool call", ours, BUDGET_US)
    if "tool-nemo" in times:
        theirs = times["tool-nemo"] - times["tool-bare"]
        _line("added by nemo create_tool_node per tool call", theirs)
        if ours.cpu > 0:
            _ratio("nemo added / ours added, per tool call", theirs.cpu / ours.cpu, 1.0)


def _nemo_flush() -> Callable[[], Any]:
    import nemo_relay

    return nemo_relay.subscribers.flush


def _nemo_aflush() -> Callable[[], Any]:
    import nemo_relay

    return nemo_relay.subscribers.flush_async


def main() -> None:
    run_benches(bench_graph, bench_tool_node)


if __name__ == "__main__":
    main()
