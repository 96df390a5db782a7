"""A profile's host (its ``Relay`` and who wants its calls managed), and what holds logical calls open.

Re-exported by ``relay_runtime.session``, where they are used (and named) with the conversations and turns.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from .redaction_install import RelayRedaction
from .relay import Relay
from .scopes import ScopeHandle

if TYPE_CHECKING:
    from .session import LogicalCall


class Host:
    """One profile's relay, and who currently wants its calls managed."""

    def __init__(self, profile_key: str) -> None:
        self.profile_key = profile_key
        self.relay = Relay(name=profile_key)
        self._lock = threading.Lock()
        self._consumers: dict[str, int] = {}
        # Managed turns open on this host now: a call made outside all of them, while some
        # are open, is most likely in a thread or task nobody handed the turn to.
        self.open_turns = 0
        # The logical calls this host records outside any turn (``settings.outside_turns``).
        self.outside = OutsideTurns(self)

    def retain_managed_execution(self, consumer: str) -> None:
        if not isinstance(consumer, str) or not consumer:
            raise ValueError(f"consumer must be a non-empty string, got {consumer!r}")
        with self._lock:
            self._consumers[consumer] = self._consumers.get(consumer, 0) + 1

    def release_managed_execution(self, consumer: str) -> bool:
        """Undo one ``retain``; False if ``consumer`` held none."""
        with self._lock:
            held = self._consumers.get(consumer, 0)
            if not held:
                return False
            if held == 1:
                del self._consumers[consumer]
            else:
                self._consumers[consumer] = held - 1
            return True

    def managed_execution_enabled(self) -> bool:
        return bool(self._consumers)

    @property
    def redaction(self) -> RelayRedaction:
        """The redaction policy of this host's relay: ``host.redaction.use(policy)``."""
        return self.relay.redaction

    def consumers(self) -> list[str]:
        with self._lock:
            return sorted(self._consumers)

    def __repr__(self) -> str:
        return f"<Host {self.profile_key!r} consumers={self.consumers()}>"


class CallHolder(Protocol):
    """What holds logical calls while they are open: a managed turn, or a host's calls outside turns."""

    lock: threading.RLock
    logical_llm_calls: dict[str, LogicalCall]
    host: Host
    relay: Relay
    # The scope logical calls open under; None: they are roots (no conversation, no turn above them).
    scope: ScopeHandle | None


class OutsideTurns:
    """A host's logical calls made with no managed turn open: each closes when its attempt ends."""

    __slots__ = ("host", "lock", "logical_llm_calls", "relay", "scope")

    def __init__(self, host: Host) -> None:
        self.host = host
        self.relay = host.relay
        self.lock = threading.RLock()
        self.logical_llm_calls: dict[str, LogicalCall] = {}
        self.scope: ScopeHandle | None = None
