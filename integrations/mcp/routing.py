"""Which relay records an MCP request, and what the instrumentation knows about each connection."""

from __future__ import annotations

import weakref
from contextvars import ContextVar
from typing import Any

from relay_runtime import session
from relay_runtime.clipping import printable
from relay_runtime.settings import RECORD, settings

from . import conventions as mc

# Set by ``instrument_mcp(relay=...)``: the relay that records requests made or served outside a turn.
_fallback: list[Any] = [None]
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


class Link:
    """What the instrumentation knows of one dispatcher's connection, kept on the dispatcher itself
    (one attribute read per request instead of weak-dictionary lookups).

    The attributes every request over it carries (protocol version, transport, server address,
    ``mcp.session.id``) are built once and rebuilt only when the negotiated version or the HTTP
    session id changes (a handshake that completes; a reconnect); the hints of a method and target
    are cached per connection for as long as those hold.
    """

    __slots__ = ("_hints", "_key", "peer", "session", "shared", "transport")

    def __init__(self) -> None:
        self.peer: dict[str, Any] = {}
        self.session: weakref.ref[Any] | None = None
        self.transport: weakref.ref[Any] | None = None
        self._key: tuple[Any, Any] | None = None
        self.shared: dict[str, Any] = {}
        self._hints: dict[tuple[str, str | None], dict[str, Any]] = {}

    def protocol_version(self) -> str | None:
        client_session = self.session() if self.session is not None else None
        version = getattr(client_session, "protocol_version", None) if client_session is not None else None
        return version if isinstance(version, str) else None

    def transport_attributes(self) -> dict[str, Any]:
        transport = self.transport() if self.transport is not None else None
        if transport is None:
            return {}
        out = mc.peer_attributes(getattr(transport, "url", None))
        session_id = getattr(transport, "session_id", None)
        if isinstance(session_id, str) and session_id:
            out["mcp.session.id"] = printable(session_id[:256])
        return out

    def hints(self, method: str, target: str | None) -> dict[str, Any]:
        """A request's span hints on the client side; shared by the requests that have them the same."""
        client_session = self.session() if self.session is not None else None
        transport = self.transport() if self.transport is not None else None
        key = (
            getattr(client_session, "protocol_version", None),
            getattr(transport, "session_id", None),
        )
        if key != self._key:
            shared = dict(self.peer)
            shared.update(self.transport_attributes())
            self.shared = shared
            self._hints = {}
            self._key = key
        found = self._hints.get((method, target))
        if found is not None:
            return found
        attributes = mc.request_attributes(method, target, self.protocol_version())
        attributes.update(self.shared)
        made = mc.hints(method, target, "client", attributes)
        if len(self._hints) < _MAX_CACHED_HINTS:  # targets are caller data: past this, made afresh each time
            self._hints[(method, target)] = made
        return made


LINK = "_relay_mcp_link"
_MAX_CACHED_HINTS = 64
_links: weakref.WeakKeyDictionary[Any, Link] = weakref.WeakKeyDictionary()


def link_of(dispatcher: Any) -> Link | None:
    """The dispatcher's ``Link``, or None when nothing was noted about it."""
    link = getattr(dispatcher, LINK, None)
    if type(link) is Link:
        return link
    try:
        return _links.get(dispatcher)
    except TypeError:
        return None


def _link_for(dispatcher: Any) -> Link | None:
    link = link_of(dispatcher)
    if link is not None:
        return link
    link = Link()
    try:
        setattr(dispatcher, LINK, link)
    except (AttributeError, TypeError):
        try:
            _links[dispatcher] = link  # no room for attributes of ours: a weak side table
        except TypeError:
            return None  # neither: it goes without what the instrumentation knows of its connection
    return link


def note_peer(dispatcher: Any, attributes: dict[str, Any]) -> None:
    link = _link_for(dispatcher)
    if link is not None:
        link.peer = attributes
        link._key = None


def peer_of(dispatcher: Any) -> dict[str, Any]:
    link = link_of(dispatcher)
    return link.peer if link is not None else {}


def note_session(dispatcher: Any, client_session: Any) -> None:
    link = _link_for(dispatcher)
    if link is not None:
        link.session = weakref.ref(client_session)
        link._key = None


def protocol_version_of(dispatcher: Any) -> str | None:
    link = link_of(dispatcher)
    return link.protocol_version() if link is not None else None


def note_transport(dispatcher: Any, transport: Any) -> None:
    link = _link_for(dispatcher)
    if link is not None:
        link.transport = weakref.ref(transport)
        link._key = None


def transport_attributes(dispatcher: Any) -> dict[str, Any]:
    """``mcp.session.id`` (where the protocol has sessions) and the server's address, from the HTTP
    transport a dispatcher runs over."""
    link = link_of(dispatcher)
    return link.transport_attributes() if link is not None else {}


def hints_for(dispatcher: Any, method: str, target: str | None) -> dict[str, Any]:
    """The client-side span hints of a request over ``dispatcher``."""
    link = getattr(dispatcher, LINK, None)  # ``link_of``'s usual case, one call less per request
    if type(link) is not Link:
        link = link_of(dispatcher)
    if link is not None:
        return link.hints(method, target)
    return mc.hints(method, target, "client", mc.request_attributes(method, target, None))
