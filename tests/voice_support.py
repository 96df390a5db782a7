"""Fakes and websocket helpers shared by the voice relay tests (no tests here).

The fakes are the seed's: a provider connection that records what the relay asked it to do and
emits whatever events a test feeds it, and task brokers whose runs finish when a test says so.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from aiohttp import WSMsgType

from relay_runtime.integrations.voice_relay import AgentTaskRequest, ProviderEvent


class FakeNativeConnection:
    def __init__(self) -> None:
        self.text_inputs: list[str] = []
        self.tool_results: list[tuple[str, dict[str, Any]]] = []
        self.context_items: list[tuple[str, str]] = []
        self.exact_response_texts: list[str] = []
        self.request_response_count = 0
        self.cancelled = False
        self.closed = False
        # When set, summary/exact delivery injections (recognizable by their
        # "final spoken answer" instructions) raise — simulates the provider
        # socket dying between run completion and result delivery.
        self.fail_summary_requests = False
        self._events: asyncio.Queue[ProviderEvent | None] = asyncio.Queue()

    async def send_audio(self, pcm: bytes, sample_rate: int) -> None:
        pass

    async def commit_audio(self) -> None:
        pass

    async def send_text(self, text: str) -> None:
        self.text_inputs.append(text)

    async def clear_audio(self) -> None:
        pass

    async def cancel_response(self) -> None:
        self.cancelled = True

    async def send_tool_result(self, call_id: str, output: dict[str, Any]) -> None:
        self.tool_results.append((call_id, output))

    async def append_context_item(self, *, role: str, text: str) -> None:
        self.context_items.append((role, text))

    async def request_response(
        self,
        *,
        instructions: str | None = None,
        exact_text: str | None = None,
    ) -> None:
        if (
            self.fail_summary_requests
            and instructions
            and "final spoken answer" in instructions
        ):
            raise RuntimeError("provider socket dead")
        self.request_response_count += 1
        if exact_text:
            self.exact_response_texts.append(exact_text)
        if instructions:
            # Per-response instructions replace the old fake-user-message
            # injection (send_text) as the summary-delivery mechanism; keep
            # them in text_inputs so existing "what got spoken" assertions
            # don't need to know which transport carried it.
            self.text_inputs.append(instructions)

    async def close(self) -> None:
        self.closed = True
        await self._events.put(None)

    async def emit(self, event: ProviderEvent) -> None:
        await self._events.put(event)

    async def events(self):
        while True:
            event = await self._events.get()
            if event is None:
                return
            yield event


class FakeNativeProvider:
    def __init__(self, provider_id: str = "xai_realtime") -> None:
        self.provider_id = provider_id
        self.connection = FakeNativeConnection()
        self.configs: list[Any] = []

    async def connect(self, config):
        self.configs.append(config)
        return self.connection


class GatedHermesToolBroker:
    """Blocks inside the run until released, then yields a final answer."""

    def __init__(self) -> None:
        self.requests: list[AgentTaskRequest] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        # Which stream_task call (0-based) was cancelled. The fast lane
        # (background-run v2) legitimately opens-and-abandons a SECOND stream
        # while the first run blocks, so orphaning assertions must check the
        # first stream specifically, not "any stream cancelled".
        self.cancelled_indices: list[int] = []

    async def stream_task(self, request: AgentTaskRequest):
        index = len(self.requests)
        self.requests.append(request)
        session_id = request.session_id or "created-hermes-session"
        yield {
            "type": "hermes.run.started",
            "session_id": session_id,
            "run_id": "run-gated",
            "profile": request.profile,
        }
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            self.cancelled_indices.append(index)
            raise
        yield {
            "type": "voice.response.delta",
            "session_id": session_id,
            "run_id": "run-gated",
            "delta": "Background answer ready.",
        }
        yield {
            "type": "hermes.run.completed",
            "session_id": session_id,
            "run_id": "run-gated",
            "profile": request.profile,
        }


class LongToolHermesBroker(GatedHermesToolBroker):
    """Emits a known-long tool start (cronjob), then blocks until released."""

    async def stream_task(self, request: AgentTaskRequest):
        self.requests.append(request)
        session_id = request.session_id or "created-hermes-session"
        yield {
            "type": "hermes.run.started",
            "session_id": session_id,
            "run_id": "run-longtool",
            "profile": request.profile,
        }
        yield {
            "type": "hermes.tool.started",
            "session_id": session_id,
            "run_id": "run-longtool",
            "tool_call_id": "t-1",
            "tool_name": "cronjob",
        }
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        yield {
            "type": "hermes.run.completed",
            "session_id": session_id,
            "run_id": "run-longtool",
            "profile": request.profile,
        }


class FastHermesToolBroker:
    """Completes immediately (Tier A)."""

    def __init__(self) -> None:
        self.requests: list[AgentTaskRequest] = []

    async def stream_task(self, request: AgentTaskRequest):
        self.requests.append(request)
        session_id = request.session_id or "created-hermes-session"
        yield {
            "type": "hermes.run.started",
            "session_id": session_id,
            "run_id": "run-fast",
            "profile": request.profile,
        }
        yield {
            "type": "voice.response.delta",
            "session_id": session_id,
            "run_id": "run-fast",
            "delta": "Quick answer.",
        }
        yield {
            "type": "hermes.run.completed",
            "session_id": session_id,
            "run_id": "run-fast",
            "profile": request.profile,
        }


class Phone(NamedTuple):
    ws: Any
    info: dict[str, Any]
    headers: dict[str, str]


async def connect_phone(client: Any, app: Any, body: dict[str, Any] | None = None) -> Phone:
    """What a phone does first: a device token, a voice session (``body`` as its JSON), its websocket."""
    token = app["server"].sessions.create_session("phone", "d").token
    headers = {"Authorization": f"Bearer {token}"}
    info = await (await client.post("/voice/realtime-agent/session", json=body or {}, headers=headers)).json()
    return Phone(await client.ws_connect(info["websocket_path"], headers=headers), info, headers)


async def next_event(ws: Any, timeout: float = 5.0) -> dict[str, Any]:
    """The next event on a phone socket; fails on anything but a text frame or after `timeout`."""
    msg = await ws.receive(timeout=timeout)
    assert msg.type is WSMsgType.TEXT, msg
    event = json.loads(msg.data)
    assert isinstance(event, dict)
    return event


async def read_until(ws: Any, target: str, limit: int = 100) -> list[dict[str, Any]]:
    """Events up to and including the first of type `target`; bounded by `limit` events."""
    seen: list[dict[str, Any]] = []
    for _ in range(limit):
        seen.append(await next_event(ws))
        if seen[-1]["type"] == target:
            return seen
    raise AssertionError(f"no {target}; saw {[e['type'] for e in seen]}")


async def wait_for(predicate: Callable[[], Any], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


class PerTaskBroker:
    """Each task text gets its own gate and its own answer, so several runs can finish in any order."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, text: str) -> asyncio.Event:
        return self.gates.setdefault(text, asyncio.Event())

    @staticmethod
    def answer(text: str) -> str:
        return f"Answer for {text}."

    async def stream_task(self, request: AgentTaskRequest):
        run_id = f"run-{len(self.gates)}"
        yield {"type": "hermes.run.started", "session_id": request.session_id, "run_id": run_id}
        await self.gate(request.text).wait()
        yield {"type": "voice.response.delta", "run_id": run_id, "delta": self.answer(request.text)}
        yield {"type": "hermes.run.completed", "run_id": run_id}
