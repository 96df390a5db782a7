"""``create_tool_node``: a LangGraph ``ToolNode`` whose tool calls are managed tool calls.

Each call goes through ``relay.tools`` (tool request and execution intercepts, guardrails) exactly
as ``RelayMiddleware``'s do: a refused call never runs and the model gets a ``ToolMessage`` with
``status="error"`` carrying the reason. A ``wrap_tool_call`` / ``awrap_tool_call`` of the caller's
runs inside the managed call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langgraph.prebuilt import ToolNode

from ..langchain.tools import arun_tool, run_tool


def create_tool_node(
    tools: Sequence[Any],
    *,
    wrap_tool_call: Callable[[Any, Callable[[Any], Any]], Any] | None = None,
    awrap_tool_call: Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]] | None = None,
    **options: Any,
) -> ToolNode:
    """``ToolNode(tools, **options)`` with every tool call managed."""

    def managed(request: Any, execute: Callable[[Any], Any]) -> Any:
        if wrap_tool_call is None:
            return run_tool(request, execute)
        return run_tool(request, lambda r: wrap_tool_call(r, execute))

    async def amanaged(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        if awrap_tool_call is None:
            return await arun_tool(request, execute)
        return await arun_tool(request, lambda r: awrap_tool_call(r, execute))

    return ToolNode(tools, wrap_tool_call=managed, awrap_tool_call=amanaged, **options)
