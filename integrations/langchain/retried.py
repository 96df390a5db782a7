"""A failed chat model run held open for its retry, under ``RelayCallbackHandler``.

LangChain's retries and fallbacks (``ModelRetryMiddleware``, ``ModelFallbackMiddleware``, ``with_retry``,
``with_fallbacks``) call the model again, with the same messages, under the same parent run: each call is a
chat model run of its own, and recorded as a logical call each, one model turn showed as two, the first
failed. So a run that failed under a run the handler opened a scope for keeps its logical call open, held
by that scope: the next run started under it with the same messages is its retry, an attempt of the same
call. Anything else closes it, failed: another run started there, the parent run's end, or the turn's.
Held by the parent's scope, not its run id: LangChain does not always tell a model run its parent's id
(``with_fallbacks``), while the scope it nests under is known either way.
"""

from __future__ import annotations

from typing import Any

from relay_runtime.scopes import ScopeHandle

from ..frameworks import ModelCall

# Held calls by their parent run's scope uuid; the bound only matters for parents whose end never comes. Never
# rebound: the handler tests it for emptiness where it is imported, with no call (every model call and run end asks).
HELD: dict[str, Held] = {}
_MAX_HELD = 10_000


class ModelRun(ModelCall):
    """A chat model run: its logical call itself (a retry's run is the failed run's call again), with the messages
    it was asked (a retry asks the same) and the uuid of the run's scope it nests under (``held_under``; None: no
    run's, and nothing would release what it held). One object per model call, not a run beside its call.

    Followed among the handler's runs as a ``FrameworkRun`` is, with no scope of its own."""

    __slots__ = ("held_under", "messages")
    held_under: str | None
    messages: list[Any]

    handle: ScopeHandle | None = None
    own = False
    token: Any = None

    @property
    def call(self) -> ModelRun:
        return self


class Held:
    """A failed run's logical call, open until its retry joins it or something closes it. It stands among
    the call's open attempts, so that the end of the turn closes it failed rather than with the turn's outcome."""

    __slots__ = ("call", "error", "messages", "parent")

    def __init__(self, parent: str, call: ModelRun, error: BaseException, messages: list[Any]) -> None:
        self.parent = parent
        self.call = call
        self.error = error
        self.messages = messages

    def abandon(self) -> None:
        if HELD.get(self.parent) is self:
            HELD.pop(self.parent, None)
        self.close()

    def close(self) -> None:
        self._leave_attempts()
        self.call.close(self.error)

    def _leave_attempts(self) -> None:
        try:
            self.call.logical.open_attempts.remove(self)
        except ValueError:  # the end of the turn took it off already
            pass


def hold(run: ModelRun, error: BaseException) -> None:
    """``run`` failed with ``error`` under its parent run: its attempt ends, its logical call is held open."""
    parent = run.held_under
    assert parent is not None
    run.leave()  # records the attempt the callbacks witnessed, when no SDK attempt joined in its place
    run.end_observed(error=error)
    held = Held(parent, run, error, run.messages)
    run.logical.open_attempts.append(held)
    if len(HELD) >= _MAX_HELD:
        try:
            release(next(iter(HELD)))
        except (StopIteration, RuntimeError):  # emptied or changed by another thread meanwhile
            pass
    earlier = HELD.pop(parent, None)
    HELD[parent] = held
    if earlier is not None:
        earlier.close()


def retried(parent: str, messages: list[Any]) -> ModelRun | None:
    """The held call a run starting under ``parent`` with ``messages`` retries; None when it retries none
    (a call held there for other messages is closed: its retry would have come first)."""
    held = HELD.pop(parent, None)
    if held is None:
        return None
    call = held.call
    logical = call.logical
    still_open = not logical.closing and call.turn.logical_llm_calls.get(logical.api_request_id) is logical
    if still_open and held.messages == messages:
        held._leave_attempts()
        return call
    held.close()
    return None


def release(parent: str) -> None:
    """``parent`` ended: the call held under it was not retried; it closes failed."""
    held = HELD.pop(parent, None)
    if held is not None:
        held.close()
