"""What tail sampling costs the OTel exporter, per span.

A turn of 20 scopes (under a batch processor over an exporter that drops everything, so
only the calling thread's work counts) through ``OTelExporter`` without a sampler, with
``TailSampler(ratio=1.0)`` (every span held, then ended at the turn's end) and with
``TailSampler(ratio=0.0)`` (every span held, then dropped: no SDK export work at all).
The figure is the difference per span; medians of round-robin samples, CPU time.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from benchmarks.bench_core import ROUNDS, _line, compare_sync
from relay_runtime import Relay
from relay_runtime import conventions as cv
from relay_runtime.integrations.otel import OTelExporter, TailSampler

SCOPES = 20  # spans per turn, the turn's own included
TURNS = 200  # turns per sample


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _relay(sampler: TailSampler | None) -> tuple[Relay, OTelExporter]:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=1 << 16))
    relay = Relay("bench-tail")
    exporter = OTelExporter(provider, sampler=sampler).attach(relay)
    return relay, exporter


def _turn(relay: Relay) -> None:
    scope = relay.scope
    turn = scope.push("turn", metadata={cv.KIND: cv.TURN})
    for i in range(SCOPES - 1):
        scope.pop(scope.push("step", metadata={"i": i}))
    scope.pop(turn)


def main() -> None:
    print(f"python {sys.version.split()[0]}; medians of {ROUNDS} samples of {TURNS} turns of {SCOPES} spans")
    plain, plain_exp = _relay(None)
    kept, kept_exp = _relay(TailSampler(ratio=1.0))
    dropped, dropped_exp = _relay(TailSampler(ratio=0.0))
    times = compare_sync(
        {"none": lambda: _turn(plain), "kept": lambda: _turn(kept), "dropped": lambda: _turn(dropped)}, n=TURNS
    )
    per_span = {name: t / SCOPES for name, t in times.items()}
    print("exporter per span (a turn of scopes, batch processor, nothing exported)")
    _line("no sampler", per_span["none"])
    _line("TailSampler(ratio=1.0): all held, then ended", per_span["kept"])
    _line("TailSampler(ratio=0.0): all held, then dropped", per_span["dropped"])
    _line("sampler's cost per kept span", per_span["kept"] - per_span["none"])
    for exporter in (plain_exp, kept_exp, dropped_exp):
        exporter.shutdown()


if __name__ == "__main__":
    main()
