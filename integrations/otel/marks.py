"""A mark on an exporter's spans: an event on its scope's span, and the metrics some marks carry.

This is ``OTelExporter``'s method (``exporter.py`` manages the spans themselves). A stream's chunk marks
make no span event (a span would hold one per token); a metric mark goes to the scope metrics; a late
charge (a call answered after its turn ended) still counts in the cost metrics, though its attempt's span
has ended. A mark's data may be content (a tool call's arguments): it goes on the event only with capture on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from relay_runtime import conventions as cv
from relay_runtime.cost import LATE_CHARGE_MARK
from relay_runtime.events import Event

if TYPE_CHECKING:
    from .exporter import OTelExporter

CONTENT_ERRORS = "otel.content_errors"


def on_mark(exporter: OTelExporter, event: Event) -> None:
    if event.name == cv.CHUNK:
        return
    if event.name == cv.METRIC:
        if exporter._scope_metrics is not None:
            exporter._scope_metrics.record_mark(event)
        return
    if event.name == LATE_CHARGE_MARK and exporter._metrics is not None:
        exporter._metrics.record_late_charge(event)
    record = exporter._table.get(event.parent_uuid)
    if record is None:
        return
    attributes: dict[str, Any] = {}
    if event.metadata:
        attributes.update(
            (f"relay.{k}", v) for k, v in event.metadata.items() if isinstance(v, (str, int, float, bool))
        )
    if exporter._content is not None and isinstance(event.data, Mapping):
        try:
            exporter._content.mark_data(event.data, attributes)
        except Exception:
            exporter.count(CONTENT_ERRORS)  # a failing hook costs the data, never the event
    record.span.add_event(event.name, attributes, timestamp=event.timestamp)
