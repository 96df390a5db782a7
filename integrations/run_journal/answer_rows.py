"""The payloads of the rows that say what a run's calls and tools answered, beside the answers streamed as
they came (``token`` / ``reasoning``): an execution intercept's fallback answer, an answer the validator
rejected, a tool's result. The journal subscriber writes them; these only shape them.
"""

from __future__ import annotations

from typing import Any

from relay_runtime import Event
from relay_runtime import conventions as cv
from relay_runtime.redaction import scrub_text

from ..trajectory.plain import plain
from .span_rows import response_model

RESPONSE_REJECTED = "response_rejected"


def fallback_rows(event: Event) -> list[tuple[str, Any]]:
    """A fallback mark's answer (``cv.FALLBACK_ANSWER``) as the rows a served answer gets: its text as a
    ``token`` row (the run's last assistant text), its tool calls as a ``tool_call`` row."""
    annotation = event.annotated_response
    if annotation is None:
        return []
    rows: list[tuple[str, Any]] = []
    if annotation.output_text:
        rows.append(("token", {"text": scrub_text(annotation.output_text)}))  # it may quote the caller's key
    if annotation.tool_calls:
        rows.append(("tool_call", {"calls": annotation.tool_calls}))
    return rows


def rejection(route: tuple[str, str | None], event: Event) -> dict[str, Any]:
    """The ``warning`` of an answer the validator rejected, served by ``route`` (provider, model)."""
    provider, model = route
    return {
        "type": RESPONSE_REJECTED,
        "provider": provider,
        "model": response_model(event) or model,
        "call_role": event.metadata.get(cv.CALL_ROLE),
        "retry_count": event.metadata.get(cv.RETRY_COUNT),
        "message": event.error_message or "",
    }


def tool_result(event: Event, held: Any) -> dict[str, Any]:
    """A tool's ``tool_result`` row; ``held``: its result as taken when its end was delivered."""
    result: dict[str, Any] = {"name": event.name, "outcome": event.outcome}
    if event.error_type:
        result["error"] = {"type": event.error_type, "message": event.error_message}
    if event.start_timestamp is not None:
        result["duration_ms"] = (event.timestamp - event.start_timestamp) / 1e6
    if held is not None:
        result["result"] = held
    elif event.output is not None:
        result["result"] = plain(event.output)
    return result
