"""Cost in OpenTelemetry: the attempt's gen_ai.usage.cost.*, roll-ups under relay.cost.rollup.*, the histogram."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import span_path  # noqa: F401  (both span paths)

from relay_runtime import adapters, cost, session
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from relay_runtime.integrations.otel import OTelExporter

pytestmark = pytest.mark.usefixtures("span_path")

PRICES = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0, "cache_read": 0.1, "valid_from": "2026-01-01"}}}


def test_cost_attributes_on_every_span_and_the_cost_histogram(relay_home: Any) -> None:
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(tracer, MeterProvider(metric_readers=[reader])).attach(host)
    cost.attach(host, PriceCatalog.from_mapping(PRICES))
    scripted = t.scripted_openai(
        t.error(400, "bad request"),
        t.json_reply(t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1000, 300, cached=400))),
        t.json_reply(t.chat_completion_body(model="unknown")),
    )
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="c-1", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="task")
    with pytest.raises(Exception, match="bad request"):
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})
    adapters.complete(scripted.client, {"model": "unknown", "messages": []})
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    exporter.detach()
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for span in spans.get_finished_spans():
        by_kind.setdefault(str(span.attributes.get("relay.kind", span.name)), []).append(dict(span.attributes))
    attempts = [a for s in spans.get_finished_spans() if (a := dict(s.attributes)).get("gen_ai.request.model")
                and "relay.cost.rollup.total" not in a]  # fmt: skip
    priced = [a for a in attempts if "gen_ai.usage.cost.amount" in a]
    assert len(priced) == 1
    one = priced[0]
    assert one["gen_ai.usage.cost.amount"] == pytest.approx(1840e-6)
    assert one["gen_ai.usage.cost.currency"] == "USD" and one["gen_ai.usage.cost.source"] == "local"
    assert one["relay.cost.cache_read"] == pytest.approx(40e-6) and one["relay.cost.valid_from"] == "2026-01-01"
    unpriced = [a for a in attempts if "relay.cost.unpriced" in a]
    assert [tuple(a["relay.cost.unpriced"]) for a in unpriced] == [("usage",), ("model",)]
    rollups = [dict(s.attributes) for s in spans.get_finished_spans() if "relay.cost.rollup.total" in s.attributes]
    assert len(rollups) == 5  # three logical calls, the turn, the conversation
    for rollup in rollups:
        assert "gen_ai.usage.cost.amount" not in rollup  # never counted twice
    turn_span = next(r for r in rollups if r.get("relay.cost.rollup.unpriced_attempts") == 2)
    assert turn_span["relay.cost.rollup.total"] == pytest.approx(1840e-6)
    points = [
        p
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "gen_ai.client.operation.cost"
        for p in m.data.data_points
    ]
    assert len(points) == 1 and points[0].sum == pytest.approx(1840e-6) and points[0].count == 1
    assert points[0].attributes["gen_ai.usage.cost.currency"] == "USD"


def test_a_charge_that_came_after_its_turn_ended_is_in_the_cost_histogram(relay_home: Any) -> None:
    # The turn ends while the provider still works on a call: the attempt's span ends (cancelled) unpriced, and
    # its answer, billed, is priced later (a late charge, marked on the ended attempt). The histogram missed it.
    from test_cost import _answered_after_its_turn_ended, catalog

    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(tracer, MeterProvider(metric_readers=[reader])).attach(host)
    cost.attach(host, catalog())
    _answered_after_its_turn_ended(host, "late")  # 1000 input tokens of gpt-x: 0.001
    exporter.detach()
    (attempt,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    assert attempt.attributes["relay.outcome"] == "cancelled" and "gen_ai.usage.cost.amount" not in attempt.attributes
    points = [
        p
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "gen_ai.client.operation.cost"
        for p in m.data.data_points
    ]
    assert len(points) == 1 and points[0].sum == pytest.approx(0.001) and points[0].count == 1
    assert points[0].attributes["gen_ai.request.model"] == "gpt-x"
    assert points[0].attributes["gen_ai.usage.cost.currency"] == "USD"
