# ruff: noqa: F811 - the fixtures imported from the other MCP modules are parameters of the tests below
"""What an MCP request carries of its trace in ``params._meta``, and what the serving side records of it.

Both sides in this process (an ``MCPServer`` over the SDK's in-memory transports, each protocol): the
client's scopes and the server's land in one relay, its events and its OTel pipeline.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp.client.client import Client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer
from otel_support import Pipeline

from relay_runtime import Relay
from relay_runtime.integrations.mcp import instrument_mcp, uninstrument_mcp
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.trace_context import REMOTE_PARENT, REMOTE_TRACESTATE
from tests.test_mcp import ClientSide, client_side, instrumented, sdk_spans  # noqa: F401 - fixtures
from tests.test_mcp_hostile import pipeline, raw_memory_client  # noqa: F401 - a fixture

STALE = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"


def _meta_server() -> MCPServer:
    server = MCPServer("meta")

    @server.tool()
    def show_meta(ctx: Context) -> str:
        """The ``_meta`` this request arrived with."""
        return json.dumps(dict(ctx.request_context.meta or {}), sort_keys=True, default=str)

    return server


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_callers_tracestate_does_not_ride_with_our_traceparent(client_side: ClientSide, mode: str) -> None:
    """A tracestate belongs to the traceparent it came with (vendors keep their own ids and sampling
    in it): where ours replaces the caller's, the caller's tracestate must go too, or the server joins
    our span with another trace's vendor state and records it as ours."""
    meta = {"x-caller": "kept", "traceparent": STALE, "tracestate": "vendor=stale-state"}

    async def run() -> Any:
        async with Client(_meta_server(), mode=mode) as client:
            return await client.call_tool("show_meta", {}, meta=meta)

    seen = json.loads(asyncio.run(run()).content[0].text)
    (sent,) = [s for s in client_side.pipeline.by_name("tools/call show_meta") if s.kind.name == "CLIENT"]
    assert seen["x-caller"] == "kept" and seen["traceparent"].split("-")[1] == f"{sent.context.trace_id:032x}"
    assert "tracestate" not in seen
    (served,) = [e for e in client_side.events.starts(name="show_meta") if e.metadata.get(REMOTE_PARENT)]
    assert REMOTE_TRACESTATE not in served.metadata
    (span,) = [s for s in client_side.pipeline.by_name("tools/call show_meta") if s.kind.name == "SERVER"]
    assert span.parent is not None and span.parent.span_id == sent.context.span_id
    assert len(span.context.trace_state) == 0


def test_requests_of_a_trace_the_caller_does_not_sample_are_still_measured(pipeline: Pipeline) -> None:
    """A caller's sampler decides whether the server's span is kept (its traceparent's sampled flag),
    never whether the request happened: the operation metric counts every request, sampled or not."""
    unsampled = {"traceparent": "00-" + "3" * 32 + "-" + "4" * 16 + "-00"}
    sampled = {"traceparent": "00-" + "5" * 32 + "-" + "6" * 16 + "-01"}

    async def run() -> None:
        async with raw_memory_client(Server("sampled")) as client:
            for i, meta in enumerate([sampled, unsampled, unsampled]):
                assert hasattr(await client.request(10 + i, "ping", {"_meta": meta}), "result")

    asyncio.run(run())
    assert len(pipeline.by_name("ping")) == 1  # only the sampled request's span is kept
    points = [
        p for p in pipeline.histogram("mcp.server.operation.duration") if p.attributes["mcp.method.name"] == "ping"
    ]
    assert sum(p.count for p in points) == 3


def test_requests_of_a_turn_our_sampler_drops_are_still_measured_on_both_sides() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    relay = Relay()
    metrics = Pipeline()
    exporter = OTelExporter(TracerProvider(sampler=ALWAYS_OFF), metrics.meter_provider).attach(relay)
    instrument_mcp(relay=relay)
    server = MCPServer("sampled")

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    async def run() -> None:
        async with Client(server) as client:
            for _ in range(3):
                await client.call_tool("add", {"a": 1, "b": 2})

    try:
        asyncio.run(run())
    finally:
        uninstrument_mcp()
        exporter.shutdown()
    for metric in ("mcp.client.operation.duration", "mcp.server.operation.duration"):
        points = metrics.histogram(metric)
        assert sum(p.count for p in points if p.attributes.get("gen_ai.tool.name") == "add") == 3, metric
