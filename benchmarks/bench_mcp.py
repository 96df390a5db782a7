"""What tracing adds to one MCP tool call on each side: bare, the SDK's own OTel tracing, and ours.

A real ``MCPServer`` and ``Client`` in one process over the SDK's in-memory JSON-RPC transport
(``mode="legacy"``), so both the client's dispatcher span and the server's middleware span are
in play. The tool is async: a sync one runs on a worker thread, whose hand-off doubles the spread.
Every call carries a caller's ``traceparent`` in ``_meta`` (as a call made inside a traced
request would), so a server always has a remote parent to continue, whichever side is traced.

Setups, each with its own client opened while its tracing is on (so per-session work is done as
it would be), take short turns in a rotating order, so all see the same stretch of a noisy machine:

- ``bare``: no tracer provider behind the SDK's spans (they are no-ops), not instrumented;
- ``sdk client`` / ``sdk server`` / ``sdk both``: the SDK's own spans on that side, on a real
  TracerProvider whose processor drops what it is given; the other side's are no-ops;
- ``ours client`` / ``ours server`` / ``ours both``: our instrumentation of that side inside a
  managed turn, our OTel exporter on the same kind of provider; the SDK makes no spans.

Reported: median CPU microseconds per call of each (client and server both run in this process,
so a side's cost is what turning on that side alone adds to bare), and what each adds to bare as
the median of its same-round differences (a slow stretch of the machine cancels out), ours
beside the SDK's.
Target: per side, ours adds <= 30 us per call and less than the SDK's own tracing.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import mcp.server._otel as sdk_server_otel
import mcp.shared.jsonrpc_dispatcher as sdk_dispatcher
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from benchmarks import instructions
from relay_runtime import session
from relay_runtime.integrations.mcp import instrument, uninstrument_mcp
from relay_runtime.integrations.otel import OTelExporter

ROUNDS = 41
CALLS = 60
WARM = 100
SIDES = ("client", "server", "both")
SETUPS = ("bare", *(f"sdk {s}" for s in SIDES), *(f"ours {s}" for s in SIDES))
CALLER_META = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


class Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropping()))
    return provider


def _span_hook(tracer: trace.Tracer) -> Callable[..., Any]:
    """The SDK's ``otel_span`` on a tracer of our choosing, so each side's spans can be on or off alone."""

    @contextmanager
    def otel_span(name: str, **kwargs: Any) -> Iterator[Any]:
        with tracer.start_as_current_span(name, **kwargs) as span:
            yield span

    return otel_span


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
        await client.call_tool("add", {"a": i, "b": 1}, meta=dict(CALLER_META))  # type: ignore[arg-type]
    return (time.process_time() - start) / n * 1e6


class _Setup:
    """One setup's tracing, turned on only while its calls are timed, and its own client."""

    def __init__(self, name: str, hooks: dict[str, Callable[..., Any]]) -> None:
        self.name = name
        kind, _, side = name.partition(" ")
        self.ours = kind == "ours"
        self.client_side = side in ("client", "both")
        self.server_side = side in ("server", "both")
        self.client_span = hooks["sdk"] if kind == "sdk" and self.client_side else hooks["off"]
        self.server_span = hooks["sdk"] if kind == "sdk" and self.server_side else hooks["off"]
        self.client: Client | None = None

    def on(self) -> None:
        sdk_dispatcher.otel_span = self.client_span  # type: ignore[assignment]
        sdk_server_otel.otel_span = self.server_span  # type: ignore[assignment]
        if self.ours:
            instrument.install(None, client_side=self.client_side, server_side=self.server_side)

    def off(self) -> None:
        uninstrument_mcp()


def _hooks() -> dict[str, Callable[..., Any]]:
    return {
        "off": _span_hook(trace.NoOpTracerProvider().get_tracer("mcp-python-sdk")),
        "sdk": _span_hook(_provider().get_tracer("mcp-python-sdk")),
    }


@contextlib.contextmanager
def _managed_turn() -> Iterator[None]:
    """A managed turn with our OTel exporter attached (on a provider that drops its spans)."""
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    exporter = OTelExporter(tracer_provider=_provider()).attach(host)
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="bench-mcp", platform="bench")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    try:
        yield
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.shutdown()


async def _run() -> dict[str, list[float]]:
    hooks = _hooks()
    originals = (sdk_dispatcher.otel_span, sdk_server_otel.otel_span)
    results: dict[str, list[float]] = {s: [] for s in SETUPS}
    setups = [_Setup(name, hooks) for name in SETUPS]
    app = _server()
    turn = _managed_turn()
    turn.__enter__()
    try:
        async with contextlib.AsyncExitStack() as stack:
            for setup in setups:
                # Each setup's client is opened with its tracing on, so per-session work is done as it would be.
                setup.on()
                try:
                    setup.client = await stack.enter_async_context(Client(app, mode="legacy"))
                    await _calls(setup.client, WARM)
                finally:
                    setup.off()
            for round_ in range(ROUNDS):
                # Short turns in a rotating order: every setup sees the same stretch of a noisy machine.
                for i in range(len(setups)):
                    setup = setups[(i + round_) % len(setups)]
                    assert setup.client is not None
                    setup.on()
                    try:
                        results[setup.name].append(await _calls(setup.client, CALLS))
                    finally:
                        setup.off()
    finally:
        sdk_dispatcher.otel_span, sdk_server_otel.otel_span = originals  # type: ignore[assignment]
        turn.__exit__(None, None, None)
    return results


def added(results: dict[str, list[float]], setup: str) -> float:
    """What ``setup`` adds to bare: the median, over rounds, of its time less bare's in the same round."""
    return statistics.median(x - b for x, b in zip(results[setup], results["bare"], strict=True))


def main() -> None:
    results = asyncio.run(_run())
    med: dict[str, float] = {k: statistics.median(v) for k, v in results.items()}
    print(f"MCP tool call, in-process JSON-RPC, {ROUNDS} rounds x {CALLS} calls, setups alternated, CPU time")
    for setup in SETUPS:
        print(f"  {setup:12s} {med[setup]:8.1f} us/call")
    print("  added to bare (median of same-round differences), per side:")
    print("              SDK's own     ours   (target: ours <= 30 and < SDK's)")
    for side in SIDES:
        print(f"    {side:6s}   {added(results, f'sdk {side}'):8.1f} {added(results, f'ours {side}'):8.1f}  us/call")
    if instructions.available():
        print("MCP tool call, instructions (client and server in one process):")
        counted = instructions.report("benchmarks.bench_mcp", [s.replace(" ", "-") for s in SETUPS])
        print("  added to bare per side:      SDK's own       ours")
        for side in SIDES:
            sdk, ours = (counted[f"{kind}-{side}"] - counted["bare"] for kind in ("sdk", "ours"))
            print(f"    {side:6s}               {sdk:12,.0f} {ours:10,.0f}")


async def _count(name: str, n: int) -> None:
    setup = _Setup(name, _hooks())
    setup.on()
    async with Client(_server(), mode="legacy") as client:
        await _calls(client, WARM)
        instructions.settle()
        if n:  # with none, the run counted is the set-up alone
            await _calls(client, n)


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` tool calls of one setup (``ours-client``: ``ours client``)."""
    with _managed_turn():
        asyncio.run(_count(variant.replace("-", " "), n))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
