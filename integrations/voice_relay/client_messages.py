"""Messages the phone sends on an attached socket. A bad message gets a voice.error naming what was
wrong; the session carries on."""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .event_log import clip
from .json_input import decode_json
from .tts import pcm16_peak

if TYPE_CHECKING:
    from .delivery import DeliveryManager
    from .promotion import RunCoordinator
    from .session import VoiceSession

logger = logging.getLogger(__name__)

# Input audio louder than this counts as the user talking (PCM16 peak), for floor decisions.
MIC_ACTIVITY_PEAK = 1500


class ClientMessageError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_client_message(data: str) -> dict[str, Any]:
    try:
        message = decode_json(data)
    except ValueError:
        raise ClientMessageError("bad_json", "message is not valid JSON") from None
    if not isinstance(message, dict):
        raise ClientMessageError("bad_message", "message must be a JSON object")
    kind = message.get("type")
    if not isinstance(kind, str) or not kind:
        raise ClientMessageError("bad_message", "message needs a string 'type'")
    return message


class ClientMessages:
    def __init__(
        self,
        session: VoiceSession,
        runs: RunCoordinator,
        delivery: DeliveryManager,
        *,
        max_audio_chunk_bytes: int,
        close_session: Callable[[str], Awaitable[None]],
    ) -> None:
        self.session = session
        self.runs = runs
        self.delivery = delivery
        self.max_audio_chunk_bytes = max_audio_chunk_bytes
        self._close_session = close_session
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "session.start": self._session_start,
            "session.resume": self._resume_on_attached,
            "input_audio.append": self._audio_append,
            "input_audio.commit": self._audio_commit,
            "input_audio.clear": self._audio_clear,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
            "playback.drained": self._playback_drained,
            "hermes.confirm": self._confirm,
            "client.ack": self._ack,
            "session.close": self._session_close,
            "hermes.result.respeak": self._respeak,
        }
        self.last_acked_event_id = 0

    async def handle_text(self, data: str) -> None:
        try:
            message = parse_client_message(data)
            handler = self._handlers.get(message["type"])
            if handler is None:
                raise ClientMessageError("unknown_message_type", f"unknown message type {clip(repr(message['type']))}")
            await handler(message)
        except ClientMessageError as exc:
            self.error(exc.code, str(exc))
        except Exception as exc:
            # A provider send failing must not end the phone's session.
            session = self.session
            logger.warning("voice session %s: client message failed: %s", session.session_id, session.told(exc))
            self.error("message_failed", f"could not handle message: {type(exc).__name__}")

    def error(self, code: str, message: str) -> None:
        self.session.emit("voice.error", record=False, code=code, message=message)

    def _connection(self) -> Any:
        connection = self.session.connection
        if connection is None:
            raise ClientMessageError("provider_unavailable", "the voice provider is not connected")
        return connection

    async def _session_start(self, message: dict[str, Any]) -> None:
        # The session started when this socket attached; a repeated start is answered, not an error.
        self.session.emit("voice.session.started", record=False)

    async def _resume_on_attached(self, message: dict[str, Any]) -> None:
        raise ClientMessageError("already_attached", "this socket already owns the session")

    async def _audio_append(self, message: dict[str, Any]) -> None:
        raw = message.get("audio")
        if not isinstance(raw, str):
            raise ClientMessageError("bad_audio", "input_audio.append needs base64 'audio'")
        if len(raw) > self.max_audio_chunk_bytes * 4 // 3 + 4:
            raise ClientMessageError("audio_chunk_too_large", f"audio chunk over {self.max_audio_chunk_bytes} bytes")
        try:
            pcm = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ClientMessageError("bad_audio", "audio is not valid base64") from None
        if len(pcm) > self.max_audio_chunk_bytes:
            raise ClientMessageError("audio_chunk_too_large", f"audio chunk over {self.max_audio_chunk_bytes} bytes")
        chunk_id = message.get("chunk_id")
        if isinstance(chunk_id, int) and not isinstance(chunk_id, bool):
            if chunk_id <= self.session.last_input_chunk_id:
                return  # already forwarded before a resume
            self.session.last_input_chunk_id = chunk_id
        sample_rate = message.get("sample_rate", self.session.sample_rate)
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or not 8000 <= sample_rate <= 48000:
            raise ClientMessageError("bad_audio", "sample_rate must be an integer between 8000 and 48000")
        if pcm16_peak(pcm) >= MIC_ACTIVITY_PEAK:
            self.session.last_mic_activity = time.monotonic()
        await self._connection().send_audio(pcm, sample_rate)

    async def _audio_commit(self, message: dict[str, Any]) -> None:
        connection = self._connection()
        self.session.user_speech_ended("commit")
        await connection.commit_audio()

    async def _audio_clear(self, message: dict[str, Any]) -> None:
        await self._connection().clear_audio()

    async def _response_create(self, message: dict[str, Any]) -> None:
        text = message.get("text")
        if text is not None and (not isinstance(text, str) or len(text) > 8000):
            raise ClientMessageError("bad_message", "response.create 'text' must be a string under 8000 characters")
        connection = self._connection()
        self.session.user_speech_ended("text" if text else "response_create")
        if text:
            await connection.send_text(text)
        await connection.request_response()

    async def _response_cancel(self, message: dict[str, Any]) -> None:
        session = self.session
        await self.runs.cancel_active(reason="client")
        if session.active_responses and session.connection is not None:
            await session.connection.cancel_response()
        session.emit("voice.response.done", cancelled=True)

    async def _playback_drained(self, message: dict[str, Any]) -> None:
        self.session.playback_drained.set()
        self.session.audio_since_drain = False

    async def _confirm(self, message: dict[str, Any]) -> None:
        result = await self.runs.confirm(message.get("approved"))
        if not result.get("ok"):
            raise ClientMessageError("confirm_failed", str(result.get("error") or "confirmation not accepted"))

    async def _ack(self, message: dict[str, Any]) -> None:
        event_id = message.get("event_id")
        if isinstance(event_id, int) and not isinstance(event_id, bool) and event_id > self.last_acked_event_id:
            self.last_acked_event_id = event_id

    async def _session_close(self, message: dict[str, Any]) -> None:
        await self._close_session("client_closed")

    async def _respeak(self, message: dict[str, Any]) -> None:
        last = self.delivery.last_result
        if last is None:
            raise ClientMessageError("nothing_to_respeak", "no background result has been delivered yet")
        respeak = self.delivery.respeak
        if respeak is not None and not respeak.done():
            raise ClientMessageError("respeak_in_progress", "the last result is already being spoken again")
        again = type(last)(
            ok=last.ok, answer=last.answer, tool_count=last.tool_count, error=last.error, call_id=last.call_id
        )
        self.delivery.respeak = self.session.spawn(self.delivery.deliver(again), name="voice-respeak")
