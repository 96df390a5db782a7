"""What happens when the voice model calls an agent tool: promotion tiers, the fast lane and
queue for a second ask, cancellation, the background time cap.

Tier A: the run ends inside the grace window and its result is the tool result.
Tier B (`promoted`): the grace window passes or a known-long tool starts; the run continues in
the background and the tool call is closed with an interim acknowledgement.
Tier C (`durable`): mode="background" detaches at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..run_journal.paths import MAX_ID_LENGTH, valid_id
from .config import background_run_max_seconds
from .delivery import DeliveryManager
from .event_log import clip
from .models import (
    CANCEL_TOOL,
    CONFIRM_TOOL,
    RUN_TASK_TOOL,
    STATUS_TOOL,
    AgentTaskRequest,
    BackgroundResult,
    TaskBroker,
    ToolCallEvent,
)
from .runs import AgentRun
from .speakable import speakable

if TYPE_CHECKING:
    from .session import VoiceSession

logger = logging.getLogger(__name__)

MAX_QUEUED_RUNS = 3
PLAYBACK_DRAIN_TIMEOUT_SECONDS = 2.5
HANDOFF_PROMPT = (
    "The task is taking a while and continues in the background. Tell the user in one short "
    "sentence that you will report back when it is done."
)
_side_lane_ids = itertools.count(1)


def side_session_id(session_id: str) -> str:
    """A fast lane's own session, named after the run's: cut to leave room for its suffix, so that the
    longest session id still names a session the journal records (MAX_ID_LENGTH)."""
    suffix = f"-side-{next(_side_lane_ids)}"
    return session_id[: MAX_ID_LENGTH - len(suffix)] + suffix


CANCELLED_RESULT: dict[str, Any] = {
    "ok": False,
    "status": "cancelled",
    "message": "The request was cancelled, as the user asked; it will not run.",
}


@dataclass
class ActiveRun:
    run: AgentRun
    call_id: str
    response_id: str
    tier: str = ""
    tool_call_open: bool = True
    cancelled: bool = False


@dataclass
class QueuedRun:
    call_id: str
    request: AgentTaskRequest


class RunCoordinator:
    def __init__(self, session: VoiceSession, broker: Callable[[], TaskBroker], delivery: DeliveryManager) -> None:
        self.session = session
        # Looked up per run, so swapping the agent's broker applies to the next run.
        self._broker = broker
        self.delivery = delivery
        self.active: ActiveRun | None = None
        self.queue: deque[QueuedRun] = deque()
        # Second asks in their fast-lane wait, by call id; a cancel takes them out before they can queue.
        self.fast_lanes: dict[str, AgentRun] = {}

    @property
    def broker(self) -> TaskBroker:
        return self._broker()

    # -- dispatch --------------------------------------------------------------------------------------

    async def handle_tool_call(self, call: ToolCallEvent, response_id: str) -> None:
        try:
            if call.name == RUN_TASK_TOOL:
                await self._run_task(call, response_id)
            elif call.name == STATUS_TOOL:
                await self._tool_result(call.call_id, self.status())
            elif call.name == CANCEL_TOOL:
                cancelled = await self.cancel_active(reason="tool")
                await self._tool_result(call.call_id, {"ok": cancelled, "status": "cancelled" if cancelled else "idle"})
            elif call.name == CONFIRM_TOOL:
                await self._tool_result(call.call_id, await self.confirm(call.arguments.get("approved")))
            else:
                await self._tool_result(call.call_id, {"ok": False, "error": f"unknown tool {clip(repr(call.name))}"})
        except Exception as exc:
            logger.warning("voice tool call %s failed: %s", call.name, self.session.told(exc))
            self.session.log("voice.realtime_agent.tool_call_failed", tool=call.name, error=type(exc).__name__)
            message = f"{call.name} failed: {type(exc).__name__}"
            self.session.emit("voice.error", code="tool_call_failed", message=message)

    async def _tool_result(self, call_id: str, output: dict[str, Any]) -> None:
        connection = self.session.connection
        if connection is not None:
            await connection.send_tool_result(call_id, output)

    def _request(self, call: ToolCallEvent) -> AgentTaskRequest | str:
        args = call.arguments
        text = args.get("text")
        if not isinstance(text, str) or not text.strip():
            return "text is required"
        for key in ("profile", "session_id", "mode"):
            if args.get(key) is not None and not isinstance(args.get(key), str):
                return f"{key} must be a string"
        if args.get("session_id") and not valid_id(args["session_id"]):
            # The run is journaled under it: one the journal refuses would leave the run unrecorded.
            return "session_id must be 1-200 of [A-Za-z0-9_.-], not '.' or '..'"
        session = self.session
        context: dict[str, Any] = {"surface": "voice", "voice_session_id": session.session_id}
        if session.native_pending_delivery_note:
            # The one-shot correction lands on the next agent-routed turn, then is spent.
            context["pending_delivery_note"] = session.native_pending_delivery_note
            session.native_pending_delivery_note = None
        return AgentTaskRequest(
            text=text.strip(),
            profile=args.get("profile") or session.profile,
            session_id=args.get("session_id") or session.chat_session_id,
            interface_context=context,
        )

    # -- hermes_run_task ----------------------------------------------------------------------------

    async def _run_task(self, call: ToolCallEvent, response_id: str) -> None:
        session = self.session
        request = self._request(call)
        if isinstance(request, str):
            await self._tool_result(call.call_id, {"ok": False, "error": request})
            return
        mode = call.arguments.get("mode") or session.background_default_mode
        if mode not in ("chat", "run", "background"):
            await self._tool_result(call.call_id, {"ok": False, "error": "mode must be chat, run or background"})
            return
        if self.active is not None:
            await self._second_run(call, request, response_id)
            return
        active = ActiveRun(AgentRun(session, self.broker, request, call_id=call.call_id), call.call_id, response_id)
        self.active = active
        run = active.run
        if mode == "background":
            await self._promote(active, tier="durable")
            return
        if session.promotion_enabled:
            long_tool = asyncio.ensure_future(run.long_tool.wait())
            try:
                await asyncio.wait(
                    {run.task, long_tool},
                    timeout=session.promote_after_ms / 1000.0,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                long_tool.cancel()
        else:
            await asyncio.wait({run.task})
        if active.cancelled:
            return
        if run.done:
            await self._complete_inline(active)
        else:
            await self._promote(active, tier="promoted")

    async def _complete_inline(self, active: ActiveRun) -> None:
        """Tier A: the real result is the tool result; speak after the phone's audio drained."""
        outcome = active.run.outcome()
        if self.active is active:
            self.active = None
        active.tool_call_open = False
        # The voice model speaks from this at once: give it words to say, not sources or raw JSON.
        output: dict[str, Any] = {
            "ok": outcome.ok,
            "status": "completed" if outcome.ok else "failed",
            "answer": speakable(outcome.answer),
            "tool_count": outcome.tool_count,
        }
        if outcome.error:
            output["error"] = outcome.error
        await self._tool_result(active.call_id, output)
        await self.drain_playback(active.call_id)
        await self._ask_provider_to_speak(instructions=None, why="tool_result")
        self._start_next_queued()

    async def drain_playback(self, call_id: str) -> None:
        session = self.session
        session.playback_drained.clear()
        session.emit("voice.playback_drain.requested", call_id=call_id)
        if session.outbox is None:
            return
        try:
            await asyncio.wait_for(session.playback_drained.wait(), PLAYBACK_DRAIN_TIMEOUT_SECONDS)
        except TimeoutError:
            session.log("voice.realtime_agent.playback_drain_timeout", call_id=call_id)
        session.audio_since_drain = False

    async def _promote(self, active: ActiveRun, *, tier: str) -> None:
        session = self.session
        active.tier = tier
        provider_acknowledged = active.response_id in session.spoken_responses
        if active.tool_call_open:
            if session.audio_since_drain:
                await self.drain_playback(active.call_id)
            active.tool_call_open = False
            await self._tool_result(
                active.call_id,
                {
                    "ok": True,
                    "status": "running_in_background",
                    "message": "The task continues in the background; the answer will be delivered when ready.",
                },
            )
        spoken_handoff = (
            session.spoken_handoff and session.result_delivery != "visual_only" and not provider_acknowledged
        )
        session.emit(
            "hermes.run.promoted",
            tier=tier,
            promote_after_ms=session.promote_after_ms,
            spoken_handoff=spoken_handoff,
            provider_acknowledged=provider_acknowledged,
            result_delivery=session.result_delivery,
            call_id=active.call_id,
            queued_count=len(self.queue),
            run_id=active.run.run_id,
        )
        session.spawn(self._run_background(active), name="voice-background-run")
        if spoken_handoff:
            await self._ask_provider_to_speak(instructions=HANDOFF_PROMPT, why="handoff")

    async def _ask_provider_to_speak(self, *, instructions: str | None, why: str) -> None:
        # A dead provider socket here costs the user a spoken line, not the run or the session.
        connection = self.session.connection
        if connection is None:
            return
        try:
            await connection.request_response(instructions=instructions)
        except Exception as exc:
            self.session.log("voice.realtime_agent.speak_request_failed", why=why, error=type(exc).__name__)

    async def _run_background(self, active: ActiveRun) -> None:
        session = self.session
        run = active.run
        session.hold()
        try:
            done, _ = await asyncio.wait({run.task}, timeout=background_run_max_seconds())
            timed_out = not done
            if timed_out:
                run.cancel()
                await asyncio.wait({run.task}, timeout=5.0)
                session.log("voice.realtime_agent.background_run_timed_out", call_id=active.call_id)
            if active.cancelled:
                return
            outcome = run.outcome(timed_out=timed_out)
            if self.active is active:
                self.active = None
            result = BackgroundResult(
                ok=outcome.ok,
                answer=outcome.answer,
                tool_count=outcome.tool_count,
                error=outcome.error,
                call_id=active.call_id,
                queued_count=len(self.queue),
            )
            fields: dict[str, Any] = {"error": outcome.error} if outcome.error else {}
            session.emit(
                "hermes.run.background_completed",
                ok=outcome.ok,
                tool_count=outcome.tool_count,
                queued_count=len(self.queue),
                call_id=active.call_id,
                run_id=run.run_id,
                **fields,
            )
            self._start_next_queued()
            await self.delivery.deliver(result)
        finally:
            session.release()

    # -- a second ask while one runs ------------------------------------------------------------------

    async def _second_run(self, call: ToolCallEvent, request: AgentTaskRequest, response_id: str) -> None:
        session = self.session
        # Fast lane: a side session gets the grace window; a quick answer skips the queue.
        side_request = dataclasses.replace(request, session_id=side_session_id(request.session_id))
        side = AgentRun(session, self.broker, side_request, call_id=call.call_id, lane="fast")
        self.fast_lanes[call.call_id] = side
        try:
            await asyncio.wait({side.task}, timeout=session.promote_after_ms / 1000.0)
        finally:
            withdrawn = self.fast_lanes.pop(call.call_id, None) is None
        if withdrawn:
            # A cancel arrived during the wait and already closed this call: cancel wins over queueing.
            return
        if side.done and side.outcome().ok:
            await self._complete_inline(ActiveRun(side, call.call_id, response_id))
            return
        side.cancel()
        if len(self.queue) >= MAX_QUEUED_RUNS:
            await self._tool_result(
                call.call_id,
                {"ok": False, "status": "already_running", "message": "A task is already running; try again later."},
            )
            return
        self.queue.append(QueuedRun(call.call_id, request))
        position = len(self.queue)
        await self._tool_result(
            call.call_id,
            {
                "ok": True,
                "status": "queued",
                "queue_position": position,
                "message": "Queued behind the running task; it starts when that one finishes.",
            },
        )
        session.emit("hermes.run.queued", call_id=call.call_id, queue_position=position)

    def _start_next_queued(self) -> None:
        if self.active is not None or not self.queue or self.session.closed:
            return
        queued = self.queue.popleft()
        run = AgentRun(self.session, self.broker, queued.request, call_id=queued.call_id)
        active = ActiveRun(run, queued.call_id, "", tier="queued", tool_call_open=False)
        self.active = active
        self.session.emit("hermes.run.dequeued", call_id=queued.call_id, queued_count=len(self.queue))
        self.session.spawn(self._run_background(active), name="voice-queued-run")

    # -- cancel, status, confirm -------------------------------------------------------------------------

    async def cancel_active(self, *, reason: str) -> bool:
        """Cancel everything asked of the agent: queued asks, asks in the fast lane, the running task."""
        session = self.session
        for queued in list(self.queue):
            session.emit("hermes.run.cancelled", call_id=queued.call_id, queued=True, reason=reason)
        self.queue.clear()
        # Taken out synchronously, before any await, so a fast-lane wait ending now cannot queue its ask.
        fast_lanes = list(self.fast_lanes.items())
        self.fast_lanes.clear()
        active = self.active
        self.active = None
        for call_id, side in fast_lanes:
            side.cancel()
            session.emit("hermes.run.cancelled", call_id=call_id, lane="fast", reason=reason)
        if active is not None:
            active.cancelled = True
            active.run.cancel()
            session.emit("hermes.run.cancelled", call_id=active.call_id, run_id=active.run.run_id, reason=reason)
        open_calls = [call_id for call_id, _ in fast_lanes]
        if active is not None and active.tool_call_open:
            active.tool_call_open = False
            open_calls.append(active.call_id)
        for call_id in open_calls:
            try:
                await self._tool_result(call_id, CANCELLED_RESULT)
            except Exception as exc:
                # A dead provider socket must not stop the cancel (or the phone's response.done after it).
                session.log("voice.realtime_agent.cancel_result_failed", call_id=call_id, error=type(exc).__name__)
        return active is not None or bool(fast_lanes)

    def status(self) -> dict[str, Any]:
        active = self.active
        if active is None:
            return {"ok": True, "status": "idle", "queued_count": len(self.queue)}
        run = active.run
        return {
            "ok": True,
            "status": "running",
            "tier": active.tier or "pending",
            "elapsed_ms": run.elapsed_ms,
            "tool_count": run.tool_count,
            "last_tool": run.last_tool,
            "queued_count": len(self.queue),
            "awaiting_confirmation": run.pending_confirm is not None,
        }

    async def confirm(self, approved: Any) -> dict[str, Any]:
        if not isinstance(approved, bool):
            return {"ok": False, "error": "approved must be true or false"}
        active = self.active
        if active is None or active.run.pending_confirm is None:
            return {"ok": False, "error": "nothing is waiting for confirmation"}
        confirm = getattr(self.broker, "confirm", None)
        if confirm is None:
            return {"ok": False, "error": "this agent does not take confirmations"}
        pending, active.run.pending_confirm = active.run.pending_confirm, None
        accepted = bool(await confirm(str(pending.get("confirm_id") or ""), approved))
        self.session.emit("hermes.confirm.result", call_id=active.call_id, approved=approved, accepted=accepted)
        return {"ok": accepted, "approved": approved}
