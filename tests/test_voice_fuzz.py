"""Hypothesis fuzz of client messages: no message sequence crashes a session or the server."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay_runtime import session as relay_session
from relay_runtime.integrations.voice_relay import RelayConfig, create_app
from relay_runtime.integrations.voice_relay.brokers import InProcessTaskBroker, RunContext
from relay_runtime.integrations.voice_relay.models import AgentTaskRequest
from relay_runtime.integrations.voice_relay.providers import StubProvider

MESSAGE_TYPES = [
    "session.start", "session.resume", "input_audio.append", "input_audio.commit", "input_audio.clear",
    "response.create", "response.cancel", "playback.drained", "hermes.confirm", "client.ack",
    "hermes.result.respeak", "session.close", "nonsense",
]
FIELDS = ["audio", "text", "chunk_id", "sample_rate", "event_id", "approved", "resume_token", "last_event_id"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
structured = st.builds(
    lambda kind, fields: json.dumps({"type": kind, **fields}),
    st.sampled_from(MESSAGE_TYPES),
    st.dictionaries(st.sampled_from(FIELDS), json_values | st.just("AAAA") | st.just("task: fuzz"), max_size=4),
)
raw_text = st.text(max_size=200)
MAX_MESSAGE_BYTES = 16 * 1024
messages = st.lists(st.one_of(structured, structured, raw_text, json_values.map(json.dumps)), max_size=12)


async def fuzz_agent(request: AgentTaskRequest, ctx: RunContext) -> str:
    return "fuzzed answer"


async def run_sequence(sequence: list[str], run_dir: Path) -> None:
    relay_session.reset_for_tests()
    app = create_app(
        RelayConfig(realtime_voice_run_dir=str(run_dir), realtime_voice_promote_after_ms=20,
                    max_message_bytes=MAX_MESSAGE_BYTES),
        task_broker=InProcessTaskBroker(fuzz_agent),
        providers={"stub": StubProvider(tone_ms=20, frame_ms=20)},
    )
    agent = app["server"].realtime_agent
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        token = app["server"].sessions.create_session("fuzz", "fuzz-device").token
        headers = {"Authorization": f"Bearer {token}"}
        info = await (await client.post("/voice/realtime-agent/session", json={}, headers=headers)).json()
        bystander = await (await client.post("/voice/realtime-agent/session", json={}, headers=headers)).json()
        ws = await client.ws_connect(info["websocket_path"], headers=headers)
        other = await client.ws_connect(bystander["websocket_path"], headers=headers)
        assert json.loads((await other.receive(timeout=5)).data)["type"] == "voice.session.ready"
        closed_by_client = False
        oversized = False
        for raw in sequence:
            if ws.closed:
                break
            await ws.send_str(raw)
            closed_by_client = closed_by_client or '"session.close"' in raw
            oversized = oversized or len(raw.encode()) > MAX_MESSAGE_BYTES
        # The fuzzed session either still answers, or was closed on request.
        if not ws.closed and not closed_by_client:
            await ws.send_json({"type": "session.start"})
            async with asyncio.timeout(5):
                while True:
                    msg = await ws.receive()
                    if msg.type is not WSMsgType.TEXT:
                        break
                    if json.loads(msg.data)["type"] == "voice.session.started":
                        break
            if oversized and msg.type is WSMsgType.CLOSE:
                # Oversized frames close the socket with 1009; the session itself stays resumable.
                assert msg.data == 1009
            else:
                assert msg.type is WSMsgType.TEXT, "the session stopped answering"
            assert info["session_id"] in agent.sessions
        # Other sessions are unaffected.
        await other.send_json({"type": "response.create", "text": "ping"})
        async with asyncio.timeout(5):
            while True:
                event = json.loads((await other.receive()).data)
                if event.get("delta") == "You said: ping":
                    break
        failures = [
            line for s in agent.sessions.values()
            for line in s.event_log_path.read_text().splitlines() if "task_failed" in line
        ]
        assert failures == []
        await ws.close()
        await other.close()
    relay_session.reset_for_tests()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=messages)
def test_fuzzed_client_messages_never_crash_a_session(sequence: list[str]) -> None:
    with tempfile.TemporaryDirectory() as run_dir:
        asyncio.run(run_sequence(sequence, Path(run_dir)))


def test_known_nasty_messages() -> None:
    nasty: list[Any] = [
        json.dumps({"type": "input_audio.append", "audio": "AAAA", "chunk_id": True}),
        json.dumps({"type": "input_audio.append", "audio": "A" * 30_000}),
        json.dumps({"type": "client.ack", "event_id": 10**30}),
        json.dumps({"type": "response.create", "text": "task: " + "x" * 100}),
        json.dumps({"type": "response.cancel"}),
        json.dumps({"type": "hermes.confirm", "approved": True}),
        json.dumps({"type": "session.resume", "resume_token": None, "last_event_id": -1}),
        "\u0000" * 10,
        "9" * 5000,
        "[" * 5000,
    ]
    with tempfile.TemporaryDirectory() as run_dir:
        asyncio.run(run_sequence(nasty, Path(run_dir)))
