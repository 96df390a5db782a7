"""MCP tool calls traced end to end: the official ``mcp`` SDK (2.x), client and server.

``instrument_mcp()`` makes every request an MCP client sends a scope of the relay recording the
current turn (``tools/call`` a TOOL scope that the relay's tool intercepts can rewrite or refuse),
carries that scope's trace context in ``params._meta``, and makes every request an instrumented
server handles a scope under that remote parent, so both sides share one trace. The SDK's own
spans are replaced, never doubled; ``uninstrument_mcp()`` restores them. Needs the extra ``mcp``.
"""

from .instrument import instrument_mcp, is_instrumented, uninstrument_mcp

__all__ = ["instrument_mcp", "is_instrumented", "uninstrument_mcp"]
