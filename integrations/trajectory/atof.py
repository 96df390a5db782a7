"""ATOF: one JSON object per scope start, scope end and mark, with NeMo Relay's field names.

``atof_event`` turns one relay event into the dict a line holds; ``Roots`` follows the
scope tree so each line names its ``propagation_root_uuid`` (the top of its tree: the
conversation scope). Our tree is deeper than NeMo's (conversation, turn, logical call,
one LLM scope per attempt): every scope is written, and parent links point to them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from relay_runtime import CHUNK_MARK, MARK, SCOPE_END, SCOPE_START, Event
from relay_runtime import conventions as cv
from relay_runtime.redaction import CONVERSATION_KWARGS
from relay_runtime.types import ScopeType

from .plain import plain, rfc3339
from .records import TOOL_CALL_ID

ATOF_VERSION = "0.1"
_LLM = ScopeType.LLM.value
_TOOL = ScopeType.TOOL.value
_PRIVATE = frozenset({cv.PROFILE_KEY})  # in-process only: a home directory, never exported
# The conversation kwargs of every codec (Gemini's ``contents``, Converse's ``toolConfig`` too), as the core records
# them: a list of OpenAI's and Anthropic's alone had the others walked by the key rule, in ATOF alone.
_CONVERSATION = CONVERSATION_KWARGS


_ENDED_KEPT = 4096  # roots of the scopes that ended last, for what still comes under them


class Roots:
    """The propagation root of every open scope (and of the last ones ended), fed events in order."""

    __slots__ = ("_ended", "_roots")

    def __init__(self) -> None:
        self._roots: dict[str, str] = {}
        # A mark can come under a scope that has ended (an attempt's late charge, priced once its answer came):
        # its root is still that scope's, not the scope itself.
        self._ended: dict[str, str] = {}

    def _root_under(self, parent: str | None, uuid: str) -> str:
        if not parent:
            return uuid
        return self._roots.get(parent) or self._ended.get(parent) or parent

    def of(self, event: Event) -> str:
        uuid, parent = event.uuid, event.parent_uuid
        if event.kind == SCOPE_START:
            root = self._roots[uuid] = self._root_under(parent, uuid)
            return root
        if event.kind == SCOPE_END:
            root = self._roots.pop(uuid, "") or self._root_under(parent, uuid)
            ended = self._ended
            ended[uuid] = root
            if len(ended) > _ENDED_KEPT:
                del ended[next(iter(ended))]
            return root
        return self._root_under(parent, uuid)


def _annotation(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        raw = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return plain({k: v for k, v in raw.items() if v not in (None, [], {}, "")}, keys=False)
    return plain(value, keys=False)


def _request_data(value: Any) -> Any:
    """An attempt's input (``{headers, content}``, already redacted): the conversation is not key-walked."""
    if isinstance(value, Mapping) and isinstance(value.get("content"), Mapping):
        content = value["content"]
        out = {k: plain(v, keys=k not in _CONVERSATION) for k, v in content.items()}
        return {"headers": plain(value.get("headers") or {}), "content": out}
    return plain(value)


def _chunk(data: Any) -> Any:
    """A stream chunk mark's data, summed up as NeMo Relay does (its index and type), with the text it added."""
    if not isinstance(data, dict):
        return plain(data)
    chunk = data.get("chunk")
    kind = chunk.get("object") or chunk.get("type") if isinstance(chunk, dict) else None
    kind = kind or getattr(chunk, "object", None) or getattr(chunk, "type", None)
    out: dict[str, Any] = {"chunk_index": data.get("index")}
    if isinstance(kind, str):
        out["event_type"] = kind
    delta = data.get("delta")
    for name in ("text", "reasoning", "model"):
        value = getattr(delta, name, None)
        if value:
            out[name] = plain(value)
    return out


def metadata_of(event: Event) -> dict[str, Any] | None:
    given = event.metadata
    if not given and event.kind != SCOPE_END:
        return None
    meta = {k: v for k, v in given.items() if k not in _PRIVATE} if given else {}
    if event.kind == SCOPE_END:
        if event.outcome:
            meta["relay.outcome"] = event.outcome
            meta["otel.status_code"] = "OK" if event.outcome == "success" else "ERROR"
        if event.error_type:
            meta["relay.error_type"] = event.error_type
            meta["relay.error_message"] = event.error_message
        if event.cost is not None and hasattr(event.cost, "as_dict"):
            meta["relay.cost"] = event.cost.as_dict()
    return plain(meta) if meta else None


def _encoder() -> Any:
    """JSON text of a value, compact and UTF-8. CPython's C encoder, made once: ``JSONEncoder.encode``
    builds a new one on every call, which costs more than encoding a small dict."""
    from json import encoder

    make = getattr(encoder, "c_make_encoder", None)
    if make is None:
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=repr).encode
    chunks = make(None, repr, encoder.encode_basestring, None, ":", ",", False, False, True)
    join = "".join

    def encode(value: Any) -> str:
        return join(chunks(value, 0))

    return encode


_encode = _encoder()
_CATEGORIES = {c.value: f'"{c.value}"' for c in ScopeType}


def _json(value: Any) -> str:
    """``value`` as JSON; the common small cases without the encoder (a third of a line's cost otherwise)."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is str:
        return f'"{value}"' if value.isalnum() else _encode(value)
    if kind is int:
        return str(value)
    return _encode(value)


def _id(value: str | None) -> str:
    # The relay's ids are hex strings (relay_runtime.ids): nothing in them needs escaping.
    return "null" if value is None else f'"{value}"'


def atof_line(event: Event, root: str, held: Any = None) -> str:
    """The ATOF line (JSON text, no newline) for one event: what ``atof_event`` gives, encoded.

    Written field by field rather than through the encoder: an exporter writes one an event,
    and the encoder's generic walk over the dict costs more than everything else together.
    ``held``: the event's data as it was when delivered, when the event is written later: an LLM start's
    request as it was sent (``{headers, content}``), a tool's arguments or result (``records.frozen``).
    """
    kind = event.kind
    category = event.scope_type
    timestamp = rfc3339(event.timestamp)
    if kind == MARK:
        data = _chunk(event.data) if event.name == CHUNK_MARK else plain(held if held is not None else event.data)
        return (
            f'{{"atof_version":"{ATOF_VERSION}","kind":"mark","uuid":"{event.uuid}",'
            f'"parent_uuid":{_id(event.parent_uuid)},"propagation_root_uuid":"{root}",'
            f'"timestamp":"{timestamp}","name":{_json(event.name)},"category":null,"category_profile":null,'
            f'"data":{_json(data)},"data_schema":null,"metadata":{_json(metadata_of(event))}}}'
        )
    start = kind == SCOPE_START
    profile = _profile(event, category, start)
    data = held if held is not None else event.input if start else event.output
    if data is not None and type(data) is not int:
        data = _request_data(data) if start and category == _LLM else plain(data)
    return (
        f'{{"atof_version":"{ATOF_VERSION}","kind":"scope","scope_category":"{"start" if start else "end"}",'
        f'"uuid":"{event.uuid}","parent_uuid":{_id(event.parent_uuid)},"propagation_root_uuid":"{root}",'
        f'"timestamp":"{timestamp}","name":{_json(event.name)},'
        f'"category":{_CATEGORIES.get(category or "") or _json(category)},"category_profile":{_json(profile)},'
        f'"data":{_json(data)},"data_schema":null,"metadata":{_json(metadata_of(event))},"attributes":[]}}'
    )


def _profile(event: Event, category: str | None, start: bool) -> dict[str, Any] | None:
    if category == _LLM:
        if start:
            return {"model_name": event.model_name, "annotated_request": _annotation(event.annotated_request)}
        return {"model_name": event.model_name, "annotated_response": _annotation(event.annotated_response)}
    if category == _TOOL and isinstance(call_id := event.metadata.get(TOOL_CALL_ID), str):
        return {"tool_call_id": call_id}
    return None


def atof_event(event: Event, root: str) -> dict[str, Any]:
    """The ATOF line (as a dict) for one event."""
    parsed: dict[str, Any] = json.loads(atof_line(event, root))
    return parsed
