"""LangChain agents inside agents, and relay layers twice on one run: each tool call recorded once.

Real LangChain agents (``create_agent``) over a real ``ChatOpenAI`` on the scripted mock transport.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from tests.framework_support import need, outline, tool_call_body
from tests.test_frameworks_langchain import RAN, chat_model, run, weather

agents_mod = need("langchain.agents")
tools_mod = need("langchain_core.tools")

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402


@pytest.fixture(autouse=True)
def _clean() -> Any:
    RAN.clear()
    yield


def script_of(tool: str, args: dict[str, Any], call_id: str, answer: str) -> t.Script:
    return t.Script([t.json_reply(tool_call_body(tool, args, call_id)), t.json_reply(t.chat_completion_body(answer))])


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_sub_agents_tool_call_inside_a_managed_tool_has_its_own_scope(relay_turn, relay_events, use_async) -> None:
    """An agent run as a tool of an agent whose tools ``RelayMiddleware`` manages: the inner agent's own tool
    call (under the handler the run passes on) is a tool scope of its own, not taken for the outer tool's."""
    inner = agents_mod.create_agent(
        chat_model(script_of("weather", {"city": "Paris"}, "inner-call", "Sunny.")), [weather], name="inner"
    )

    @tools_mod.tool
    async def research(question: str) -> str:
        """Ask the research agent."""
        result = await inner.ainvoke({"messages": [{"role": "user", "content": question}]})
        return result["messages"][-1].content

    @tools_mod.tool("research")
    def research_sync(question: str) -> str:
        """Ask the research agent."""
        return inner.invoke({"messages": [{"role": "user", "content": question}]})["messages"][-1].content

    tool = research if use_async else research_sync
    outer_script = script_of("research", {"question": "Paris?"}, "outer-call", "Done.")
    outer = agents_mod.create_agent(chat_model(outer_script), [tool], middleware=[RelayMiddleware()], name="outer")
    result = run(outer, "Go", use_async=use_async, callbacks=[RelayCallbackHandler()])
    assert result["messages"][-1].content == "Done." and RAN == ["Paris"]
    tools = relay_events.ends(relay_kind=cv.TOOL)
    assert sorted((e.name, e.outcome) for e in tools) == [("research", "success"), ("weather", "success")]
    lines = outline(relay_events)
    research_at = lines.index("    tool research success")
    assert "          tool weather success" in lines[research_at:]  # under the inner agent's tools node


def test_two_relay_middlewares_make_one_managed_tool_call(relay_turn, relay_events) -> None:
    """Two ``RelayMiddleware`` in one agent's stack (two layers each adding theirs): the tool call is one
    tool scope, and the relay's tool intercepts run once."""
    relay, _turn = relay_turn
    seen: list[Any] = []

    def count(name: str, args: Any) -> Any:
        seen.append(name)
        return args

    relay.intercepts.register_tool_request("count", 0, False, count)
    script = script_of("weather", {"city": "Paris"}, "call-1", "Done.")
    middleware = [RelayMiddleware(), RelayMiddleware(name="RelayMiddlewareAgain")]
    agent = agents_mod.create_agent(chat_model(script), [weather], middleware=middleware, name="helper")
    result = run(agent, "Weather in Paris?", callbacks=[RelayCallbackHandler()])
    assert result["messages"][-1].content == "Done." and RAN == ["Paris"]
    assert seen == ["weather"]
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.name, tool.outcome) == ("weather", "success")
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 2
