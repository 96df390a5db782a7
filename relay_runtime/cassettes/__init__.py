"""Cassettes: record an agent's LLM calls once, replay them offline and exact.

    from relay_runtime import cassettes

    with cassettes.use("tests/cassettes/weather.json", mode="auto"):
        agent.run("What's the weather in Paris?")

Every call made through ``relay_runtime.adapters`` or an instrumented client is
matched on its provider-neutral request; replayed calls come back as the SDK's own
response, stream and exception types, through the same attempt lifecycle as live.
The core holds the file, the matching and the scrubbing; the adapters serve the
recorded exchanges to their SDKs.
"""

from __future__ import annotations

from .cassette import (
    MODES,
    TIMINGS,
    CallTape,
    Cassette,
    CassetteError,
    CassetteMiss,
    note_cancelled,
    register_transient_check,
)
from .in_use import CassetteUse, current, expect, use
from .requests import VOLATILE_PARAMS, jsonable, neutral_request, with_sent_extras

__all__ = [
    "MODES",
    "TIMINGS",
    "VOLATILE_PARAMS",
    "CallTape",
    "Cassette",
    "CassetteError",
    "CassetteMiss",
    "CassetteUse",
    "current",
    "expect",
    "jsonable",
    "neutral_request",
    "note_cancelled",
    "register_transient_check",
    "use",
    "with_sent_extras",
]
