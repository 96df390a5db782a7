"""Whether an append's script reached Redis's socket before it failed: the difference between "not
written" and "maybe written" when no reply came.

The store's client is built with a connection class from here (``tracked``): it notes, in the
calling context, each time a packed command naming the append script is handed to the socket.
Connecting, the handshake, and any other command note nothing, so a server that refused the
connection (or never finished the handshake) is known to hold nothing of the append.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import redis.connection


class Sending:
    """One append (or batch) in flight: ``sent`` once its script was handed to a socket."""

    __slots__ = ("marker", "sent")

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.sent = False


_CURRENT: contextvars.ContextVar[Sending | None] = contextvars.ContextVar("relay_journal_sending", default=None)


@contextlib.contextmanager
def sending(script_sha: str) -> Iterator[Sending]:
    """Note, for the calls made inside, whether a command naming ``script_sha`` was sent."""
    state = Sending(script_sha.encode())
    token = _CURRENT.set(state)
    try:
        yield state
    finally:
        _CURRENT.reset(token)


def _names_script(command: Any, marker: bytes) -> bool:
    # The command's name and first argument (the sha) are packed into its first chunk.
    first = command if isinstance(command, bytes | bytearray) else (command[0] if command else b"")
    if isinstance(first, str):
        first = first.encode()
    return marker in first[:256]


class _Tracked:
    """Mixed in before a redis-py connection class."""

    _sock: Any

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        state = _CURRENT.get()
        if state is not None and not state.sent and _names_script(command, state.marker):
            if self._sock is None:
                self.connect()  # type: ignore[attr-defined]  # a refused connection has sent nothing
            state.sent = True
        super().send_packed_command(command, check_health)  # type: ignore[misc]


_CLASSES: dict[type[Any], type[Any]] = {}


def tracked(url: str) -> type[Any]:
    """The connection class ``redis.Redis.from_url(url)`` would use, noting sends of the append script."""
    if url.startswith("unix://"):
        base: type[Any] = redis.connection.UnixDomainSocketConnection
    elif url.startswith("rediss://"):
        base = redis.connection.SSLConnection
    else:
        base = redis.connection.Connection
    found = _CLASSES.get(base)
    if found is None:
        found = _CLASSES[base] = type(f"Tracked{base.__name__}", (_Tracked, base), {})
    return found
