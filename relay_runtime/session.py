"""The session coordinator: hosts per profile, leased conversations, turns.

A *host* owns the ``Relay`` of one profile. A *lease* holds a conversation
(one AGENT scope per ``(profile_key, session_id)``, shared by every lease of
it). A *turn* is one FUNCTION scope under it, during which LLM calls are
managed, provided some consumer (an exporter, the journal) has asked for
managed execution on that host.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import conventions as cv
from .relay import Relay
from .scopes import ScopeHandle, ScopeOrderError
from .types import Outcome, ScopeType

logger = logging.getLogger("relay_runtime.session")

HOME_ENV = "RELAY_HOME"
DEFAULT_HOME = "~/.relay-runtime"
_OUTCOMES = frozenset(o.value for o in Outcome)


def current_profile_key() -> str:
    """The profile this process runs as: the resolved ``RELAY_HOME`` (default ``~/.relay-runtime``)."""
    return str(Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser().resolve())


def profile_id(profile_key: str) -> str:
    """A short, stable id of a profile: what leaves the process instead of its home directory's path."""
    return hashlib.sha256(profile_key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _check_outcome(outcome: str) -> str:
    value = outcome.value if isinstance(outcome, Outcome) else outcome
    if value not in _OUTCOMES:
        raise ValueError(f"outcome must be one of {sorted(_OUTCOMES)}, got {outcome!r}")
    return value


class Host:
    """One profile's relay, and who currently wants its calls managed."""

    def __init__(self, profile_key: str) -> None:
        self.profile_key = profile_key
        self.relay = Relay(name=profile_key)
        self._lock = threading.Lock()
        self._consumers: dict[str, int] = {}

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

    def consumers(self) -> list[str]:
        with self._lock:
            return sorted(self._consumers)

    def __repr__(self) -> str:
        return f"<Host {self.profile_key!r} consumers={self.consumers()}>"


@dataclass(eq=False)
class _Conversation:
    key: tuple[str, str]
    scope: ScopeHandle
    leases: int = 0
    managed_turn: Turn | None = None


@dataclass(eq=False)
class ConversationLease:
    host: Host
    profile_key: str
    session_id: str
    platform: str
    parent_session_id: str
    model: str
    _conversation: _Conversation = field(repr=False)
    released: bool = False

    @property
    def conversation(self) -> ScopeHandle:
        return self._conversation.scope


@dataclass(eq=False, slots=True)
class LogicalCall:
    """One logical LLM call: every attempt (retry, fallback) with the same ``api_request_id``."""

    api_request_id: str
    call_role: str
    scope: ScopeHandle
    attempts: int = 0
    in_flight: int = 0
    open_streams: int = 0
    last_outcome: str | None = None
    model: str | None = None
    provider: str | None = None


@dataclass(eq=False)
class Turn:
    lease: ConversationLease
    turn_id: str
    task_id: str
    scope: ScopeHandle | None
    logical_llm_calls: dict[str, LogicalCall] = field(default_factory=dict)
    outcome: str | None = None
    ended: bool = False
    previous: Turn | None = field(default=None, repr=False)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    # The lease's host and relay, fixed for the turn's life: read on every managed call.
    host: Host = field(init=False, repr=False)
    relay: Relay = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.host = self.lease.host
        self.relay = self.host.relay

    @property
    def managed(self) -> bool:
        """False for a second turn opened while another is running on the same conversation."""
        return self.scope is not None


_active_turn: ContextVar[Turn | None] = ContextVar("relay_active_turn", default=None)


def active_turn() -> Turn | None:
    turn = _active_turn.get()
    while turn is not None and turn.ended:
        turn = turn.previous
    return turn


def managed_turn() -> Turn | None:
    """The active turn if LLM calls made now are managed in it: it owns its conversation's
    turn scope and some consumer retains managed execution on its host."""
    turn = _active_turn.get()
    while turn is not None and turn.ended:
        turn = turn.previous
    if turn is None or turn.scope is None or not turn.host._consumers:
        return None
    return turn


@contextlib.contextmanager
def use_turn(turn: Turn) -> Iterator[Turn]:
    """Make ``turn`` the active turn here: for a thread or task that was handed it explicitly."""
    token = _active_turn.set(turn)
    try:
        yield turn
    finally:
        _active_turn.reset(token)


DEFAULT_AGENT_NAME = "agent"


class SessionCoordinator:
    def __init__(self, *, agent_name: str = DEFAULT_AGENT_NAME) -> None:
        self._lock = threading.RLock()
        self._hosts: dict[str, Host] = {}
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        self._host_watchers: list[Callable[[Host], None]] = []
        self.agent_name = agent_name  # for conversations acquired without an agent_name of their own

    def host(self, profile_key: str) -> Host:
        """The host of ``profile_key``, created on first use."""
        if not isinstance(profile_key, str) or not profile_key:
            raise ValueError(f"profile_key must be a non-empty string, got {profile_key!r}")
        with self._lock:
            host = self._hosts.get(profile_key)
            if host is None:
                host = self._hosts[profile_key] = Host(profile_key)
                # Under the lock: no conversation can start on the host before its watchers saw it.
                for watcher in list(self._host_watchers):
                    watcher(host)
            return host

    def hosts(self) -> list[Host]:
        with self._lock:
            return list(self._hosts.values())

    def watch_hosts(self, watcher: Callable[[Host], None]) -> None:
        """Call ``watcher(host)`` for every host now, and for each host made from now on."""
        with self._lock:
            self._host_watchers.append(watcher)
            for host in list(self._hosts.values()):
                watcher(host)

    def unwatch_hosts(self, watcher: Callable[[Host], None]) -> bool:
        with self._lock:
            try:
                self._host_watchers.remove(watcher)
            except ValueError:
                return False
            return True

    def acquire_conversation(
        self,
        *,
        profile_key: str,
        session_id: str,
        platform: str,
        parent_session_id: str = "",
        model: str = "",
        agent_name: str | None = None,
    ) -> ConversationLease:
        """Lease the conversation ``(profile_key, session_id)``, starting its scope if it is new.

        ``agent_name`` names the agent on exported spans (default: the coordinator's ``agent_name``).
        """
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
        if agent_name is None:
            agent_name = self.agent_name
        if not isinstance(agent_name, str) or not agent_name:
            raise ValueError(f"agent_name must be a non-empty string, got {agent_name!r}")
        host = self.host(profile_key)
        key = (profile_key, session_id)
        with self._lock:
            conv = self._conversations.get(key)
            if conv is None:
                scope = host.relay.scope.push(
                    "conversation",
                    ScopeType.AGENT,
                    parent=None,
                    attach=False,
                    metadata={
                        cv.KIND: cv.CONVERSATION,
                        cv.SESSION_ID: session_id,
                        cv.PROFILE_KEY: profile_key,
                        cv.PROFILE_ID: profile_id(profile_key),
                        cv.AGENT_NAME: agent_name,
                        cv.PLATFORM: platform,
                        cv.PARENT_SESSION_ID: parent_session_id,
                        "model": model,
                    },
                )
                conv = self._conversations[key] = _Conversation(key, scope)
            conv.leases += 1
        return ConversationLease(host, profile_key, session_id, platform, parent_session_id, model, conv)

    def release_conversation(self, lease: ConversationLease) -> None:
        """Idempotent; the last lease released ends the conversation scope."""
        with self._lock:
            if lease.released:
                return
            lease.released = True
            conv = lease._conversation
            conv.leases -= 1
            if conv.leases > 0:
                return
            if self._conversations.get(conv.key) is conv:
                del self._conversations[conv.key]
        turn = conv.managed_turn
        if turn is not None and not turn.ended:
            # The caller crashed out of its turn: close it rather than leave it open forever.
            self.end_turn(turn, outcome=Outcome.CANCELLED.value)
        lease.host.relay.scope.pop(conv.scope, output={"outcome": Outcome.SUCCESS.value})

    def begin_turn(self, lease: ConversationLease, *, turn_id: str, task_id: str) -> Turn:
        if lease.released:
            raise ValueError(f"cannot begin turn {turn_id!r}: the lease on {lease.session_id!r} was released")
        conv = lease._conversation
        with self._lock:
            busy = conv.managed_turn is not None and not conv.managed_turn.ended
            scope = None
            if not busy:
                scope = lease.host.relay.scope.push(
                    "turn",
                    ScopeType.FUNCTION,
                    parent=conv.scope,
                    metadata={
                        cv.KIND: cv.TURN,
                        cv.TURN_ID: turn_id,
                        cv.TASK_ID: task_id,
                        cv.SESSION_ID: lease.session_id,
                    },
                )
            turn = Turn(lease, turn_id, task_id, scope, previous=_active_turn.get())
            if not busy:
                conv.managed_turn = turn
        if busy:
            logger.info("turn %r on %r runs unmanaged: another turn is still open", turn_id, lease.session_id)
        _active_turn.set(turn)
        return turn

    def end_turn(self, turn: Turn, *, outcome: str) -> None:
        """Idempotent. Closes the turn's open logical calls newest first with ``outcome``, then the turn."""
        outcome = _check_outcome(outcome)
        with turn.lock:
            if turn.ended:
                return
            turn.ended = True
            turn.outcome = outcome
            open_calls = list(turn.logical_llm_calls.values())
        for call in reversed(open_calls):
            close_logical_call(turn, call, outcome)
        if _active_turn.get() is turn:
            _active_turn.set(turn.previous)
        conv = turn.lease._conversation
        with self._lock:
            if conv.managed_turn is turn:
                conv.managed_turn = None
        if turn.scope is None:
            return
        scope_api = turn.relay.scope
        try:
            scope_api.pop(turn.scope, output={"outcome": outcome})
        except ScopeOrderError:
            # Something opened inside the turn was never closed; the turn still ends,
            # and this context's stack drops back below it.
            logger.warning("turn %r ended with scopes still open inside it", turn.turn_id)
            scope_api._stack.set(turn.scope.below)
            scope_api.end(turn.scope, output={"outcome": outcome})

    def reset(self) -> None:
        with self._lock:
            self._hosts.clear()
            self._conversations.clear()
            self._host_watchers.clear()
            self.agent_name = DEFAULT_AGENT_NAME
        _active_turn.set(None)


def close_logical_call(
    turn: Turn,
    call: LogicalCall,
    outcome: str,
    *,
    model_name: str | None = None,
    provider_name: str | None = None,
) -> bool:
    """End ``call`` once with ``outcome``; False if it was already closed."""
    with turn.lock:
        if not take_logical_call(turn, call):
            return False
    end_logical_call(turn, call, outcome, model_name=model_name, provider_name=provider_name)
    return True


def take_logical_call(turn: Turn, call: LogicalCall) -> bool:
    """Remove ``call`` from the turn's open calls; False if it is not there (closed already).

    The caller holds ``turn.lock``; whoever takes the call ends it, with ``end_logical_call``.
    """
    open_calls = turn.logical_llm_calls
    if open_calls.get(call.api_request_id) is not call:
        return False
    del open_calls[call.api_request_id]
    return True


def end_logical_call(
    turn: Turn,
    call: LogicalCall,
    outcome: str,
    *,
    model_name: str | None = None,
    provider_name: str | None = None,
) -> None:
    """End the scope of a call taken by ``take_logical_call``."""
    output: dict[str, Any] = {
        "outcome": outcome,
        "model": model_name or call.model,
        "provider": provider_name or call.provider,
    }
    # Looked up at call time: callers (and tests) may wrap the relay's pop.
    turn.relay.scope.pop(call.scope, output=output)


SESSION_COORDINATOR = SessionCoordinator()


def reset_for_tests() -> None:
    """Forget every host, conversation and active turn (for test isolation)."""
    SESSION_COORDINATOR.reset()
