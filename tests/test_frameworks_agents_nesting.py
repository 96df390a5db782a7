"""An OpenAI Agents SDK agent run as another agent's tool (``Agent.as_tool``), under ``instrument()``.

The tool is a managed tool call (``instrument()`` wraps function tools): the inner agent's run, and all it
does, nests under that tool's scope, as it does under the tool scope the processor opens for a tool it
does not wrap. Real ``openai-agents`` on the scripted mock transport (no network).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations import openai_agents
from tests.framework_support import need, outline
from tests.test_frameworks_agents import RAN, sdk_tracing, weather  # noqa: F401 - the fixture

agents = need("agents")


def call(call_id: str, name: str, arguments: dict[str, Any]) -> t.Reply:
    item = {"call_id": call_id, "name": name, "arguments": json.dumps(arguments)}
    return t.json_reply(t.responses_body("", function_call=item))


def test_an_agent_run_as_a_managed_tool_nests_under_the_tools_scope(relay_turn, relay_events) -> None:
    openai_agents.instrument()
    s = t.scripted_openai(
        call("outer-1", "researcher", {"input": "Weather in Paris?"}),
        call("inner-1", "weather", {"city": "Paris"}),
        t.json_reply(t.responses_body("Sunny in Paris.")),
        t.json_reply(t.responses_body("Done.")),
        max_retries=0,
    )
    agents.set_default_openai_client(s.aclient, use_for_tracing=False)
    inner = agents.Agent(name="inner", instructions="Answer briefly.", model="gpt-test", tools=[weather])
    researcher = inner.as_tool(tool_name="researcher", tool_description="Researches a question.")
    outer = agents.Agent(name="outer", instructions="Answer briefly.", model="gpt-test", tools=[researcher])
    assert asyncio.run(agents.Runner.run(outer, "Weather in Paris?")).final_output == "Done."
    assert RAN == ["Paris"]
    assert outline(relay_events) == [
        "agent outer success",
        "  function logical_llm_call success",
        "    llm openai success",
        "  tool researcher success",
        "    agent inner success",
        "      function logical_llm_call success",
        "        llm openai success",
        "      tool weather success",
        "      function logical_llm_call success",
        "        llm openai success",
        "  function logical_llm_call success",
        "    llm openai success",
    ]
    (tool,) = relay_events.ends(name="researcher")
    (agent,) = relay_events.starts(name="inner")
    assert agent.parent_uuid == tool.uuid and tool.metadata[cv.KIND] == cv.TOOL
