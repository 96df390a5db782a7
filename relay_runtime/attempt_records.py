"""The records of an attempt's further provider calls, each ended by its own answer.

``Beside``: a call made while another of the same call was in flight (a concurrent fan-out).
``Outrun``: the attempt's own call, still in flight when its execution chain returned with another
call's answer (a hedge); it takes over the attempt's record.
"""

from __future__ import annotations

from typing import Any

from . import attempt_next
from . import conventions as cv
from .attempt import _LLM, _SUCCESS, Attempt
from .scopes import ScopeHandle
from .types import LLMRequest


class Beside(Attempt):
    """The attempt of a provider call made while another of the same call was in flight (a fan-out).

    It starts now, as the next attempt of the same parent, and its own answer ends it. The call's
    result is recorded by the call's own attempt: this one holds no hook, so a logical call is
    neither counted out nor closed by it.
    """

    __slots__ = ()

    def __init__(self, of: Attempt, request: LLMRequest, stream: bool = False) -> None:
        metadata = dict(of.metadata)
        metadata[cv.RETRY_COUNT] = of._next_retry()
        super().__init__(of.relay, of.name, request, of.handle.parent, of.model_name, metadata, of.codec, None)
        # Beside the call's attempt, under its parent, even where that is no scope (not under the
        # attempt, which the constructor would take as the current scope).
        self.handle = ScopeHandle(of.name, _LLM, of.handle.parent, metadata, None, False, None)
        self.view = of.view
        attempt_next.number_after(metadata)
        if self.relay.cost.active:
            try:
                request = self._checked(request, stream)
            except BaseException as exc:
                self.fail(exc)  # its record only: it holds no hook
                raise
        self._emit_start(request)
        self.live = True
        # Its provider is answering: ended meanwhile by its turn, it is priced when the answer comes.
        self.waiting = True
        tracked = self.tracked = of.tracked
        if tracked is not None:
            tracked.append(self)  # one atomic append, as for the call's own attempts

    def answered(self, response: Any, error: BaseException | None) -> None:
        self.waiting = False
        if error is None:
            self.finish(_SUCCESS, response, None, None)
        else:
            self.fail(error)


class Outrun(Beside):
    """The record of an attempt's provider call that was still in flight when its chain returned: it takes
    over the attempt's scope (started already) and what it reserved, and that call's own answer ends it.

    Its end may come on another thread at the same time as the chain's check for it: ``claim`` lets
    exactly one of them end it.
    """

    __slots__ = ("claim",)

    def __init__(self, of: Attempt) -> None:
        Attempt.__init__(
            self, of.relay, of.name, of.request, of.handle.parent, of.model_name, of.metadata, of.codec, None
        )
        self.handle = of.handle
        self.view = of.view
        self.annotated = of.annotated
        self.chains = of.chains
        self.cost_state = of.cost_state
        self.live = True
        self.waiting = True
        self.claim = [True]
        tracked = self.tracked = of.tracked
        if tracked is not None:
            tracked.append(self)
            try:
                tracked.remove(of)  # the attempt itself never ends a record now: this one is the turn's to end
            except ValueError:
                pass

    def answered(self, response: Any, error: BaseException | None) -> None:
        try:
            self.claim.pop()
        except IndexError:
            return
        super().answered(response, error)
