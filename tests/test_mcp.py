"""MCP traced end to end: a real MCPServer in another process, a real client, both SDK protocols.

The server (tests/mcp_app.py) writes every span it finishes, ours and the SDK's own, to a
JSON-lines file; the client side exports into an in-memory OTel pipeline. Both sides of one
request must be one trace with the client's span as the server span's parent, and each side
must have exactly one span per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.shared._otel as sdk_otel
import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import Pipeline

from relay_runtime import GuardrailRejected, session
from relay_runtime import conventions as cv
from relay_runtime.integrations.mcp import instrument_mcp, is_instrumented, uninstrument_mcp
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.recorder import Recorder

APP = Path(__file__).with_name("mcp_app.py")
OUR_SCOPE = "relay_runtime.otel"
SDK_SCOPE = "mcp-python-sdk"


class ServerSpans:
    """The server process's spans, read from its JSON-lines file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def wait_for(self, name: str, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [s for s in self.all() if s["name"] == name]
            if found:
                assert len(found) == 1, found
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"the server finished no span {name!r}; it has {[s['name'] for s in self.all()]}")


class ClientSide:
    def __init__(
        self, turn: session.Turn, pipeline: Pipeline, events: Recorder, sdk_spans: InMemorySpanExporter
    ) -> None:
        self.turn = turn
        self.relay = turn.relay
        self.pipeline = pipeline
        self.events = events
        self.sdk_spans = sdk_spans

    def span(self, name: str) -> ReadableSpan:
        return self.pipeline.one(name)

    def tool_ends(self, tool: str) -> list[Any]:
        return [e for e in self.events.ends() if e.scope_type == "tool" and e.name == tool]


@pytest.fixture
def sdk_spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The SDK's own client spans, caught by a real tracer in place of its global one."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(sdk_otel, "_tracer", provider.get_tracer(SDK_SCOPE))
    return exporter


@pytest.fixture
def instrumented() -> Iterator[None]:
    instrument_mcp()
    try:
        yield
    finally:
        uninstrument_mcp()


@pytest.fixture
def client_side(relay_host: session.Host, sdk_spans: InMemorySpanExporter, instrumented: None) -> Iterator[ClientSide]:
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(relay_host)
    events = Recorder()
    relay_host.relay.subscribers.register(events, name="test.events")
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="s-mcp", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="k-1")
    try:
        yield ClientSide(turn, pipeline, events, sdk_spans)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        relay_host.relay.subscribers.deregister("test.events")
        exporter.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stdio(spans: Path, mode: str = "instrumented") -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(APP), "stdio", "0", str(spans), mode], env=dict(os.environ)
    )


def _serve(transport: str, tmp_path: Path) -> Iterator[tuple[str, ServerSpans]]:
    port = _free_port()
    spans = tmp_path / "server-spans.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(APP), transport, str(port), str(spans), "instrumented"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the MCP server process did not start listening") from None
                time.sleep(0.1)
        path = "/sse" if transport == "sse" else "/mcp"
        yield f"http://127.0.0.1:{port}{path}", ServerSpans(spans)
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, ServerSpans]]:
    yield from _serve("http", tmp_path)


@pytest.fixture
def sse_server(tmp_path: Path) -> Iterator[tuple[str, ServerSpans]]:
    yield from _serve("sse", tmp_path)


@asynccontextmanager
async def _connect(server: Any, mode: str) -> AsyncIterator[Client]:
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        yield client


def _check_one_trace(client: ClientSide, server: ServerSpans, name: str) -> tuple[ReadableSpan, dict[str, Any]]:
    ours = client.span(name)
    theirs = server.wait_for(name)
    assert ours.kind.name == "CLIENT" and theirs["kind"] == "SERVER"
    assert theirs["trace_id"] == f"{ours.context.trace_id:032x}"
    assert theirs["parent_span_id"] == f"{ours.context.span_id:016x}" and theirs["parent_is_remote"]
    assert theirs["scope"] == OUR_SCOPE
    return ours, theirs


def _one_span_per_side(client: ClientSide, server: ServerSpans) -> None:
    assert client.sdk_spans.get_finished_spans() == ()
    assert {s["scope"] for s in server.all()} == {OUR_SCOPE}
    # Each request the server saw is one client span of ours, and no more.
    served = sorted(s["name"] for s in server.all())
    sent = sorted(s.name for s in client.pipeline.finished() if s.kind.name == "CLIENT" and s.name in served)
    assert sent == served


# -- one trace across processes, one span per side --------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_stdio_tool_call_is_one_trace_with_one_span_per_side(
    client_side: ClientSide, tmp_path: Path, mode: str
) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> Any:
        async with _connect(_stdio(spans.path), mode) as client:
            return await client.call_tool("add", {"a": 2, "b": 3})

    result = asyncio.run(run())
    assert result.structured_content == {"result": 5}
    ours, theirs = _check_one_trace(client_side, spans, "tools/call add")
    attributes = dict(ours.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "add"
    assert attributes["network.transport"] == "pipe"
    assert attributes["jsonrpc.request.id"] == theirs["attributes"]["jsonrpc.request.id"]
    assert attributes["mcp.protocol.version"] == theirs["attributes"]["mcp.protocol.version"]
    expected_version = "2025-11-25" if mode == "legacy" else "2026-07-28"
    assert attributes["mcp.protocol.version"] == expected_version
    assert "error.type" not in attributes and theirs["status"] != "ERROR"
    assert "gen_ai.tool.call.arguments" not in attributes and "gen_ai.tool.call.result" not in attributes  # capture off
    # The tool scope sits in the turn.
    (start,) = [e for e in client_side.events.starts() if e.name == "add"]
    assert client_side.turn.scope is not None and start.parent_uuid == client_side.turn.scope.uuid
    _one_span_per_side(client_side, spans)
    assert len(client_side.tool_ends("add")) == 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_streamable_http_tool_call_is_one_trace_with_server_address(
    client_side: ClientSide, http_server: tuple[str, ServerSpans], mode: str
) -> None:
    url, spans = http_server

    async def run() -> Any:
        async with _connect(url, mode) as client:
            await client.read_resource("file:///x")
            await client.get_prompt("p", {"topic": "tides"})
            return await client.call_tool("add", {"a": 1, "b": 1})

    assert asyncio.run(run()).structured_content == {"result": 2}
    ours, theirs = _check_one_trace(client_side, spans, "tools/call add")
    attributes = dict(ours.attributes or {})
    assert attributes["network.transport"] == "tcp"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == int(url.rsplit(":", 1)[1].split("/")[0])
    assert theirs["attributes"]["network.transport"] == "tcp"
    if mode == "legacy":
        # The handshake protocol over HTTP has sessions: both sides name the same one.
        assert theirs["attributes"]["mcp.session.id"] == attributes["mcp.session.id"]
    else:
        assert "mcp.session.id" not in attributes and "mcp.session.id" not in theirs["attributes"]
    resource, _ = _check_one_trace(client_side, spans, "resources/read file:///x")
    assert dict(resource.attributes or {})["mcp.resource.uri"] == "file:///x"
    prompt, _ = _check_one_trace(client_side, spans, "prompts/get p")
    assert dict(prompt.attributes or {})["gen_ai.prompt.name"] == "p"
    _one_span_per_side(client_side, spans)


def test_a_call_whose_stream_drops_is_one_span_that_reconnects_under_the_same_session(
    client_side: ClientSide, http_server: tuple[str, ServerSpans], caplog: pytest.LogCaptureFixture
) -> None:
    """The server drops the answer's event stream mid-call (``add_after_a_drop``); the SDK's client reconnects
    with the last event id and gets the answer replayed. One span per side for the call, under the session id
    the session had before the drop (the handshake protocol's sessions: the 2026 protocol has none)."""
    url, spans = http_server

    async def run() -> Any:
        async with _connect(url, "legacy") as client:
            await client.call_tool("add", {"a": 1, "b": 1})
            return await client.call_tool("add_after_a_drop", {"a": 2, "b": 3})

    with caplog.at_level(logging.INFO, logger="mcp.client.streamable_http"):
        assert asyncio.run(run()).structured_content == {"result": 5}
    assert any("Reconnected" in r.getMessage() for r in caplog.records)  # the drop happened, and the reconnect
    before, _ = _check_one_trace(client_side, spans, "tools/call add")
    ours, theirs = _check_one_trace(client_side, spans, "tools/call add_after_a_drop")
    assert ours.status.status_code.name == "UNSET" and theirs["status"] == "UNSET"
    session_id = dict(before.attributes or {})["mcp.session.id"]
    assert dict(ours.attributes or {})["mcp.session.id"] == session_id == theirs["attributes"]["mcp.session.id"]
    assert [e.outcome for e in client_side.tool_ends("add_after_a_drop")] == ["success"]
    _one_span_per_side(client_side, spans)


def test_sse_tool_call_is_one_trace(client_side: ClientSide, sse_server: tuple[str, ServerSpans]) -> None:
    from mcp.client.sse import sse_client

    url, spans = sse_server

    async def run() -> Any:
        async with Client(sse_client(url), mode="legacy") as client:
            return await client.call_tool("add", {"a": 4, "b": 4})

    assert asyncio.run(run()).structured_content == {"result": 8}
    ours, theirs = _check_one_trace(client_side, spans, "tools/call add")
    attributes = dict(ours.attributes or {})
    assert attributes["mcp.protocol.version"] == theirs["attributes"]["mcp.protocol.version"]
    # A transport the caller built says where it goes, as a URL given to the Client would.
    assert attributes["network.transport"] == theirs["attributes"]["network.transport"] == "tcp"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == int(url.rsplit(":", 1)[1].split("/")[0])
    _one_span_per_side(client_side, spans)


def test_a_tool_handlers_own_llm_call_nests_under_its_server_span(client_side: ClientSide, tmp_path: Path) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> Any:
        async with _connect(_stdio(spans.path), "auto") as client:
            return await client.call_tool("ask", {"question": "tides?"})

    assert asyncio.run(run()).content[0].text == "echo: tides?"
    _, served = _check_one_trace(client_side, spans, "tools/call ask")
    chat = spans.wait_for("chat gpt-4o-mini")
    logical = spans.wait_for("logical_llm_call")
    assert chat["trace_id"] == logical["trace_id"] == served["trace_id"]
    assert logical["parent_span_id"] == served["span_id"] and chat["parent_span_id"] == logical["span_id"]
    assert chat["kind"] == "CLIENT" and chat["attributes"]["gen_ai.provider.name"] == "openai"


def test_callers_meta_keys_survive_and_our_trace_context_wins(client_side: ClientSide, tmp_path: Path) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")
    stale = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"

    async def run() -> Any:
        async with _connect(_stdio(spans.path), "auto") as client:
            return await client.call_tool("show_meta", {}, meta={"x-caller": "kept", "traceparent": stale})

    result = asyncio.run(run())
    seen = json.loads(result.content[0].text)
    assert seen["x-caller"] == "kept"
    ours = client_side.span("tools/call show_meta")
    flags = int(ours.context.trace_flags)
    assert seen["traceparent"] == f"00-{ours.context.trace_id:032x}-{ours.context.span_id:016x}-{flags:02x}"
    _check_one_trace(client_side, spans, "tools/call show_meta")


# -- guardrails and intercepts -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_tool_request_intercept_rewrites_arguments_and_another_refuses_a_tool(
    client_side: ClientSide, tmp_path: Path, mode: str
) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")
    intercepts = client_side.relay.intercepts

    def double_a(tool: str, args: Any) -> Any:
        return {**args, "a": args["a"] * 10} if tool == "add" else args

    def no_echo(tool: str, args: Any) -> Any:
        if tool == "echo_args":
            raise GuardrailRejected("no-echo", "echo_args is not allowed here")
        return args

    intercepts.register_tool_request("double-a", 10, False, double_a)
    intercepts.register_tool_request("no-echo", 20, False, no_echo)

    async def run() -> tuple[Any, Any]:
        async with _connect(_stdio(spans.path), mode) as client:
            added = await client.call_tool("add", {"a": 2, "b": 3})
            refused = await client.call_tool("echo_args", {"x": 1})
            return added, refused

    try:
        added, refused = asyncio.run(run())
    finally:
        intercepts.deregister_tool_request("double-a")
        intercepts.deregister_tool_request("no-echo")
    assert added.structured_content == {"result": 23}
    assert refused.is_error is True
    assert "echo_args is not allowed here" in refused.content[0].text
    # Never sent: the server has no span for it; ours ended failed with the guardrail's error, once.
    spans.wait_for("tools/call add")
    assert all(s["name"] != "tools/call echo_args" for s in spans.all())
    (end,) = client_side.tool_ends("echo_args")
    assert end.outcome == "failed" and end.error_type == "GuardrailRejected"
    span = client_side.span("tools/call echo_args")
    assert dict(span.attributes or {})["error.type"] == "GuardrailRejected"


def test_a_tool_call_with_no_intercepts_starts_the_scope_the_relays_tools_open(
    client_side: ClientSide, tmp_path: Path
) -> None:
    # With no intercept anywhere, the client opens the tool's scope itself (``Scopes.opened``): the start event must
    # be the one ``relay.tools.open_unintercepted`` makes of the same call.
    spans = ServerSpans(tmp_path / "spans.jsonl")
    arguments = {"a": 1, "b": 2, "api_key": "sk-secret-0123456789abcdef"}

    async def run() -> Any:
        async with _connect(_stdio(spans.path), "auto") as client:
            return await client.call_tool("add", arguments)

    asyncio.run(run())
    relay = client_side.relay
    (ours,) = [e for e in client_side.events.starts() if e.scope_type == "tool" and e.name == "add"]
    handle = relay.tools.open_unintercepted("add", arguments, {cv.SPAN_HINTS: ours.metadata[cv.SPAN_HINTS]})
    assert handle is not None
    relay.scope.pop(handle)
    theirs = client_side.events.starts()[-1]
    assert (theirs.name, theirs.scope_type, theirs.parent_uuid) == (ours.name, ours.scope_type, ours.parent_uuid)
    assert list(ours.metadata.items()) == list(theirs.metadata.items())
    assert ours.input == theirs.input and "sk-secret" not in repr(ours.input)


def test_a_tool_scopes_start_event_keeps_the_hints_it_started_with(client_side: ClientSide, tmp_path: Path) -> None:
    # Through the intercepts (a tool request intercept is registered), the tool's end sets its hints on the scope:
    # the start event, which a buffered consumer (ATOF's writer) reads later, still says what its start said.
    spans = ServerSpans(tmp_path / "spans.jsonl")
    intercepts = client_side.relay.intercepts
    intercepts.register_tool_request("as-is", 10, False, lambda tool, args: args)

    async def run() -> Any:
        async with _connect(_stdio(spans.path), "auto") as client:
            return await client.call_tool("soft_fail", {})

    try:
        assert asyncio.run(run()).is_error
    finally:
        intercepts.deregister_tool_request("as-is")
    (start,) = [e for e in client_side.events.starts() if e.scope_type == "tool" and e.name == "soft_fail"]
    (end,) = client_side.tool_ends("soft_fail")
    assert "error.type" not in start.metadata[cv.SPAN_HINTS]["attributes"]
    assert end.metadata[cv.SPAN_HINTS]["attributes"]["error.type"] == "tool_error"
    assert dict(client_side.span("tools/call soft_fail").attributes or {})["error.type"] == "tool_error"


# -- failures ------------------------------------------------------------------------------------------------


def test_a_tool_error_and_a_tool_that_raises_fail_on_both_sides(client_side: ClientSide, tmp_path: Path) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> tuple[Any, Any]:
        async with _connect(_stdio(spans.path), "auto") as client:
            return await client.call_tool("soft_fail", {}), await client.call_tool("boom", {})

    soft, boom = asyncio.run(run())
    assert soft.is_error and boom.is_error
    for name in ("tools/call soft_fail", "tools/call boom"):
        ours, theirs = _check_one_trace(client_side, spans, name)
        assert dict(ours.attributes or {})["error.type"] == "tool_error"
        assert ours.status.status_code.name == "ERROR"
        assert theirs["attributes"]["error.type"] == "tool_error" and theirs["status"] == "ERROR"
    (end,) = client_side.tool_ends("soft_fail")
    assert end.outcome == "failed" and end.error_type == "tool_error" and "no such city" in (end.error_message or "")


def test_a_cancelled_call_ends_cancelled_exactly_once(client_side: ClientSide, tmp_path: Path) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> None:
        async with _connect(_stdio(spans.path), "auto") as client:
            task = asyncio.ensure_future(client.call_tool("slow", {"seconds": 30}))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The connection still works after the cancelled call.
            assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}

    asyncio.run(run())
    (end,) = client_side.tool_ends("slow")
    assert end.outcome == "cancelled"
    assert dict(client_side.span("tools/call slow").attributes or {})["relay.outcome"] == "cancelled"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_the_client_cancels_ends_cancelled_on_the_server_not_failed(
    client_side: ClientSide, tmp_path: Path, mode: str
) -> None:
    """The client's ``notifications/cancelled`` stops the handler: the server's span says so, as the client's
    does, and is no error (no ``error.type``, no ERROR status, no error series in the server's metric)."""
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> None:
        async with _connect(_stdio(spans.path), mode) as client:
            task = asyncio.ensure_future(client.call_tool("slow", {"seconds": 30}))
            await asyncio.sleep(1.0)  # long enough for the server to be inside the handler
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.call_tool("add", {"a": 1, "b": 2})  # the cancelled handler has ended by now

    asyncio.run(run())
    served = spans.wait_for("tools/call slow")
    assert served["attributes"]["relay.outcome"] == "cancelled"
    assert "error.type" not in served["attributes"] and served["status"] != "ERROR"
    assert served["events"] == []
    ours = client_side.span("tools/call slow")
    assert "error.type" not in dict(ours.attributes or {}) and ours.status.status_code.name != "ERROR"


def test_a_server_that_dies_mid_call_fails_the_scope_once(client_side: ClientSide, tmp_path: Path) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> None:
        async with _connect(_stdio(spans.path), "auto") as client:
            with pytest.raises(MCPError):
                await client.call_tool("die", {})

    asyncio.run(run())
    (end,) = client_side.tool_ends("die")
    assert end.outcome == "failed" and end.error_type == "MCPError"
    attributes = dict(client_side.span("tools/call die").attributes or {})
    assert attributes["error.type"] == attributes["rpc.response.status_code"] == "-32000"


# -- the SDK's own tracing, left as it was when we are off -----------------------------------------------------


def test_uninstrument_gives_the_sdk_its_own_spans_back(
    relay_host: session.Host, sdk_spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")
    instrument_mcp()
    instrument_mcp()  # idempotent
    assert is_instrumented()
    uninstrument_mcp()
    assert not is_instrumented()

    async def run() -> Any:
        async with _connect(_stdio(spans.path, "bare"), "auto") as client:
            return await client.call_tool("add", {"a": 1, "b": 1})

    assert asyncio.run(run()).structured_content == {"result": 2}
    names = [s.name for s in sdk_spans.get_finished_spans()]
    assert "MCP send tools/call add" in names
    server_side = ServerSpans(spans.path).wait_for("tools/call add")
    assert server_side["scope"] == SDK_SCOPE


# -- metrics ----------------------------------------------------------------------------------------------------


def test_operation_and_session_durations_are_recorded_with_low_cardinality_attributes(
    client_side: ClientSide, tmp_path: Path
) -> None:
    from mcp.server.mcpserver import MCPServer

    spans = ServerSpans(tmp_path / "spans.jsonl")
    in_process = MCPServer("in-process")

    @in_process.tool()
    def shout(text: str) -> str:
        return text.upper()

    async def run() -> None:
        async with _connect(_stdio(spans.path), "auto") as client:
            await client.call_tool("add", {"a": 1, "b": 2})
            await client.call_tool("soft_fail", {})
        async with Client(in_process) as client:  # both sides in this process: the server's metric too
            await client.call_tool("shout", {"text": "hi"})
        async with Client(in_process, mode="legacy") as client:  # a handshake-era session, on both sides
            await client.call_tool("shout", {"text": "again"})

    asyncio.run(run())
    pipeline = client_side.pipeline
    operations = pipeline.histogram("mcp.client.operation.duration")
    by_tool = {p.attributes.get("gen_ai.tool.name"): p for p in operations if p.attributes.get("gen_ai.tool.name")}
    assert set(by_tool) == {"add", "soft_fail", "shout"}
    assert dict(by_tool["add"].attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "mcp.protocol.version": "2026-07-28",
        "network.transport": "pipe",
    }
    assert "jsonrpc.request.id" not in by_tool["add"].attributes  # ids never become metric series
    assert by_tool["soft_fail"].attributes["error.type"] == "tool_error"
    assert pipeline.unit("mcp.client.operation.duration") == "s"
    served = [
        p
        for p in pipeline.histogram("mcp.server.operation.duration")
        if p.attributes.get("gen_ai.tool.name") == "shout"
    ]
    assert sum(p.count for p in served) == 2
    sessions = pipeline.histogram("mcp.client.session.duration")
    assert sum(p.count for p in sessions) == 3
    assert {p.attributes.get("network.transport") for p in sessions} == {"pipe", None}
    (server_session,) = pipeline.histogram("mcp.server.session.duration")
    assert server_session.count == 1 and server_session.attributes["mcp.protocol.version"] == "2025-11-25"


def test_a_session_the_caller_cancels_is_measured_without_an_error(client_side: ClientSide) -> None:
    """Cancelling the task that holds a session open ends it on purpose: its duration is measured with no
    ``error.type``, as the cancelled call inside it is; a session that fails still gets one."""
    from mcp.server.mcpserver import MCPServer

    in_process = MCPServer("in-process")

    @in_process.tool()
    async def wait() -> str:
        await asyncio.sleep(30)
        return "done"

    async def hold(fail: bool) -> None:
        async with Client(in_process, mode="legacy") as client:
            if fail:
                raise LookupError("the caller's own code failed")
            await client.call_tool("wait", {})

    async def run() -> None:
        task = asyncio.ensure_future(hold(fail=False))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(ExceptionGroup) as caught:  # the in-process connection's task group wraps it
            await hold(fail=True)
        assert caught.group_contains(LookupError)

    asyncio.run(run())
    sessions = client_side.pipeline.histogram("mcp.client.session.duration")
    assert sum(p.count for p in sessions) == 2
    assert sorted(str(p.attributes.get("error.type")) for p in sessions) == ["LookupError", "None"]
    operation = [
        p
        for p in client_side.pipeline.histogram("mcp.client.operation.duration")
        if p.attributes.get("gen_ai.tool.name") == "wait"
    ]
    assert [p.attributes.get("error.type") for p in operation] == [None]


def test_a_server_answering_junk_fails_the_scope_once_with_the_sdks_error(client_side: ClientSide) -> None:
    junk = StdioServerParameters(
        command=sys.executable, args=[str(APP.with_name("mcp_junk_server.py"))], env=dict(os.environ)
    )

    async def run() -> BaseException:
        async with _connect(junk, "legacy") as client:
            with pytest.raises(Exception) as caught:
                await client.call_tool("anything", {})
            return caught.value

    error = asyncio.run(run())
    (end,) = client_side.tool_ends("anything")
    assert end.outcome == "failed" and end.error_type == type(error).__name__ == "ValidationError"
    assert client_side.span("tools/call anything").status.status_code.name == "ERROR"


def test_a_tool_scope_a_framework_opened_gets_the_mcp_attributes_instead_of_a_second_scope(
    client_side: ClientSide, tmp_path: Path
) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> Any:
        async with _connect(_stdio(spans.path), "legacy") as client:

            async def call(args: Any) -> Any:
                return await client.call_tool("add", args)

            # What a framework integration does: its own managed tool call around the MCP call.
            return await client_side.relay.tools.execute_async("add", {"a": 5, "b": 6}, call, tool_call_id="call-1")

    assert asyncio.run(run()).structured_content == {"result": 11}
    (end,) = client_side.tool_ends("add")
    assert end.outcome == "success"
    (span,) = [s for s in client_side.pipeline.finished() if dict(s.attributes or {}).get("gen_ai.tool.name") == "add"]
    attributes = dict(span.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call" and attributes["gen_ai.tool.call.id"] == "call-1"
    assert attributes["jsonrpc.request.id"]
    # The server's span is the child of that one scope's span.
    served = spans.wait_for("tools/call add")
    assert served["parent_span_id"] == f"{span.context.span_id:016x}"


def test_notifications_are_client_spans_named_for_their_method(client_side: ClientSide, tmp_path: Path) -> None:
    spans = ServerSpans(tmp_path / "spans.jsonl")

    async def run() -> None:
        async with _connect(_stdio(spans.path), "legacy") as client:  # the handshake sends notifications/initialized
            await client.call_tool("add", {"a": 1, "b": 1})

    asyncio.run(run())
    sent = client_side.span("notifications/initialized")
    assert sent.kind.name == "CLIENT"
    assert dict(sent.attributes or {})["mcp.method.name"] == "notifications/initialized"
    assert "jsonrpc.request.id" not in dict(sent.attributes or {})


def test_a_redaction_policy_reaches_the_span_named_for_a_resource(client_side: ClientSide, tmp_path: Path) -> None:
    from relay_runtime.redaction import RedactionPolicy, Rule

    client_side.relay.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    uri = "file:///users/jane.doe@example.com/notes"

    async def run() -> None:
        async with _connect(_stdio(tmp_path / "spans.jsonl"), "legacy") as client:
            with pytest.raises(MCPError):
                await client.read_resource(uri)  # the server has no such resource: the span is there all the same

    asyncio.run(run())
    client_side.relay.redaction.use(None)
    span = client_side.span("resources/read file:///users/[REDACTED:email]/notes")
    assert dict(span.attributes or {})["mcp.resource.uri"] == "file:///users/[REDACTED:email]/notes"
    assert dict(span.attributes or {})["mcp.method.name"] == "resources/read"
    exported = repr([(s.name, dict(s.attributes or {})) for s in client_side.pipeline.finished()])
    assert "jane.doe@example.com" not in exported
    recorded = repr([(e.name, e.metadata, e.error_message) for e in client_side.events])
    assert "jane.doe@example.com" not in recorded


def test_with_content_capture_on_a_tool_calls_span_holds_its_arguments_and_result(
    relay_host: session.Host, sdk_spans: InMemorySpanExporter, instrumented: None, tmp_path: Path
) -> None:
    """Issue 27 item 3: "with content capture on, the tool's arguments and result" on the client's span (with it
    off, as in the stdio test, neither)."""
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider, capture_content=True).attach(relay_host)
    spans = ServerSpans(tmp_path / "spans.jsonl")
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="s-mcp", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="k-1")

    async def run() -> Any:
        async with _connect(_stdio(spans.path), "auto") as client:
            return await client.call_tool("add", {"a": 2, "b": 3})

    try:
        assert asyncio.run(run()).structured_content == {"result": 5}
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.shutdown()
    attributes = dict(pipeline.one("tools/call add").attributes or {})
    assert json.loads(attributes["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}
    assert "5" in attributes["gen_ai.tool.call.result"]
