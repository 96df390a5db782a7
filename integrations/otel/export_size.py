"""Keeping OTLP requests under the size a collector accepts.

Two bounds, both on by default in the providers the exporter builds:

- every attribute value is cut at ``max_attribute_length`` characters (``DEFAULT_ATTRIBUTE_LENGTH``,
  or the SDK's ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` / ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT``
  when set), message content included: one 10 MiB prompt makes one bounded span;
- a batch is sent as several requests, each estimated under ``max_bytes`` (``DEFAULT_MAX_EXPORT_BYTES``,
  below the 4 MiB a gRPC collector takes by default): a collector that refuses one request loses
  that request's spans, never a whole batch of unrelated ones.

A user's own ``TracerProvider`` gets both with ``SpanLimits(max_attribute_length=...)`` and a
``SizeLimitedSpanExporter`` around its exporter (README).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

DEFAULT_ATTRIBUTE_LENGTH = 32 * 1024
DEFAULT_MAX_EXPORT_BYTES = 3 * 1024 * 1024
_LENGTH_ENV = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
# Upper bounds of protobuf's framing: a span's ids, times, kind, status and scope; an attribute's
# KeyValue, AnyValue and length prefixes; a request's resource and scope.
_SPAN_OVERHEAD = 256
_FIELD_OVERHEAD = 24
_REQUEST_OVERHEAD = 4096


def attribute_length(value: int | None = None) -> int:
    """The attribute value limit to apply: ``value``, else the SDK's environment variables, else the default."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"max_attribute_length must be a positive integer, got {value!r}")
        return value
    for name in _LENGTH_ENV:
        raw = os.environ.get(name, "").strip()
        if raw:
            try:
                parsed = int(raw)
            except ValueError as exc:
                raise ValueError(f"{name} must be an integer, got {raw!r}") from exc
            if parsed < 1:
                raise ValueError(f"{name} must be at least 1, got {parsed}")
            return parsed
    return DEFAULT_ATTRIBUTE_LENGTH


def span_limits(max_attribute_length: int | None = None) -> SpanLimits:
    """The SDK's span limits with the attribute value limit set (the SDK's own defaults for the rest)."""
    return SpanLimits(max_attribute_length=attribute_length(max_attribute_length))


def check_max_bytes(max_bytes: int) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1024:
        raise ValueError(f"max_export_bytes must be an integer of at least 1024, got {max_bytes!r}")
    return max_bytes


def _value_size(value: Any) -> int:
    if isinstance(value, str):
        # Characters are bytes for ASCII; otherwise at most 4 bytes each (no copy to find out).
        return len(value) if value.isascii() else 4 * len(value)
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, tuple | list):
        return sum(_value_size(item) + _FIELD_OVERHEAD for item in value)
    return 16


def _attributes_size(attributes: Any) -> int:
    if not attributes:
        return 0
    return sum(len(key) + _value_size(value) + _FIELD_OVERHEAD for key, value in attributes.items())


def estimated_size(span: ReadableSpan) -> int:
    """An upper bound of the span's size in an OTLP request (its resource aside)."""
    size = _SPAN_OVERHEAD + len(span.name) + _attributes_size(span.attributes)
    for event in span.events:
        size += _SPAN_OVERHEAD // 4 + len(event.name) + _attributes_size(event.attributes)
    for link in span.links:
        size += _SPAN_OVERHEAD // 4 + _attributes_size(link.attributes)
    if span.status is not None and span.status.description:
        size += len(span.status.description)
    return size


def split(spans: Sequence[ReadableSpan], max_bytes: int) -> Iterator[Sequence[ReadableSpan]]:
    """``spans`` in order, as consecutive parts each estimated under ``max_bytes`` (a larger span goes alone)."""
    start, size = 0, _REQUEST_OVERHEAD
    for i, span in enumerate(spans):
        one = estimated_size(span)
        if i > start and size + one > max_bytes:
            yield spans[start:i]
            start, size = i, _REQUEST_OVERHEAD
        size += one
    if start < len(spans):
        yield spans[start:]


class SizeLimitedSpanExporter(SpanExporter):
    """Exports each batch as requests estimated under ``max_bytes``; a part that fails does not stop the rest.

    Wrap the exporter a ``BatchSpanProcessor`` sends to:
    ``BatchSpanProcessor(SizeLimitedSpanExporter(OTLPSpanExporter()))``.
    """

    def __init__(self, inner: SpanExporter, max_bytes: int = DEFAULT_MAX_EXPORT_BYTES) -> None:
        self._inner = inner
        self.max_bytes = check_max_bytes(max_bytes)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = SpanExportResult.SUCCESS
        for part in split(spans, self.max_bytes):
            if self._inner.export(part) is not SpanExportResult.SUCCESS:
                result = SpanExportResult.FAILURE
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)
