"""Task brokers: the in-process broker runs each agent task inside a relay_runtime turn; the HTTP
broker streams a remote agent's events. Plus the voice session's own trace (conversation, response
scopes, tool-call marks)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestClient, TestServer

from relay_runtime import Recorder
from relay_runtime import conventions as cv
from relay_runtime import session as relay_session
from relay_runtime.integrations.voice_relay import AgentTaskRequest, RelayConfig, create_app
from relay_runtime.integrations.voice_relay.brokers import HttpTaskBroker, InProcessTaskBroker, RunContext
from relay_runtime.integrations.voice_relay.providers import StubProvider

PROFILE = "voice-test-profile"


@pytest.fixture
def recorder() -> Any:
    relay_session.reset_for_tests()
    rec = Recorder()
    relay_session.SESSION_COORDINATOR.host(PROFILE).relay.subscribers.register(rec, name="test-recorder")
    yield rec
    relay_session.reset_for_tests()


def request(text: str = "do it", session_id: str = "chat-1") -> AgentTaskRequest:
    return AgentTaskRequest(text=text, profile="default", session_id=session_id)


async def drain(stream: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    async with asyncio.timeout(5):
        return [event async for event in stream]


def turns(rec: Recorder, kind: str) -> list[Any]:
    return [e for e in rec if e.kind == kind and (e.metadata or {}).get(cv.KIND) == cv.TURN]


@pytest.mark.asyncio
async def test_inprocess_run_is_a_traced_turn(recorder: Recorder) -> None:
    async def agent(req: AgentTaskRequest, ctx: RunContext) -> str:
        assert relay_session.active_turn() is ctx.turn
        size = await ctx.tool("measure", {"text": req.text}, lambda args: len(args["text"]))
        ctx.say(f"measured {size}")
        return "ignored because the answer was streamed"

    broker = InProcessTaskBroker(agent, profile_key=PROFILE)
    events = await drain(broker.stream_task(request("hello")))
    assert [e["type"] for e in events] == [
        "hermes.session.bound", "hermes.run.started", "hermes.tool.started", "hermes.tool.completed",
        "voice.response.delta", "hermes.run.completed",
    ]
    assert events[4]["delta"] == "measured 5"
    run_id = events[1]["run_id"]
    conversation = next(e for e in recorder if e.kind == "scope_start" and e.metadata[cv.KIND] == cv.CONVERSATION)
    assert conversation.metadata[cv.SESSION_ID] == "chat-1" and conversation.metadata[cv.PLATFORM] == "voice"
    (turn_start,) = turns(recorder, "scope_start")
    (turn_end,) = turns(recorder, "scope_end")
    assert turn_start.parent_uuid == conversation.uuid
    assert turn_start.metadata[cv.TURN_ID] == run_id
    assert turn_end.output == {"outcome": "success"}
    tool_end = next(e for e in recorder if e.kind == "scope_end" and e.scope_type == "tool")
    assert tool_end.parent_uuid == turn_start.uuid and tool_end.output == 5
    # The lease was released with the run: the conversation ended too.
    assert any(e.kind == "scope_end" and e.uuid == conversation.uuid for e in recorder)


@pytest.mark.asyncio
async def test_inprocess_failure_and_cancellation_outcomes(recorder: Recorder) -> None:
    async def broken(req: AgentTaskRequest, ctx: RunContext) -> str:
        raise RuntimeError("model unavailable")

    events = await drain(InProcessTaskBroker(broken, profile_key=PROFILE).stream_task(request()))
    assert events[-1]["type"] == "voice.error" and "model unavailable" in events[-1]["message"]
    assert turns(recorder, "scope_end")[-1].output == {"outcome": "failed"}

    started = asyncio.Event()
    agent_cancelled = asyncio.Event()

    async def slow(req: AgentTaskRequest, ctx: RunContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            agent_cancelled.set()
            raise
        return "never"

    stream = InProcessTaskBroker(slow, profile_key=PROFILE).stream_task(request(session_id="chat-2"))

    async def consume() -> None:
        async for _ in stream:
            pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(agent_cancelled.wait(), 5)
    assert turns(recorder, "scope_end")[-1].output == {"outcome": "cancelled"}


@pytest.mark.asyncio
async def test_inprocess_confirmation_round_trip(recorder: Recorder) -> None:
    async def careful(req: AgentTaskRequest, ctx: RunContext) -> str:
        approved = await ctx.confirm("Delete the file?")
        return "deleted" if approved else "kept"

    broker = InProcessTaskBroker(careful, profile_key=PROFILE)
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(5):
        async for event in broker.stream_task(request()):
            seen.append(event)
            if event["type"] == "hermes.confirm.requested":
                assert await broker.confirm("not-an-id", True) is False
                assert await broker.confirm(event["confirm_id"], False) is True
    assert seen[-2]["delta"] == "kept"


@pytest_asyncio.fixture
async def agent_server() -> AsyncIterator[tuple[TestServer, dict[str, Any]]]:
    state: dict[str, Any] = {"bodies": [], "auth": [], "disconnected": asyncio.Event()}

    async def tasks(req: web.Request) -> web.StreamResponse:
        body = await req.json()
        state["bodies"].append(body)
        state["auth"].append(req.headers.get("Authorization"))
        if body["text"] == "fail":
            return web.Response(status=503)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(req)
        sse = body["text"] == "sse"

        async def line(event: Any) -> None:
            text = json.dumps(event)
            await resp.write((f"data: {text}\n\n" if sse else text + "\n").encode())

        await line({"type": "hermes.run.started", "run_id": "r1", "session_id": body["session_id"]})
        await resp.write(b"not json\n")
        await line(["not", "an", "event"])
        if body["text"] == "hang":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                state["disconnected"].set()
                raise
        await line({"type": "voice.response.delta", "run_id": "r1", "delta": "remote answer"})
        await line({"type": "hermes.run.completed", "run_id": "r1"})
        return resp

    app = web.Application()
    app.router.add_post("/tasks", tasks)
    async with TestServer(app, host="127.0.0.1") as server:
        yield server, state


@pytest.mark.asyncio
@pytest.mark.parametrize("text", ["ndjson", "sse"])
async def test_http_broker_streams_remote_events(agent_server: Any, text: str) -> None:
    server, state = agent_server
    broker = HttpTaskBroker(str(server.make_url("/tasks")))
    try:
        req = AgentTaskRequest(text=text, profile="p", session_id="s-1", bearer_token="agent-token",
                               interface_context={"surface": "voice"})
        events = await drain(broker.stream_task(req))
    finally:
        await broker.close()
    assert [e["type"] for e in events] == ["hermes.run.started", "voice.response.delta", "hermes.run.completed"]
    assert state["bodies"][0] == {"text": text, "profile": "p", "session_id": "s-1",
                                  "interface_context": {"surface": "voice"}}
    assert state["auth"] == ["Bearer agent-token"]


@pytest.mark.asyncio
async def test_http_broker_errors_and_cancellation(agent_server: Any) -> None:
    server, state = agent_server
    broker = HttpTaskBroker(str(server.make_url("/tasks")))
    try:
        events = await drain(broker.stream_task(request("fail")))
        assert events == [{"type": "voice.error", "message": "agent returned HTTP 503"}]
        stream = broker.stream_task(request("hang"))
        assert (await anext(stream))["type"] == "hermes.run.started"
        pending = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.05)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        await stream.aclose()
        await asyncio.wait_for(state["disconnected"].wait(), 5)
    finally:
        await broker.close()
    with pytest.raises(ValueError, match="http"):
        HttpTaskBroker("file:///etc/passwd")
    unreachable = HttpTaskBroker("http://127.0.0.1:9/tasks")
    try:
        events = await drain(unreachable.stream_task(request()))
    finally:
        await unreachable.close()
    assert events[0]["type"] == "voice.error" and "ClientConnectorError" in events[0]["message"]


@pytest.mark.asyncio
async def test_voice_session_traces_responses_tool_calls_and_turns(recorder: Recorder, tmp_path: Path) -> None:
    async def agent(req: AgentTaskRequest, ctx: RunContext) -> str:
        return "traced answer with 42 results"

    app = create_app(
        RelayConfig(realtime_voice_run_dir=str(tmp_path), realtime_voice_promote_after_ms=3000),
        task_broker=InProcessTaskBroker(agent, profile_key=PROFILE),
        providers={"stub": StubProvider(tone_ms=100)},
    )
    app["server"].realtime_agent.profile_key = PROFILE
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        token = app["server"].sessions.create_session("phone", "d").token
        headers = {"Authorization": f"Bearer {token}"}
        body = {"chat_session_id": "chat-traced"}
        info = await (await client.post("/voice/realtime-agent/session", json=body, headers=headers)).json()
        ws = await client.ws_connect(info["websocket_path"], headers=headers)
        spoke_after_tool = False
        async with asyncio.timeout(10):
            while not spoke_after_tool:
                msg = await ws.receive()
                assert msg.type is WSMsgType.TEXT
                event = json.loads(msg.data)
                if event["type"] == "voice.session.ready":
                    await ws.send_json({"type": "response.create", "text": "task: count things"})
                elif event["type"] == "voice.playback_drain.requested":
                    await ws.send_json({"type": "playback.drained"})
                elif event["type"] == "voice.response.delta" and "42 results" in event["delta"]:
                    spoke_after_tool = True
        await ws.send_json({"type": "session.close"})
        await ws.receive(timeout=5)
    conversations = [e for e in recorder if e.kind == "scope_start" and e.metadata[cv.KIND] == cv.CONVERSATION]
    assert len(conversations) == 1, "the voice session and its runs share one conversation"
    conv = conversations[0]
    assert conv.metadata[cv.SESSION_ID] == "chat-traced"
    (voice,) = [e for e in recorder if e.kind == "scope_start" and e.name == "voice.session"]
    assert voice.parent_uuid == conv.uuid and voice.metadata["voice_session_id"] == info["session_id"]
    user_turns = [e for e in recorder if e.kind == "scope_start" and e.name == "voice.turn"]
    assert user_turns and all(t.parent_uuid == voice.uuid for t in user_turns)
    # A user turn is a plain scope, not a coordinator turn: the agent run keeps the managed turn.
    assert all(t.metadata.get(cv.KIND) != cv.TURN for t in user_turns)
    responses = [e for e in recorder if e.kind == "scope_start" and e.name == "voice.response"]
    assert len(responses) >= 2 and all(r.parent_uuid == user_turns[0].uuid for r in responses)
    (mark,) = [e for e in recorder if e.kind == "mark" and e.name == "voice.tool_call"]
    assert mark.data["name"] == "hermes_run_task" and mark.parent_uuid == responses[0].uuid
    (turn,) = turns(recorder, "scope_start")
    assert turn.parent_uuid == conv.uuid
    assert turns(recorder, "scope_end")[0].output == {"outcome": "success"}
    # Closing the session released the lease: every scope that started has ended.
    started = {e.uuid for e in recorder if e.kind == "scope_start"}
    ended = {e.uuid for e in recorder if e.kind == "scope_end"}
    assert started == ended


@pytest.mark.asyncio
async def test_an_agent_failure_quoting_the_llm_key_never_reaches_the_phone_or_the_event_log(
    recorder: Recorder, tmp_path: Path
) -> None:
    # The agent's own LLM call fails with a 401 that quotes the client's key (a real SDK error):
    # the relay tells the phone the run failed, without the key.
    from relay_runtime import adapters, redaction
    from relay_runtime.adapters import testing as t

    scripted = t.scripted_openai(max_retries=0)
    scripted.add(t.error(401, f"Incorrect API key provided: {t.TEST_KEY}."))

    async def agent(req: AgentTaskRequest, ctx: RunContext) -> str:
        kwargs = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        return str(await adapters.acomplete(scripted.aclient, kwargs))

    app = create_app(
        RelayConfig(realtime_voice_run_dir=str(tmp_path), realtime_voice_promote_after_ms=3000),
        task_broker=InProcessTaskBroker(agent, profile_key=PROFILE),
        providers={"stub": StubProvider(tone_ms=20)},
    )
    received: list[str] = []
    try:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            token = app["server"].sessions.create_session("phone", "d").token
            headers = {"Authorization": f"Bearer {token}"}
            info = await (await client.post("/voice/realtime-agent/session", json={}, headers=headers)).json()
            ws = await client.ws_connect(info["websocket_path"], headers=headers)
            async with asyncio.timeout(10):
                while True:
                    msg = await ws.receive()
                    assert msg.type is WSMsgType.TEXT
                    received.append(msg.data)
                    event = json.loads(msg.data)
                    if event["type"] == "voice.session.ready":
                        await ws.send_json({"type": "response.create", "text": "task: look it up"})
                    elif event["type"] == "voice.playback_drain.requested":
                        await ws.send_json({"type": "playback.drained"})
                    elif event["type"] == "hermes.run.failed":
                        break
            await ws.send_json({"type": "session.close"})
            await ws.receive(timeout=5)
    finally:
        redaction.forget_secrets()
    failed = [json.loads(m) for m in received if '"hermes.run.failed"' in m]
    assert "AuthenticationError" in failed[0]["error"] and "[redacted]" in failed[0]["error"]
    assert t.TEST_KEY not in "\n".join(received)
    written = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert "hermes.run.failed" in written and t.TEST_KEY not in written
