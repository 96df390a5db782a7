"""OpenAI Realtime and xAI realtime providers against a local fake server speaking their protocol,
plus the stub provider and one end-to-end relay run over the fake xAI server."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer
from voice_support import connect_phone
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Response

from relay_runtime import redaction
from relay_runtime import session as relay_session
from relay_runtime.integrations.voice_relay import ProviderEventKind, RelayConfig, ToolCallEvent, create_app
from relay_runtime.integrations.voice_relay.bounded import CappedMap
from relay_runtime.integrations.voice_relay.brokers import InProcessTaskBroker, RunContext
from relay_runtime.integrations.voice_relay.models import AgentTaskRequest, ProviderEvent, ProviderSessionConfig
from relay_runtime.integrations.voice_relay.providers import OpenAIRealtimeProvider, StubProvider, XAIRealtimeProvider
from relay_runtime.integrations.voice_relay.providers.realtime_ws import MAX_OPEN_TOOL_CALLS, ProviderSendError

API_KEY = "sk-test-not-a-real-key"
AUDIO = b"\x10\x00\x20\x00" * 8


class FakeRealtimeServer:
    """Speaks the realtime protocol: records client events and answers the way the real APIs do."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.server: Server | None = None
        self.connections: list[ServerConnection] = []
        self._n = 0

    @property
    def url(self) -> str:
        assert self.server is not None
        port = next(iter(self.server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}/v1/realtime"

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.received if m.get("type") == kind]

    async def handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.headers.append({k.lower(): v for k, v in ws.request.headers.raw_items()})
        self.paths.append(ws.request.path)
        self.connections.append(ws)
        await ws.send(json.dumps({"type": "session.created", "session": {"id": "sess_1"}}))
        async for raw in ws:
            message = json.loads(raw)
            self.received.append(message)
            await self.respond(ws, message)

    async def send(self, ws: ServerConnection, *messages: dict[str, Any]) -> None:
        for message in messages:
            await ws.send(json.dumps(message))

    async def respond(self, ws: ServerConnection, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "session.update":
            await self.send(ws, {"type": "session.updated", "session": message["session"]})
            await ws.send("this is not json")  # tolerated and ignored
        elif kind == "input_audio_buffer.commit":
            self._n += 1
            rid = f"resp_{self._n}"
            await self.send(
                ws,
                {"type": "conversation.item.input_audio_transcription.delta", "delta": "look up"},
                {"type": "conversation.item.input_audio_transcription.completed", "transcript": "look up the moon"},
                {"type": "response.created", "response": {"id": rid}},
                {"type": "response.output_item.added", "response_id": rid,
                 "item": {"type": "function_call", "call_id": "call_9", "name": "hermes_run_task"}},
                {"type": "response.function_call_arguments.delta", "response_id": rid, "call_id": "call_9",
                 "delta": '{"text": "the moon'},
                {"type": "response.function_call_arguments.done", "response_id": rid, "call_id": "call_9",
                 "arguments": '{"text": "the moon", "mode": "run"}'},
                {"type": "response.done", "response": {"id": rid, "status": "completed"}},
            )
        elif kind == "response.create":
            self._n += 1
            rid = f"resp_{self._n}"
            await self.send(
                ws,
                {"type": "response.created", "response": {"id": rid}},
                {"type": "response.output_audio_transcript.delta", "response_id": rid, "delta": "Spoken reply."},
                {"type": "response.output_audio.delta", "response_id": rid,
                 "delta": base64.b64encode(AUDIO).decode()},
                {"type": "response.output_audio.done", "response_id": rid},
                {"type": "response.done", "response": {"id": rid, "status": "completed"}},
            )
        elif kind == "response.cancel":
            error = {"type": "invalid_request_error", "code": "response_cancel_not_active",
                     "message": "Cancellation failed: no active response found"}
            await self.send(ws, {"type": "error", "error": error})


@pytest_asyncio.fixture
async def fake() -> AsyncIterator[FakeRealtimeServer]:
    fake = FakeRealtimeServer()
    async with serve(fake.handler, "127.0.0.1", 0) as server:
        fake.server = server
        yield fake


def provider_config(**overrides: Any) -> ProviderSessionConfig:
    values: dict[str, Any] = {"model": "voice-model-1", "voice": "leo", "instructions": "be brief",
                              "tools": [{"type": "function", "name": "hermes_run_task"}], "sample_rate": 24000}
    values.update(overrides)
    return ProviderSessionConfig(**values)


async def collect(
    events: AsyncIterator[ProviderEvent], until: ProviderEventKind, limit: int = 50
) -> list[ProviderEvent]:
    seen: list[ProviderEvent] = []
    async with asyncio.timeout(5):
        async for event in events:
            seen.append(event)
            if event.kind is until or len(seen) >= limit:
                break
    return seen


PROVIDERS = [pytest.param(OpenAIRealtimeProvider, "OpenAI Realtime", id="openai"),
             pytest.param(XAIRealtimeProvider, "xAI Realtime", id="xai")]


@pytest.mark.asyncio
@pytest.mark.parametrize(("provider_class", "label"), PROVIDERS)
async def test_protocol_round_trip(fake: FakeRealtimeServer, provider_class: type, label: str) -> None:
    provider = provider_class(url=fake.url, api_key=API_KEY)
    connection = await provider.connect(provider_config())
    events = connection.events()
    try:
        ready = await collect(events, ProviderEventKind.READY)
        assert [e.kind for e in ready] == [ProviderEventKind.READY]
        assert fake.headers[0]["authorization"] == f"Bearer {API_KEY}"
        assert fake.paths[0] == "/v1/realtime?model=voice-model-1"
        update = fake.of_type("session.update")[0]["session"]
        assert update["instructions"] == "be brief"
        assert update["tools"] == [{"type": "function", "name": "hermes_run_task"}]
        assert json.dumps(update).count("leo") == 1

        await connection.send_audio(AUDIO, 24000)
        await connection.commit_audio()
        turn = await collect(events, ProviderEventKind.RESPONSE_DONE)
        kinds = [e.kind for e in turn]
        assert kinds == [
            ProviderEventKind.INPUT_TRANSCRIPT_DELTA,
            ProviderEventKind.INPUT_TRANSCRIPT_FINAL,
            ProviderEventKind.RESPONSE_STARTED,
            ProviderEventKind.FUNCTION_CALL_STARTED,
            ProviderEventKind.FUNCTION_CALL_ARGUMENTS_DELTA,
            ProviderEventKind.FUNCTION_CALL_COMPLETED,
            ProviderEventKind.RESPONSE_DONE,
        ]
        assert base64.b64decode(fake.of_type("input_audio_buffer.append")[0]["audio"]) == AUDIO
        assert turn[1].payload["text"] == "look up the moon"
        call = turn[5].payload["call"]
        assert call == ToolCallEvent("call_9", "hermes_run_task", {"text": "the moon", "mode": "run"})
        assert turn[5].response_id == turn[2].response_id == "resp_1"

        await connection.send_tool_result("call_9", {"ok": True, "answer": "It is full."})
        await connection.append_context_item(role="assistant", text="It is full.")
        await connection.send_text("and tomorrow?")
        await connection.request_response(instructions="This is the final spoken answer step.")
        spoken = await collect(events, ProviderEventKind.RESPONSE_DONE)
        assert [e.kind for e in spoken] == [ProviderEventKind.RESPONSE_STARTED, ProviderEventKind.OUTPUT_TEXT_DELTA,
                                            ProviderEventKind.AUDIO_DELTA, ProviderEventKind.AUDIO_DONE,
                                            ProviderEventKind.RESPONSE_DONE]
        assert spoken[2].payload["audio"] == AUDIO
        assert spoken[1].payload["delta"] == "Spoken reply."
        items = [m["item"] for m in fake.of_type("conversation.item.create")]
        assert items[0] == {"type": "function_call_output", "call_id": "call_9",
                            "output": json.dumps({"ok": True, "answer": "It is full."})}
        assert items[1]["role"] == "assistant" and items[1]["content"][0]["text"] == "It is full."
        assert items[2]["role"] == "user" and items[2]["content"][0] == {"type": "input_text", "text": "and tomorrow?"}
        assert fake.of_type("response.create")[0]["response"]["instructions"].startswith("This is the final")

        await connection.clear_audio()
        await connection.cancel_response()
        error = await collect(events, ProviderEventKind.ERROR)
        assert error[-1].payload["message"] == f"{label} error: Cancellation failed: no active response found"
        assert fake.of_type("input_audio_buffer.clear")
    finally:
        await connection.close()
    assert [e async for e in events] == []


@pytest.mark.asyncio
async def test_open_tool_calls_stay_bounded_when_never_finished(fake: FakeRealtimeServer) -> None:
    connection = await XAIRealtimeProvider(url=fake.url, api_key=API_KEY).connect(provider_config())
    events = connection.events()
    try:
        await collect(events, ProviderEventKind.READY)
        ws = fake.connections[0]
        n = MAX_OPEN_TOOL_CALLS + 3
        await fake.send(ws, *[{"type": "response.output_item.added", "response_id": "resp_x",
                               "item": {"type": "function_call", "call_id": f"c{i}", "name": f"tool_{i}"}}
                              for i in range(n)])
        started = await collect(events, ProviderEventKind.RESPONSE_DONE, limit=n)
        assert [e.payload["call_id"] for e in started] == [f"c{i}" for i in range(n)]
        evicted = [{k: v for k, v in e.metadata.items() if k != "received_ns"}
                   for e in started if "evicted_tool_call" in e.metadata]
        assert all(isinstance(e.metadata["received_ns"], int) for e in started)
        assert evicted == [{"evicted_tool_call": {"call_id": f"c{i}", "name": f"tool_{i}"}, "evicted_tool_calls": i + 1}
                           for i in range(3)]
        assert connection.open_tool_calls == MAX_OPEN_TOOL_CALLS
        # A call still in the table gets its name back; an evicted one only has what its done message says.
        await fake.send(ws, {"type": "response.function_call_arguments.done", "response_id": "resp_x",
                             "call_id": f"c{n - 1}", "arguments": "{}"},
                        {"type": "response.function_call_arguments.done", "response_id": "resp_x",
                         "call_id": "c0", "arguments": "{}"})
        done = await collect(events, ProviderEventKind.RESPONSE_DONE, limit=2)
        assert [e.payload["call"].name for e in done] == [f"tool_{n - 1}", ""]
        assert connection.open_tool_calls == MAX_OPEN_TOOL_CALLS - 1
        # A finished response takes its unfinished calls with it.
        await fake.send(ws, {"type": "response.done", "response": {"id": "resp_x", "status": "cancelled"}})
        await collect(events, ProviderEventKind.RESPONSE_DONE)
        assert connection.open_tool_calls == 0
    finally:
        await connection.close()


def test_capped_map_refreshes_drops_oldest_and_refuses_a_zero_cap() -> None:
    table: CappedMap[str, int] = CappedMap(2)
    assert table.put("a", 1) is None and table.put("b", 2) is None
    assert table.put("a", 3) is None  # refreshed: now the newest
    assert table.put("c", 4) == ("b", 2) and list(table) == ["a", "c"] and table.evicted == 1
    assert table.pop("a") == 3 and table.pop("a") is None and len(table) == 1
    with pytest.raises(ValueError, match="cap must be at least 1"):
        CappedMap(0)


@pytest.mark.asyncio
async def test_server_disconnect_ends_events_and_sends_fail(fake: FakeRealtimeServer) -> None:
    connection = await XAIRealtimeProvider(url=fake.url, api_key=API_KEY).connect(provider_config())
    events = connection.events()
    await collect(events, ProviderEventKind.READY)
    await fake.connections[0].close()
    async with asyncio.timeout(5):
        rest = [e async for e in events]
    assert all(e.kind is not ProviderEventKind.READY for e in rest)
    with pytest.raises(ProviderSendError, match=r"closed|lost"):
        await connection.request_response(instructions="final spoken answer")
    await connection.close()


@pytest.mark.asyncio
async def test_connect_without_key_or_url_fails_clearly(fake: FakeRealtimeServer) -> None:
    with pytest.raises(ValueError, match="no API key"):
        await OpenAIRealtimeProvider(url=fake.url).connect(provider_config())
    with pytest.raises(ValueError, match="no endpoint url"):
        await OpenAIRealtimeProvider(api_key=API_KEY).connect(provider_config())
    assert fake.headers == []


@pytest.mark.asyncio
async def test_stub_provider_speaks_tone_and_calls_tools() -> None:
    connection = await StubProvider(tone_ms=250, frame_ms=100).connect(provider_config())
    events = connection.events()
    assert (await collect(events, ProviderEventKind.READY))[0].kind is ProviderEventKind.READY
    await connection.send_text("task: find the keys")
    await connection.request_response()
    turn = await collect(events, ProviderEventKind.RESPONSE_DONE)
    call = next(e for e in turn if e.kind is ProviderEventKind.FUNCTION_CALL_COMPLETED).payload["call"]
    assert call.name == "hermes_run_task" and call.arguments == {"text": "find the keys", "mode": "run"}
    await connection.request_response(instructions="x", exact_text="Keys are on the hook.")
    spoken = await collect(events, ProviderEventKind.RESPONSE_DONE)
    audio = [e.payload["audio"] for e in spoken if e.kind is ProviderEventKind.AUDIO_DELTA]
    assert sum(len(a) for a in audio) == 24000 * 250 // 1000 * 2
    assert any(a != b"\0" * len(a) for a in audio)
    assert any(e.payload.get("delta") == "Keys are on the hook." for e in spoken)
    await connection.close()


async def moon_agent(request: AgentTaskRequest, ctx: RunContext) -> str:
    return f"The moon report for {request.text} is ready: 98 percent illuminated."


@pytest.mark.asyncio
async def test_relay_end_to_end_over_fake_xai(fake: FakeRealtimeServer, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    relay_session.reset_for_tests()
    monkeypatch.setenv("XAI_API_KEY", API_KEY)
    from relay_runtime.integrations.voice_relay import provider_options
    provider_options.clear_provider_option_cache()
    monkeypatch.setenv("RELAY_VOICE_XAI_URL", fake.url)
    app = create_app(
        RelayConfig(realtime_voice_provider="xai_realtime", realtime_voice_run_dir=str(tmp_path),
                    realtime_voice_promote_after_ms=3000),
        task_broker=InProcessTaskBroker(moon_agent),
        providers={"xai_realtime": XAIRealtimeProvider()},
    )
    try:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            ws = (await connect_phone(client, app)).ws
            seen: list[dict[str, Any]] = []
            async with asyncio.timeout(10):
                while True:
                    msg = await ws.receive()
                    assert msg.type is WSMsgType.TEXT, msg
                    event = json.loads(msg.data)
                    seen.append(event)
                    if event["type"] == "voice.session.ready":
                        pcm = base64.b64encode(AUDIO).decode()
                        await ws.send_json({"type": "input_audio.append", "audio": pcm, "chunk_id": 1})
                        await ws.send_json({"type": "input_audio.commit"})
                    elif event["type"] == "voice.playback_drain.requested":
                        await ws.send_json({"type": "playback.drained"})
                    elif event["type"] == "voice.output_audio.delta":
                        break
            await ws.close()
    finally:
        provider_options.clear_provider_option_cache()
        relay_session.reset_for_tests()
    types = [e["type"] for e in seen]
    assert types.index("voice.input_transcript.final") < types.index("voice.tool_call")
    assert types.index("hermes.run.completed") < types.index("voice.playback_drain.requested")
    items = [m["item"] for m in fake.of_type("conversation.item.create")]
    outputs = [item for item in items if item["type"] == "function_call_output"]
    assert len(outputs) == 1
    result = json.loads(outputs[0]["output"])
    assert result["status"] == "completed" and "98 percent" in result["answer"]
    assert fake.of_type("response.create"), "the relay asked the provider to speak the result"
    assert base64.b64decode(seen[-1]["audio"]) == AUDIO


def test_provider_keys_stay_out_of_reprs() -> None:
    # Configs and providers end up in log lines and tracebacks; the key must not come with them.
    config = provider_config(api_key=API_KEY)
    provider = XAIRealtimeProvider(url="ws://127.0.0.1:9", api_key=API_KEY)
    assert config.api_key == API_KEY and provider.api_key == API_KEY
    assert API_KEY not in repr(config) and API_KEY not in repr(provider)


@pytest.mark.asyncio
@pytest.mark.parametrize("echoed_in", ["error_event", "refused_handshake"])
async def test_the_provider_key_echoed_back_never_reaches_the_phone_the_event_log_or_our_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, echoed_in: str
) -> None:
    # A provider answering a bad key may quote it: in an error event on an open socket, or in the
    # body of the 401 that refuses the handshake.
    key = "xai-live-key-0123456789abcdef"

    async def handler(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "session.created", "session": {"id": "s"}}))
        await ws.send(json.dumps({"type": "error", "error": {"message": f"Incorrect API key provided: {key}",
                                                             "code": "invalid_api_key"}}))
        async for _ in ws:
            pass

    def refuse(_connection: Any, _request: Any) -> Response | None:
        if echoed_in != "refused_handshake":
            return None
        return Response(401, "Unauthorized", Headers({"Content-Type": "application/json"}),
                        json.dumps({"error": f"bad key {key}"}).encode())

    from relay_runtime.integrations.voice_relay import provider_options
    relay_session.reset_for_tests()
    caplog.set_level(logging.INFO, logger="relay_runtime")
    received: list[str] = []
    try:
        async with serve(handler, "127.0.0.1", 0, process_request=refuse) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            monkeypatch.setenv("XAI_API_KEY", key)
            monkeypatch.setenv("RELAY_VOICE_XAI_URL", f"ws://127.0.0.1:{port}/v1/realtime")
            provider_options.clear_provider_option_cache()
            app = create_app(RelayConfig(realtime_voice_provider="xai_realtime", realtime_voice_run_dir=str(tmp_path)),
                             providers={"xai_realtime": XAIRealtimeProvider()})
            async with TestClient(TestServer(app, host="127.0.0.1")) as client:
                ws = (await connect_phone(client, app)).ws
                async with asyncio.timeout(5):
                    while True:
                        msg = await ws.receive()
                        if msg.type is not WSMsgType.TEXT:
                            break
                        received.append(msg.data)
                        if '"voice.error"' in msg.data:
                            break
                await ws.close()
    finally:
        provider_options.clear_provider_option_cache()
        relay_session.reset_for_tests()
        redaction.forget_secrets()
    errors = [json.loads(m) for m in received if '"voice.error"' in m]
    expected = "provider_error" if echoed_in == "error_event" else "provider_connect_failed"
    assert errors and errors[0]["code"] == expected, received
    if echoed_in == "error_event":
        assert errors[0]["message"] == "xAI Realtime error: Incorrect API key provided: [redacted]"
    else:
        assert any("provider connect failed" in r.getMessage() for r in caplog.records)
    assert key not in "\n".join(received)
    written = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert "voice.error" in written and key not in written
    assert key not in "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("relay_runtime"))
