"""The provider pump: turns the realtime provider's events into phone events.

It never waits on agent work; tool calls are handed to the run coordinator as their own tasks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .event_log import clip
from .models import ProviderEvent, ProviderEventKind, ToolCallEvent
from .promotion import parse_tool_arguments

if TYPE_CHECKING:
    from .delivery import DeliveryManager
    from .promotion import RunCoordinator
    from .session import VoiceSession
    from .tracing import VoiceTrace

logger = logging.getLogger(__name__)

# Provider notices that mean "nothing to do", e.g. cancelling when no response is active.
PROVIDER_MESSAGE_CHARS = 500
_BENIGN_ERROR_MARKERS = ("no active response", "cancellation failed")


def is_benign_provider_error(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in _BENIGN_ERROR_MARKERS)


class ProviderPump:
    def __init__(
        self,
        session: VoiceSession,
        runs: RunCoordinator,
        delivery: DeliveryManager,
        trace: VoiceTrace | None = None,
    ) -> None:
        self.session = session
        self.runs = runs
        self.delivery = delivery
        self.trace = trace

    async def run(self) -> None:
        session = self.session
        connection = session.connection
        if connection is None:
            return
        try:
            async for event in connection.events():
                try:
                    self.handle(event)
                except Exception as exc:
                    logger.exception("voice session %s: provider event handling failed", session.session_id)
                    session.log("voice.realtime_agent.provider_event_failed", error=type(exc).__name__)
        except Exception as exc:
            if not session.closed:
                session.log("voice.realtime_agent.provider_stream_failed", error=type(exc).__name__)
                session.emit("voice.error", code="provider_disconnected", message="voice provider connection lost")
            return
        if not session.closed:
            session.log("voice.realtime_agent.provider_stream_ended")
            session.emit("voice.error", code="provider_disconnected", message="voice provider connection closed")

    def handle(self, event: ProviderEvent) -> None:
        if self.trace is not None:
            self.trace.on_provider_event(event)
        if self.delivery.intercept(event):
            return
        self.forward(event)

    def forward(self, event: ProviderEvent) -> None:
        session = self.session
        kind = event.kind
        rid = event.response_id
        payload = event.payload
        if kind is ProviderEventKind.AUDIO_DELTA:
            audio = payload.get("audio")
            if not isinstance(audio, (bytes, bytearray)):
                return
            if rid and rid not in session.spoken_responses:
                session.spoken_responses.append(rid)
            session.audio_since_drain = True
            session.emit(
                "voice.output_audio.delta",
                response_id=rid,
                audio=bytes(audio),
                sample_rate=int(payload.get("sample_rate") or session.sample_rate),
            )
        elif kind is ProviderEventKind.OUTPUT_TEXT_DELTA:
            delta = str(payload.get("delta") or "")
            if delta and rid and rid not in session.spoken_responses:
                session.spoken_responses.append(rid)
            session.emit("voice.response.delta", response_id=rid, delta=delta)
        elif kind is ProviderEventKind.AUDIO_DONE:
            session.emit("voice.output_audio.done", response_id=rid)
        elif kind is ProviderEventKind.RESPONSE_STARTED:
            if rid in session.started_responses:
                return
            session.started_responses.append(rid)
            session.response_started(rid)
            session.emit("voice.response.started", response_id=rid)
        elif kind is ProviderEventKind.RESPONSE_DONE:
            session.response_done(rid)
            fields: dict[str, Any] = {}
            if payload.get("status"):
                fields["status"] = str(payload["status"])
            session.emit("voice.response.done", response_id=rid, **fields)
        elif kind is ProviderEventKind.INPUT_TRANSCRIPT_DELTA:
            session.emit("voice.input_transcript.delta", delta=str(payload.get("delta") or ""))
        elif kind is ProviderEventKind.INPUT_TRANSCRIPT_FINAL:
            session.emit("voice.input_transcript.final", text=str(payload.get("text") or ""))
            self.delivery.on_user_final_transcript()
        elif kind is ProviderEventKind.FUNCTION_CALL_STARTED:
            evicted = event.metadata.get("evicted_tool_call")
            if isinstance(evicted, dict):
                session.log("voice.realtime_agent.tool_call_evicted", call_id=str(evicted.get("call_id") or ""),
                            tool=str(evicted.get("name") or ""),
                            evicted_total=int(event.metadata.get("evicted_tool_calls") or 0))
            session.emit(
                "voice.tool_call.started",
                response_id=rid,
                call_id=str(payload.get("call_id") or ""),
                name=str(payload.get("name") or ""),
            )
        elif kind is ProviderEventKind.FUNCTION_CALL_COMPLETED:
            self._tool_call(event)
        elif kind is ProviderEventKind.ERROR:
            message = clip(str(payload.get("message") or "voice provider error"), PROVIDER_MESSAGE_CHARS)
            if is_benign_provider_error(message):
                session.log("voice.realtime_agent.provider_notice", message=message)
            else:
                session.log("voice.realtime_agent.provider_error", message=message)
                session.emit("voice.error", code="provider_error", message=message)
        elif kind is ProviderEventKind.READY:
            session.log("voice.realtime_agent.provider_ready")

    def _tool_call(self, event: ProviderEvent) -> None:
        call = event.payload.get("call")
        if not isinstance(call, ToolCallEvent):
            self.session.log("voice.realtime_agent.bad_tool_call", detail="payload has no ToolCallEvent")
            return
        if not isinstance(call.arguments, dict):
            call = ToolCallEvent(call.call_id, call.name, parse_tool_arguments(call.arguments))
        self.session.emit("voice.tool_call", response_id=event.response_id, call_id=call.call_id, name=call.name)
        self.session.spawn(self.runs.handle_tool_call(call, event.response_id), name="voice-tool-call")
