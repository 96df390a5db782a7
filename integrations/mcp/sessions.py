"""``mcp.client.session.duration``: how long a client session was open, reported as a metric mark.

A session is no scope of ours (the conventions give it no span), so its length goes to the
relay that recorded its requests as a ``relay.metric`` mark when it closes.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from relay_runtime import conventions as cv

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
    if error is not None:
        attributes["error.type"] = type(error).__qualname__
    data = {"name": mc.CLIENT_SESSION_DURATION, "seconds": time.monotonic() - started, "attributes": attributes}
    relay.scope.mark(cv.METRIC, data)
