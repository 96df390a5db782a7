"""JSON-ready copies of recorded values, scrubbed like every other sink, and ATOF's clock format."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from relay_runtime import redaction

_MAX_DEPTH = 64


def plain(value: Any, *, keys: bool = True, depth: int = 0) -> Any:
    """``value`` as JSON-ready data with credentials blanked.

    ``keys``: entries under a credential key (``api_key``, ``password``, ...) are blanked, as the
    core does for request kwargs; the conversation itself (messages, tool schemas) is passed with
    ``keys=False``, since a tool may well declare a ``password`` property. Either way a client key the
    relay remembered is blanked wherever it stands in text. Objects that are not JSON (an SDK's
    pydantic model, a dataclass) become their dump, anything else its ``repr``.
    """
    kind = type(value)
    if kind is str:
        return redaction.scrub_text(value)
    if kind in (int, float, bool) or value is None:
        return value
    if depth > _MAX_DEPTH:
        return redaction.REDACTED
    if kind is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = k if type(k) is str else str(k)
            out[key] = (
                redaction.REDACTED
                if keys and redaction.is_credential_key(key)
                else plain(v, keys=keys, depth=depth + 1)
            )
        return out
    if kind is list or kind is tuple:
        return [plain(v, keys=keys, depth=depth + 1) for v in value]
    if isinstance(value, str):  # a str enum: its value
        return redaction.scrub_text(str.__str__(value))
    if isinstance(value, (int, float)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return plain(dump(mode="json", exclude_none=True), keys=keys, depth=depth + 1)
        except Exception:
            return redaction.scrub_text(repr(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return plain({k: v for k, v in fields.items() if v not in (None, [], {})}, keys=keys, depth=depth + 1)
    return redaction.scrub_text(repr(value))


_second_cache: dict[int, str] = {}


def rfc3339(ns: int) -> str:
    """``ns`` since the epoch as RFC 3339 in UTC with nanoseconds, as NeMo Relay writes timestamps."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    head = _second_cache.get(seconds)
    if head is None:
        if len(_second_cache) > 4096:
            _second_cache.clear()
        head = _second_cache[seconds] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{head}.{fraction:09d}+00:00"


def parse_rfc3339(text: str) -> int | None:
    """The nanoseconds ``rfc3339`` wrote (or any RFC 3339 time); None for text that is not one."""
    import datetime

    if not isinstance(text, str) or "T" not in text:
        return None
    head, _, rest = text.partition(".")
    fraction = "0"
    zone = rest
    if rest:
        digits = 0
        while digits < len(rest) and rest[digits].isdigit():
            digits += 1
        fraction, zone = rest[:digits] or "0", rest[digits:]
    else:
        for sign in ("Z", "+", "-"):
            idx = head.rfind(sign, 10)
            if idx != -1:
                head, zone = head[:idx], head[idx:]
                break
    try:
        moment = datetime.datetime.fromisoformat(head + (zone.replace("Z", "+00:00") or "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp()) * 1_000_000_000 + int(fraction[:9].ljust(9, "0"))
