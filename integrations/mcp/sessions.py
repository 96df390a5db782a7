"""``mcp.client.session.duration`` / ``mcp.server.session.duration``: how long a session was open.

A session is no scope of ours (the conventions give it no span), so its length goes to the
relay that records its requests as a ``relay.metric`` mark when it closes. A server's session is
a handshake-era connection (the 2026-07-28 protocol has none); it closes with its exit stack.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime.scopes import outcome_of

from . import conventions as mc
from . import routing

# session -> (its relay, when it opened)
_open: weakref.WeakKeyDictionary[Any, tuple[Any, float]] = weakref.WeakKeyDictionary()


def opened(client_session: Any) -> None:
    relay = routing.relay_for_request()
    if relay is not None:
        try:
            _open[client_session] = (relay, time.monotonic())
        except TypeError:
            pass


def closed(client_session: Any, error: BaseException | None) -> None:
    try:
        entry = _open.pop(client_session, None)
    except TypeError:
        return
    if entry is None:
        return
    relay, started = entry
    dispatcher = getattr(client_session, "_dispatcher", None)
    attributes: dict[str, Any] = dict(routing.peer_of(dispatcher)) if dispatcher is not None else {}
    version = routing.protocol_version_of(dispatcher) if dispatcher is not None else None
    if version:
        attributes["mcp.protocol.version"] = version
    if error is not None and outcome_of(error) == "failed":  # a cancelled session ended on purpose
        attributes["error.type"] = type(error).__qualname__
    data = {"name": mc.CLIENT_SESSION_DURATION, "seconds": time.monotonic() - started, "attributes": attributes}
    relay.scope.mark(cv.METRIC, data)


def server_opened(connection: Any) -> None:
    relay = routing.relay_for_request()
    stack = getattr(connection, "exit_stack", None)
    if relay is None or stack is None:
        return
    started = time.monotonic()

    def closed() -> None:
        attributes: dict[str, Any] = {}
        version = getattr(connection, "protocol_version", None)
        if isinstance(version, str):
            attributes["mcp.protocol.version"] = version
        if getattr(connection, "session_id", None):
            attributes["network.transport"] = "tcp"
        data = {"name": mc.SERVER_SESSION_DURATION, "seconds": time.monotonic() - started, "attributes": attributes}
        relay.scope.mark(cv.METRIC, data)

    stack.callback(closed)
