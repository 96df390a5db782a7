"""Voice relay load: N concurrent phone sessions on loopback, each asking the stub voice to run
agent tasks through a fast broker. Reports events per second and the latency from a provider
event being produced to the phone receiving it (p50 / p99)."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from relay_runtime.integrations.voice_relay import (
    AgentTaskRequest,
    ProviderEvent,
    ProviderEventKind,
    RelayConfig,
    create_app,
)
from relay_runtime.integrations.voice_relay.models import ProviderSessionConfig
from relay_runtime.integrations.voice_relay.providers.stub import StubConnection, StubProvider

_WIRE_KIND = {
    "voice.response.started": ProviderEventKind.RESPONSE_STARTED,
    "voice.response.delta": ProviderEventKind.OUTPUT_TEXT_DELTA,
    "voice.output_audio.delta": ProviderEventKind.AUDIO_DELTA,
    "voice.output_audio.done": ProviderEventKind.AUDIO_DONE,
    "voice.response.done": ProviderEventKind.RESPONSE_DONE,
}


class TimedStubConnection(StubConnection):
    """Stamps each provider event as it is produced, keyed so the client can find its stamp."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.stamps: dict[tuple[str, str, int], int] = {}
        self._counts: dict[tuple[str, str], int] = defaultdict(int)
        super().__init__(*args, **kwargs)

    def _put(self, event: ProviderEvent) -> None:
        if event.response_id and event.kind in _WIRE_KIND.values():
            key = (event.response_id, event.kind.value)
            self.stamps[(*key, self._counts[key])] = time.perf_counter_ns()
            self._counts[key] += 1
        super()._put(event)


class TimedStubProvider(StubProvider):
    async def connect(self, config: ProviderSessionConfig) -> TimedStubConnection:
        return TimedStubConnection(config, tone_ms=self.tone_ms, frame_ms=self.frame_ms)


class FastBroker:
    async def stream_task(self, request: AgentTaskRequest) -> Any:
        yield {"type": "hermes.run.started", "run_id": "fast", "session_id": request.session_id}
        yield {"type": "hermes.tool.started", "run_id": "fast", "tool_name": "lookup"}
        yield {"type": "hermes.tool.completed", "run_id": "fast", "tool_name": "lookup"}
        yield {"type": "voice.response.delta", "run_id": "fast", "delta": f"Result for {request.text}."}
        yield {"type": "hermes.run.completed", "run_id": "fast"}


@dataclass
class LoadResult:
    sessions: int
    tasks_per_session: int
    events: int
    seconds: float
    latencies_ns: list[int]
    event_ids: dict[str, list[int]] = field(default_factory=dict)
    tool_results: int = 0

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_ns)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


async def _phone(base: str, token: str, tasks: int, agent: Any, result: LoadResult) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(base, headers=headers) as http:
        async with http.post("/voice/realtime-agent/session", json={"chat_session_id": "load"}) as resp:
            resp.raise_for_status()
            info = await resp.json()
        ids: list[int] = []
        result.event_ids[info["session_id"]] = ids
        async with http.ws_connect(info["websocket_path"]) as ws:
            connection: TimedStubConnection | None = None
            counts: dict[tuple[str, str], int] = defaultdict(int)
            done_tasks = 0
            tool_seen = False
            spoken = False
            while done_tasks < tasks:
                msg = await ws.receive()
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    raise RuntimeError(f"socket ended early: {msg.type.name}")
                received = time.perf_counter_ns()
                event = json.loads(msg.data)
                ids.append(event["event_id"])
                kind = event["type"]
                if kind == "voice.session.ready":
                    connection = agent.sessions[info["session_id"]].connection
                    await ws.send_json({"type": "response.create", "text": "task: job 0"})
                    continue
                if kind in _WIRE_KIND and connection is not None and event.get("response_id"):
                    key = (event["response_id"], _WIRE_KIND[kind].value)
                    stamp = connection.stamps.get((*key, counts[key]))
                    counts[key] += 1
                    if stamp is not None:
                        result.latencies_ns.append(received - stamp)
                if kind == "voice.tool_call":
                    tool_seen = True
                elif kind == "voice.playback_drain.requested":
                    await ws.send_json({"type": "playback.drained"})
                elif kind == "voice.response.delta" and tool_seen:
                    spoken = True
                elif kind == "voice.response.done" and spoken:
                    done_tasks += 1
                    tool_seen = spoken = False
                    if done_tasks < tasks:
                        await ws.send_json({"type": "response.create", "text": f"task: job {done_tasks}"})
            result.events += len(ids)
            result.tool_results += len(connection.tool_results) if connection is not None else 0


async def run_load(sessions: int = 50, tasks_per_session: int = 2, *, timeout: float = 60.0) -> LoadResult:
    """Start a relay on a free loopback port and drive `sessions` phones against it concurrently."""
    provider = TimedStubProvider(tone_ms=60, frame_ms=20)
    with tempfile.TemporaryDirectory() as run_dir:
        app = create_app(
            RelayConfig(realtime_voice_run_dir=run_dir, realtime_voice_promote_after_ms=5000),
            task_broker=FastBroker(),
            providers={"stub": provider},
        )
        server = app["server"]
        agent = server.realtime_agent
        tokens = [server.sessions.create_session(f"phone-{i}", f"device-{i}").token for i in range(sessions)]
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        result = LoadResult(sessions, tasks_per_session, 0, 0.0, [])
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(_phone(base, t, tasks_per_session, agent, result) for t in tokens))
        finally:
            result.seconds = time.perf_counter() - started
            await runner.cleanup()
    return result


def main() -> None:
    runs = [asyncio.run(run_load(50, 4)) for _ in range(3)]
    for i, r in enumerate(runs, 1):
        print(
            f"run {i}: {r.sessions} sessions x {r.tasks_per_session} tool calls: {r.events} events in "
            f"{r.seconds:.2f}s = {r.events_per_second:,.0f} events/s; provider->phone latency "
            f"p50 {r.percentile_ms(0.5):.2f} ms, p99 {r.percentile_ms(0.99):.2f} ms ({len(r.latencies_ns)} samples)"
        )
    print(
        f"median of {len(runs)} runs: {statistics.median(r.events_per_second for r in runs):,.0f} events/s, "
        f"p50 {statistics.median(r.percentile_ms(0.5) for r in runs):.2f} ms, "
        f"p99 {statistics.median(r.percentile_ms(0.99) for r in runs):.2f} ms"
    )


if __name__ == "__main__":
    main()
