"""A realtime provider session recorded as its provider events and replayed as a provider, with no provider."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from voice_support import connect_phone

from relay_runtime import cassettes
from relay_runtime import session as relay_session
from relay_runtime.integrations.voice_relay import ProviderEvent, ProviderEventKind
from relay_runtime.integrations.voice_relay.models import ProviderSessionConfig
from relay_runtime.integrations.voice_relay.providers import StubProvider
from relay_runtime.integrations.voice_relay.providers.cassette import CassetteProvider
from relay_runtime.integrations.voice_relay.providers.stub import StubConnection
from relay_runtime.redaction import RedactionPolicy, Rule

SECRET = "sk-realtime-secret-key-123456"


def config(**changes: Any) -> ProviderSessionConfig:
    base: dict[str, Any] = {
        "model": "gpt-realtime",
        "voice": "marin",
        "instructions": "You are a helpful voice.",
        "tools": [{"type": "function", "name": "hermes_run_task", "parameters": {"type": "object"}}],
        "sample_rate": 16000,
        "api_key": SECRET,
    }
    return ProviderSessionConfig(**{**base, **changes})


async def conversation(
    provider: Any, *, audio_chunks: int = 3, greeting: str = "hello", cfg: ProviderSessionConfig | None = None
) -> list[ProviderEvent]:
    """What the relay does in a short voice flow: text, a tool call and its result, then speech."""
    connection = await provider.connect(cfg or config())
    seen: list[ProviderEvent] = []
    done = asyncio.Event()

    async def pump() -> None:
        async for event in connection.events():
            seen.append(event)
            if event.kind in (ProviderEventKind.RESPONSE_DONE, ProviderEventKind.READY):
                done.set()

    reader = asyncio.create_task(pump())

    async def step(*calls: Any) -> None:
        done.clear()
        for call in calls:
            await call()
        await asyncio.wait_for(done.wait(), 5)

    await asyncio.wait_for(done.wait(), 5)  # ready
    respond = connection.request_response
    await step(lambda: connection.send_text(greeting), respond)
    await step(lambda: connection.send_text("task: book a table"), respond)
    call = next(e for e in seen if e.kind == ProviderEventKind.FUNCTION_CALL_COMPLETED).payload["call"]
    await step(lambda: connection.send_tool_result(call.call_id, {"answer": "booked for two"}), respond)
    pcm = b"\x01\x00" * (7200 // audio_chunks)  # the same 7200 samples in every chunking
    await step(*([lambda: connection.send_audio(pcm, 16000)] * audio_chunks), connection.commit_audio)
    await connection.close()
    await asyncio.wait_for(reader, 5)
    return seen


def record(path: Path) -> list[ProviderEvent]:
    async def run() -> list[ProviderEvent]:
        with cassettes.use(path, mode="record"):
            return await conversation(CassetteProvider(StubProvider(tone_ms=200, frame_ms=50)))

    return asyncio.run(run())


def test_a_recorded_session_replays_its_events_without_a_provider(tmp_path) -> None:
    path = tmp_path / "voice.json"
    live = record(path)
    assert {e.kind for e in live} >= {ProviderEventKind.AUDIO_DELTA, ProviderEventKind.FUNCTION_CALL_COMPLETED}

    async def replay(chunks: int) -> list[ProviderEvent]:
        with cassettes.use(path):
            return await conversation(CassetteProvider(provider_id="stub"), audio_chunks=chunks)

    assert asyncio.run(replay(3)) == live  # kinds, ids, payloads, audio bytes and tool calls alike
    assert asyncio.run(replay(2)) == live  # audio is matched by count only: its chunking is timing

    text = path.read_text()
    assert SECRET not in text
    steps = json.loads(text)["calls"][0]["session"]
    assert steps[0]["event"]["kind"] == "ready"
    assert {"send": "send_text", "text": "hello"}.items() <= steps[1].items()


def test_a_changed_call_fails_with_what_was_recorded(tmp_path) -> None:
    path = tmp_path / "voice.json"
    record(path)

    async def replay() -> None:
        with cassettes.use(path):
            await conversation(CassetteProvider(provider_id="stub"), greeting="bonjour")

    with pytest.raises(cassettes.CassetteMiss, match=r"(?s)recorded: .*'hello'.*this call: .*'bonjour'"):
        asyncio.run(replay())


def test_another_session_configuration_is_a_miss_with_a_diff(tmp_path) -> None:
    path = tmp_path / "voice.json"
    record(path)

    async def replay() -> None:
        with cassettes.use(path):
            await conversation(CassetteProvider(provider_id="stub"), cfg=config(voice="cedar"))

    with pytest.raises(cassettes.CassetteMiss, match=r'(?s)-  "voice": "marin".*\+  "voice": "cedar"'):
        asyncio.run(replay())


def test_without_a_cassette_the_inner_provider_serves(tmp_path) -> None:
    events = asyncio.run(conversation(CassetteProvider(StubProvider(tone_ms=100, frame_ms=50))))
    assert events[0].kind == ProviderEventKind.READY
    with pytest.raises(cassettes.CassetteError, match="replay-only provider"):
        asyncio.run(CassetteProvider(provider_id="stub").connect(config()))


class MiniRealtimeServer:
    """Just enough of the realtime protocol for one spoken reply, over a real websocket."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    async def handler(self, ws: Any) -> None:
        self.headers.append({k.lower(): v for k, v in ws.request.headers.raw_items()})
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "session.update":
                await ws.send(json.dumps({"type": "session.updated", "session": message["session"]}))
            elif message["type"] == "response.create":
                for event in (
                    {"type": "response.created", "response": {"id": "resp_1"}},
                    {"type": "response.output_audio_transcript.delta", "response_id": "resp_1", "delta": "Hi there."},
                    {"type": "response.output_audio.delta", "response_id": "resp_1", "delta": "AAEAAQ=="},
                    {"type": "response.done", "response": {"id": "resp_1", "status": "completed"}},
                ):
                    await ws.send(json.dumps(event))


def test_an_openai_realtime_session_over_a_websocket_replays_without_key_or_server(tmp_path) -> None:
    from websockets.asyncio.server import serve

    from relay_runtime.integrations.voice_relay.providers import OpenAIRealtimeProvider

    path = tmp_path / "voice.json"
    server = MiniRealtimeServer()

    async def talk(provider: Any) -> list[ProviderEvent]:
        connection = await provider.connect(config(api_key=None))
        seen: list[ProviderEvent] = []
        await connection.send_text("hi")
        await connection.request_response()
        async for event in connection.events():
            seen.append(event)
            if event.kind == ProviderEventKind.RESPONSE_DONE:
                break
        await connection.close()
        return seen

    async def record() -> list[ProviderEvent]:
        async with serve(server.handler, "127.0.0.1", 0) as ws_server:
            port = next(iter(ws_server.sockets)).getsockname()[1]
            inner = OpenAIRealtimeProvider(url=f"ws://127.0.0.1:{port}/v1/realtime", api_key=SECRET)
            with cassettes.use(path, mode="record"):
                return await talk(CassetteProvider(inner))

    live = asyncio.run(record())
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert [e.kind for e in live][-2:] == [ProviderEventKind.AUDIO_DELTA, ProviderEventKind.RESPONSE_DONE]

    async def replay() -> list[ProviderEvent]:
        with cassettes.use(path):  # the server is gone and no key is given
            return await talk(CassetteProvider(OpenAIRealtimeProvider()))

    assert asyncio.run(replay()) == live
    assert SECRET not in path.read_text()


async def moon_agent(request: Any, ctx: Any) -> str:
    return f"The moon report for {request.text} is ready."


async def relay_flow(provider: Any, run_dir: Path) -> list[dict[str, Any]]:
    """A phone asks for a task by text; the relay calls the agent and speaks the result."""
    from aiohttp.test_utils import TestClient, TestServer

    from relay_runtime import session as relay_session
    from relay_runtime.integrations.voice_relay import RelayConfig, create_app
    from relay_runtime.integrations.voice_relay.brokers import InProcessTaskBroker

    relay_session.reset_for_tests()
    app = create_app(
        RelayConfig(realtime_voice_provider="stub", realtime_voice_run_dir=str(run_dir)),
        task_broker=InProcessTaskBroker(moon_agent),
        providers={"stub": provider},
    )
    seen: list[dict[str, Any]] = []
    try:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            ws = (await connect_phone(client, app)).ws
            async with asyncio.timeout(10):
                while sum(1 for e in seen if e["type"] == "voice.response.done") < 2:
                    event = json.loads((await ws.receive()).data)
                    seen.append(event)
                    if event["type"] == "voice.session.ready":
                        await ws.send_json({"type": "response.create", "text": "task: the moon"})
                    elif event["type"] == "voice.playback_drain.requested":
                        await ws.send_json({"type": "playback.drained"})
            await ws.close()
    finally:
        relay_session.reset_for_tests()
    return seen


@pytest.mark.asyncio
async def test_a_voice_relay_flow_replays_end_to_end_without_a_provider(tmp_path) -> None:
    path = tmp_path / "voice.json"
    with cassettes.use(path, mode="record"):
        live = await relay_flow(CassetteProvider(StubProvider(tone_ms=100, frame_ms=50)), tmp_path / "live")
    with cassettes.use(path):
        replayed = await relay_flow(CassetteProvider(provider_id="stub"), tmp_path / "replay")

    def spoken(events: list[dict[str, Any]]) -> list[Any]:
        return [(e["type"], e.get("delta") or e.get("audio")) for e in events if e["type"].startswith("voice.")]

    assert [e["type"] for e in replayed] == [e["type"] for e in live]
    assert "hermes.run.completed" in [e["type"] for e in live]
    assert spoken(replayed) == spoken(live)
    assert sum(1 for _, value in spoken(live) if value) >= 2  # the reply's text and its audio were compared


class SplittingConnection(StubConnection):
    """The stub voice, its text said three characters at a time, as a provider streams it."""

    def _put(self, event: ProviderEvent) -> None:
        if event.kind != ProviderEventKind.OUTPUT_TEXT_DELTA:
            super()._put(event)
            return
        text = event.payload["delta"]
        for i in range(0, len(text), 3):
            super()._put(ProviderEvent(event.kind, event.response_id, {"delta": text[i : i + 3]}))


class SplittingProvider(StubProvider):
    async def connect(self, config: ProviderSessionConfig) -> StubConnection:
        return SplittingConnection(config, tone_ms=self.tone_ms, frame_ms=self.frame_ms)


@pytest.fixture
def email_policy() -> Iterator[None]:
    """The coordinator's redaction policy redacts e-mail addresses for the test (for every host), then none."""
    relay_session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    yield
    relay_session.SESSION_COORDINATOR.redaction.use(None)


def test_a_realtime_tape_is_recorded_under_the_redaction_policy_and_replays(tmp_path, email_policy) -> None:
    email = "jane.doe@example.com"
    greeting = f"write to {email} please"
    path = tmp_path / "voice.json"

    async def run(provider: Any, mode: str) -> list[ProviderEvent]:
        with cassettes.use(path, mode=mode):
            return await conversation(provider, greeting=greeting)

    live = asyncio.run(run(CassetteProvider(SplittingProvider(tone_ms=100, frame_ms=50)), "record"))
    said = "".join(e.payload["delta"] for e in live if e.kind == ProviderEventKind.OUTPUT_TEXT_DELTA)
    assert email in said  # the relay hears the real answer
    text = path.read_text()
    steps = json.loads(text)["calls"][0]["session"]
    stored = "".join(
        s["event"]["payload"]["delta"] for s in steps if s.get("event", {}).get("kind") == "output_text_delta"
    )
    assert stored == said.replace(email, "[REDACTED:email]")  # split in pieces, found whole
    assert {"send": "send_text", "text": "write to [REDACTED:email] please"}.items() <= steps[1].items()
    assert email not in text and json.loads(text)["redaction"]
    # Replayed under the same policy: the live call is matched as it was stored.
    replayed = asyncio.run(run(CassetteProvider(provider_id="stub"), "replay"))
    assert [e.kind for e in replayed] == [e.kind for e in live]


def test_a_changed_call_s_miss_shows_it_as_stored_under_the_redaction_policy(tmp_path, email_policy) -> None:
    email = "jane.doe@example.com"
    path = tmp_path / "voice.json"

    async def run(provider: Any, mode: str, greeting: str) -> list[ProviderEvent]:
        with cassettes.use(path, mode=mode):
            return await conversation(provider, greeting=greeting)

    asyncio.run(run(CassetteProvider(StubProvider(tone_ms=100, frame_ms=50)), "record", f"write to {email}"))
    with pytest.raises(cassettes.CassetteMiss) as miss:
        asyncio.run(run(CassetteProvider(provider_id="stub"), "replay", f"write to {email} now"))
    message = str(miss.value)
    assert email not in message and email not in repr(miss.value)
    assert "'write to [REDACTED:email]'" in message and "'write to [REDACTED:email] now'" in message


def test_a_realtime_tapes_instructions_are_stored_under_the_redaction_policy(tmp_path, email_policy) -> None:
    # The session's instructions (its system prompt) were stored as given: the policy read the stored request's
    # view fields only, and a realtime configuration names its prompt ``instructions``.
    email = "jane.doe@example.com"
    path = tmp_path / "voice.json"
    cfg = config(instructions=f"You speak for {email}.")

    async def run(provider: Any, mode: str) -> list[ProviderEvent]:
        with cassettes.use(path, mode=mode):
            return await conversation(provider, cfg=cfg)

    live = asyncio.run(run(CassetteProvider(StubProvider(tone_ms=100, frame_ms=50)), "record"))
    text = path.read_text()
    assert email not in text
    assert json.loads(text)["calls"][0]["request"]["instructions"] == "You speak for [REDACTED:email]."
    replayed = asyncio.run(run(CassetteProvider(provider_id="stub"), "replay"))  # matched as it was stored
    assert [e.kind for e in replayed] == [e.kind for e in live]
