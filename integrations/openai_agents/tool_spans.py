"""What the relay learns about an Agents SDK ``function`` span while it is open.

The SDK opens a tool call's ``function`` span and then decides, inside it and before invoking the
tool, whether the tool runs at all: a tool input guardrail may refuse the call (``reject_content``:
the model gets the guardrail's message as the tool's output) or stop the run (``raise_exception``).
Neither opens a span of its own nor marks the function span as refused: a refused call's span reads
as a tool that returned the message. So the processor keeps a ``ToolSpan`` for each function span it
follows, which code running inside the span finds by the SDK's current span:

- the managed invocation (``tools``) marks it ``ran``: a wrapped tool whose call never got there has
  no scope unless the processor records one; once the tool runs, ``scope`` is its managed call's scope,
  which what the tool runs (an agent run as a tool) nests under;
- a hook on ``ToolInputGuardrail.run`` notes the guardrail that refused the call (``rejected``);
- ``task`` is the task the span runs in: a tool cancelled while that task is not being cancelled was
  stopped by the SDK's own ``timeout``, not by the run's cancellation.

The hook is installed once per process, by the first ``RelayTraceProcessor``, and stays: it only
notes a guardrail's answer for a span a live processor follows (one dict lookup otherwise).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from relay_runtime import GuardrailRejected, session
from relay_runtime.scopes import ScopeHandle

_MARK = "__relay_tool_guardrail_hook__"
_open: dict[str, ToolSpan] = {}  # span id -> its record, while the span is open
_lock = threading.Lock()
_current_span: Callable[[], Any] | None = None  # agents.tracing.get_current_span, once installed


class ToolSpan:
    """One open ``function`` span: whether the tool ran, which guardrail refused it, where it runs."""

    __slots__ = ("call_id", "ran", "rejected", "scope", "task")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.ran = False
        self.scope: ScopeHandle | None = None
        self.rejected: GuardrailRejected | None = None
        self.call_id: str | None = None  # the model's tool call id, from the guardrail's tool context


def running_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: the span was started or ended from synchronous code
        return None


def open_span(span_id: str) -> ToolSpan:
    record = ToolSpan(running_task())
    _open[span_id] = record
    return record


def close_span(span_id: str) -> ToolSpan | None:
    return _open.pop(span_id, None)


def opened(span_id: str) -> ToolSpan | None:
    """The record of the open function span ``span_id``, if a processor follows it."""
    return _open.get(span_id)


def current() -> ToolSpan | None:
    """The record of the function span the calling code runs in, if a processor follows it."""
    if not _open or _current_span is None:
        return None
    span = _current_span()
    return _open.get(span.span_id) if span is not None else None


def install() -> None:
    """Hook ``ToolInputGuardrail.run`` (once per process) so a refusal is noted on its function span."""
    global _current_span
    import agents
    import agents.tracing

    with _lock:
        _current_span = agents.tracing.get_current_span
        owner = agents.ToolInputGuardrail
        original = owner.__dict__.get("run")
        if original is None or getattr(original, _MARK, False):
            return

        async def run(self: Any, data: Any) -> Any:
            output = await original(self, data)
            record = current()
            if record is not None:
                try:
                    _note(record, self, data, output)
                except Exception as exc:  # observing must never break the SDK's guardrail
                    turn = session.managed_turn()
                    if turn is not None:
                        turn.relay.diag.failure("subscriber_errors", exc, "openai-agents tool guardrail")
            return output

        run.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(run, _MARK, True)
        owner.run = run  # type: ignore[method-assign]


def _note(record: ToolSpan, guardrail: Any, data: Any, output: Any) -> None:
    behavior = getattr(output, "behavior", None) or {}
    kind = behavior.get("type")
    if kind == "reject_content":
        reason = str(behavior.get("message") or "rejected")
    elif kind == "raise_exception":
        reason = "tripwire triggered"  # the SDK stops the run with ToolInputGuardrailTripwireTriggered
    else:
        return
    record.rejected = GuardrailRejected(guardrail.get_name(), reason)
    call_id = getattr(getattr(data, "context", None), "tool_call_id", None)
    record.call_id = call_id if isinstance(call_id, str) else None
