"""The GenAI client metrics, with the bucket boundaries the conventions specify.

With an SDK ``MeterProvider`` a call's points are recorded off the caller's thread
(``metric_batch.py``), except where the moment of recording shows in what is exported:

- the first time a series (an instrument and attribute set) is seen, its points are
  recorded in place, so that a cumulative series' start time is not later than its first point;
- when an exemplar may be taken (the exemplar filter is not the default trace-based one
  or always-off, or a sampled span is current), so that it carries the right time and span.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, TraceBasedExemplarFilter
from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider

from relay_runtime.cost import AttemptCost
from relay_runtime.events import Event

from . import attributes as attrs
from .metric_batch import MetricBatch

# From the GenAI metrics conventions ("SHOULD be specified with ExplicitBucketBoundaries of ...").
TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
# From the GenAI cost proposal (open-telemetry/semantic-conventions-genai#443, not yet merged).
OPERATION_COST = "gen_ai.client.operation.cost"


class GenAIMetrics:
    def __init__(self, meter_provider: MeterProvider, version: str, *, batch: bool = True) -> None:
        meter = meter_provider.get_meter("relay_runtime.otel", version)
        self._tokens = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._ttfc = meter.create_histogram(
            TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk in a streaming response.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._cost = meter.create_histogram(
            OPERATION_COST,
            unit="{currency}",
            description="Cost of one GenAI operation, in the currency of gen_ai.usage.cost.currency.",
        )
        # Attribute sets per key, made once: the SDK copies what it is given.
        self._sets: dict[Any, tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
        self._seen: set[Any] = set()  # the shapes of points already recorded once (see the module's doc)
        # Attempts their turn's end cut off unpriced, by uuid: their answer may still come and be charged
        # (``record_late_charge``). Bounded, the oldest out.
        self._cut_off: dict[str, Any] = {}
        self.batch: MetricBatch | None = None
        self._trace_based = False
        if batch and isinstance(meter_provider, SDKMeterProvider):
            exemplars = type(getattr(getattr(meter_provider, "_sdk_config", None), "exemplar_filter", None))
            if exemplars in (TraceBasedExemplarFilter, AlwaysOffExemplarFilter):
                self._trace_based = exemplars is TraceBasedExemplarFilter
                self.batch = MetricBatch(meter, self._emit_queued)

    def record_attempt(self, event: Event, err: str | None) -> None:
        """One provider call's duration, token usage (per ``gen_ai.token.type``), time to first chunk and cost."""
        resp = event.annotated_response
        key = attrs.metric_key(event, resp)
        tokens_in = tokens_out = ttfc = None
        if resp is not None:
            usage = resp.usage
            if usage is not None:
                tokens_in = attrs.input_tokens_total(key[1], usage)
                tokens_out = usage.output_tokens
            ttfc = resp.time_to_first_chunk_ns
        cost = event.cost
        amount = currency = None
        if isinstance(cost, AttemptCost) and cost.amount is not None:
            amount, currency = cost.amount, cost.currency
        elif cost is None and event.outcome == _CANCELLED:
            self._remember_cut_off(event.uuid, key)
        duration = event.duration_ns
        point = (key, err, duration, tokens_in, tokens_out, ttfc, amount, currency)
        batch = self.batch
        if batch is not None and not (self._trace_based and _sampled_span_current()):
            shape = (key, err, duration is None, tokens_in is None, tokens_out is None, ttfc is None, currency)
            try:
                seen = shape in self._seen
            except TypeError:  # an unhashable value where a string belongs: recorded in place, as given
                seen = False
            if seen and batch.offer(point):
                return
            if not seen and len(self._seen) < _MAX_SHAPES:
                self._seen.add(shape)
        self._emit(point, None)

    def _remember_cut_off(self, uuid: str, key: Any) -> None:
        cut_off = self._cut_off
        cut_off[uuid] = key
        if len(cut_off) > _MAX_SHAPES:
            try:
                del cut_off[next(iter(cut_off))]
            except (RuntimeError, KeyError, StopIteration):  # another thread changed it meanwhile
                pass

    def record_late_charge(self, event: Event) -> None:
        """The cost of an attempt priced after its end (``relay.cost.late_charge``, marked on it): its answer
        came after its turn ended, and was billed. Counted under the attempt's own attributes."""
        key = self._cut_off.pop(event.parent_uuid or "", None)
        data = event.data
        cost = data.get("cost") if isinstance(data, dict) else None
        if key is None or not isinstance(cost, dict):
            return
        amount, currency = cost.get("amount"), cost.get("currency")
        if isinstance(amount, (int, float)) and not isinstance(amount, bool) and isinstance(currency, str):
            self._emit((key, None, None, None, None, None, amount, currency), None)

    def close(self) -> None:
        """Record every queued point now (before a flush or a shutdown) and stop queueing."""
        if self.batch is not None:
            self.batch.close()

    def _emit_queued(self, point: tuple[Any, ...]) -> None:
        # Queued only where no exemplar would be taken: an empty context keeps the
        # worker's (or a collecting thread's) own current span out of it.
        self._emit(point, _NO_CONTEXT)

    def _emit(self, point: tuple[Any, ...], context: Context | None) -> None:
        key, err, duration, tokens_in, tokens_out, ttfc, amount, currency = point
        try:
            sets = self._sets.get((key, err))
        except TypeError:
            sets = None
        if sets is None:
            sets = self._attribute_sets(key, err)
        base, for_duration, for_input, for_output = sets
        if amount is not None:
            self._cost.record(amount, {**base, attrs.COST_CURRENCY: currency, attrs.COST_SOURCE: "local"}, context)
        if duration is not None:
            self._duration.record(duration / 1e9, for_duration, context)
        if tokens_in is not None:
            self._tokens.record(tokens_in, for_input, context)
        if tokens_out is not None:
            self._tokens.record(tokens_out, for_output, context)
        if ttfc is not None:
            self._ttfc.record(ttfc / 1e9, base, context)

    def _attribute_sets(
        self, key: Any, err: str | None
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        base = attrs.metric_attributes(key)
        sets = (
            base,
            {**base, "error.type": err} if err else base,
            {**base, _TOKEN_TYPE: "input"},
            {**base, _TOKEN_TYPE: "output"},
        )
        if len(self._sets) >= _MAX_SHAPES:
            self._sets.clear()
        try:
            self._sets[(key, err)] = sets
        except TypeError:
            pass
        return sets


def _sampled_span_current() -> bool:
    """Whether a sampled span is current, as ``get_current_span()`` would find it (a value under its key
    that is a Span, else the invalid span), in one context lookup: no span, the usual case, is not sampled."""
    span = _get_current_context().get(_SPAN_KEY)
    return span is not None and isinstance(span, trace_api.Span) and bool(span.get_span_context().trace_flags.sampled)


_get_current_context = context_api.get_current
# The key the API keeps the current span under (its own name for it is private): the one key of a
# context holding nothing else but a span.
(_SPAN_KEY,) = trace_api.set_span_in_context(trace_api.INVALID_SPAN, Context())


_TOKEN_TYPE = "gen_ai.token.type"
_CANCELLED = "cancelled"
_NO_CONTEXT = Context()
# Bounds the per-exporter caches of attribute sets and of series seen (the SDK's own
# cardinality limit is 2000 per instrument); past it, new series are recorded in place.
_MAX_SHAPES = 4096
