"""OpenTelemetry export of relay scopes: GenAI semantic conventions, optional OpenInference.

    from relay_runtime.integrations.otel import OTelExporter
    exporter = OTelExporter(tracer_provider, meter_provider).attach(SESSION_COORDINATOR)  # or a host, a Relay

or, from the ``OTEL_*`` environment (console and/or OTLP):

    exporter = relay_runtime.integrations.otel.setup_from_env(relay, console=True)
"""

from __future__ import annotations

import os
from typing import Any

from .capture import CAPTURE_ENV, DETAILS_EVENT, EVENT_ONLY, NO_CONTENT, SPAN_AND_EVENT, SPAN_ONLY
from .content import Redactor
from .export_size import SizeLimitedSpanExporter
from .exporter import OTelExporter
from .providers import BoundedBatchSpanProcessor, exporter_names, otlp_endpoint_configured, span_exporters
from .tail_sampling import TailSampler

__all__ = [
    "CAPTURE_ENV",
    "DETAILS_EVENT",
    "EVENT_ONLY",
    "NO_CONTENT",
    "SPAN_AND_EVENT",
    "SPAN_ONLY",
    "BoundedBatchSpanProcessor",
    "OTelExporter",
    "Redactor",
    "SizeLimitedSpanExporter",
    "TailSampler",
    "setup_from_env",
]


def setup_from_env(
    relay: Any, *, console: bool = False, propagate_context: bool = False, **options: Any
) -> OTelExporter:
    """An exporter attached to ``relay`` (a Relay, a host or SESSION_COORDINATOR), exporting where the environment says.

    Spans go to the console when ``console`` is true (or ``OTEL_TRACES_EXPORTER``
    names ``console``), and over OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the
    traces-specific variable) is set or ``OTEL_TRACES_EXPORTER`` names ``otlp``.
    Metrics follow ``OTEL_METRICS_EXPORTER`` / the OTLP endpoint. ``options`` go to
    ``OTelExporter`` (``conventions``, ``capture_content``, ``redact``, ...);
    ``propagate_context`` sends each attempt's ``traceparent`` with its request.
    Call ``exporter.shutdown()`` at exit to flush.
    """
    if "OTEL_TRACES_EXPORTER" in os.environ:
        names = exporter_names("TRACES", "otlp")
    elif otlp_endpoint_configured("TRACES"):
        names = ["otlp"]
    else:
        names = []
    if console and "console" not in names:
        names.append("console")
    exporter = OTelExporter(span_exporters=span_exporters(names), **options)
    return exporter.attach(relay, propagate_context=propagate_context)
