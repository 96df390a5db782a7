"""``span`` rows: one node of a run's tree (a framework's agents and nodes, tools, logical calls,
attempts), written when its scope ends, and the model a row names.
"""

from __future__ import annotations

from typing import Any

from relay_runtime import Event
from relay_runtime import conventions as cv
from relay_runtime.cost import AttemptCost, CostRollup

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens")


def span_row(kind: str, event: Event) -> tuple[str, dict[str, Any]]:
    """A ``span`` row: one node of the run's tree (a framework's agents and nodes, tools, logical calls,
    attempts), written when it ends."""
    output = event.output if isinstance(event.output, dict) else {}
    payload: dict[str, Any] = {
        "kind": kind,
        "id": event.uuid,
        "parent_id": event.parent_uuid,
        "name": event.name,
        "outcome": event.outcome or output.get("outcome"),
        "provider": event.provider or output.get("provider"),
        "model": response_model(event) or event.model_name or output.get("model"),
    }
    if event.start_timestamp is not None:
        payload["duration_s"] = (event.timestamp - event.start_timestamp) / 1e9
    for key in (cv.CALL_ROLE, cv.RETRY_COUNT, cv.API_REQUEST_ID):
        value = event.metadata.get(key)
        if value is not None:
            payload[key] = value
    if event.error_type:
        payload["error_type"] = event.error_type
        payload["error_message"] = event.error_message
    if isinstance(event.cost, (AttemptCost, CostRollup)):
        payload["cost"] = event.cost.as_dict()
    annotation = event.annotated_response if kind == "attempt" else None
    if annotation is not None:
        for name in USAGE_FIELDS:
            value = getattr(annotation.usage, name, None)
            if isinstance(value, int):
                payload[name] = value
    return ("span", {key: value for key, value in payload.items() if value is not None})


def response_model(event: Event) -> str | None:
    annotation = event.annotated_response
    model = annotation.model if annotation is not None else None
    if not model:
        output = event.output
        model = output.get("model") if isinstance(output, dict) else getattr(output, "model", None)
    return model if isinstance(model, str) and model else None
