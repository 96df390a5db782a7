"""The logical call around a floor's attempt, as the library records it: shared by the hand-written floors
(``adapters_floor``, ``genai_floor``), whose attempts differ by SDK while the call around them does not.

Written flat, as the floors are: one frame to open the call and one to end it, nothing else.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from relay_runtime import conventions as cv
from relay_runtime.events import SCOPE_END, SCOPE_START, new_event
from relay_runtime.ids import new_id
from relay_runtime.scopes import RelayOutput, ScopeHandle
from relay_runtime.session import LogicalCall

if TYPE_CHECKING:
    from relay_runtime.session import Turn


def opened(turn: Turn, streams: int = 0) -> LogicalCall:
    """A primary logical call of ``turn``, its start delivered, with one attempt in flight (and ``streams`` open)."""
    assert turn.scope is not None
    subs = turn.relay.subscribers
    rid = new_id()
    metadata = {cv.KIND: cv.LOGICAL_CALL, cv.API_REQUEST_ID: rid, cv.CALL_ROLE: "primary"}
    scope = ScopeHandle("logical_llm_call", "function", turn.scope, metadata, None, False, None)
    subs.deliver(subs.start, new_event(SCOPE_START, scope.uuid, scope.parent_uuid, scope.trace_id, scope.name,
                                       "function", scope.start_ns, None, None, None, metadata))  # fmt: skip
    logical = LogicalCall(rid, "primary", scope)
    logical.attempts = logical.in_flight = 1
    logical.open_streams = streams
    turn.logical_llm_calls[rid] = logical
    return logical


def ended(turn: Turn, logical: LogicalCall, model: str | None, provider: str) -> None:
    """``logical``'s one attempt over (its end delivered already): the call's end, a success, and the turn's
    record of it gone."""
    scope = logical.scope
    with turn.lock:
        logical.in_flight -= 1
        if logical.open_streams:
            logical.open_streams -= 1
        logical.model = model
        logical.closing = True
    scope.ended = True
    subs = turn.relay.subscribers
    output = RelayOutput(outcome="success", model=model, provider=provider)
    subs.deliver(subs.end, new_event(SCOPE_END, scope.uuid, scope.parent_uuid, scope.trace_id, scope.name,
                                     "function", time.time_ns(), scope.start_ns, None, output, scope.metadata, None,
                                     None, None, None, None, None, None, "success"))  # fmt: skip
    with turn.lock:
        logical.closing = False
        del turn.logical_llm_calls[logical.api_request_id]
