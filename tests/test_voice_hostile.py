"""Hostile input against the real relay on loopback (aiohttp server, raw HTTP, the websockets
client): every entry answers junk with its documented 4xx, close code or voice.error, and the
session survives."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import websockets
from aiohttp import web

from relay_runtime.integrations.voice_relay import RelayConfig, create_app
from relay_runtime.integrations.voice_relay.providers import StubProvider

LIMIT = 256 * 1024  # the default; the nested-bracket bodies fit under it
NESTED = b"[" * 100_000


@dataclass
class Relay:
    port: int
    token: str
    app: web.Application

    async def http(self, method: str, path: str, *, auth: bytes | None = None, body: bytes = b"") -> tuple[int, bytes]:
        """One raw HTTP/1.1 request, so headers can carry bytes an HTTP client library would refuse."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        auth = b"Bearer " + self.token.encode() if auth is None else auth
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        ).encode()
        writer.write(head + b"Authorization: " + auth + b"\r\n\r\n" + body)
        await writer.drain()
        response = await reader.read()
        writer.close()
        status = int(response.split(b" ", 2)[1])
        return status, response.partition(b"\r\n\r\n")[2]

    async def new_session(self) -> dict[str, Any]:
        status, body = await self.http("POST", "/voice/realtime-agent/session", body=b"{}")
        assert status == 200, body
        info: dict[str, Any] = json.loads(body)
        return info

    def socket(self, info: dict[str, Any]) -> Any:
        return websockets.connect(
            f"ws://127.0.0.1:{self.port}{info['websocket_path']}",
            additional_headers={"Authorization": f"Bearer {self.token}"},
            max_size=None,
        )


@contextlib.asynccontextmanager
async def running_relay(tmp_path: Path, **config: Any) -> AsyncIterator[Relay]:
    app = create_app(
        RelayConfig(realtime_voice_run_dir=str(tmp_path), max_message_bytes=LIMIT, **config),
        providers={"stub": StubProvider(tone_ms=20, frame_ms=20)},
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    token = app["server"].sessions.create_session("phone", "device-1").token
    try:
        yield Relay(runner.addresses[0][1], token, app)
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def relay(tmp_path: Path) -> AsyncIterator[Relay]:
    async with running_relay(tmp_path) as started:
        yield started


async def recv_json(ws: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 5))
    return event


async def recv_until(ws: Any, kind: str) -> dict[str, Any]:
    for _ in range(200):
        event = await recv_json(ws)
        if event["type"] == kind:
            return event
    raise AssertionError(f"no {kind}")


async def closed_with(ws: Any) -> tuple[int | None, list[dict[str, Any]]]:
    """The events left on a socket the server is closing, and its close code (None: no close frame)."""
    events = []
    try:
        while True:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
    except websockets.ConnectionClosed as exc:
        return (exc.rcvd.code if exc.rcvd is not None else None), events


UNDECODABLE = [b"Bearer \xff\xfe\x80", b"\xff\xff", b"Bearer \xc3\x28" + b"\x80" * 50, b"bearer \xed\xa0\x80"]
ROUTES = [
    ("GET", "/voice/realtime-agent/config"),
    ("PATCH", "/voice/realtime-agent/config"),
    ("POST", "/voice/realtime-agent/session"),
    ("GET", "/voice/realtime-agent/abcdefghijklmnop"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize("auth", UNDECODABLE)
@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_undecodable_authorization_is_401(relay: Relay, auth: bytes, method: str, path: str) -> None:
    status, _ = await relay.http(method, path, auth=auth)
    assert status == 401


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/voice/realtime-agent/session", NESTED),
        ("PATCH", "/voice/realtime-agent/config", NESTED),
        ("POST", "/voice/realtime-agent/session", b'{"a":' * 50_000),
        ("PATCH", "/voice/realtime-agent/config", b'{"promotion": ' + b"[" * 100_000),
    ],
)
async def test_deeply_nested_json_body_is_400(relay: Relay, method: str, path: str, body: bytes) -> None:
    status, answer = await relay.http(method, path, body=body)
    assert status == 400 and b"JSON" in answer
    # The server is fine afterwards.
    assert (await relay.new_session())["success"] is True


@pytest.mark.asyncio
async def test_nested_json_on_an_attached_socket_is_a_voice_error(relay: Relay) -> None:
    info = await relay.new_session()
    async with relay.socket(info) as ws:
        assert (await recv_json(ws))["type"] == "voice.session.ready"
        await ws.send(NESTED.decode())
        error = await recv_json(ws)
        assert error["type"] == "voice.error" and error["code"] == "bad_json"
        await ws.send(json.dumps({"type": "response.create", "text": "still there?"}))
        assert (await recv_until(ws, "voice.response.delta"))["delta"] == "You said: still there?"


@pytest.mark.asyncio
@pytest.mark.parametrize("first", [NESTED.decode(), '{"type": "session.resume", "x": ' + "[" * 100_000])
async def test_nested_json_as_a_claim_is_refused_with_its_close_code(relay: Relay, first: str) -> None:
    info = await relay.new_session()
    async with relay.socket(info) as owner:
        assert (await recv_json(owner))["type"] == "voice.session.ready"
        async with relay.socket(info) as intruder:
            await intruder.send(first)
            code, events = await closed_with(intruder)
        assert code == 4009  # session_not_claimed, not 1006 from a crashed handler
        assert [e.get("reason") for e in events] == ["session_not_claimed"]
        # The owner's socket and the session are untouched.
        await owner.send(json.dumps({"type": "response.create", "text": "still mine"}))
        assert (await recv_until(owner, "voice.response.delta"))["delta"] == "You said: still mine"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [LIMIT + 1, 2 * LIMIT, 3 * LIMIT])
@pytest.mark.parametrize("binary", [False, True])
async def test_oversized_frame_gets_the_promised_error_then_close_and_the_session_resumes(
    relay: Relay, size: int, binary: bool
) -> None:
    info = await relay.new_session()
    async with relay.socket(info) as ws:
        ready = await recv_json(ws)
        await ws.send(b"\0" * size if binary else "x" * size)
        code, events = await closed_with(ws)
    assert code == 1009
    errors = [e for e in events if e["type"] == "voice.error"]
    assert [e["code"] for e in errors] == ["message_too_large"] and str(LIMIT) in errors[0]["message"]
    async with relay.socket(info) as ws:
        await ws.send(
            json.dumps(
                {"type": "session.resume", "resume_token": info["resume_token"], "last_event_id": ready["event_id"]}
            )
        )
        assert (await recv_json(ws))["type"] == "voice.session.resumed"


@pytest.mark.asyncio
async def test_a_frame_far_over_the_limit_is_dropped_unread_and_the_session_resumes(relay: Relay) -> None:
    # Past four times the limit the transport refuses the frame before reading it: close 1009, no event.
    info = await relay.new_session()
    async with relay.socket(info) as ws:
        ready = await recv_json(ws)
        await ws.send("x" * (5 * LIMIT))
        code, events = await closed_with(ws)
    assert code == 1009 and not [e for e in events if e["type"] == "voice.error"]
    async with relay.socket(info) as ws:
        await ws.send(
            json.dumps(
                {"type": "session.resume", "resume_token": info["resume_token"], "last_event_id": ready["event_id"]}
            )
        )
        assert (await recv_json(ws))["type"] == "voice.session.resumed"


@pytest.mark.asyncio
async def test_echoed_strings_are_clipped_in_the_error_and_the_log(relay: Relay) -> None:
    info = await relay.new_session()
    junk = "Z" * 10_000
    async with relay.socket(info) as ws:
        await recv_json(ws)
        await ws.send(json.dumps({"type": junk}))
        error = await recv_json(ws)
    assert error["code"] == "unknown_message_type"
    assert len(error["message"]) < 200 and "chars)" in error["message"]
    log = Path(info["event_log_path"]).read_text()
    assert "unknown_message_type" in log and "Z" * 100 not in log


def test_event_log_cap_defaults_to_64_mib() -> None:
    assert RelayConfig().max_event_log_bytes == 64 * 1024 * 1024


@pytest.mark.asyncio
async def test_junk_cannot_make_the_session_log_grow_past_its_cap(tmp_path: Path) -> None:
    # Every junk message costs the log one clipped error record; 2,000 of them would write about
    # 400 KB without the cap (100 MB of small junk, about 2 GB), here capped at 32 KiB.
    cap = 32 * 1024
    count = 2000
    async with running_relay(tmp_path, max_event_log_bytes=cap) as relay:
        info = await relay.new_session()
        session = relay.app["server"].realtime_agent.sessions[info["session_id"]]
        log_path = Path(info["event_log_path"])
        frame = json.dumps({"type": "J" * 5000})
        async with relay.socket(info) as ws:
            await recv_json(ws)
            # In batches the outbox holds, so the relay does not drop this phone as a slow reader.
            for _ in range(count // 200):
                for _ in range(200):
                    await ws.send(frame)
                for _ in range(200):
                    assert (await recv_json(ws))["code"] == "unknown_message_type"
            # Still served: the junk cost log space, not the session.
            await ws.send(json.dumps({"type": "response.create", "text": "done?"}))
            await recv_until(ws, "voice.response.done")
            assert log_path.stat().st_size <= cap
            await ws.send(json.dumps({"type": "session.close"}))
            await closed_with(ws)
    assert session.event_log.dropped_records > count // 2
    assert log_path.stat().st_size <= cap
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert sum(1 for r in lines if r.get("log") == "voice.event_log.capped") == 1
    tally = lines[-1]
    assert tally["log"] == "voice.event_log.dropped" and tally["dropped_records"] == session.event_log.dropped_records


@pytest.mark.asyncio
async def test_one_device_holds_a_bounded_number_of_sessions(tmp_path: Path) -> None:
    # Each live session holds an open event log: one token asking again and again must not run the
    # relay out of file handles. Past the cap it is a 429; a closed session frees its place, and
    # another device is not affected.
    async with running_relay(tmp_path, max_sessions_per_device=3) as relay:
        held = [await relay.new_session() for _ in range(3)]
        agent = relay.app["server"].realtime_agent
        for _ in range(20):
            status, body = await relay.http("POST", "/voice/realtime-agent/session", body=b"{}")
            assert status == 429 and b"3 voice sessions" in body
        assert len(agent.sessions) == 3
        other = relay.app["server"].sessions.create_session("tablet", "device-2").token
        auth = f"Bearer {other}".encode()
        status, _ = await relay.http("POST", "/voice/realtime-agent/session", auth=auth, body=b"{}")
        assert status == 200
        await agent.close_session(agent.sessions[held[0]["session_id"]], reason="test")
        assert (await relay.new_session())["success"] is True


@pytest.mark.asyncio
@pytest.mark.parametrize("chat_session_id", ["my chat/1", "..", "../../etc", "a" * 201, "chat\n1", "tête"])
async def test_a_chat_session_id_the_journal_would_refuse_is_a_400(tmp_path: Path, chat_session_id: str) -> None:
    # The agent's runs are journaled under this id: one the journal refuses would leave them unrecorded.
    async with running_relay(tmp_path) as relay:
        body = json.dumps({"chat_session_id": chat_session_id}).encode()
        status, reply = await relay.http("POST", "/voice/realtime-agent/session", body=body)
        assert status == 400 and b"chat_session_id" in reply
        assert relay.app["server"].realtime_agent.sessions == {}
        ok = json.dumps({"chat_session_id": "chat-9.a_b"}).encode()
        assert (await relay.http("POST", "/voice/realtime-agent/session", body=ok))[0] == 200


async def _closed_while_trickling(port: int, within: float) -> bool:
    """Trickle a request head one header line at a time, never ending it; True once the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /voice/realtime-agent/config HTTP/1.1\r\nHost: relay\r\n")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    try:
        while loop.time() < deadline:
            try:
                writer.write(b"X-Slow: 1\r\n")
                await writer.drain()
            except ConnectionError:
                return True
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(reader.read(1024), 0.3) == b"":
                    return True
        return False
    finally:
        writer.close()


@pytest.mark.asyncio
async def test_a_client_trickling_its_request_head_is_closed_after_the_header_timeout(tmp_path: Path) -> None:
    async with running_relay(tmp_path, header_timeout=1.0) as relay:
        info = await relay.new_session()
        async with relay.socket(info) as ws:
            assert (await recv_json(ws))["type"] == "voice.session.ready"
            # Generously past the timeout: a slow client's socket is gone long before.
            assert await _closed_while_trickling(relay.port, within=20.0)
            # A websocket's handler runs for the whole session: the timeout never closes it, however quiet.
            await ws.send(json.dumps({"type": "response.create", "text": "still there?"}))
            assert (await recv_until(ws, "voice.response.delta"))["delta"] == "You said: still there?"


def test_the_header_timeout_must_be_a_positive_number_of_seconds(tmp_path: Path) -> None:
    for bad in (0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="header_timeout"):
            create_app(RelayConfig(realtime_voice_run_dir=str(tmp_path), header_timeout=bad))
