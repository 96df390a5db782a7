"""An exporter's life around its spans: attached to relays, counting its losses, shut down in bounded time.

These are ``OTelExporter``'s methods (``exporter.py`` manages the spans themselves). Shutting down
ends what is still open as abandoned, flushes, shuts down the providers the exporter built, and
detaches last, so losses counted while flushing still reach the relays. The SDK's flush and
shutdown wait on the network with no bound of their own; here they get ``shutdown_timeout``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from relay_runtime.attach import Attachment, detach_all
from relay_runtime.trace_context import register_carrier_provider, unregister_carrier_provider

from . import one_span, propagation
from .providers import METRICS_LOGGER, BoundedBatchSpanProcessor

if TYPE_CHECKING:
    from .exporter import OTelExporter

SHUTDOWN_TIMEOUTS = "otel.shutdown_timeouts"

logger = logging.getLogger("relay_runtime.integrations.otel")


def attach(exporter: OTelExporter, target: Any, *, name: str = "otel", propagate_context: bool = False) -> OTelExporter:
    """Export what ``target`` runs: a ``Relay``, a session host, or ``SESSION_COORDINATOR``.

    A host (or the coordinator: every host it has and will have) also gets its managed
    execution retained, so LLM calls in its turns become spans. ``detach()`` undoes it.
    ``propagate_context``: also add the attempt's ``traceparent`` (and whatever
    else ``OTEL_PROPAGATORS`` injects) to ``LLMRequest.headers`` of every call.
    When another instrumentation of the provider SDKs is on (or ``defer_to_other_instrumentation``),
    each call keeps one client span (``one_span.py``): instrument the other library before this.
    """
    one = exporter.defer_to_other_instrumentation or one_span.others_active()
    if one and not exporter.defer_to_other_instrumentation and exporter.tracer_provider is not None:
        one_span.filter_pipeline(exporter.tracer_provider, exporter.count)

    def connect(relay: Any) -> None:
        relay.subscribers.register(exporter, name=name, kinds=exporter.KINDS)
        if propagate_context:
            propagation.install(exporter, relay, name=f"{name}.trace_context")
        if one:
            one_span.install(exporter, relay, name=f"{name}.one_span")

    def disconnect(relay: Any) -> None:
        relay.subscribers.deregister(name)
        if propagate_context:
            propagation.uninstall(relay, name=f"{name}.trace_context")
        if one:
            one_span.uninstall(relay, name=f"{name}.one_span")

    exporter._attachments.append(Attachment(target, name, connect, disconnect))
    # Requests that integrations send out of the process (MCP) carry our span's context.
    # ``fresh``: ``_carrier`` builds a new dict per call (plain_carrier's or the propagators'), no copy needed.
    register_carrier_provider(exporter._carrier, fresh=True)
    return exporter


def detach(exporter: OTelExporter) -> None:
    """Undo every ``attach``: deregister, release managed execution, stop following new hosts."""
    unregister_carrier_provider(exporter._carrier)
    detach_all(exporter._attachments)


def count(exporter: OTelExporter, key: str, n: int = 1) -> None:
    """Count ``n`` of ``key`` here and on every relay the exporter is attached to."""
    with exporter._counts_lock:
        exporter._counts[key] += n
    for relay in [r for a in list(exporter._attachments) for r in a.relays]:
        counter = getattr(relay, "count", None)
        if counter is not None:
            try:
                counter(key, n)
            except Exception:
                pass


def diagnostics(exporter: OTelExporter) -> dict[str, int]:
    with exporter._counts_lock:
        out = dict(exporter._counts)
    out["otel.open_spans"] = len(exporter._table)
    return out


def force_flush(exporter: OTelExporter, timeout_millis: int = 30_000) -> bool:
    """Deliver what has been recorded; False when something did not make it within the timeout.

    Content written by reference goes first: a span sent before the file it points at is a
    reference to nothing if the process stops (a serverless function frozen after its flush).
    """
    ok = True
    if exporter._store is not None:
        ok = exporter._store.flush(timeout_millis / 1000)
    for provider in (exporter.tracer_provider, exporter.meter_provider):
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            ok = bool(flush(timeout_millis)) and ok
    return ok


def shutdown(exporter: OTelExporter, *, end_open_spans: bool = True, timeout: float | None = None) -> bool:
    """End what is still open (as abandoned), flush, shut down providers built here, then detach.

    Returns within ``timeout`` (default ``shutdown_timeout``, 5 s) whatever the backend
    does; False when flushing did not finish in time (counted as ``otel.shutdown_timeouts``,
    logged once): what was still queued then is not delivered. Detaching comes last so
    that losses counted while flushing still reach the relays.
    """
    limit = exporter.shutdown_timeout if timeout is None else timeout
    if end_open_spans:
        now = time.time_ns()
        for record in exporter._table.remove_all():
            exporter._abandon(record, now, "exporter shut down while this scope was open")
    if exporter._tail is not None:
        exporter._tail.flush()  # units that will not end here go out as they are
    if exporter._store is not None:
        exporter._store.close(limit)
    if exporter._metrics is not None:
        # Points still queued for the SDK are recorded before the flush reads them.
        exporter._metrics.close()
    owned, exporter._owned = exporter._owned, []
    done = threading.Event()

    def flush_and_close() -> None:
        try:
            exporter.force_flush(int(limit * 1000))
            for provider in owned:
                try:
                    provider.shutdown()
                except Exception:
                    exporter.count("otel.shutdown_errors")
        finally:
            done.set()

    # On a daemon thread that this call waits for no longer than the limit.
    worker = threading.Thread(target=flush_and_close, name="relay-otel-shutdown", daemon=True)
    worker.start()
    finished = done.wait(limit)
    if not finished:
        exporter.count(SHUTDOWN_TIMEOUTS)
        logger.warning(
            "OTel exporter shutdown gave up after %.1fs: the backend is down, refusing or not answering; "
            "%d spans still queued are not delivered",
            limit,
            _pending_spans(exporter),
        )
    if exporter._at_exit is not None:
        atexit.unregister(exporter._at_exit)
        exporter._at_exit = None
    if exporter._log_filter is not None:
        logging.getLogger(METRICS_LOGGER).removeFilter(exporter._log_filter)
        exporter._log_filter = None
    exporter.detach()
    return finished


def _pending_spans(exporter: OTelExporter) -> int:
    processor = getattr(exporter.tracer_provider, "_active_span_processor", None)
    inner = getattr(processor, "_span_processors", ())
    return sum(p.pending for p in inner if isinstance(p, BoundedBatchSpanProcessor))
