"""Auxiliary LLM calls: one decorated function run = one logical call, however many attempts it makes.

Inside ``@auxiliary_call``, each completion the adapters make is an attempt
with the same ``api_request_id``, ``call_role="auxiliary:<task>"`` and a
growing ``retry_count``; ``validate_response`` completes the logical call as a
success, and anything escaping the function completes it as failed (or
cancelled) before it is re-raised unchanged.

A completed attempt stays open, holding its response, until the response is
validated: accepted, it ends as a success; rejected, as failed with error type
``response_rejected`` and the validator's reason. An attempt nobody validates
ends as a success when the next attempt starts or the function returns.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import wrapt

from . import calls, session
from . import conventions as cv
from .attempt import Attempt
from .ids import new_id
from .scopes import outcome_of

F = TypeVar("F", bound=Callable[..., Any])

API_MODES = ("chat_completions", "responses", "anthropic_messages")


class Route(NamedTuple):
    provider: str
    model: str
    api_mode: str


class ResponseRejected(RuntimeError):
    """``validate_response`` found no answer in a response; events record it as ``response_rejected``."""

    relay_error_type = "response_rejected"


def _owner() -> tuple[int, asyncio.Task[Any] | None]:
    """Where an attempt runs: its thread and task (one auxiliary call may run attempts in several)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop here
        task = None
    return threading.get_ident(), task


@dataclass(eq=False)
class _Auxiliary:
    task: str
    api_request_id: str
    call_role: str
    attempts: int = 0
    completed: bool = False
    route: Route | None = None
    # Attempts held open until their response is validated: at most one per thread or task,
    # so attempts run side by side each end with the verdict on their own response.
    pending: list[tuple[tuple[int, Any], Attempt]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # A joined call (``join_logical_call``): the token that set it, and whether its joiner left it. A framework
    # may end its call in another context than the one it joined in (a task of its own, a generator closed
    # late), where resetting the variable cannot reach the joining context, which then still holds the call.
    token: Token[_Auxiliary | None] | None = field(default=None, repr=False)
    left: bool = False
    # While the decorated function runs (``calls.Validator``): a stream ending meanwhile leaves the call open.
    running: bool = False

    def hold(self, attempt: Attempt) -> None:
        owner = _owner()
        self.release_own(owner)
        with self.lock:
            self.pending.append((owner, attempt))

    def _take(self, pick: Callable[[tuple[int, Any], Attempt], bool]) -> list[Attempt]:
        with self.lock:
            taken = [attempt for owner, attempt in self.pending if pick(owner, attempt)]
            self.pending = [(owner, attempt) for owner, attempt in self.pending if attempt not in taken]
        return taken

    def release_own(self, owner: tuple[int, Any] | None = None) -> None:
        """A new attempt starts here: the answer held here (or by a task that has finished) was not validated."""
        here = owner or _owner()

        def unvalidated(held_by: tuple[int, Any], _attempt: Attempt) -> bool:
            return held_by == here or (held_by[1] is not None and held_by[1].done())

        for attempt in self._take(unvalidated):
            attempt.release()

    def release_answer(self, response: Any, error: BaseException | None = None) -> None:
        """End the attempt that answered ``response`` (else the one held here): a success, or failed with ``error``."""
        taken = self._take(lambda _o, attempt: attempt.held is response)
        if not taken:
            owner = _owner()
            taken = self._take(lambda held_by, _a: held_by == owner)
        for attempt in taken:
            attempt.release(error)

    def release(self) -> None:
        """End every held attempt as a success: the function is over."""
        for attempt in self._take(lambda _o, _a: True):
            attempt.release()


_current: ContextVar[_Auxiliary | None] = ContextVar("relay_auxiliary", default=None)
_route: ContextVar[Route | None] = ContextVar("relay_auxiliary_route", default=None)


def _live(aux: _Auxiliary | None) -> _Auxiliary | None:
    """``aux`` (the variable's value here), or, for a joined call its joiner has left, what it replaced."""
    while aux is not None and aux.left:
        old = aux.token.old_value if aux.token is not None else None
        aux = None if old is Token.MISSING else old
    return aux


def set_route(provider: str, model: str, api_mode: str = "chat_completions") -> None:
    """Say which provider, model and API the next completions go to (scoped to the auxiliary call)."""
    if not isinstance(provider, str) or not provider:
        raise ValueError(f"provider must be a non-empty string, got {provider!r}")
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a non-empty string, got {model!r}")
    if api_mode not in API_MODES:
        raise ValueError(f"api_mode must be one of {API_MODES}, got {api_mode!r}")
    route = Route(provider, model, api_mode)
    aux = _live(_current.get())
    if aux is not None:
        aux.route = route
    else:
        _route.set(route)


def current_route() -> Route | None:
    aux = _current.get()
    if aux is not None and aux.left:  # checked here, not called: every provider call asks
        aux = _live(aux)
    if aux is not None and aux.route is not None:
        return aux.route
    return _route.get()


def next_attempt_metadata() -> dict[str, Any] | None:
    """Identity for the next attempt of the current auxiliary call (None outside one)."""
    aux = _current.get()
    if aux is not None and aux.left:
        aux = _live(aux)
    if aux is None:
        return None
    aux.release_own()  # a new attempt starts: the last one's response was not validated
    meta = {cv.API_REQUEST_ID: aux.api_request_id, cv.CALL_ROLE: aux.call_role, cv.RETRY_COUNT: aux.attempts}
    aux.attempts += 1
    return meta


def join_logical_call(api_request_id: str, call_role: str = "primary", *, attempts: int = 0) -> _Auxiliary:
    """The completions made here, until ``leave_logical_call(joined)`` (``joined``: what this returns), are
    attempts of the logical call ``api_request_id`` (opened by ``calls.open_logical_call``), numbered from
    ``attempts`` (those it already has); its opener completes it."""
    if not isinstance(api_request_id, str) or not api_request_id:
        raise ValueError(f"api_request_id must be a non-empty string, got {api_request_id!r}")
    aux = _Auxiliary(call_role, api_request_id, call_role, attempts=attempts)
    aux.token = _current.set(aux)
    return aux


def leave_logical_call(joined: _Auxiliary) -> None:
    """Completions made from here on, in any context, are not attempts of the call ``joined`` joined."""
    joined.left = True  # for a context the reset below cannot reach
    if joined.token is None:
        return
    try:
        _current.reset(joined.token)
    except ValueError:  # ended from another context (a framework's callback on another task): nothing is ours here
        pass


def count_renewed_attempt(api_request_id: str) -> None:
    """An attempt of the current auxiliary call was re-sent as a new one (a budget's downgrade): number after it."""
    aux = _live(_current.get())
    if aux is not None and aux.api_request_id == api_request_id:
        aux.attempts += 1


def in_auxiliary_call() -> bool:
    aux = _current.get()
    # Outside any (every plain provider call asks): no ``_live`` frame.
    return aux is not None and _live(aux) is not None


def _task_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    task = kwargs["task"] if "task" in kwargs else (args[0] if args else None)
    if not isinstance(task, str) or not task:
        raise TypeError(f"an @auxiliary_call function takes its task name as the first argument or task=; got {task!r}")
    return task


def _settle(aux: _Auxiliary, outcome: str) -> None:
    """Complete the logical call with ``outcome`` unless it already completed or never started."""
    if aux.completed or not aux.attempts:
        return
    aux.completed = True
    calls.complete_logical_call(aux.api_request_id, outcome=outcome)


def _settle_on_return(aux: _Auxiliary) -> None:
    """The function returned without validating: close the call with its last attempt's outcome.

    A call whose stream is still open is left to the stream, which settles it when it ends.
    """
    if aux.completed or not aux.attempts:
        return
    turn = session.active_turn()
    call = turn.logical_llm_calls.get(aux.api_request_id) if turn is not None else None
    if call is None or call.open_streams or call.in_flight or call.last_outcome is None:
        return
    _settle(aux, call.last_outcome)


def _begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[_Auxiliary, tuple[Any, Any]]:
    task = _task_of(args, kwargs)
    aux = _Auxiliary(task, new_id(), f"auxiliary:{task}", running=True)
    return aux, (_current.set(aux), calls.response_validator.set(aux))


def _end(aux: _Auxiliary, tokens: tuple[Any, Any], error: BaseException | None) -> None:
    _current.reset(tokens[0])
    calls.response_validator.reset(tokens[1])
    aux.running = False  # a stream still open settles the call when it ends
    aux.release()  # a response nobody validated was still an answer
    if error is not None:
        _settle(aux, outcome_of(error))
    else:
        _settle_on_return(aux)


def _run_sync(wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    aux, tokens = _begin(args, kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        _end(aux, tokens, exc)
        raise
    if inspect.iscoroutine(result) and not aux.attempts:
        # An async function behind a sync face (a callable object, a plain wrapper): its body
        # runs when awaited, so that is when the logical call is.
        _current.reset(tokens[0])
        calls.response_validator.reset(tokens[1])
        return _run_async(lambda *_args, **_kwargs: result, args, kwargs)
    _end(aux, tokens, None)
    return result


async def _run_async(wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    aux, tokens = _begin(args, kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _end(aux, tokens, exc)
        raise
    _end(aux, tokens, None)
    return result


def auxiliary_call(fn: F) -> F:
    """Make one run of the decorated (sync or async) function one logical LLM call."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        # Its body runs after the call returned, between the caller's steps: its attempts
        # would be recorded outside the logical call (or the caller's inside it).
        raise TypeError(
            f"@auxiliary_call cannot decorate {getattr(fn, '__name__', fn)!r}: a generator function is not one "
            f"call; decorate a function that returns the response (or the stream)"
        )
    return _auxiliary_wrapper(fn)  # type: ignore[return-value]


@wrapt.decorator
def _auxiliary_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if inspect.iscoroutinefunction(wrapped):
        return _run_async(wrapped, args, kwargs)
    return _run_sync(wrapped, args, kwargs)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _has_content(response: Any) -> tuple[bool, str]:
    """Whether a chat-completions, responses or messages response carries an answer, and why not."""
    choices = _field(response, "choices")
    if choices is not None:
        if not choices:
            return False, "no choices"
        message = _field(choices[0], "message")
        if message is None:
            return False, "first choice has no message"
        content = _field(message, "content")
        if (isinstance(content, str) and content.strip()) or _field(message, "tool_calls"):
            return True, ""
        return False, "empty message content"
    output = _field(response, "output")
    if output is not None:
        text = _field(response, "output_text")
        if output and ((isinstance(text, str) and text.strip()) or text is None):
            return True, ""
        for item in output or ():
            kind = _field(item, "type")
            if isinstance(kind, str) and kind.endswith("_call"):  # function_call, custom_tool_call, ...
                return True, ""
        return False, "empty output"
    content = _field(response, "content")
    if isinstance(content, list):
        for block in content:
            kind = _field(block, "type")
            text = _field(block, "text")
            if kind == "tool_use" or (isinstance(text, str) and text.strip()):
                return True, ""
        return False, "empty content"
    return False, "no choices, output or content"


def validate_response(response: Any, task: str) -> Any:
    """Return ``response`` if it carries an answer, completing the logical call as a success once.

    Raises ``ResponseRejected`` (a ``RuntimeError``: "Auxiliary <task>: LLM returned invalid
    response (...)") otherwise, and the attempt that answered ends failed with that reason;
    the logical call stays open for a retry.
    """
    ok, why = (False, "no response") if response is None else _has_content(response)
    aux = _live(_current.get())
    if not ok:
        rejected = ResponseRejected(f"Auxiliary {task}: LLM returned invalid response ({why})")
        if aux is not None:
            aux.release_answer(response, rejected)  # the attempt that answered ends failed, saying why
        raise rejected
    if aux is None:
        return response
    aux.release_answer(response)
    if not aux.completed:
        aux.completed = True
        calls.complete_logical_call(aux.api_request_id, outcome="success")
    return response
