"""A cassette under a ``RedactionPolicy``: what is stored, matched and checked.

The policy in force is the one of the relay whose attempt makes the call. The live
request is redacted before it is matched (so it compares equal to what was stored),
each new call is stored redacted (its request, and every string of its HTTP answers
through the policy's span rules; whole-field rules reach the answers' fields through
what the attempt's end made of them, ``answers``), and the file carries the policy's
fingerprint: replaying it under another policy, or none, is a ``CassetteError`` that
says to re-record.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus, unquote_plus

from ..attempt import current_attempt
from ..redaction_policy import RedactionPolicy
from ..redaction_streams import redact_across
from ..urls import edit_query

if TYPE_CHECKING:
    from pathlib import Path

FINGERPRINT_KEY = "redaction"
_MAX_DEPTH = 32
# Where a recorded answer holds a stream, one item per event: an HTTP stream's events, a realtime
# session's steps (the provider's events among what was sent).
_STREAMS = frozenset({"events", "session"})
# What redacts one field's strings across a stream's events (see ``streams_across``).
Across = Callable[[list[str]], list[str]]

# Stored request keys -> where the policy reads them: the view's fields at their paths, and what is sent
# beside the view as it is read in events (the tool the model must call as tools are, extras as params).
_READ_AT = {
    "model": ("request", "model"),  # the caller names it (a fine-tune's suffix), as events read it
    "system": ("request", "system"),
    "instructions": ("request", "system"),  # a realtime session's prompt, as its tape stores it
    "messages": ("request", "messages"),
    "tools": ("request", "tools"),
    "params": ("request", "params"),
    "provider_params": ("request", "params"),
    "tool_choice": ("request", "tools"),
    "extra_body": ("request", "params"),
    "extra_query": ("request", "params"),
}


def policy_in_force() -> RedactionPolicy | None:
    """The redaction policy of the relay whose attempt is running here; with no attempt (a realtime
    session's tape, a call nobody manages), the policy of the process's own host."""
    attempt = current_attempt()
    if attempt is not None:
        return attempt.relay.redaction.policy
    from .. import session  # here: the session layer imports what imports this module

    coordinator, profile = session.SESSION_COORDINATOR, session.current_profile_key()
    for host in coordinator.hosts():
        if host.profile_key == profile:
            return host.relay.redaction.policy
    return coordinator.redaction.policy  # no host yet: the one every host will get


def mismatch(path: Path, recorded: str | None, policy: RedactionPolicy | None) -> str | None:
    """Why a cassette recorded under ``recorded`` cannot be replayed under ``policy``, or None."""
    current = policy.fingerprint if policy is not None else None
    if recorded == current:
        return None
    was = f"redaction policy {recorded}" if recorded else "no redaction policy"
    now = f"redaction policy {current}" if current else "no redaction policy"
    return (
        f"cassette {path} was recorded under {was}, and this run uses {now}: its stored requests and "
        f"answers were redacted differently. Re-record it (mode='record', or under pytest --relay-record=all)"
    )


def redact_request(policy: RedactionPolicy, request: dict[str, Any]) -> dict[str, Any]:
    """The neutral request as the policy records it (what is matched and stored): the view's fields at their
    paths, and what is sent beside them (``extra_body``, ``extra_query``, ``tool_choice``) as params are."""
    out = dict(request)
    for key, value in request.items():
        path = _READ_AT.get(key)
        if path is not None:
            out[key] = _as_stored(policy.redact_at(_as_bytes(value, 0), path), 0)
    return out


class _Stored(bytes):
    """UTF-8 bytes the neutral request holds as ``{"base64": ...}`` (``jsonable``), given to the policy's walk as
    the bytes they were: it reads them as their text (a document's, sent as bytes), as it does in events.
    ``stored`` is the object they came as, put back when the walk left them as they were."""

    stored: dict[str, Any]


def _as_bytes(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return value
    if type(value) is dict:
        text = value.get("base64")
        if type(text) is str and len(value) == 1:
            try:
                data = _Stored(base64.b64decode(text, validate=True))
                data.decode("utf-8")
            except ValueError:  # not base64, or binary data (an image): read as the text it is written as
                return value
            data.stored = value
            return data
        return {k: _as_bytes(v, depth + 1) for k, v in value.items()}
    if type(value) is list:
        return [_as_bytes(v, depth + 1) for v in value]
    return value


def _as_stored(value: Any, depth: int) -> Any:
    """``_as_bytes`` undone on what the walk made of its result: bytes a rule changed are stored anew."""
    if type(value) is _Stored:
        return value.stored
    if isinstance(value, bytes | bytearray):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if depth > _MAX_DEPTH:
        return value
    if type(value) is dict:
        return {k: _as_stored(v, depth + 1) for k, v in value.items()}
    if type(value) is list:
        return [_as_stored(v, depth + 1) for v in value]
    return value


def redact_answers(policy: RedactionPolicy, call: dict[str, Any]) -> dict[str, Any]:
    """A recorded call's answers (HTTP bodies, provider events) with every value a span rule finds replaced.

    A stream's events are read together first: the same field of each event (a chunk's text delta)
    is one text split in pieces, and a value split across them is replaced there (``redact_across``).
    """
    rules = tuple(r for r in policy.rules if not r.whole)
    out = dict(call)
    for key, value in call.items():
        if key != "request":
            if rules:
                value = streams_across(lambda pieces: redact_across(rules, policy._key, pieces), {key: value})[key]
            out[key] = policy.redact_spans(value)
    request = call.get("request")
    query = request.get("extra_query") if isinstance(request, dict) else None
    if isinstance(query, dict) and query and isinstance(out.get("http"), list):
        out["http"] = [_query_as_stored(exchange, query) for exchange in out["http"]]
    return out


def _query_as_stored(exchange: Any, query: dict[str, Any]) -> Any:
    """An HTTP exchange whose path carries ``extra_query``'s parameters as the stored request has them.

    The SDK writes ``extra_query`` into the URL itself, so a path rule that changed a parameter in the
    stored request (``/request/params/account_id``) must change it in the recorded path too. A text
    parameter the SDK sent differs from the stored one only where the policy changed it.
    """
    path = exchange.get("path") if isinstance(exchange, dict) else None
    if not isinstance(path, str) or "?" not in path:
        return exchange

    def as_stored(name: str, raw_name: str, raw_value: str) -> str | None:
        stored = query.get(name)
        if isinstance(stored, str) and stored != unquote_plus(raw_value):
            return f"{raw_name}={quote_plus(stored)}"
        return None

    rebuilt = edit_query(path, as_stored)
    return exchange if rebuilt == path else {**exchange, "path": rebuilt}


def streams_across(redact: Across, value: Any, depth: int = 0) -> Any:
    """``value`` with each stream in it (``_STREAMS``) redacted across its events: ``redact`` is given each
    field's strings across the events, in order (a chunk's text deltas), and returns them redacted."""
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in _STREAMS and isinstance(v, list) and len(v) > 1:
                out[k] = _across_events(redact, v)
            else:
                out[k] = streams_across(redact, v, depth + 1)
        return out
    if isinstance(value, list):
        return [streams_across(redact, v, depth + 1) for v in value]
    return value


def _across_events(redact: Across, events: list[Any]) -> list[Any]:
    # Each field's strings across the events, in order: (event, path) for each piece.
    fields: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    for i, event in enumerate(events):
        if isinstance(event, dict) and "send" in event:
            continue  # a call the relay made (a realtime session's step): matched on replay, as it was sent
        for path, text in _strings(event, (), 0):
            fields.setdefault(path, []).append((i, text))
    out = list(events)
    for path, found in fields.items():
        if len(found) < 2:
            continue
        redacted = redact([text for _, text in found])
        for (i, text), new in zip(found, redacted, strict=True):
            if new != text:
                out[i] = _replaced(out[i], path, new)
    return out


def _strings(value: Any, path: tuple[str, ...], depth: int) -> Iterator[tuple[tuple[str, ...], str]]:
    if isinstance(value, str):
        yield path, value
    elif depth <= _MAX_DEPTH and isinstance(value, dict):
        for k, v in value.items():
            if k != "$bytes":  # audio and other bytes, as base64: no text to join
                yield from _strings(v, (*path, str(k)), depth + 1)
    elif depth <= _MAX_DEPTH and isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, str(i)), depth + 1)


def _replaced(value: Any, path: tuple[str, ...], new: str) -> Any:
    """A copy of ``value`` with the string at ``path`` (as ``_strings`` named it) set to ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k) == head:
                return {**value, k: _replaced(v, rest, new)}
        return value
    copied = list(value)
    copied[int(head)] = _replaced(copied[int(head)], rest, new)
    return copied
