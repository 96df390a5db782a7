"""Voice latency you can see: each voice session and user turn is a scope of the relay carrying what
the user felt (perceived latency, time to first audio and text, the relay hop, barge-ins, unplayed
audio, reconnect gaps, run counts); the OTel exporter makes them span attributes and histograms;
the phone can get them per turn; and a user turn never takes the agent run's managed turn."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer
from otel_support import Pipeline
from voice_support import connect_phone, next_event, read_until, wait_for

from relay_runtime import conventions as cv
from relay_runtime import session as relay_session
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.voice_relay import RelayConfig, create_app
from relay_runtime.integrations.voice_relay.brokers import InProcessTaskBroker, RunContext
from relay_runtime.integrations.voice_relay.models import AgentTaskRequest
from relay_runtime.integrations.voice_relay.providers import StubProvider
from relay_runtime.integrations.voice_relay.tracing import MEASURES_KEY, format_turn
from relay_runtime.recorder import Recorder

PROFILE = "voice-latency-profile"
TURN_MEASURES = {"relay.voice.perceived_latency", "relay.voice.time_to_first_audio",
                 "relay.voice.time_to_first_text", "relay.voice.hop_latency", "relay.voice.barge_ins"}
SILENCE = base64.b64encode(b"\0\0" * 480).decode()


@pytest.fixture
def traced() -> Iterator[tuple[Recorder, Pipeline]]:
    relay_session.reset_for_tests()
    host = relay_session.SESSION_COORDINATOR.host(PROFILE)
    recorder = Recorder()
    host.relay.subscribers.register(recorder, name="test-recorder")
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(host)
    yield recorder, pipeline
    exporter.detach()
    relay_session.reset_for_tests()


async def managed_agent(request: AgentTaskRequest, ctx: RunContext) -> str:
    if "slow" in request.text:
        await asyncio.sleep(1.0)
    # The run is the conversation's managed coordinator turn even though a user turn is open.
    managed = relay_session.managed_turn()
    return f"managed={managed is not None and managed.turn_id == ctx.run_id}"


@pytest_asyncio.fixture
async def phone(tmp_path: Path) -> AsyncIterator[Any]:
    clients: list[TestClient[Any, Any]] = []

    async def open_phone(*, tone_ms: int = 100, turn_metrics: bool = False, provider: Any = None,
                         broker: Any = None) -> dict[str, Any]:
        app = create_app(
            RelayConfig(realtime_voice_run_dir=str(tmp_path), realtime_voice_promote_after_ms=3000,
                        realtime_voice_turn_metrics=turn_metrics),
            task_broker=broker or InProcessTaskBroker(managed_agent, profile_key=PROFILE),
            providers={"stub": provider or StubProvider(tone_ms=tone_ms, frame_ms=20)},
        )
        app["server"].realtime_agent.profile_key = PROFILE
        client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        ws, info, headers = await connect_phone(client, app, {"chat_session_id": "chat-v"})
        ready = await next_event(ws)
        return {"ws": ws, "info": info, "ready": ready, "client": client, "headers": headers,
                "agent": app["server"].realtime_agent}

    yield open_phone
    for client in clients:
        await client.close()


def ended(recorder: Recorder, name: str) -> list[Any]:
    return [e for e in recorder if e.kind == "scope_end" and e.name == name]


async def close_session(ws: Any) -> None:
    """Ask the relay to end the session and read to the close, as a phone does."""
    await ws.send_json({"type": "session.close"})
    await read_until(ws, "voice.session.closed", limit=400)
    assert (await ws.receive(timeout=5)).type in (WSMsgType.CLOSE, WSMsgType.CLOSED)


async def speak_and_commit(ws: Any) -> float:
    """Send a little audio and commit it; returns when (monotonic) the commit went out."""
    await ws.send_json({"type": "input_audio.append", "audio": SILENCE})
    sent = time.monotonic()
    await ws.send_json({"type": "input_audio.commit"})
    return sent


async def until_first_audio(ws: Any) -> float:
    for _ in range(50):
        event = await next_event(ws)
        if event["type"] == "voice.output_audio.delta":
            return time.monotonic()
    raise AssertionError("no audio")


@pytest.mark.asyncio
async def test_a_user_turn_carries_what_the_user_felt(traced: Any, phone: Any) -> None:
    recorder, pipeline = traced
    live = await phone()
    ws = live["ws"]
    committed = await speak_and_commit(ws)
    heard = await until_first_audio(ws)
    await read_until(ws, "voice.response.done")
    done = time.monotonic()
    await wait_for(lambda: ended(recorder, "voice.turn"))
    (turn,) = ended(recorder, "voice.turn")
    measures = turn.metadata[MEASURES_KEY]
    assert set(measures) == TURN_MEASURES and turn.output == {"outcome": "success"}
    assert turn.metadata["trigger"] == "commit"  # the transcript of that speech opened no second turn
    felt = measures["relay.voice.perceived_latency"]
    # Inside what the phone itself saw from commit to first audio, and after the provider's first audio.
    assert 0 < measures["relay.voice.time_to_first_text"] <= measures["relay.voice.time_to_first_audio"] < felt
    assert felt <= heard - committed
    # The hop is the relay's own time on the turn's events: inside the turn as the phone saw it. (Not compared
    # with `felt`: on a loaded machine one later event's hop may exceed the first audio's latency.)
    assert 0 < measures["relay.voice.hop_latency"] <= done - committed and measures["relay.voice.barge_ins"] == 0
    # The same names reach OTel: attributes on the voice.turn span, histograms in seconds.
    (span,) = pipeline.by_name("voice.turn")
    for name in TURN_MEASURES:
        assert span.attributes[name] == measures[name]
    for name in ("relay.voice.perceived_latency", "relay.voice.time_to_first_audio", "relay.voice.hop_latency"):
        unit, points = pipeline.unit(name), pipeline.histogram(name)
        assert unit == "s" and points[0].count == 1 and points[0].sum == pytest.approx(measures[name])
    # The provider response span carries the GenAI realtime draft's first-chunk time.
    (response,) = pipeline.by_name("voice.response")
    assert 0 <= response.attributes["gen_ai.response.time_to_first_chunk"] < felt
    await ws.close()


@pytest.mark.asyncio
async def test_speaking_over_the_answer_is_a_barge_in_with_unplayed_audio(traced: Any, phone: Any) -> None:
    recorder, pipeline = traced
    live = await phone(tone_ms=3000)  # three seconds of answer, sent at once, played in real time
    ws = live["ws"]
    await speak_and_commit(ws)
    await until_first_audio(ws)
    await read_until(ws, "voice.response.done", limit=400)
    await asyncio.sleep(0.2)
    cut_in = time.monotonic()
    await speak_and_commit(ws)
    await read_until(ws, "voice.response.done", limit=400)
    await close_session(ws)
    await wait_for(lambda: ended(recorder, "voice.session"))
    first, second = ended(recorder, "voice.turn")
    assert first.metadata[MEASURES_KEY]["relay.voice.barge_ins"] == 0
    barged = second.metadata[MEASURES_KEY]
    assert barged["relay.voice.barge_ins"] == 1
    # About 2.8 s of the first answer was still to play when the user spoke; time on this machine
    # only makes the estimate smaller, never larger than what was generated.
    assert 3.0 - (time.monotonic() - cut_in) - 0.5 < barged["relay.voice.unplayed_audio"] < 3.0
    (session,) = ended(recorder, "voice.session")
    totals = session.metadata[MEASURES_KEY]
    assert totals["relay.voice.turns"] == 2 and totals["relay.voice.barge_ins"] == 1
    assert totals["relay.voice.unplayed_audio_total"] == pytest.approx(barged["relay.voice.unplayed_audio"])
    unit, points = pipeline.unit("relay.voice.unplayed_audio"), pipeline.histogram("relay.voice.unplayed_audio")
    assert unit == "s" and points[0].count == 1


@pytest.mark.asyncio
async def test_a_reconnect_is_a_scope_whose_gap_is_measured(traced: Any, phone: Any) -> None:
    recorder, pipeline = traced
    live = await phone()
    await live["ws"].close()
    session = live["agent"].sessions[live["info"]["session_id"]]
    await wait_for(lambda: session.detached_at is not None)
    await asyncio.sleep(0.15)
    ws = await live["client"].ws_connect(live["info"]["websocket_path"], headers=live["headers"])
    await ws.send_json({"type": "session.resume", "resume_token": live["info"]["resume_token"],
                        "last_event_id": live["ready"]["event_id"]})
    assert (await next_event(ws))["type"] == "voice.session.resumed"
    (gap,) = ended(recorder, "voice.detached")
    assert 0.15 <= gap.metadata[MEASURES_KEY]["relay.voice.reconnect_gap"] < 5
    (span,) = pipeline.by_name("voice.detached")
    assert span.attributes["relay.voice.reconnect_gap"] == gap.metadata[MEASURES_KEY]["relay.voice.reconnect_gap"]
    await close_session(ws)
    await wait_for(lambda: ended(recorder, "voice.session"))
    assert ended(recorder, "voice.session")[0].metadata[MEASURES_KEY]["relay.voice.reconnects"] == 1


@pytest.mark.asyncio
async def test_the_run_a_turn_triggers_keeps_the_managed_turn(traced: Any, phone: Any) -> None:
    recorder, _ = traced
    live = await phone()
    ws = live["ws"]
    await ws.send_json({"type": "response.create", "text": "task: check the managed turn"})
    events = await read_until(ws, "voice.playback_drain.requested")
    await ws.send_json({"type": "playback.drained"})
    answer = next(e for e in await read_until(ws, "voice.response.done") if e["type"] == "voice.response.delta")
    assert "managed=True" in answer["delta"], events
    await close_session(ws)
    await wait_for(lambda: ended(recorder, "voice.session"))
    (user_turn,) = ended(recorder, "voice.turn")
    assert user_turn.metadata.get(cv.KIND) != cv.TURN and user_turn.metadata["trigger"] == "text"
    (run_turn,) = [e for e in recorder if e.kind == "scope_end" and (e.metadata or {}).get(cv.KIND) == cv.TURN]
    assert run_turn.output == {"outcome": "success"}
    # The user turn lasted until the answer to it was spoken, around the run.
    assert user_turn.start_timestamp < run_turn.start_timestamp and run_turn.timestamp < user_turn.timestamp


@pytest.mark.asyncio
async def test_phone_gets_turn_metrics_when_asked(phone: Any) -> None:
    live = await phone(turn_metrics=True)
    ws = live["ws"]
    printed: list[str] = []
    live["agent"].turn_listeners.append(lambda session, measures: printed.append(format_turn(measures)))
    await speak_and_commit(ws)
    metrics = (await read_until(ws, "voice.turn.metrics", limit=100))[-1]
    assert metrics["turn"] == 1 and metrics["trigger"] == "commit" and metrics["barge_ins"] == 0
    for name in ("perceived_latency_ms", "time_to_first_audio_ms", "time_to_first_text_ms", "hop_latency_ms"):
        assert isinstance(metrics[name], float) and metrics[name] > 0
    assert printed and printed[0].startswith("turn 1 (commit)") and "perceived_latency_ms=" in printed[0]
    await ws.close()


@pytest.mark.asyncio
async def test_turn_metrics_are_off_by_default(phone: Any) -> None:
    live = await phone()
    ws = live["ws"]
    await speak_and_commit(ws)
    events = await read_until(ws, "voice.response.done")
    ws_events = [e["type"] for e in events]
    await ws.send_json({"type": "response.create", "text": "again"})
    ws_events += [e["type"] for e in await read_until(ws, "voice.response.done")]
    assert "voice.turn.metrics" not in ws_events
    await ws.close()


@pytest.mark.asyncio
async def test_session_counts_background_and_fast_lane_runs(traced: Any, phone: Any) -> None:
    recorder, pipeline = traced
    live = await phone()
    ws = live["ws"]
    await ws.send_json({"type": "response.create", "text": "background: slow report"})
    await read_until(ws, "hermes.run.promoted")
    # A second ask while the first runs: answered in the fast lane, inside the grace window.
    await ws.send_json({"type": "response.create", "text": "task: quick check"})
    completed = await read_until(ws, "hermes.run.completed", limit=200)
    assert completed[-1]["lane"] == "fast"
    await close_session(ws)
    await wait_for(lambda: ended(recorder, "voice.session"))
    totals = ended(recorder, "voice.session")[0].metadata[MEASURES_KEY]
    assert totals["relay.voice.background_runs"] == 1 and totals["relay.voice.fast_lane_runs"] == 1
    (span,) = pipeline.by_name("voice.session")
    assert span.attributes["relay.voice.background_runs"] == 1 and span.attributes["relay.voice.fast_lane_runs"] == 1


@pytest.mark.asyncio
async def test_an_earlier_answer_still_streaming_is_not_the_next_turns_first_audio(traced: Any, phone: Any) -> None:
    from benchmarks.bench_voice import PacedStubProvider, ThinkingBroker

    recorder, _ = traced
    live = await phone(provider=PacedStubProvider(), broker=ThinkingBroker())
    ws = live["ws"]
    await speak_and_commit(ws)
    await until_first_audio(ws)  # a 1.8 s answer, streamed a frame every 20 ms
    await ws.send_json({"type": "response.create", "text": "task: look it up"})  # the agent thinks 200 ms
    for _ in range(400):
        event = await next_event(ws)
        if event["type"] == "voice.playback_drain.requested":
            await ws.send_json({"type": "playback.drained"})
        if len(ended(recorder, "voice.turn")) == 2:
            break
    await close_session(ws)
    first, second = ended(recorder, "voice.turn")
    measures = second.metadata[MEASURES_KEY]
    # The first answer's frames kept coming during the second turn; its own answer came after the agent.
    assert measures["relay.voice.perceived_latency"] >= 0.2
    # Unplayed: what the first answer generated from the cut-in until the provider dropped it for the
    # new answer (about the agent's 200 ms here), never more than the whole 1.8 s answer.
    assert measures["relay.voice.barge_ins"] == 1 and 0.05 < measures["relay.voice.unplayed_audio"] < 1.8
    assert first.output == {"outcome": "cancelled"}
