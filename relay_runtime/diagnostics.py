"""Counters for what the relay swallowed on purpose, and rate-limited logging of it."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("relay_runtime")

# One log line per key per window: a subscriber that fails on every event must
# not flood the log of the agent it observes.
LOG_WINDOW_S = 60.0


class Diagnostics:
    def __init__(self, policy_of: Callable[[], Any] | None = None) -> None:
        # The redaction policy in force (the relay's), read when a failure is logged: an exception's
        # message may quote what failed (a prompt, an answer), and the log is a sink like any other.
        self.policy_of = policy_of
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._last_log: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def count_all(self, *keys: str) -> None:
        """Add one to each of ``keys``, under one lock."""
        with self._lock:
            counts = self._counts
            for key in keys:
                counts[key] += 1

    def failure(self, key: str, exc: BaseException, what: str) -> None:
        """Count a failure that must not reach the caller, and log it at most once a window."""
        now = time.monotonic()
        with self._lock:
            self._counts[key] += 1
            last = self._last_log.get(key)
            if last is not None and now - last < LOG_WINDOW_S:
                self._suppressed[key] += 1
                return
            self._last_log[key] = now
            suppressed = self._suppressed.pop(key, 0)
        more = f" ({suppressed} more since the last report)" if suppressed else ""
        logger.warning("relay_runtime: %s failed: %s: %s%s", what, type(exc).__name__, self._told(exc), more)

    def _told(self, exc: BaseException) -> str:
        """``exc``'s message as the log may hold it: remembered keys blanked, the redaction policy applied."""
        from .redaction import told  # here: the redaction modules import the relay's parts

        return told(exc, self.policy_of() if self.policy_of is not None else None)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._last_log.clear()
            self._suppressed.clear()
