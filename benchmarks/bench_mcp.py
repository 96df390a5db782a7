"""What tracing adds to one MCP tool call: bare, the SDK's own OTel tracing, and ours, side by side.

A real ``MCPServer`` and ``Client`` in one process over the SDK's in-memory JSON-RPC transport
(``mode="legacy"``), so both the client's dispatcher span and the server's middleware span are
in play. The tool is async: a sync one runs on a worker thread, whose hand-off doubles the spread.
Three setups take turns in every round, so all see the same stretch of a noisy machine:

- ``bare``: no tracer provider behind the SDK's tracer (its spans are no-ops), not instrumented;
- ``sdk``: the SDK's own spans, on a real TracerProvider whose processor drops what it is given;
- ``ours``: ``instrument_mcp()`` inside a managed turn, our OTel exporter on the same kind of
  provider; the SDK makes no spans of its own.

Reported: median CPU microseconds per call of each (both sides run in this process), what each
adds to bare, and ours / sdk.
Target: ours adds <= 30 us per call and less than the SDK's own tracing.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

import mcp.shared._otel as sdk_otel
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from relay_runtime import session
from relay_runtime.integrations.mcp import instrument_mcp, uninstrument_mcp
from relay_runtime.integrations.otel import OTelExporter

ROUNDS = 7
CALLS = 300


class Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropping()))
    return provider


def _server() -> MCPServer:
    app = MCPServer("bench")

    @app.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    return app


async def _calls(client: Client, n: int) -> float:
    # CPU time of this process: client and server both run here, and other processes' load is not ours.
    start = time.process_time()
    for i in range(n):
        await client.call_tool("add", {"a": i, "b": 1})
    return (time.process_time() - start) / n * 1e6


async def _run() -> dict[str, list[float]]:
    no_op = trace.NoOpTracerProvider().get_tracer("mcp-python-sdk")
    sdk_tracer = _provider().get_tracer("mcp-python-sdk")
    original_tracer = sdk_otel._tracer
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    exporter = OTelExporter(tracer_provider=_provider()).attach(host)
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="bench-mcp", platform="bench")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    results: dict[str, list[float]] = {"bare": [], "sdk": [], "ours": []}
    try:
        async with Client(_server(), mode="legacy") as client:
            await _calls(client, 50)  # warm up every path once
            for _ in range(ROUNDS):
                for setup in ("bare", "sdk", "ours"):
                    sdk_otel._tracer = sdk_tracer if setup == "sdk" else no_op  # type: ignore[assignment]
                    if setup == "ours":
                        instrument_mcp()
                    try:
                        results[setup].append(await _calls(client, CALLS))
                    finally:
                        uninstrument_mcp()
    finally:
        sdk_otel._tracer = original_tracer
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.shutdown()
    return results


def main() -> None:
    results = asyncio.run(_run())
    med: dict[str, Any] = {k: statistics.median(v) for k, v in results.items()}
    print(f"MCP tool call, in-process JSON-RPC, {ROUNDS} rounds x {CALLS} calls, setups alternated, CPU time")
    for setup in ("bare", "sdk", "ours"):
        print(f"  {setup:5s} {med[setup]:8.1f} us/call")
    sdk_added = med["sdk"] - med["bare"]
    ours_added = med["ours"] - med["bare"]
    print(f"  added by the SDK's own tracing: {sdk_added:6.1f} us/call")
    print(f"  added by ours:                  {ours_added:6.1f} us/call (target <= 30)")
    if sdk_added > 0:
        print(f"  ours / sdk added: {ours_added / sdk_added:.2f}x (target < 1)")


if __name__ == "__main__":
    main()
