"""Which relay records an MCP request, and what the instrumentation knows about each connection."""

from __future__ import annotations

import weakref
from contextvars import ContextVar
from typing import Any

from relay_runtime import session
from relay_runtime.settings import RECORD, settings

# Set by ``instrument_mcp(relay=...)``: the relay that records requests made or served outside a turn.
_fallback: list[Any] = [None]
# dispatcher -> what the client that built it was connected to, and its session (for the protocol version).
_peers: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_sessions: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()
# dispatcher -> the HTTP transport under it, whose session id (the handshake protocol's) can change.
_transports: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()
# While a client connects: the HTTP transports made meanwhile (they are made inside the SDK's
# connect, with no handle back to them).
building: ContextVar[list[Any] | None] = ContextVar("relay_mcp_building", default=None)


def set_fallback(relay: Any) -> None:
    _fallback[0] = relay


def relay_for_request() -> Any:
    """The relay that records an MCP request made or served now, or None (it goes through untraced).

    Inside a managed turn, the turn's; outside one, the relay ``instrument_mcp(relay=...)`` was
    given, else the default host's, as for LLM calls with no turn open (``configure(outside_turns=)``):
    so a server records its requests, and a tool handler's own LLM calls nest under its scope.
    """
    turn = session.managed_turn()
    if turn is not None:
        return turn.relay
    if _fallback[0] is not None:
        return _fallback[0]
    if settings.outside_turns is not RECORD:
        return None
    active = session.active_turn()
    try:
        host = active.host if active is not None else session.SESSION_COORDINATOR.default_host()
    except ValueError:  # RELAY_HOME cannot be resolved: the request must still go
        return None
    return host.relay if host.managed_execution_enabled() else None


def note_peer(dispatcher: Any, attributes: dict[str, Any]) -> None:
    try:
        _peers[dispatcher] = attributes
    except TypeError:
        pass  # a dispatcher that cannot be weakly referenced goes without peer attributes


def peer_of(dispatcher: Any) -> dict[str, Any]:
    try:
        return _peers.get(dispatcher) or {}
    except TypeError:
        return {}


def note_session(dispatcher: Any, client_session: Any) -> None:
    try:
        _sessions[dispatcher] = weakref.ref(client_session)
    except TypeError:
        pass


def protocol_version_of(dispatcher: Any) -> str | None:
    try:
        ref = _sessions.get(dispatcher)
    except TypeError:
        return None
    client_session = ref() if ref is not None else None
    version = getattr(client_session, "protocol_version", None) if client_session is not None else None
    return version if isinstance(version, str) else None


def note_transport(dispatcher: Any, transport: Any) -> None:
    try:
        _transports[dispatcher] = weakref.ref(transport)
    except TypeError:
        pass


def transport_attributes(dispatcher: Any) -> dict[str, Any]:
    """``mcp.session.id`` (where the protocol has sessions) and the server's address, from the HTTP
    transport a dispatcher runs over."""
    try:
        ref = _transports.get(dispatcher)
    except TypeError:
        return {}
    transport = ref() if ref is not None else None
    if transport is None:
        return {}
    from . import conventions

    out = conventions.peer_attributes(getattr(transport, "url", None))
    session_id = getattr(transport, "session_id", None)
    if isinstance(session_id, str) and session_id:
        out["mcp.session.id"] = session_id[:256]
    return out
