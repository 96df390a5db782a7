"""The exporter's two ways to make spans: built whole at their end, or through the SDK's ``Span``.

``span_path`` is used by every OTel test module (``pytestmark``), so each of their
tests runs on both: ``deferred`` as the default setup gives it, ``sdk_span`` with a processor
that has a real ``on_start`` added to every provider the exporter meets, which
must send it down the SDK's path. The tests here check which path is taken and
that both hand the processors the same spans, field by field.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import (
    ConcurrentMultiSpanProcessor,
    ReadableSpan,
    Span,
    SpanLimits,
    SpanProcessor,
    TracerProvider,
)
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from otel_support import StartWatcher, span_path  # noqa: F401  (the fixture: two tests below run on both paths)

from relay_runtime import Relay, ScopeType
from relay_runtime.integrations.otel import BoundedBatchSpanProcessor, OTelExporter, deferred, span_tuples
from relay_runtime.integrations.otel.deferred import DeferredSpan, _static_choice, fast_path_for
from relay_runtime.recorder import Recorder

# -- which path ---------------------------------------------------------------------------------


def provider_with(*processors: SpanProcessor, **kwargs: Any) -> TracerProvider:
    provider = TracerProvider(shutdown_on_exit=False, **kwargs)
    for p in processors:
        provider.add_span_processor(p)
    return provider


def open_span_of(exporter: OTelExporter, relay: Relay, name: str = "work") -> Any:
    handle = relay.scope.push(name, ScopeType.FUNCTION)
    span = exporter.span_for(handle.uuid)
    relay.scope.pop(handle)
    return span


def test_processors_that_ignore_starts_take_the_deferred_path():
    spans = InMemorySpanExporter()
    provider = provider_with(
        SimpleSpanProcessor(spans),
        BatchSpanProcessor(InMemorySpanExporter()),
        BoundedBatchSpanProcessor(InMemorySpanExporter(), lambda key, n: None),
    )
    relay = Relay()
    exporter = OTelExporter(provider).attach(relay)
    assert isinstance(open_span_of(exporter, relay), DeferredSpan)
    (span,) = spans.get_finished_spans()
    # The ended span is itself the ReadableSpan the processors get (as the SDK's own Span is), ended for good.
    assert isinstance(span, ReadableSpan) and span.end_time is not None and not span.is_recording()
    span.set_attribute("late", 1)
    span.add_event("late")
    assert "late" not in span.attributes and span.events == ()
    provider.shutdown()


def test_a_processor_with_on_start_keeps_the_sdk_span_even_when_added_later():
    spans = InMemorySpanExporter()
    provider = provider_with(SimpleSpanProcessor(spans))
    relay = Relay()
    exporter = OTelExporter(provider).attach(relay)
    open_span_of(exporter, relay, "before")
    watcher = StartWatcher()
    provider.add_span_processor(watcher)
    span = open_span_of(exporter, relay, "after")
    assert isinstance(span, Span)
    assert watcher.started == ["after"]
    assert [s.name for s in spans.get_finished_spans()] == ["before", "after"]


def test_setups_the_deferred_path_does_not_know_keep_the_sdk_span():
    concurrent = TracerProvider(shutdown_on_exit=False, active_span_processor=ConcurrentMultiSpanProcessor(1))
    concurrent.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))

    class Subclassed(SimpleSpanProcessor):
        def on_start(self, span: Span, parent_context: Context | None = None) -> None:
            span.set_attribute("seen", True)

    assert fast_path_for(concurrent.get_tracer("t")) is None
    assert fast_path_for(provider_with(Subclassed(InMemorySpanExporter())).get_tracer("t")) is None
    assert fast_path_for(trace_api.NoOpTracerProvider().get_tracer("t")) is None
    # Inheriting the no-op on_start is as good as the SDK's own processors.
    assert fast_path_for(provider_with(SpanProcessor()).get_tracer("t")) is not None
    relay = Relay()
    exporter = OTelExporter(concurrent, fast_path=True).attach(relay)
    assert isinstance(open_span_of(exporter, relay), Span)
    off = provider_with(SimpleSpanProcessor(InMemorySpanExporter()))
    assert OTelExporter(off, fast_path=False)._fast is None
    concurrent.shutdown()


# -- the same spans either way --------------------------------------------------------------------


class CountingIds(IdGenerator):
    """Ids in sequence: two exporters fed the same events make the same ids."""

    def __init__(self) -> None:
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return 0xABC0000 + self.n


class RecordingSampler(Sampler):
    """Keeps what it was asked; records but does not sample spans named ``quiet``, adds an attribute."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        parent = trace_api.get_current_span(parent_context).get_span_context()
        self.calls.append((parent.span_id, trace_id, name, kind, dict(attributes or {}), tuple(links or ())))
        decision = Decision.RECORD_ONLY if name == "quiet" else Decision.RECORD_AND_SAMPLE
        return SamplingResult(decision, {**(attributes or {}), "sampler.said": name})

    def get_description(self) -> str:
        return "recording"


class KeepAll(SpanProcessor):
    """Every ended span, sampled or not: the RECORD_ONLY ones must reach on_end too."""

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


def drive(relay: Relay) -> None:
    """A tree with every kind of data a span carries: a mark, an error, an update, a list, a sampled-out leaf,
    a key set at start and again at the end, and a scope left open when its agent ends."""
    with relay.scope.scope("agent run", ScopeType.AGENT, metadata={"relay.kind": "agent"}):
        with relay.scope.scope("step", ScopeType.FUNCTION, input={"q": 1}):
            relay.scope.mark("checkpoint", {"step": 2}, metadata={"phase": "plan", "n": 3, "odd": object()})
        relay.scope.push("left open", ScopeType.FUNCTION, attach=False)
        quiet = relay.scope.push("quiet", ScopeType.FUNCTION)
        relay.scope.pop(quiet)
        handle = relay.scope.push("fails", ScopeType.TOOL, input={"a": [1, 2]})
        relay.scope.pop(handle, error=ValueError("bad input " + "x" * 40))


def span_fields(span: ReadableSpan) -> dict[str, Any]:
    return {
        "name": span.name,
        "context": span.context,
        "parent": span.parent,
        "resource": span.resource.attributes,
        "attributes": dict(span.attributes or {}),
        "attribute order": list(span.attributes or {}),
        "events": [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        "links": list(span.links),
        "kind": span.kind,
        "status": (span.status.status_code, span.status.description),
        "times": (span.start_time, span.end_time),
        "scope": span.instrumentation_scope,
        "dropped": (span.dropped_attributes, span.dropped_events, span.dropped_links),
        "json": span.to_json(),
    }


@pytest.mark.parametrize(
    "limits",
    [
        None,
        SpanLimits(max_span_attributes=4, max_events=1, max_event_attributes=1, max_span_attribute_length=6),
    ],
    ids=["default limits", "tight limits"],
)
def test_both_paths_hand_processors_the_same_spans(limits):
    recorder = Recorder()
    relay = Relay()
    relay.subscribers.register(recorder, name="recorder", kinds=OTelExporter.KINDS)
    drive(relay)
    out: dict[bool, list[dict[str, Any]]] = {}
    sampler_calls: dict[bool, list[tuple[Any, ...]]] = {}
    for fast in (True, False):
        sampler = RecordingSampler()
        keep = KeepAll()
        provider = provider_with(
            keep,
            sampler=sampler,
            id_generator=CountingIds(),
            span_limits=limits,
            resource=Resource({"service.name": "paths"}),
        )
        # The same events, so the same timestamps, into each.
        exporter = OTelExporter(provider, fast_path=fast)
        assert (exporter._fast is not None) is fast
        for event in recorder:
            exporter(event)
        out[fast] = [span_fields(s) for s in keep.ended]
        sampler_calls[fast] = sampler.calls
    assert out[True] == out[False]
    assert sampler_calls[True] == sampler_calls[False]
    by_name = {s["name"]: s for s in out[True]}
    assert set(by_name) == {"invoke_agent agent run", "step", "left open", "quiet", "execute_tool fails"}
    assert not by_name["quiet"]["context"].trace_flags.sampled
    assert by_name["left open"]["status"][0] is StatusCode.ERROR
    assert by_name["execute_tool fails"]["status"][0] is StatusCode.ERROR
    assert by_name["step"]["events"][0][0] == "checkpoint"
    if limits is not None:
        assert any(s["dropped"][0] for s in out[True])


@pytest.mark.parametrize(
    "values",
    [
        {"mixed": ["a", 1]},
        {"mixed tuple": (1.5, "x")},
        {"ints then a bool": [1, True]},
        {"plain": ("a", "b"), "n": 1, "none": (None,)},
        {"empty": ()},
    ],
    ids=["mixed list", "mixed tuple", "int and bool", "plain", "empty"],
)
def test_sequences_the_sdk_would_drop_or_keep_end_alike_on_both_paths(values):
    ended: dict[bool, list[ReadableSpan]] = {}
    for fast in (True, False):
        keep = KeepAll()
        provider = provider_with(keep, id_generator=CountingIds())
        tracer = provider.get_tracer("t", "1")
        path = fast_path_for(tracer)
        assert path is not None
        if fast:
            span = path.start_span("s", None, None, SpanKind.CLIENT, {"k": "v"}, 100)
        else:
            span = tracer.start_span("s", kind=SpanKind.CLIENT, attributes={"k": "v"}, start_time=100)
        span.set_attributes(values)
        span.end(end_time=200)
        ended[fast] = keep.ended
    deferred, sdk = ([span_fields(s) for s in ended[fast]] for fast in (True, False))
    assert deferred == sdk


STATIC_SAMPLERS = {
    "default on": DEFAULT_ON,
    "default off": DEFAULT_OFF,
    "always on": ALWAYS_ON,
    "always off": ALWAYS_OFF,
    "ratio under a parent": ParentBasedTraceIdRatio(1.0),
    "remote sampled parent dropped": ParentBased(ALWAYS_ON, remote_parent_sampled=ALWAYS_OFF),
    "local parents dropped": ParentBased(ALWAYS_ON, local_parent_sampled=ALWAYS_OFF),
}
REMOTE_PARENTS = {
    "no parent": None,
    "remote sampled": SpanContext(0xFEED, 0xBEEF, True, TraceFlags(TraceFlags.SAMPLED), TraceState([("k", "v")])),
    "remote not sampled": SpanContext(0xFEED, 0xBEEF, True, TraceFlags(TraceFlags.DEFAULT), TraceState([("k", "w")])),
}


@pytest.mark.parametrize("parent", list(REMOTE_PARENTS))
@pytest.mark.parametrize("sampler", list(STATIC_SAMPLERS))
def test_the_sdk_fixed_samplers_decide_alike_without_being_asked(sampler, parent):
    """The deferred path works out what always-on/off and parent-based samplers would say without
    calling them: the spans (flags, trace state, attributes, which exist at all) must be the same."""
    recorder = Recorder()
    relay = Relay()
    relay.subscribers.register(recorder, name="recorder", kinds=OTelExporter.KINDS)
    drive(relay)
    out: dict[bool, list[dict[str, Any]]] = {}
    for fast in (True, False):
        keep = KeepAll()
        provider = provider_with(keep, sampler=STATIC_SAMPLERS[sampler], id_generator=CountingIds())
        exporter = OTelExporter(provider, fast_path=fast)
        assert (exporter._fast is not None) is fast
        remote = REMOTE_PARENTS[parent]
        current = trace_api.set_span_in_context(trace_api.NonRecordingSpan(remote)) if remote else Context()
        token = context_api.attach(current)
        try:
            for event in recorder:
                exporter(event)
        finally:
            context_api.detach(token)
        out[fast] = [span_fields(s) for s in keep.ended]
    assert out[True] == out[False]
    if remote is not None and remote.trace_flags.sampled and sampler == "default on":
        assert all(s["context"].trace_state == remote.trace_state for s in out[True]) and out[True]
    # The ratio sampler at the root is asked; every fixed choice is not.
    assert (_static_choice(STATIC_SAMPLERS[sampler], None) is None) is (sampler == "ratio under a parent")


def test_children_of_one_parent_get_what_the_sampler_of_each_start_decides():
    """The deferred path keeps the last local parent's fixed decision for its next child: a child under another
    parent, or started after the tracer's sampler was swapped, is decided afresh, as the SDK decides each."""
    recorder = Recorder()
    relay = Relay()
    relay.subscribers.register(recorder, name="recorder", kinds=OTelExporter.KINDS)
    with relay.scope.scope("agent run", ScopeType.AGENT):
        for name in ("first", "second", "after the swap", "again", "back"):
            with relay.scope.scope(name, ScopeType.TOOL), relay.scope.scope(f"{name} inner", ScopeType.FUNCTION):
                pass
    swaps = {"after the swap": ALWAYS_OFF, "again": ParentBased(ALWAYS_ON, local_parent_sampled=ALWAYS_OFF)}
    out: dict[bool, list[dict[str, Any]]] = {}
    for fast in (True, False):
        keep = KeepAll()
        exporter = OTelExporter(provider_with(keep, id_generator=CountingIds()), fast_path=fast)
        assert (exporter._fast is not None) is fast
        tracer = exporter._tracer
        first = tracer.sampler  # type: ignore[attr-defined]
        for event in recorder:
            if event.kind == "scope_start":
                tracer.sampler = swaps.get(event.name, first if event.name == "back" else tracer.sampler)  # type: ignore[attr-defined]
            exporter(event)
        out[fast] = [span_fields(s) for s in keep.ended]
    assert out[True] == out[False]
    flags = {s["name"]: s["context"].trace_flags.sampled for s in out[True]}
    # Dropped where a swap said so (the dropped spans' children too), kept again once it is undone.
    assert list(flags) == [
        "first inner", "execute_tool first", "second inner", "execute_tool second", "back inner", "execute_tool back",
        "invoke_agent agent run",
    ]  # fmt: skip
    assert all(flags.values())


@pytest.mark.usefixtures("span_path")
def test_a_dropping_sampler_makes_no_span_and_children_follow_it():
    spans = InMemorySpanExporter()
    provider = provider_with(SimpleSpanProcessor(spans), sampler=ParentBased(ALWAYS_OFF))
    relay = Relay()
    exporter = OTelExporter(provider).attach(relay)
    with relay.scope.scope("root", ScopeType.AGENT), relay.scope.scope("child", ScopeType.FUNCTION) as child:
        header = exporter.traceparent_for(child.uuid)
        assert header is not None and int(header.rsplit("-", 1)[1], 16) & 1 == 0  # not sampled
    assert spans.get_finished_spans() == ()


@pytest.mark.usefixtures("span_path")
def test_traceparent_and_children_of_an_open_span():
    spans = InMemorySpanExporter()
    provider = provider_with(SimpleSpanProcessor(spans))
    relay = Relay()
    exporter = OTelExporter(provider).attach(relay)
    with relay.scope.scope("root", ScopeType.AGENT) as root:
        header = exporter.traceparent_for(root.uuid)
        with relay.scope.scope("child", ScopeType.FUNCTION):
            pass
        assert exporter.context_for(root.uuid) is not None
    child, parent = spans.get_finished_spans()
    assert (
        header
        == f"00-{parent.context.trace_id:032x}-{parent.context.span_id:016x}-{int(parent.context.trace_flags):02x}"
    )
    assert child.parent == parent.context
    assert child.context.trace_id == parent.context.trace_id


@pytest.mark.parametrize(
    "limits",
    [None, SpanLimits(max_span_attributes=3, max_span_attribute_length=4, max_events=2)],
    ids=["default limits", "tight limits"],
)
@pytest.mark.parametrize("odd", [False, True], ids=["plain values", "values the SDK cleans"])
def test_a_deferred_span_takes_the_span_api_as_the_sdk_span_does(limits, odd):
    """Everything the Span API lets a caller of ``span_for`` do, on both, with the same ids."""
    ended: dict[bool, list[ReadableSpan]] = {}
    for fast, keep, tracer, path in _both_paths(limits):
        start: dict[str, Any] = {"k": "v", "n": 1, "seq": ["a", "b"]}
        if fast:
            span = path.start_span("s", None, None, SpanKind.CLIENT, dict(start), 100)
            assert isinstance(span, DeferredSpan)
        else:
            span = tracer.start_span("s", kind=SpanKind.CLIENT, attributes=dict(start), start_time=100)
        span.set_attributes({"k": "moved last", "pair": (1, 2), "more": ["c"]})
        if odd:
            odd_values: dict[str, Any] = {"obj": object(), "long": "x" * 10, "nested": [[1]]}
            span.set_attributes(odd_values)
            span.set_attribute("", "empty key")
        span.set_attribute("f", 1.5)
        span.add_event("e1", {"a": 1, "b": ["x"]}, timestamp=110)
        span.record_exception(ValueError("boom"), timestamp=120)
        span.add_event("e3", timestamp=130)
        span.update_name("renamed")
        span.set_status(Status(StatusCode.OK))
        span.set_status(StatusCode.ERROR, "ignored after OK")
        span.end(end_time=200)
        span.set_attribute("after", "end")
        span.end(end_time=300)
        assert not span.is_recording()
        ended[fast] = keep.ended
    deferred, sdk = ([span_fields(s) for s in ended[fast]] for fast in (True, False))
    assert deferred == sdk
    (one,) = deferred
    assert one["name"] == "renamed" and one["times"] == (100, 200)
    assert one["status"][0] is StatusCode.OK
    # Plain values within the limits are handed over as they are; anything else goes through the SDK's rules.
    kept_as_given = type(ended[True][0]._attributes) is dict
    assert kept_as_given is (limits is None and not odd)
    if limits is None:
        assert one["attributes"]["more"] == ("c",)
        assert one["attribute order"][:4] == ["n", "seq", "k", "pair"]


@pytest.mark.parametrize(
    "limits",
    [None, SpanLimits(max_span_attributes=4), SpanLimits(max_span_attribute_length=4)],
    ids=["default limits", "few attributes", "short values"],
)
@pytest.mark.parametrize(
    ("start", "last"),
    [
        ({"k": "v", "n": 1}, {"relay.outcome": "success", "k": "moved last"}),
        ({"k": "v", "n": 1}, {}),
        ({"k": "v", "seq": ["a"]}, {"n": 2}),  # a list at the start: kept as the SDK makes it (a tuple)
        ({"k": "v"}, {"odd": object(), "long": "x" * 10}),
        ({"k": "v", "n": 1, "f": 0.5}, {"a": 1, "b": 2}),  # past four attributes
        ({"k": "v"}, {"": "empty key"}),
    ],
)
def test_an_end_with_its_last_attributes_ends_as_setting_them_then_ending_does(limits, start, last):
    """``DeferredSpan.end_with`` (the exporter's usual end) makes the span the SDK's makes from the same calls."""
    ended: dict[bool, list[ReadableSpan]] = {}
    for fast, keep, tracer, path in _both_paths(limits):
        if fast:
            span = path.start_span("s", None, None, SpanKind.CLIENT, dict(start), 100)
            assert isinstance(span, DeferredSpan)
            span.end_with(dict(last), 200)
        else:
            span = tracer.start_span("s", kind=SpanKind.CLIENT, attributes=dict(start), start_time=100)
            span.set_attributes(dict(last))
            span.end(end_time=200)
        ended[fast] = keep.ended
    deferred, sdk = ([span_fields(s) for s in ended[fast]] for fast in (True, False))
    assert deferred == sdk


def test_random_ids_are_drawn_as_the_sdk_draws_them():
    """The deferred path draws span ids from the ``random`` module as the SDK's RandomIdGenerator does:
    from the same seed, the same trace and span ids on both paths."""
    contexts: dict[bool, list[SpanContext]] = {}
    for fast in (True, False):
        keep = KeepAll()
        provider = provider_with(keep)
        relay = Relay()
        OTelExporter(provider, fast_path=fast).attach(relay)
        random.seed(7)
        with relay.scope.scope("root", ScopeType.AGENT), relay.scope.scope("child", ScopeType.FUNCTION):
            pass
        contexts[fast] = [s.context for s in keep.ended]
    assert contexts[True] == contexts[False]
    assert all(c.is_valid and not c.is_remote and c.trace_flags.sampled for c in contexts[True])


def test_the_sdk_span_metrics_count_deferred_spans_as_the_sdk_does(monkeypatch):
    """With the SDK's own span metrics on, spans built at their end count as started and live alike."""
    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
    points: dict[bool, dict[str, list[tuple[dict[str, Any], int]]]] = {}
    for fast in (True, False):
        reader = InMemoryMetricReader()
        provider = provider_with(KeepAll(), meter_provider=MeterProvider(metric_readers=[reader]))
        relay = Relay()
        exporter = OTelExporter(provider, fast_path=fast).attach(relay)
        assert (exporter._fast is not None and exporter._fast.metrics_start is not None) is fast
        with relay.scope.scope("root", ScopeType.AGENT):
            with relay.scope.scope("child", ScopeType.FUNCTION):
                pass
            live_inside = metric_points(reader).get("otel.sdk.span.live")
        points[fast] = metric_points(reader)
        assert live_inside == [({"otel.span.sampling_result": "RECORD_AND_SAMPLE"}, 1)]
    assert points[True] == points[False]
    assert points[True]["otel.sdk.span.started"] == [
        ({"otel.span.parent.origin": "local", "otel.span.sampling_result": "RECORD_AND_SAMPLE"}, 1),
        ({"otel.span.parent.origin": "none", "otel.span.sampling_result": "RECORD_AND_SAMPLE"}, 1),
    ]
    assert points[True]["otel.sdk.span.live"] == [({"otel.span.sampling_result": "RECORD_AND_SAMPLE"}, 0)]


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], int]]]:
    out: dict[str, list[tuple[dict[str, Any], int]]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if not metric.name.startswith("otel.sdk.span."):
                    continue
                out[metric.name] = sorted(
                    ((dict(p.attributes or {}), p.value) for p in metric.data.data_points), key=repr
                )
    return out


def test_a_current_span_that_gives_no_span_context_is_refused_alike():
    """Something else than a SpanContext from the span current where a root starts: the SDK's
    start_span refuses it with a TypeError, and so does the deferred path."""

    class Odd(trace_api.NonRecordingSpan):
        def get_span_context(self) -> Any:
            return ("not", "a", "span", "context")

    context = trace_api.set_span_in_context(Odd(trace_api.INVALID_SPAN_CONTEXT))
    tracer = provider_with(KeepAll()).get_tracer("t")
    path = fast_path_for(tracer)
    assert path is not None
    with pytest.raises(TypeError, match="SpanContext"):
        tracer.start_span("s", context=context)
    with pytest.raises(TypeError, match="SpanContext"):
        path.start_span("s", None, context, SpanKind.INTERNAL, {}, 1)


@pytest.mark.parametrize("changed", ["SpanContext", "ReadableSpan"])
def test_an_sdk_whose_span_types_changed_shape_keeps_the_sdk_span(monkeypatch, changed):
    """The deferred path builds span contexts and readable spans field by field: an SDK whose
    SpanContext tuple or ReadableSpan fields differ from what it knows must not get one."""
    if changed == "SpanContext":
        monkeypatch.setattr(span_tuples, "TRACE_STATE", 3)
    else:
        monkeypatch.setattr(deferred, "_READABLE_FIELDS", deferred._READABLE_FIELDS - {"_links"})
    tracer = provider_with(KeepAll()).get_tracer("t")
    assert fast_path_for(tracer) is None
    monkeypatch.undo()
    assert fast_path_for(tracer) is not None


def _both_paths(limits: SpanLimits | None) -> Iterator[tuple[bool, KeepAll, Any, Any]]:
    """The deferred path, then the SDK's own, each over a provider of its own with counted ids and ``limits``:
    (whether deferred, what the provider ended, its tracer, the deferred path)."""
    for fast in (True, False):
        keep = KeepAll()
        tracer = provider_with(keep, id_generator=CountingIds(), span_limits=limits).get_tracer("t", "1")
        path = fast_path_for(tracer)
        assert path is not None
        yield fast, keep, tracer, path


# -- what a request sent out of the process carries (``propagation.carrier``) --------------------------


class _VendorHeader(trace_api.propagation.tracecontext.TraceContextTextMapPropagator):
    """W3C trace context plus a header of its own: a global propagator that is not OTel's default."""

    def inject(self, carrier: Any, context: Context | None = None, setter: Any = None) -> None:
        super().inject(carrier, context) if setter is None else super().inject(carrier, context, setter)
        carrier["x-vendor"] = "on"


@pytest.mark.usefixtures("span_path")
def test_the_carrier_is_the_default_propagators_headers_or_what_the_global_propagators_inject():
    from opentelemetry import baggage, propagate

    relay = Relay()
    exporter = OTelExporter(provider_with(SimpleSpanProcessor(InMemorySpanExporter()))).attach(relay)
    with relay.scope.scope("root", ScopeType.AGENT) as root:
        plain = exporter._carrier(root)
        assert plain == {"traceparent": exporter.traceparent_for(root.uuid)}
        # Baggage in the current context: the propagators write it.
        token = context_api.attach(baggage.set_baggage("tenant", "t1"))
        try:
            assert exporter._carrier(root) == {**plain, "baggage": "tenant=t1"}
        finally:
            context_api.detach(token)
        # Another global propagator: asked, and what it writes is carried.
        default = propagate.get_global_textmap()
        propagate.set_global_textmap(_VendorHeader())
        try:
            assert exporter._carrier(root) == {**plain, "x-vendor": "on"}
        finally:
            propagate.set_global_textmap(default)
        assert exporter._carrier(root) == plain
        # Spans of other traces, in turn (the head of the last trace's header is kept): each its own trace id.
        other = relay.scope.push("other", ScopeType.AGENT, root=True, attach=False)
        assert exporter._carrier(other) == {"traceparent": exporter.traceparent_for(other.uuid)}
        assert exporter._carrier(other)["traceparent"][3:35] != plain["traceparent"][3:35]
        assert exporter._carrier(root) == plain
        relay.scope.pop(other)


@pytest.mark.parametrize("flags", [0, 1, 2, 3, 0x7F, 0xFF, 0x100, TraceFlags(1), TraceFlags(3)])
@pytest.mark.parametrize(
    ("trace_id", "span_id"), [(1, 1), (2**128 - 1, 2**64 - 1), (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)]
)
def test_a_traceparent_is_what_formatting_its_numbers_makes(trace_id: int, span_id: int, flags: int) -> None:
    from relay_runtime.integrations.otel.span_context import traceparent

    assert traceparent(trace_id, span_id, flags) == f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
