"""Carrying the attempt's trace context to the provider, as W3C ``traceparent`` request headers.

The core offers no header hook yet, so this uses what it has: an execution
intercept (and a stream execution intercept) that runs while the attempt is
the current one, looks up that attempt's span, and returns the request with
the propagation headers added. Adapters that send ``LLMRequest.headers`` with
the SDK call (``extra_headers``) then carry the trace to the provider.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import baggage, propagate
from opentelemetry import context as context_api
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context, get_current
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from relay_runtime.attempt import current_attempt
from relay_runtime.trace_context import FLAGS_TEXT
from relay_runtime.types import LLMRequest

from .deferred import _DEFAULT_TRACE_STATE, DeferredSpan

if TYPE_CHECKING:
    from .exporter import OTelExporter

# Last in every chain: intercepts that rewrite or retry the request run first, and
# every request that reaches the provider carries the headers.
PRIORITY = 1_000_000
INTERCEPT_NAME = "otel.trace_context"


def with_trace_headers(exporter: OTelExporter, request: LLMRequest) -> LLMRequest:
    attempt = current_attempt()
    if attempt is None:
        return request
    carrier = exporter.headers_for(attempt.handle.uuid)
    if not carrier:
        return request
    return request.replace(headers={**request.headers, **carrier})


def execution_intercept(exporter: OTelExporter) -> Callable[[str, LLMRequest, Callable[[LLMRequest], Any]], Any]:
    # One function for sync and async chains: for an async call ``call_next`` returns
    # an awaitable, which the async chain awaits.
    def inject(name: str, request: LLMRequest, call_next: Callable[[LLMRequest], Any]) -> Any:
        return call_next(with_trace_headers(exporter, request))

    return inject


def install(exporter: OTelExporter, relay: Any, *, name: str = INTERCEPT_NAME) -> None:
    fn = execution_intercept(exporter)
    relay.intercepts.register_llm_execution(name, PRIORITY, fn)
    relay.intercepts.register_llm_stream_execution(name, PRIORITY, fn)


def uninstall(relay: Any, *, name: str = INTERCEPT_NAME) -> None:
    relay.intercepts.deregister_llm_execution(name)
    relay.intercepts.deregister_llm_stream_execution(name)


# The last global propagator found to be OTel's default (W3C trace context, then W3C baggage).
_plain: list[Any] = [None]
_DEFAULT_TYPES = [TraceContextTextMapPropagator, W3CBaggagePropagator]


def _is_default(textmap: Any) -> bool:
    if textmap is _plain[0]:
        return True
    if type(textmap) is not CompositePropagator:
        return False
    if [type(p) for p in getattr(textmap, "_propagators", ())] != _DEFAULT_TYPES:
        return False
    _plain[0] = textmap
    return True


# The global propagator and the current context, read as ``get_global_textmap()`` and ``get_current()`` read them
# (two and three Python calls on every request an MCP client sends): where the API keeps them now; through those
# functions if it moved them.
_globals = vars(propagate)
_TEXTMAP = "_HTTP_TEXT_FORMAT"
_runtime = getattr(context_api, "_RUNTIME_CONTEXT", None)
_current_context: Callable[[], Context] = (
    _runtime._current_context.get if type(_runtime) is ContextVarsRuntimeContext else get_current
)


# (trace id, "00-<its 32 hex digits>-") of the last traceparent written; replaced whole, so a thread reads a pair.
_head: list[tuple[int, str]] = [(0, "")]


def carrier(exporter: OTelExporter, handle: Any) -> dict[str, str] | None:
    """What a request an integration sends out of the process (MCP) carries of this scope's span
    (``OTelExporter._carrier``, a new dict per call), or None when the scope has no open span.

    When the default propagators are configured and no baggage is set, what they would inject is
    written directly (they make a context and walk a composite of two for the same two headers);
    otherwise, or when the span's context is not valid, the propagators are asked. One function,
    not three: it runs on every request an MCP client sends.
    """
    record = exporter._table.get(handle.uuid)
    if record is None:
        return None
    span = record.span
    textmap = _globals.get(_TEXTMAP) or propagate.get_global_textmap()
    # An empty context has no baggage: only a context with something in it is asked (``get_all``
    # reads the current context through four calls).
    context = _current_context()
    if (textmap is _plain[0] or _is_default(textmap)) and not (context and baggage.get_all(context)):
        # A SpanContext is a tuple (trace id, span id, remote, flags, state, valid): read in place. Our deferred
        # span's is a field, and one (``FastPath.start_span``): read without a call, and not asked its type.
        if type(span) is DeferredSpan:
            sc = span.context
        else:
            sc = span.get_span_context()
            if type(sc) is not SpanContext:
                sc = INVALID_SPAN_CONTEXT  # the propagators are asked, below
        if sc[5]:
            # ``span_context.traceparent(sc[0], sc[1], sc[3])``, written out (a call less per request), with the
            # head of the last trace kept: a client's requests in one turn are spans of one trace.
            head = _head[0]
            if head[0] != sc[0]:
                head = _head[0] = (sc[0], f"00-{sc[0].to_bytes(16).hex()}-")
            tail = FLAGS_TEXT.get(sc[3]) or f"-{sc[3]:02x}"
            out = {"traceparent": f"{head[1]}{sc[1].to_bytes(8).hex()}{tail}"}
            state = sc[4]
            if state is not _DEFAULT_TRACE_STATE and state is not None and len(state):
                out["tracestate"] = state.to_header()
            return out
    return exporter.headers_for(handle.uuid) or None
