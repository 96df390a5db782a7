"""The GenAI client metrics, with the bucket boundaries the conventions specify."""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider

from relay_runtime.cost import AttemptCost
from relay_runtime.events import Event

from . import attributes as attrs

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
    def __init__(self, meter_provider: MeterProvider, version: str) -> None:
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

    def record_attempt(self, event: Event, err: str | None) -> None:
        """One provider call's duration, token usage (per ``gen_ai.token.type``) and time to first chunk."""
        base = attrs.metric_attributes(event)
        cost = event.cost
        if isinstance(cost, AttemptCost) and cost.amount is not None:
            self._cost.record(cost.amount, {**base, attrs.COST_CURRENCY: cost.currency, attrs.COST_SOURCE: "local"})
        duration = event.duration_ns
        if duration is not None:
            self._duration.record(duration / 1e9, {**base, "error.type": err} if err else base)
        resp = event.annotated_response
        if resp is None:
            return
        usage = resp.usage
        if usage is not None:
            total_in = attrs.input_tokens_total(base.get("gen_ai.provider.name"), usage)
            if total_in is not None:
                self._tokens.record(total_in, {**base, _TOKEN_TYPE: "input"})
            if usage.output_tokens is not None:
                self._tokens.record(usage.output_tokens, {**base, _TOKEN_TYPE: "output"})
        if resp.time_to_first_chunk_ns is not None:
            self._ttfc.record(resp.time_to_first_chunk_ns / 1e9, base)


_TOKEN_TYPE = "gen_ai.token.type"
