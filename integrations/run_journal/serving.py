"""Listening for the journal server so that slow or hoarding clients cannot starve it.

Two bounds, both below what one request handler sees:

- a connection must finish its request's head within ``header_timeout`` seconds (from when it
  connects, or from the end of its previous response), else it is closed: a client that trickles
  its headers a byte at a time (slowloris) holds its socket for seconds, not for ever. This is the
  server's keep-alive timer (``create_app(header_timeout=...)``), which only ever closes a connection
  still waiting for a request, never one whose handler is running (an SSE stream);
- one client address holds at most ``max_connections_per_client`` connections at once: the next one
  is answered 503 and closed at once, so one address cannot use up the process's file descriptors
  and leave nothing to accept everyone else with (``GuardedSite``).

Behind a reverse proxy every client shares the proxy's address: raise the cap there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 96
_REFUSAL_BODY = b'{"error": "too many connections from this address"}'
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)


class ConnectionsPerClient:
    """Open connections per client address (loop thread only); ``refused`` counts those turned away."""

    def __init__(self, limit: int) -> None:
        if type(limit) is not int or limit < 1:
            raise ValueError(f"max_connections_per_client must be a positive integer, got {limit!r}")
        self.limit = limit
        self.refused = 0
        self._open: dict[str, int] = {}

    def take(self, address: str) -> bool:
        held = self._open.get(address, 0)
        if held >= self.limit:
            self.refused += 1
            return False
        self._open[address] = held + 1
        return True

    def release(self, address: str) -> None:
        held = self._open.get(address, 0) - 1
        if held > 0:
            self._open[address] = held
        else:
            self._open.pop(address, None)

    def held(self, address: str) -> int:
        return self._open.get(address, 0)


class _Counted(asyncio.Protocol):
    """The server's protocol for one connection, behind the per-address count: a refused connection
    never reaches it; an admitted one is released when it closes."""

    __slots__ = ("_address", "_inner", "_table")

    def __init__(self, inner: Any, table: ConnectionsPerClient) -> None:
        self._inner = inner
        self._table = table
        self._address: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self._table.take(address):
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(_REFUSAL)
            transport.close()
            return
        self._address = address
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._address is None:
            return
        self._table.release(self._address)
        self._address = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._address is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._address is None:
            return None
        result: bool | None = self._inner.eof_received()
        return result

    def pause_writing(self) -> None:
        if self._address is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._address is not None:
            self._inner.resume_writing()


def counted(factory: Callable[[], Any], table: ConnectionsPerClient) -> Callable[[], asyncio.Protocol]:
    """``factory`` (an aiohttp server) with each connection counted against its client's address."""
    return lambda: _Counted(factory(), table)


class GuardedSite(web.BaseSite):
    """A TCP site (like ``web.TCPSite``) whose connections are capped per client address."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int,
        *,
        max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self.connections = ConnectionsPerClient(max_connections_per_client)
        self._where = (host, port)

    @property
    def name(self) -> str:
        host, port = self._where
        return f"http://{host or '0.0.0.0'}:{port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None, "the runner is set up before its sites start"
        host, port = self._where
        self._server = await asyncio.get_running_loop().create_server(
            counted(server, self.connections), host, port, backlog=self._backlog, reuse_address=True
        )
