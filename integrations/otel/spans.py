"""Open spans keyed by scope uuid: parentage, and ending every span exactly once.

Events for one scope may arrive on different threads (a stream started on one
thread and closed on another), so the table is guarded by a lock; each
operation holds it for a few dict operations only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span

from relay_runtime.events import Event


class OpenSpan:
    # The exporter's ``_start`` makes its records without this ``__init__`` (every field set there, to save every
    # span a frame): a field added here is set there too.
    __slots__ = ("children", "context", "conversation_id", "given", "hints", "late", "parent", "role", "span", "uuid")

    def __init__(self, uuid: str, span: Span, role: str, parent: OpenSpan | None, conversation_id: str | None):
        self.uuid = uuid
        self.span = span
        self.role = role
        self.parent = parent
        self.conversation_id = conversation_id
        # Both made on the first child only: most spans (attempts, tools) are leaves.
        self.children: dict[str, OpenSpan] | None = None
        self.context: Context | None = None
        # The span hints its start applied (``cv.SPAN_HINTS``): the same ones at its end are on it already.
        self.hints: Any = None
        # An attempt whose start said neither its provider nor its request (one a framework's callbacks
        # witnessed): what a start says of an attempt is said at its end.
        self.late = False
        # The start event of a scope that is no attempt, while spans carry no content: its end's error message may
        # quote what it was given (a tool's arguments, a chain's inputs: ``error_quotes``), read only then, as the
        # record of an input is made when read. An attempt's end carries its own request.
        self.given: Event | None = None


class SpanTable:
    """Spans started and not yet ended.

    ``max_open`` bounds memory when a caller leaks scopes that never end: past
    it, the oldest open leaf span is handed back to be ended by the exporter.
    """

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open}")
        self._max_open = max_open
        self._open: dict[str, OpenSpan] = {}
        self._lock = threading.Lock()
        # Reads take no lock (one dict lookup is atomic), and are the dict's own method:
        # every start looks its parent up. A None uuid finds nothing.
        self.get: Callable[[str | None], OpenSpan | None] = self._open.get  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self._open)

    def add(self, record: OpenSpan) -> Sequence[OpenSpan]:
        """Register a started span; returns the records evicted to stay under ``max_open``."""
        uuid = record.uuid
        open_ = self._open
        with self._lock:
            if open_.setdefault(uuid, record) is not record:
                raise ValueError(f"scope {uuid} started twice")
            parent = record.parent
            if parent is not None and parent.uuid in open_:
                children = parent.children
                if children is None:
                    children = parent.children = {}
                children[uuid] = record
            if len(open_) <= self._max_open:
                return ()
            evicted: list[OpenSpan] = []
            while len(open_) > self._max_open:
                # The oldest leaf: leaked scopes are old, and a leaf has nothing live below
                # it (the oldest span overall is usually a conversation still in use).
                oldest = next(r for r in open_.values() if not r.children)
                evicted.extend(self._remove_tree(oldest))
            return evicted

    def remove(
        self, uuid: str, sweep_roles: frozenset[str] = frozenset()
    ) -> tuple[OpenSpan | None, Sequence[OpenSpan]]:
        """Take one span out to be ended: ``(record, orphans)``; record None if it already was.

        When the record's role is in ``sweep_roles``, every span still open below it
        comes out too (``orphans``, deepest first), to be ended before it. Otherwise
        its open children are handed to the nearest open ancestor, so that ending
        that ancestor later still finds them.
        """
        with self._lock:
            record = self._open.pop(uuid, None)
            if record is None:
                return None, ()
            parent = record.parent
            if parent is not None and parent.children:
                parent.children.pop(uuid, None)
            if not record.children:
                return record, ()
            orphans: list[OpenSpan] = []
            if record.role in sweep_roles:
                for child in list(record.children.values()):
                    if child.uuid in self._open:
                        orphans.extend(self._remove_tree(child))
                record.children = None
            else:
                self._hand_down(record)
            return record, orphans

    def remove_all(self) -> list[OpenSpan]:
        with self._lock:
            records = list(self._open.values())
            self._open.clear()
        for r in records:
            r.children = None
        # Children were opened after their parents: end the newest first.
        records.reverse()
        return records

    def _remove_tree(self, root: OpenSpan) -> list[OpenSpan]:
        out: list[OpenSpan] = []
        for node in _post_order(root):
            if self._open.pop(node.uuid, None) is not None:
                out.append(node)
            node.children = None
        self._detach(root)
        return out

    def _hand_down(self, record: OpenSpan) -> None:
        """Children still open when their parent ends go to the nearest open ancestor's keeping,
        so that a turn's end still finds an attempt whose logical call ended before it."""
        children = record.children or {}
        record.children = None
        ancestor = record.parent
        while ancestor is not None and ancestor.uuid not in self._open:
            ancestor = ancestor.parent
        for child in children.values():
            child.parent = ancestor
            if ancestor is not None:
                if ancestor.children is None:
                    ancestor.children = {}
                ancestor.children[child.uuid] = child

    def _detach(self, record: OpenSpan) -> None:
        parent = record.parent
        if parent is not None and parent.children:
            parent.children.pop(record.uuid, None)


def _post_order(root: OpenSpan) -> Iterator[OpenSpan]:
    stack: list[tuple[OpenSpan, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded or not node.children:
            yield node
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in list(node.children.values()))
