"""The provider pump: turns the realtime provider's events into phone events.

It never waits on agent work; tool calls are handed to the run coordinator as their own tasks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from relay_runtime.redaction import scrub_text

from .event_log import clip
from .models import ProviderEvent, ProviderEventKind, ToolCallEvent, parse_tool_arguments

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
        kinds = ProviderEventKind
        self._handlers: dict[ProviderEventKind, Callable[[ProviderEvent], None]] = {
            kinds.AUDIO_DELTA: self._audio_delta,
            kinds.OUTPUT_TEXT_DELTA: self._text_delta,
            kinds.AUDIO_DONE: self._audio_done,
            kinds.RESPONSE_STARTED: self._response_started,
            kinds.RESPONSE_DONE: self._response_done,
            kinds.INPUT_TRANSCRIPT_DELTA: self._transcript_delta,
            kinds.INPUT_TRANSCRIPT_FINAL: self._transcript_final,
            kinds.FUNCTION_CALL_STARTED: self._tool_call_started,
            kinds.FUNCTION_CALL_ARGUMENTS_DELTA: self._ignore,
            kinds.FUNCTION_CALL_COMPLETED: self._tool_call,
            kinds.ERROR: self._error,
            kinds.READY: self._ready,
        }

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
        # "In" is when the provider connection read it, if it says so, else now.
        in_ns = event.metadata.get("received_ns") or time.monotonic_ns()
        if self.trace is not None:
            self.trace.on_provider_event(event, in_ns)
        session = self.session
        session.hop_in_ns = in_ns
        try:
            if not self.delivery.intercept(event):
                self.forward(event)
        finally:
            session.hop_in_ns = 0

    def forward(self, event: ProviderEvent) -> None:
        """Turn one provider event into phone events: a lookup in the table, one handler per kind."""
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event)

    # -- one handler per provider event kind (rows of self._handlers) ---------------------------------

    def _mark_spoken(self, rid: str) -> None:
        if rid and rid not in self.session.spoken_responses:
            self.session.spoken_responses.append(rid)

    def _audio_delta(self, event: ProviderEvent) -> None:
        session = self.session
        audio = event.payload.get("audio")
        if not isinstance(audio, (bytes, bytearray)):
            return
        self._mark_spoken(event.response_id)
        session.audio_since_drain = True
        session.emit("voice.output_audio.delta", response_id=event.response_id, audio=bytes(audio),
                     sample_rate=int(event.payload.get("sample_rate") or session.sample_rate))

    def _text_delta(self, event: ProviderEvent) -> None:
        delta = str(event.payload.get("delta") or "")
        if delta:
            self._mark_spoken(event.response_id)
        self.session.emit("voice.response.delta", response_id=event.response_id, delta=delta)

    def _audio_done(self, event: ProviderEvent) -> None:
        self.session.emit("voice.output_audio.done", response_id=event.response_id)

    def _response_started(self, event: ProviderEvent) -> None:
        session, rid = self.session, event.response_id
        if rid in session.started_responses:
            return
        session.started_responses.append(rid)
        session.response_started(rid)
        session.emit("voice.response.started", response_id=rid)

    def _response_done(self, event: ProviderEvent) -> None:
        self.session.response_done(event.response_id)
        status = event.payload.get("status")
        fields: dict[str, Any] = {"status": str(status)} if status else {}
        self.session.emit("voice.response.done", response_id=event.response_id, **fields)

    def _transcript_delta(self, event: ProviderEvent) -> None:
        self.session.emit("voice.input_transcript.delta", delta=str(event.payload.get("delta") or ""))

    def _transcript_final(self, event: ProviderEvent) -> None:
        self.session.emit("voice.input_transcript.final", text=str(event.payload.get("text") or ""))
        self.delivery.on_user_final_transcript()

    def _tool_call_started(self, event: ProviderEvent) -> None:
        evicted = event.metadata.get("evicted_tool_call")
        if isinstance(evicted, dict):
            self.session.log("voice.realtime_agent.tool_call_evicted", call_id=str(evicted.get("call_id") or ""),
                             tool=str(evicted.get("name") or ""),
                             evicted_total=int(event.metadata.get("evicted_tool_calls") or 0))
        self.session.emit("voice.tool_call.started", response_id=event.response_id,
                          call_id=str(event.payload.get("call_id") or ""), name=str(event.payload.get("name") or ""))

    def _error(self, event: ProviderEvent) -> None:
        # Scrubbed before clipping: a provider may echo the relay's own key back ("Incorrect API key: ...").
        message = clip(scrub_text(str(event.payload.get("message") or "voice provider error")), PROVIDER_MESSAGE_CHARS)
        if is_benign_provider_error(message):
            self.session.log("voice.realtime_agent.provider_notice", message=message)
        else:
            self.session.log("voice.realtime_agent.provider_error", message=message)
            self.session.emit("voice.error", code="provider_error", message=message)

    def _ready(self, event: ProviderEvent) -> None:
        self.session.log("voice.realtime_agent.provider_ready")

    def _ignore(self, event: ProviderEvent) -> None:
        """Argument fragments: the completed call carries them whole."""

    def _tool_call(self, event: ProviderEvent) -> None:
        call = event.payload.get("call")
        if not isinstance(call, ToolCallEvent):
            self.session.log("voice.realtime_agent.bad_tool_call", detail="payload has no ToolCallEvent")
            return
        if not isinstance(call.arguments, dict):
            call = ToolCallEvent(call.call_id, call.name, parse_tool_arguments(call.arguments))
        self.session.emit("voice.tool_call", response_id=event.response_id, call_id=call.call_id, name=call.name)
        self.session.spawn(self.runs.handle_tool_call(call, event.response_id), name="voice-tool-call")
