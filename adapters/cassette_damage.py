"""What makes a recorded HTTP exchange unplayable (a hand-edited or truncated cassette): told before it is played.

Every check here stands for an error the SDK or the replay would otherwise raise
raw (``AttributeError``, ``KeyError``, ``JSONDecodeError``, ``OverflowError``,
``InvalidURL``) with nothing to say which file or entry is wrong.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

# Recorded waits longer than this are no recording of a real answer (and overflow the clock).
_MAX_WAIT_MS = 3_600_000.0


def damage(exchange: dict[str, Any]) -> str | None:
    """What is wrong with ``exchange``, or None when it can be played."""
    return _frame(exchange) or _events(exchange.get("events")) or _body(exchange)


def _frame(exchange: dict[str, Any]) -> str | None:
    status = exchange.get("status")
    if "status" in exchange and (type(status) is not int or not 100 <= status <= 599):
        return f"status {status!r} is not an HTTP status"
    if "status" not in exchange and not isinstance(exchange.get("error"), dict):
        return "it has neither a status nor a recorded error"
    headers = exchange.get("headers")
    if headers is not None and not (
        isinstance(headers, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        return "headers must be an object of strings"
    if "error" in exchange and not isinstance(exchange["error"], dict):
        return "error must be an object"
    for name in ("method", "path"):
        if name in exchange and not isinstance(exchange[name], str):
            return f"{name} must be a string"
    path = exchange.get("path")
    if isinstance(path, str) and not path.startswith("/"):
        return f"path {path[:80]!r} must begin with '/'"
    return _wait("latency_ms", exchange.get("latency_ms"))


def _wait(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= _MAX_WAIT_MS:
        return f"{name} {value!r} is not a number of milliseconds between 0 and {_MAX_WAIT_MS:.0f}"
    return None


def _events(events: Any) -> str | None:
    if events is None:
        return None
    if not isinstance(events, list):
        return "events must be a list"
    for index, event in enumerate(events):
        where = f"events[{index}]"
        if not isinstance(event, dict):
            return f"{where} must be an object"
        if "data" not in event and "event" not in event:
            return f"{where} has neither data nor an event name"
        for name in ("event", "id", "retry"):
            if name in event and not isinstance(event[name], str):
                return f"{where}.{name} must be a string"
        data = event.get("data")
        if isinstance(data, str) and _looks_like_json(data) and not _parses(data):
            # The recorder keeps a JSON object or array as itself: this is JSON text broken by hand.
            return f"{where}.data is JSON text that does not parse"
        problem = _wait(f"{where}.at_ms", event.get("at_ms"))
        if problem:
            return problem
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
    headers = exchange.get("headers") or {}
    json_answer = "json" in str(headers.get("content-type", "application/json")).lower()
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
