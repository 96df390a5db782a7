"""The start of a span whose scope shares its span hints with many others, planned once.

An MCP client's requests of one tool over one connection all carry the same hints object (its
``Link`` makes them once). What a span's start makes of such a scope (its name, kind and
attributes: the role's own, then the hinted ones merged over them) is the same each time, so it
is worked out at one start and copied at the next, instead of being built and merged key by key
per request.

Safe because hints once given are not changed in place (``cv.SPAN_HINTS``): the same object is
the same hints. What else the start reads is checked at each use: the scope's role, its name,
its conversation, and a metadata holding nothing but its kind and its hints (a tool call id, a
``relay.*`` key would add attributes of their own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanKind

from relay_runtime import conventions as cv
from relay_runtime.events import Event

from . import attributes as A
from .deferred import kept_as_given

# With only these in its metadata, a tool's or a plain scope's start attributes come from its name,
# its conversation and its hints alone (``attributes.span_start``).
_KIND = cv.KIND
_SPAN_HINTS = cv.SPAN_HINTS
# A metadata holds no other key when it holds as many keys as it holds of these: counted (``md.keys() <= {...}``,
# which walks the view through the set protocol, took about twice as long).
_PLANNED_ROLES = (A.TOOL, A.SCOPE)
# Hints are few per process (per connection and tool): past this many, the plans start over.
MAX_PLANS = 64

# (hints, role, scope name, conversation id, span name, span kind, start attributes, whether the SDK keeps those
# exactly as given: ``deferred.kept_as_given``)
Plan = tuple[Mapping[str, Any], str, str, "str | None", str, SpanKind, dict[str, Any], bool]


class StartPlans:
    """Plans of span starts, keyed by their hints object (held, so its id is not reused meanwhile).

    Only hints seen at a second start get one: an integration that makes new hints per request
    (an MCP server's carry the request's own id) pays one lookup, and no copy is made or kept."""

    __slots__ = ("_seen", "plans")

    def __init__(self) -> None:
        # Read by the exporter's ``_start`` in place (a call less per span start), which checks a plan it finds
        # against the start: the same hints object, role, scope name and conversation, and a metadata holding
        # nothing but its kind and its hints.
        self.plans: dict[int, Plan] = {}
        self._seen: dict[int, Mapping[str, Any]] = {}

    def keep(
        self,
        hints: Mapping[str, Any],
        event: Event,
        role: str,
        conversation_id: str | None,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
    ) -> None:
        """After a start made the usual way: ``attributes`` as its hints left them (before any content)."""
        md = event.metadata
        if role not in _PLANNED_ROLES or len(md) != (_KIND in md) + (_SPAN_HINTS in md):
            return
        key = id(hints)
        if self._seen.get(key) is not hints:
            if len(self._seen) >= MAX_PLANS:
                self._seen.clear()
            self._seen[key] = hints
            return
        if len(self.plans) >= MAX_PLANS:
            self.plans.clear()
        self.plans[key] = (
            hints, role, event.name, conversation_id, name, kind, dict(attributes), kept_as_given(attributes)
        )  # fmt: skip
