"""What makes a recorded HTTP exchange unplayable (a hand-edited or truncated cassette): told before it is played.

Every check here stands for an error the SDK or the replay would otherwise raise
raw (``AttributeError``, ``KeyError``, ``JSONDecodeError``, ``OverflowError``,
``InvalidURL``) with nothing to say which file or entry is wrong.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from typing import Any

# Recorded waits longer than this are no recording of a real answer (and overflow the clock).
_MAX_WAIT_MS = 3_600_000.0
_NUMBERS = (int, float)

# What is wrong with a recorded try's events (a list), or None. Each provider's stream has its own
# event shape (SSE events, Bedrock's event-stream messages, Gemini's chunks): the frame, the body and
# the events being a list are checked here alike for all.
EventsDamage = Callable[[list[Any]], str | None]


def damage(exchange: dict[str, Any], events: EventsDamage | None = None) -> str | None:
    """What is wrong with ``exchange``, or None when it can be played; ``events`` checks its stream's
    events (SSE events, as the OpenAI and Anthropic SDKs read them, by default)."""
    return _frame(exchange) or _events(exchange.get("events"), events or sse_events_damage) or _body(exchange)


def _frame(exchange: dict[str, Any]) -> str | None:
    status, error = exchange.get("status"), exchange.get("error")
    if error is not None and type(error) is not dict:
        return "error must be an object"  # before the status: a try with no status is played as its error
    if status is None:
        if error is None:
            return "it has neither a status nor a recorded error"
    elif type(status) is not int or not 100 <= status <= 599:
        return f"status {status!r} is not an HTTP status"
    headers = exchange.get("headers")
    if headers is not None:
        if type(headers) is not dict:
            return "headers must be an object of strings"
        for name, value in headers.items():
            if type(name) is not str or type(value) is not str:
                return "headers must be an object of strings"
    method, path = exchange.get("method"), exchange.get("path")
    if method is not None and type(method) is not str:
        return "method must be a string"
    if path is not None and (type(path) is not str or not path.startswith("/")):
        return f"path {path!r:.80} must be a string beginning with '/'"
    latency = exchange.get("latency_ms")
    if latency is not None and not (type(latency) in _NUMBERS and 0 <= latency <= _MAX_WAIT_MS):  # NaN fails too
        return _wait("latency_ms", latency)
    return None


def _wait(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= _MAX_WAIT_MS:
        return f"{name} {value!r} is not a number of milliseconds between 0 and {_MAX_WAIT_MS:.0f}"
    return None


def _events(events: Any, check: EventsDamage) -> str | None:
    if events is None:
        return None
    if not isinstance(events, list):
        return "events must be a list"
    return check(events)


def sse_events_damage(events: list[Any]) -> str | None:
    """What is wrong with recorded SSE events (``event``, ``data``, ``id``, ``retry``, ``at_ms``), or None."""
    # One pass that reads each event once: this runs before every replayed stream.
    for index, event in enumerate(events):
        if type(event) is not dict:
            return f"events[{index}] must be an object"
        data = event.get("data")
        name = event.get("event")
        if data is None and name is None and "data" not in event:
            return f"events[{index}] has neither data nor an event name"
        if name is not None and type(name) is not str:
            return f"events[{index}].event must be a string"
        if ("id" in event or "retry" in event) and not all(
            type(event[k]) is str for k in ("id", "retry") if k in event
        ):
            return f"events[{index}].id and .retry must be strings"
        if type(data) is str and _looks_like_json(data) and not _parses(data):
            # The recorder keeps a JSON object or array as itself: this is JSON text broken by hand.
            return f"events[{index}].data is JSON text that does not parse"
        at = event.get("at_ms")
        if at is not None and not (type(at) in _NUMBERS and 0 <= at <= _MAX_WAIT_MS):  # NaN fails too
            return _wait(f"events[{index}].at_ms", at)
    return None


def _body(exchange: dict[str, Any]) -> str | None:
    if "body" not in exchange and "text" not in exchange and "base64" in exchange:
        try:
            base64.b64decode(str(exchange["base64"]), validate=True)
        except ValueError:
            return "base64 is not base64"
    status = exchange.get("status")
    if type(status) is not int or not 200 <= status < 300 or "events" in exchange:
        return None
    # Header names are any case: Bedrock keeps botocore's "Content-Type", httpx gives "content-type".
    headers = exchange.get("headers") or {}
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "application/json")
    json_answer = "json" in content_type.lower()
    if not json_answer:
        return None
    if "body" in exchange:
        return None if isinstance(exchange["body"], dict) else "a 2xx JSON answer's body must be an object"
    if "text" in exchange:
        return None if _parses(str(exchange["text"])) else "text is not the JSON its content-type says"
    if "base64" not in exchange:
        return "a 2xx JSON answer has no body"
    return None


def _looks_like_json(text: str) -> bool:
    text = text.strip()
    return text[:1] in ("{", "[") and text != "[DONE]"  # OpenAI's end marker is no JSON


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
