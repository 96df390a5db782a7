"""Running an execution-intercept chain around a terminal call.

``next`` may be called any number of times (retry, fan-out); each call runs the
rest of the chain afresh. ``break_chain`` on an entry makes its ``next`` go
straight to the terminal call.

Every terminal call is recorded by the chain's owner: the run remembers what the
last one answered, and a further one hands that answer to ``owner.again``, which
ends its record and opens the next (an LLM attempt per provider call). The first
call pays only for remembering its answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from types import GeneratorType
from typing import Any, Protocol

from .intercepts import Intercept


def is_awaitable(value: Any) -> bool:
    """``inspect.isawaitable`` at a fraction of its cost for the usual non-awaitable values."""
    kind = type(value)
    return hasattr(kind, "__await__") or (kind is GeneratorType and inspect.isawaitable(value))


def refuse_awaitable(value: Any, message: str) -> None:
    """Raise ``TypeError(message)`` for an awaitable met in synchronous code, closing it so it never warns."""
    close = getattr(value, "close", None)
    if close is not None:
        close()
    raise TypeError(message)


class Failed:
    """What a terminal call answered when it raised."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


# What the last terminal call of a run answered, before there was one and while it is running.
UNSENT: Any = object()
IN_FLIGHT: Any = object()


class Answered(Protocol):
    """The record of one further terminal call, ended by its own answer (see ``Liveness.again``)."""

    def answered(self, response: Any, error: BaseException | None) -> None: ...


class Liveness(Protocol):
    """Whoever owns a chain run: its continuations work only while ``live`` is True."""

    live: bool

    def fell_back(self, name: str, error: BaseException) -> None:
        """The run returned although its last terminal call raised ``error``: intercept ``name`` caught it
        and answered in its place (a fallback). Not called for streams."""
        ...

    def again(self, request: Any, previous: Any, stream: bool) -> tuple[Answered | None, Any]:
        """A further terminal call starts; ``previous`` is what the last one answered (``IN_FLIGHT``
        while it still runs: a concurrent call). Returns the record this call's own answer ends (the
        call is then no run's "last"), or None when the owner goes on as this call's record; and the
        value to call the terminal with (a budget may re-aim an LLM call at a cheaper model). What it
        raises (a budget refusing the call) is raised from ``next``, as the terminal call's own error."""
        ...

    def outrun(self) -> Answered | None:
        """The run returned while its last terminal call is still in flight (a race another call won): that
        call's record goes on without the owner, and its own answer ends it. Not called for streams."""
        ...

    def answered_instead(self, name: str, own: Any) -> None:
        """The run returned something other than what its last terminal call answered (``own``): intercept
        ``name`` answered in its place (a second opinion that keeps the first). Not called for streams."""
        ...


class Live:
    """A ``Liveness`` for a chain that settles when its run returns (tool calls: one record per call)."""

    __slots__ = ("live",)

    def __init__(self) -> None:
        self.live = True

    def again(self, request: Any, previous: Any, stream: bool) -> tuple[Answered | None, Any]:
        return None, request

    def fell_back(self, name: str, error: BaseException) -> None:
        return None

    def outrun(self) -> Answered | None:
        return None

    def answered_instead(self, name: str, own: Any) -> None:
        return None


DEAD_CONTINUATION = "execution continuation is no longer active: its call has settled"


def _dead(owner: Liveness) -> None:
    """Refuse a continuation called once its call settled; unless the end of its turn ended the call's
    record while the call ran (``abandoned``): the call then goes on, unrecorded, and returns its answer."""
    if not getattr(owner, "abandoned", False):
        raise RuntimeError(DEAD_CONTINUATION)


def run_sync(
    chain: tuple[Intercept, ...],
    name: str,
    value: Any,
    terminal: Callable[[Any], Any],
    owner: Liveness,
    stream: bool = False,
) -> Any:
    """Run ``chain`` around ``terminal``; a ``next`` kept and called once ``owner`` settled raises."""
    if not chain:
        return terminal(value)
    last = UNSENT  # what the last terminal call answered
    caught_by: str | None = None  # the innermost intercept that returned after that call raised
    outrun: Answered | None = None  # the record of a call still in flight when the run returned

    def end(v: Any) -> Any:
        nonlocal last, caught_by
        if not owner.live:
            _dead(owner)
            return terminal(v)
        if last is not UNSENT:
            try:
                beside, v = owner.again(v, last, stream)
            except BaseException as exc:
                if last is not IN_FLIGHT:  # refused before it was sent: the last call, and it failed
                    last, caught_by = Failed(exc), None
                raise
            if beside is not None:
                return _answer_beside(beside, terminal, v)
        last = IN_FLIGHT
        caught_by = None
        try:
            result = terminal(v)
        except BaseException as exc:
            last = Failed(exc)
            if outrun is not None:
                outrun.answered(None, exc)
            raise
        last = result
        if outrun is not None:
            outrun.answered(result, None)
        return result

    def returned(entry: Intercept, result: Any) -> None:
        """An intercept of the chain returned: if the last terminal call raised, it caught that; if it returned
        something else than that call's answer, it answered in its place."""
        nonlocal caught_by
        if caught_by is None and (type(last) is Failed or _instead(last, result)):
            caught_by = entry.name

    # The first intercept is called here, the rest through continuations built back to front: a
    # chain of one (the common case) builds no continuation but ``end``.
    rest: Callable[[Any], Any] = end
    for entry in reversed(chain[1:]):
        rest = _link_sync(entry, name, end if entry.break_chain else rest, owner, returned)
    first = chain[0]
    result = first.fn(name, value, end if first.break_chain else rest)
    if is_awaitable(result):
        _refuse_async_intercept(first, result)
    if type(last) is Failed and not stream:
        owner.fell_back(caught_by or first.name, last.error)
    elif last is IN_FLIGHT and not stream:
        outrun = owner.outrun()
        _answer_outrun(outrun, last)
    elif not stream and _instead(last, result):
        owner.answered_instead(caught_by or first.name, last)
    return result


async def run_async(
    chain: tuple[Intercept, ...],
    name: str,
    value: Any,
    terminal: Callable[[Any], Awaitable[Any]],
    owner: Liveness,
    stream: bool = False,
) -> Any:
    """``run_sync`` for async terminals and intercepts (whose ``next`` calls may also run concurrently)."""
    if not chain:
        return await terminal(value)
    last = UNSENT
    caught_by: str | None = None
    outrun: Answered | None = None

    async def end(v: Any) -> Any:
        nonlocal last, caught_by
        if not owner.live:
            _dead(owner)
            return await terminal(v)
        if last is not UNSENT:
            try:
                beside, v = owner.again(v, last, stream)
            except BaseException as exc:
                if last is not IN_FLIGHT:  # refused before it was sent: the last call, and it failed
                    last, caught_by = Failed(exc), None
                raise
            if beside is not None:
                return await _answer_beside_async(beside, terminal, v)
        last = IN_FLIGHT
        caught_by = None
        try:
            result = await terminal(v)
        except BaseException as exc:
            last = Failed(exc)
            if outrun is not None:
                outrun.answered(None, exc)
            raise
        last = result
        if outrun is not None:
            outrun.answered(result, None)
        return result

    def returned(entry: Intercept, result: Any) -> None:
        nonlocal caught_by
        if caught_by is None and (type(last) is Failed or _instead(last, result)):
            caught_by = entry.name

    rest: Callable[[Any], Awaitable[Any]] = end
    for entry in reversed(chain[1:]):
        rest = _link_async(entry, name, end if entry.break_chain else rest, owner, returned)
    first = chain[0]
    result = first.fn(name, value, end if first.break_chain else rest)
    if is_awaitable(result):
        result = await result
    if type(last) is Failed and not stream:
        owner.fell_back(caught_by or first.name, last.error)
    elif last is IN_FLIGHT and not stream:
        outrun = owner.outrun()
        _answer_outrun(outrun, last)
    elif not stream and _instead(last, result):
        owner.answered_instead(caught_by or first.name, last)
    return result


def _link_sync(
    entry: Intercept,
    name: str,
    rest: Callable[[Any], Any],
    owner: Liveness,
    returned: Callable[[Intercept, Any], None],
) -> Callable[[Any], Any]:
    """The continuation that runs ``entry`` (then ``rest``): what the intercept before it gets as ``next``."""

    def call(v: Any) -> Any:
        if not owner.live:
            _dead(owner)
        result = entry.fn(name, v, rest)
        if is_awaitable(result):
            _refuse_async_intercept(entry, result)
        returned(entry, result)
        return result

    return call


def _link_async(
    entry: Intercept,
    name: str,
    rest: Callable[[Any], Awaitable[Any]],
    owner: Liveness,
    returned: Callable[[Intercept, Any], None],
) -> Callable[[Any], Awaitable[Any]]:
    async def call(v: Any) -> Any:
        if not owner.live:
            _dead(owner)
        result = entry.fn(name, v, rest)
        if is_awaitable(result):
            result = await result
        returned(entry, result)
        return result

    return call


def _instead(last: Any, result: Any) -> bool:
    """Whether a chain (or an intercept of it) returning ``result`` answered in place of its last terminal call,
    which answered ``last``."""
    return result is not last and last is not UNSENT and last is not IN_FLIGHT and type(last) is not Failed


def _refuse_async_intercept(entry: Intercept, result: Any) -> None:
    refuse_awaitable(
        result,
        f"execution intercept {entry.name!r} returned an awaitable in a synchronous call; "
        "register a synchronous function or use the async API",
    )


def _answer_outrun(record: Answered | None, last: Any) -> None:
    """The outrun call answered (on another thread) before its record was handed over: it saw no record
    to end, so end it here. A record is ended once however both sides race (see ``Attempt.outrun``)."""
    if record is None or last is IN_FLIGHT:
        return
    if type(last) is Failed:
        record.answered(None, last.error)
    else:
        record.answered(last, None)


def _answer_beside(record: Answered, terminal: Callable[[Any], Any], value: Any) -> Any:
    """A terminal call with a record of its own (made while another was in flight): its answer ends it."""
    try:
        result = terminal(value)
    except BaseException as exc:
        record.answered(None, exc)
        raise
    record.answered(result, None)
    return result


async def _answer_beside_async(record: Answered, terminal: Callable[[Any], Awaitable[Any]], value: Any) -> Any:
    try:
        result = await terminal(value)
    except BaseException as exc:
        record.answered(None, exc)
        raise
    record.answered(result, None)
    return result


def run_filters(chain: tuple[Intercept, ...], call: Callable[[Intercept, Any], Any], value: Any) -> Any:
    """Thread ``value`` through request/response style intercepts, honouring ``break_chain``."""
    for entry in chain:
        value = call(entry, value)
        if is_awaitable(value):
            refuse_awaitable(value, f"intercept {entry.name!r} must be synchronous; it returned an awaitable")
        if entry.break_chain:
            break
    return value
