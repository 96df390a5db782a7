"""A backend that is down, answers 503, hangs, or takes traces but no metrics: bounded and quiet."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.trace import SpanKind

from relay_runtime import LLMRequest, Relay, ScopeType, session
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.otel.exporter import DEFAULT_SHUTDOWN_TIMEOUT_S, SHUTDOWN_TIMEOUTS

OTEL_VARS = ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in OTEL_VARS:
        monkeypatch.delenv(var, raising=False)


class Backend:
    """A loopback OTLP/HTTP endpoint: ``answers`` maps a path to a status, or to "hang"."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.hits: list[tuple[str, Any]] = []
        self.release = threading.Event()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answer = backend.answers.get(self.path, 200)
                backend.hits.append((self.path, answer))
                if answer == "hang":
                    backend.release.wait(60)  # never answers while the test runs
                    return
                self.send_response(answer)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def backend() -> Iterator[Any]:
    made: list[Backend] = []

    def make(answers: dict[str, Any]) -> Backend:
        made.append(Backend(answers))
        return made[-1]

    yield make
    for b in made:
        b.close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more: connection refused


def calls(relay: Relay, n: int = 3) -> None:
    for _ in range(n):
        with relay.scope.scope("turn", ScopeType.FUNCTION):
            relay.llm.execute("openai", LLMRequest(None, {"model": "m"}), lambda req: {"ok": True}, model_name="m")


@pytest.mark.parametrize("answer", ["down", 503, "hang"])
def test_shutdown_returns_in_bounded_time_whatever_the_backend_does(backend, answer) -> None:
    url = closed_port_url() if answer == "down" else backend({"/v1/traces": answer}).url
    relay = Relay()
    exporter = OTelExporter(
        span_exporters=[OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=30)], shutdown_timeout=1.5
    ).attach(relay)
    calls(relay)
    t0 = time.monotonic()
    finished = exporter.shutdown()
    took = time.monotonic() - t0
    assert took < 3.0, took  # the SDK alone takes 30 s and more here
    assert finished is False
    assert exporter.diagnostics()[SHUTDOWN_TIMEOUTS] == 1
    assert relay.subscribers.names() == []  # detached all the same


def test_shutdown_with_a_healthy_backend_finishes_and_says_so(backend) -> None:
    good = backend({})
    relay = Relay()
    exporter = OTelExporter(span_exporters=[OTLPSpanExporter(endpoint=f"{good.url}/v1/traces")]).attach(relay)
    assert exporter.shutdown_timeout == DEFAULT_SHUTDOWN_TIMEOUT_S == 5.0
    calls(relay)
    assert exporter.shutdown() is True
    assert [path for path, _ in good.hits] == ["/v1/traces"]
    assert SHUTDOWN_TIMEOUTS not in exporter.diagnostics()


def test_bad_shutdown_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="shutdown_timeout must be a positive number of seconds"):
        OTelExporter(span_exporters=[], shutdown_timeout=0)


def test_process_exit_is_bounded_when_the_backend_hangs(backend, tmp_path) -> None:
    hanging = backend({"/v1/traces": "hang", "/v1/metrics": "hang"})
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = {hanging.url!r}
            from relay_runtime import LLMRequest, Relay
            from relay_runtime.integrations.otel import OTelExporter
            relay = Relay()
            OTelExporter(shutdown_timeout=1.0).attach(relay)
            relay.llm.execute("openai", LLMRequest(None, {{"model": "m"}}), lambda r: {{"ok": 1}}, model_name="m")
            print("exiting", flush=True)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "exiting"
        exit_started = time.monotonic()
        _out, err = proc.communicate(timeout=60)
        exit_took = time.monotonic() - exit_started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "shutdown gave up after 1.0s" in err  # the exit hook waited its bound, and said so
    assert exit_took < 4.0, exit_took  # without the bound: the SDK's exit hooks wait 20 s and more


def test_a_backend_without_metrics_is_logged_once(backend, monkeypatch, caplog) -> None:
    phoenix_like = backend({"/v1/metrics": 405})
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix_like.url)
    relay = Relay()
    exporter = OTelExporter().attach(relay)
    assert exporter.meter_provider is not None
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            calls(relay, 1)
            exporter.meter_provider.force_flush()
        exporter.shutdown()
    metric_posts = [a for p, a in phoenix_like.hits if p == "/v1/metrics"]
    assert len(metric_posts) >= 3 and set(metric_posts) == {405}
    assert ("/v1/traces", 200) in phoenix_like.hits
    refused = [r.getMessage() for r in caplog.records if "405" in r.getMessage()]
    assert len(refused) == 1, refused
    assert "OTLP metrics export refused with HTTP 405 (the endpoint does not accept them)" in refused[0]


def test_turn_and_logical_call_spans_keep_kind_internal(relay_home) -> None:
    """Regression: only the attempt is a CLIENT span; conversation, turn and logical call are INTERNAL."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from relay_runtime import calls as relay_calls

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    coordinator = session.SESSION_COORDINATOR
    exporter = OTelExporter(provider).attach(coordinator)
    lease = coordinator.acquire_conversation(profile_key="/p", session_id="s", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="t1", task_id="k")
    relay_calls.execute_current(
        LLMRequest(None, {"model": "m"}), lambda r: {"model": "m"}, name="openai", model_name="m"
    )
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    exporter.detach()
    kinds = {s.name: s.kind for s in memory.get_finished_spans()}
    assert kinds == {
        "invoke_agent agent": SpanKind.INTERNAL,
        "turn": SpanKind.INTERNAL,
        "logical_llm_call": SpanKind.INTERNAL,
        "chat m": SpanKind.CLIENT,
    }
