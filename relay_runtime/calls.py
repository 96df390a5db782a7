"""LLM calls made "in the current turn": managed when a turn is active and a consumer wants them.

Every attempt belongs to a logical call keyed by ``metadata["api_request_id"]``
(a fresh id when none is given): the first attempt opens it in
``turn.logical_llm_calls``, later attempts with the same id become its
children. Without a managed turn, a call is recorded by a host outside turns (its logical call
closes with its attempt), or goes straight to the provider: see ``relay_runtime.settings``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from functools import partial
from typing import Any, Protocol

from . import conventions as cv
from . import outside_turns, session
from .attempt import Attempt, FinishHook
from .codec import LLMCodec
from .ids import new_id
from .ids import pooled as _pooled
from .logical_calls import close_logical_call, end_logical_call
from .response_model import response_model
from .scopes import ScopeHandle, outcome_of
from .session import CallHolder, LogicalCall
from .streams import ManagedAsyncStream, ManagedStream, exhausted_async
from .types import LLMRequest, Outcome, ScopeType

_SUCCESS = Outcome.SUCCESS.value
_FUNCTION = ScopeType.FUNCTION.value
DEFAULT_CALL_ROLE = "primary"
_LOGICAL_CALL = "logical_llm_call"


class Validator(Protocol):
    """What ``auxiliary_call`` sets while its function runs (``response_validator``): an attempt that defers its
    logical completion is then held open with its response until the response is validated (``Attempt.hold``)."""

    # True until the function returns: meanwhile its end, not a stream's, settles the logical call,
    # so a stream that failed is retried as the same call.
    running: bool

    def hold(self, attempt: Attempt) -> None: ...


response_validator: ContextVar[Validator | None] = ContextVar("relay_response_validator", default=None)


def _open(
    turn: CallHolder, name: str, model_name: str | None, metadata: dict[str, Any] | None
) -> tuple[LogicalCall, dict[str, Any]]:
    """The logical call this attempt belongs to (opened now if new), and the attempt's own metadata."""
    # ``attempt_metadata``'s dict, built here without its frame: this runs once per managed call.
    meta: dict[str, Any] = {cv.KIND: cv.ATTEMPT, **metadata} if metadata else {cv.KIND: cv.ATTEMPT}
    # ``in`` before reading: most calls carry neither key, and a membership test is no call.
    api_request_id = meta[cv.API_REQUEST_ID] if metadata and cv.API_REQUEST_ID in meta else None
    role = (meta[cv.CALL_ROLE] if metadata and cv.CALL_ROLE in meta else None) or DEFAULT_CALL_ROLE
    if api_request_id:
        # A caller's id: other attempts (threads, tasks) may open or settle the same call.
        with turn.lock:
            call = turn.logical_llm_calls.get(api_request_id)
            if call is None or call.closing:  # a call being closed takes no more attempts
                call = turn.logical_llm_calls[api_request_id] = _new_call(turn, api_request_id, role)
            _count_attempt(call, meta, name, model_name)
    else:
        # A fresh id: nobody else can reach this call before it is published, so it is made
        # whole first and published by one dict store, without the turn's lock.
        try:
            api_request_id = _pooled()  # ``new_id()`` without its frame (see ``ids.pooled``)
        except IndexError:
            api_request_id = new_id()
        call = _new_call(turn, api_request_id, role)
        if cv.RETRY_COUNT not in meta:
            meta[cv.RETRY_COUNT] = 0
        call.attempts = call.in_flight = 1
        call.provider = name
        call.model = model_name or None
        turn.logical_llm_calls[api_request_id] = call
    meta[cv.API_REQUEST_ID] = api_request_id
    meta[cv.CALL_ROLE] = role
    return call, meta


class TurnEnded(ValueError):
    """The turn a call was found in ended (on another thread or task) before its logical call opened there."""


def _new_call(turn: CallHolder, api_request_id: str, role: str, parent: ScopeHandle | None = None) -> LogicalCall:
    if parent is None:
        parent = turn.scope
    if parent is None:
        parent = outside_turns.outside_parent()  # a served request's scope (``outside_turns.serving``), if any
    try:
        scope = turn.relay.scope.push(
            _LOGICAL_CALL,
            _FUNCTION,
            parent=parent,
            attach=False,
            # Outside turns a logical call is a root: never under a turn another context has open here.
            root=parent is None,
            metadata={cv.KIND: cv.LOGICAL_CALL, cv.API_REQUEST_ID: api_request_id, cv.CALL_ROLE: role},
        )
    except ValueError as exc:
        if parent is not None and parent is turn.scope and parent.ended:
            raise TurnEnded(str(exc)) from None  # the callers make the call outside turns instead
        raise
    return LogicalCall(api_request_id, role, scope)


def _count_attempt(call: LogicalCall, meta: dict[str, Any], name: str, model_name: str | None) -> None:
    """One more attempt in flight on a published ``call`` (the caller holds the turn's lock)."""
    meta.setdefault(cv.RETRY_COUNT, call.attempts)
    call.attempts += 1
    call.in_flight += 1
    call.provider = name
    if model_name:
        call.model = model_name


def _attempt_ended(
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
        end_logical_call(turn, call, outcome)


def execute_current(
    request: LLMRequest,
    callback: Callable[[LLMRequest], Any],
    *,
    name: str,
    model_name: str | None = None,
    metadata: dict[str, Any] | None = None,
    defer_logical_completion: bool = False,
    codec: LLMCodec | None = None,
) -> Any:
    """Run ``callback(request)`` as an attempt of a logical call of the active turn.

    With ``defer_logical_completion=True`` the logical call stays open after the
    attempt (a retry or fallback may follow) until ``complete_logical_call`` or
    the end of the turn.
    """
    turn = session.managed_turn()
    if turn is not None:
        try:
            attempt = _call_attempt(turn, request, name, model_name, metadata, defer_logical_completion, codec)
        except TurnEnded:  # ended on another thread since it was found: the call is made outside turns
            pass
        else:
            return turn.relay.llm.run(attempt, callback)
    outside = outside_turns.outside_calls()
    if outside is None:
        return callback(request)
    attempt = _call_attempt(outside, request, name, model_name, metadata, defer_logical_completion, codec, True)
    return outside.relay.llm.run(attempt, callback)


async def execute_current_async(
    request: LLMRequest,
    callback: Callable[[LLMRequest], Awaitable[Any]],
    *,
    name: str,
    model_name: str | None = None,
    metadata: dict[str, Any] | None = None,
    defer_logical_completion: bool = False,
    codec: LLMCodec | None = None,
) -> Any:
    turn = session.managed_turn()
    if turn is not None:
        try:
            attempt = _call_attempt(turn, request, name, model_name, metadata, defer_logical_completion, codec)
        except TurnEnded:
            pass
        else:
            return await turn.relay.llm.run_async(attempt, callback)
    outside = outside_turns.outside_calls()
    if outside is None:
        return await callback(request)
    attempt = _call_attempt(outside, request, name, model_name, metadata, defer_logical_completion, codec, True)
    return await outside.relay.llm.run_async(attempt, callback)


def _call_attempt(
    turn: CallHolder,
    request: LLMRequest,
    name: str,
    model_name: str | None,
    metadata: dict[str, Any] | None,
    defer: bool,
    codec: LLMCodec | None,
    outside: bool = False,
) -> Attempt:
    """A non-streamed attempt of a logical call of ``turn``, held for validation inside an auxiliary call.

    ``outside`` turns, nobody completes the logical call later: it closes when the attempt ends
    (once validated, when it is held for that).
    """
    call, meta = _open(turn, name, model_name, metadata)
    # A partial, not a closure: finishing runs one Python frame, not two.
    on_finish = partial(_attempt_ended, turn, call, outside or not defer, False)
    try:
        attempt = Attempt(turn.relay, name, request, call.scope, model_name, meta, codec, on_finish)
    except BaseException as exc:  # a bad name or request: no attempt, the call counted out as failed
        on_finish(outcome_of(exc), None, exc)
        raise
    _track(call, attempt)
    if defer:
        _hold_for_validation(call, attempt)
    return attempt


def _hold_for_validation(call: LogicalCall, attempt: Attempt) -> None:
    validator = response_validator.get()
    if validator is not None:
        attempt.hold = partial(_hold, call, validator.hold)


def _track(call: LogicalCall, attempt: Attempt) -> None:
    """The end of the turn ends ``attempt`` if nothing else has: a stream still open, an answer held for
    validation, or a call still waiting for its provider (its late answer then goes unrecorded, as a
    stream's later chunks do, rather than end after its call and turn have)."""
    call.open_attempts.append(attempt)  # one atomic append: no lock on the path of every call
    attempt.tracked = call.open_attempts  # attempts made beside it (a fan-out) are tracked there too


def _hold(call: LogicalCall, validator: Callable[[Attempt], None], attempt: Attempt) -> None:
    validator(attempt)


class _Completed:
    """Recognises a provider that ignored ``stream=True`` and returned a finished response.

    The factory is filtered: a finished response is kept aside and the stream chain
    sees an empty stream in its place, so no intercept iterates the response.
    """

    __slots__ = ("predicate", "response", "seen")

    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        self.predicate = predicate
        self.seen = False
        self.response: Any = None

    def _filter(self, source: Any, empty: Any) -> Any:
        if self.predicate(source):
            self.seen, self.response = True, source
            return empty
        return source

    def factory(self, stream_factory: Callable[[LLMRequest], Iterable[Any]]) -> Callable[[LLMRequest], Any]:
        return lambda request: self._filter(stream_factory(request), iter(()))

    def async_factory(self, stream_factory: Callable[[LLMRequest], Any]) -> Callable[[LLMRequest], Awaitable[Any]]:
        async def factory(request: LLMRequest) -> Any:
            source = stream_factory(request)
            if hasattr(source, "__await__"):
                source = await source
            return self._filter(source, exhausted_async())

        return factory

    def settle(self, attempt: Attempt) -> Any:
        """End the attempt (and so its logical call) as a success with the finished response."""
        attempt.finish(_SUCCESS, self.response, None, None)
        return self.response


def _stream_hook(
    turn: CallHolder,
    call: LogicalCall,
    finalizer: Callable[[], Any] | None,
    completed: _Completed | None,
    settle: bool,
    caller: Validator | None,
) -> FinishHook:
    """A stream settles its logical call when it ends: there is no later validation step to wait for
    (unless its content is one body, validated like a non-streamed answer: ``settle`` is then False).
    Ended while the auxiliary call that opened it (``caller``) still runs, it leaves the call to that one."""

    def on_finish(outcome: str, response: Any, error: BaseException | None) -> None:
        if outcome == _SUCCESS and finalizer is not None and (completed is None or not completed.seen):
            response = finalizer()
        _attempt_ended(turn, call, settle and (caller is None or not caller.running), True, outcome, response, error)

    return on_finish


def _stream_attempt(
    turn: CallHolder,
    request: LLMRequest,
    name: str,
    model_name: str | None,
    metadata: dict[str, Any] | None,
    finalizer: Callable[[], Any] | None,
    completed: _Completed | None,
    codec: LLMCodec | None,
    defer: bool = False,
    outside: bool = False,
) -> Attempt:
    call, meta = _open(turn, name, model_name, metadata)
    with turn.lock:
        call.open_streams += 1
    # Outside turns an auxiliary call cannot complete its logical call: each attempt settles it.
    caller = None if outside else response_validator.get()
    hook = _stream_hook(turn, call, finalizer, completed, outside or not defer, caller)
    try:
        attempt = Attempt(turn.relay, name, request, call.scope, model_name, meta, codec, hook)
    except BaseException as exc:
        hook(outcome_of(exc), None, exc)
        raise
    _track(call, attempt)
    if defer:
        _hold_for_validation(call, attempt)
    return attempt


def _streamed(
    request: LLMRequest,
    name: str,
    model_name: str | None,
    metadata: dict[str, Any] | None,
    finalizer: Callable[[], Any] | None,
    completed: _Completed | None,
    codec: LLMCodec | None,
    defer: bool,
) -> Attempt | None:
    """A stream's attempt, of a logical call of the managed turn, else outside turns; None: it goes unrecorded."""
    turn = session.managed_turn()
    if turn is not None:
        try:
            return _stream_attempt(turn, request, name, model_name, metadata, finalizer, completed, codec, defer)
        except TurnEnded:  # ended on another thread since it was found: the call is made outside turns
            pass
    outside = outside_turns.outside_calls()
    if outside is None:
        return None
    return _stream_attempt(outside, request, name, model_name, metadata, finalizer, completed, codec, defer, True)


def stream_current(
    request: LLMRequest,
    stream_factory: Callable[[LLMRequest], Iterable[Any]],
    *,
    name: str,
    model_name: str | None = None,
    metadata: dict[str, Any] | None = None,
    finalizer: Callable[[], Any] | None = None,
    completed_response_predicate: Callable[[Any], bool] | None = None,
    codec: LLMCodec | None = None,
    defer_logical_completion: bool = False,
) -> Any:
    """Open ``stream_factory(request)`` as an attempt; the logical call settles when the stream ends.

    ``defer_logical_completion=True``: the source is one body read later (an SDK's raw
    response) answering an auxiliary call, held for validation as ``execute_current`` holds it.

    ``finalizer()`` (if given) supplies the final response in place of the
    accumulated one. ``completed_response_predicate(source)`` recognises a
    provider that ignored ``stream=True`` and returned a finished response:
    that response is returned as it is (never iterated) and the call settles as
    a success. To see it through a lazy stream execution intercept, the first
    chunk of a real stream is read ahead (and handed out first).
    """
    completed = _Completed(completed_response_predicate) if completed_response_predicate is not None else None
    attempt = _streamed(request, name, model_name, metadata, finalizer, completed, codec, defer_logical_completion)
    if attempt is None:
        return stream_factory(request)
    if completed is None:
        return attempt.relay.llm.open_stream(attempt, stream_factory)
    stream: ManagedStream = attempt.relay.llm.open_stream(attempt, completed.factory(stream_factory))
    if not completed.seen:
        stream._read_ahead()
    if not completed.seen:
        return stream
    response = completed.settle(attempt)
    stream.close()
    return response


async def stream_current_async(
    request: LLMRequest,
    stream_factory: Callable[[LLMRequest], Any],
    *,
    name: str,
    model_name: str | None = None,
    metadata: dict[str, Any] | None = None,
    finalizer: Callable[[], Any] | None = None,
    completed_response_predicate: Callable[[Any], bool] | None = None,
    codec: LLMCodec | None = None,
    defer_logical_completion: bool = False,
) -> Any:
    completed = _Completed(completed_response_predicate) if completed_response_predicate is not None else None
    attempt = _streamed(request, name, model_name, metadata, finalizer, completed, codec, defer_logical_completion)
    if attempt is None:
        source = stream_factory(request)
        return await source if hasattr(source, "__await__") else source
    if completed is None:
        return await attempt.relay.llm.open_stream_async(attempt, stream_factory)
    factory = completed.async_factory(stream_factory)
    stream: ManagedAsyncStream = await attempt.relay.llm.open_stream_async(attempt, factory)
    if not completed.seen:
        await stream._read_ahead()
    if not completed.seen:
        return stream
    response = completed.settle(attempt)
    await stream.aclose()
    return response


def count_renewed_attempt(api_request_id: str) -> None:
    """An attempt of ``api_request_id`` was re-sent as a new one (a budget's downgrade): later ones number after it."""
    turn = session.active_turn()
    if turn is None:
        return
    call = turn.logical_llm_calls.get(api_request_id)
    if call is not None:
        with turn.lock:
            call.attempts += 1


def complete_logical_call(
    api_request_id: str,
    *,
    outcome: str,
    model_name: str | None = None,
    provider_name: str | None = None,
    response_model_name: str | None = None,
) -> bool:
    """Close the active turn's logical call ``api_request_id`` with ``outcome``, exactly once.

    Returns False when there is no such open call (already closed, or no turn):
    an outcome once recorded is never overwritten. Nor when ending it failed (counted in
    ``diagnostics()``): the call then stays open on the turn, whose end closes it.
    """
    outcome = session._check_outcome(outcome)
    turn = session.active_turn()
    if turn is None:
        return False
    call = turn.logical_llm_calls.get(api_request_id)
    if call is None:
        return False
    try:
        return close_logical_call(
            turn, call, outcome, model_name=response_model_name or model_name, provider_name=provider_name
        )
    except Exception as exc:
        turn.relay.diag.failure("bookkeeping_errors", exc, f"completing logical call {api_request_id!r}")
        return False


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
    ``attempt_of`` and closes it with ``logical_calls.close_logical_call``, with no lookup by id."""
    if parent is not None and parent.ended:
        parent = None  # the agent ended under a late call: the turn still holds it
    try:
        api_request_id = _pooled()  # ``new_id()`` without its frame (see ``ids.pooled``)
    except IndexError:
        api_request_id = new_id()
    call = turn.logical_llm_calls[api_request_id] = _new_call(
        turn, api_request_id, call_role or DEFAULT_CALL_ROLE, parent
    )
    return call


def attempt_of(
    turn: CallHolder,
    call: LogicalCall,
    request: LLMRequest,
    name: str,
    model_name: str | None,
    codec: LLMCodec | None,
    *,
    streaming: bool = False,
    metadata: dict[str, Any] | None = None,
) -> Attempt | None:
    """An attempt of ``call`` (opened by ``open_call_in``), to run with ``relay.llm.run`` (``open_stream`` when
    ``streaming``); the call stays open after it for its opener to close. None when the call no longer takes
    attempts (the end of its turn closed it): the caller then goes the way of ``execute_current``
    (``stream_current``).

    ``_call_attempt``'s (``_stream_attempt``'s) work for a caller holding the call: no lookup by id. ``metadata``
    comes first in the attempt's own, after its kind, as the metadata given to ``execute_current`` do."""
    with turn.lock:
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
    meta: dict[str, Any] = {cv.KIND: cv.ATTEMPT, **metadata} if metadata else {cv.KIND: cv.ATTEMPT}
    meta[cv.API_REQUEST_ID] = call.api_request_id
    meta[cv.CALL_ROLE] = call.call_role
    meta[cv.RETRY_COUNT] = retry
    attempt = Attempt(
        turn.relay,
        name,
        request,
        call.scope,
        model_name,
        meta,
        codec,
        # A stream's hook with no finalizer and no finished-response check (``_stream_hook``) is this one.
        partial(_attempt_ended, turn, call, False, streaming),
    )
    _track(call, attempt)
    _hold_for_validation(call, attempt)
    return attempt
