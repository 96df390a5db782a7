"""An MCP server for the MCP tests, run in its own process: ``python mcp_app.py stdio|http|sse PORT SPANS_FILE MODE``.

Every finished span of the process, ours and the SDK's own, is written as one JSON line to
SPANS_FILE, so a test in another process can check the server's side of the trace. MODE
``instrumented``: our OTel exporter on the session coordinator and ``instrument_mcp()`` (so the
default host records the server's requests); ``bare``: the SDK's own tracing only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventMessage, EventStore
from mcp_types import CallToolResult, TextContent
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class JsonLinesSpans(SpanExporter):
    def __init__(self, path: str) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self._path, "a", encoding="utf-8") as out:
            for span in spans:
                ctx = span.get_span_context()
                out.write(
                    json.dumps(
                        {
                            "name": span.name,
                            "kind": span.kind.name,
                            "trace_id": f"{ctx.trace_id:032x}",
                            "span_id": f"{ctx.span_id:016x}",
                            "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
                            "parent_is_remote": bool(span.parent and span.parent.is_remote),
                            "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
                            "status": span.status.status_code.name,
                            "status_description": span.status.description,
                            "events": [[e.name, dict(e.attributes or {})] for e in span.events],
                            "attributes": dict(span.attributes or {}),
                        }
                    )
                    + "\n"
                )
        return SpanExportResult.SUCCESS


def build_server() -> MCPServer:
    app = MCPServer("relay-test")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @app.tool()
    def echo_args(**kwargs: Any) -> str:
        return json.dumps(kwargs, sort_keys=True)

    @app.tool()
    def show_meta(ctx: Context) -> str:
        """The ``_meta`` this request arrived with."""
        return json.dumps(dict(ctx.request_context.meta or {}), sort_keys=True, default=str)

    @app.tool()
    async def ask(question: str) -> str:
        """Answers through an LLM: an instrumented AsyncOpenAI client on a scripted transport."""
        from relay_runtime import adapters
        from relay_runtime.adapters import testing

        script = testing.Script([testing.json_reply(testing.chat_completion_body(f"echo: {question}"))])
        llm = adapters.instrument(testing.async_openai_client(script))
        reply = await llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": question}])
        return str(reply.choices[0].message.content)

    @app.tool()
    def boom() -> str:
        raise ValueError("the tool broke")

    @app.tool()
    def soft_fail() -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="no such city")], is_error=True)

    @app.tool()
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @app.tool()
    def die() -> str:
        os._exit(3)

    @app.resource("file:///x")
    def x_file() -> str:
        return "contents of x"

    @app.prompt()
    def p(topic: str) -> str:
        return f"Write about {topic}"

    @app.tool()
    async def add_after_a_drop(a: int, b: int, ctx: Context) -> int:
        """Add two numbers, after dropping the answer's event stream: the client reconnects to get the answer."""
        await ctx.close_sse_stream()
        await asyncio.sleep(0.2)  # the answer is stored while the client is away, and replayed when it is back
        return a + b

    return app


class MemoryEvents(EventStore):
    """The events of every stream, kept so that a client that lost its stream gets what it missed
    (``add_after_a_drop``): the server's resumability, needed for the client to reconnect at all."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        stream = next((s for e, s, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        for event_id, stream_id, message in self.events[int(last_event_id) :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def main(argv: list[str]) -> None:
    from opentelemetry import trace

    transport, port, spans_file, mode = argv[0], int(argv[1]), argv[2], argv[3]
    # The SDK's own spans (if any are made) land in the same file as ours.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpans(spans_file)))
    trace.set_tracer_provider(provider)
    if mode == "instrumented":
        from relay_runtime import session
        from relay_runtime.integrations.mcp import instrument_mcp
        from relay_runtime.integrations.otel import OTelExporter

        # No turn on a server: its requests, and the LLM calls its tools make, go to the default host.
        OTelExporter(tracer_provider=provider).attach(session.SESSION_COORDINATOR)
        instrument_mcp()
    app = build_server()
    if transport == "stdio":
        app.run("stdio")
    elif transport == "sse":
        app.run("sse", host="127.0.0.1", port=port)
    else:
        app.run("streamable-http", host="127.0.0.1", port=port, event_store=MemoryEvents(), retry_interval=50)


if __name__ == "__main__":
    main(sys.argv[1:])
