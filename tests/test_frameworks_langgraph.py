"""LangGraph graphs under ``configure_graph`` with tool nodes from ``create_tool_node``.

A real ``StateGraph`` whose model node calls a real ``ChatOpenAI`` on the scripted mock transport
(no network), a real ``ToolNode``, and LangGraph's in-memory checkpointer for interrupts.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from relay_runtime import GuardrailRejected, adapters, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.trajectory import AtifExporter, validate_atif
from tests.framework_support import attempts, need, outline, tool_call_body

graph_mod = need("langgraph.graph")
prebuilt = need("langgraph.prebuilt")
types_mod = need("langgraph.types")
memory_mod = need("langgraph.checkpoint.memory")
tools_mod = need("langchain_core.tools")
langchain_openai = need("langchain_openai")

from relay_runtime.integrations.langgraph import configure_graph, create_tool_node  # noqa: E402
from tests.test_frameworks_langchain import chat_model  # noqa: E402

RAN: list[str] = []


@tools_mod.tool
def weather(city: str) -> str:
    """The weather of a city."""
    RAN.append(city)
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    RAN.clear()
    yield
    adapters.uninstrument()


def tool_loop_graph(call_model: Any, tools: list[Any]) -> Any:
    """A configured graph of a model node (``call_model``) and a ``create_tool_node`` of ``tools``, looping until
    the model calls no tool."""
    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", create_tool_node(tools))
    builder.add_edge(graph_mod.START, "agent")
    builder.add_conditional_edges("agent", prebuilt.tools_condition)
    builder.add_edge("tools", "agent")
    return configure_graph(builder.compile(name="weather-graph"))


def agent_graph(script: t.Script, **model_options: Any) -> Any:
    model = chat_model(script, **model_options).bind_tools([weather])

    def call_model(state: Any) -> Any:
        return {"messages": [model.invoke(state["messages"])]}

    return tool_loop_graph(call_model, [weather])


def tool_then_answer() -> t.Script:
    return t.Script(
        [t.json_reply(tool_call_body("weather", {"city": "Paris"})), t.json_reply(t.chat_completion_body("Done."))]
    )


QUESTION = {"messages": [{"role": "user", "content": "Weather in Paris?"}]}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_graph_nodes_model_calls_and_tools(relay_turn, relay_events, use_async) -> None:
    adapters.instrument()
    script = tool_then_answer()
    graph = agent_graph(script)
    result = asyncio.run(graph.ainvoke(QUESTION)) if use_async else graph.invoke(QUESTION)
    assert result["messages"][-1].content == "Done."
    assert outline(relay_events) == [
        "agent weather-graph success",
        "  function agent success",
        "    function logical_llm_call success",
        "      llm openai success",
        "    function tools_condition success",
        "  function tools success",
        "    tool weather success",
        "  function agent success",
        "    function logical_llm_call success",
        "      llm openai success",
        "    function tools_condition success",
    ]
    assert len(attempts(relay_events)) == len(script.requests) == 2
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert relay_events.starts(uuid=tool.uuid)[0].input == {"city": "Paris"}
    assert tool.output.content == "sunny in Paris"
    assert tool.metadata["tool_call_id"] == "call-1"


def test_tool_node_guardrail_refuses(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn

    def refuse(name: str, args: Any) -> Any:
        raise GuardrailRejected("no-tools", "tools are disabled")

    relay.intercepts.register_tool_request("no-tools", 0, False, refuse)
    script = tool_then_answer()
    result = agent_graph(script).invoke(QUESTION)
    assert RAN == []
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type) == ("failed", "GuardrailRejected")
    assert result["messages"][2].content == "Tool call refused: tools are disabled"
    assert script.bodies()[1]["messages"][-1]["content"] == "Tool call refused: tools are disabled"


def test_configure_graph_is_idempotent_and_checks_its_argument() -> None:
    script = tool_then_answer()
    graph = agent_graph(script)
    assert configure_graph(graph) is graph
    assert len(graph.config["callbacks"]) == 1
    with pytest.raises(TypeError, match="compiled LangGraph graph"):
        configure_graph(object())


def approval_graph(configure: bool = True) -> Any:
    def ask(state: Any) -> Any:
        answer = types_mod.interrupt({"question": "Send the email?"})
        return {"messages": [{"role": "assistant", "content": f"approved: {answer}"}]}

    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(graph_mod.START, "ask")
    graph = builder.compile(name="approval", checkpointer=memory_mod.InMemorySaver())
    return configure_graph(graph) if configure else graph


def test_interrupt_and_resume_are_marks_and_resume_keeps_the_ids(relay_home) -> None:
    from relay_runtime import Recorder

    graph = approval_graph()
    config = {"configurable": {"thread_id": "thread-1"}}

    def in_turn(run: Any) -> Recorder:
        coordinator = session.SESSION_COORDINATOR
        lease = coordinator.acquire_conversation(
            profile_key=session.current_profile_key(), session_id="chat-7", platform="test"
        )
        events = Recorder()
        lease.host.relay.subscribers.register(events)
        lease.host.retain_managed_execution("test")
        turn = coordinator.begin_turn(lease, turn_id="turn-7", task_id="task-7")
        try:
            run()
        finally:
            coordinator.end_turn(turn, outcome="success")
            coordinator.release_conversation(lease)
        return events

    first = in_turn(lambda: graph.invoke(QUESTION, config))
    (mark,) = first.marks(name="graph.interrupt")
    assert mark.data["interrupts"][0]["value"] == {"question": "Send the email?"}
    (ask,) = [e for e in first.ends() if e.name == "ask"]
    assert (ask.outcome, ask.output) == ("success", {"control_flow": "GraphInterrupt"})

    session.reset_for_tests()  # as a new process would: nothing of the first run is kept
    second = in_turn(lambda: graph.invoke(types_mod.Command(resume="yes"), config))
    (resumed,) = second.marks(name="graph.resume")
    assert resumed.data["resume"] == "yes"
    assert resumed.data["checkpoint_id"]
    # The resumed run is recorded under the same conversation and turn ids.
    turn_start = second.starts(relay_kind=cv.TURN)[0]
    assert (turn_start.metadata[cv.SESSION_ID], turn_start.metadata[cv.TURN_ID]) == ("chat-7", "turn-7")
    (graph_end,) = [e for e in second.ends() if e.name == "approval"]
    assert graph_end.outcome == "success"
    assert graph_end.trace_id == turn_start.trace_id


def test_streamed_graph_is_one_attempt_per_call(relay_turn, relay_events) -> None:
    adapters.instrument()
    script = t.Script([t.sse_reply(t.openai_chat_sse(t.chat_chunks(["Hel", "lo"])))])
    graph = agent_graph(script, streaming=True)
    items = list(graph.stream(QUESTION, stream_mode="messages"))
    assert "".join(chunk.content for chunk, _ in items if isinstance(chunk.content, str)) == "Hello"
    (attempt,) = attempts(relay_events)
    assert (attempt.outcome, attempt.annotated_response.output_text) == ("success", "Hello")


def test_missing_langgraph_names_the_extra(monkeypatch) -> None:
    from relay_runtime.integrations import langgraph as integration

    monkeypatch.setitem(sys.modules, "langgraph", None)
    with pytest.raises(ImportError, match=r"pip install 'relay-runtime\[langgraph\]'"):
        integration.create_tool_node  # noqa: B018


def test_tool_node_error_handled_by_the_node(relay_turn, relay_events) -> None:
    @tools_mod.tool
    def broken(city: str) -> str:
        """Always fails."""
        raise RuntimeError(f"no data for {city}")

    node = create_tool_node([broken], handle_tool_errors=True)  # the node's own options pass through
    call = {"name": "broken", "args": {"city": "Paris"}, "id": "call-9", "type": "tool_call"}
    ai = need("langchain_core.messages").AIMessage(content="", tool_calls=[call])
    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(graph_mod.START, "tools")
    out = configure_graph(builder.compile()).invoke({"messages": [ai]})
    message = out["messages"][-1]
    assert (message.status, message.tool_call_id) == ("error", "call-9")
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type) == ("failed", "tool_error")
    assert "no data for Paris" in tool.error_message


@tools_mod.tool
def send_email(to: str) -> str:
    """Send an e-mail once a human approves."""
    answer = types_mod.interrupt({"approve": f"send to {to}?"})
    RAN.append(f"{to}: {answer}")
    return f"sent: {answer}"


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_tool_that_interrupts_is_paused_not_failed(relay_turn, relay_events, use_async) -> None:
    """``interrupt()`` inside a managed tool pauses the graph: the tool's scope ends as the node's does
    (a success holding the control flow), and the resumed run records the tool's result."""
    call = {"name": "send_email", "args": {"to": "ops"}, "id": "call-3", "type": "tool_call"}
    ai = need("langchain_core.messages").AIMessage(content="", tool_calls=[call])
    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("tools", create_tool_node([send_email]))
    builder.add_edge(graph_mod.START, "tools")
    graph = configure_graph(builder.compile(checkpointer=memory_mod.InMemorySaver()))
    config = {"configurable": {"thread_id": "approve-1"}}

    def invoke(value: Any) -> Any:
        return asyncio.run(graph.ainvoke(value, config)) if use_async else graph.invoke(value, config)

    paused = invoke({"messages": [ai]})
    assert paused["__interrupt__"][0].value == {"approve": "send to ops?"} and RAN == []
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type, tool.output) == ("success", None, {"control_flow": "GraphInterrupt"})
    (node,) = [e for e in relay_events.ends() if e.name == "tools"]
    assert (node.outcome, node.output) == ("success", {"control_flow": "GraphInterrupt"})

    done = invoke(types_mod.Command(resume="yes"))
    assert done["messages"][-1].content == "sent: yes" and RAN == ["ops: yes"]
    _paused, second = relay_events.ends(relay_kind=cv.TOOL)
    assert (second.outcome, second.output.content) == ("success", "sent: yes")


@pytest.fixture
def trajectory(relay_host: Any) -> Iterator[Any]:
    """An ATIF exporter on the relay, attached before the turn begins (it needs the conversation's start)."""
    exporter = AtifExporter().attach(relay_host.relay)
    try:
        yield exporter
    finally:
        exporter.detach()


@pytest.mark.parametrize("answer", ["yes", "no"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_an_approval_intercept_that_interrupts_pauses_the_graph_before_the_tool_runs(
    trajectory, relay_turn, relay_events, use_async, answer
) -> None:
    """A tool request intercept asking a human with ``interrupt()``: the graph pauses (no refusal made of the
    pause), the tool has not run, and on resume the intercept's verdict stands: the tool runs or is refused.
    The trajectory says where the run paused, and only the resumed call answers the tool call."""
    relay, _turn = relay_turn

    def approve(name: str, args: Any) -> Any:
        if types_mod.interrupt({"approve": name}) != "yes":
            raise GuardrailRejected("approval", "a human said no")
        return args

    relay.intercepts.register_tool_request("approval", 0, False, approve)
    call = {"name": "weather", "args": {"city": "Paris"}, "id": "call-4", "type": "tool_call"}
    ai = need("langchain_core.messages").AIMessage(content="", tool_calls=[call])
    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("tools", create_tool_node([weather]))
    builder.add_edge(graph_mod.START, "tools")
    graph = configure_graph(builder.compile(checkpointer=memory_mod.InMemorySaver()))
    config = {"configurable": {"thread_id": f"approve-intercept-{use_async}-{answer}"}}

    def invoke(value: Any) -> Any:
        return asyncio.run(graph.ainvoke(value, config)) if use_async else graph.invoke(value, config)

    paused = invoke({"messages": [ai]})
    assert paused["__interrupt__"][0].value == {"approve": "weather"}
    assert RAN == [] and len(paused["messages"]) == 1  # no tool message: nothing was refused
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type, tool.output) == ("success", None, {"control_flow": "GraphInterrupt"})

    done = invoke(types_mod.Command(resume=answer))
    _paused, second = relay_events.ends(relay_kind=cv.TOOL)
    steps = trajectory.export()["steps"]
    assert validate_atif(trajectory.export()) == []
    (pause,) = [s for s in steps if s.get("extra", {}).get("control_flow")]
    assert (pause["source"], pause["extra"]["tool_call_id"]) == ("system", "call-4")
    results = [r for s in steps for r in (s.get("observation") or {}).get("results", [])]
    assert len(results) == 1 and "control_flow" not in json.dumps(results)  # the pause is no answer of the call
    if answer == "yes":
        assert RAN == ["Paris"] and done["messages"][-1].content == "sunny in Paris"
        assert second.outcome == "success"
    else:
        assert RAN == [] and done["messages"][-1].content == "Tool call refused: a human said no"
        assert (second.outcome, second.error_type) == ("failed", "GuardrailRejected")


def test_a_middleware_tool_that_interrupts_is_paused_not_failed(relay_turn, relay_events) -> None:
    """``RelayMiddleware``'s tool calls take the same path: the pause is no failure."""
    from relay_runtime.integrations.langchain import RelayMiddleware

    agents_mod = need("langchain.agents")
    script = t.Script(
        [t.json_reply(tool_call_body("send_email", {"to": "ops"})), t.json_reply(t.chat_completion_body("Sent."))]
    )
    agent = agents_mod.create_agent(
        chat_model(script), [send_email], middleware=[RelayMiddleware()], checkpointer=memory_mod.InMemorySaver()
    )
    config = {"configurable": {"thread_id": "approve-2"}}
    paused = agent.invoke({"messages": [{"role": "user", "content": "Mail ops"}]}, config)
    assert "__interrupt__" in paused and RAN == []
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.output) == ("success", {"control_flow": "GraphInterrupt"})
    assert agent.invoke(types_mod.Command(resume="ok"), config)["messages"][-1].content == "Sent."
    assert [e.outcome for e in relay_events.ends(relay_kind=cv.TOOL)] == ["success", "success"]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_configure_graph_and_a_callback_handler_record_the_run_once(relay_turn, relay_events, use_async) -> None:
    """``configure_graph``'s handler and the LangChain usage (``config["callbacks"]``) on one invocation:
    every scope and logical call once, each with its attempt."""
    from relay_runtime.integrations.langchain import RelayCallbackHandler

    adapters.instrument()
    script = tool_then_answer()
    graph = agent_graph(script)
    config = {"callbacks": [RelayCallbackHandler()]}
    result = asyncio.run(graph.ainvoke(QUESTION, config)) if use_async else graph.invoke(QUESTION, config)
    assert result["messages"][-1].content == "Done."
    lines = outline(relay_events)
    assert lines[0] == "agent weather-graph success" and lines.count("  function agent success") == 2
    assert len(lines) == 11 and len(relay_events.ends(relay_kind=cv.TOOL)) == 1
    calls = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert len(calls) == len(attempts(relay_events)) == len(script.requests) == 2
    assert {a.parent_uuid for a in attempts(relay_events)} == {c.uuid for c in calls}


def test_configure_graph_keeps_a_callback_handler_of_the_graph_config_to_one_record(relay_turn, relay_events) -> None:
    """A ``RelayCallbackHandler`` already in the graph's config: ``configure_graph`` adds the graph handler
    (for the interrupt and resume marks) and the run is still recorded once."""
    from relay_runtime.integrations.langchain import RelayCallbackHandler

    graph = approval_graph(configure=False)
    graph.config = {**(graph.config or {}), "callbacks": [RelayCallbackHandler()]}
    configure_graph(configure_graph(graph))
    names = [type(h).__name__ for h in graph.config["callbacks"]]
    assert names == ["RelayCallbackHandler", "RelayGraphCallbackHandler"]
    graph.invoke(QUESTION, {"configurable": {"thread_id": "once"}})
    assert outline(relay_events, skip=("conversation", "turn")) == ["agent approval success", "  function ask success"]
    assert len(relay_events.marks(name="graph.interrupt")) == 1


def test_a_pause_inside_a_subgraph_is_one_interrupt_and_one_resume_with_its_value(relay_turn, relay_events) -> None:
    """LangGraph tells an interrupt to the top graph alone, but a resume to every graph that resumes: the
    subgraph's own resume is the same resume, not a second one (without the value the caller passed)."""

    def ask(state: Any) -> Any:
        answer = types_mod.interrupt({"question": "Send the email?"})
        return {"messages": [{"role": "assistant", "content": f"approved: {answer}"}]}

    inner = graph_mod.StateGraph(graph_mod.MessagesState)
    inner.add_node("ask", ask)
    inner.add_edge(graph_mod.START, "ask")
    outer = graph_mod.StateGraph(graph_mod.MessagesState)
    outer.add_node("review", inner.compile(name="review"))
    outer.add_edge(graph_mod.START, "review")
    graph = configure_graph(outer.compile(name="mailer", checkpointer=memory_mod.InMemorySaver()))
    config = {"configurable": {"thread_id": "subgraph-pause"}}

    graph.invoke(QUESTION, config)
    done = graph.invoke(types_mod.Command(resume="yes"), config)

    assert done["messages"][-1].content == "approved: yes"
    (interrupted,) = relay_events.marks(name="graph.interrupt")
    (resumed,) = relay_events.marks(name="graph.resume")
    assert [e.name for e in relay_events.starts() if e.uuid == resumed.parent_uuid] == ["mailer"]
    assert resumed.data["resume"] == "yes" and resumed.data["checkpoint_ns"] == []
    assert interrupted.data["checkpoint_ns"] == []
