"""LLM calls made "in the current turn": managed when a turn is active and a consumer wants them.

Every attempt belongs to a logical call keyed by ``metadata["api_request_id"]``
(a fresh id when none is given): the first attempt opens it in
``turn.logical_llm_calls``, later attempts with the same id become its
children. Without a managed turn, a call is recorded by a host outside turns (its logical call
closes with its attempt), or goes straight to the provider: see ``relay_runtime.settings``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any

from . import conventions as cv
from . import outside_turns, session
from .attempt import Attempt, FinishHook
from .call_opening import DEFAULT_CALL_ROLE as DEFAULT_CALL_ROLE
from .call_opening import TurnEnded as TurnEnded
from .call_opening import Validator as Validator
from .call_opening import attempt_ended as _attempt_ended
from .call_opening import attempt_of as attempt_of
from .call_opening import count_attempt as _count_attempt
from .call_opening import hold_for_validation as _hold_for_validation
from .call_opening import new_call as _new_call
from .call_opening import open_call_in as open_call_in
from .call_opening import open_logical_call as open_logical_call
from .call_opening import open_logical_call_in as open_logical_call_in
from .call_opening import response_validator as response_validator
from .call_opening import track as _track
from .codec import LLMCodec
from .ids import new_id
from .ids import pooled as _pooled
from .logical_calls import close_logical_call
from .redaction import redact_metadata
from .scopes import outcome_of
from .session import CallHolder, LogicalCall
from .streams import ManagedAsyncStream, ManagedStream, exhausted_async
from .types import LLMRequest, Outcome

_SUCCESS = Outcome.SUCCESS.value


def _open(
    turn: CallHolder, name: str, model_name: str | None, metadata: dict[str, Any] | None
) -> tuple[LogicalCall, dict[str, Any]]:
    """The logical call this attempt belongs to (opened now if new), and the attempt's own metadata."""
    # ``attempt_metadata``'s dict, built here without its frame: this runs once per managed call.
    meta: dict[str, Any] = {cv.KIND: cv.ATTEMPT, **redact_metadata(metadata)} if metadata else {cv.KIND: cv.ATTEMPT}
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
