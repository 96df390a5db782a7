"""An offline provider: answers with canned text and a sine tone, and turns "task: ..." messages
into hermes_run_task calls, so the whole relay runs without keys or network."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

from ..models import RUN_TASK_TOOL, ProviderEvent, ProviderEventKind, ProviderSessionConfig, ToolCallEvent
from ..tts import speech_duration_ms, tone_frames

TASK_PREFIXES = {"task:": "run", "background:": "background"}
_RESULT_MARKER = "Result:\n"


class StubConnection:
    def __init__(self, config: ProviderSessionConfig, *, tone_ms: int | None, frame_ms: int) -> None:
        self.config = config
        self.tone_ms = tone_ms
        self.frame_ms = frame_ms
        self.closed = False
        self.tool_results: list[tuple[str, dict[str, Any]]] = []
        self.context: list[tuple[str, str]] = []
        self._events: asyncio.Queue[ProviderEvent | None] = asyncio.Queue()
        self._pending_user_text: str | None = None
        self._audio_bytes = 0
        self._ids = itertools.count(1)
        self._current: str | None = None
        self._events.put_nowait(ProviderEvent(ProviderEventKind.READY))

    def _put(self, event: ProviderEvent) -> None:
        if not self.closed:
            self._events.put_nowait(event)

    async def send_audio(self, pcm: bytes, sample_rate: int) -> None:
        self._audio_bytes += len(pcm)

    async def commit_audio(self) -> None:
        heard_ms = self._audio_bytes * 1000 // max(1, 2 * self.config.sample_rate)
        self._audio_bytes = 0
        heard = {"text": f"[{heard_ms} ms of audio]"}
        self._put(ProviderEvent(ProviderEventKind.INPUT_TRANSCRIPT_FINAL, payload=heard))
        self._speak(f"I heard {heard_ms} milliseconds of audio.")

    async def send_text(self, text: str) -> None:
        self._pending_user_text = text

    async def clear_audio(self) -> None:
        self._audio_bytes = 0

    async def cancel_response(self) -> None:
        if self._current is None:
            self._put(ProviderEvent(ProviderEventKind.ERROR, payload={"message": "stub: no active response"}))
            return
        self._put(ProviderEvent(ProviderEventKind.RESPONSE_DONE, self._current, {"status": "cancelled"}))
        self._current = None

    async def send_tool_result(self, call_id: str, output: dict[str, Any]) -> None:
        self.tool_results.append((call_id, output))

    async def append_context_item(self, *, role: str, text: str) -> None:
        self.context.append((role, text))

    async def request_response(self, *, instructions: str | None = None, exact_text: str | None = None) -> None:
        text, self._pending_user_text = self._pending_user_text, None
        if exact_text:
            self._speak(exact_text)
            return
        if instructions and _RESULT_MARKER in instructions:
            self._speak("Here is what I found. " + instructions.split(_RESULT_MARKER, 1)[1])
            return
        if text:
            for prefix, mode in TASK_PREFIXES.items():
                if text.lower().startswith(prefix):
                    self._call_tool(text[len(prefix):].strip(), mode)
                    return
            self._speak(f"You said: {text}")
            return
        if self.tool_results:
            _, output = self.tool_results[-1]
            answer = output.get("answer")
            self._speak(f"Done. {answer}" if answer else "Okay, I am on it.")
            return
        self._speak("Hello from the stub voice.")

    def _call_tool(self, task: str, mode: str) -> None:
        rid = f"stub-resp-{next(self._ids)}"
        call_id = f"stub-call-{next(self._ids)}"
        self._put(ProviderEvent(ProviderEventKind.RESPONSE_STARTED, rid))
        started = {"call_id": call_id, "name": RUN_TASK_TOOL}
        self._put(ProviderEvent(ProviderEventKind.FUNCTION_CALL_STARTED, rid, started))
        call = ToolCallEvent(call_id=call_id, name=RUN_TASK_TOOL, arguments={"text": task, "mode": mode})
        self._put(ProviderEvent(ProviderEventKind.FUNCTION_CALL_COMPLETED, rid, {"call": call}))
        self._put(ProviderEvent(ProviderEventKind.RESPONSE_DONE, rid, {"status": "completed"}))

    def _speak(self, text: str) -> None:
        rid = f"stub-resp-{next(self._ids)}"
        self._current = rid
        self._put(ProviderEvent(ProviderEventKind.RESPONSE_STARTED, rid))
        self._put(ProviderEvent(ProviderEventKind.OUTPUT_TEXT_DELTA, rid, {"delta": text}))
        duration = self.tone_ms if self.tone_ms is not None else speech_duration_ms(text)
        rate = self.config.sample_rate
        for frame in tone_frames(duration, sample_rate=rate, frame_ms=self.frame_ms):
            self._put(ProviderEvent(ProviderEventKind.AUDIO_DELTA, rid, {"audio": frame, "sample_rate": rate}))
        self._put(ProviderEvent(ProviderEventKind.AUDIO_DONE, rid))
        self._put(ProviderEvent(ProviderEventKind.RESPONSE_DONE, rid, {"status": "completed"}))
        self._current = None

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._events.put_nowait(None)

    async def events(self) -> AsyncIterator[ProviderEvent]:
        while True:
            event = await self._events.get()
            if event is None:
                return
            yield event


class StubProvider:
    provider_id = "stub"

    def __init__(self, *, tone_ms: int | None = None, frame_ms: int = 100) -> None:
        self.tone_ms = tone_ms
        self.frame_ms = frame_ms

    async def connect(self, config: ProviderSessionConfig) -> StubConnection:
        return StubConnection(config, tone_ms=self.tone_ms, frame_ms=self.frame_ms)
