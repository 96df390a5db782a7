"""Voice latency: the ``relay.voice`` measures a scope carries become span attributes and, for the
durations, histograms in seconds under the same names.

The voice relay puts its measures in a scope's end metadata under one key (``relay.voice``), so
an end event without it costs this exporter one dict lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.metrics import MeterProvider

MEASURES_KEY = "relay.voice"
# Per-occurrence durations (a turn's latency, one reconnect's gap), recorded as histograms.
DURATIONS = (
    "relay.voice.perceived_latency",
    "relay.voice.time_to_first_audio",
    "relay.voice.time_to_first_text",
    "relay.voice.hop_latency",
    "relay.voice.reconnect_gap",
    "relay.voice.unplayed_audio",
)
# Voice latency lives well below the GenAI operation buckets: a relay hop is a millisecond or less.
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_DESCRIPTIONS = {
    "relay.voice.perceived_latency": "End of user speech to the first audio byte sent to the phone.",
    "relay.voice.time_to_first_audio": "End of user speech to the provider's first audio.",
    "relay.voice.time_to_first_text": "End of user speech to the provider's first text.",
    "relay.voice.hop_latency": "Provider event in to phone event out, the worst in a user turn.",
    "relay.voice.reconnect_gap": "Phone socket lost to phone back on the session.",
    "relay.voice.unplayed_audio": "Audio generated for a turn that the user never heard.",
}


def voice_attributes(measures: Any, out: dict[str, Any]) -> None:
    if not isinstance(measures, Mapping):
        return
    for name, value in measures.items():
        if isinstance(name, str) and type(value) in (int, float, bool, str):
            out[name] = value


class VoiceMetrics:
    def __init__(self, meter_provider: MeterProvider, version: str) -> None:
        meter = meter_provider.get_meter("relay_runtime.otel", version)
        self._histograms = {
            name: meter.create_histogram(name, unit="s", description=_DESCRIPTIONS[name],
                                         explicit_bucket_boundaries_advisory=BUCKETS)
            for name in DURATIONS
        }

    def record(self, measures: Any) -> None:
        if not isinstance(measures, Mapping):
            return
        for name, value in measures.items():
            histogram = self._histograms.get(name)
            if histogram is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
                histogram.record(value)
