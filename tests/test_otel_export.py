"""Never stuck, never harmful: a backend that is down or slow, the OTEL_* environment, OTLP, trace context."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import span_path  # noqa: F401  (every test here runs on both span paths)

import relay_runtime.integrations.otel as otel
from relay_runtime import LLMRequest, Relay, ScopeType
from relay_runtime.attempt import current_attempt
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.otel.providers import EXPORT_FAILED, SPANS_DROPPED

pytestmark = pytest.mark.usefixtures("span_path")

OTEL_VARS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_PROPAGATORS",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in OTEL_VARS:
        monkeypatch.delenv(var, raising=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed_calls(relay: Relay, n: int) -> list[float]:
    durations = []
    for _ in range(n):
        t0 = time.perf_counter()
        with relay.scope.scope("turn", ScopeType.FUNCTION):
            relay.llm.execute("openai", LLMRequest(None, {"model": "m"}), lambda req: {"ok": True}, model_name="m")
        durations.append(time.perf_counter() - t0)
    return durations


def test_backend_down_never_blocks_or_breaks_a_call():
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    dead = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{free_port()}/v1/traces", timeout=1)
    relay = Relay()
    exporter = OTelExporter(span_exporters=[dead]).attach(relay)
    durations = timed_calls(relay, 50)
    # Exporting happens on the processor's thread: calls take no network time.
    assert max(durations) < 0.25, max(durations)
    t0 = time.monotonic()
    exporter.shutdown()
    assert time.monotonic() - t0 < 20
    failed = relay.diagnostics().get(EXPORT_FAILED, 0) or exporter.diagnostics().get(EXPORT_FAILED, 0)
    assert failed == 100  # every span of the 50 calls was counted as lost, none silently
    assert relay.diagnostics().get("subscriber_errors", 0) == 0


class BlockingExporter(SpanExporter):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.exported: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.exported.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_slow_backend_drops_are_counted_and_calls_do_not_wait(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    slow = BlockingExporter()
    relay = Relay()
    exporter = OTelExporter(span_exporters=[slow]).attach(relay)
    durations = timed_calls(relay, 30)
    assert max(durations) < 0.25, max(durations)
    dropped = relay.diagnostics()[SPANS_DROPPED]
    assert dropped > 0
    slow.release.set()
    exporter.shutdown()
    # Every span is accounted for: exported or counted as dropped.
    assert len(slow.exported) + dropped == 60
    assert exporter.diagnostics()[SPANS_DROPPED] == dropped


def test_failing_exporter_is_counted_not_raised():
    class Broken(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            raise OSError("disk full")

        def shutdown(self) -> None:
            pass

    relay = Relay()
    exporter = OTelExporter(span_exporters=[Broken()]).attach(relay)
    timed_calls(relay, 3)
    exporter.shutdown()
    assert relay.diagnostics()[EXPORT_FAILED] == 6


class OTLPReceiver:
    """A loopback OTLP/HTTP endpoint that keeps every trace export request it gets."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/traces":
                    msg = ExportTraceServiceRequest()
                    msg.ParseFromString(body)
                    receiver.requests.append(msg)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def span_names(self) -> list[str]:
        return [
            span.name
            for req in self.requests
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    def resource_attributes(self) -> dict[str, str]:
        out = {}
        for req in self.requests:
            for rs in req.resource_spans:
                for kv in rs.resource.attributes:
                    out[kv.key] = kv.value.string_value
        return out


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver()
    r.thread.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()
        r.thread.join(5)


def test_setup_from_env_sends_over_otlp_when_the_endpoint_is_set(monkeypatch, receiver, capsys):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "relay-demo")
    relay = Relay()
    exporter = otel.setup_from_env(relay, console=True)
    timed_calls(relay, 2)
    exporter.shutdown()
    assert sorted(receiver.span_names()) == ["chat m", "chat m", "turn", "turn"]
    assert receiver.resource_attributes()["service.name"] == "relay-demo"
    printed = capsys.readouterr().out
    assert printed.count('"name": "chat m"') == 2


def test_setup_from_env_without_endpoint_or_console_exports_nowhere(receiver, capsys):
    relay = Relay()
    exporter = otel.setup_from_env(relay)
    timed_calls(relay, 1)
    exporter.shutdown()
    assert receiver.requests == []
    assert capsys.readouterr().out == ""


def test_default_provider_follows_otel_env(monkeypatch, capsys):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    relay = Relay()
    exporter = OTelExporter().attach(relay)
    assert exporter.meter_provider is None  # nobody asked for metrics: none are recorded
    assert isinstance(exporter.tracer_provider, TracerProvider)
    resource = exporter.tracer_provider.resource.attributes
    assert resource["service.name"] == "relay-runtime"
    assert resource["deployment.environment"] == "test"
    timed_calls(relay, 1)
    exporter.shutdown()
    assert capsys.readouterr().out.count('"name": "turn"') == 1


def test_metrics_provider_from_env(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    exporter = OTelExporter()
    assert exporter.meter_provider is not None
    exporter.shutdown()


def test_sdk_disabled_makes_the_exporter_inert(monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    relay = Relay()
    exporter = OTelExporter().attach(relay)
    assert exporter.tracer_provider is None
    timed_calls(relay, 1)
    assert exporter.diagnostics() == {"otel.open_spans": 0}
    exporter.shutdown()


def test_global_sdk_provider_is_used_when_none_is_given(monkeypatch):
    import opentelemetry.trace as trace_api

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: provider)
    relay = Relay()
    exporter = OTelExporter().attach(relay)
    assert exporter.tracer_provider is provider
    timed_calls(relay, 1)
    exporter.shutdown()
    assert len(spans.get_finished_spans()) == 2
    provider.shutdown()


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "unsupported span exporter 'zipkin'"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "lots", "OTEL_BSP_MAX_QUEUE_SIZE must be an integer"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon", "unsupported OTLP protocol"),
    ],
)
def test_bad_environment_is_named_in_the_error(monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=message):
        OTelExporter()


# -- trace context for the provider ----------------------------------------------------------


def test_attempt_traceparent_reaches_the_provider_request():
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    relay = Relay()
    exporter = OTelExporter(provider).attach(relay, propagate_context=True)
    seen: dict[str, Any] = {}

    def call(req: LLMRequest) -> Any:
        attempt = current_attempt()
        assert attempt is not None
        seen["headers"] = dict(req.headers)
        seen["direct"] = exporter.traceparent_for(attempt.handle.uuid)
        return {"ok": True}

    def stream(req: LLMRequest) -> Any:
        seen["stream_headers"] = dict(req.headers)
        return iter([1, 2])

    relay.llm.execute("openai", LLMRequest({"x-team": "a"}, {"model": "m"}), call, model_name="m")
    list(relay.llm.stream("openai", LLMRequest(None, {"model": "s"}), stream, model_name="s"))
    by_name = {s.name: s for s in spans.get_finished_spans()}
    ctx = by_name["chat m"].context
    expected = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    assert seen["headers"]["traceparent"] == expected
    assert seen["headers"]["x-team"] == "a"
    assert seen["direct"] == expected
    sctx = by_name["chat s"].context
    assert seen["stream_headers"]["traceparent"] == (
        f"00-{sctx.trace_id:032x}-{sctx.span_id:016x}-{int(sctx.trace_flags):02x}"
    )
    # Ended scopes have no trace context any more; detaching removes the intercepts.
    assert exporter.traceparent_for("0" * 32) is None
    exporter.detach()
    assert relay.intercepts.active is False
    relay.llm.execute("openai", LLMRequest(None, {"model": "m"}), lambda req: seen.update(after=dict(req.headers)))
    assert seen["after"] == {}
