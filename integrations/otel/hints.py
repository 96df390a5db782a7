"""What a scope's metadata asks of its span: a remote parent, and the span hints of ``cv.SPAN_HINTS``.

Kept out of the attribute extraction: these are not derived from what the scope is but
dictated by the integration that opened it, and they apply to scopes of any role.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceState

from relay_runtime import conventions as cv
from relay_runtime.trace_context import REMOTE_PARENT, REMOTE_TRACESTATE, TraceParent, parse_traceparent

from .span_tuples import HOLDS, MAX_SPAN_ID, MAX_TRACE_ID, TRACE_FLAGS, new_tuple

_KINDS = {
    "client": SpanKind.CLIENT,
    "server": SpanKind.SERVER,
    "internal": SpanKind.INTERNAL,
    "producer": SpanKind.PRODUCER,
    "consumer": SpanKind.CONSUMER,
}
_PRIMITIVES = (str, bool, int, float)
_ABSENT: Any = object()


_NO_TRACE_STATE = TraceState()


def remote_parent(md: Mapping[str, Any] | None) -> NonRecordingSpan | None:
    """The remote parent a scope was opened under, as a span to start its span under, or None."""
    if not md:
        return None
    parsed = md.get(REMOTE_PARENT)  # the parsed value the scope carries: no parse again, nor a call to say so
    if type(parsed) is not TraceParent:
        parsed = parse_traceparent(parsed)
        if parsed is None:
            return None
    state = _NO_TRACE_STATE
    raw_state = md.get(REMOTE_TRACESTATE)
    if isinstance(raw_state, str):
        try:
            state = TraceState.from_header([raw_state])
        except Exception:
            state = _NO_TRACE_STATE
    trace_id = int(parsed.trace_id, 16)
    span_id = int(parsed.span_id, 16)
    if HOLDS:
        # The tuple SpanContext(...) would make, its validity worked out as it does, without its Python frame
        # (a TraceParent built directly, not parsed, may hold zero ids).
        valid = 0 < trace_id <= MAX_TRACE_ID and 0 < span_id <= MAX_SPAN_ID
        parent = new_tuple(SpanContext, (trace_id, span_id, True, TRACE_FLAGS[parsed.flags], state, valid))
    else:
        parent = SpanContext(trace_id, span_id, True, TRACE_FLAGS[parsed.flags], state)
    return NonRecordingSpan(parent)


def remote_context(md: Mapping[str, Any] | None) -> Context | None:
    """A context whose current span is the remote parent a scope was opened under, or None."""
    parent = remote_parent(md)
    return trace_api.set_span_in_context(parent) if parent is not None else None


def span_hints(md: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    hints = md.get(cv.SPAN_HINTS) if md else None
    return hints if type(hints) is dict or isinstance(hints, Mapping) else None


def hinted_kind(hints: Mapping[str, Any] | None, default: SpanKind) -> SpanKind:
    if hints is None:
        return default
    kind = hints.get("kind", "")
    # An integration's own spelling ("client") is found as it is, with no string made to find it.
    found = _KINDS.get(kind) if type(kind) is str else None
    return found if found is not None else _KINDS.get(str(kind).lower(), default)


def apply_hints(
    hints: Mapping[str, Any] | None,
    name: str,
    attributes: dict[str, Any],
    only: Mapping[str, Any] | None = None,
    started: Mapping[str, Any] | None = None,
) -> str:
    """Merge the hinted attributes into ``attributes`` (primitives and lists of them only) and
    return the span's name. ``only``: merge just the keys it has (those about to be overwritten).
    ``started``: the hinted attributes the span's start set; the same values are not set again
    (unless ``attributes`` would overwrite them)."""
    if hints is None:
        return name
    extra = hints.get("attributes")
    if type(extra) is dict or isinstance(extra, Mapping):
        if only is None:
            items: Iterable[tuple[Any, Any]] = extra.items()
        elif extra.keys().isdisjoint(only):
            items = ()  # the usual end sets nothing that was hinted: no list built to find that out
        else:
            items = [(k, extra[k]) for k in only if k in extra]
        for key, value in items:
            # Asked first: most of an end's hinted values are the very ones its start set.
            if started is not None and started.get(key) is value and key not in attributes:
                continue
            if value is None or type(key) is not str:
                continue
            if isinstance(value, _PRIMITIVES):
                attributes[key] = value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, _PRIMITIVES) for v in value):
                attributes[key] = list(value)
    hinted = hints.get("name")
    return hinted if isinstance(hinted, str) and hinted else name


def apply_changed(hints: Mapping[str, Any], attributes: dict[str, Any], started: Mapping[str, Any] | None) -> None:
    """``apply_hints(hints, "", attributes, started=started)``, for the end of a span whose start set ``started``.

    An end's hints repeat the start's values as the very objects (``{**start, **end}``): with none of the end's
    own attributes among their keys (the rule's "not in attributes" then holds for every key), each key is asked
    whether its value is the start's, and the few that are not are set by the rule. A plain loop: picking them
    in C (``compress`` over ``map(is_not, ...)``) ran fewer opcodes but took longer (MCP client end, six
    attributes: about 480 ns against 280 ns)."""
    extra = hints.get("attributes")
    if type(extra) is not dict or type(started) is not dict or not extra.keys().isdisjoint(attributes):
        apply_hints(hints, "", attributes, started=started)
        return
    was = started.get
    for key, value in extra.items():
        if was(key, _ABSENT) is value or value is None or type(key) is not str:
            continue
        if isinstance(value, _PRIMITIVES):
            attributes[key] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, _PRIMITIVES) for v in value):
            attributes[key] = list(value)
