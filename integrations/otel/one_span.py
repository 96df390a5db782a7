"""One GenAI client span per provider call when another OpenAI / Anthropic instrumentation is also on.

With ``opentelemetry-instrumentation-openai-v2`` or OpenInference's instrumentor active on the same
client, a managed call would be traced twice: our attempt span and theirs. ``OTelExporter`` keeps one:

- by default, ours. While the provider call runs (an execution intercept, last in the chain) the OTel
  context carries ``suppress_instrumentation``, which OpenInference honours, and a marker of our own;
  openai-v2 does not honour suppression, so a client span it starts under that marker is dropped in
  the exporter's span pipeline (its instrumentation scope names it), before any processor sees its end.
- with ``OTelExporter(defer_to_other_instrumentation=True)``, theirs: our attempt span is not made
  (its metrics still are), and the provider call runs with our logical call's span as the current
  span, so their client span sits in our tree where ours would have been.

The intercept is installed by ``attach()`` when one of them is instrumented then (or with
``defer_to_other_instrumentation``), so instrument the other library first; it then checks on every
call (a few dict lookups) and does nothing once they are uninstrumented.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import context as context_api
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import set_span_in_context

from relay_runtime.attempt import current_attempt
from relay_runtime.types import LLMRequest

if TYPE_CHECKING:
    from .exporter import OTelExporter

INTERCEPT_NAME = "otel.one_span"
PRIORITY = 1_000_001  # innermost: after every intercept that retries or rewrites the request
DROPPED = "otel.duplicate_spans_dropped"

# Instrumentors of the provider SDKs (module, class): any of them instrumented means a second span.
OTHER_INSTRUMENTORS: tuple[tuple[str, str], ...] = (
    ("opentelemetry.instrumentation.openai_v2", "OpenAIInstrumentor"),
    ("openinference.instrumentation.openai", "OpenAIInstrumentor"),
    ("opentelemetry.instrumentation.anthropic", "AnthropicInstrumentor"),
    ("openinference.instrumentation.anthropic", "AnthropicInstrumentor"),
)
# Instrumentation scopes whose client spans ignore ``suppress_instrumentation``: dropped under our marker.
UNSUPPRESSED_SCOPES = frozenset({"opentelemetry.instrumentation.openai_v2", "opentelemetry.instrumentation.anthropic"})

_MANAGED_KEY = context_api.create_key("relay_runtime.managed_attempt")


def others_active() -> bool:
    """Whether another instrumentation of the OpenAI / Anthropic SDK is on in this process."""
    for module_name, class_name in OTHER_INSTRUMENTORS:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        instrumentor = getattr(module, class_name, None)
        # BaseInstrumentor is a singleton per class: this is the instance that instrumented, if any.
        if instrumentor is not None and getattr(instrumentor(), "is_instrumented_by_opentelemetry", False):
            return True
    return False


def _context_for_call(exporter: OTelExporter) -> Any:
    """The OTel context the provider call runs in, or None when no other instrumentation is on."""
    if not others_active():
        return None
    if exporter.defer_to_other_instrumentation:
        attempt = current_attempt()
        parent = attempt.handle.parent_uuid if attempt is not None else None
        span = exporter.span_for(parent) if parent is not None else None
        return set_span_in_context(span) if span is not None else None
    ctx = context_api.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True)
    return context_api.set_value(_MANAGED_KEY, True, ctx)


def execution_intercept(exporter: OTelExporter) -> Callable[[str, LLMRequest, Callable[[LLMRequest], Any]], Any]:
    """Runs the provider call in ``_context_for_call``; one function for the sync and async chains."""

    def one_span(name: str, request: LLMRequest, call_next: Callable[[LLMRequest], Any]) -> Any:
        ctx = _context_for_call(exporter)
        if ctx is None:
            return call_next(request)
        token = context_api.attach(ctx)
        try:
            result = call_next(request)
        finally:
            context_api.detach(token)
        if inspect.isawaitable(result):  # an async chain: the provider call runs when awaited
            return _awaited_in(ctx, result)
        return result

    return one_span


async def _awaited_in(ctx: Any, awaitable: Any) -> Any:
    token = context_api.attach(ctx)
    try:
        return await awaitable
    finally:
        context_api.detach(token)


def install(exporter: OTelExporter, relay: Any, *, name: str = INTERCEPT_NAME) -> None:
    fn = execution_intercept(exporter)
    relay.intercepts.register_llm_execution(name, PRIORITY, fn)
    relay.intercepts.register_llm_stream_execution(name, PRIORITY, fn)


def uninstall(relay: Any, *, name: str = INTERCEPT_NAME) -> None:
    relay.intercepts.deregister_llm_execution(name)
    relay.intercepts.deregister_llm_stream_execution(name)


class DropDuplicateClientSpans(SpanProcessor):
    """Wraps a span processor: client spans of ``UNSUPPRESSED_SCOPES`` started inside a managed attempt
    (our marker in their parent context) never reach it; everything else passes through unchanged."""

    def __init__(self, processor: SpanProcessor, count: Callable[[str], None] | None = None) -> None:
        self.processor = processor
        self._count = count
        self._dropping: set[int] = set()
        self._lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        scope = span.instrumentation_scope
        ours = context_api.get_value(_MANAGED_KEY, parent_context)
        if ours and scope is not None and scope.name in UNSUPPRESSED_SCOPES:
            with self._lock:
                self._dropping.add(span.context.span_id)
            return
        self.processor.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self._dropping:
            span_id = span.context.span_id if span.context is not None else None
            with self._lock:
                dropped = span_id in self._dropping
                self._dropping.discard(span_id)
            if dropped:
                if self._count is not None:
                    self._count(DROPPED)
                return
        self.processor.on_end(span)

    def shutdown(self) -> None:
        self.processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.processor.force_flush(timeout_millis)


def filter_pipeline(provider: Any, count: Callable[[str], None] | None = None) -> bool:
    """Put ``DropDuplicateClientSpans`` in front of each processor of an SDK ``TracerProvider`` (once).

    The SDK has no public way to filter spans before its processors: this replaces the processors of
    its active multi-processor (a tuple swapped whole, as ``add_span_processor`` does itself).
    Returns False for a provider that is not the SDK's.
    """
    multi: Any = getattr(provider, "_active_span_processor", None)
    if not isinstance(getattr(multi, "_span_processors", None), tuple):
        return False
    lock = getattr(multi, "_lock", None) or threading.Lock()
    with lock:
        multi._span_processors = tuple(
            p if isinstance(p, DropDuplicateClientSpans) else DropDuplicateClientSpans(p, count)
            for p in multi._span_processors
        )
    return True
