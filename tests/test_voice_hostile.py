"""Hostile input against the real relay on loopback (aiohttp server, raw HTTP, the websockets
client): every entry answers junk with its documented 4xx, close code or voice.error, and the
session survives."""

from __future__ import annotations

import asyncio
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
        head = (f"{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n").encode()
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
        return websockets.connect(f"ws://127.0.0.1:{self.port}{info['websocket_path']}",
                                  additional_headers={"Authorization": f"Bearer {self.token}"}, max_size=None)


@pytest_asyncio.fixture
async def relay(tmp_path: Path) -> AsyncIterator[Relay]:
    app = create_app(RelayConfig(realtime_voice_run_dir=str(tmp_path), max_message_bytes=LIMIT),
                     providers={"stub": StubProvider(tone_ms=20, frame_ms=20)})
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    token = app["server"].sessions.create_session("phone", "device-1").token
    yield Relay(runner.addresses[0][1], token, app)
    await runner.cleanup()


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
ROUTES = [("GET", "/voice/realtime-agent/config"), ("PATCH", "/voice/realtime-agent/config"),
          ("POST", "/voice/realtime-agent/session"), ("GET", "/voice/realtime-agent/abcdefghijklmnop")]


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
        await ws.send(json.dumps({"type": "session.resume", "resume_token": info["resume_token"],
                                  "last_event_id": ready["event_id"]}))
        assert (await recv_json(ws))["type"] == "voice.session.resumed"
