"""An OpenAI Agents SDK agent calling a tool of a real MCP server, with both integrations on.

Real ``openai-agents`` (its ``MCPServerStdio`` and ``MCPServerStreamableHttp``, over the ``mcp`` 2.x
client) on the scripted mock transport, and a real MCP server in another process (tests/mcp_app.py,
instrumented, writing its spans to a file). The Agents SDK's managed tool call is the tool scope; the
MCP client's request must annotate that scope, not open a second one under it, and the server's span
must be its child.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import Recorder
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations import openai_agents
from relay_runtime.integrations.mcp import instrument_mcp, uninstrument_mcp
from tests import framework_support
from tests.framework_support import need, outline
from tests.test_frameworks_agents import sdk_tracing
from tests.test_mcp import APP, ServerSpans, _serve

agents = need("agents")
agents_mcp = need("agents.mcp")

__all__ = ["sdk_tracing"]  # the fixture ``both_integrations`` runs first


@pytest.fixture(autouse=True)
def both_integrations(request: pytest.FixtureRequest) -> Iterator[None]:
    """``test_frameworks_agents``' SDK tracing set-up first (only our trace processor, everything put back after),
    then both integrations on."""
    request.getfixturevalue("sdk_tracing")
    openai_agents.instrument()
    instrument_mcp()
    try:
        yield
    finally:
        uninstrument_mcp()


otel_spans = framework_support.otel_spans  # the fixture, under its name here


def _stdio_server(spans: Path) -> Any:
    """The Agents SDK's stdio server (it hands the MCP client a ``stdio_client`` transport it built)."""
    args = [str(APP), "stdio", "0", str(spans), "instrumented"]
    params = {"command": sys.executable, "args": args, "env": dict(os.environ)}
    return agents_mcp.MCPServerStdio(params, name="calc", client_session_timeout_seconds=30)


def _add_then_answer(tool: str, call_id: str) -> t.Scripted:
    call = {"call_id": call_id, "name": tool, "arguments": json.dumps({"a": 2, "b": 3})}
    s = t.scripted_openai(
        t.json_reply(t.responses_body("", function_call=call)),
        t.json_reply(t.responses_body("It is 5.")),
        max_retries=0,
    )
    agents.set_default_openai_client(s.aclient, use_for_tracing=False)
    return s


def _run(server: Any, **mcp_config: Any) -> Any:
    async def go() -> Any:
        async with server:
            agent = agents.Agent(
                name="helper", instructions="Add.", model="gpt-test", mcp_servers=[server], mcp_config=mcp_config
            )
            return await agents.Runner.run(agent, "2 + 3?")

    return asyncio.run(go())


def _tool_output(body: dict[str, Any]) -> Any:
    return next(item for item in body["input"] if item.get("type") == "function_call_output")["output"]


def _tool_spans(memory: InMemorySpanExporter) -> list[ReadableSpan]:
    return [
        s
        for s in memory.get_finished_spans()
        if dict(s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"
    ]


NAMES = pytest.mark.parametrize(
    ("public_name", "mcp_config"),
    [("add", {}), ("mcp_calc__add", {"include_server_in_tool_names": True})],
    ids=["tool-name", "server-prefixed-name"],
)


@NAMES
def test_an_agents_mcp_tool_call_is_one_tool_scope_with_the_mcp_attributes(
    relay_turn: Any,
    relay_events: Recorder,
    otel_spans: InMemorySpanExporter,
    tmp_path: Path,
    public_name: str,
    mcp_config: dict[str, Any],
) -> None:
    spans = ServerSpans(tmp_path / "server-spans.jsonl")
    s = _add_then_answer(public_name, "call-7")
    result = _run(_stdio_server(spans.path), **mcp_config)
    assert result.final_output == "It is 5."
    assert "5" in json.dumps(_tool_output(s.script.bodies()[1]))

    # One tool scope for the call: the Agents SDK's managed call, no MCP client scope inside it.
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.name, tool.outcome) == (public_name, "success")
    assert tool.metadata["tool_call_id"] == "call-7"
    assert not [e for e in relay_events.ends() if e.name.startswith("tools/call")]
    lines = [line.strip() for line in outline(relay_events)]
    assert lines.count(f"tool {public_name} success") == 1

    # Its span carries what the MCP client side knows of the request.
    (span,) = _tool_spans(otel_spans)
    attributes = dict(span.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.call.id"] == "call-7"
    assert attributes["gen_ai.tool.name"] == "add"  # the tool's name on the server, as the MCP conventions say
    assert attributes["mcp.protocol.version"]
    assert attributes["network.transport"] == "pipe"
    assert attributes["jsonrpc.request.id"] is not None

    # The server continues that trace: its span is the child of that one span.
    served = spans.wait_for("tools/call add")
    assert served["kind"] == "SERVER"
    assert served["trace_id"] == f"{span.context.trace_id:032x}"
    assert served["parent_span_id"] == f"{span.context.span_id:016x}" and served["parent_is_remote"]
    assert served["attributes"]["jsonrpc.request.id"] == attributes["jsonrpc.request.id"]


@NAMES
def test_a_tool_request_intercept_runs_once_for_an_agents_mcp_tool_call(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, public_name: str, mcp_config: dict[str, Any]
) -> None:
    """A second tool scope would run the relay's tool intercepts a second time, on the rewritten arguments."""
    relay, _turn = relay_turn
    seen: list[tuple[str, Any]] = []

    def times_ten(tool: str, args: Any) -> Any:
        seen.append((tool, args))
        return {**args, "a": args["a"] * 10}

    relay.intercepts.register_tool_request("times-ten", 0, False, times_ten)
    try:
        s = _add_then_answer(public_name, "call-8")
        _run(_stdio_server(tmp_path / "server-spans.jsonl"), **mcp_config)
    finally:
        relay.intercepts.deregister_tool_request("times-ten")
    assert seen == [(public_name, {"a": 2, "b": 3})]
    assert "23" in json.dumps(_tool_output(s.script.bodies()[1]))
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.name, tool.outcome, tool.metadata["tool_call_id"]) == (public_name, "success", "call-8")


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, ServerSpans]]:
    yield from _serve("http", tmp_path)


def test_an_agents_mcp_tool_call_over_streamable_http_is_one_tool_scope_with_the_servers_address(
    relay_turn: Any, relay_events: Recorder, otel_spans: InMemorySpanExporter, http_server: tuple[str, ServerSpans]
) -> None:
    """The SDK's HTTP server makes its own transport (over its own HTTP client) inside the MCP client's connect."""
    url, spans = http_server
    s = _add_then_answer("add", "call-9")
    server = agents_mcp.MCPServerStreamableHttp({"url": url}, name="calc", client_session_timeout_seconds=30)
    assert _run(server).final_output == "It is 5."
    assert "5" in json.dumps(_tool_output(s.script.bodies()[1]))
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.name, tool.outcome, tool.metadata["tool_call_id"]) == ("add", "success", "call-9")
    (span,) = _tool_spans(otel_spans)
    attributes = dict(span.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call" and attributes["gen_ai.tool.call.id"] == "call-9"
    assert attributes["network.transport"] == "tcp" and attributes["server.address"] == "127.0.0.1"
    served = spans.wait_for("tools/call add")
    assert served["trace_id"] == f"{span.context.trace_id:032x}"
    assert served["parent_span_id"] == f"{span.context.span_id:016x}" and served["parent_is_remote"]
