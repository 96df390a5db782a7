"""One agent task run: consumes the task broker's event stream in its own asyncio task.

The run's task is independent of whoever waits on it, so promotion can stop waiting without
cancelling the work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .models import AgentTaskRequest, TaskBroker

if TYPE_CHECKING:
    from .session import VoiceSession

logger = logging.getLogger(__name__)

# A "starting" status goes to the phone only if the agent has not reported within this lead, so
# runs that answer at once do not flash a status line.
_PRE_TASK_STATUS_LEAD_SECONDS = 0.4

# Tool names that mean the run will take a while: promote without waiting out the grace window.
LONG_TOOL_MARKERS = ("cron", "desktop_", "browser", "execute_code", "terminal", "spawn")

_FORWARDED_FIELDS = ("run_id", "session_id", "profile", "tool_name", "tool_call_id", "ok", "status")
_FORWARDED_TYPES = frozenset(
    {"hermes.session.bound", "hermes.run.started", "hermes.tool.started", "hermes.tool.completed",
     "hermes.run.completed", "hermes.confirm.requested"}
)


def is_long_tool(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in LONG_TOOL_MARKERS)


@dataclass
class RunOutcome:
    ok: bool
    answer: str
    tool_count: int
    error: str | None
    cancelled: bool = False


class AgentRun:
    def __init__(
        self,
        session: VoiceSession,
        broker: TaskBroker,
        request: AgentTaskRequest,
        *,
        call_id: str,
        lane: str = "main",
    ) -> None:
        self.session = session
        self.broker = broker
        self.request = request
        self.call_id = call_id
        self.lane = lane
        self.run_id = ""
        self.agent_session_id = ""
        self.tool_count = 0
        self.last_tool = ""
        self.pending_confirm: dict[str, Any] | None = None
        self.started_at = time.monotonic()
        self.long_tool = asyncio.Event()
        self._answer: list[str] = []
        self._completed = False
        self._error: str | None = None
        self._seen_event = False
        loop = asyncio.get_running_loop()
        self._status_timer = loop.call_later(_PRE_TASK_STATUS_LEAD_SECONDS, self._starting_status)
        self.task: asyncio.Task[None] = asyncio.create_task(self._consume(), name=f"voice-run-{call_id}")

    def _starting_status(self) -> None:
        if not self._seen_event and not self.task.done():
            self.session.emit("hermes.run.status", status="starting", call_id=self.call_id, lane=self.lane)

    async def _consume(self) -> None:
        stream = self.broker.stream_task(self.request)
        try:
            async for event in stream:
                if isinstance(event, dict):
                    self._on_event(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("agent run %s failed: %s", self.call_id, self.session.told(exc))
            self._error = f"agent task failed: {type(exc).__name__}"
        finally:
            self._status_timer.cancel()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # the stream's own cleanup failing must not mask the outcome
                    logger.debug("agent stream close failed", exc_info=True)

    def _on_event(self, event: dict[str, Any]) -> None:
        """Fold one broker event into the run, then pass the wire-visible ones to the phone."""
        self._seen_event = True
        kind = event.get("type")
        handler = _BROKER_EVENTS.get(kind) if isinstance(kind, str) else None
        if handler is None or not handler(self, event) or kind not in _FORWARDED_TYPES:
            return
        fields = {k: event[k] for k in _FORWARDED_FIELDS if k in event}
        if kind == "hermes.confirm.requested":
            fields["prompt"] = str(event.get("prompt") or "")
            fields["confirm_id"] = str(event.get("confirm_id") or "")
        self.session.emit(kind, call_id=self.call_id, lane=self.lane, **fields)

    # -- one handler per broker event type (rows of _BROKER_EVENTS); True: forward it -----------------

    def _session_bound(self, event: dict[str, Any]) -> bool:
        self.agent_session_id = str(event.get("session_id") or "")
        return True

    def _run_started(self, event: dict[str, Any]) -> bool:
        self.run_id = str(event.get("run_id") or self.run_id)
        self.agent_session_id = str(event.get("session_id") or self.agent_session_id)
        return True

    def _tool_started(self, event: dict[str, Any]) -> bool:
        self.last_tool = str(event.get("tool_name") or "")
        if is_long_tool(self.last_tool):
            self.long_tool.set()
        return True

    def _tool_completed(self, event: dict[str, Any]) -> bool:
        self.tool_count += 1
        return True

    def _answer_delta(self, event: dict[str, Any]) -> bool:
        delta = event.get("delta")
        if isinstance(delta, str):
            self._answer.append(delta)
        return False

    def _run_completed(self, event: dict[str, Any]) -> bool:
        self._completed = True
        final = event.get("answer") or event.get("text")
        if not self._answer and isinstance(final, str):
            self._answer.append(final)
        return True

    def _confirm_requested(self, event: dict[str, Any]) -> bool:
        self.pending_confirm = {"confirm_id": event.get("confirm_id"), "prompt": event.get("prompt")}
        return True

    def _agent_error(self, event: dict[str, Any]) -> bool:
        self._error = str(event.get("message") or "agent reported an error")
        self.session.emit("hermes.run.failed", call_id=self.call_id, error=self._error)
        return False

    @property
    def done(self) -> bool:
        return self.task.done()

    @property
    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started_at) * 1000)

    def outcome(self, *, timed_out: bool = False) -> RunOutcome:
        answer = "".join(self._answer).strip()
        if timed_out:
            return RunOutcome(False, answer, self.tool_count, "background run timed out")
        if self.task.cancelled():
            return RunOutcome(False, answer, self.tool_count, "cancelled", cancelled=True)
        if self._error is not None:
            return RunOutcome(False, answer, self.tool_count, self._error)
        if not self._completed:
            return RunOutcome(False, answer, self.tool_count, "agent stream ended without completing")
        return RunOutcome(True, answer or "The task finished.", self.tool_count, None)

    def cancel(self) -> None:
        self._status_timer.cancel()
        self.task.cancel()


_BROKER_EVENTS: dict[str, Callable[[AgentRun, dict[str, Any]], bool]] = {
    "hermes.session.bound": AgentRun._session_bound,
    "hermes.run.started": AgentRun._run_started,
    "hermes.tool.started": AgentRun._tool_started,
    "hermes.tool.completed": AgentRun._tool_completed,
    "voice.response.delta": AgentRun._answer_delta,
    "hermes.run.completed": AgentRun._run_completed,
    "hermes.confirm.requested": AgentRun._confirm_requested,
    "voice.error": AgentRun._agent_error,
}
