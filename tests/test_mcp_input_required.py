# ruff: noqa: F811 - the fixtures imported from the other MCP modules are parameters of the tests below
"""A tool call the server pauses to ask for the user's input (the 2026-07-28 protocol's ``input_required``
rounds): one logical ``Client.call_tool``, one client tool scope, its guardrails run once.

Both sides in this process (an ``MCPServer`` over the SDK's in-memory transport): the client's
scopes and the server's land in one relay, its events and its OTel pipeline.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp.client.client import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, ErrorData, InputRequiredResult

from relay_runtime.trace_context import REMOTE_PARENT
from tests.test_mcp import ClientSide, client_side, instrumented, sdk_spans  # noqa: F401 - fixtures

_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def _booking_server() -> MCPServer:
    server = MCPServer("asks")

    @server.tool()
    async def book(city: str, ctx: Context) -> str | InputRequiredResult:
        answer = (ctx.input_responses or {}).get("confirm")
        if answer is None:
            form = ElicitRequestFormParams(message=f"Book a room in {city}?", requested_schema=_SCHEMA)
            return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=form)}, request_state="s-1")
        return f"booked {city}: {answer.action}"

    return server


async def _accept(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


async def _refuse(context: Any, params: Any) -> ErrorData:
    return ErrorData(code=-32600, message="the user closed the form")


def _book(callback: Any) -> Any:
    """The call's result, or the error it raised (caught inside the session, which would wrap it in a group)."""

    async def run() -> Any:
        async with Client(_booking_server(), elicitation_callback=callback) as client:
            try:
                return await client.call_tool("book", {"city": "Oslo"})
            except MCPError as error:
                return error

    return asyncio.run(run())


def _client_tool_ends(client_side: ClientSide) -> list[Any]:
    """The client's ends of ``book``: the server's scopes carry the remote parent the request came with."""
    served = {e.uuid for e in client_side.events.starts(name="book") if e.metadata.get(REMOTE_PARENT)}
    return [e for e in client_side.tool_ends("book") if e.uuid not in served]


def test_a_tool_call_that_asks_for_input_is_one_client_tool_scope_with_its_round_marked_and_intercepts_run_once(
    client_side: ClientSide,
) -> None:
    seen: list[Any] = []

    def rewrite(tool: str, args: Any) -> Any:
        seen.append(dict(args))
        return {**args, "city": args["city"].upper()}

    client_side.relay.intercepts.register_tool_request("rewrite", 10, False, rewrite)
    try:
        result = _book(_accept)
    finally:
        client_side.relay.intercepts.deregister_tool_request("rewrite")

    # The guardrail ran once, and its rewrite reached the server in both rounds.
    assert seen == [{"city": "Oslo"}]
    assert result.content[0].text == "booked OSLO: accept"
    sent = [s for s in client_side.pipeline.by_name("tools/call book") if s.kind.name == "CLIENT"]
    served = [s for s in client_side.pipeline.by_name("tools/call book") if s.kind.name == "SERVER"]
    assert len(sent) == 1 and len(served) == 2
    (call,) = sent
    # Both rounds the server served are children of the one call.
    assert {s.parent.span_id for s in served if s.parent is not None} == {call.context.span_id}
    assert [e.name for e in call.events] == ["mcp.input_required"]
    (end,) = _client_tool_ends(client_side)
    assert end.outcome == "success" and end.output.content[0].text == "booked OSLO: accept"
    (mark,) = client_side.events.marks(name="mcp.input_required", parent_uuid=end.uuid)
    assert mark.data == {"round": 1, "requests": {"confirm": "elicitation/create"}}


def test_a_servers_round_asking_for_input_records_no_tool_output_but_what_it_asked_for(
    client_side: ClientSide,
) -> None:
    _book(_accept)
    served = {e.uuid for e in client_side.events.starts(name="book") if e.metadata.get(REMOTE_PARENT)}
    asking, answering = [e for e in client_side.tool_ends("book") if e.uuid in served]
    assert asking.outcome == "success" and asking.output is None
    (mark,) = client_side.events.marks(name="mcp.input_required", parent_uuid=asking.uuid)
    assert mark.data == {"requests": {"confirm": "elicitation/create"}}
    assert answering.outcome == "success" and answering.output["content"][0]["text"] == "booked Oslo: accept"


def test_a_tool_call_whose_input_the_user_refuses_ends_its_one_client_tool_scope_failed(
    client_side: ClientSide,
) -> None:
    error = _book(_refuse)
    assert isinstance(error, MCPError) and str(error) == "the user closed the form"
    (end,) = _client_tool_ends(client_side)
    assert end.outcome == "failed" and end.error_type == "MCPError"
