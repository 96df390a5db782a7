"""Which model really served a run: the observation rows and the rules that read them back.

The producer writes ``runtime_model`` rows; a reader folds every row of the
run, in order, through :class:`RuntimeModelFold`. The rules are strict on
purpose: a row that cannot prove it belongs to this run and names a serving
model clears what was known rather than leaving a stale answer standing.
"""

from __future__ import annotations

from typing import Any

EVENT = "runtime_model"
OBSERVED_OUTPUT = "observed_output"
ROUTE_OBSERVED = "route_observed"
PHASES = frozenset((OBSERVED_OUTPUT, ROUTE_OBSERVED))


def observation(
    *, session_id: str, run_id: str, model: str, provider: str | None, fallback_active: bool, phase: str
) -> dict[str, Any]:
    """The payload of a ``runtime_model`` row (``stream_id`` is the run id)."""
    return {
        "session_id": session_id,
        "stream_id": run_id,
        "model": model,
        "provider": provider or "",
        "fallback_active": fallback_active,
        "phase": phase,
    }


def is_fallback_warning(event: Any, payload: Any) -> bool:
    return event == "warning" and isinstance(payload, dict) and payload.get("type") == "fallback"


class RuntimeModelFold:
    """Walks rows in order; ``value`` is the accepted observation or ``None``."""

    __slots__ = ("run_id", "session_id", "value")

    def __init__(self, session_id: str, run_id: str) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.value: dict[str, Any] | None = None

    def feed(self, row: dict[str, Any]) -> None:
        if row.get("session_id") != self.session_id or row.get("run_id") != self.run_id:
            return
        event = row.get("event")
        payload = row.get("payload")
        if event == EVENT:
            self.value = self._accept(payload) if isinstance(payload, dict) else None
        elif is_fallback_warning(event, payload):
            self.value = None

    def _accept(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        model = payload.get("model")
        fallback_active = payload.get("fallback_active")
        phase = payload.get("phase")
        if (
            payload.get("session_id") != self.session_id
            or payload.get("stream_id") != self.run_id
            or not isinstance(model, str)
            or not model
            or not isinstance(fallback_active, bool)
            or phase not in PHASES
        ):
            return None
        accepted: dict[str, Any] = {
            "session_id": self.session_id,
            "stream_id": self.run_id,
            "model": model,
            "fallback_active": fallback_active,
            "phase": phase,
        }
        provider = payload.get("provider")
        if isinstance(provider, str) and provider:
            accepted["provider"] = provider
        return accepted
