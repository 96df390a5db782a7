"""`relay-runtime voice serve`: run the relay locally with the offline stub provider."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import signal
import sys

from aiohttp import web

from ..run_journal.serving import GuardedSite
from .config import RelayConfig
from .server import RelayServer, create_app
from .tracing import format_turn

# The one line `relay-runtime --help` shows for this command.
SUMMARY = "run the realtime voice relay (serve)"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(config: RelayConfig, *, agent_url: str | None, ready: asyncio.Event | None = None) -> None:
    app = create_app(config, agent_url=agent_url)
    server: RelayServer = app["server"]
    # A developer sees the latency of each user turn here, without a tracing backend.
    server.realtime_agent.turn_listeners.append(
        lambda session, measures: print(f"voice {session.session_id[:8]} {format_turn(measures)}", flush=True)
    )
    device = server.sessions.create_session("cli", "cli-device")
    runner = web.AppRunner(app)
    await runner.setup()
    # Connections capped per client address: one address cannot take every file descriptor and leave
    # none to accept the phones with (the journal server's guard, see run_journal/serving.py).
    site = GuardedSite(runner, config.host, config.port, max_connections_per_client=config.max_connections_per_client)
    await site.start()
    # The startup heap (aiohttp, the SDKs, telemetry) never becomes garbage: keep it out of the cyclic
    # collector, whose full passes over it otherwise stall every session's audio for tens of ms.
    gc.freeze()
    port = runner.addresses[0][1] if runner.addresses else config.port
    print(f"voice relay listening on http://{config.host}:{port}", flush=True)
    print(f"provider: {server.settings.provider}  model: {server.settings.model}", flush=True)
    print(f"device token: {device.token}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="relay-runtime voice",
        description="The realtime voice relay: devices talk to a realtime model and hand tasks to the agent.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve_help = "run the relay (stub provider, loopback) and print a device token"
    serve_parser = sub.add_parser("serve", help=serve_help, description=f"{serve_help[0].upper()}{serve_help[1:]}.")
    serve_parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve_parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    serve_parser.add_argument("--provider", default="stub", help="stub, openai_realtime or xai_realtime")
    serve_parser.add_argument("--agent-url", default=None, help="stream runs from a remote agent over HTTP")
    serve_parser.add_argument("--run-dir", default="", help="where session event logs go (default: a temp dir)")
    serve_parser.add_argument("--allow-remote", action="store_true", help="allow binding a non-loopback address")
    args = parser.parse_args(argv)
    if not _is_loopback(args.host) and not args.allow_remote:
        print(f"refusing to bind {args.host}: not a loopback address (pass --allow-remote)", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"invalid port {args.port}", file=sys.stderr)
        return 2
    config = RelayConfig(
        host=args.host,
        port=args.port,
        realtime_voice_provider=args.provider,
        realtime_voice_run_dir=args.run_dir,
        realtime_voice_turn_metrics=True,
    )
    try:
        asyncio.run(serve(config, agent_url=args.agent_url))
    except ValueError as exc:
        print(f"relay-runtime voice: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
