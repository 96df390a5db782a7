"""``instrument_mcp()`` / ``uninstrument_mcp()``: wrapping the official ``mcp`` SDK (2.x), idempotent and undoable.

What is wrapped, each saved and put back by ``uninstrument_mcp``:

- ``ClientSession.send_request``: every request a client sends, with the SDK's check of its result;
- ``Client.call_tool`` / ``Client._drive_input_required``: a ``Client``'s tool call is one tool scope
  across the rounds a server asking for input makes of it (``calls``);
- ``JSONRPCDispatcher.send_raw_request`` / ``.notify`` and ``DirectDispatcher``'s: what those
  requests carry, and every request or notification sent otherwise (a server calling back);
- the span and trace-context hooks ``jsonrpc_dispatcher`` imported from the SDK's ``_otel``: while a
  request of ours is being sent, the SDK makes no span and injects our context, not its own;
- ``OpenTelemetryMiddleware.__call__``: on every server, our server scope instead of its span;
- ``ClientSession.__init__`` and ``Client._build_session``: which session (protocol version) and
  which server (transport, address) a dispatcher belongs to; ``ClientSession.__aenter__`` /
  ``__aexit__``: how long the session was open (``mcp.client.session.duration``); a server's
  ``Connection.for_loop``: how long a handshake-era session was open (``mcp.server.session.duration``).

A part the installed SDK does not have (a renamed method) is skipped with one warning naming it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from . import calls, client, routing, server, sessions

logger = logging.getLogger("relay_runtime.integrations.mcp")

_lock = threading.Lock()
# (owner, attribute, original) for everything replaced, in the order it was replaced.
_saved: list[tuple[Any, str, Any]] = []


def _require_mcp() -> Any:
    try:
        import mcp
        import mcp.shared.jsonrpc_dispatcher
    except ImportError as exc:
        raise ImportError(
            "relay_runtime.integrations.mcp needs the official MCP SDK: pip install 'relay-runtime[mcp]'"
        ) from exc
    return mcp


_ABSENT: Any = object()


def _replace(owner: Any, attribute: str, make: Callable[[Any], Any]) -> bool:
    original = getattr(owner, attribute, None)
    if original is None:
        name = getattr(owner, "__name__", owner)
        logger.warning("mcp: %s.%s not found in this SDK version; not traced", name, attribute)
        return False
    # What the owner itself held (a classmethod stays a classmethod; an inherited one is deleted again).
    _saved.append((owner, attribute, vars(owner).get(attribute, _ABSENT)))
    setattr(owner, attribute, make(original))
    return True


def _wrap_send(injects: bool) -> Callable[[Any], Any]:
    def wrap(original: Any) -> Any:
        return functools.wraps(original)(client.dispatcher_send(original, injects=injects))

    return wrap


def _wrap_session_send(original: Any) -> Any:
    return functools.wraps(original)(client.session_send(original))


def _wrap_client_call_tool(result_type: Any) -> Callable[[Any], Any]:
    def wrap(original: Any) -> Any:
        return functools.wraps(original)(calls.call_tool(original, result_type))

    return wrap


def _wrap_drive(input_required: type) -> Callable[[Any], Any]:
    def wrap(original: Any) -> Any:
        return functools.wraps(original)(calls.drive_input_required(original, input_required))

    return wrap


def _wrap_notify(original: Any) -> Any:
    return functools.wraps(original)(client.notify(original))


def _wrap_middleware(original: Any) -> Any:
    return functools.wraps(original)(server.middleware(original))


def _wrap_session_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        dispatcher = getattr(self, "_dispatcher", None)
        if dispatcher is not None:
            routing.note_session(dispatcher, self)

    return __init__


def _wrap_session_enter(original: Any) -> Any:
    @functools.wraps(original)
    async def __aenter__(self: Any) -> Any:
        entered = await original(self)
        sessions.opened(self)
        return entered

    return __aenter__


def _wrap_session_exit(original: Any) -> Any:
    @functools.wraps(original)
    async def __aexit__(self: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return await original(self, exc_type, exc, tb)
        finally:
            sessions.closed(self, exc)

    return __aexit__


def _wrap_build_session(original: Any) -> Any:
    @functools.wraps(original)
    async def _build_session(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Read before connecting: entering a transport the caller built drops the arguments it was made with.
        peer = client.peer_attributes_of(self)
        made: list[Any] = []
        token = routing.building.set(made)
        try:
            built = await original(self, *args, **kwargs)
        finally:
            routing.building.reset(token)
        dispatcher = getattr(built, "_dispatcher", None)
        if dispatcher is not None:
            routing.note_peer(dispatcher, peer)
            if made:
                routing.note_transport(dispatcher, made[-1])
        return built

    return _build_session


def _wrap_for_loop(original: Any) -> Any:
    # ``Connection.for_loop``: a handshake-era server session, which its exit stack closes.
    @functools.wraps(original)
    def for_loop(cls: Any, *args: Any, **kwargs: Any) -> Any:
        connection = original.__func__(cls, *args, **kwargs)
        sessions.server_opened(connection)
        return connection

    return classmethod(for_loop)


def _wrap_transport_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made = routing.building.get()
        if made is not None:
            made.append(self)

    return __init__


def instrument_mcp(*, relay: Any = None) -> None:
    """Trace the MCP SDK's clients and servers. A second call only updates ``relay``.

    Inside a managed turn, the turn's relay records a request. Outside one (a server's requests,
    most often) ``relay`` does, or by default the default host that records LLM calls made with
    no turn open, whenever something is attached to it (``SESSION_COORDINATOR``).
    """
    install(relay, client_side=True, server_side=True)


def install(relay: Any, *, client_side: bool, server_side: bool) -> None:
    """``instrument_mcp`` for one side only (the benchmark weighs each side on its own)."""
    _require_mcp()
    from mcp.client.client import Client
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import StreamableHTTPTransport
    from mcp.server._otel import OpenTelemetryMiddleware
    from mcp.server.connection import Connection
    from mcp.shared import jsonrpc_dispatcher
    from mcp.shared.direct_dispatcher import DirectDispatcher
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
    from mcp_types import CallToolResult, InputRequiredResult

    with _lock:
        routing.set_fallback(relay)
        if _saved:
            return
        if client_side:
            _replace(jsonrpc_dispatcher, "otel_span", client.swapped_span)
            # The JSON-RPC dispatcher writes ``_meta`` through the SDK's inject hook, once it is ours; the
            # in-process one has no hook, so our wrapper writes it.
            injects = _replace(jsonrpc_dispatcher, "inject_trace_context", client.swapped_inject)
            _replace(JSONRPCDispatcher, "send_raw_request", _wrap_send(injects=injects))
            _replace(DirectDispatcher, "send_raw_request", _wrap_send(injects=False))
            for dispatcher in (JSONRPCDispatcher, DirectDispatcher):
                _replace(dispatcher, "notify", _wrap_notify)
        if server_side:
            _replace(OpenTelemetryMiddleware, "__call__", _wrap_middleware)
            _replace(Connection, "for_loop", _wrap_for_loop)
        if client_side:
            _replace(ClientSession, "__init__", _wrap_session_init)
            _replace(ClientSession, "send_request", _wrap_session_send)
            _replace(ClientSession, "__aenter__", _wrap_session_enter)
            _replace(ClientSession, "__aexit__", _wrap_session_exit)
            _replace(Client, "_build_session", _wrap_build_session)
            _replace(Client, "call_tool", _wrap_client_call_tool(CallToolResult))
            _replace(Client, "_drive_input_required", _wrap_drive(InputRequiredResult))
            _replace(StreamableHTTPTransport, "__init__", _wrap_transport_init)


def uninstrument_mcp() -> None:
    """Put back everything ``instrument_mcp`` replaced; the SDK's own tracing works as before."""
    with _lock:
        while _saved:
            owner, attribute, original = _saved.pop()
            if original is _ABSENT:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)
        routing.set_fallback(None)


def is_instrumented() -> bool:
    return bool(_saved)
