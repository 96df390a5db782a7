"""Metric points queued on the caller's thread and recorded into the OTel SDK off it.

Recording one histogram point through the SDK costs several microseconds on any thread
(a ``Measurement``, its attributes cleaned and hashed, locks): about 20 µs for the three
points of an LLM call, a large share of what instrumenting the call costs its caller.
Like a batch span processor, a ``MetricBatch`` takes that off the call path: the caller
appends one tuple, and the points are recorded

- by a worker thread, once ``flush_at`` calls are waiting or within ``interval_s``;
- by every collect of every reader on the meter provider, before it reads (an observable
  instrument that observes nothing runs first and records what is queued), so an
  export, ``force_flush``, a shutdown or an in-memory reader never misses a point that
  was queued before it;
- on the caller's thread when ``max_pending`` are already waiting (a worker that cannot
  keep up slows callers down; nothing is dropped).

Histogram aggregates (count, sum, min, max, buckets) do not depend on when a point is
recorded. What does is the caller's business (``GenAIMetrics`` records in place what
an exemplar or a new series' start time would read).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

logger = logging.getLogger("relay_runtime.integrations.otel")

# The observable instrument whose callback records the queue at every collect. It never
# observes anything, so no reader ever exports it.
DRAIN_HOOK = "relay.otel.queued_points"

_IDLE_ROUNDS = 5  # a worker with nothing to do for this many intervals exits (a later point restarts it)
_batches: weakref.WeakSet[MetricBatch] = weakref.WeakSet()


class MetricBatch:
    def __init__(
        self,
        meter: Meter,
        emit: Callable[[Any], None],
        *,
        flush_at: int = 256,
        max_pending: int = 20_000,
        interval_s: float = 1.0,
    ) -> None:
        if not 0 < flush_at <= max_pending:
            raise ValueError(f"need 0 < flush_at <= max_pending, got {flush_at} and {max_pending}")
        self._emit = emit
        self._flush_at = flush_at
        self._max_pending = max_pending
        self._interval = interval_s
        self._pending: deque[Any] = deque()
        self._closed = False
        self._errors_logged = False
        self._reset_threading()
        meter.create_observable_gauge(DRAIN_HOOK, callbacks=[self._on_collect])
        _batches.add(self)

    def _reset_threading(self) -> None:
        # Also in a forked child, where the parent's worker does not exist and its locks may be held.
        self._drain_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def offer(self, item: Any) -> bool:
        """Queue one item; False when the caller must emit it itself (closed, or too many waiting)."""
        pending = self._pending
        if self._closed or len(pending) >= self._max_pending:
            return False
        pending.append(item)
        if self._thread is None:
            self._start()
        if len(pending) >= self._flush_at:
            self._wake.set()
        return True

    def drain(self) -> None:
        """Emit everything queued, in order. Concurrent drains wait for each other, so that a
        collect returns only after every point queued before it is recorded."""
        with self._drain_lock:
            pop = self._pending.popleft
            emit = self._emit
            while True:
                try:
                    item = pop()
                except IndexError:
                    return
                try:
                    emit(item)
                except Exception:
                    # The SDK refusing one point must not stop the rest (nor the worker).
                    if not self._errors_logged:
                        self._errors_logged = True
                        logger.exception("recording a queued metric point failed")

    def close(self) -> None:
        """Record what is queued and stop the worker; later points are the caller's to emit."""
        self._closed = True
        self._wake.set()
        self.drain()

    def _on_collect(self, options: CallbackOptions) -> Iterable[Observation]:
        self.drain()
        return ()

    def _start(self) -> None:
        with self._state_lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=_work, args=(weakref.ref(self),), name="relay-otel-metrics", daemon=True
            )
            self._thread.start()

    def _idle_exit(self) -> bool:
        """The worker stops when nothing is queued; a point queued meanwhile keeps it going."""
        with self._state_lock:
            me = self._thread
            self._thread = None
            if self._pending and not self._closed:
                self._thread = me
                return False
            return True


def _work(ref: weakref.ref[MetricBatch]) -> None:
    idle = 0
    while True:
        batch = ref()
        if batch is None:
            return
        wake, interval = batch._wake, batch._interval
        del batch  # held only while working: an exporter dropped by its owner is collectable
        woken = wake.wait(interval)
        wake.clear()
        batch = ref()
        if batch is None:
            return
        busy = bool(batch._pending)
        batch.drain()
        if batch._closed:
            batch._idle_exit()
            return
        idle = 0 if woken or busy else idle + 1
        if idle >= _IDLE_ROUNDS and batch._idle_exit():
            return
        del batch


def _after_fork_in_child() -> None:
    for batch in list(_batches):
        batch._reset_threading()
        # The parent records what it had queued; counted here too, those calls would count twice
        # (the SDK's batch processors drop their inherited queues the same way).
        batch._pending.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
