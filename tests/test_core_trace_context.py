"""Scopes under a remote W3C parent, and the trace context a scope hands to outgoing requests."""

from __future__ import annotations

import pytest
from otel_support import Pipeline

from relay_runtime import Relay
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.recorder import Recorder
from relay_runtime.trace_context import (
    REMOTE_PARENT,
    REMOTE_TRACESTATE,
    TraceParent,
    carrier_for,
    own_traceparent,
    parse_traceparent,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
PARENT = f"00-{TRACE}-{SPAN}-01"


def _relay() -> tuple[Relay, Recorder]:
    relay = Relay()
    recorder = Recorder()
    relay.subscribers.register(recorder)
    return relay, recorder


def test_a_scope_under_a_remote_parent_continues_its_trace_and_says_so() -> None:
    relay, recorder = _relay()
    with relay.scope.scope("outer"):
        handle = relay.scope.push("served", remote_parent=PARENT, remote_tracestate="vendor=abc")
        # Attached: what runs inside nests under it, whatever was current before.
        inner = relay.scope.push("inner")
        assert inner.parent is handle and inner.trace_id == TRACE
        relay.scope.pop(inner)
        relay.scope.pop(handle)
    (start,) = recorder.starts(name="served")
    assert start.parent_uuid is None and start.trace_id == TRACE
    assert start.metadata[REMOTE_PARENT] == PARENT and start.metadata[REMOTE_TRACESTATE] == "vendor=abc"
    assert handle.trace_id == TRACE


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "garbage",
        f"00-{'0' * 32}-{SPAN}-01",  # an all-zero trace id is invalid
        f"00-{TRACE}-{'0' * 16}-01",  # and so is an all-zero span id
        f"ff-{TRACE}-{SPAN}-01",  # version ff is forbidden
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"00-{TRACE[:-1]}-{SPAN}-01",
        42,
    ],
)
def test_a_malformed_remote_parent_is_a_clear_error_and_parses_to_none(bad: object) -> None:
    relay, recorder = _relay()
    assert parse_traceparent(bad) is None
    with pytest.raises(ValueError, match="remote_parent must be a W3C traceparent"):
        relay.scope.push("served", remote_parent=bad)  # type: ignore[arg-type]
    assert recorder.events == [] and relay.scope.current() is None


def test_a_later_version_may_carry_more_fields_and_upper_case_is_read() -> None:
    parsed = parse_traceparent(f"01-{TRACE.upper()}-{SPAN}-03-more")
    assert parsed is not None and parsed.trace_id == TRACE and parsed.sampled and parsed.header().startswith("00-")


def test_parent_and_remote_parent_together_are_refused() -> None:
    relay, _ = _relay()
    parent = relay.scope.push("local")
    with pytest.raises(ValueError, match="both parent= and remote_parent="):
        relay.scope.push("served", parent=parent, remote_parent=PARENT)


def test_an_oversized_or_odd_tracestate_is_dropped_not_carried() -> None:
    relay, recorder = _relay()
    relay.scope.pop(relay.scope.push("a", remote_parent=PARENT, remote_tracestate="x=" + "y" * 600))
    relay.scope.pop(relay.scope.push("b", remote_parent=PARENT, remote_tracestate="x=1\ny=2"))
    assert all(REMOTE_TRACESTATE not in e.metadata for e in recorder.starts())


@pytest.mark.parametrize(
    "bad",
    [
        ",".join(f"k{i}=v" for i in range(33)),  # the W3C limit is 32 members
        "not a tracestate sk-live-0123456789abcdef",
        "vendor=abc,vendor=def",  # a key twice
        "Vendor=abc",  # keys are lower case
        "vendor=abc,=x",
        "vendor=a=b",  # '=' is no value's character
        "vendor=abc ,x",
        "vendor=" + "v" * 257,
    ],
)
def test_a_tracestate_that_is_not_w3c_shaped_is_dropped_not_recorded(bad: str) -> None:
    """An exporter drops such a tracestate from the span (W3C: a vendor MUST NOT pass an invalid one on):
    the scope's record must not claim the remote side sent one, nor hold whatever text a client put there."""
    pipeline = Pipeline()
    relay, recorder = _relay()
    exporter = OTelExporter(tracer_provider=pipeline.tracer_provider).attach(relay)
    relay.scope.pop(relay.scope.push("served", remote_parent=PARENT, remote_tracestate=bad))
    exporter.shutdown()
    (start,) = recorder.starts(name="served")
    assert REMOTE_TRACESTATE not in start.metadata and start.metadata[REMOTE_PARENT] == PARENT
    assert len(pipeline.one("served").context.trace_state) == 0


def test_a_w3c_tracestate_is_carried_with_its_optional_spaces_and_empty_members() -> None:
    state = " a=1 ,, tenant@system=x y\t,b-*/_=~ok"
    pipeline = Pipeline()
    relay, recorder = _relay()
    exporter = OTelExporter(tracer_provider=pipeline.tracer_provider).attach(relay)
    relay.scope.pop(relay.scope.push("served", remote_parent=PARENT, remote_tracestate=state))
    exporter.shutdown()
    (start,) = recorder.starts(name="served")
    assert start.metadata[REMOTE_TRACESTATE] == state
    carried = pipeline.one("served").context.trace_state
    assert dict(carried.items()) == {"a": "1", "tenant@system": "x y", "b-*/_": "~ok"}


def test_the_otel_span_of_a_remote_child_is_a_child_of_the_remote_span() -> None:
    pipeline = Pipeline()
    relay = Relay()
    exporter = OTelExporter(tracer_provider=pipeline.tracer_provider).attach(relay)
    handle = relay.scope.push("served", remote_parent=PARENT, remote_tracestate="vendor=abc")
    relay.scope.pop(handle)
    exporter.shutdown()
    span = pipeline.one("served")
    assert f"{span.context.trace_id:032x}" == TRACE
    assert span.parent is not None and span.parent.is_remote and f"{span.parent.span_id:016x}" == SPAN
    assert span.context.trace_state.get("vendor") == "abc"


def test_a_remote_parent_built_with_a_zero_id_is_no_parent_of_the_otel_span() -> None:
    # A TraceParent made directly is not checked as a parsed one is: a zero id makes an invalid context.
    pipeline = Pipeline()
    relay = Relay()
    exporter = OTelExporter(tracer_provider=pipeline.tracer_provider).attach(relay)
    relay.scope.pop(relay.scope.push("served", remote_parent=TraceParent(TRACE, "0" * 16, 1)))
    exporter.shutdown()
    span = pipeline.one("served")
    assert span.parent is None and span.context.is_valid


def test_a_scope_hands_on_the_exporters_span_context_or_else_its_own_ids() -> None:
    relay = Relay()
    handle = relay.scope.push("caller")
    assert carrier_for(handle) == {"traceparent": own_traceparent(handle)}
    assert parse_traceparent(own_traceparent(handle)) is not None
    relay.scope.pop(handle)

    pipeline = Pipeline()
    exporter = OTelExporter(tracer_provider=pipeline.tracer_provider).attach(relay)
    handle = relay.scope.push("caller")
    carrier = carrier_for(handle)
    relay.scope.pop(handle)
    span = pipeline.one("caller")
    assert carrier["traceparent"].startswith(f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")
    exporter.shutdown()  # detaches: the carrier falls back to our own ids again
    handle = relay.scope.push("after")
    assert carrier_for(handle) == {"traceparent": own_traceparent(handle)}


def test_our_own_ids_hand_on_the_remote_parents_sampling_decision_and_tracestate() -> None:
    """With no exporter to ask, the carrier is built from the scope's ids: a trace the caller chose not to
    sample must not be handed on as sampled (the next service would record spans whose parents no one
    kept), and a tracestate received must be handed on (W3C: a vendor MUST propagate it)."""
    relay = Relay()
    served = relay.scope.push("served", remote_parent=f"00-{TRACE}-{SPAN}-00", remote_tracestate="vendor=abc")
    child = relay.scope.push("child")
    carrier = carrier_for(child)
    assert carrier == {"traceparent": f"00-{TRACE}-{child.uuid[:16]}-00", "tracestate": "vendor=abc"}
    relay.scope.pop(child)
    relay.scope.pop(served)
    local = relay.scope.push("local")
    assert carrier_for(local) == {"traceparent": f"00-{local.trace_id}-{local.uuid[:16]}-01"}
    relay.scope.pop(local)
    # Flags W3C has not defined are sent as zero; sampled and random-trace-id go on as received.
    odd = relay.scope.push("odd", remote_parent=f"00-{TRACE}-{SPAN}-ff")
    assert carrier_for(odd)["traceparent"].endswith("-03")


def test_a_parsed_traceparent_is_its_normalised_header_and_is_carried_without_parsing_again() -> None:
    import copy
    import pickle

    parsed = parse_traceparent(f"  00-{TRACE.upper()}-{SPAN}-01 ")
    assert parsed is not None and isinstance(parsed, str) and parsed == PARENT
    assert parse_traceparent(parsed) is parsed  # already parsed: handed back as it is
    for again in (pickle.loads(pickle.dumps(parsed)), copy.deepcopy(parsed)):
        assert (again.trace_id, again.span_id, again.flags, again) == (TRACE, SPAN, 1, PARENT)
    relay, recorder = _relay()
    relay.scope.pop(relay.scope.push("served", remote_parent=parsed))
    (start,) = recorder.starts(name="served")
    assert start.metadata[REMOTE_PARENT] is parsed and start.trace_id == TRACE


@pytest.mark.parametrize("with_baggage", [False, True])
def test_the_exporters_carrier_is_what_the_configured_propagators_inject(with_baggage: bool) -> None:
    from opentelemetry import baggage, context, propagate, trace

    pipeline = Pipeline()
    relay = Relay()
    exporter = OTelExporter(tracer_provider=pipeline.tracer_provider).attach(relay)
    # A remote parent with a tracestate: the child's span context carries it on.
    handle = relay.scope.push("caller", remote_parent=PARENT, remote_tracestate="vendor=abc")
    token = context.attach(baggage.set_baggage("tenant", "t-1")) if with_baggage else None
    try:
        carrier = carrier_for(handle)
        expected: dict[str, str] = {}
        span = exporter.span_for(handle.uuid)
        assert span is not None
        propagate.inject(expected, context=trace.set_span_in_context(span))
    finally:
        if token is not None:
            context.detach(token)
    relay.scope.pop(handle)
    exporter.shutdown()
    assert carrier == expected and carrier["tracestate"] == "vendor=abc"
    assert ("baggage" in carrier) is with_baggage


def test_span_hints_kept_or_replaced_at_the_end_set_the_spans_final_attributes() -> None:
    from relay_runtime import conventions as cv

    pipeline = Pipeline()
    relay = Relay()
    exporter = OTelExporter(tracer_provider=pipeline.tracer_provider).attach(relay)
    hints = {"name": "hinted", "kind": "client", "attributes": {"a": "1", "b": 2, "error.type": "hinted_error"}}
    # The same hints at the end: what the start set holds, and a hint still wins over the end's own error.type.
    kept = relay.scope.push("kept", metadata={cv.SPAN_HINTS: hints})
    relay.scope.pop(kept, error=RuntimeError("boom"))
    # New hints at the end: changed and added values are set, unchanged ones stay.
    replaced = relay.scope.push("replaced", metadata={cv.SPAN_HINTS: {**hints, "name": "second"}})
    end_hints = {**hints, "attributes": {**hints["attributes"], "a": "2", "c": True}}
    relay.scope.pop(replaced, metadata={cv.SPAN_HINTS: end_hints})
    exporter.shutdown()
    first = dict(pipeline.one("hinted").attributes or {})
    assert (first["a"], first["b"], first["error.type"], first["relay.outcome"]) == ("1", 2, "hinted_error", "failed")
    second = dict(pipeline.one("second").attributes or {})
    assert (second["a"], second["b"], second["c"], second["error.type"]) == ("2", 2, True, "hinted_error")


def test_a_trajectory_event_stream_carries_the_remote_parent_a_scope_continues(tmp_path) -> None:
    """The remote parent is the scope's, for every consumer: the ATOF stream writes it with the scope."""
    import json

    from relay_runtime.integrations.trajectory import AtofExporter

    relay = Relay()
    path = tmp_path / "served.atof.jsonl"
    exporter = AtofExporter(path).attach(relay)
    handle = relay.scope.push("served", remote_parent=PARENT, remote_tracestate="vendor=abc")
    relay.scope.pop(handle)
    assert exporter.shutdown()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    served = [r for r in rows if r.get("name") == "served"]
    assert served and all(r["metadata"][REMOTE_PARENT] == PARENT for r in served)
    assert all(r["metadata"][REMOTE_TRACESTATE] == "vendor=abc" for r in served)
