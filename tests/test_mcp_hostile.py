"""MCP against a careless or hostile client: what it makes up (names, headers, input that fails validation) must
not grow the metrics without bound nor become a false or leaked record."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client
from mcp.server.lowlevel import Server
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import JSONRPCNotification, JSONRPCRequest
from otel_support import Pipeline

from relay_runtime import session
from relay_runtime.integrations.mcp import conventions, instrument_mcp, uninstrument_mcp
from relay_runtime.integrations.otel import OTelExporter
from tests.test_mcp import APP, ServerSpans, _serve


@pytest.fixture
def pipeline(relay_host: session.Host) -> Iterator[Pipeline]:
    instrument_mcp()
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(relay_host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="s-mcp", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="k-1")
    try:
        yield pipeline
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.shutdown()
        uninstrument_mcp()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, ServerSpans]]:
    yield from _serve("http", tmp_path)


def test_made_up_tool_names_get_no_metric_series_past_the_cap(pipeline: Pipeline, monkeypatch) -> None:
    from mcp.server.mcpserver import MCPServer

    monkeypatch.setattr(conventions, "MAX_METRIC_NAMES", 5)
    monkeypatch.setattr(conventions, "_metric_names", set())
    server = MCPServer("hostile")

    @server.tool()
    def shout(text: str) -> str:
        return text.upper()

    names = ["shout"] + [f"no-such-tool-{i}" for i in range(30)]

    async def run() -> None:
        async with Client(server) as client:  # both sides in this process: both metrics here
            for name in names:
                await client.call_tool(name, {"text": "hi"})
            await client.call_tool("shout", {"text": "again"})  # a name seen before keeps its series

    asyncio.run(run())
    for metric in ("mcp.server.operation.duration", "mcp.client.operation.duration"):
        points = [p for p in pipeline.histogram(metric) if p.attributes.get("mcp.method.name") == "tools/call"]
        named = {p.attributes.get("gen_ai.tool.name") for p in points} - {None}
        assert named == {"shout", *names[1:5]}, metric  # the first five names only
        assert sum(p.count for p in points) == len(names) + 1  # every call still measured
        assert sum(p.count for p in points if p.attributes.get("gen_ai.tool.name") == "shout") == 2
    # Spans keep the name: they are one per call, not a series.
    assert len(pipeline.by_name("tools/call no-such-tool-29")) == 2  # the client's span and the server's


def test_a_made_up_name_with_control_characters_names_no_span_with_them(pipeline: Pipeline) -> None:
    """A name that ends a line or moves the cursor would forge log lines and rewrite terminals where a
    backend shows span names; NUL breaks some stores."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("hostile")

    @server.tool()
    def ok() -> str:
        return "ok"

    name = "ok\r\n[2026-01-01 ERROR] forged\x1b[2J\x00\u202egnp.exe"

    async def run() -> None:
        async with Client(server) as client:
            await client.call_tool(name, {})

    asyncio.run(run())
    calls = [s for s in pipeline.finished() if s.name.startswith("tools/call")]
    assert len(calls) == 2  # the client's span and the server's
    shown = "ok\ufffd\ufffd[2026-01-01 ERROR] forged\ufffd[2J\ufffd\ufffdgnp.exe"
    for span in calls:
        assert span.name == f"tools/call {shown}"
        assert span.attributes["gen_ai.tool.name"] == shown


# -- a client speaking raw JSON-RPC / HTTP to a real server in another process -------------------------


class RawStdioClient:
    """A client that writes whatever JSON-RPC it likes to ``mcp_app.py`` over stdio: nothing of the SDK
    or of ours on its side, so what the server records is the server's doing alone."""

    def __init__(self, spans: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(APP), "stdio", "0", str(spans), "instrumented"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ),
            text=True,
        )

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def handshake(self) -> None:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        assert "result" in self.request({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def test_a_request_failing_validation_records_no_client_input_in_the_servers_error(tmp_path: Path) -> None:
    """pydantic's message quotes the input it refused (``input_value={...}``): the wire answer and the
    SDK's own span say only "Invalid request parameters"; ours must not say more, or whatever the client
    sent (a credential under a key the record otherwise blanks) lands in the span's status and events."""
    spans = ServerSpans(tmp_path / "spans.jsonl")
    client = RawStdioClient(spans.path)
    try:
        client.handshake()
        # No tool name: the request's params fail validation, quoting the arguments beside it.
        params = {"arguments": {"password": "hunter2-raw-secret"}, "_meta": {"x-note": "note-secret-7"}}
        answer = client.request({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    finally:
        client.close()
    assert answer["error"]["code"] == -32602
    served = spans.wait_for("tools/call")
    assert served["attributes"]["error.type"] == "-32602" and served["status"] == "ERROR"
    recorded = json.dumps(spans.all())
    assert "hunter2-raw-secret" not in recorded and "note-secret-7" not in recorded
    assert "Invalid request parameters" in (served["status_description"] or "")


def test_a_session_id_header_the_server_never_issued_is_not_recorded_as_its_session(
    http_server: tuple[str, ServerSpans],
) -> None:
    """The 2026-07-28 protocol has no sessions: a client may still send an ``Mcp-Session-Id`` header, which
    the server ignores. Recording it as ``mcp.session.id`` would tie the request to a session that does not
    exist (or to another client's, whose id it names)."""
    import httpx

    url, spans = http_server
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "add",
        "Mcp-Session-Id": "forged-by-the-client",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": envelope},
    }
    answer = httpx.post(url, headers=headers, json=body, timeout=30)
    assert answer.status_code == 200 and answer.json()["result"]["structuredContent"] == {"result": 3}
    served = spans.wait_for("tools/call add")
    assert served["attributes"]["mcp.protocol.version"] == "2026-07-28"
    assert "mcp.session.id" not in served["attributes"]


# -- a client speaking raw JSON-RPC to a real server in this process -----------------------------------


class RawMemoryClient:
    """A client that writes whatever JSON-RPC it likes to a low-level ``Server`` over the SDK's memory
    streams: both sides in this process, so the server's spans land in the test's pipeline."""

    negotiated: str

    def __init__(self, read: Any, write: Any) -> None:
        self._read = read
        self._write = write

    async def request(self, request_id: int | str, method: str, params: dict[str, Any] | None = None) -> Any:
        request = JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params)
        await self._write.send(SessionMessage(request))
        return (await self._read.receive()).message

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._write.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method=method, params=params)))


@asynccontextmanager
async def raw_memory_client(server: Server[Any], version: str = "2025-11-25") -> AsyncIterator[RawMemoryClient]:
    """A client whose handshake asked for ``version``; the version the server answered is its ``negotiated``."""
    streams = create_client_server_memory_streams()
    async with streams as ((read, write), (server_read, server_write)), anyio.create_task_group() as tasks:
        tasks.start_soon(server.run, server_read, server_write, server.create_initialization_options())
        client = RawMemoryClient(read, write)
        info = {"name": "raw", "version": "0"}
        params = {"protocolVersion": version, "capabilities": {}, "clientInfo": info}
        client.negotiated = (await client.request(0, "initialize", params)).result["protocolVersion"]
        await client.notify("notifications/initialized")
        yield client
        tasks.cancel_scope.cancel()


def test_a_made_up_method_names_its_span_only_when_shaped_like_a_method(pipeline: Pipeline) -> None:
    """A server answers a method it does not serve with -32601, but its span is made first, named for the
    method: one with line breaks and escapes would forge log lines, one with a space would pass for another
    request's span (``tools/call <tool>``), one of 100,000 characters would bloat every backend. Those are
    ``_OTHER``; a method shaped like one (an extension's) keeps its name."""
    made_up = ["made/up\r\n[2026-01-01 ERROR] forged\x1b[2J", "tools/call delete_all_users", "x" * 100_000]

    async def run() -> None:
        async with raw_memory_client(Server("hostile")) as client:
            for i, method in enumerate([*made_up, "vendor.example/do-thing_2"]):
                assert (await client.request(1 + i, method)).error.code == -32601
            await client.notify("notifications/" + "y" * 100_000)
            assert hasattr(await client.request(9, "ping"), "result")  # served after the notification

    asyncio.run(run())
    served = [s for s in pipeline.finished() if s.kind.name == "SERVER"]
    expected = ["initialize", "notifications/initialized", *["_OTHER"] * 4, "vendor.example/do-thing_2", "ping"]
    assert sorted(s.name for s in served) == sorted(expected)
    for span in served:
        assert span.attributes["mcp.method.name"] == span.name


def test_made_up_method_names_get_no_metric_series_past_the_cap(pipeline: Pipeline, monkeypatch) -> None:
    """Each series of a metric is held by the meter for as long as the process runs: a client sending a new
    method name with each request must not grow it without bound."""
    monkeypatch.setattr(conventions, "MAX_METRIC_NAMES", 5)
    monkeypatch.setattr(conventions, "_metric_names", set())
    made_up = [f"no/such-method-{i}" for i in range(30)]

    async def run() -> None:
        async with raw_memory_client(Server("hostile")) as client:
            for i, method in enumerate(made_up):
                await client.request(10 + i, method)
            await client.request(99, "ping")

    asyncio.run(run())
    points = pipeline.histogram("mcp.server.operation.duration")
    methods = {p.attributes.get("mcp.method.name") for p in points} - {None}
    assert methods == {"initialize", "notifications/initialized", "ping", *made_up[:5]}
    assert sum(p.count for p in points) == len(made_up) + 3  # every request still measured


def test_a_huge_or_odd_request_id_is_not_recorded_as_it_came(pipeline: Pipeline) -> None:
    """JSON-RPC lets an id be any string: one of 100,000 characters would be held by every span backend,
    one with a line break forges log lines where it is shown."""

    async def run() -> None:
        async with raw_memory_client(Server("hostile")) as client:
            assert hasattr(await client.request("id\r\n\x1b[2J-7", "ping"), "result")
            assert hasattr(await client.request("z" * 100_000, "ping"), "result")

    asyncio.run(run())
    ids = [s.attributes.get("jsonrpc.request.id") for s in pipeline.by_name("ping")]
    assert ids == ["id\ufffd\ufffd\ufffd[2J-7", None]


def test_error_codes_a_server_makes_up_get_no_metric_series_past_the_cap(pipeline: Pipeline, monkeypatch) -> None:
    """A JSON-RPC error's code is whatever integer the server sends: a server answering each call with a new
    one must not grow the client's metric without bound. Each span keeps the code it got."""
    from mcp.shared.exceptions import MCPError

    monkeypatch.setattr(conventions, "MAX_METRIC_NAMES", 6)
    monkeypatch.setattr(conventions, "_metric_names", set())
    codes = iter(range(1000, 1030))

    async def refuse(ctx: Any, params: Any) -> Any:
        raise MCPError(code=next(codes), message="refused")

    async def run() -> None:
        async with Client(Server("hostile", on_call_tool=refuse)) as client:
            for _ in range(30):
                with pytest.raises(MCPError):
                    await client.call_tool("t", {})

    asyncio.run(run())
    sent = [s for s in pipeline.by_name("tools/call t") if s.kind.name == "CLIENT"]
    assert sorted(s.attributes["rpc.response.status_code"] for s in sent) == [str(c) for c in range(1000, 1030)]
    for metric in ("mcp.client.operation.duration", "mcp.server.operation.duration"):
        points = [p for p in pipeline.histogram(metric) if p.attributes.get("mcp.method.name") == "tools/call"]
        assert sum(p.count for p in points) == 30, metric  # every call still measured, as failed
        assert {p.attributes.get("error.type") for p in points} == {*map(str, range(1000, 1005)), "_OTHER"}, metric
        assert {p.attributes.get("rpc.response.status_code") for p in points} == {*map(str, range(1000, 1005)), None}


def test_the_initialize_span_records_the_version_the_server_answered_not_its_default(pipeline: Pipeline) -> None:
    """During the handshake the connection's version is the server's latest until the answer is sent: a
    client asking for an older one gets it, and so must the span and the metric of that very request."""

    async def run() -> str:
        async with raw_memory_client(Server("versions"), version="2025-06-18") as client:
            return client.negotiated

    assert asyncio.run(run()) == "2025-06-18"
    assert pipeline.one("initialize").attributes["mcp.protocol.version"] == "2025-06-18"
    (point,) = [
        p
        for p in pipeline.histogram("mcp.server.operation.duration")
        if p.attributes["mcp.method.name"] == "initialize"
    ]
    assert point.attributes["mcp.protocol.version"] == "2025-06-18"


# -- what a client puts in a resource's address ------------------------------------------------------------

SERVER_KEY = "sk-proj-ServerOwnKey0123456789abcdefXYZ"


@pytest.fixture
def server_key() -> Iterator[str]:
    """The key of the server's own LLM client, remembered as the adapters remember it before each call."""
    from relay_runtime import redaction

    redaction.forget_secrets()
    redaction.remember_secret(SERVER_KEY)
    yield SERVER_KEY
    redaction.forget_secrets()


async def _unreadable(ctx: Any, params: Any) -> Any:
    raise ValueError(f"cannot read {params.uri}")


def test_tokens_in_a_clients_resource_addresses_do_not_push_the_servers_own_key_out_of_redaction(
    pipeline: Pipeline, relay_host: session.Host, server_key: str
) -> None:
    """The values taken out of a recorded address (``?access_token=``) were remembered as the process's own
    keys are, in the same bounded memory: a client sending a new one per request pushed the server's key out,
    and text quoting that key (a provider's error echoing it) was recorded as it is."""
    from relay_runtime.recorder import Recorder

    async def run() -> None:
        async with raw_memory_client(Server("hostile", on_read_resource=_unreadable)) as client:
            for i in range(300):
                uri = f"file:///x?access_token=made-up-token-{i:06d}"
                assert (await client.request(1 + i, "resources/read", {"uri": uri})).error

    asyncio.run(run())
    relay = relay_host.relay
    events = Recorder()
    relay.subscribers.register(events, name="test.after")
    try:
        relay.scope.pop(relay.scope.push("later"), error=RuntimeError(f"the provider refused {server_key}"))
    finally:
        relay.subscribers.deregister("test.after")
    (end,) = events.ends()
    assert server_key not in (end.error_message or "")


def test_a_huge_token_in_a_clients_resource_address_is_not_remembered_process_wide(
    pipeline: Pipeline, server_key: str
) -> None:
    """Each remembered value is searched for in every text the relay records, as every run of 8 of its
    characters: one client request with a 200,000-character token cost the server seconds of its event loop
    and a hundred megabytes, and every record after it searched for it."""
    from relay_runtime import redaction

    token = "".join(chr(ord("a") + (i * 7919) % 26) for i in range(200_000))

    async def run() -> None:
        async with raw_memory_client(Server("hostile", on_read_resource=_unreadable)) as client:
            uri = f"file:///x?access_token={token}"
            assert (await client.request(1, "resources/read", {"uri": uri})).error

    asyncio.run(run())
    assert redaction.remembered().secrets == {server_key}


def test_a_secret_in_a_clients_resource_address_is_not_recorded_where_the_servers_error_echoes_it(
    pipeline: Pipeline,
) -> None:
    """Not remembered process-wide, a client's secret must still not reach the record through the text of
    the error the server answered with (a handler quoting the address it could not read)."""
    from relay_runtime import redaction

    redaction.forget_secrets()
    addresses = ["https://jane:pw-0123456789-secret@files.example/x", "file:///x?sig=sig-0123456789-secret"]

    async def run() -> None:
        async with raw_memory_client(Server("hostile", on_read_resource=_unreadable)) as client:
            for i, uri in enumerate(addresses):
                assert (await client.request(1 + i, "resources/read", {"uri": uri})).error

    asyncio.run(run())
    served = [s for s in pipeline.finished() if s.kind.name == "SERVER" and s.name.startswith("resources/read")]
    assert len(served) == 2
    recorded = repr([(s.name, dict(s.attributes or {}), s.status.description, s.events) for s in served])
    assert "0123456789-secret" not in recorded
    assert "cannot read https://jane:[redacted]@files.example/x" in recorded
    assert "cannot read file:///x?sig=[redacted]" in recorded


@pytest.mark.parametrize(
    "name", ["add", "tools/x", "", "a" * 300, "line\nbreak", "\u202eevil", 7, None, "é" * 256, " spaced "]
)
def test_a_tool_name_remembered_is_the_target_target_of_gives(name: Any, monkeypatch) -> None:
    """``tool_target`` (a ``Client.call_tool``'s) remembers what ``target_of`` gives: the same, first and later."""
    monkeypatch.setattr(conventions, "tool_targets", {})
    expected = conventions.target_of(conventions.TOOLS_CALL, {"name": name})
    assert conventions.tool_target(name) == expected
    assert conventions.tool_target(name) == expected


def test_tool_names_past_the_bound_are_worked_out_each_time_not_remembered(monkeypatch) -> None:
    monkeypatch.setattr(conventions, "tool_targets", {})
    for i in range(conventions._MAX_TOOL_TARGETS + 50):
        assert conventions.tool_target(f"tool-{i}") == f"tool-{i}"
    assert len(conventions.tool_targets) == conventions._MAX_TOOL_TARGETS
