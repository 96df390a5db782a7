"""Export stays within what a collector accepts: attribute values are cut (content included) and each
OTLP request is kept under a byte size, so one huge prompt never costs unrelated spans.

The receiver is a real OTLP/HTTP endpoint on loopback (aiohttp) that decodes what it accepts and
refuses (413) any request over 4 MiB, as collectors do; spans reach it through the SDK's own OTLP
exporter behind the providers ``OTelExporter`` builds.
"""

from __future__ import annotations

import asyncio
import json
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_otel_content import Codec

from relay_runtime import LLMRequest, Relay
from relay_runtime.integrations.otel import OTelExporter, SizeLimitedSpanExporter
from relay_runtime.integrations.otel.export_size import DEFAULT_ATTRIBUTE_LENGTH, estimated_size

MIB = 1024 * 1024
REFUSE_OVER = 4 * MIB
BIG_PROMPT = "x" * (10 * MIB)


class Receiver:
    """An OTLP/HTTP traces endpoint on loopback that refuses requests over ``REFUSE_OVER`` bytes."""

    def __init__(self) -> None:
        self.accepted: list[int] = []  # sizes
        self.refused: list[int] = []
        self.spans: dict[str, dict[str, Any]] = {}  # name -> attributes (string values)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._thread.start()
        assert self._ready.wait(20)

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if len(body) > REFUSE_OVER:
            self.refused.append(len(body))
            return web.Response(status=413, text="request too large")
        self.accepted.append(len(body))
        message = ExportTraceServiceRequest.FromString(body)
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans[span.name] = {kv.key: kv.value.string_value for kv in span.attributes}
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def _serve(self) -> None:
        app = web.Application(client_max_size=256 * MIB)
        app.router.add_post("/v1/traces", self._traces)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def _call(relay: Relay, model: str, text: str) -> None:
    request = LLMRequest({}, {"model": model, "messages": [{"role": "user", "content": text}]})
    relay.llm.execute("anthropic", request, lambda r: {"model": model, "text": "done"}, codec=Codec())


def test_a_10_mib_prompt_with_content_capture_costs_no_span(receiver: Receiver) -> None:
    relay = Relay()
    exporter = OTelExporter(span_exporters=[OTLPSpanExporter(endpoint=receiver.url)], capture_content=True)
    exporter.attach(relay)
    for i in range(45):
        _call(relay, f"model-{i}", BIG_PROMPT if i == 20 else f"question {i}")
    exporter.shutdown()
    assert receiver.refused == []
    assert {f"chat model-{i}" for i in range(45)} <= set(receiver.spans)
    big = receiver.spans["chat model-20"]["gen_ai.input.messages"]
    assert len(big) == DEFAULT_ATTRIBUTE_LENGTH and big.startswith('[{"role": "user", "parts": [{"type": "text"')
    assert json.loads(receiver.spans["chat model-7"]["gen_ai.input.messages"])[0]["parts"][0]["content"] == (
        "question 7"
    )
    assert max(receiver.accepted) < REFUSE_OVER
    assert exporter.diagnostics().get("otel.spans_export_failed", 0) == 0


def test_a_batch_over_the_byte_size_goes_out_as_several_requests(receiver: Receiver) -> None:
    # Attribute values of up to 2 MiB: three big spans make a 6 MiB batch, which is split under 3 MiB.
    relay = Relay()
    exporter = OTelExporter(
        span_exporters=[OTLPSpanExporter(endpoint=receiver.url)], capture_content=True, max_attribute_length=2 * MIB
    )
    exporter.attach(relay)
    for i in range(30):
        _call(relay, f"model-{i}", "y" * (2 * MIB) if i in (3, 14, 25) else f"question {i}")
    exporter.shutdown()
    assert receiver.refused == []
    assert {f"chat model-{i}" for i in range(30)} <= set(receiver.spans)
    assert len(receiver.accepted) >= 2 and max(receiver.accepted) <= 3 * MIB
    assert len(receiver.spans["chat model-14"]["gen_ai.input.messages"]) == 2 * MIB


def test_a_refused_request_loses_only_its_own_spans(receiver: Receiver) -> None:
    # No attribute limit at all (the user asked for it): the 10 MiB span alone is refused, the rest arrive.
    relay = Relay()
    exporter = OTelExporter(
        span_exporters=[OTLPSpanExporter(endpoint=receiver.url)], capture_content=True, max_attribute_length=64 * MIB
    )
    exporter.attach(relay)
    for i in range(45):
        _call(relay, f"model-{i}", BIG_PROMPT if i == 20 else f"question {i}")
    exporter.shutdown()
    assert len(receiver.refused) == 1
    assert {f"chat model-{i}" for i in range(45) if i != 20} <= set(receiver.spans)
    assert "chat model-20" not in receiver.spans
    assert exporter.diagnostics()["otel.spans_export_failed"] == 1


def test_a_user_provider_gets_both_bounds_as_the_readme_says(receiver: Receiver) -> None:
    provider = TracerProvider(span_limits=SpanLimits(max_attribute_length=DEFAULT_ATTRIBUTE_LENGTH))
    provider.add_span_processor(
        BatchSpanProcessor(SizeLimitedSpanExporter(OTLPSpanExporter(endpoint=receiver.url), max_bytes=3 * MIB))
    )
    relay = Relay()
    OTelExporter(provider, capture_content=True).attach(relay)
    for i in range(10):
        _call(relay, f"model-{i}", BIG_PROMPT if i == 4 else f"question {i}")
    provider.shutdown()
    assert receiver.refused == []
    assert {f"chat model-{i}" for i in range(10)} <= set(receiver.spans)


def test_content_is_cut_before_it_is_serialised_never_copied_whole() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    relay = Relay()
    OTelExporter(provider, capture_content=True, conventions=("gen_ai", "openinference")).attach(relay)
    _call(relay, "warm-up", "hello")
    prompt = "z" * (10 * MIB)
    tracemalloc.start()
    try:
        _call(relay, "big", prompt)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The prompt is 10 MiB; serialising it whole (even once) would show here.
    assert peak < 2 * MIB, f"peak {peak / MIB:.1f} MiB while recording a 10 MiB prompt"
    (span,) = [s for s in spans.get_finished_spans() if s.name == "chat big"]
    assert span.attributes is not None
    assert all(len(v) <= DEFAULT_ATTRIBUTE_LENGTH for v in span.attributes.values() if isinstance(v, str))
    assert "z" * 1000 in str(span.attributes["gen_ai.input.messages"])


def test_limits_are_configurable_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = InMemorySpanExporter()
    relay = Relay()
    exporter = OTelExporter(span_exporters=[spans], capture_content=True, max_attribute_length=100)
    exporter.attach(relay)
    _call(relay, "m", "w" * 5000)
    exporter.shutdown()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "chat m"]
    assert span.attributes is not None and len(str(span.attributes["gen_ai.input.messages"])) == 100
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "250")
    assert OTelExporter(span_exporters=[InMemorySpanExporter()]).max_attribute_length == 250
    for bad in ({"max_attribute_length": 0}, {"max_export_bytes": 10}, {"max_attribute_length": True}):
        with pytest.raises(ValueError, match=r"max_attribute_length|max_export_bytes"):
            OTelExporter(span_exporters=[InMemorySpanExporter()], **bad)
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "lots")
    with pytest.raises(ValueError, match="OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT must be an integer"):
        OTelExporter(span_exporters=[InMemorySpanExporter()])


def test_the_size_estimate_is_an_upper_bound_of_the_encoded_span() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    relay = Relay()
    OTelExporter(provider, capture_content=True).attach(relay)
    _call(relay, "m", "é" * 3000 + "plain" * 100)
    for span in spans.get_finished_spans():
        assert estimated_size(span) >= encode_spans([span]).ByteSize() - 300  # the resource is counted per request


def test_an_errors_text_on_the_exception_event_is_held_to_the_attribute_limit() -> None:
    """The status description is short, but the ``exception`` event carried the error's text whole to a
    provider of the user's own (one with no span limits of its own)."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    relay = Relay()
    exporter = OTelExporter(provider, max_attribute_length=200).attach(relay)

    def tool(args: Any) -> Any:
        raise RuntimeError("the server said: " + "too long " * 2_000)

    with pytest.raises(RuntimeError):
        relay.tools.execute("big", {}, tool)
    exporter.shutdown()
    (span,) = spans.get_finished_spans()
    (event,) = [e for e in span.events if e.name == "exception"]
    message = event.attributes["exception.message"]
    assert message.startswith("the server said: too long") and len(message) <= 200
