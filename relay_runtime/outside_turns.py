"""LLM calls made with no managed turn open: where they are recorded, or why they run unmanaged.

With ``configure(outside_turns="record")`` (the default) such a call is recorded by the default
host (see ``settings``); ``serving`` lets a server say which of its scopes those calls belong
under. Otherwise, or with nothing attached, the call runs straight through and is counted.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar, Token

from . import conventions as cv
from . import session
from .redaction_install import logged_id
from .scopes import ScopeHandle
from .settings import RECORD, settings

logger = logging.getLogger("relay_runtime.session")

# The scope a request served in this context runs under (an MCP server's request scope): logical
# calls made outside turns here open under it instead of as roots, so a handler's LLM calls nest
# under the request that caused them.
_outside_parent: ContextVar[ScopeHandle | None] = ContextVar("relay_outside_parent", default=None)


class serving:  # lower case: it reads as the function it was, ``with serving(scope):``
    """Within this block (and the tasks it starts), LLM calls made with no turn open nest under ``scope``.

    A class, not a generator: a server enters it for every request it serves."""

    __slots__ = ("_scope", "_token")

    def __init__(self, scope: ScopeHandle) -> None:
        self._scope = scope

    def __enter__(self) -> ScopeHandle:
        self._token = _outside_parent.set(self._scope)
        return self._scope

    def __exit__(self, *_exc: object) -> None:
        _outside_parent.reset(self._token)


def serve(scope: ScopeHandle) -> Token[ScopeHandle | None]:
    """``serving(scope)`` entered, for a caller that leaves it itself with ``token.var.reset(token)``: a
    server serving a request makes one call here, not the three of a ``with`` block."""
    return _outside_parent.set(scope)


def outside_parent() -> ScopeHandle | None:
    """The open scope ``serving`` names in this context, if any."""
    scope = _outside_parent.get()
    return scope if scope is not None and not scope.ended else None


def outside_calls() -> session.OutsideTurns | None:
    """Where a call made now, with no managed turn open, is recorded; None: it runs unmanaged (counted).

    With ``outside_turns="record"``: on the default host when no turn is open here (or on the
    host of a second turn that found its conversation busy), if something is attached to it.
    """
    if settings.outside_turns is RECORD:
        turn = session.active_turn()
        host: session.Host | None = None
        if turn is None:
            try:
                host = session.SESSION_COORDINATOR.default_host()
            except ValueError:  # RELAY_HOME cannot be resolved: the call must still run
                host = None
        elif turn.scope is None:
            host = turn.host
        if host is not None and host._consumers:
            return host.outside
    note_unmanaged()
    return None


UNMANAGED = "unmanaged_calls"
NO_TURN = "no_turn"  # no turn open anywhere on the host
NOT_HANDED_TURN = "not_handed_turn"  # a turn is open, but not in this thread or task
BUSY_CONVERSATION = "busy_conversation"  # a second turn while another runs on the conversation
NO_CONSUMER = "no_consumer"  # a turn, but no consumer retains managed execution


def note_unmanaged() -> None:
    """Count a call that runs unmanaged, and why, in the ``diagnostics()`` of the relay it missed.

    A second concurrent turn on a conversation is also logged, once per conversation.
    Without a turn in this context the call is counted on every host (usually one).
    """
    turn = session.active_turn()
    if turn is None:
        for host in list(session.SESSION_COORDINATOR._hosts.values()):
            host.relay.diag.count_all(UNMANAGED, f"{UNMANAGED}.{NOT_HANDED_TURN if host.open_turns else NO_TURN}")
        return
    if turn.scope is None:
        reason = BUSY_CONVERSATION
        conv = turn.lease._conversation
        if not conv.warned_unmanaged:
            conv.warned_unmanaged = True
            logger.warning(
                "LLM calls of turn %r run unmanaged (not traced, not journaled): another turn is still open "
                "on conversation %r; this is reported once per conversation",
                logged_id(turn.relay, cv.TURN_ID, turn.turn_id),
                logged_id(turn.relay, cv.SESSION_ID, turn.lease.session_id),
            )
    else:
        reason = NO_CONSUMER
    turn.relay.diag.count_all(UNMANAGED, f"{UNMANAGED}.{reason}")
