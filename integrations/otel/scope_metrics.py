"""Duration histograms that integrations ask for by name: a scope's own (through its span hints),
and a measure reported as a ``relay.metric`` mark (a session's length, which is no scope).

Only the names in ``DURATIONS`` are made, with the conventions' units and buckets, so caller data
can never create instruments; attributes are what the integration chose as safe for metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry.metrics import Histogram, MeterProvider

from relay_runtime.events import Event

from . import attributes as A
from . import hints as H

# The MCP conventions' bucket boundaries for operation and session durations, in seconds.
_MCP_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
DURATIONS: dict[str, str] = {
    "mcp.client.operation.duration": "The duration of the MCP request or notification as observed on the sender.",
    "mcp.server.operation.duration": "MCP request or notification duration as observed on the receiver.",
    "mcp.client.session.duration": "The duration of the MCP session as observed on the MCP client.",
    "mcp.server.session.duration": "The duration of the MCP session as observed on the MCP server.",
}
_PRIMITIVES = (str, bool, int, float)


class ScopeMetrics:
    def __init__(self, meter_provider: MeterProvider, version: str) -> None:
        self._meter = meter_provider.get_meter("relay_runtime.otel", version)
        self._histograms: dict[str, Histogram] = {}
        self._lock = threading.Lock()

    def _histogram(self, name: str) -> Histogram | None:
        histogram = self._histograms.get(name)
        if histogram is None and name in DURATIONS:
            with self._lock:
                histogram = self._histograms.get(name)
                if histogram is None:
                    histogram = self._histograms[name] = self._meter.create_histogram(
                        name, unit="s", description=DURATIONS[name], explicit_bucket_boundaries_advisory=_MCP_BUCKETS
                    )
        return histogram

    def record(self, name: object, seconds: object, attributes: object) -> bool:
        clean = (
            {k: v for k, v in attributes.items() if isinstance(k, str) and isinstance(v, _PRIMITIVES)}
            if isinstance(attributes, Mapping)
            else {}
        )
        return self._record(name, seconds, clean)

    def _record(self, name: object, seconds: object, clean: dict[str, Any]) -> bool:
        """``record`` with its attributes cleaned already (str keys, primitive values)."""
        if not isinstance(name, str) or not isinstance(seconds, (int, float)) or seconds < 0:
            return False
        histogram = self._histogram(name)
        if histogram is None:
            return False
        histogram.record(float(seconds), clean)
        return True

    def record_scope(self, hints: Mapping[str, Any], event: Event, attributes: Mapping[str, Any]) -> None:
        """A scope that asked for ``duration_metric``: its start to its end, with those of its span's
        final ``attributes`` that ``metric_keys`` names (the integration knows which are low-cardinality)."""
        name = hints.get("duration_metric")
        start = event.start_timestamp
        if name is None or not isinstance(start, int):
            return
        keys = hints.get("metric_keys") or ()
        # Picked and cleaned in one pass (a scope's end pays it): what ``record`` would keep of the picked ones.
        clean = {
            k: v for k in keys if k in attributes and isinstance(k, str) and isinstance(v := attributes[k], _PRIMITIVES)
        }
        self._record(name, (event.timestamp - start) / 1e9, clean)

    def record_sampled_out(self, event: Event, role: str) -> bool:
        """The duration metric the end of a sampled-out scope asked for (an MCP request whose caller did not
        sample its trace): the sampler decides which spans are kept, never what the metrics count.
        False when its attributes could not be read."""
        hints = H.span_hints(event.metadata)
        if hints is None:
            return True
        try:
            attributes = A.end_attributes(event, role)
            H.apply_hints(hints, "", attributes)
            self.record_scope(hints, event, attributes)
        except Exception:
            return False
        return True

    def record_mark(self, event: Event) -> bool:
        data = event.data
        if not isinstance(data, Mapping):
            return False
        return self.record(data.get("name"), data.get("seconds"), data.get("attributes"))
