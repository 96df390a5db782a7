"""Spend a shared store failed to settle, kept to settle again before the next check reads the store.

A settle that raised (Redis timed out, the spend directory was briefly unwritable) may or may not
have reached the store: a reply lost after Redis ran the script looks the same as a request that
never arrived. So the retry is a ``resettle``: the store adds the spend only under the keys that
still hold the reservation, which a settle that did run has dropped. Nothing is counted twice,
and the other processes see the spend at the latest when this one next checks a budget.

What a retry cannot save is counted as ``cost.spend_lost``: a reservation the store dropped at its
deadline (``reservation_ttl``) before the store came back, a store that has no ``resettle`` (a
third-party one), and the oldest entries past ``LIMIT`` while the store stays down.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..diagnostics import Diagnostics
    from .store import Reservation

LIMIT = 1024  # settles kept while the store is down; each is a few hundred bytes
RETRY_EVERY_S = 1.0  # while the store is down, a call pays for one more of its timeouts at most this often
LOST = "cost.spend_lost"
RESETTLED = "cost.spend_resettled"


class Unsettled:
    """The settles that failed, in the order they are tried, each as ``(store, reservation, amount, deadline)``."""

    __slots__ = ("_busy", "_lock", "_next_try", "_pending", "_trying")

    def __init__(self) -> None:
        self._pending: deque[tuple[Any, Reservation, float, float]] = deque()
        self._lock = threading.Lock()
        self._busy = threading.Lock()  # one thread retries; the others go on without waiting for it
        self._next_try = 0.0
        self._trying: Reservation | None = None  # the one a retry is settling again, which the limit leaves

    def __bool__(self) -> bool:
        return bool(self._pending)

    def keep(self, store: Any, reservation: Reservation, amount: float, started: float, diag: Diagnostics) -> None:
        """Keep a settle ``store`` raised on; ``started`` (``time.time()``): when the call reserved, at the latest
        (the store holds the reservation ``reservation_ttl`` from then)."""
        if getattr(store, "resettle", None) is None:
            diag.count(LOST)  # a retry could count it twice
            return
        ttl = getattr(store, "reservation_ttl", None)
        deadline = started + ttl if isinstance(ttl, int | float) else float("inf")
        with self._lock:
            pending = self._pending
            if len(pending) >= LIMIT:
                # The oldest, unless a retry is settling it again now: dropped, it would count lost and settled.
                del pending[1 if len(pending) > 1 and pending[0][1] is self._trying else 0]
                diag.count(LOST)
            self._pending.append((store, reservation, amount, deadline))

    def retry(self, diag: Diagnostics) -> None:
        """Settle again what is kept, oldest first, until the store fails again (then wait ``RETRY_EVERY_S``; the
        one it failed on goes last)."""
        if not self._pending or time.monotonic() < self._next_try or not self._busy.acquire(blocking=False):
            return
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    store, reservation, amount, deadline = self._pending[0]
                    self._trying = reservation
                if time.time() > deadline:
                    # Whether it was settled cannot be told any more: adding it again could count it twice.
                    diag.count(LOST)
                else:
                    try:
                        store.resettle(reservation, amount)
                    except Exception as exc:
                        self._next_try = time.monotonic() + RETRY_EVERY_S
                        what = f"settling again the spend of {reservation.keys!r}"
                        diag.failure("cost.spend_store_errors", exc, what)
                        with self._lock:
                            # Last in line: one the store refuses for good (a key gone unreadable) must not hold
                            # back the others until the limit drops them; the order they are added in is no matter.
                            if self._pending and self._pending[0][1] is reservation:
                                self._pending.rotate(-1)
                        return
                    diag.count(RESETTLED)
                with self._lock:
                    if self._pending and self._pending[0][1] is reservation:
                        self._pending.popleft()
        finally:
            self._trying = None
            self._busy.release()
