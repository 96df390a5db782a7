"""One consumer wired to a ``Relay``, a session host, or the session coordinator in one call.

Consumers (the OTel exporter, the run journal) share this so that "attach" means
the same everywhere:

- a ``Relay``: the consumer is connected to it; nothing else changes;
- a session ``Host``: connected to its relay, and the host's managed execution is
  retained under the consumer's name (without it, calls in turns run unmanaged and
  the consumer would see nothing);
- ``SESSION_COORDINATOR``: the same for every host it has now and every host it
  creates later.

``Attachment.detach()`` undoes exactly what was done, once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .relay import Relay
from .session import Host, SessionCoordinator

Connect = Callable[[Relay], None]


class Attachment:
    """What one ``attach`` connected: relays, hosts retained, and a coordinator watch to drop."""

    def __init__(self, target: Any, name: str, connect: Connect, disconnect: Connect) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"an attachment needs a non-empty name, got {name!r}")
        self.name = name
        self.target = target
        self._connect = connect
        self._disconnect = disconnect
        self._lock = threading.Lock()
        self._relays: list[Relay] = []
        self._hosts: list[Host] = []
        self._coordinator: SessionCoordinator | None = None
        self._detached = False
        if isinstance(target, Relay):
            self._add_relay(target)
        elif isinstance(target, Host):
            self._add_host(target)
        elif isinstance(target, SessionCoordinator):
            self._coordinator = target
            target.watch_hosts(self._add_host)  # existing hosts now, later ones as they are made
        else:
            raise TypeError(
                f"attach() takes a Relay, a session Host or the SESSION_COORDINATOR, got {type(target).__name__}"
            )

    @property
    def relays(self) -> list[Relay]:
        with self._lock:
            return list(self._relays)

    def _add_relay(self, relay: Relay) -> None:
        self._connect(relay)
        with self._lock:
            self._relays.append(relay)

    def _add_host(self, host: Host) -> None:
        with self._lock:
            if self._detached or host in self._hosts:
                return
        self._connect(host.relay)
        host.retain_managed_execution(self.name)
        with self._lock:
            late = self._detached  # detach() ran meanwhile: it cannot see this host, so undo it here
            if not late:
                self._relays.append(host.relay)
                self._hosts.append(host)
        if late:
            self._disconnect(host.relay)
            host.release_managed_execution(self.name)

    def detach(self) -> None:
        """Disconnect from every relay, release every host, stop watching the coordinator. Idempotent."""
        with self._lock:
            if self._detached:
                return
            self._detached = True
            relays, self._relays = self._relays, []
            hosts, self._hosts = self._hosts, []
        if self._coordinator is not None:
            self._coordinator.unwatch_hosts(self._add_host)
        for relay in relays:
            self._disconnect(relay)
        for host in hosts:
            host.release_managed_execution(self.name)


def subscriber_attachment(
    target: Any,
    subscriber: Callable[[Any], None],
    *,
    name: str,
    chunks: bool = False,
    on_connect: Connect | None = None,
) -> Attachment:
    """An ``Attachment`` that registers ``subscriber`` under ``name`` on each relay it reaches (and
    deregisters it on detach); ``on_connect`` also learns of each relay."""

    def connect(relay: Relay) -> None:
        relay.subscribers.register(subscriber, name=name, chunks=chunks)
        if on_connect is not None:
            on_connect(relay)

    def disconnect(relay: Relay) -> None:
        relay.subscribers.deregister(name)

    return Attachment(target, name, connect, disconnect)


def detach_all(attachments: list[Attachment]) -> None:
    """Detach every attachment in ``attachments`` and empty it (a consumer's ``detach()``)."""
    taken = attachments[:]
    attachments.clear()
    for attachment in taken:
        attachment.detach()
