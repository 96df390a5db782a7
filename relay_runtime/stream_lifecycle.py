"""What a managed stream records per chunk and at its end, the same for sync and async streams.

Per chunk: the accumulator's delta, a chunk mark to subscribers of chunks, and the budget's meter
(which may stop the stream). At the end: success when the accumulator saw the provider's terminal
marker, failed with ``IncompleteStream`` when it did not, failed with the provider's own word when
it reported a failure in-band. Bookkeeping failures are counted, never raised into the stream.
"""

from __future__ import annotations

import time
from typing import Any

from . import conventions as cv
from .attempt import Attempt
from .codec import CountingAccumulator, IncompleteStream, StreamAccumulator
from .cost.budget import BudgetExceeded
from .types import Outcome, TokenUsage

_now = time.time_ns
_CANCELLED = Outcome.CANCELLED.value
_FAILED = Outcome.FAILED.value
_SUCCESS = Outcome.SUCCESS.value  # an enum member's ``.value`` costs Python calls in enum.py on every read


class StreamLifecycle:
    """What both stream flavours do per chunk and at the end.

    Once the attempt has finished (the stream ended, or its turn ended around it),
    chunks still reach the caller but are no longer recorded.
    """

    __slots__ = ("acc", "attempt", "first_ns", "index", "meter")

    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        codec = attempt.codec
        acc: StreamAccumulator
        try:
            acc = codec.accumulator() if codec is not None else CountingAccumulator()
        except Exception as exc:
            attempt.relay.diag.failure("bookkeeping_errors", exc, "creating a stream accumulator")
            acc = CountingAccumulator()
        self.acc = acc
        self.index = 0
        self.first_ns: int | None = None
        spend = attempt.cost_state
        self.meter = spend.meter if spend is not None else None

    def chunk(self, chunk: Any) -> BudgetExceeded | None:
        """Record one chunk; returns the error the caller's next read raises when a budget stopped the stream."""
        attempt = self.attempt
        if attempt.finished:
            if attempt.settle_late is not None:
                self._read_late(chunk)
            return None
        if self.first_ns is None:
            self.first_ns = _now()
        try:
            delta = self.acc.add(chunk)
        except Exception as exc:
            # The accumulator is bookkeeping: losing it must not lose the caller's stream.
            attempt.relay.diag.failure("bookkeeping_errors", exc, "accumulating a stream chunk")
            self.acc = CountingAccumulator()
            delta = None
        if attempt.finished:
            # Ended while the codec read the chunk (its turn ended on another thread): a mark now would
            # follow the attempt's end event.
            return None
        relay = attempt.relay
        targets = relay.subscribers.chunk
        if targets:
            relay.scope._emit_mark(
                targets,
                cv.CHUNK,
                {"index": self.index, "delta": delta, "chunk": chunk},
                None,
                attempt.handle,
            )
        self.index += 1
        meter = self.meter
        if meter is not None:
            stop = meter.add(delta)
            if stop is not None:
                attempt.fail(stop, _CANCELLED)
                return stop
        return None

    def _read_late(self, chunk: Any) -> None:
        """A chunk read after the turn's end ended the attempt: unrecorded, but the provider bills it, so it
        is kept for the late charge (``Attempt.finish``); the stream goes on as the design says it does."""
        try:
            delta = self.acc.add(chunk)
        except Exception as exc:
            self.attempt.relay.diag.failure("bookkeeping_errors", exc, "accumulating a stream chunk")
            self.acc = CountingAccumulator()
            return
        if self.meter is not None:
            self.meter.add(delta)  # its running estimate, for an answer that never says its usage

    def complete(self) -> None:
        attempt = self.attempt
        if attempt.finished:
            if attempt.settle_late is not None:  # ended by its turn, read to the end since: the late charge
                self._late_charge()
            return
        try:
            response, annotation = self.acc.finish()
        except Exception as exc:
            attempt.relay.diag.failure("bookkeeping_errors", exc, "finishing a stream accumulator")
            response, annotation = None, None
        # A provider may end a stream normally while saying the response failed (its SDK raises
        # nothing): an accumulator that saw it holds that failure, and the record is the provider's word.
        failure = getattr(self.acc, "failure", None)
        if isinstance(failure, BaseException):
            attempt.finish(_FAILED, response, failure, annotation, self.first_ns)
            return
        if getattr(self.acc, "terminated", True) is False:
            # Exhausted without the provider's terminal marker: the caller's iteration ends as the
            # provider's did, but the record says the answer was cut short.
            incomplete = IncompleteStream(f"the {attempt.name} stream ended without its terminal marker")
            attempt.finish(_FAILED, response, incomplete, annotation, self.first_ns)
            return
        attempt.finish(_SUCCESS, response, None, annotation, self.first_ns)

    def fail(self, error: BaseException | None, outcome: str | None = None) -> None:
        attempt = self.attempt
        if attempt.finished and attempt.settle_late is None:
            # Ended already (a stream read out, then closed): nothing below would record anything.
            return
        if attempt.holding:
            return  # a body already read, held for validation: its verdict ends it, not its closing
        if attempt.finished:  # ended by its turn, read since (or not) until now: the late charge
            self._late_charge(error)
            return
        if error is None and outcome == _CANCELLED and self.index:
            # The caller stopped reading (``close``, ``break``, garbage collected): it got the answer as far
            # as it read, which the record keeps (the run page, the journal, the trajectory show what the user
            # saw). Its usage only when the provider's end was read: a part's would price it short.
            response, annotation = self._as_read()
            attempt.finish(_CANCELLED, response, None, annotation, self.first_ns)
            return
        attempt.fail(error, outcome)  # a no-op once the attempt finished

    def _late_charge(self, error: BaseException | None = None) -> None:
        """Price a stream its turn's end ended, with what was read of it (``settle_late``: as the record said)."""
        response, annotation = self._as_read()
        self.attempt.finish(_CANCELLED, response, error, annotation, self.first_ns)

    def _as_read(self) -> tuple[Any, Any]:
        try:
            response, annotation = self.acc.finish()
        except Exception as exc:
            self.attempt.relay.diag.failure("bookkeeping_errors", exc, "finishing a stream the caller closed")
            return None, None
        if annotation is not None and getattr(self.acc, "terminated", True) is False:
            annotation.usage = TokenUsage()
            annotation.finish_reasons = []
        return response, annotation

    def complete_whole(self, response: Any) -> None:
        """End as a success with a response that arrived in one piece (a raw HTTP body read later)."""
        self.attempt.complete_whole(response, self.first_ns)  # a no-op once finished
