"""An open scope's span as trace context, for the instrumentation and requests that run under it.

``OTelExporter``'s ``span_for``, ``context_for``, ``traceparent_for`` and ``headers_for``: functions of the
exporter here, methods there (as ``lifecycle``'s are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry import propagate
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.trace import Span

from relay_runtime.trace_context import FLAGS_TEXT

if TYPE_CHECKING:
    from .exporter import OTelExporter


def span_for(exporter: OTelExporter, scope_uuid: str) -> Span | None:
    record = exporter._table.get(scope_uuid)
    return record.span if record is not None else None


def context_for(exporter: OTelExporter, scope_uuid: str) -> Context | None:
    """An OTel context whose current span is this scope's, to parent other instrumentation."""
    span = span_for(exporter, scope_uuid)
    return trace_api.set_span_in_context(span) if span is not None else None


def traceparent_for(exporter: OTelExporter, scope_uuid: str) -> str | None:
    """The W3C ``traceparent`` of an open scope's span, or None (unknown, ended, or not sampled)."""
    span = span_for(exporter, scope_uuid)
    if span is None:
        return None
    sc = span.get_span_context()
    if not sc.is_valid:
        return None
    return traceparent(sc.trace_id, sc.span_id, sc.trace_flags)


def traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """``f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"`` for the ids of a valid span context (within 128 and 64
    bits), made at a fraction of its cost: the ids as their own bytes in hex, the flags from the core's table
    (``trace_context.FLAGS_TEXT``), where each format spec costs several hundred nanoseconds. ``propagation.carrier``
    writes it out."""
    tail = FLAGS_TEXT.get(flags) or f"-{flags:02x}"
    return f"00-{trace_id.to_bytes(16).hex()}-{span_id.to_bytes(8).hex()}{tail}"


def headers_for(exporter: OTelExporter, scope_uuid: str) -> dict[str, str]:
    """Propagation headers for an open scope through the configured propagators (``OTEL_PROPAGATORS``)."""
    context = context_for(exporter, scope_uuid)
    if context is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier
