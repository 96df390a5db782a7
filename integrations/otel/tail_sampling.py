"""Tail sampling by trace: decide once a turn (or a logical call outside turns) has ended what it did.

``OTelExporter(..., sampler=TailSampler(ratio=0.1))``: ended spans are held, not ended, in a
bounded buffer until their *unit* ends: the turn they belong to, else the logical call with no
turn above it, else the root scope. Then the unit is exported whole or dropped whole:

- kept when any keep rule fired on any of its spans: an error (``keep_errors``: a failed
  scope, which a budget refusal and a guardrail rejection are), an attempt or roll-up that
  cost more than ``keep_cost_above``, a scope slower than ``keep_slower_than`` seconds, or
  ``keep_if(event)`` saying so (a rule that raises keeps, counted as ``otel.sampler.rule_errors``);
- otherwise kept when the trace id falls under ``ratio`` (the same test as OTel's
  ``TraceIdRatioBased``: every unit of one trace gets the same answer).

A unit kept by a rule marks its trace: the spans above it (a conversation holding several turns)
are kept when they end, so what is exported is never cut off from its parents, and so are the
units of that trace that end later (a scope that outlived its root is a unit of its own). Units
of it that ended before were decided then: holding a whole conversation until it ends would hold
without bound. A span that reaches the buffer after its unit was decided (it ended on another
thread as the unit's root ended) goes as its unit went. When the buffer
holds ``max_buffered_spans``, a span that arrives is exported at once, unsampled, and so is
the rest of its unit (never half of it); each such unit is counted (``otel.sampler.overflow``).
An attempt's details log record (an event capture mode) goes out with its span, or not at all.
Metrics are recorded before and apart from this: they are never sampled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from relay_runtime.events import Event

from . import attributes as A

KEPT = "otel.sampler.kept_traces"
DROPPED = "otel.sampler.dropped_traces"
OVERFLOW = "otel.sampler.overflow"
RULE_ERRORS = "otel.sampler.rule_errors"

_UNIT_ROLES = (A.TURN,)
_MASK = (1 << 64) - 1
_REMEMBERED = 4096  # kept traces and decided units remembered per exporter


class TailSampler:
    """The keep rules; an exporter given one holds its spans per unit (see the module docstring)."""

    def __init__(
        self,
        ratio: float = 1.0,
        keep_errors: bool = True,
        keep_cost_above: float | None = None,
        keep_slower_than: float | None = None,
        keep_if: Callable[[Event], bool] | None = None,
        *,
        max_buffered_spans: int = 20_000,
    ) -> None:
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
            raise ValueError(f"TailSampler ratio must be a number from 0 to 1, got {ratio!r}")
        for label, value in (("keep_cost_above", keep_cost_above), ("keep_slower_than", keep_slower_than)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"TailSampler {label} must be a non-negative number or None, got {value!r}")
        if keep_if is not None and not callable(keep_if):
            raise TypeError(f"TailSampler keep_if must be callable, got {type(keep_if).__name__}")
        if type(max_buffered_spans) is not int or max_buffered_spans < 1:
            raise ValueError(f"TailSampler max_buffered_spans must be a positive int, got {max_buffered_spans!r}")
        self.ratio = float(ratio)
        self.keep_errors = keep_errors
        self.keep_cost_above = keep_cost_above
        self.keep_slower_than_ns = None if keep_slower_than is None else int(keep_slower_than * 1e9)
        self.keep_if = keep_if
        self.max_buffered_spans = max_buffered_spans
        self._bound = int(self.ratio * (1 << 64))

    def sampled(self, trace_id: int) -> bool:
        """The ratio's answer for a trace: its id's low 64 bits against the ratio (as ``TraceIdRatioBased``)."""
        return (trace_id & _MASK) < self._bound or self.ratio >= 1.0

    def fires(self, event: Event) -> bool:
        """Whether a keep rule fires on this scope end."""
        if self.keep_errors and event.outcome == "failed":
            return True
        if self.keep_cost_above is not None and event.cost is not None:
            cost = event.cost
            amount = getattr(cost, "amount", None)
            if amount is None:
                amount = getattr(cost, "total", None)
            if isinstance(amount, (int, float)) and amount > self.keep_cost_above:
                return True
        if self.keep_slower_than_ns is not None:
            duration = event.duration_ns
            if duration is not None and duration > self.keep_slower_than_ns:
                return True
        return self.keep_if is not None and bool(self.keep_if(event))

    def __repr__(self) -> str:
        return f"TailSampler(ratio={self.ratio}, keep_errors={self.keep_errors})"


class _Unit:
    __slots__ = ("keep", "overflowed", "spans")

    def __init__(self) -> None:
        self.spans: list[tuple[Any, int, Callable[[], None] | None]] = []
        self.keep = False
        self.overflowed = False


class TailBuffer:
    """One exporter's held spans: ``finish(record, end_ns, event)`` in place of ``span.end(end_ns)``.

    ``then``: what else goes out with the span when it is kept (its details log record), never when dropped.
    """

    def __init__(self, sampler: TailSampler, count: Callable[[str], None]) -> None:
        self.sampler = sampler
        self._count = count
        self._lock = threading.Lock()
        self._units: dict[str, _Unit] = {}  # unit scope uuid -> what it holds
        self._kept_traces: dict[int, None] = {}  # trace ids a unit kept (bounded, oldest out)
        # What the units that ended were decided (bounded, oldest out): a span of one may still come.
        self._decided: dict[str, bool] = {}
        self._held = 0

    @staticmethod
    def unit_of(record: Any) -> str:
        """The uuid of the scope whose end decides ``record``'s span: its turn, else its logical call
        outside turns, else its root."""
        node = record
        call = None
        top = record
        while node is not None:
            role = node.role
            if role in _UNIT_ROLES:
                return str(node.uuid)
            if role == A.LOGICAL_CALL and call is None:
                call = node
            top = node
            node = node.parent
        return str(call.uuid if call is not None else top.uuid)

    def finish(
        self,
        record: Any,
        end_ns: int,
        event: Event | None,
        fired: bool = False,
        then: Callable[[], None] | None = None,
    ) -> None:
        span = record.span
        unit_id = self.unit_of(record)
        if not fired and event is not None:
            try:
                fired = self.sampler.fires(event)
            except Exception:
                # A keep rule that cannot answer keeps: raising here would lose this span (the rest of
                # its trace exported without it) or, at a unit's end, hold the whole unit for good.
                self._count(RULE_ERRORS)
                fired = True
        with self._lock:
            unit = self._units.get(unit_id)
            decided = self._decided.get(unit_id) if unit is None and record.uuid != unit_id else None
            if unit is None and decided is None:
                unit = self._units[unit_id] = _Unit()
            if unit is None:
                # Its unit was decided while this span was on its way here (it ended on another thread as
                # its unit's root ended): held, it would wait for an end that has come and gone. It goes
                # as its unit went, or as a unit of its own would (a rule fired on it, its trace kept).
                keep = self._decide(span.get_span_context().trace_id, bool(decided) or fired)
                release = [(span, end_ns, then)]
            elif record.uuid != unit_id:
                if fired:
                    unit.keep = True
                if unit.overflowed:
                    release = [(span, end_ns, then)]
                elif self._held >= self.sampler.max_buffered_spans:
                    # Full: this unit goes out unsampled, what it held and all it will hold.
                    unit.overflowed = True
                    release = [*unit.spans, (span, end_ns, then)]
                    self._held -= len(unit.spans)
                    unit.spans = []
                    self._count(OVERFLOW)
                else:
                    unit.spans.append((span, end_ns, then))
                    self._held += 1
                    return
                keep = True
            else:
                # Only a unit's end reads the trace id (held spans are decided with it).
                del self._units[unit_id]
                self._held -= len(unit.spans)
                keep = self._decide(span.get_span_context().trace_id, fired or unit.keep or unit.overflowed)
                release = [*unit.spans, (span, end_ns, then)]
                self._decided[unit_id] = keep
                if len(self._decided) > _REMEMBERED:
                    del self._decided[next(iter(self._decided))]
                self._count(KEPT if keep else DROPPED)
        if keep:
            _release(release)
        # Dropped: never ended, so no processor sees them, nor their log records; they go with their references.

    def _decide(self, trace_id: int, kept: bool) -> bool:
        """Whether a unit goes out: ``kept`` by a rule (or an overflow), by the ratio, or with its trace.

        Under the lock."""
        by_ratio = self.sampler.sampled(trace_id)
        keep = by_ratio or kept or trace_id in self._kept_traces
        if keep and not by_ratio:
            # Kept by a rule: what of this trace ends later (its conversation, a scope that
            # outlived a root and was handed down as a root of its own) is kept with it.
            self._kept_traces.pop(trace_id, None)
            self._kept_traces[trace_id] = None
            if len(self._kept_traces) > _REMEMBERED:
                del self._kept_traces[next(iter(self._kept_traces))]
        return keep

    def flush(self) -> None:
        """Export everything held (the exporter is shutting down: its units will not end here)."""
        with self._lock:
            units, self._units = self._units, {}
            self._held = 0
        for unit in units.values():
            _release(unit.spans)

    def held(self) -> int:
        return self._held


def _release(held: list[tuple[Any, int, Callable[[], None] | None]]) -> None:
    for span, at, then in held:
        span.end(at)
        if then is not None:
            then()
