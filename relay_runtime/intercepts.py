"""Guardrails and intercepts: registration and chain resolution.

Order: lower priority first, ties by name; global registrations before the
scope-local ones of the active scopes (outermost scope first), stable-merged
by priority. Chains are immutable tuples rebuilt on registration, so a call in
flight keeps the chain it resolved however the registry changes meanwhile.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .scopes import ScopeHandle, Scopes

LLM_GUARDRAIL = "llm_guardrail"
LLM_REQUEST = "llm_request"
LLM_EXECUTION = "llm_execution"
LLM_STREAM_EXECUTION = "llm_stream_execution"
LLM_RESPONSE = "llm_response"
TOOL_REQUEST = "tool_request"
TOOL_EXECUTION = "tool_execution"
INTERCEPT_KINDS = (
    LLM_GUARDRAIL,
    LLM_REQUEST,
    LLM_EXECUTION,
    LLM_STREAM_EXECUTION,
    LLM_RESPONSE,
    TOOL_REQUEST,
    TOOL_EXECUTION,
)


class GuardrailRejected(RuntimeError):
    """A guardrail returned a reason to refuse the call."""

    def __init__(self, guardrail: str, reason: str) -> None:
        super().__init__(f"guardrail {guardrail!r} rejected the call: {reason}")
        self.guardrail = guardrail
        self.reason = reason


class Intercept(NamedTuple):
    priority: int
    name: str
    break_chain: bool
    fn: Callable[..., Any]
    # A coroutine function: only async calls can run it (policy kinds are awaited there).
    is_async: bool = False


_POLICY_KINDS = (LLM_GUARDRAIL, LLM_REQUEST)


def _is_coroutine_function(fn: Callable[..., Any]) -> bool:
    # A callable object counts by its ``__call__`` method.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _order(entries: list[Intercept]) -> tuple[Intercept, ...]:
    return tuple(sorted(entries, key=lambda e: (e.priority, e.name)))


def _merge(base: tuple[Intercept, ...], locals_: list[tuple[Intercept, ...]]) -> tuple[Intercept, ...]:
    """Globals, then each scope's locals (outermost first), stable-sorted by priority alone."""
    if not any(locals_):
        return base
    merged = list(base)
    for found in locals_:
        merged.extend(found)
    merged.sort(key=lambda e: e.priority)  # stable: globals stay ahead of locals on ties
    return tuple(merged)


class _Table:
    """One registry (the global one, or one scope's): kind -> ordered chain.

    ``chains`` is copied on write, never changed in place: a call that resolved
    it keeps a consistent snapshot of every kind however the registry changes.
    """

    __slots__ = ("chains",)

    def __init__(self) -> None:
        self.chains: dict[str, tuple[Intercept, ...]] = {}

    def add(self, kind: str, entry: Intercept, where: str) -> None:
        chain = self.chains.get(kind, ())
        if any(e.name == entry.name for e in chain):
            raise ValueError(f"{kind} intercept {entry.name!r} is already registered {where}")
        self.chains = {**self.chains, kind: _order([*chain, entry])}

    def remove(self, kind: str, name: str) -> Intercept | None:
        chain = self.chains.get(kind, ())
        kept = tuple(e for e in chain if e.name != name)
        if len(kept) == len(chain):
            return None
        (removed,) = (e for e in chain if e.name == name)
        chains = {**self.chains, kind: kept}
        if not kept:
            del chains[kind]
        self.chains = chains
        return removed

    def async_policy(self) -> int:
        return sum(e.is_async for kind in _POLICY_KINDS for e in self.chains.get(kind, ()))


class Intercepts:
    """``relay.intercepts``: register and deregister policy around calls."""

    def __init__(self, scopes: Scopes) -> None:
        self._scopes = scopes
        self._lock = threading.Lock()
        self._global = _Table()
        # True while anything at all is registered: the unwatched fast path tests only this.
        self.active = False
        # How many live scopes carry local intercepts: when none do, resolving a
        # chain is one dict lookup and no walk up the scope tree.
        self._scoped = 0
        # How many coroutine-function guardrails and request intercepts are registered: while
        # none are, async calls run the (cheaper) synchronous policy loop.
        self.async_policy = 0

    # -- registration ---------------------------------------------------------------

    def _register(
        self,
        kind: str,
        name: str,
        priority: int,
        break_chain: bool,
        fn: Callable[..., Any],
        scope: ScopeHandle | None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"intercept name must be a non-empty string, got {name!r}")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError(f"intercept {name!r}: priority must be an int, got {priority!r}")
        if not callable(fn):
            raise TypeError(f"intercept {name!r}: callback must be callable, got {type(fn).__name__}")
        entry = Intercept(priority, name, bool(break_chain), fn, kind in _POLICY_KINDS and _is_coroutine_function(fn))
        with self._lock:
            if scope is None:
                self._global.add(kind, entry, "globally")
                self.active = True
                self.async_policy += entry.is_async
                return
            if scope.ended:
                raise ValueError(f"cannot register {kind} intercept {name!r} on {scope!r}: it has ended")
            if scope.local_intercepts is None:
                scope.local_intercepts = _Table()
                self._scoped += 1
            scope.local_intercepts.add(kind, entry, f"on {scope!r}")
            self.active = True
            self.async_policy += entry.is_async

    def _deregister(self, kind: str, name: str, scope: ScopeHandle | None) -> bool:
        with self._lock:
            if scope is None:
                removed = self._global.remove(kind, name)
            else:
                table = scope.local_intercepts
                removed = table.remove(kind, name) if table is not None else None
            if removed is not None:
                self.async_policy -= removed.is_async
            self._refresh_active()
            return removed is not None

    def _refresh_active(self) -> None:
        self.active = self._scoped > 0 or any(self._global.chains.values())

    def register_llm_guardrail(
        self, name: str, priority: int, fn: Callable[..., str | None], *, scope: ScopeHandle | None = None
    ) -> None:
        """``fn(name, request, annotated)`` returns None to allow the call or a reason to reject it."""
        self._register(LLM_GUARDRAIL, name, priority, False, fn, scope)

    def deregister_llm_guardrail(self, name: str, *, scope: ScopeHandle | None = None) -> bool:
        return self._deregister(LLM_GUARDRAIL, name, scope)

    def register_llm_request(
        self,
        name: str,
        priority: int,
        break_chain: bool,
        fn: Callable[..., Any],
        *,
        scope: ScopeHandle | None = None,
    ) -> None:
        """``fn(name, request, annotated)`` returns an ``LLMRequestInterceptOutcome``."""
        self._register(LLM_REQUEST, name, priority, break_chain, fn, scope)

    def deregister_llm_request(self, name: str, *, scope: ScopeHandle | None = None) -> bool:
        return self._deregister(LLM_REQUEST, name, scope)

    def register_llm_execution(
        self,
        name: str,
        priority: int,
        fn: Callable[..., Any],
        *,
        break_chain: bool = False,
        scope: ScopeHandle | None = None,
    ) -> None:
        """``fn(name, request, next)``; ``next(request)`` runs the rest of the chain and may be called often."""
        self._register(LLM_EXECUTION, name, priority, break_chain, fn, scope)

    def deregister_llm_execution(self, name: str, *, scope: ScopeHandle | None = None) -> bool:
        return self._deregister(LLM_EXECUTION, name, scope)

    def register_llm_stream_execution(
        self,
        name: str,
        priority: int,
        fn: Callable[..., Any],
        *,
        break_chain: bool = False,
        scope: ScopeHandle | None = None,
    ) -> None:
        """``fn(name, request, next)`` returns an iterable of chunks; ``next(request)`` opens the rest."""
        self._register(LLM_STREAM_EXECUTION, name, priority, break_chain, fn, scope)

    def deregister_llm_stream_execution(self, name: str, *, scope: ScopeHandle | None = None) -> bool:
        return self._deregister(LLM_STREAM_EXECUTION, name, scope)

    def register_llm_response(
        self,
        name: str,
        priority: int,
        break_chain: bool,
        fn: Callable[..., Any],
        *,
        scope: ScopeHandle | None = None,
    ) -> None:
        """``fn(name, request, response)`` returns the response the caller gets."""
        self._register(LLM_RESPONSE, name, priority, break_chain, fn, scope)

    def deregister_llm_response(self, name: str, *, scope: ScopeHandle | None = None) -> bool:
        return self._deregister(LLM_RESPONSE, name, scope)

    def register_tool_request(
        self,
        name: str,
        priority: int,
        break_chain: bool,
        fn: Callable[..., Any],
        *,
        scope: ScopeHandle | None = None,
    ) -> None:
        """``fn(tool_name, args)`` returns the arguments the tool gets."""
        self._register(TOOL_REQUEST, name, priority, break_chain, fn, scope)

    def deregister_tool_request(self, name: str, *, scope: ScopeHandle | None = None) -> bool:
        return self._deregister(TOOL_REQUEST, name, scope)

    def register_tool_execution(
        self,
        name: str,
        priority: int,
        fn: Callable[..., Any],
        *,
        break_chain: bool = False,
        scope: ScopeHandle | None = None,
    ) -> None:
        """``fn(tool_name, args, next)``; ``next(args)`` runs the rest of the chain."""
        self._register(TOOL_EXECUTION, name, priority, break_chain, fn, scope)

    def deregister_tool_execution(self, name: str, *, scope: ScopeHandle | None = None) -> bool:
        return self._deregister(TOOL_EXECUTION, name, scope)

    def clear(self) -> None:
        with self._lock:
            self.async_policy -= self._global.async_policy()
            self._global = _Table()
            self._refresh_active()

    # -- resolution -----------------------------------------------------------------

    def chain(self, kind: str, anchor: ScopeHandle | None = None) -> tuple[Intercept, ...]:
        """The chain a call made under ``anchor`` (default: the current scope) runs, in order."""
        base = self._global.chains.get(kind, ())
        if not self._scoped:
            return base
        return _merge(base, [t.get(kind, ()) for t in self._local_tables(anchor)])

    def resolve(self, anchor: ScopeHandle | None = None) -> Mapping[str, tuple[Intercept, ...]]:
        """Every kind's chain for a call made under ``anchor``, resolved once for the whole call."""
        base = self._global.chains
        if not self._scoped:
            return base
        tables = self._local_tables(anchor)
        if not tables:
            return base
        kinds = set(base).union(*tables)
        return {kind: _merge(base.get(kind, ()), [t.get(kind, ()) for t in tables]) for kind in kinds}

    def _local_tables(self, anchor: ScopeHandle | None) -> list[dict[str, tuple[Intercept, ...]]]:
        """The scope-local registries of the open scopes above ``anchor``, outermost first."""
        node = anchor if anchor is not None else self._scopes.current()
        tables: list[dict[str, tuple[Intercept, ...]]] = []
        while node is not None:
            table = node.local_intercepts
            if table is not None and not node.ended and table.chains:
                tables.append(table.chains)
            node = node.parent
        tables.reverse()
        return tables

    def scope_ended(self, handle: ScopeHandle) -> None:
        if handle.local_intercepts is not None:
            with self._lock:
                table = handle.local_intercepts
                if table is None:
                    return
                self.async_policy -= table.async_policy()
                handle.local_intercepts = None
                self._scoped -= 1
                self._refresh_active()
