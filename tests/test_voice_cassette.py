"""A realtime provider session recorded as its provider events and replayed as a provider, with no provider."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import cassettes
from relay_runtime.integrations.voice_relay import ProviderEvent, ProviderEventKind
from relay_runtime.integrations.voice_relay.models import ProviderSessionConfig
from relay_runtime.integrations.voice_relay.providers import StubProvider
from relay_runtime.integrations.voice_relay.providers.cassette import CassetteProvider

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
