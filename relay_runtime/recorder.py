"""An in-memory subscriber, for tests and for drawing a run after the fact."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from .events import MARK, SCOPE_END, SCOPE_START, Event


class Recorder:
    """Keeps every event it is given, in order. Register with ``chunks=True`` to keep chunk marks too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self.events))

    def __len__(self) -> int:
        return len(self.events)

    def clear(self) -> None:
        with self._lock:
            self.events.clear()

    def starts(self, **where: Any) -> list[Event]:
        return self.select(SCOPE_START, **where)

    def ends(self, **where: Any) -> list[Event]:
        return self.select(SCOPE_END, **where)

    def marks(self, **where: Any) -> list[Event]:
        return self.select(MARK, **where)

    def select(self, kind: str | None = None, **where: Any) -> list[Event]:
        """Events of ``kind`` whose attributes equal ``where``; ``relay_kind=`` matches metadata['relay.kind']."""
        relay_kind = where.pop("relay_kind", None)
        out = []
        for e in list(self.events):
            if kind is not None and e.kind != kind:
                continue
            if relay_kind is not None and (e.metadata or {}).get("relay.kind") != relay_kind:
                continue
            if all(getattr(e, k) == v for k, v in where.items()):
                out.append(e)
        return out
