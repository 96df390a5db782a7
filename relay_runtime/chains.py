"""Running an execution-intercept chain around a terminal call.

``next`` may be called any number of times (retry, fan-out); each call runs the
rest of the chain afresh. ``break_chain`` on an entry makes its ``next`` go
straight to the terminal call.
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


class Liveness(Protocol):
    """Whoever owns a chain run: its continuations work only while ``live`` is True."""

    live: bool


class Live:
    """A ``Liveness`` for a chain that settles when its run returns (tool calls)."""

    __slots__ = ("live",)

    def __init__(self) -> None:
        self.live = True


DEAD_CONTINUATION = "execution continuation is no longer active: its call has settled"


def _dead() -> None:
    raise RuntimeError(DEAD_CONTINUATION)


def run_sync(
    chain: tuple[Intercept, ...], name: str, value: Any, terminal: Callable[[Any], Any], owner: Liveness
) -> Any:
    """Run ``chain`` around ``terminal``; a ``next`` kept and called once ``owner`` settled raises."""
    if not chain:
        return terminal(value)

    def end(v: Any) -> Any:
        if not owner.live:
            _dead()
        return terminal(v)

    def step(i: int) -> Callable[[Any], Any]:
        if i == len(chain):
            return end
        entry = chain[i]
        rest = end if entry.break_chain else step(i + 1)

        def call(v: Any) -> Any:
            if not owner.live:
                _dead()
            result = entry.fn(name, v, rest)
            if is_awaitable(result):
                refuse_awaitable(
                    result,
                    f"execution intercept {entry.name!r} returned an awaitable in a synchronous call; "
                    "register a synchronous function or use the async API",
                )
            return result

        return call

    return step(0)(value)


async def run_async(
    chain: tuple[Intercept, ...], name: str, value: Any, terminal: Callable[[Any], Awaitable[Any]], owner: Liveness
) -> Any:
    if not chain:
        return await terminal(value)

    async def end(v: Any) -> Any:
        if not owner.live:
            _dead()
        return await terminal(v)

    def step(i: int) -> Callable[[Any], Awaitable[Any]]:
        if i == len(chain):
            return end
        entry = chain[i]
        rest = end if entry.break_chain else step(i + 1)

        async def call(v: Any) -> Any:
            if not owner.live:
                _dead()
            result = entry.fn(name, v, rest)
            if is_awaitable(result):
                result = await result
            return result

        return call

    return await step(0)(value)


def run_filters(chain: tuple[Intercept, ...], call: Callable[[Intercept, Any], Any], value: Any) -> Any:
    """Thread ``value`` through request/response style intercepts, honouring ``break_chain``."""
    for entry in chain:
        value = call(entry, value)
        if is_awaitable(value):
            refuse_awaitable(value, f"intercept {entry.name!r} must be synchronous; it returned an awaitable")
        if entry.break_chain:
            break
    return value
