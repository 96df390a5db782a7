"""Tracer and meter providers built from the standard ``OTEL_*`` environment, with a bounded queue.

The SDK's own exporters read their ``OTEL_EXPORTER_OTLP_*`` variables, the
resource reads ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, and the
batch processor's size follows ``OTEL_BSP_*``; what is decided here is which
exporters to build (``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``,
``OTEL_EXPORTER_OTLP_PROTOCOL``) and how drops are counted.

Spans leave the calling thread through a ``BatchSpanProcessor`` whose queue is
bounded: a backend that is down or slow costs a dropped span, counted, never
a blocked or failed LLM call.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .export_size import DEFAULT_MAX_EXPORT_BYTES, SizeLimitedSpanExporter, span_limits

Counter = Callable[[str, int], None]

DEFAULT_SERVICE_NAME = "relay-runtime"
DEFAULT_MAX_QUEUE = 2048

SPANS_DROPPED = "otel.spans_dropped"
EXPORT_FAILED = "otel.spans_export_failed"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("true", "1", "yes")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def sdk_disabled() -> bool:
    return _env_flag("OTEL_SDK_DISABLED")


def otlp_endpoint_configured(signal: str) -> bool:
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    )


def exporter_names(signal: str, default: str) -> list[str]:
    """``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` as a list; ``none`` means none."""
    raw = os.environ.get(f"OTEL_{signal}_EXPORTER", default)
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    return [] if "none" in names else names


def _protocol(signal: str) -> str:
    return (
        (
            os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        )
        .strip()
        .lower()
    )


def default_resource() -> Resource:
    resource = Resource.create()
    name = str(resource.attributes.get("service.name", ""))
    if not name or name.startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": DEFAULT_SERVICE_NAME}))
    return resource


# -- spans: a bounded, counted batch processor ---------------------------------------------------


class _Accounting:
    """How many spans are queued and not yet handed to the exporter, and what was lost."""

    def __init__(self, capacity: int, count: Counter) -> None:
        self.capacity = capacity
        self.pending = 0
        self._count = count
        self._lock = threading.Lock()

    def admit(self) -> bool:
        with self._lock:
            if self.pending >= self.capacity:
                admitted = False
            else:
                self.pending += 1
                admitted = True
        if not admitted:
            self._count(SPANS_DROPPED, 1)
        return admitted

    def taken(self, n: int) -> None:
        with self._lock:
            self.pending = max(0, self.pending - n)

    def failed(self, n: int) -> None:
        self._count(EXPORT_FAILED, n)


class CountingSpanExporter(SpanExporter):
    """Wraps the real exporter: a batch it fails (or raises on) is counted, never raised."""

    def __init__(self, inner: SpanExporter, accounting: _Accounting) -> None:
        self._inner = inner
        self._acct = accounting

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        n = len(spans)
        self._acct.taken(n)
        try:
            result = self._inner.export(spans)
        except Exception:
            self._acct.failed(n)
            return SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._acct.failed(n)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class BoundedBatchSpanProcessor(SpanProcessor):
    """A ``BatchSpanProcessor`` whose drops (queue full) and export failures reach a counter.

    The SDK's processor drops silently when its queue is full; this one keeps its own
    count of spans in flight with the same bound, so every loss is counted. A batch goes out as
    requests estimated under ``max_export_bytes`` each (``export_size``): a collector refusing one
    loses its spans only, counted.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        count: Counter,
        *,
        max_queue_size: int | None = None,
        schedule_delay_millis: float | None = None,
        max_export_batch_size: int | None = None,
        max_export_bytes: int = DEFAULT_MAX_EXPORT_BYTES,
    ) -> None:
        capacity = max_queue_size or _env_int("OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_MAX_QUEUE)
        batch = max_export_batch_size or min(capacity, _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
        self._acct = _Accounting(capacity, count)
        self._batch = BatchSpanProcessor(
            SizeLimitedSpanExporter(CountingSpanExporter(exporter, self._acct), max_export_bytes),
            max_queue_size=capacity,
            schedule_delay_millis=schedule_delay_millis,
            max_export_batch_size=batch,
        )

    @property
    def pending(self) -> int:
        return self._acct.pending

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return
        if self._acct.admit():
            self._batch.on_end(span)

    def shutdown(self) -> None:
        self._batch.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batch.force_flush(timeout_millis)


def _grpc(module: str, cls: str) -> Any:
    """The gRPC OTLP exporter, which is an optional install."""
    import importlib

    try:
        mod = importlib.import_module(f"opentelemetry.exporter.otlp.proto.grpc.{module}")
    except ImportError as exc:
        raise RuntimeError(
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the opentelemetry-exporter-otlp-proto-grpc package"
        ) from exc
    return getattr(mod, cls)()


def _otlp_span_exporter() -> SpanExporter:
    protocol = _protocol("TRACES")
    if protocol == "grpc":
        return _grpc("trace_exporter", "OTLPSpanExporter")
    if protocol not in ("http/protobuf", "http"):
        raise ValueError(f"unsupported OTLP protocol {protocol!r}; expected 'http/protobuf' or 'grpc'")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def span_exporters(names: Sequence[str]) -> list[SpanExporter]:
    out: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            out.append(_otlp_span_exporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            # The stdout of now, not of import time (it may have been redirected since).
            out.append(ConsoleSpanExporter(out=sys.stdout))
        else:
            raise ValueError(f"unsupported span exporter {name!r} in OTEL_TRACES_EXPORTER; use otlp, console or none")
    return out


def tracer_provider_from_env(
    count: Counter,
    *,
    exporters: Sequence[SpanExporter] | None = None,
    max_attribute_length: int | None = None,
    max_export_bytes: int = DEFAULT_MAX_EXPORT_BYTES,
) -> TracerProvider:
    """A tracer provider with one bounded batch processor per exporter (default: ``OTEL_TRACES_EXPORTER``).

    Attribute values are cut at ``max_attribute_length`` (default ``export_size.attribute_length()``),
    and each export request is kept under ``max_export_bytes``.
    """
    # No SDK exit hook: its shutdown waits on a down or hanging endpoint for a minute or more.
    # The exporter that owns this provider shuts it down itself, within its own bound.
    provider = TracerProvider(
        resource=default_resource(), span_limits=span_limits(max_attribute_length), shutdown_on_exit=False
    )
    if exporters is None:
        exporters = span_exporters(exporter_names("TRACES", "otlp"))
    for exporter in exporters:
        provider.add_span_processor(BoundedBatchSpanProcessor(exporter, count, max_export_bytes=max_export_bytes))
    return provider


# -- metrics --------------------------------------------------------------------------------


def metric_readers(names: Sequence[str]) -> list[MetricReader]:
    readers: list[MetricReader] = []
    for name in names:
        if name == "otlp":
            if _protocol("METRICS") == "grpc":
                readers.append(PeriodicExportingMetricReader(_grpc("metric_exporter", "OTLPMetricExporter")))
            else:
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

                readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "console":
            from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stdout)))
        else:
            raise ValueError(
                f"unsupported metric exporter {name!r} in OTEL_METRICS_EXPORTER; use otlp, console or none"
            )
    return readers


def meter_provider_from_env() -> MeterProvider | None:
    """A meter provider when the environment asks for metrics somewhere; None when it does not.

    Metrics nobody collects are work on the hot path for nothing, so without an
    explicit ``OTEL_METRICS_EXPORTER`` or an OTLP endpoint no provider is built.
    """
    explicit = "OTEL_METRICS_EXPORTER" in os.environ
    if not explicit and not otlp_endpoint_configured("METRICS"):
        return None
    readers = metric_readers(exporter_names("METRICS", "otlp"))
    if not readers:
        return None
    return MeterProvider(resource=default_resource(), metric_readers=readers, shutdown_on_exit=False)


def global_sdk_tracer_provider() -> TracerProvider | None:
    from opentelemetry import trace

    provider: Any = trace.get_tracer_provider()
    return provider if isinstance(provider, TracerProvider) else None


def global_sdk_meter_provider() -> MeterProvider | None:
    from opentelemetry import metrics

    provider: Any = metrics.get_meter_provider()
    return provider if isinstance(provider, MeterProvider) else None


# -- export failures that repeat ------------------------------------------------------------------

METRICS_LOGGER = "opentelemetry.exporter.otlp.proto.http.metric_exporter"
_FAILED_WITH_STATUS = "Failed to export %s batch code: %s, reason: %s"


class RepeatedFailureFilter(logging.Filter):
    """Lets the OTLP exporter's "failed with HTTP status N" through once per status, then drops repeats.

    A backend that takes traces but not metrics (Phoenix answers 405) would otherwise log
    the same error at every periodic export, for the life of the process.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[Any, int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != _FAILED_WITH_STATUS or not isinstance(record.args, tuple) or len(record.args) < 2:
            return True
        kind, status = record.args[0], record.args[1]
        with self._lock:
            times = self.seen[status] = self.seen.get(status, 0) + 1
        if times > 1:
            return False
        hint = " (the endpoint does not accept them)" if status in (404, 405, 415, 501) else ""
        record.msg = "OTLP %s export refused with HTTP %s%s: %s; later failures with this status are not logged"
        record.args = (kind, status, hint, record.args[2] if len(record.args) > 2 else "")
        return True


def quiet_repeated_failures(logger_name: str = METRICS_LOGGER) -> RepeatedFailureFilter:
    """Install a ``RepeatedFailureFilter`` on ``logger_name``; remove it with ``logger.removeFilter``."""
    found = RepeatedFailureFilter()
    logging.getLogger(logger_name).addFilter(found)
    return found
