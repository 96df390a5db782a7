"""The realtime websocket protocol shared by OpenAI Realtime and xAI's realtime voice API
(xAI speaks the same client and server event names). Subclasses supply the endpoint, the
session.update body and the label used in error messages."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from relay_runtime.redaction import remember_secret

from ..bounded import CappedMap
from ..json_input import decode_json
from ..models import ProviderEvent, ProviderEventKind, ProviderSessionConfig, ToolCallEvent, parse_tool_arguments
from .event_queue import END, EventQueue, drain

logger = logging.getLogger(__name__)

EVENT_QUEUE_SIZE = 2048
MAX_PROVIDER_MESSAGE_BYTES = 8 * 1024 * 1024
# Tool calls whose arguments are still streaming. Past this many (a provider that never finishes
# them) the oldest is dropped; the event that caused it carries the eviction for the session log.
MAX_OPEN_TOOL_CALLS = 32

class ProviderSendError(RuntimeError):
    """The provider socket is gone; the relay falls back to its own delivery paths."""


class RealtimeWebsocketConnection:
    label = "Realtime"

    def __init__(self, ws: ClientConnection, config: ProviderSessionConfig) -> None:
        self._ws = ws
        self.config = config
        self._events: EventQueue = asyncio.Queue(maxsize=EVENT_QUEUE_SIZE)
        # call_id -> (tool name, response id), until its arguments or its response are done.
        self._calls: CappedMap[str, tuple[str, str]] = CappedMap(MAX_OPEN_TOOL_CALLS)
        self._ready_sent = False
        self._closed = False
        self._reader = asyncio.create_task(self._read_loop(), name="realtime-provider-reader")

    # -- client events -------------------------------------------------------------------------------

    async def _send(self, event: dict[str, Any]) -> None:
        if self._closed:
            raise ProviderSendError(f"{self.label} connection is closed")
        try:
            await self._ws.send(json.dumps(event, separators=(",", ":")))
        except (ConnectionClosed, WebSocketException, OSError) as exc:
            raise ProviderSendError(f"{self.label} connection lost: {type(exc).__name__}") from exc

    def session_update(self) -> dict[str, Any]:
        raise NotImplementedError

    async def start(self) -> None:
        await self._send({"type": "session.update", "session": self.session_update()})

    async def send_audio(self, pcm: bytes, sample_rate: int) -> None:
        await self._send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode("ascii")})

    async def commit_audio(self) -> None:
        await self._send({"type": "input_audio_buffer.commit"})

    async def clear_audio(self) -> None:
        await self._send({"type": "input_audio_buffer.clear"})

    async def send_text(self, text: str) -> None:
        await self._send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            }
        )

    async def cancel_response(self) -> None:
        await self._send({"type": "response.cancel"})

    async def send_tool_result(self, call_id: str, output: dict[str, Any]) -> None:
        await self._send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call_id, "output": json.dumps(output)},
            }
        )

    async def append_context_item(self, *, role: str, text: str) -> None:
        content_type = "output_text" if role == "assistant" else "input_text"
        await self._send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": role, "content": [{"type": content_type, "text": text}]},
            }
        )

    async def request_response(self, *, instructions: str | None = None, exact_text: str | None = None) -> None:
        # Neither API has a "say exactly this" primitive; the verbatim prompt already carries the text.
        response: dict[str, Any] = {}
        if instructions:
            response["instructions"] = instructions
        await self._send({"type": "response.create", "response": response} if response else {"type": "response.create"})

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(self._ws.close(), timeout=2.0)
        except (TimeoutError, WebSocketException, OSError):
            pass
        self._reader.cancel()
        self._put_nowait_end()

    def _put_nowait_end(self) -> None:
        try:
            self._events.put_nowait(END)
        except asyncio.QueueFull:
            # The consumer is gone or far behind; drop one event to make room for the end marker.
            self._events.get_nowait()
            self._events.put_nowait(END)

    @property
    def open_tool_calls(self) -> int:
        return len(self._calls)

    # -- server events ----------------------------------------------------------------------------------

    def events(self) -> AsyncIterator[ProviderEvent]:
        return drain(self._events)

    async def _read_loop(self) -> None:
        try:
            async for raw in self._ws:
                if isinstance(raw, bytes):
                    continue
                try:
                    message = decode_json(raw)
                except ValueError:
                    logger.warning("%s sent a non-JSON message; ignored", self.label)
                    continue
                if isinstance(message, dict):
                    received_ns = time.monotonic_ns()
                    for event in self._map(message):
                        # When the relay got it: the queue to the pump is part of the relay's hop.
                        event.metadata["received_ns"] = received_ns
                        await self._events.put(event)
        except ConnectionClosed:
            pass
        except asyncio.CancelledError:
            return
        except Exception:  # a reader bug must end the stream, not hang it
            logger.exception("%s reader failed", self.label)
        self._closed = True
        self._put_nowait_end()

    def _map(self, m: dict[str, Any]) -> list[ProviderEvent]:
        """The relay's events for one server event: a lookup in `SERVER_EVENTS`, one handler per type."""
        handler = SERVER_EVENTS.get(str(m.get("type")))
        return handler(self, m, str(m.get("response_id") or "")) if handler is not None else []

    # -- one handler per server event type (rows of SERVER_EVENTS) -----------------------------------

    def _session_updated(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        # Ready once our session.update took effect; session.created precedes the configuration.
        if self._ready_sent:
            return []
        self._ready_sent = True
        return [ProviderEvent(ProviderEventKind.READY, metadata={"provider_event": m.get("type")})]

    def _response_created(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        return [ProviderEvent(ProviderEventKind.RESPONSE_STARTED, str(_object(m, "response").get("id") or ""))]

    def _response_done(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        response = _object(m, "response")
        status = str(response.get("status") or "completed")
        done_id = str(response.get("id") or "")
        # Its calls that never got their arguments never will.
        for call_id, (_, call_response_id) in self._calls.items():
            if call_response_id == done_id:
                self._calls.pop(call_id)
        return [ProviderEvent(ProviderEventKind.RESPONSE_DONE, done_id, {"status": status})]

    def _audio_delta(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        try:
            audio = base64.b64decode(str(m.get("delta") or ""), validate=True)
        except (binascii.Error, ValueError):
            logger.warning("%s sent undecodable audio; dropped", self.label)
            return []
        payload = {"audio": audio, "sample_rate": self.config.sample_rate}
        return [ProviderEvent(ProviderEventKind.AUDIO_DELTA, rid, payload)]

    def _audio_done(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        return [ProviderEvent(ProviderEventKind.AUDIO_DONE, rid)]

    def _text_delta(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        return [ProviderEvent(ProviderEventKind.OUTPUT_TEXT_DELTA, rid, {"delta": str(m.get("delta") or "")})]

    def _transcript_delta(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        return [ProviderEvent(ProviderEventKind.INPUT_TRANSCRIPT_DELTA, payload={"delta": str(m.get("delta") or "")})]

    def _transcript_final(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        text = str(m.get("transcript") or "")
        return [ProviderEvent(ProviderEventKind.INPUT_TRANSCRIPT_FINAL, payload={"text": text})]

    def _output_item_added(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        item = _object(m, "item")
        if item.get("type") != "function_call":
            return []
        call_id = str(item.get("call_id") or "")
        name = str(item.get("name") or "")
        metadata: dict[str, Any] = {}
        evicted = self._calls.put(call_id, (name, rid))
        if evicted is not None:
            logger.warning("%s left %d tool calls unfinished; dropped the oldest", self.label, MAX_OPEN_TOOL_CALLS)
            metadata = {"evicted_tool_call": {"call_id": evicted[0], "name": evicted[1][0]},
                        "evicted_tool_calls": self._calls.evicted}
        return [ProviderEvent(ProviderEventKind.FUNCTION_CALL_STARTED, rid, {"call_id": call_id, "name": name},
                              metadata)]

    def _arguments_delta(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        return [ProviderEvent(ProviderEventKind.FUNCTION_CALL_ARGUMENTS_DELTA, rid,
                              {"call_id": str(m.get("call_id") or ""), "delta": str(m.get("delta") or "")})]

    def _arguments_done(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        call_id = str(m.get("call_id") or "")
        entry = self._calls.pop(call_id)
        name = str(m.get("name") or (entry[0] if entry is not None else ""))
        call = ToolCallEvent(call_id=call_id, name=name, arguments=parse_tool_arguments(m.get("arguments")))
        return [ProviderEvent(ProviderEventKind.FUNCTION_CALL_COMPLETED, rid, {"call": call})]

    def _error(self, m: dict[str, Any], rid: str) -> list[ProviderEvent]:
        error = m.get("error") or {}
        if isinstance(error, dict):
            message, code = str(error.get("message") or "unknown error"), str(error.get("code") or "")
        else:
            message, code = str(error), ""
        return [ProviderEvent(ProviderEventKind.ERROR, payload={"message": f"{self.label} error: {message}",
                                                                  "code": code})]


def _object(message: dict[str, Any], key: str) -> dict[str, Any]:
    """A nested object of a server event; anything else (a string, a list) reads as empty."""
    value = message.get(key)
    return value if isinstance(value, dict) else {}


ServerEventHandler = Callable[[RealtimeWebsocketConnection, dict[str, Any], str], list[ProviderEvent]]
_C = RealtimeWebsocketConnection
# Server event type -> handler. The GA and beta names of the same event are two rows.
SERVER_EVENTS: dict[str, ServerEventHandler] = {
    "session.updated": _C._session_updated,
    "response.created": _C._response_created,
    "response.done": _C._response_done,
    "response.output_audio.delta": _C._audio_delta,
    "response.audio.delta": _C._audio_delta,
    "response.output_audio.done": _C._audio_done,
    "response.audio.done": _C._audio_done,
    "response.output_audio_transcript.delta": _C._text_delta,
    "response.audio_transcript.delta": _C._text_delta,
    "response.output_text.delta": _C._text_delta,
    "response.text.delta": _C._text_delta,
    "conversation.item.input_audio_transcription.delta": _C._transcript_delta,
    "conversation.item.input_audio_transcription.completed": _C._transcript_final,
    "response.output_item.added": _C._output_item_added,
    "response.function_call_arguments.delta": _C._arguments_delta,
    "response.function_call_arguments.done": _C._arguments_done,
    "error": _C._error,
}


class RealtimeWebsocketProvider:
    provider_id = ""
    connection_class: type[RealtimeWebsocketConnection] = RealtimeWebsocketConnection

    def __init__(self, *, url: str | None = None, api_key: str | None = None, open_timeout: float = 10.0) -> None:
        self.url = url
        self.api_key = api_key
        self.open_timeout = open_timeout

    def _endpoint(self, config: ProviderSessionConfig) -> str:
        base = self.url or config.url
        if not base:
            raise ValueError(f"{self.provider_id}: no endpoint url configured")
        return f"{base}{'&' if '?' in base else '?'}{urlencode({'model': config.model})}"

    async def connect(self, config: ProviderSessionConfig) -> RealtimeWebsocketConnection:
        key = self.api_key or config.api_key
        if not key:
            raise ValueError(f"{self.provider_id}: no API key configured")
        remember_secret(key)  # blanked wherever the relay records it (a provider may echo it in an error)
        ws = await connect(
            self._endpoint(config),
            additional_headers={"Authorization": f"Bearer {key}"},
            max_size=MAX_PROVIDER_MESSAGE_BYTES,
            open_timeout=self.open_timeout,
        )
        connection = self.connection_class(ws, config)
        try:
            await connection.start()
        except BaseException:
            await connection.close()
            raise
        return connection
