"""Variants timed call by call in turn, so that drift on a shared machine falls on all of them alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def alternate(
    calls: dict[str, Callable[[], Any]], pairs: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """Median ``clock`` seconds per call of each variant over ``pairs`` rounds.

    Which variant goes first flips every round: a later call finds the caches an earlier one
    warmed, and no variant should get that for free.
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls.items())
    for i in range(pairs):
        for name, call in order if i % 2 == 0 else reversed(order):
            start = clock()
            call()
            times[name].append(clock() - start)
    return {name: statistics.median(values) for name, values in times.items()}
