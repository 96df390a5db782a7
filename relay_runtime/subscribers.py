"""Subscriber registration and synchronous, fail-open delivery."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from .diagnostics import Diagnostics
from .events import KINDS, MARK, SCOPE_END, SCOPE_START, Event

Subscriber = Callable[[Event], object]


class _Entry(NamedTuple):
    name: str
    callback: Subscriber
    kinds: frozenset[str]
    chunks: bool


# A subscriber that tells events apart by kind may say which of its methods takes each (a dict of kind ->
# callable under this attribute, each doing what calling the subscriber does with an event of that kind):
# its entry for that kind then calls that method, with no dispatch on the kind per event.
KIND_HANDLERS = "relay_kind_handlers"


def _for_kind(entry: _Entry, kind: str) -> _Entry:
    handlers = getattr(entry.callback, KIND_HANDLERS, None)
    if type(handlers) is not dict:  # only a dict: a mock's made-up attribute is no table of handlers
        return entry
    handler = handlers.get(kind)
    return entry._replace(callback=handler) if callable(handler) else entry


class Subscribers:
    """Who wants which events.

    The per-kind tuples are rebuilt on every (rare) registration change so the
    hot path only reads an attribute and tests its truth: no subscriber for a
    kind means the event is never built.
    """

    def __init__(self, diagnostics: Diagnostics) -> None:
        self._diagnostics = diagnostics
        self._lock = threading.Lock()
        self._entries: tuple[_Entry, ...] = ()
        self.start: tuple[_Entry, ...] = ()
        self.end: tuple[_Entry, ...] = ()
        self.mark: tuple[_Entry, ...] = ()
        self.chunk: tuple[_Entry, ...] = ()
        # Whether anyone would see an LLM attempt at all (its start, end or chunks).
        self.llm = False
        # The RedactionPolicy applied before delivery (relay_runtime.redaction_install), or None.
        self.policy: Any = None

    def register(
        self,
        callback: Subscriber | str,
        second: Subscriber | None = None,
        *,
        name: str | None = None,
        kinds: Iterable[str] | None = None,
        chunks: bool = False,
    ) -> str:
        """Add a subscriber; returns its name. Stream chunk marks reach it only with ``chunks=True``.

        ``register(callback, name=...)``, or NeMo Relay's order ``register("name", callback)``.
        """
        if isinstance(callback, str):
            if second is None or name is not None:
                raise TypeError(
                    f"register({callback!r}): a string first argument is the subscriber's name "
                    f"(NeMo's order) and must be followed by a callable, with no name= keyword"
                )
            name = callback
            callback = second
        elif second is not None:
            raise TypeError(
                f"register() takes register(callback, name=...) or register(name, callback), "
                f"got a second positional argument after a {type(callback).__name__}"
            )
        if not callable(callback):
            raise TypeError(f"subscriber must be callable, got {type(callback).__name__}")
        wanted = frozenset(KINDS if kinds is None else kinds)
        unknown = wanted - set(KINDS)
        if unknown:
            raise ValueError(f"unknown event kinds {sorted(unknown)}; expected some of {list(KINDS)}")
        if name is None:
            name = f"{getattr(callback, '__qualname__', type(callback).__name__)}@{id(callback):x}"
        with self._lock:
            if any(e.name == name for e in self._entries):
                raise ValueError(f"a subscriber named {name!r} is already registered")
            self._rebuild((*self._entries, _Entry(name, callback, wanted, chunks)))
        return name

    def deregister(self, name_or_callback: str | Subscriber) -> bool:
        with self._lock:
            kept = tuple(e for e in self._entries if e.name != name_or_callback and e.callback is not name_or_callback)
            if len(kept) == len(self._entries):
                return False
            self._rebuild(kept)
            return True

    def names(self) -> list[str]:
        return [e.name for e in self._entries]

    def clear(self) -> None:
        with self._lock:
            self._rebuild(())

    def _rebuild(self, entries: tuple[_Entry, ...]) -> None:
        self._entries = entries
        self.start = tuple(_for_kind(e, SCOPE_START) for e in entries if SCOPE_START in e.kinds)
        self.end = tuple(_for_kind(e, SCOPE_END) for e in entries if SCOPE_END in e.kinds)
        self.mark = tuple(_for_kind(e, MARK) for e in entries if MARK in e.kinds)
        self.chunk = tuple(_for_kind(e, MARK) for e in entries if MARK in e.kinds and e.chunks)
        self.llm = bool(self.start or self.end or self.chunk)

    def deliver(self, targets: tuple[_Entry, ...], event: Event) -> None:
        """Call each target in registration order; a failing one is counted and logged, never raised.

        A ``BaseException`` (KeyboardInterrupt, SystemExit) does propagate, but only once
        every other subscriber has had the event: none misses a record for it.
        """
        # The loop holds nothing for the rare interruption: four deliveries per model call pay no bookkeeping.
        for entry in targets:
            try:
                entry.callback(event)
            except Exception as exc:
                self._failed(entry, exc)
            except BaseException:
                self._deliver_after(targets, entry, event)
                raise

    def _failed(self, entry: _Entry, exc: Exception) -> None:
        self._diagnostics.failure(f"subscriber_errors.{entry.name}", exc, f"subscriber {entry.name!r}")
        self._diagnostics.count("subscriber_errors")

    def _deliver_after(self, targets: tuple[_Entry, ...], interrupted_in: _Entry, event: Event) -> None:
        """The targets after ``interrupted_in`` get ``event`` all the same (``deliver`` again, which hands it on past
        a later interruption too); the first interruption is the one raised, by the caller, a later one dropped."""
        position = next(i for i, entry in enumerate(targets) if entry is interrupted_in)
        try:
            self.deliver(targets[position + 1 :], event)
        except BaseException:
            pass
