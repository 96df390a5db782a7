"""Logical calls opened and their attempts counted in and out: the layer under ``relay_runtime.calls``.

``calls`` builds the attempts of every calling convention with these; a framework integration that sees
a model call begin opens its logical call itself (``open_call_in``) and makes attempts of it
(``attempt_of``). ``calls`` re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from typing import Any, Protocol

from . import conventions as cv
from . import outside_turns, session
from .attempt import Attempt
from .codec import LLMCodec
from .ids import new_id
from .ids import pooled as _pooled
from .logical_calls import close_logical_call
from .redaction import redact_metadata
from .response_model import response_model
from .scopes import ScopeHandle
from .session import CallHolder, LogicalCall
from .types import LLMRequest, ScopeType

_FUNCTION = ScopeType.FUNCTION.value
DEFAULT_CALL_ROLE = "primary"
_LOGICAL_CALL = "logical_llm_call"
_new = object.__new__
_init_call = LogicalCall.__init__
# Every attempt's metadata names, read as plain globals on its path.
_KIND, _ATTEMPT, _ID, _ROLE, _RETRY = cv.KIND, cv.ATTEMPT, cv.API_REQUEST_ID, cv.CALL_ROLE, cv.RETRY_COUNT


class Validator(Protocol):
    """What ``auxiliary_call`` sets while its function runs (``response_validator``): an attempt that defers its
    logical completion is then held open with its response until the response is validated (``Attempt.hold``)."""

    # True until the function returns: meanwhile its end, not a stream's, settles the logical call,
    # so a stream that failed is retried as the same call.
    running: bool

    def hold(self, attempt: Attempt) -> None: ...


response_validator: ContextVar[Validator | None] = ContextVar("relay_response_validator", default=None)


class TurnEnded(ValueError):
    """The turn a call was found in ended (on another thread or task) before its logical call opened there."""


def new_call(
    turn: CallHolder,
    api_request_id: str | None,
    role: str,
    parent: ScopeHandle | None = None,
    publish: bool = False,
) -> LogicalCall:
    """A logical call of ``turn`` under ``parent`` (default the turn), its scope open. ``api_request_id`` None: a
    framework's call (``open_call_in``), with a fresh id, under the turn if ``parent`` ended. With ``publish``, it
    stands on the turn now; else its caller publishes it (``calls``, once it has counted its first attempt in)."""
    if api_request_id is None:  # (tested first: an adapter's call, ``calls``', skips the rest)
        if parent is not None and parent.ended:
            parent = None  # the agent ended under a late call: the turn still holds it
        try:
            api_request_id = _pooled()  # ``new_id()`` without its frame (see ``ids.pooled``)
        except IndexError:
            api_request_id = new_id()
    if parent is None:
        parent = turn.scope
    if parent is None:
        parent = outside_turns.outside_parent()  # a served request's scope (``outside_turns.serving``), if any
    try:
        # The id and role come from the attempt's metadata, which its caller's redaction was applied to.
        scope = turn.relay.scope.opened(
            _LOGICAL_CALL,
            _FUNCTION,
            parent,
            None,  # input
            {cv.KIND: cv.LOGICAL_CALL, cv.API_REQUEST_ID: api_request_id, cv.CALL_ROLE: role},
            None,  # data
            False,  # attach
            # Outside turns a logical call is a root: never under a turn another context has open here.
            parent is None,  # root
        )
    except ValueError as exc:
        if parent is not None and parent is turn.scope and parent.ended:
            raise TurnEnded(str(exc)) from None  # the callers make the call outside turns instead
        raise
    # The class's own ``__init__`` on a bare instance, without the class call (``type.__call__``, then ``__init__``
    # in an evaluation loop of its own): every logical call an adapter or a framework opens comes here.
    call = _new(LogicalCall)
    _init_call(call, api_request_id, role, scope)
    if publish:
        turn.logical_llm_calls[api_request_id] = call
    return call


def count_attempt(call: LogicalCall, meta: dict[str, Any], name: str, model_name: str | None) -> None:
    """One more attempt in flight on a published ``call`` (the caller holds the turn's lock)."""
    meta.setdefault(cv.RETRY_COUNT, call.attempts)
    call.attempts += 1
    call.in_flight += 1
    call.provider = name
    if model_name:
        call.model = model_name


def attempt_ended(
    turn: CallHolder,
    call: LogicalCall,
    settle: bool,
    streaming: bool,
    outcome: str,
    response: Any,
    error: BaseException | None,
) -> None:
    """Count the attempt out of its logical call; with ``settle``, close the call with its outcome."""
    model = response_model(response) if response is not None else None  # outside the lock: it reads the response
    lock = turn.lock
    lock.acquire()  # not ``with``, on every managed call: see ``logical_calls``
    try:
        call.in_flight -= 1
        if streaming:
            call.open_streams -= 1
        call.last_outcome = outcome
        if model is not None:
            call.model = model
        # ``take_logical_call``'s test and claim, inline: this runs at the end of every managed call.
        closing = settle and not call.closing and turn.logical_llm_calls.get(call.api_request_id) is call
        if closing:
            call.closing = True
    finally:
        lock.release()
    if closing:
        close_logical_call(turn, call, outcome, True)  # taken above; positionally: no keyword matched by name


def hold_for_validation(call: LogicalCall, attempt: Attempt) -> None:
    validator = response_validator.get()
    if validator is not None:
        attempt.hold = partial(_hold, call, validator.hold)


def track(call: LogicalCall, attempt: Attempt) -> None:
    """The end of the turn ends ``attempt`` if nothing else has: a stream still open, an answer held for
    validation, or a call still waiting for its provider (its late answer then goes unrecorded, as a
    stream's later chunks do, rather than end after its call and turn have)."""
    call.open_attempts.append(attempt)  # one atomic append: no lock on the path of every call
    attempt.tracked = call.open_attempts  # attempts made beside it (a fan-out) are tracked there too


def _hold(call: LogicalCall, validator: Callable[[Attempt], None], attempt: Attempt) -> None:
    validator(attempt)


def open_logical_call(parent: ScopeHandle | None = None, *, call_role: str = DEFAULT_CALL_ROLE) -> str | None:
    """Open a logical call of the managed turn under ``parent`` (an agent's scope; default the turn) and return
    its ``api_request_id`` (None when no turn is managed here).

    For framework integrations: attempts made with that id (``auxiliary.join_logical_call``) become its
    children; the opener completes it with ``complete_logical_call``, or the end of the turn does.
    """
    turn = session.managed_turn()
    if turn is None:
        return None
    return open_logical_call_in(turn, parent, call_role)


def open_logical_call_in(turn: CallHolder, parent: ScopeHandle | None, call_role: str = DEFAULT_CALL_ROLE) -> str:
    """``open_logical_call`` for a caller that already holds the managed turn (framework integrations)."""
    return open_call_in(turn, parent, call_role).api_request_id


def open_call_in(turn: CallHolder, parent: ScopeHandle | None, call_role: str = DEFAULT_CALL_ROLE) -> LogicalCall:
    """``open_logical_call_in``, returning the call itself: its opener makes attempts of it with
    ``attempt_of`` and closes it with ``logical_calls.close_logical_call``, with no lookup by id.
    (``new_call(turn, None, role, parent, True)``, which a framework's model call makes without this frame.)"""
    return new_call(turn, None, call_role or DEFAULT_CALL_ROLE, parent, True)


def attempt_of(
    turn: CallHolder,
    call: LogicalCall,
    request: LLMRequest,
    name: str,
    model_name: str | None,
    codec: LLMCodec | None,
    streaming: bool = False,
    metadata: dict[str, Any] | None = None,
    clean: bool = False,
) -> Attempt | None:
    """An attempt of ``call`` (opened by ``open_call_in``), to run with ``relay.llm.run`` (``open_stream`` when
    ``streaming``); the call stays open after it for its opener to close. None when the call no longer takes
    attempts (the end of its turn closed it): the caller then goes the way of ``execute_current``
    (``stream_current``).

    ``_call_attempt``'s (``_stream_attempt``'s) work for a caller holding the call: no lookup by id. ``metadata``
    comes first in the attempt's own, after its kind, as the metadata given to ``execute_current`` do; with
    ``clean``, it is an adapter's own (its client's address and region, built from no caller's words), not read
    for credentials again on every attempt, as ``Scopes.opened`` takes the relay's own scopes' metadata."""
    lock = turn.lock
    lock.acquire()  # not ``with``, on every attempt of an opened call: see ``logical_calls``
    try:
        if call.closing or turn.logical_llm_calls.get(call.api_request_id) is not call:
            return None
        retry = call.attempts
        call.attempts = retry + 1
        call.in_flight += 1
        if streaming:
            call.open_streams += 1
        call.provider = name
        if model_name:
            call.model = model_name
    finally:
        lock.release()
    # One literal each: keys set in the same order, and a caller's entry under one of the call's names overridden
    # in its place, as three assignments after the merge would.
    meta: dict[str, Any] = (
        {
            _KIND: _ATTEMPT,
            **(metadata if clean else redact_metadata(metadata)),
            _ID: call.api_request_id,
            _ROLE: call.call_role,
            _RETRY: retry,
        }
        if metadata
        else {_KIND: _ATTEMPT, _ID: call.api_request_id, _ROLE: call.call_role, _RETRY: retry}
    )
    attempt = Attempt(
        turn.relay,
        name,
        request,
        call.scope,
        model_name,
        meta,
        codec,
        # A stream's hook with no finalizer and no finished-response check (``_stream_hook``) is this one.
        partial(attempt_ended, turn, call, False, streaming),
    )
    # ``track`` and ``hold_for_validation``, inline: this runs on every attempt of an opened call.
    tracked = call.open_attempts
    tracked.append(attempt)
    attempt.tracked = tracked
    validator = response_validator.get()
    if validator is not None:
        attempt.hold = partial(_hold, call, validator.hold)
    return attempt
