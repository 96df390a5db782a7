"""The ``span_path`` fixture every OTel test module uses, so each test runs on both span paths.

``deferred``: the default setup, spans built whole at their end. ``sdk_span``: a
processor with a real ``on_start`` is added to every provider the exporter meets,
which must send it down the SDK's own ``Span`` path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import relay_runtime.integrations.otel.exporter as exporter_module
from relay_runtime.integrations.otel import deferred as deferred_module


class StartWatcher(SpanProcessor):
    """A processor that looks at span starts: its presence must keep the SDK's own ``Span``."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started.append(span.name)


@pytest.fixture(params=["deferred", "sdk_span"])
def span_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "sdk_span":
        real = deferred_module.fast_path_for
        watcher = StartWatcher()

        def with_a_start_watcher(tracer: Any) -> Any:
            multi = getattr(tracer, "span_processor", None)
            if isinstance(multi, SynchronousMultiSpanProcessor) and watcher not in multi._span_processors:
                multi.add_span_processor(watcher)
            path = real(tracer)
            assert path is None, "a processor with on_start must keep the SDK's Span"
            return path

        monkeypatch.setattr(exporter_module, "fast_path_for", with_a_start_watcher)
    yield request.param


class Pipeline:
    """A real OTel SDK pipeline kept in memory: finished spans and metric points to assert on."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def by_name(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.by_name(name)
        assert len(found) == 1, (name, [s.name for s in self.finished()])
        return found[0]

    def histogram(self, name: str) -> list[HistogramDataPoint]:
        return [point for metric in self._metrics(name) for point in metric.data.data_points]  # type: ignore[misc]

    def unit(self, name: str) -> str:
        """The unit the metric ``name`` was recorded in ("" when it was not recorded)."""
        return next((metric.unit or "" for metric in self._metrics(name)), "")

    def _metrics(self, name: str) -> list[Metric]:
        data = self.reader.get_metrics_data()
        return [
            metric
            for rm in (data.resource_metrics if data else ())
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == name
        ]


@pytest.fixture
def traced(relay_host: Any, relay_events: Any) -> Iterator[tuple[Pipeline, Any]]:
    """A turn open on ``relay_host``, its relay's spans and metrics through ``Pipeline`` (a module binds it:
    ``traced = otel_support.traced``); yields the pipeline and the relay's recorded events."""
    from relay_runtime import session
    from relay_runtime.integrations.otel import OTelExporter

    out = Pipeline()
    exporter = OTelExporter(out.tracer_provider, out.meter_provider).attach(relay_host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="s-1", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="task")
    try:
        yield out, relay_events
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.detach()
