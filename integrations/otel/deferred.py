"""Spans built whole at their end, for SDK pipelines that only look at spans once they have ended.

The exporter knows a span's start, end, parent, attributes and status only when
its scope ends. With the SDK's own ``Span`` every piece goes through its
machinery (a lock per call, attributes validated at start and again on every
update, processors told of the start). When every processor of the provider
ignores starts (the SDK's batch and simple processors, ours), nobody can see
the difference: here the ids and the sampler's decision are made at start
exactly as ``Tracer.start_span`` makes them, the rest is gathered in plain
Python, and at the end one ``ReadableSpan`` with the fields the SDK's would
carry goes to the processors' ``on_end``.

Any other setup (a processor with a real ``on_start`` or ``_on_ending``, a
concurrent multi-processor, a tracer that is not the SDK's) keeps the SDK path:
``fast_path_for`` says which.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Mapping, Sequence
from time import time_ns
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import (
    Event,
    ReadableSpan,
    SpanLimits,
    SpanProcessor,
    SynchronousMultiSpanProcessor,
    Tracer,
)
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util import types

from .fixed_samplers import static_choice as _static_choice
from .providers import BoundedBatchSpanProcessor
from .span_tuples import FLAGS, IS_VALID, MAX_SPAN_ID, MAX_TRACE_ID, TRACE_ID, TRACE_STATE, holds, new_tuple

try:  # the SDK's own span metrics (recent SDKs); without them, ``tracer._tracer_metrics`` sends to the SDK path
    from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics as _NoOpTracerMetrics
except ImportError:  # pragma: no cover
    _NoOpTracerMetrics = None  # type: ignore[assignment,misc]

# A SpanContext is a tuple; its fields are read by position here (``span_tuples``; no fast path where its
# layout moved), which costs no Python call where each of its properties costs one, on every span.
_RANDOM_BIT = TraceFlags.RANDOM_TRACE_ID
_DEFAULT_TRACE_STATE = TraceState()
_new_span = object.__new__
_NO_PARENT: Any = object()
_EMPTY_RESOURCE = Resource.get_empty()
_READABLE_FIELDS = frozenset(
    {
        "_attributes",
        "_context",
        "_end_time",
        "_events",
        "_instrumentation_info",
        "_instrumentation_scope",
        "_kind",
        "_links",
        "_name",
        "_parent",
        "_resource",
        "_start_time",
        "_status",
    }
)

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_NOT_SAMPLED_RANDOM = TraceFlags(TraceFlags.DEFAULT | TraceFlags.RANDOM_TRACE_ID)
_UNSET = Status(StatusCode.UNSET)
# Attribute values the SDK keeps exactly as given (strings too, when no length limit applies).
_PLAIN = frozenset({str, bool, int, float})
_SEQUENCES = frozenset({list, tuple})
_STRINGS = frozenset({str})
_KNOWN_TO_IGNORE_STARTS = (BatchSpanProcessor, SimpleSpanProcessor, BoundedBatchSpanProcessor)
_get_current_span = trace_api.get_current_span
_NonRecordingSpan = trace_api.NonRecordingSpan


def _ignores_starts(processor: SpanProcessor) -> bool:
    cls = type(processor)
    # Overriding with a body of ``pass`` (the SDK's batch and simple processors) is as good as
    # not overriding; only these classes themselves are taken on trust, anything else must inherit.
    if cls in _KNOWN_TO_IGNORE_STARTS:
        return True
    return cls.on_start is SpanProcessor.on_start and cls._on_ending is SpanProcessor._on_ending


class FastPath:
    """One SDK tracer's pieces, read once: what ``start_span`` and ``Span.end`` would use."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.multi: SynchronousMultiSpanProcessor = tracer.span_processor  # type: ignore[assignment]
        # Processors may be added after the exporter was built: while ``multi._span_processors``
        # is still this tuple, nothing was (the exporter checks at every start, in place: no call).
        self.processors = self.multi._span_processors
        self.limits: SpanLimits = tracer._span_limits
        metrics = tracer._tracer_metrics
        # The SDK's internal span metrics are off unless asked for: then there is nothing to call.
        self.metrics_start = None if type(metrics) is _NoOpTracerMetrics else metrics.start_span
        # Read here so that an SDK without them falls back at once rather than at a span's end.
        tracer._is_enabled  # noqa: B018
        tracer._instrumentation_scope  # noqa: B018
        BoundedAttributes._set_items  # noqa: B018
        _check_layout()
        # The last local parent a fixed sampler decided for, that sampler, and what its children get (trace id, flags,
        # trace state, decision): ``start_span``. Replaced whole, so a thread reads one set.
        self.siblings: tuple[Any, Any, Any] = (_NO_PARENT, None, None)

    def start_span(
        self,
        name: str,
        parent_span: trace_api.Span | None,
        context: Context | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        start_time: int,
        plain: bool = False,
    ) -> trace_api.Span:
        """``Tracer.start_span``'s decisions, in its order, with the same inputs to the sampler.

        The parent is ``parent_span`` when given (``context`` is then made only if the
        sampler needs one), else the span current in ``context``. ``attributes`` become the
        span's own: the caller hands them over. ``plain``: the caller knows them ``kept_as_given``.
        """
        tracer = self.tracer
        if type(parent_span) is DeferredSpan:
            current: SpanContext = parent_span._context  # the usual parent: one of ours (a SpanContext)
            siblings: tuple[Any, Any, Any] | None = self.siblings
        else:
            siblings = None  # kept for a local parent only: a remote one (a server request's) is new at every start
            current = (parent_span if parent_span is not None else _get_current_span(context)).get_span_context()
            if current is not None and not isinstance(current, SpanContext):
                raise TypeError("parent_span_context must be a SpanContext or None.")  # as the SDK's start_span
        if not tracer._is_enabled():
            return _NonRecordingSpan(current)
        parent: SpanContext | None = current
        # Looked up on the tracer each time, as its own start_span does: either may be swapped.
        ids = tracer.id_generator
        sampler = tracer.sampler
        if siblings is not None and siblings[0] is current and siblings[1] is sampler:
            # An earlier child's parent (the same span context, whose fields never change) and fixed sampler, whose
            # choice depends on nothing else: what that child got (every MCP request in a turn is a child of its span).
            trace_id, flags, trace_state, decision = siblings[2]
            given = attributes
        else:
            if parent is None or not parent[IS_VALID]:
                parent = None
                trace_id = ids.generate_trace_id()
                random_id = ids.is_trace_id_random()
            else:
                trace_id = parent[TRACE_ID]
                random_id = bool(parent[FLAGS] & _RANDOM_BIT)
            static = _static_choice(sampler, parent)
            if static is not None:
                # What the sampler would return, without asking it: a fixed decision, the parent's
                # trace state, the attributes as given (none when dropping).
                decision = static
                trace_state = parent[TRACE_STATE] if parent is not None else None
                given = attributes
            else:
                if context is None and parent_span is not None:
                    context = trace_api.set_span_in_context(parent_span)
                result = sampler.should_sample(context, trace_id, name, kind, attributes, ())
                decision = result.decision
                trace_state = result.trace_state
                given = dict(result.attributes or ())
            if decision is _RECORD_AND_SAMPLE or decision.is_sampled():
                flags = _SAMPLED_RANDOM if random_id else _SAMPLED
            else:
                flags = _NOT_SAMPLED_RANDOM if random_id else _NOT_SAMPLED
            if siblings is not None and static is not None and parent is not None:
                self.siblings = (current, sampler, (trace_id, flags, trace_state, decision))
        if type(ids) is RandomIdGenerator:
            # RandomIdGenerator.generate_span_id: a nonzero 64-bit draw from the random module's generator.
            span_id = random.getrandbits(64)
            while not span_id:
                span_id = random.getrandbits(64)
            # Such a span id is in range, and so is a valid parent's trace id (its validity says so): only a
            # root's trace id is checked, as SpanContext(...) checks both.
            valid = parent is not None or 0 < trace_id <= MAX_TRACE_ID
        else:
            span_id = ids.generate_span_id()
            valid = 0 < trace_id <= MAX_TRACE_ID and 0 < span_id <= MAX_SPAN_ID
        # What SpanContext(trace_id, span_id, is_remote=False, ...) makes, without its keyword call.
        span_context = new_tuple(
            SpanContext,
            (
                trace_id,
                span_id,
                False,
                flags,
                _DEFAULT_TRACE_STATE if trace_state is None else trace_state,
                valid,
            ),
        )
        record_end = self.metrics_start(parent, decision) if self.metrics_start is not None else None
        if decision is not _RECORD_AND_SAMPLE and not decision.is_recording():
            return _NonRecordingSpan(span_context)
        # The span's fields set here, not in an ``__init__``: a class call with one costs every span a frame.
        span: DeferredSpan = _new_span(DeferredSpan)
        span._path = self
        span._name = name
        span._context = span.context = span_context  # type: ignore[misc]
        span._parent = parent
        span._kind = kind
        # The merged view, in the SDK's order (a key set again moves last); the updates themselves
        # are kept only to replay them through the SDK's limits when one applies.
        span._start_attributes = span._attributes = given  # while open; once ended, what the SDK would hold
        span._plain_start = plain and given is attributes
        span._updates = None
        span._events = ()
        span._status = _UNSET
        span._start_time = start_time
        span._end_time = None
        span._record_end = record_end
        # Read at start, as the SDK's span does (a fork may merge more into the tracer's later).
        span._resource = tracer.resource
        return span


def kept_as_given(attributes: Mapping[str, Any]) -> bool:
    """Whether the SDK keeps these attributes exactly as given (no length limit applying): str keys, none empty,
    plain values. A loop: ``frozenset.issuperset(map(type, ...))`` builds a set from what it is given at every
    call, and took as long for ten attributes and longer for fewer."""
    for key, value in attributes.items():  # noqa: SIM110 (a generator under all() costs a frame per item)
        if type(key) is not str or type(value) not in _PLAIN or not key:
            return False
    return True


class _LayoutChanged(Exception):
    pass


def _check_layout() -> None:
    """The SDK's span context and readable span are as this module builds them, or no fast path."""
    if not holds():
        raise _LayoutChanged("SpanContext")
    if set(vars(ReadableSpan("probe", resource=_EMPTY_RESOURCE))) != _READABLE_FIELDS:
        raise _LayoutChanged("ReadableSpan")


# The usual decision, told apart by identity before asking the enum (sampled, and so recording).
_RECORD_AND_SAMPLE = Decision.RECORD_AND_SAMPLE


def fast_path_for(tracer: Any) -> FastPath | None:
    """A ``FastPath`` when spans from this tracer can be built at their end unseen; None otherwise."""
    if type(tracer) is not Tracer:
        return None
    multi = getattr(tracer, "span_processor", None)
    if type(multi) is not SynchronousMultiSpanProcessor:
        return None
    try:
        processors = multi._span_processors
        if not all(_ignores_starts(p) for p in processors):
            return None
        return FastPath(tracer)
    except (AttributeError, _LayoutChanged):
        # An SDK whose internals moved: its own path is always right.
        return None


class DeferredSpan(trace_api.Span, ReadableSpan):
    """An open span as plain data, and once ended the ``ReadableSpan`` the processors get (as the
    SDK's own ``Span`` is both): its fields are the ones ``ReadableSpan`` reads, set directly.

    Ended exactly once by the exporter (its span table guarantees it); calls after the
    end are ignored, as the SDK's are.
    """

    # ReadableSpan's fields but ``_links`` (none are added), and what is needed only while open.
    # ``context`` too: a field where ReadableSpan has a property, since every processor's
    # ``on_end`` reads it (twice, in the SDK's) and a field costs no Python call to read.
    __slots__ = (
        *sorted(_READABLE_FIELDS - {"_links"}),
        "_path",
        "_plain_start",
        "_record_end",
        "_start_attributes",
        "_updates",
        "context",
    )
    _links: Sequence[trace_api.Link] = ()

    # Made by ``FastPath.start_span``, which sets every field (no ``__init__``: see there).
    _path: FastPath
    _context: SpanContext
    _start_attributes: dict[str, Any]
    # The start's attributes were known ``kept_as_given`` when it was made (a planned start's): not looked at again.
    _plain_start: bool
    _attributes: dict[str, Any]
    _updates: list[Mapping[str, Any]] | None
    _end_time: int | None
    _record_end: Any

    # -- the Span API ----------------------------------------------------------------------

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        if self._end_time is not None or not attributes:
            return
        merged = self._attributes
        if merged is self._start_attributes:
            merged = self._attributes = dict(merged)
        if not merged.keys().isdisjoint(attributes):
            for key in attributes:
                merged.pop(key, None)
        merged.update(attributes)
        if self._updates is None:
            self._updates = []
        self._updates.append(attributes)

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        self.set_attributes({key: value})

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if self._end_time is not None:
            return
        limits = self._path.limits
        bounded = BoundedAttributes(
            limits.max_event_attributes, attributes, max_value_len=limits.max_attribute_length, immutable=True
        )
        events = self._events
        if type(events) is not list:
            events = self._events = []
        events.append(Event(name=name, attributes=bounded, timestamp=timestamp))

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end_time is not None:
            return
        # The SDK's rule: OK is final, and UNSET never overrides.
        if self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._status = status
        elif status is not StatusCode.UNSET:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        event: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            return
        self._close(time_ns() if end_time is None else end_time, None)

    def end_with(self, attributes: Mapping[str, Any], end_time: int) -> None:
        """``set_attributes(attributes)`` then ``end(end_time)``: the exporter's last update and the end.

        When the span has had no update yet and its attributes and these are all ones the SDK keeps as
        given (str keys, plain values, no length limit, within the count limit), the merged view is
        final as it is made: made in the start's own dict, with no copy kept to replay through the
        limits, no list of updates, and no second look at the result."""
        merged = self._attributes
        limits = self._path.limits
        maxlen = limits.max_span_attributes
        given = (
            self._end_time is None
            and merged is self._start_attributes
            and limits.max_span_attribute_length is None
            and (maxlen is None or len(merged) + len(attributes) <= maxlen)
            # The start's unless its maker knew they were (a planned start's).
            and (self._plain_start or kept_as_given(merged))
        )
        if given:
            # ``kept_as_given(attributes)`` written out: an end's few, told in a loop with no call.
            for key, value in attributes.items():
                if type(key) is not str or type(value) not in _PLAIN or not key:
                    given = False
                    break
        if given:
            if not merged.keys().isdisjoint(attributes):
                for key in attributes:
                    merged.pop(key, None)
            merged.update(attributes)
            self._close(end_time, merged)
            return
        self.set_attributes(attributes)
        self.end(end_time)

    def _close(self, end_time: int, attributes: dict[str, Any] | None) -> None:
        """The end itself; ``attributes``: the final ones, or None to have them worked out."""
        self._end_time = end_time
        path = self._path
        tracer = path.tracer
        if self._events:
            self._events = BoundedList.from_seq(path.limits.max_events, self._events)
        final = self._finished_attributes(path.limits) if attributes is None else attributes
        self._attributes = final  # type: ignore[assignment]
        self._updates = None
        self._instrumentation_info = tracer.instrumentation_info
        self._instrumentation_scope = tracer._instrumentation_scope
        if self._record_end is not None:
            self._record_end()
        # SynchronousMultiSpanProcessor.on_end's loop, over the processors it holds now.
        for processor in path.multi._span_processors:
            processor.on_end(self)

    def _finished_attributes(self, limits: SpanLimits) -> types.Attributes:
        """The attributes as the SDK's span would hold them: as given when every value is one the
        SDK keeps as is (lists become tuples, as it makes them), else replayed through its limits."""
        merged = self._attributes
        maxlen = limits.max_span_attributes
        if maxlen is not None and len(merged) > maxlen:
            return self._replayed(limits)
        # The keys in one pass of C: the SDK drops an empty or non-string one.
        if "" in merged or not _STRINGS.issuperset(map(type, merged)):
            return self._replayed(limits)
        max_value_len = limits.max_span_attribute_length
        if max_value_len is None and _PLAIN.issuperset(map(type, merged.values())):
            return merged  # no limit on lengths and no lists: the values as given, checked in one C call
        lists = False
        for value in merged.values():
            cls = type(value)
            if cls in _PLAIN:
                if max_value_len is not None and cls is str and len(value) > max_value_len:
                    return self._replayed(limits)
            elif cls in _SEQUENCES and _PLAIN.issuperset(map(type, value)):
                if max_value_len is not None and any(type(v) is str and len(v) > max_value_len for v in value):
                    return self._replayed(limits)
                lists = lists or cls is list
            else:
                return self._replayed(limits)
        if lists:
            if merged is self._start_attributes:
                merged = self._attributes = dict(merged)
            for key, value in merged.items():
                if type(value) is list:
                    merged[key] = tuple(value)
        return merged

    def _replayed(self, limits: SpanLimits) -> BoundedAttributes:
        bounded = BoundedAttributes(
            limits.max_span_attributes,
            self._start_attributes,
            immutable=False,
            max_value_len=limits.max_span_attribute_length,
        )
        for update in self._updates or ():
            bounded._set_items(update)
        bounded._immutable = True
        return bounded
