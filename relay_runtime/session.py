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
from .hosts import CallHolder as CallHolder  # re-exported: the session layer's names
from .hosts import Host as Host
from .hosts import OutsideTurns as OutsideTurns
from .logical_calls import end_open_call
from .redaction_install import CoordinatorRedaction, logged_id
from .relay import Relay
from .scopes import RelayOutput, ScopeHandle, ScopeOrderError
from .settings import settings
from .types import Outcome, ScopeType

logger = logging.getLogger("relay_runtime.session")

HOME_ENV = "RELAY_HOME"
DEFAULT_HOME = "~/.relay-runtime"
_OUTCOMES = frozenset(o.value for o in Outcome)


def _check_type(method: str, argument: str, value: Any, expected: type) -> None:
    if not isinstance(value, expected):
        raise TypeError(f"{method}() takes a {expected.__name__} as {argument}, got {type(value).__name__}")


def current_profile_key() -> str:
    """The profile this process runs as: the resolved ``RELAY_HOME`` (default ``~/.relay-runtime``)."""
    raw = os.environ.get(HOME_ENV) or DEFAULT_HOME
    try:
        return str(Path(raw).expanduser().resolve())
    except (RuntimeError, OSError, ValueError) as exc:  # a symlink loop, an unknown ~user, no home
        raise ValueError(f"{HOME_ENV}={raw!r} cannot be resolved to a profile directory: {exc}") from exc


def profile_id(profile_key: str) -> str:
    """A short, stable id of a profile: what leaves the process instead of its home directory's path."""
    return hashlib.sha256(profile_key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _check_outcome(outcome: str) -> str:
    value = outcome.value if isinstance(outcome, Outcome) else outcome
    if value not in _OUTCOMES:
        raise ValueError(f"outcome must be one of {sorted(_OUTCOMES)}, got {outcome!r}")
    return value


@dataclass(eq=False)
class _Conversation:
    key: tuple[str, str]
    scope: ScopeHandle
    leases: int = 0
    managed_turn: Turn | None = None
    warned_unmanaged: bool = False


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


class LogicalCall:
    """One logical LLM call: every attempt (retry, fallback) with the same ``api_request_id``.

    A plain class with slots and its own ``__init__``, not a dataclass: one is made for every logical call, and
    the generated ``__init__`` (defaults, a ``default_factory`` call) cost it 43 Python opcodes where this costs
    35. Compared by identity, as the dataclass (``eq=False``) was. ``call_opening.new_call`` calls this ``__init__``
    on a bare instance, without the class call.
    """

    __slots__ = (
        "api_request_id", "attempts", "call_role", "closing", "in_flight", "last_outcome", "model", "open_attempts",
        "open_streams", "provider", "scope",
    )  # fmt: skip

    def __init__(self, api_request_id: str, call_role: str, scope: ScopeHandle) -> None:
        self.api_request_id = api_request_id
        self.call_role = call_role
        self.scope = scope
        self.attempts = 0
        self.in_flight = 0
        self.open_streams = 0
        self.last_outcome: str | None = None
        self.model: str | None = None
        self.provider: str | None = None
        # Attempts not yet ended (calls in flight, open streams, responses held for validation): the
        # end of the turn ends them, before their logical call. An attempt leaves it when it ends.
        self.open_attempts: list[Any] = []
        # True while someone is ending this call: a second closer backs off.
        self.closing = False

    def __repr__(self) -> str:
        return (
            f"LogicalCall(api_request_id={self.api_request_id!r}, call_role={self.call_role!r}, "
            f"attempts={self.attempts}, in_flight={self.in_flight}, closing={self.closing})"
        )


@dataclass(eq=False)
class Turn:
    lease: ConversationLease
    turn_id: str
    task_id: str
    scope: ScopeHandle | None
    logical_llm_calls: dict[str, LogicalCall] = field(default_factory=dict)
    # Scopes an integration opened detached under the turn (a framework's runs), by uuid, in the order they
    # opened, while open: a framework may never report a run's end (another callback handler raised), and
    # the end of the turn then ends them (their ``abandon``), after its calls, newest (innermost) first.
    open_scopes: dict[str, Any] = field(default_factory=dict)
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


@dataclass(frozen=True, slots=True)
class _Handoff:
    """A turn handed to this thread or task by ``use_turn``, and what was active here before."""

    turn: Turn
    prior: Turn | None
    outer: _Handoff | None


_handoff: ContextVar[_Handoff | None] = ContextVar("relay_turn_handoff", default=None)


def _live(turn: Turn | None) -> Turn | None:
    """The nearest turn still open, from an ended one: the turn it was begun inside, where it was
    begun; for a handed turn, what was active where it was handed (never the giver's other turns)."""
    handoff = _handoff.get()
    while turn is not None and turn.ended:
        node = handoff
        while node is not None and node.turn is not turn:
            node = node.outer
        turn = node.prior if node is not None else turn.previous
    return turn


def active_turn() -> Turn | None:
    turn = _active_turn.get()
    if turn is not None and turn.ended:
        turn = _live(turn)
    return turn


def managed_turn() -> Turn | None:
    """The active turn if LLM calls made now are managed in it: it owns its conversation's
    turn scope and some consumer retains managed execution on its host."""
    turn = _active_turn.get()
    if turn is not None and turn.ended:
        turn = _live(turn)
    if turn is None or turn.scope is None or not turn.host._consumers:
        return None
    return turn


@contextlib.contextmanager
def use_turn(turn: Turn) -> Iterator[Turn]:
    """Make ``turn`` the active turn here: for a thread or task that was handed it explicitly.

    Once it has ended, calls made here are outside it, and outside the turns it was begun
    inside (they belong to whoever handed it over): only turns active here before count.
    """
    handoff = _handoff.set(_Handoff(turn, _active_turn.get(), _handoff.get()))
    token = _active_turn.set(turn)
    try:
        yield turn
    finally:
        _active_turn.reset(token)
        _handoff.reset(handoff)


DEFAULT_AGENT_NAME = "agent"


class SessionCoordinator:
    def __init__(self, *, agent_name: str = DEFAULT_AGENT_NAME) -> None:
        self._lock = threading.RLock()
        self._hosts: dict[str, Host] = {}
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        self._host_watchers: list[Callable[[Host], None]] = []
        self.agent_name = agent_name  # for conversations acquired without an agent_name of their own
        self._default: Host | None = None  # ``default_host()``, once resolved

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

    def default_host(self) -> Host:
        """The host of the process's profile (``current_profile_key()``): it records calls made outside turns.

        Resolved on first use and kept until ``reset()`` (``reset_for_tests``): a call with no turn open
        pays no environment read or path resolution.
        """
        host = self._default
        if host is None:
            host = self._default = self.host(current_profile_key())
        return host

    def hosts(self) -> list[Host]:
        with self._lock:
            return list(self._hosts.values())

    @property
    def redaction(self) -> CoordinatorRedaction:
        """``SESSION_COORDINATOR.redaction.use(policy)``: one redaction policy on every host, now and later."""
        with self._lock:
            found = self.__dict__.get("_redaction")
            if found is None:
                found = self.__dict__["_redaction"] = CoordinatorRedaction(self)
            return found

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
        _check_type("release_conversation", "lease", lease, ConversationLease)
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
            # Read under the lock that ``begin_turn`` opens its turn under: a turn begun before this point is
            # ended here, and none can begin after it (it finds the lease released).
            turn = conv.managed_turn
        try:
            if turn is not None and not turn.ended:
                # The caller crashed out of its turn: close it rather than leave it open forever.
                self.end_turn(turn, outcome=Outcome.CANCELLED.value)
        finally:
            # Also when that was interrupted: off the books now, the conversation has no later chance to end.
            lease.host.relay.scope.pop(conv.scope, output=RelayOutput(outcome=Outcome.SUCCESS.value))

    def begin_turn(self, lease: ConversationLease, *, turn_id: str, task_id: str) -> Turn:
        _check_type("begin_turn", "lease", lease, ConversationLease)
        conv = lease._conversation
        with self._lock:
            # Checked under the lock ``release_conversation`` marks it under: checked before, a release on
            # another thread could end the conversation between the check and the turn's opening.
            if lease.released:
                raise ValueError(f"cannot begin turn {turn_id!r}: the lease on {lease.session_id!r} was released")
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
                with lease.host._lock:
                    lease.host.open_turns += 1
        if busy:
            relay = lease.host.relay
            logger.info(
                "turn %r on %r runs unmanaged: another turn is still open",
                logged_id(relay, cv.TURN_ID, turn_id),
                logged_id(relay, cv.SESSION_ID, lease.session_id),
            )
        _active_turn.set(turn)
        return turn

    def end_turn(self, turn: Turn, *, outcome: str) -> None:
        """Idempotent. Ends the turn's open attempts and logical calls, newest first, then the scopes
        integrations opened under it and left open, newest first, then the turn.

        An open stream's attempt, or one still waiting for its provider, ends cancelled (the
        stream still yields the provider's chunks afterwards, the call still returns its
        answer, both unrecorded), then its logical call; calls still open get
        ``outcome``, unless their last attempt did not succeed (its outcome then). The turn
        always ends, even when closing something inside it failed.
        """
        _check_type("end_turn", "turn", turn, Turn)
        outcome = _check_outcome(outcome)
        with turn.lock:
            if turn.ended:
                return
            turn.ended = True
            turn.outcome = outcome
            open_calls = list(turn.logical_llm_calls.values())
        interrupted: BaseException | None = None
        for call in reversed(open_calls):
            try:
                end_open_call(turn, call, outcome)
            except BaseException as exc:  # a subscriber's KeyboardInterrupt: finish the turn first
                interrupted = interrupted or exc
        # After the calls (a framework's runs hold them, never the other way round); a scope opens after the
        # scope it nests in, so newest first ends children before their parents.
        with turn.lock:
            open_scopes = list(turn.open_scopes.values())
        for scope in reversed(open_scopes):
            try:
                scope.abandon()
            except Exception as exc:
                turn.relay.diag.failure("bookkeeping_errors", exc, "ending a scope left open at the turn's end")
            except BaseException as exc:
                interrupted = interrupted or exc
        if _active_turn.get() is turn:
            _active_turn.set(_live(turn))
        conv = turn.lease._conversation
        with self._lock:
            if conv.managed_turn is turn:
                conv.managed_turn = None
        if turn.scope is not None:
            with turn.host._lock:
                turn.host.open_turns -= 1
            try:
                self._pop_turn(turn, outcome)
            except BaseException as exc:
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    @staticmethod
    def _pop_turn(turn: Turn, outcome: str) -> None:
        assert turn.scope is not None
        scope_api = turn.relay.scope
        try:
            scope_api.pop(turn.scope, output=RelayOutput(outcome=outcome))
        except ScopeOrderError:
            # Something opened inside the turn was never closed; the turn still ends,
            # and this context's stack drops back below it.
            logger.warning(
                "turn %r ended with scopes still open inside it", logged_id(turn.relay, cv.TURN_ID, turn.turn_id)
            )
            scope_api._stack.set(turn.scope.below)
            scope_api.end(turn.scope, output={"outcome": outcome})

    def reset(self) -> None:
        with self._lock:
            self._hosts.clear()
            self._conversations.clear()
            self._host_watchers.clear()
            self.__dict__.pop("_redaction", None)  # its host watcher went with the others
            self.agent_name = DEFAULT_AGENT_NAME
            self._default = None
        _active_turn.set(None)


SESSION_COORDINATOR = SessionCoordinator()


def reset_for_tests() -> None:
    """Forget every host, conversation and active turn, and ``configure``'s choices (for test isolation)."""
    SESSION_COORDINATOR.reset()
    settings.reset()
