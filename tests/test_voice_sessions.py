"""Voice sessions over a real aiohttp server on loopback: auth, events and rings, detach, resume,
replay, expiry, bad client input and slow consumers."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer
from voice_support import next_event, read_until, wait_for

from relay_runtime import session as relay_session
from relay_runtime.integrations.voice_relay import RelayConfig, create_app, voice_auth
from relay_runtime.integrations.voice_relay.agent import MAX_CONNECT_ATTEMPTS
from relay_runtime.integrations.voice_relay.brokers import InProcessTaskBroker, RunContext
from relay_runtime.integrations.voice_relay.event_log import validate_session_id
from relay_runtime.integrations.voice_relay.models import AgentTaskRequest
from relay_runtime.integrations.voice_relay.providers import StubProvider
from relay_runtime.integrations.voice_relay.session import (
    AUDIO_RING_SIZE,
    EVENT_RING_SIZE,
    OUTBOX_SIZE,
    Outbox,
    ResumeCursor,
)


async def quick_agent(request: AgentTaskRequest, ctx: RunContext) -> str:
    return f"answer to {request.text}"


@pytest_asyncio.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    relay_session.reset_for_tests()
    config = RelayConfig(
        realtime_voice_run_dir=str(tmp_path),
        realtime_voice_config_path=str(tmp_path / "relay-config.yaml"),
        realtime_voice_promote_after_ms=2000,
        max_message_bytes=64 * 1024,
        max_audio_chunk_bytes=8 * 1024,
    )
    app = create_app(
        config,
        task_broker=InProcessTaskBroker(quick_agent),
        providers={"stub": StubProvider(tone_ms=200, frame_ms=100)},
    )
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client
    relay_session.reset_for_tests()


def server(client: TestClient[Any, Any]) -> Any:
    return client.app["server"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def open_session(client: TestClient[Any, Any], **body: Any) -> tuple[Any, dict[str, Any], str]:
    token = server(client).sessions.create_session("phone", "device-1").token
    resp = await client.post("/voice/realtime-agent/session", json=body, headers=bearer(token))
    assert resp.status == 200, await resp.text()
    info = await resp.json()
    ws = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    ready = await next_event(ws)
    assert ready["type"] == "voice.session.ready"
    info["_ready"] = ready
    return ws, info, token


# -- auth ---------------------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"},
                                     {"Authorization": "Bearer "}])
async def test_bad_bearer_is_401_and_creates_nothing(client: TestClient[Any, Any], headers: dict[str, str]) -> None:
    agent = server(client).realtime_agent
    resp = await client.post("/voice/realtime-agent/session", json={}, headers=headers)
    assert resp.status == 401
    assert (await resp.json()) == {"error": "unauthorized"}
    assert agent.sessions == {}
    for method, path in (("GET", "/voice/realtime-agent/config"), ("PATCH", "/voice/realtime-agent/config")):
        resp = await client.request(method, path, json={"promotion": {"enabled": False}}, headers=headers)
        assert resp.status == 401
    assert server(client).settings.promotion.enabled is True


@pytest.mark.asyncio
async def test_websocket_requires_bearer_and_owning_device(client: TestClient[Any, Any]) -> None:
    ws, info, _token = await open_session(client)
    resp = await client.get(info["websocket_path"])
    assert resp.status == 401
    other = server(client).sessions.create_session("other", "device-2").token
    resp = await client.get(info["websocket_path"], headers=bearer(other))
    assert resp.status == 404
    resp = await client.get("/voice/realtime-agent/..%2F..%2Fetc", headers=bearer(other))
    assert resp.status == 404
    await ws.close()


@pytest.mark.asyncio
async def test_session_response_and_token_storage(client: TestClient[Any, Any]) -> None:
    ws, info, _ = await open_session(client, chat_session_id="chat-9")
    assert info["success"] is True
    assert info["websocket_path"] == f"/voice/realtime-agent/{info['session_id']}"
    assert len(base64.urlsafe_b64decode(info["session_id"] + "==")) == 18
    assert len(base64.urlsafe_b64decode(info["resume_token"] + "==")) == 32
    assert info["resume_supported"] is True and info["resume_ttl_ms"] == 30000
    assert info["provider"] == "stub" and info["chat_session_id"] == "chat-9"
    session = server(client).realtime_agent.sessions[info["session_id"]]
    # Only the digest is kept: the raw token is nowhere on the session object.
    assert info["resume_token"] not in repr(vars(session))
    assert session.issued_resume_token is None
    await ws.close()
    await wait_for(lambda: session.detached_at is not None)
    assert info["resume_token"] not in session.event_log_path.read_text()


@pytest.mark.asyncio
async def test_malformed_session_and_config_bodies_are_400(client: TestClient[Any, Any]) -> None:
    token = server(client).sessions.create_session("phone", "d").token
    resp = await client.post("/voice/realtime-agent/session", data=b"{nope", headers=bearer(token))
    assert resp.status == 400 and "not valid JSON" in (await resp.json())["error"]
    resp = await client.post("/voice/realtime-agent/session", json={"provider": "nope"}, headers=bearer(token))
    assert resp.status == 400 and "unknown provider" in (await resp.json())["error"]
    resp = await client.post("/voice/realtime-agent/session", json={"model": 5}, headers=bearer(token))
    assert resp.status == 400
    resp = await client.patch(
        "/voice/realtime-agent/config", json={"promotion": {"promote_after_ms": "soon"}}, headers=bearer(token)
    )
    assert resp.status == 400 and "promote_after_ms" in (await resp.json())["error"]
    resp = await client.patch(
        "/voice/realtime-agent/config", json={"promotion": {"result_delivery": "shout"}}, headers=bearer(token)
    )
    assert resp.status == 400
    assert server(client).realtime_agent.sessions == {}


@pytest.mark.asyncio
async def test_config_patch_applies_and_persists(client: TestClient[Any, Any]) -> None:
    token = server(client).sessions.create_session("phone", "d").token
    resp = await client.patch(
        "/voice/realtime-agent/config",
        json={"promotion": {"promote_after_ms": 1234, "result_delivery": "visual_only"}},
        headers=bearer(token),
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["promotion"]["promote_after_ms"] == 1234
    saved = json.loads(Path(server(client).config.realtime_voice_config_path).read_text())
    assert saved["promotion"]["result_delivery"] == "visual_only"
    resp = await client.post("/voice/realtime-agent/session", json={}, headers=bearer(token))
    info = await resp.json()
    assert info["result_delivery"] == "visual_only"


# -- events, rings, log ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_rings_are_bounded_and_log_redacts_audio(client: TestClient[Any, Any]) -> None:
    ws, info, _ = await open_session(client)
    session = server(client).realtime_agent.sessions[info["session_id"]]
    for i in range(EVENT_RING_SIZE + 20):
        session.emit("test.event", index=i)
    for _ in range(AUDIO_RING_SIZE + 10):
        session.emit("voice.output_audio.delta", audio=b"\x01\x02" * 50, sample_rate=24000)
    assert len(session.event_ring) == EVENT_RING_SIZE
    assert len(session.audio_ring) == AUDIO_RING_SIZE
    assert session.audio_ring[-1]["audio_event_id"] == AUDIO_RING_SIZE + 10
    ids = [e["event_id"] for e in session.event_ring]
    assert ids == sorted(ids)
    log = session.event_log_path.read_text()
    assert base64.b64encode(b"\x01\x02" * 50).decode() not in log
    assert '"redacted_bytes":100' in log
    # The client got everything, in order, audio as base64.
    received = [await next_event(ws) for _ in range(EVENT_RING_SIZE + 20 + AUDIO_RING_SIZE + 10)]
    assert [e["event_id"] for e in received] == list(range(2, 2 + len(received)))
    assert base64.b64decode(received[-1]["audio"]) == b"\x01\x02" * 50
    await ws.close()


@pytest.mark.asyncio
async def test_the_session_log_is_written_under_the_redaction_policy(client: TestClient[Any, Any]) -> None:
    from relay_runtime.redaction import RedactionPolicy, Rule

    email, card = "jane.doe@example.com", "4111 1111 1111 1111"
    policy = RedactionPolicy([Rule("redact", detector="email"), Rule("mask", detector="credit_card")])
    relay_session.SESSION_COORDINATOR.redaction.use(policy)
    try:
        ws, info, _ = await open_session(client)
        session = server(client).realtime_agent.sessions[info["session_id"]]
        answer = f"I will mail {email} and charge {card} today. " + "More words follow here. " * 12
        heard = f"my address is {email} thanks"
        for i in range(0, len(answer), 3):  # as a provider streams them: no delta holds a value whole
            session.emit("voice.response.delta", response_id="r1", delta=answer[i : i + 3])
        for i in range(0, len(heard), 4):
            session.emit("voice.input_transcript.delta", delta=heard[i : i + 4])
        session.emit("voice.response.done", response_id="r1")
        session.emit("test.event", note=f"reach me at {email}")
        received = [await next_event(ws) for _ in range(len(answer) // 3 + 1)]
        assert email[:8] in "".join(e.get("delta", "") for e in received)  # the phone hears the real answer
        await server(client).realtime_agent.close_session(session, reason="test")
        lines = [json.loads(line) for line in session.event_log_path.read_text().splitlines()]
    finally:
        relay_session.SESSION_COORDINATOR.redaction.use(None)
    text = json.dumps(lines)
    for value in (email, card):
        for i in range(len(value) - 5):
            assert value[i : i + 6] not in text, value[i : i + 6]
    said = "".join(r["delta"] for r in lines if r.get("type") == "voice.response.delta")
    assert said == policy.redact_text(answer)  # nothing lost: the held tail was released before the done
    kinds = [r.get("type") for r in lines]
    assert kinds.index("voice.response.done") > max(
        i for i, r in enumerate(lines) if r.get("type") == "voice.response.delta"
    )
    heard_logged = "".join(r["delta"] for r in lines if r.get("type") == "voice.input_transcript.delta")
    assert heard_logged == policy.redact_text(heard)  # released when the session closed
    assert any(r.get("note") == "reach me at [REDACTED:email]" for r in lines)


# -- detach, resume, replay --------------------------------------------------------------------------------


async def detach(ws: Any, session: Any) -> None:
    await ws.close(code=1001, message=b"network changed")
    await wait_for(lambda: session.detached_at is not None)


def resume_message(info: dict[str, Any], last_event_id: int, **extra: Any) -> dict[str, Any]:
    return {"type": "session.resume", "resume_token": info["resume_token"], "last_event_id": last_event_id,
            "last_audio_event_id": 0, "last_played_audio_event_id": 0, "last_input_chunk_id": 0, **extra}


@pytest.mark.asyncio
async def test_detach_resume_replays_missed_events_in_order(client: TestClient[Any, Any]) -> None:
    ws, info, token = await open_session(client)
    session = server(client).realtime_agent.sessions[info["session_id"]]
    await detach(ws, session)
    assert session.event_ring[-1]["type"] == "voice.session.detached"
    assert session.resume_deadline == pytest.approx(session.detached_at + 30.0)
    for i in range(5):
        session.emit("test.missed", index=i)
    session.emit("voice.output_audio.delta", audio=b"\0\0", sample_rate=24000)
    ws2 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws2.send_json(resume_message(info, info["_ready"]["event_id"]))
    events = await read_until(ws2, "voice.replay.done")
    types = [e["type"] for e in events]
    assert types[:2] == ["voice.session.resumed", "voice.replay.started"]
    replayed = [e for e in events if e.get("replayed")]
    assert [e["type"] for e in replayed] == ["voice.session.detached", *["test.missed"] * 5,
                                             "voice.output_audio.delta"]
    assert [e["event_id"] for e in replayed] == sorted(e["event_id"] for e in replayed)
    assert session.detached_at is None
    # Live traffic continues on the resumed socket.
    session.emit("test.live")
    assert (await next_event(ws2))["type"] == "test.live"
    # A second resume from the latest cursor replays nothing.
    await detach(ws2, session)
    last = session.event_ring[-2]["event_id"]
    ws3 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws3.send_json(resume_message(info, last, last_audio_event_id=1, last_played_audio_event_id=1))
    events = await read_until(ws3, "voice.replay.done")
    assert [e["type"] for e in events if e.get("replayed")] == ["voice.session.detached"]
    await ws3.close()


def audio_ids(events: list[dict[str, Any]]) -> list[int]:
    return [e["audio_event_id"] for e in events if e["type"] == "voice.output_audio.delta"]


@pytest.mark.asyncio
async def test_resume_replays_audio_received_but_not_played(client: TestClient[Any, Any]) -> None:
    ws, info, token = await open_session(client)
    session = server(client).realtime_agent.sessions[info["session_id"]]
    for _ in range(4):
        session.emit("voice.output_audio.delta", audio=b"\0\1", sample_rate=24000)
    received = [await next_event(ws) for _ in range(4)]
    assert audio_ids(received) == [1, 2, 3, 4]
    await detach(ws, session)
    session.emit("voice.output_audio.delta", audio=b"\0\2", sample_rate=24000)
    session.emit("test.missed")
    # The phone got audio 1-4 but its speaker only played 1-2 before the network dropped.
    ws2 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws2.send_json(resume_message(info, received[-1]["event_id"], last_audio_event_id=4,
                                       last_played_audio_event_id=2))
    events = await read_until(ws2, "voice.replay.done")
    replayed = [e for e in events if e.get("replayed")]
    # Unplayed audio (3, 4) once each, then what was missed while detached, all in event order.
    assert audio_ids(replayed) == [3, 4, 5]
    assert [e["type"] for e in replayed] == [*["voice.output_audio.delta"] * 2, "voice.session.detached",
                                             "voice.output_audio.delta", "test.missed"]
    assert [e["event_id"] for e in replayed] == sorted(e["event_id"] for e in replayed)
    assert base64.b64decode(replayed[0]["audio"]) == b"\0\1"
    # Once played, audio is never sent again.
    await detach(ws2, session)
    ws3 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws3.send_json(resume_message(info, session.event_ring[-2]["event_id"], last_audio_event_id=5,
                                       last_played_audio_event_id=5))
    events = await read_until(ws3, "voice.replay.done")
    assert audio_ids(events) == []
    # Without audio cursors, audio is replayed by the event cursor; without the played one, by the received one.
    by_event_cursor = ResumeCursor.from_message({"last_event_id": received[2]["event_id"]})
    assert audio_ids(session.replay_after(by_event_cursor)) == [4, 5]
    assert audio_ids(session.replay_after(ResumeCursor.from_message({"last_audio_event_id": 3}))) == [4, 5]
    # Unplayed audio that already left the ring cannot come back; the rest does, once.
    for _ in range(AUDIO_RING_SIZE + 4):
        session.emit("voice.output_audio.delta", audio=b"\0\3", sample_rate=24000)
    live = [await next_event(ws3) for _ in range(AUDIO_RING_SIZE + 4)]
    await detach(ws3, session)
    ws4 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws4.send_json(resume_message(info, live[-1]["event_id"], last_audio_event_id=live[-1]["audio_event_id"],
                                       last_played_audio_event_id=5))
    events = await read_until(ws4, "voice.replay.done", limit=AUDIO_RING_SIZE + 10)
    assert audio_ids(events) == [e["audio_event_id"] for e in live[4:]]
    await ws4.close()


@pytest.mark.asyncio
async def test_resume_cursor_claiming_unreceived_audio_was_played_is_refused(client: TestClient[Any, Any]) -> None:
    ws, info, token = await open_session(client)
    session = server(client).realtime_agent.sessions[info["session_id"]]
    await detach(ws, session)
    ws2 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws2.send_json(resume_message(info, 1, last_audio_event_id=2, last_played_audio_event_id=3))
    error = await next_event(ws2)
    assert error["type"] == "voice.error" and error["code"] == "bad_resume_cursor"
    assert "last_played_audio_event_id" in error["message"]
    assert (await next_event(ws2))["type"] == "voice.session.resume_failed"
    assert session.detached_at is not None and not session.closed
    await ws2.close()


@pytest.mark.asyncio
async def test_resume_token_of_another_session_never_resumes(client: TestClient[Any, Any]) -> None:
    ws_a, info_a, token = await open_session(client)
    resp = await client.post("/voice/realtime-agent/session", json={}, headers=bearer(token))
    info_b = await resp.json()
    session_a = server(client).realtime_agent.sessions[info_a["session_id"]]
    await detach(ws_a, session_a)
    ws = await client.ws_connect(info_a["websocket_path"], headers=bearer(token))
    await ws.send_json({**resume_message(info_a, 0), "resume_token": info_b["resume_token"]})
    failed = await next_event(ws)
    assert failed == {"type": "voice.session.resume_failed", "reason": "invalid_resume_token", "at_ms": failed["at_ms"]}
    msg = await ws.receive(timeout=5)
    assert msg.type is WSMsgType.CLOSE and msg.data == 4003
    assert session_a.detached_at is not None and session_a.outbox is None


@pytest.mark.asyncio
async def test_expired_window_and_unclaimed_socket(client: TestClient[Any, Any]) -> None:
    ws, info, token = await open_session(client)
    session = server(client).realtime_agent.sessions[info["session_id"]]
    # A second socket that does not claim the live session is refused.
    intruder = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await intruder.send_json({"type": "input_audio.commit"})
    failed = await next_event(intruder)
    assert failed["reason"] == "session_not_claimed"
    msg = await intruder.receive(timeout=5)
    assert msg.type is WSMsgType.CLOSE and msg.data == 4009
    session.emit("test.still-alive")
    assert (await next_event(ws))["type"] == "test.still-alive"
    await detach(ws, session)
    session.resume_deadline = time.monotonic() - 1
    late = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await late.send_json(resume_message(info, 0))
    failed = await next_event(late)
    assert failed["reason"] == "resume_expired"
    msg = await late.receive(timeout=5)
    assert msg.type is WSMsgType.CLOSE and msg.data == 4008


@pytest.mark.asyncio
async def test_resume_supersedes_attached_socket(client: TestClient[Any, Any]) -> None:
    ws, info, token = await open_session(client)
    ws2 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws2.send_json(resume_message(info, info["_ready"]["event_id"]))
    await read_until(ws2, "voice.replay.done")
    msg = await ws.receive(timeout=5)
    assert msg.type is WSMsgType.CLOSE and msg.data == 4000
    session = server(client).realtime_agent.sessions[info["session_id"]]
    assert session.detached_at is None
    session.emit("test.after")
    assert (await next_event(ws2))["type"] == "test.after"
    await ws2.close()


@pytest.mark.asyncio
async def test_detached_session_expires_after_ttl(client: TestClient[Any, Any]) -> None:
    ws, info, _ = await open_session(client)
    agent = server(client).realtime_agent
    session = agent.sessions[info["session_id"]]
    session.resume_ttl_seconds = 0.1
    await detach(ws, session)
    await wait_for(lambda: session.closed)
    assert info["session_id"] not in agent.sessions
    assert session.check_resume(info["resume_token"]) == "session_closed"
    assert session.check_resume("x" * 43) == "invalid_resume_token"
    assert "voice.session.expired" in session.event_log_path.read_text()


@pytest.mark.asyncio
async def test_session_close_message_ends_session(client: TestClient[Any, Any]) -> None:
    ws, info, token = await open_session(client)
    await ws.send_json({"type": "session.close"})
    events = await read_until(ws, "voice.session.closed")
    assert events[-1]["reason"] == "client_closed"
    msg = await ws.receive(timeout=5)
    assert msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED)
    resp = await client.get(info["websocket_path"], headers=bearer(token))
    assert resp.status == 404


# -- bad client input ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_bad_client_messages_get_errors_and_session_survives(client: TestClient[Any, Any]) -> None:
    ws, info, _ = await open_session(client)
    cases = [
        ("{not json", "bad_json"),
        ("[1, 2]", "bad_message"),
        (json.dumps({"type": 7}), "bad_message"),
        (json.dumps({"type": "teleport"}), "unknown_message_type"),
        (json.dumps({"type": "input_audio.append", "audio": "%%%"}), "bad_audio"),
        (json.dumps({"type": "input_audio.append", "audio": base64.b64encode(b"\0" * 9000).decode()}),
         "audio_chunk_too_large"),
        (json.dumps({"type": "input_audio.append", "audio": "AAAA", "sample_rate": "fast"}), "bad_audio"),
        (json.dumps({"type": "response.create", "text": 42}), "bad_message"),
        (json.dumps({"type": "hermes.confirm", "approved": "maybe"}), "confirm_failed"),
        (json.dumps({"type": "hermes.result.respeak"}), "nothing_to_respeak"),
        (json.dumps({"type": "session.resume", "resume_token": "x"}), "already_attached"),
    ]
    for raw, code in cases:
        await ws.send_str(raw)
        event = await next_event(ws)
        assert event["type"] == "voice.error" and event["code"] == code, (raw, event)
    await ws.send_bytes(b"\x00\x01")
    assert (await next_event(ws))["code"] == "binary_not_supported"
    await ws.send_json({"type": "response.create", "text": "hello"})
    events = await read_until(ws, "voice.response.done")
    assert any(e.get("delta") == "You said: hello" for e in events)
    session = server(client).realtime_agent.sessions[info["session_id"]]
    assert not session.closed
    await ws.close()


@pytest.mark.asyncio
async def test_oversized_message_closes_only_that_socket(client: TestClient[Any, Any]) -> None:
    ws_a, info_a, _ = await open_session(client)
    ws_b, _info_b, _ = await open_session(client)
    await ws_a.send_str(json.dumps({"type": "response.create", "text": "x" * 70_000}))
    error = await next_event(ws_a)
    assert error["type"] == "voice.error" and error["code"] == "message_too_large"
    msg = await ws_a.receive(timeout=5)
    assert msg.type is WSMsgType.CLOSE and msg.data == 1009
    session_a = server(client).realtime_agent.sessions[info_a["session_id"]]
    await wait_for(lambda: session_a.detached_at is not None)
    assert not session_a.closed  # resumable, not torn down
    await ws_b.send_json({"type": "response.create", "text": "still here"})
    events = await read_until(ws_b, "voice.response.done")
    assert any(e.get("delta") == "You said: still here" for e in events)
    await ws_b.close()


class _StuckSocket:
    """A websocket whose peer never reads: every send blocks."""

    def __init__(self) -> None:
        self.close_codes: list[int] = []

    async def send_str(self, data: str) -> None:
        await asyncio.Event().wait()

    async def close(self, *, code: int, message: bytes) -> bool:
        self.close_codes.append(code)
        return True


class _Request:
    transport = None


@pytest.mark.asyncio
async def test_slow_consumer_is_dropped_not_buffered() -> None:
    stuck = _StuckSocket()
    outbox = Outbox(stuck, _Request(), "session-slow")  # type: ignore[arg-type]
    assert outbox.put({"type": "first"})
    await wait_for(outbox.queue.empty)  # the writer took it and blocks on the peer
    accepted = 1 + sum(outbox.put({"type": "x", "n": i}) for i in range(OUTBOX_SIZE + 50))
    # One event is held by the blocked writer, the queue is full, the rest were refused.
    assert accepted == OUTBOX_SIZE + 1
    assert outbox.dropped
    assert outbox.queue.qsize() <= OUTBOX_SIZE
    await wait_for(lambda: stuck.close_codes == [4010])
    assert outbox.put({"type": "late"}) is False


@pytest.mark.parametrize("bad", ["abcdefgh\n", "../../../etc/passwd", "short", "a" * 65, "abcd efgh", "abcdefgh.jsonl"])
def test_session_ids_that_could_not_be_a_plain_file_name_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid voice session id"):
        validate_session_id(bad)
    assert validate_session_id("AbC-_123xyz") == "AbC-_123xyz"


async def resume_refused(
    client: TestClient[Any, Any], info: dict[str, Any], token: str, **extra: Any
) -> tuple[str, int]:
    ws = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws.send_json(resume_message(info, 0, **extra))
    failed = await next_event(ws)
    assert failed["type"] == "voice.session.resume_failed"
    msg = await ws.receive(timeout=5)
    assert msg.type is WSMsgType.CLOSE
    return failed["reason"], msg.data


@pytest.mark.asyncio
async def test_resume_of_an_ended_session_says_why(client: TestClient[Any, Any]) -> None:
    # A phone coming back after the session ended must learn why over the socket, not get a bare 404.
    ws, closed_info, token = await open_session(client)
    await ws.send_json({"type": "session.close"})
    await read_until(ws, "voice.session.closed")
    assert await resume_refused(client, closed_info, token) == ("session_closed", 4008)
    assert await resume_refused(client, closed_info, token, resume_token="x" * 43) == ("invalid_resume_token", 4003)

    ws, expired_info, token = await open_session(client)
    session = server(client).realtime_agent.sessions[expired_info["session_id"]]
    session.resume_ttl_seconds = 0.05
    await detach(ws, session)
    await wait_for(lambda: session.closed)
    assert await resume_refused(client, expired_info, token) == ("resume_expired", 4008)
    # Only the owning device learns anything; a plain request still finds no session.
    other = server(client).sessions.create_session("other", "device-2").token
    assert (await client.get(expired_info["websocket_path"], headers=bearer(other))).status == 404
    assert (await client.get(expired_info["websocket_path"], headers=bearer(token))).status == 404


@pytest.mark.asyncio
async def test_device_tokens_are_kept_only_as_digests(client: TestClient[Any, Any]) -> None:
    sessions = server(client).sessions
    token = sessions.create_session("phone", "device-9").token
    resp = await client.get("/voice/realtime-agent/config", headers=bearer(token))
    assert resp.status == 200
    stored = repr([vars(device) for device in vars(sessions)["_by_digest"].values()])
    assert "device-9" in stored and token not in stored
    assert token not in repr(voice_auth._VALIDATION_CACHE)
    assert sessions.revoke(token)
    assert (await client.get("/voice/realtime-agent/config", headers=bearer(token))).status == 401


@pytest.mark.asyncio
async def test_a_session_never_connected_expires(client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Every POST opens a session and its event log; one that no socket ever claims must not live forever.
    monkeypatch.setenv("RELAY_VOICE_RESUME_TTL_MS", "100")
    agent = server(client).realtime_agent
    token = server(client).sessions.create_session("phone", "device-1").token
    info = await (await client.post("/voice/realtime-agent/session", json={}, headers=bearer(token))).json()
    session = agent.sessions[info["session_id"]]
    await wait_for(lambda: info["session_id"] not in agent.sessions)
    assert session.closed and session.event_log._fh is None
    assert "voice.session.expired" in session.event_log_path.read_text()


@pytest.mark.asyncio
async def test_resume_tells_the_phone_which_input_audio_arrived(client: TestClient[Any, Any]) -> None:
    ws, info, token = await open_session(client)
    session = server(client).realtime_agent.sessions[info["session_id"]]
    chunk = base64.b64encode(b"\0\0" * 160).decode()
    for chunk_id in (1, 2, 3):
        await ws.send_json({"type": "input_audio.append", "audio": chunk, "chunk_id": chunk_id})
    await wait_for(lambda: session.last_input_chunk_id == 3)
    await detach(ws, session)
    ws2 = await client.ws_connect(info["websocket_path"], headers=bearer(token))
    await ws2.send_json(resume_message(info, info["_ready"]["event_id"], last_input_chunk_id=5))
    resumed = await next_event(ws2)
    # The phone sent up to 5; the relay got 3, so 4 and 5 are the ones to send again.
    assert resumed["type"] == "voice.session.resumed" and resumed["last_input_chunk_id"] == 3
    await ws2.close()


class _FlakyProvider:
    """Refuses the first `failures` connects (a provider blip), then connects to the stub voice."""

    provider_id = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0

    async def connect(self, config: Any) -> Any:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise OSError("connection refused: secret-detail")
        return await StubProvider(tone_ms=20, frame_ms=20).connect(config)


def _flaky_app(tmp_path: Path, failures: int) -> Any:
    return create_app(RelayConfig(realtime_voice_run_dir=str(tmp_path), realtime_voice_provider="flaky"),
                      providers={"flaky": _FlakyProvider(failures)})


@pytest.mark.asyncio
async def test_provider_connect_failure_keeps_the_session_for_a_retry(tmp_path: Path) -> None:
    async with TestClient(TestServer(_flaky_app(tmp_path, failures=2), host="127.0.0.1")) as test_client:
        token = server(test_client).sessions.create_session("phone", "device-1").token
        info = await (await test_client.post("/voice/realtime-agent/session", json={}, headers=bearer(token))).json()
        for attempt in (1, 2):
            ws = await test_client.ws_connect(info["websocket_path"], headers=bearer(token))
            error = await next_event(ws)
            assert error["type"] == "voice.error" and error["code"] == "provider_connect_failed"
            assert error["retryable"] is True and error["attempt"] == attempt
            assert "secret-detail" not in error["message"]  # the kind of failure, not its text
            msg = await ws.receive(timeout=5)
            assert msg.type is WSMsgType.CLOSE and msg.data == 1013  # try again later
            assert info["session_id"] in server(test_client).realtime_agent.sessions
        # Same path, no resume token: the third socket is a first attach and the provider answers.
        ws = await test_client.ws_connect(info["websocket_path"], headers=bearer(token))
        ready = await next_event(ws)
        assert ready["type"] == "voice.session.ready" and ready["session_id"] == info["session_id"]
        await ws.send_json({"type": "response.create", "text": "hello"})
        events = await read_until(ws, "voice.response.done")
        assert any(e["type"] == "voice.response.delta" for e in events)
        await ws.close()


@pytest.mark.asyncio
async def test_provider_connect_failing_every_time_ends_the_session(tmp_path: Path) -> None:
    app = _flaky_app(tmp_path, failures=100)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        token = server(test_client).sessions.create_session("phone", "device-1").token
        info = await (await test_client.post("/voice/realtime-agent/session", json={}, headers=bearer(token))).json()
        codes = []
        for _ in range(MAX_CONNECT_ATTEMPTS):
            ws = await test_client.ws_connect(info["websocket_path"], headers=bearer(token))
            error = await next_event(ws)
            codes.append((error["retryable"], (await ws.receive(timeout=5)).data))
        assert codes == [(True, 1013)] * (MAX_CONNECT_ATTEMPTS - 1) + [(False, 4011)]
        assert info["session_id"] not in server(test_client).realtime_agent.sessions
        assert app["server"].realtime_agent.native_providers["flaky"].attempts == MAX_CONNECT_ATTEMPTS


class _LeakyProvider(_FlakyProvider):
    """Refuses with an error that quotes what the caller gave it (as a provider's 4xx body may)."""

    async def connect(self, config: Any) -> Any:
        self.attempts += 1
        raise OSError("connection refused for account jane.doe@example.com")


@pytest.mark.asyncio
async def test_the_process_log_quotes_errors_under_the_redaction_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from relay_runtime.redaction import RedactionPolicy, Rule

    relay_session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    app = create_app(RelayConfig(realtime_voice_run_dir=str(tmp_path), realtime_voice_provider="leaky"),
                     providers={"leaky": _LeakyProvider(1)})  # fmt: skip
    caplog.set_level(logging.WARNING)
    try:
        async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
            token = server(test_client).sessions.create_session("phone", "device-1").token
            posted = await test_client.post("/voice/realtime-agent/session", json={}, headers=bearer(token))
            ws = await test_client.ws_connect((await posted.json())["websocket_path"], headers=bearer(token))
            assert (await next_event(ws))["code"] == "provider_connect_failed"
            await ws.close()
    finally:
        relay_session.SESSION_COORDINATOR.redaction.use(None)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "provider connect failed" in logged and "[REDACTED:email]" in logged
    assert "jane.doe" not in logged


@pytest.mark.asyncio
async def test_ready_event_says_the_session_can_be_resumed(client: TestClient[Any, Any]) -> None:
    ws, info, _ = await open_session(client)
    ready = info["_ready"]
    # The phone learns from the first event, not only from the POST, that it may resume and for how long.
    assert ready["resume_supported"] is True
    assert ready["resume_ttl_ms"] == info["resume_ttl_ms"] > 0
    await ws.close()
