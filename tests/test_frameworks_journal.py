"""A framework's run in the run journal (and so on the run page): its agent, node and tool scopes are
``span`` rows of the run's tree, with their names, outcomes and parents, beside the logical calls."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from relay_runtime import GuardrailRejected, session
from relay_runtime.adapters import testing as t
from tests.framework_support import need, tool_call_body
from tests.journal_support import run_turn

agents_mod = need("langchain.agents")
tools_mod = need("langchain_core.tools")
need("langchain_openai")

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402
from tests.test_frameworks_langchain import chat_model  # noqa: E402


def spans(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["payload"] for r in rows if r["event"] == "span"]


def test_langchain_agent_run_in_the_journal(tmp_path) -> None:
    @tools_mod.tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    script = t.Script(
        [t.json_reply(tool_call_body("lookup", {"city": "Paris"})), t.json_reply(t.chat_completion_body("Done."))]
    )

    def body() -> None:
        relay = session.active_turn().relay  # type: ignore[union-attr]

        def refuse(name: str, args: Any) -> Any:
            raise GuardrailRejected("policy", "lookups are off")

        relay.intercepts.register_tool_request("policy", 0, False, refuse)
        agent = agents_mod.create_agent(chat_model(script), [lookup], middleware=[RelayMiddleware()], name="helper")
        agent.invoke(
            {"messages": [{"role": "user", "content": "Paris?"}]}, config={"callbacks": [RelayCallbackHandler()]}
        )

    result = run_turn(tmp_path, body)
    rows = spans(result.rows)
    by_id = {r["id"]: r for r in rows}
    (agent,) = [r for r in rows if r["kind"] == "agent"]
    assert (agent["name"], agent["outcome"]) == ("helper", "success")
    (tool,) = [r for r in rows if r["kind"] == "tool"]
    assert (tool["name"], tool["outcome"], tool["error_type"]) == ("lookup", "failed", "GuardrailRejected")
    assert by_id[tool["parent_id"]]["name"] == "tools"
    assert by_id[by_id[tool["parent_id"]]["parent_id"]] is agent
    calls = [r for r in rows if r["kind"] == "logical_call"]
    assert len(calls) == 2 and all(by_id[c["parent_id"]]["name"] == "model" for c in calls)
    assert [r["kind"] for r in rows].count("attempt") == 2
    assert json.loads(json.dumps(rows))  # rows are plain JSON


def test_agents_sdk_run_in_the_journal(tmp_path) -> None:
    agents = need("agents")
    from relay_runtime.integrations import openai_agents

    @agents.function_tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    call = {"call_id": "call-1", "name": "lookup", "arguments": json.dumps({"city": "Paris"})}
    scripted = t.scripted_openai(
        t.json_reply(t.responses_body("", function_call=call)), t.json_reply(t.responses_body("Done.")), max_retries=0
    )
    provider = agents.tracing.get_trace_provider()
    saved = provider._multi_processor._processors
    agents.set_tracing_disabled(False)
    agents.set_trace_processors([])
    agents.set_default_openai_client(scripted.aclient, use_for_tracing=False)
    openai_agents.instrument()
    try:
        result = run_turn(
            tmp_path,
            lambda: asyncio.run(agents.Runner.run(agents.Agent(name="helper", model="gpt-test", tools=[lookup]), "?")),
        )
    finally:
        openai_agents.uninstrument()
        agents.set_default_openai_client(None, use_for_tracing=False)  # type: ignore[arg-type]
        agents.set_trace_processors(list(saved))
    rows = spans(result.rows)
    by_id = {r["id"]: r for r in rows}
    (agent,) = [r for r in rows if r["kind"] == "agent"]
    (tool,) = [r for r in rows if r["kind"] == "tool"]
    assert (agent["name"], tool["name"], tool["outcome"]) == ("helper", "lookup", "success")
    assert by_id[tool["parent_id"]] is agent
    assert [by_id[r["parent_id"]] is agent for r in rows if r["kind"] == "logical_call"] == [True, True]
