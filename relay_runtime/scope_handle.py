"""A scope's handle: what ``Scopes`` opens and ends, and what callers hold in between."""

from __future__ import annotations

import time
from typing import Any

from .ids import new_id
from .ids import pooled as _pooled

_now = time.time_ns


class ScopeHandle:
    """One open (then ended) scope: its identity in the tree, its metadata, and where it stands on a stack.

    ``Scopes.opened`` calls this ``__init__`` on a bare instance (``object.__new__``) rather than calling the class:
    every scope the relay opens itself, two per framework model call, is spared ``type.__call__``'s work.
    """

    __slots__ = (
        "__weakref__",
        "attached",
        "below",
        "cost",
        "data",
        "ended",
        "local_intercepts",
        "metadata",
        "name",
        "parent",
        "parent_uuid",
        "scope_type",
        "start_ns",
        "trace_id",
        "uuid",
    )

    def __init__(
        self,
        name: str,
        scope_type: str,
        parent: ScopeHandle | None,
        metadata: dict[str, Any] | None,
        data: Any,
        attached: bool,
        below: ScopeHandle | None,
    ) -> None:
        try:
            self.uuid = _pooled()  # ``new_id()`` without its frame (see ``ids.pooled``)
        except IndexError:
            self.uuid = new_id()
        self.name = name
        self.scope_type = scope_type
        self.parent = parent
        if parent is not None:
            self.parent_uuid: str | None = parent.uuid
            self.trace_id: str = parent.trace_id
        else:
            self.parent_uuid = None
            self.trace_id = new_id()
        self.metadata = metadata
        self.data = data
        self.attached = attached
        self.below = below
        self.start_ns = _now()
        self.ended = False
        self.local_intercepts: Any = None
        # An attempt's cost, or the roll-up of the attempts below (set only when a catalog is installed).
        self.cost: Any = None

    def __repr__(self) -> str:
        return f"<scope {self.scope_type} {self.name!r} {self.uuid[:8]}>"
