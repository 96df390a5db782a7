# ruff: noqa: F811 - the fixtures imported from the other MCP modules are parameters of the tests below
"""A tool execution intercept that sends an MCP tool call more than once (a retry): each request carries the
arguments the tool request intercepts gave it, and the tool's scope says how the last one ended.

A real MCP server in its own process (``tests/mcp_app.py`` over stdio), as in ``test_mcp``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_mcp import (  # noqa: F401 - fixtures
    ClientSide,
    ServerSpans,
    _connect,
    _stdio,
    client_side,
    instrumented,
    sdk_spans,
)

SENT: list[Any] = []


@pytest.fixture
def retrying(client_side: ClientSide) -> Iterator[list[Any]]:
    """A tool request intercept multiplying ``a`` by ten, and an execution intercept sending each call a second
    time, whatever the first answered (or raised); yields the first answers."""
    intercepts = client_side.relay.intercepts
    first: list[Any] = []

    async def twice(name: str, args: Any, next_: Any) -> Any:
        try:
            first.append(await next_(args))
        except Exception as exc:
            first.append(exc)
        return await next_({**args, "b": 3})

    intercepts.register_tool_request("times-ten", 10, False, lambda tool, args: {**args, "a": args["a"] * 10})
    intercepts.register_tool_execution("twice", 10, twice)
    try:
        yield first
    finally:
        intercepts.deregister_tool_request("times-ten")
        intercepts.deregister_tool_execution("twice")


def _call(spans: ServerSpans, arguments: dict[str, Any], through: str) -> Any:
    async def run() -> Any:
        async with _connect(_stdio(spans.path), "auto") as client:
            if through == "session":  # as frameworks call a server (the Agents SDK, LangChain's MCP adapters)
                return await client.session.call_tool("add", arguments)
            return await client.call_tool("add", arguments)

    return asyncio.run(run())


@pytest.mark.parametrize("through", ["session", "client"])
def test_a_retried_tool_call_sends_the_intercepts_arguments_each_time(
    client_side: ClientSide, retrying: list[Any], tmp_path: Path, through: str
) -> None:
    second = _call(ServerSpans(tmp_path / "spans.jsonl"), {"a": 2, "b": 3}, through)
    (first,) = retrying
    assert first.structured_content == {"result": 23}
    assert second.structured_content == {"result": 23}  # not the caller's own 2 + 3
    (end,) = client_side.tool_ends("add")
    assert end.outcome == "success"


@pytest.mark.parametrize("through", ["session", "client"])
def test_a_tool_call_retried_after_a_failed_send_records_the_last_sends_end(
    client_side: ClientSide, retrying: list[Any], tmp_path: Path, through: str
) -> None:
    second = _call(ServerSpans(tmp_path / "spans.jsonl"), {"a": 2, "b": "not a number"}, through)
    (first,) = retrying
    assert isinstance(first, Exception) or first.is_error  # the server refused the first send's arguments
    assert second.structured_content == {"result": 23}
    (end,) = client_side.tool_ends("add")
    assert (end.outcome, end.error_type) == ("success", None)
    attributes = dict(client_side.span("tools/call add").attributes or {})
    assert "error.type" not in attributes and client_side.span("tools/call add").status.status_code.name != "ERROR"
