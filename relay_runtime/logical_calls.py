"""Closing a logical call exactly once: by its last attempt, its caller, or the end of its turn.

``take_logical_call`` claims a call under its holder's lock; ``close_logical_call`` claims and ends it (or,
``taken``, ends a call its caller claimed). A call whose end fails before its end event stays on its
holder, open, so the end of the turn still closes it.

The lock is taken with ``acquire``/``release`` around a ``try``, not ``with``, on the paths every call
runs: ``with`` on an ``RLock`` binds its ``__enter__`` and ``__exit__`` and calls the latter with three
arguments, about 1,000 instructions more each time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .scopes import RelayOutput
from .types import Outcome

if TYPE_CHECKING:
    from .session import CallHolder, LogicalCall, Turn

_SUCCESS = Outcome.SUCCESS.value
_new_output = dict.__new__


def close_logical_call(
    turn: CallHolder,
    call: LogicalCall,
    outcome: str,
    taken: bool = False,
    counted: bool = False,
    # Not keyword-only: a keyword-only default is looked up by name in a dict on every call that omits it.
    model_name: str | None = None,
    provider_name: str | None = None,
) -> bool:
    """End ``call`` once with ``outcome``; False if it was already closed (or is being closed). ``taken``: the
    caller claimed it already, under ``turn.lock`` (``take_logical_call``'s test; an attempt's end that settles
    its call counts it out under the same lock).

    Its scope ended, it leaves the turn. If ending it fails before its end event (a scope-order error, say), it
    stays on the turn, open, and the end of the turn closes it: no start goes without its end. With ``counted``
    that failure is counted in the relay's diagnostics (``bookkeeping_errors``) and False returned, not raised: a
    framework's model call, ended from the framework's callbacks, which must not fail.
    """
    lock = turn.lock
    try:
        if not taken:
            lock.acquire()
            try:
                # ``take_logical_call``, inline: every logical call an adapter or a framework opened itself closes here.
                if call.closing or turn.logical_llm_calls.get(call.api_request_id) is not call:
                    return False
                call.closing = True
            finally:
                lock.release()
        # Claiming and ending in one function, not two: one frame less on the close of every logical call.
        # ``RelayOutput(outcome=..., model=..., provider=...)`` without the class call matching three keywords.
        output = _new_output(RelayOutput)
        output["outcome"] = outcome
        output["model"] = model_name or call.model
        output["provider"] = provider_name or call.provider
        try:
            # Looked up at call time: callers (and tests) may wrap the relay's pop.
            turn.relay.scope.pop(call.scope, output=output, outcome=outcome)
        finally:
            lock.acquire()  # not ``with``: see the module docstring
            try:
                call.closing = False
                if call.scope.ended and turn.logical_llm_calls.get(call.api_request_id) is call:
                    del turn.logical_llm_calls[call.api_request_id]
            finally:
                lock.release()
    except Exception as exc:
        if not counted:
            raise
        turn.relay.diag.failure("bookkeeping_errors", exc, f"completing logical call {call.api_request_id!r}")
        return False
    return True


def take_logical_call(turn: CallHolder, call: LogicalCall) -> bool:
    """Claim ``call`` for closing; False if it is closed already or someone else is closing it.

    The caller holds ``turn.lock``; whoever takes the call ends it, with ``close_logical_call(..., taken=True)``.
    """
    if call.closing or turn.logical_llm_calls.get(call.api_request_id) is not call:
        return False
    call.closing = True
    return True


def end_open_call(turn: Turn, call: LogicalCall, outcome: str) -> None:
    """At the end of ``turn``: end ``call``'s open attempts (newest first), then ``call`` itself, with the
    turn's ``outcome`` unless its last attempt did not succeed: a call whose attempt the turn's end cancelled
    (or that failed, its retry never coming) was not answered, whatever became of the turn."""
    relay = turn.relay
    interrupted: BaseException | None = None
    for attempt in reversed(tuple(call.open_attempts)):  # a copy: each leaves the list as it ends
        try:
            attempt.abandon()
        except BaseException as exc:
            interrupted = interrupted or exc
    last = call.last_outcome
    if outcome == _SUCCESS and last is not None and last != _SUCCESS:
        outcome = last
    try:
        close_logical_call(turn, call, outcome)
    except Exception as exc:
        relay.diag.failure("bookkeeping_errors", exc, f"closing logical call {call.api_request_id!r}")
    except BaseException as exc:
        interrupted = interrupted or exc
    if not call.scope.ended:
        # Closing failed without ending it (or it was left claimed): end it without the pop.
        relay.scope.end(call.scope, output=RelayOutput(outcome=outcome, model=call.model, provider=call.provider))
    with turn.lock:
        if turn.logical_llm_calls.get(call.api_request_id) is call:
            del turn.logical_llm_calls[call.api_request_id]
    if interrupted is not None:
        raise interrupted
