"""The OpenAI Agents SDK (``openai-agents``; extra ``agents``): agent runs as relay scopes, tools managed.

    from relay_runtime.integrations import openai_agents
    openai_agents.instrument()     # a trace processor beside the SDK's own, and function tools managed
    openai_agents.uninstrument()   # undoes both; leaves relay_runtime.adapters.instrument() alone

Agent runs, function tools, handoffs, guardrails and MCP listings become scopes of the current turn
(see ``processor``); the model calls inside are the attempts ``adapters.instrument()`` makes, or are
recorded from the SDK's response / generation spans when it is off. Function tools are managed tool
calls, so relay tool intercepts and guardrails reach them (see ``tools``); a call the SDK's own tool
input guardrail refused is a failed tool scope too (see ``tool_spans``: its hook is not undone by
``uninstrument()``, and does nothing for calls no processor follows). A tool of an MCP server the agent
uses is a function tool too: with ``instrument_mcp()`` on, its ``tools/call`` request annotates the
tool's scope rather than opening a second one (also under a server-prefixed name: ``relay.mcp_tool``).

The SDK calls processors only while its tracing is on: ``agents.set_tracing_disabled(True)`` (or
``OPENAI_AGENTS_DISABLE_TRACING``) silences this integration too. To keep the SDK's own export off
instead, ``agents.set_trace_processors([])`` before ``instrument()`` (setting the SDK's processors after
it drops the relay's too: call ``instrument()`` again after ``uninstrument()``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..extras import require

if TYPE_CHECKING:
    from .processor import RelayTraceProcessor

__all__ = ["instrument", "is_instrumented", "uninstrument"]

_lock = threading.Lock()
_processor: RelayTraceProcessor | None = None  # the SDK has no public way to remove one: uninstrument() silences it
_state: Any = None  # (ToolWrapping, the original Agent.get_all_tools) while instrumented


def instrument() -> RelayTraceProcessor:
    """Register the relay's trace processor (once) and manage function tools; idempotent."""
    global _processor, _state
    agents = require("agents", "agents", "openai_agents")
    from .processor import RelayTraceProcessor
    from .tools import ToolWrapping

    with _lock:
        if _state is None:
            _processor = RelayTraceProcessor()
            agents.add_trace_processor(_processor)
            wrapping = ToolWrapping()
            # Patched where it is defined (a base class of Agent), so subclasses calling super() pass through it.
            owner = next(c for c in agents.Agent.__mro__ if "get_all_tools" in c.__dict__)
            original = owner.__dict__["get_all_tools"]

            async def get_all_tools(self: Any, run_context: Any) -> Any:
                tools = await original(self, run_context)
                for tool in tools:
                    if isinstance(tool, agents.FunctionTool):
                        wrapping.wrap(tool)
                return tools

            get_all_tools.__wrapped__ = original  # type: ignore[attr-defined]
            owner.get_all_tools = get_all_tools
            _processor.wrapped_tools = wrapping.names
            _state = (wrapping, owner, original)
        assert _processor is not None
        return _processor


def uninstrument() -> None:
    """Undo ``instrument()``: the processor goes quiet, the tools and ``Agent.get_all_tools`` are restored."""
    global _state
    with _lock:
        if _state is None:
            return
        wrapping, owner, original = _state
        owner.get_all_tools = original
        wrapping.restore()
        if _processor is not None:
            _processor.live = False
        _state = None


def is_instrumented() -> bool:
    return _state is not None
