"""Handing the current scopes (and turn) to other threads, explicitly.

A new thread starts with an empty context; these helpers run work in a copy
of the submitting context instead, so scopes it opens nest where they were
asked for.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def propagate_to_thread(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap ``fn`` to run in a copy of the context current *now*, whichever thread calls it."""
    ctx = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        # A fresh copy per call: one Context cannot be entered by two threads at once.
        return ctx.copy().run(fn, *args, **kwargs)

    return run


class ContextExecutor(ThreadPoolExecutor):
    """A thread pool whose tasks run in the context of the code that submitted them."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        ctx = contextvars.copy_context()
        return super().submit(ctx.run, fn, *args, **kwargs)
