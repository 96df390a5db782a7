"""A realtime provider session on a cassette: recorded as its provider events, replayed as a provider.

``CassetteProvider(inner)`` stands where a provider goes (``create_app(providers=...)``).
While a cassette is in use (``relay_runtime.cassettes.use``), a session it connects
is matched on its configuration (provider, model, voice, instructions, tools, rate):
in record mode ``inner`` serves it and every call the relay makes on the connection
and every event it reads from it is written down in order; in replay no provider is
reached and the recorded events come back, each released once the relay has made
the calls that preceded it when recorded. Audio the relay sends is matched by
count only (its chunking depends on timing); every other call must match.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from typing import Any

from relay_runtime import cassettes
from relay_runtime.cassettes.cassette import WITHHELD

from ..models import ProviderEvent, ProviderEventKind, ProviderSessionConfig, RealtimeProvider, ToolCallEvent

SESSION = "session"
_AUDIO = "send_audio"


def session_request(provider_id: str, config: ProviderSessionConfig) -> dict[str, Any]:
    """What a realtime session is matched on (never its key or endpoint)."""
    return {
        "provider": provider_id,
        "api": "realtime",
        "model": config.model,
        "voice": config.voice,
        "instructions": config.instructions,
        "tools": cassettes.jsonable(config.tools),
        "sample_rate": config.sample_rate,
        "stream": True,
    }


# -- events as JSON ------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, ToolCallEvent):
        return {"$tool_call": {"call_id": value.call_id, "name": value.name, "arguments": _encode(value.arguments)}}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return cassettes.jsonable(value)


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        if set(value) == {"$tool_call"}:
            call = value["$tool_call"]
            return ToolCallEvent(call_id=call["call_id"], name=call["name"], arguments=_decode(call["arguments"]))
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def event_record(event: ProviderEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": event.kind.value}
    if event.response_id:
        out["response_id"] = event.response_id
    if event.payload:
        out["payload"] = _encode(event.payload)
    if event.metadata:
        out["metadata"] = _encode(event.metadata)
    return out


def event_of(record: dict[str, Any]) -> ProviderEvent:
    return ProviderEvent(
        ProviderEventKind(record["kind"]),
        str(record.get("response_id", "")),
        _decode(record.get("payload") or {}),
        _decode(record.get("metadata") or {}),
    )


# -- the provider --------------------------------------------------------------------------


class CassetteProvider:
    """``inner`` recorded into, or replayed from, the cassette in use; ``inner`` itself when none is."""

    def __init__(self, inner: RealtimeProvider | None = None, *, provider_id: str | None = None) -> None:
        if inner is None and not provider_id:
            raise ValueError("CassetteProvider needs the provider it stands for, or at least its provider_id")
        self.inner = inner
        self.provider_id = provider_id or inner.provider_id  # type: ignore[union-attr]

    async def connect(self, config: ProviderSessionConfig) -> Any:
        cassette = cassettes.current()
        if cassette is None:
            return await self._inner().connect(config)
        tape = cassette.begin(session_request(self.provider_id, config))
        if tape.replaying:
            return ReplayedConnection(tape)
        return RecordingConnection(await self._inner().connect(config), tape)

    def _inner(self) -> RealtimeProvider:
        if self.inner is None:
            raise cassettes.CassetteError(f"{self.provider_id}: no provider to record from (replay-only provider)")
        return self.inner


class RecordingConnection:
    """The provider's connection, each call and each event read written to the tape as it happens."""

    def __init__(self, inner: Any, tape: cassettes.CallTape) -> None:
        self.inner = inner
        self.tape = tape
        self.start = time.perf_counter()
        tape.record.setdefault(SESSION, [])

    def _step(self, step: dict[str, Any]) -> None:
        step["at_ms"] = round((time.perf_counter() - self.start) * 1000, 3)
        self.tape.add(SESSION, step)

    async def send_audio(self, pcm: bytes, sample_rate: int) -> None:
        self._step({"send": _AUDIO, "bytes": len(pcm), "sample_rate": sample_rate})
        await self.inner.send_audio(pcm, sample_rate)

    async def commit_audio(self) -> None:
        self._step({"send": "commit_audio"})
        await self.inner.commit_audio()

    async def send_text(self, text: str) -> None:
        self._step({"send": "send_text", "text": text})
        await self.inner.send_text(text)

    async def clear_audio(self) -> None:
        self._step({"send": "clear_audio"})
        await self.inner.clear_audio()

    async def cancel_response(self) -> None:
        self._step({"send": "cancel_response"})
        await self.inner.cancel_response()

    async def send_tool_result(self, call_id: str, output: dict[str, Any]) -> None:
        self._step({"send": "send_tool_result", "call_id": call_id, "output": _encode(output)})
        await self.inner.send_tool_result(call_id, output)

    async def append_context_item(self, *, role: str, text: str) -> None:
        self._step({"send": "append_context_item", "role": role, "text": text})
        await self.inner.append_context_item(role=role, text=text)

    async def request_response(self, *, instructions: str | None = None, exact_text: str | None = None) -> None:
        self._step({"send": "request_response", "instructions": instructions, "exact_text": exact_text})
        await self.inner.request_response(instructions=instructions, exact_text=exact_text)

    async def close(self) -> None:
        await self.inner.close()

    async def events(self) -> AsyncIterator[ProviderEvent]:
        async for event in self.inner.events():
            self._step({"event": event_record(event)})
            yield event


class ReplayedConnection:
    """The recorded events, each released once the relay made the calls recorded before it."""

    def __init__(self, tape: cassettes.CallTape) -> None:
        self.tape = tape
        steps = tape.record.get(SESSION)
        if not isinstance(steps, list):
            raise cassettes.CassetteError(f"cassette {tape.cassette.path}: a realtime call without its '{SESSION}'")
        self.steps = steps
        self.position = 0
        self.timed = tape.timing == "recorded"
        self.last_ms = 0.0
        self._events: asyncio.Queue[tuple[float, ProviderEvent] | None] = asyncio.Queue()
        self.closed = False
        self._release()

    def _release(self) -> None:
        """Hand out every event up to the next recorded call."""
        while self.position < len(self.steps) and "event" in self.steps[self.position]:
            step = self.steps[self.position]
            at = float(step.get("at_ms") or 0.0)
            gap, self.last_ms = max(0.0, at - self.last_ms) / 1000, max(self.last_ms, at)
            self._events.put_nowait((gap, event_of(step["event"])))
            self.position += 1

    def _expect(self, call: dict[str, Any]) -> None:
        name = call["send"]
        while self.position < len(self.steps):
            step = self.steps[self.position]
            if step.get("send") == _AUDIO and name != _AUDIO:
                # Less audio than recorded, in other chunks: what followed it is due now.
                self.position += 1
                self._release()
                continue
            break
        if self.position >= len(self.steps):
            if name == _AUDIO:
                return  # more audio than recorded: nothing waits on it
            raise self._miss(call, None)
        step = self.steps[self.position]
        if name == _AUDIO and step.get("send") != _AUDIO:
            return
        recorded = {k: v for k, v in step.items() if k != "at_ms"}
        if name != _AUDIO and recorded != self._as_stored(call):
            raise self._miss(call, recorded)
        self.position += 1
        self._release()

    def _as_stored(self, call: dict[str, Any]) -> dict[str, Any]:
        """``call`` as the cassette stored it: through the redaction policy it was recorded under."""
        policy = self.tape.cassette.policy
        return policy.redact_spans(call) if policy is not None else call

    def _miss(self, call: dict[str, Any], recorded: dict[str, Any] | None) -> cassettes.CassetteMiss:
        # The call is shown as the cassette would write it (policy, credentials, redact= hook): the message
        # reaches the caller and logs. What is recorded comes from the file, written so already.
        cassette = self.tape.cassette
        written = cassette.as_written({"request": self.tape.request, SESSION: [call]})
        steps = written.get(SESSION) if written is not None else None
        shown = steps[0] if isinstance(steps, list) and len(steps) == 1 else WITHHELD
        where = f"cassette {cassette.path}, realtime session step {self.position + 1}"
        if recorded is None:
            text = f"{where}: the relay made a call the recording does not have: {shown}"
        else:
            text = f"{where}: the relay made another call than recorded\nrecorded:  {recorded}\nthis call: {shown}"
        return cassette.missed(cassettes.CassetteMiss(text))

    async def send_audio(self, pcm: bytes, sample_rate: int) -> None:
        self._expect({"send": _AUDIO})

    async def commit_audio(self) -> None:
        self._expect({"send": "commit_audio"})

    async def send_text(self, text: str) -> None:
        self._expect({"send": "send_text", "text": text})

    async def clear_audio(self) -> None:
        self._expect({"send": "clear_audio"})

    async def cancel_response(self) -> None:
        self._expect({"send": "cancel_response"})

    async def send_tool_result(self, call_id: str, output: dict[str, Any]) -> None:
        self._expect({"send": "send_tool_result", "call_id": call_id, "output": _encode(output)})

    async def append_context_item(self, *, role: str, text: str) -> None:
        self._expect({"send": "append_context_item", "role": role, "text": text})

    async def request_response(self, *, instructions: str | None = None, exact_text: str | None = None) -> None:
        self._expect({"send": "request_response", "instructions": instructions, "exact_text": exact_text})

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._events.put_nowait(None)

    async def events(self) -> AsyncIterator[ProviderEvent]:
        while True:
            item = await self._events.get()
            if item is None:
                return
            gap, event = item
            if self.timed and gap:
                await asyncio.sleep(gap)
            yield event
