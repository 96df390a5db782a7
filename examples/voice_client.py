"""A small voice-relay client: opens a session, asks the stub voice to hand a task to the agent,
and prints every event until the answer has been spoken, and the latency of each user turn.

    python examples/voice_client.py                         # starts a relay in-process
    python examples/voice_client.py --url http://127.0.0.1:8765 --token <device token>
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import aiohttp
from aiohttp import web

from relay_runtime.integrations.voice_relay import RelayConfig, create_app


async def run_client(base_url: str, token: str, task: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(base_url, headers=headers) as http:
        async with http.post("/voice/realtime-agent/session", json={"chat_session_id": "example-chat"}) as resp:
            if resp.status != 200:
                print(f"session request failed: HTTP {resp.status}", file=sys.stderr)
                return 1
            session = await resp.json()
        print(f"session {session['session_id']} on provider {session['provider']}")
        async with http.ws_connect(session["websocket_path"]) as ws:
            spoken_after_tool = False
            saw_tool = False
            answered = False
            for _ in range(500):
                try:
                    # Once answered, wait only briefly for the turn's latency (a relay may not send it).
                    msg = await ws.receive(timeout=2 if answered else 10)
                except TimeoutError:
                    if answered:
                        await ws.send_json({"type": "session.close"})
                        return 0
                    raise
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    print(f"socket ended: {msg.type.name}")
                    return 1
                event: dict[str, Any] = json.loads(msg.data)
                shown = {k: v for k, v in event.items() if k != "audio"}
                if "audio" in event:
                    shown["audio"] = f"<{len(event['audio'])} base64 chars>"
                print(json.dumps(shown))
                kind = event["type"]
                if kind == "voice.turn.metrics":
                    # Sent when the relay runs with realtime_voice_turn_metrics (voice serve does).
                    timings = "  ".join(
                        f"{k[:-3]}={v} ms" for k, v in event.items() if k.endswith("_ms") and k != "at_ms"
                    )
                    print(f"turn {event.get('turn')} ({event.get('trigger')}): {timings}")
                    if answered:
                        await ws.send_json({"type": "session.close"})
                        return 0
                if kind == "voice.session.ready":
                    await ws.send_json({"type": "response.create", "text": f"task: {task}"})
                elif kind == "voice.tool_call":
                    saw_tool = True
                elif kind == "voice.playback_drain.requested":
                    await ws.send_json({"type": "playback.drained"})
                elif kind == "voice.response.delta" and saw_tool:
                    spoken_after_tool = True
                elif kind == "voice.response.done" and spoken_after_tool:
                    answered = True
    return 1


async def with_local_relay(task: str) -> int:
    app = create_app(RelayConfig(realtime_voice_promote_after_ms=3000, realtime_voice_turn_metrics=True))
    token = app["server"].sessions.create_session("example", "example-device").token
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        return await run_client(f"http://127.0.0.1:{port}", token, task)
    finally:
        await runner.cleanup()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running relay, e.g. http://127.0.0.1:8765")
    parser.add_argument("--token", help="device token printed by `relay-runtime voice serve`")
    parser.add_argument("--task", default="summarise the weather report")
    args = parser.parse_args(argv)
    if bool(args.url) != bool(args.token):
        parser.error("--url and --token go together (or give neither to start a relay here)")
    if args.url and args.token:
        return asyncio.run(run_client(args.url, args.token, args.task))
    return asyncio.run(with_local_relay(args.task))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
