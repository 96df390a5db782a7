"""LangGraph (``langgraph`` 1.x; extra ``langgraph``): graph runs as relay scopes, tool nodes managed.

    from relay_runtime.integrations.langgraph import configure_graph, create_tool_node

- ``configure_graph(graph)``: graph and node runs as scopes, interrupts and resumes as marks.
- ``create_tool_node(tools, ...)``: a ``ToolNode`` whose tool calls are managed (intercepts apply).

A graph resumed from a checkpoint, in this process or another, continues under the same conversation
and turn ids when the caller acquires the conversation with the same ``session_id`` and begins the
turn with the same ``turn_id``: the ids are the caller's, and nothing of the run is kept in the graph.

Imported lazily: using a name without LangGraph installed raises an ImportError naming the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..extras import require

if TYPE_CHECKING:
    from .graph import RelayGraphCallbackHandler, configure_graph
    from .tool_node import create_tool_node

__all__ = ["RelayGraphCallbackHandler", "configure_graph", "create_tool_node"]

_WHERE = {"RelayGraphCallbackHandler": "graph", "configure_graph": "graph", "create_tool_node": "tool_node"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require("langgraph", "langgraph", "langgraph")
    return getattr(require(f"{__name__}.{module}", "langgraph", "langgraph"), name)
