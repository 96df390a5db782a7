"""``OTelExporter``: a relay subscriber that turns scopes into OpenTelemetry spans and metrics.

One span per scope, started and ended at the scope's own nanosecond
timestamps, parented by ``parent_uuid``. Attribute extraction lives in
``attributes.py`` / ``content.py``; this module only manages spans.

Every span ends exactly once: by its scope's end event, or, when a turn or a
conversation ends while scopes below it are still open (the caller crashed,
a stream was abandoned), by that ancestor's end, with an error status. A later
end event for such a span is ignored.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider, set_span_in_context

from relay_runtime import conventions as cv
from relay_runtime.attach import Attachment
from relay_runtime.events import MARK, SCOPE_END, SCOPE_START, Event

from . import attributes as A
from . import hints as H
from . import lifecycle, marks, one_span, propagation, span_content, span_context
from . import openinference as OI
from .capture import DetailsEvents, as_events, capture_mode, mode_from_env, on_spans
from .content import ContentRecorder, Redactor
from .content_store import ContentStore, Write, store_from_env
from .deferred import DeferredSpan, fast_path_for
from .error_quotes import record_error, sent, unquoted
from .export_size import DEFAULT_MAX_EXPORT_BYTES, attribute_length, check_max_bytes
from .lifecycle import SHUTDOWN_TIMEOUTS as SHUTDOWN_TIMEOUTS
from .metrics import GenAIMetrics
from .providers import (
    global_sdk_meter_provider,
    global_sdk_tracer_provider,
    meter_provider_from_env,
    quiet_repeated_failures,
    sdk_disabled,
    tracer_provider_from_env,
)
from .scope_metrics import ScopeMetrics
from .spans import OpenSpan, SpanTable
from .start_plans import StartPlans
from .tail_sampling import TailBuffer, TailSampler
from .unsent import retract
from .voice import MEASURES_KEY as VOICE_MEASURES
from .voice import VoiceMetrics, voice_attributes

VERSION = "0.1.0"
INSTRUMENTATION_NAME = "relay_runtime.otel"

ABANDONED = "abandoned"
ABANDONED_ERROR = "relay.abandoned"

SPANS_ABANDONED = "otel.spans_abandoned"
UNMATCHED_ENDS = "otel.unmatched_ends"
ATTRIBUTE_ERRORS = "otel.attribute_errors"
CONTENT_ERRORS = marks.CONTENT_ERRORS
DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0


_SWEEPING_ROLES = frozenset({A.CONVERSATION, A.TURN, A.AGENT})
_SPAN_KINDS = A.SPAN_KINDS
_EMPTY_CONTEXT = Context()
_SPAN_HINTS = cv.SPAN_HINTS
_KIND = cv.KIND
_ROLE_BY_KIND = A.ROLE_BY_KIND
_ATTEMPT = A.ATTEMPT
_new_record = object.__new__


class OTelExporter:
    """Subscriber: ``relay.subscribers.register(OTelExporter(...), kinds=OTelExporter.KINDS)``.

    ``tracer_provider`` / ``meter_provider``: used as given (the caller owns their
    processors and their shutdown). When None: the global SDK provider if the
    application set one, else a provider built from the ``OTEL_*`` environment,
    which this exporter owns and shuts down in ``shutdown()``.

    ``conventions``: ``("gen_ai",)`` or ``("gen_ai", "openinference")``.
    ``capture_content`` (or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``): ``False`` /
    ``"NO_CONTENT"``, ``True`` / ``"SPAN_ONLY"`` (span attributes), ``"EVENT_ONLY"`` (the
    ``gen_ai.client.inference.operation.details`` log record, through ``logger_provider`` or the
    global one), ``"SPAN_AND_EVENT"``; content passes ``redact(attribute, value) -> value | None``.
    ``link_to_current_context``: a root scope becomes a child of the OTel span active
    where it starts (an incoming HTTP request's, say).
    ``span_exporters``: instead of a tracer provider, build one here around these
    exporters, each behind a bounded batch processor whose drops are counted.
    ``fast_path``: with an SDK ``TracerProvider`` whose processors all ignore span starts,
    build each span whole at its end (``deferred.py``); False always uses the SDK's ``Span``.
    ``sampler``: a ``TailSampler``: spans are held per turn and exported or dropped together
    (``tail_sampling.py``); metrics are never sampled.
    ``shutdown_timeout``: how long ``shutdown()`` (and so the process's exit, for providers
    built here) may wait for a backend that is down, refusing or not answering.
    ``defer_to_other_instrumentation``: with ``opentelemetry-instrumentation-openai-v2`` or OpenInference
    also instrumenting the SDK, their client span is the call's one span instead of ours (``one_span.py``).
    ``max_attribute_length``: attribute values (captured content included) are cut at this many
    characters (default: ``OTEL_[SPAN_]ATTRIBUTE_VALUE_LENGTH_LIMIT``, else 32 KiB); content is cut
    before it is serialised, so a huge prompt is never copied whole. ``max_export_bytes``: providers
    built here send each batch as requests estimated under this size (default 3 MiB).
    """

    KINDS = ("scope_start", "scope_end", "mark")

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        conventions: Iterable[str] = (A.GEN_AI,),
        capture_content: bool | str = False,
        logger_provider: Any = None,
        sampler: TailSampler | None = None,
        content_store: str | None = None,
        redact: Redactor | None = None,
        link_to_current_context: bool = True,
        max_open_spans: int = 10_000,
        span_exporters: Sequence[SpanExporter] | None = None,
        fast_path: bool = True,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
        max_attribute_length: int | None = None,
        max_export_bytes: int = DEFAULT_MAX_EXPORT_BYTES,
        defer_to_other_instrumentation: bool = False,
    ) -> None:
        if not isinstance(shutdown_timeout, int | float) or not 0 < shutdown_timeout < float("inf"):
            raise ValueError(f"shutdown_timeout must be a positive number of seconds, got {shutdown_timeout!r}")
        self.shutdown_timeout = float(shutdown_timeout)
        self.max_attribute_length = attribute_length(max_attribute_length)
        check_max_bytes(max_export_bytes)
        sizes: dict[str, Any] = {
            "max_attribute_length": self.max_attribute_length,
            "max_export_bytes": max_export_bytes,
        }
        wanted = tuple(conventions)
        unknown = set(wanted) - A.KNOWN_CONVENTIONS
        if unknown or A.GEN_AI not in wanted:
            raise ValueError(
                f"conventions must include 'gen_ai' and be among {sorted(A.KNOWN_CONVENTIONS)}, got {list(wanted)}"
            )
        if redact is not None and not callable(redact):
            raise TypeError(f"redact must be callable, got {type(redact).__name__}")
        self.conventions = wanted
        self.defer_to_other_instrumentation = bool(defer_to_other_instrumentation)
        # Attempts whose span is left to another instrumentation (their ends only feed the metrics).
        self._deferred: set[str] = set()
        self._oi = A.OPENINFERENCE in wanted
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._attachments: list[Attachment] = []  # what attach() connected; detach() undoes them
        self._owned: list[Any] = []  # providers built here, shut down here
        self._log_filter: logging.Filter | None = None
        self._disabled = tracer_provider is None and span_exporters is None and sdk_disabled()

        if span_exporters is not None:
            if tracer_provider is not None:
                raise ValueError("pass either tracer_provider or span_exporters, not both")
            tracer_provider = tracer_provider_from_env(self.count, exporters=span_exporters, **sizes)
            self._owned.append(tracer_provider)
        elif tracer_provider is None and not self._disabled:
            tracer_provider = global_sdk_tracer_provider()
            if tracer_provider is None:
                tracer_provider = tracer_provider_from_env(self.count, **sizes)
                self._owned.append(tracer_provider)
        if meter_provider is None and not self._disabled:
            meter_provider = global_sdk_meter_provider()
            if meter_provider is None:
                meter_provider = meter_provider_from_env()
                if meter_provider is not None:
                    self._owned.append(meter_provider)
                    # A backend that takes no metrics says so once, not at every export.
                    self._log_filter = quiet_repeated_failures()
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self._tracer = (tracer_provider or trace_api.NoOpTracerProvider()).get_tracer(INSTRUMENTATION_NAME, VERSION)
        self._fast = fast_path_for(self._tracer) if fast_path else None
        self._metrics = GenAIMetrics(meter_provider, VERSION) if meter_provider is not None else None
        self._voice = VoiceMetrics(meter_provider, VERSION) if meter_provider is not None else None
        self._scope_metrics = ScopeMetrics(meter_provider, VERSION) if meter_provider is not None else None
        # An explicit choice wins over the environment's; bad values are an error here, not later.
        self.capture_mode = capture_mode(capture_content) if capture_content is not False else mode_from_env()
        recorder = ContentRecorder(redact, self._oi, max_length=self.max_attribute_length)
        self._recorder = recorder
        self._content = recorder if on_spans(self.capture_mode) else None
        store = content_store if content_store is not None else store_from_env()
        captured = on_spans(self.capture_mode) or as_events(self.capture_mode)
        self._store = ContentStore(store, self.count) if store and captured and not self._disabled else None
        self._events = (
            DetailsEvents(logger_provider, recorder, VERSION, INSTRUMENTATION_NAME)
            if as_events(self.capture_mode) and not self._disabled
            else None
        )
        if sampler is not None and not isinstance(sampler, TailSampler):
            raise TypeError(f"sampler must be a TailSampler, got {type(sampler).__name__}")
        self._tail = TailBuffer(sampler, self.count) if sampler is not None else None
        self._link = link_to_current_context
        self._table = SpanTable(max_open_spans)
        self._plans = StartPlans()
        if type(self).__call__ is OTelExporter.__call__:  # a subclass's own __call__ is called as it is
            # Each kind's method called by the relay's delivery itself (``subscribers.KIND_HANDLERS``): no
            # dispatch on the kind per event, and a call less.
            self.relay_kind_handlers = {SCOPE_START: self._start, SCOPE_END: self._end, MARK: self._mark}
        self._at_exit: Callable[[], None] | None = None
        if self._owned:
            # The SDK's own exit hooks are off for providers built here (they wait without bound).
            self._at_exit = self._shutdown_at_exit
            atexit.register(self._at_exit)

    # -- the subscriber ------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == SCOPE_START:
            self._start(event)
        elif kind == SCOPE_END:
            self._end(event)
        elif kind == MARK:
            self._mark(event)

    def _start(self, event: Event) -> None:
        if self._disabled:
            return
        parent = self._table.get(event.parent_uuid)
        md = event.metadata
        # ``A.role_of(event)``'s first rule written out (a call less per span): a scope that says its kind.
        said = md.get(_KIND) if md else None
        role = _ROLE_BY_KIND.get(said) if type(said) is str else None
        if role is None:
            role = A.role_of(event)
        if role == _ATTEMPT and self.defer_to_other_instrumentation and one_span.others_active():
            self._deferred.add(event.uuid)
            return
        if parent is not None:
            conversation_id = parent.conversation_id
            parent_span: Span | None = parent.span
            context = parent.context  # made below only if the span path needs it
        else:
            conversation_id = None
            # A root here may continue a trace begun in another process (an MCP server's request):
            # its remote parent is the span's parent (a context is made below only if one is needed).
            parent_span = H.remote_parent(md)
            context = None if self._link or parent_span is not None else _EMPTY_CONTEXT
        if conversation_id is None:
            sid = md.get(cv.SESSION_ID) if md else None
            if isinstance(sid, str) and sid:
                conversation_id = sid
        # ``H.span_hints(md)`` for a role that takes hints, written out: a call less per span.
        hints = md.get(_SPAN_HINTS) if md and role is not _ATTEMPT else None
        if hints is not None and type(hints) is not dict and not isinstance(hints, Mapping):
            hints = None
        plan = self._plans.plans.get(id(hints)) if hints is not None else None
        if plan is not None and (
            plan[0] is not hints
            or plan[1] is not role
            or plan[2] != event.name
            or plan[3] != conversation_id
            # A metadata of nothing but these hints and the kind the role was read from (``start_plans``).
            or len(md) != 1 + (said is not None)
        ):
            plan = None
        if plan is not None:
            # Made before from these very hints (``start_plans``): a copy, which the span makes its own.
            name, kind, attributes = plan[4], plan[5], dict(plan[6])
            plain = plan[7] and self._content is None  # nothing is added to them below
        else:
            plain = False
            plannable = not self._oi
            try:
                name, attributes = A.span_start(event, role, conversation_id)
                if self._oi:
                    attributes.update(OI.start_attributes(event, role, conversation_id))
            except Exception:
                # Odd data costs attributes, never the span.
                self.count(ATTRIBUTE_ERRORS)
                name, attributes = str(event.name), {}
                plannable = False
            kind = _SPAN_KINDS[role]
            if hints is not None:
                name = H.apply_hints(hints, name, attributes)
                kind = H.hinted_kind(hints, kind)
                if plannable:
                    self._plans.keep(hints, event, role, conversation_id, name, kind, attributes)
        if self._content is not None:
            # By reference, an attempt's content is written once, at its end.
            at_start = self._content.attempt_start if self._store is None else span_content.no_content
            self._content_attributes(at_start, self._content.tool_start, event, role, attributes)
        fast = self._fast
        if fast is not None and fast.multi._span_processors is not fast.processors:  # see FastPath
            fast = self._fast = fast_path_for(self._tracer)
        if fast is not None:
            span = fast.start_span(name, parent_span, context, kind, attributes, event.timestamp, plain)
        else:
            if parent is not None and context is None:
                # One context per parent, made when its first child starts: most spans are leaves.
                context = parent.context = set_span_in_context(parent.span)
            elif parent_span is not None:
                context = set_span_in_context(parent_span)
            span = self._tracer.start_span(
                name,
                context=context,
                kind=kind,
                attributes=attributes,
                start_time=event.timestamp,
            )
        # ``OpenSpan(...)``'s fields set here: a class call with an ``__init__`` costs every span a frame.
        record = _new_record(OpenSpan)
        record.uuid = event.uuid
        record.span = span
        record.role = role
        record.parent = parent
        record.conversation_id = conversation_id
        record.children = record.context = None
        record.hints = hints
        # Its input read only if the scope fails: reading it makes the record of it.
        record.given = event if self._content is None and role is not _ATTEMPT else None
        record.late = role is _ATTEMPT and event.annotated_request is None and event.provider is None
        try:
            evicted = self._table.add(record)
        except ValueError:
            # The same scope started twice: keep the first span, end this one unrecorded.
            span.end(end_time=event.timestamp)
            self.count("otel.duplicate_starts")
            return
        for record in evicted:
            self._abandon(record, event.timestamp, "evicted: too many open spans")

    def _end(self, event: Event) -> None:
        record, orphans = self._table.remove(event.uuid, _SWEEPING_ROLES)
        if record is None and self._deferred and event.uuid in self._deferred:
            self._deferred.discard(event.uuid)
            if self._metrics is not None:
                self._metrics.record_attempt(event, A.error_type(event))
            return
        if record is None:
            if not self._disabled:
                self.count(UNMATCHED_ENDS)
                if self._metrics is not None and A.role_of(event) == _ATTEMPT:
                    # Its span ended early (evicted, say) or began before we attached: the call still
                    # happened, and its one end event is the only place it is counted.
                    self._metrics.record_attempt(event, A.error_type(event))
            return
        role = record.role
        md = event.metadata
        voice = md.get(VOICE_MEASURES) if md else None  # one lookup: most ends carry no voice measures
        if voice is not None and self._voice is not None:
            self._voice.record(voice)
        for orphan in orphans:
            self._abandon(orphan, event.timestamp, f"{role} scope ended while this scope was open")
        span = record.span
        if (span._end_time is not None) if type(span) is DeferredSpan else not span.is_recording():
            # Sampled out: nothing set on it would be kept; only the metrics still count it.
            if role == _ATTEMPT and self._metrics is not None:
                self._metrics.record_attempt(event, A.error_type(event))
            elif self._scope_metrics is not None and not self._scope_metrics.record_sampled_out(event, role):
                self.count(ATTRIBUTE_ERRORS)
            span.end(end_time=event.timestamp)
            return
        try:
            if record.late:
                attributes = self._late_start(record, event)
                attributes.update(A.end_attributes(event, role))
            else:
                attributes = A.end_attributes(event, role)  # a new dict at every call: ours to add to
            if voice is not None:
                voice_attributes(voice, attributes)
            if self._oi:
                attributes.update(OI.end_attributes(event, role))
            hints = md.get(_SPAN_HINTS) if md and role is not _ATTEMPT else None  # ``H.span_hints``, as at the start
            if hints is not None and (type(hints) is dict or isinstance(hints, Mapping)):
                if hints is record.hints:
                    # Unchanged since the start, whose attributes the span has: only what this end's
                    # own attributes would overwrite is set again (metrics read them all).
                    H.apply_hints(hints, "", attributes, only=attributes if self._scope_metrics is None else None)
                elif self._scope_metrics is None and record.hints is not None:
                    # New hints at the end (an MCP request's id): what the start set stays as it is.
                    H.apply_changed(hints, attributes, record.hints.get("attributes"))
                else:
                    H.apply_hints(hints, "", attributes)
                if self._scope_metrics is not None:
                    self._scope_metrics.record_scope(hints, event, attributes)
        except Exception:
            # The span was taken out of the table: it must still end, once.
            self.count(ATTRIBUTE_ERRORS)
            attributes = {}
        refs = None
        held: list[Write] | None = None
        if self._store is not None and role == _ATTEMPT:
            # Behind a sampler the files wait for its answer: a dropped trace's content is never written.
            held = [] if self._tail is not None else None
            try:
                refs = self._store.references(event, self._recorder, held)
            except Exception:
                self.count(CONTENT_ERRORS)
                refs = {}
            if self._content is not None:
                attributes.update(refs)
        elif self._content is not None:
            self._content_attributes(self._content.attempt_end, self._content.tool_end, event, role, attributes)
        details = None
        if self._events is not None and role == _ATTEMPT:
            try:
                details = self._events.prepare(event, span, refs)
            except Exception:
                self.count(CONTENT_ERRORS)
            if details is not None and self._tail is None:
                self._emit(details)
                details = None
        if role == _ATTEMPT and md and md.get(cv.SENT) is False:
            retract(span)  # the SDK refused before sending: no provider call to claim
        err = attributes.get("error.type")
        # The usual end of a span of ours: these attributes merged as it ends (``DeferredSpan.end_with``).
        last = span if err is None and self._tail is None and type(span) is DeferredSpan else None
        if attributes and last is None:
            span.set_attributes(attributes)
        if err is not None:
            message = event.error_message or ""
            if self._content is None:  # spans carry no content
                message = unquoted(message, *sent(event.annotated_request)) if role == _ATTEMPT else (
                    unquoted(message, record.given.input if record.given is not None else None)
                )  # fmt: skip
            record_error(span, str(err), message, self.max_attribute_length, event.timestamp)
        if role == _ATTEMPT and self._metrics is not None:
            self._metrics.record_attempt(event, err)
        if self._tail is not None:
            # Ended (or dropped) with the rest of its trace, and its content files and details log record with it.
            then = functools.partial(self._kept, held, details) if held or details is not None else None
            self._tail.finish(record, event.timestamp, event, then=then)
            return
        if last is not None:
            last.end_with(attributes, event.timestamp)
        else:
            span.end(event.timestamp)  # positional: a keyword call costs more, on every span

    def _kept(self, held: list[Write] | None, details: Callable[[], None] | None) -> None:
        """What goes out with a span its sampler keeps: its content files, then its details log record."""
        if held and self._store is not None:
            self._store.submit(held)
        if details is not None:
            self._emit(details)

    def _emit(self, details: Callable[[], None]) -> None:
        try:
            details()
        except Exception:
            self.count(CONTENT_ERRORS)

    def _abandon(self, record: OpenSpan, end_ns: int, reason: str) -> None:
        span = record.span
        span.set_attributes({"relay.outcome": ABANDONED, "error.type": ABANDONED_ERROR})
        span.set_status(Status(StatusCode.ERROR, reason))
        if self._tail is not None:
            self._tail.finish(record, end_ns, None, fired=True)  # an error: kept by the keep-errors rule
        else:
            span.end(end_time=end_ns)
        self.count(SPANS_ABANDONED)

    # -- an open scope's span as trace context for what runs under it: ``span_context.py`` ----------

    span_for = span_context.span_for
    context_for = span_context.context_for
    traceparent_for = span_context.traceparent_for
    headers_for = span_context.headers_for

    # -- a mark: an event on its scope's span, and the metrics it carries: ``marks.py`` ----------

    _mark = marks.on_mark

    # -- a scope's content on its span, and an attempt witnessed late: ``span_content.py`` -----------

    _late_start = span_content.late_start
    _content_attributes = span_content.content_attributes

    # -- attaching, counting, shutting down: ``lifecycle.py`` ----------------------------------

    attach = lifecycle.attach
    detach = lifecycle.detach
    count = lifecycle.count
    diagnostics = lifecycle.diagnostics
    force_flush = lifecycle.force_flush
    shutdown = lifecycle.shutdown

    def _shutdown_at_exit(self) -> None:
        self.shutdown()

    # What a request an integration sends out of the process (MCP) carries of a scope's span.
    _carrier = propagation.carrier

