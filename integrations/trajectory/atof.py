"""ATOF: one JSON object per scope start, scope end and mark, with NeMo Relay's field names.

``atof_event`` turns one relay event into the dict a line holds; ``Roots`` follows the
scope tree so each line names its ``propagation_root_uuid`` (the top of its tree: the
conversation scope). Our tree is deeper than NeMo's (conversation, turn, logical call,
one LLM scope per attempt): every scope is written, and parent links point to them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from relay_runtime import CHUNK_MARK, MARK, SCOPE_END, SCOPE_START, Event
from relay_runtime import conventions as cv
from relay_runtime.types import ScopeType

from .plain import plain, rfc3339
from .records import TOOL_CALL_ID

ATOF_VERSION = "0.1"
_LLM = ScopeType.LLM.value
_TOOL = ScopeType.TOOL.value
_PRIVATE = frozenset({cv.PROFILE_KEY})  # in-process only: a home directory, never exported
_CONVERSATION = ("messages", "input", "system", "instructions", "tools")


class Roots:
    """The propagation root of every open scope, fed events in order."""

    __slots__ = ("_roots",)

    def __init__(self) -> None:
        self._roots: dict[str, str] = {}

    def of(self, event: Event) -> str:
        uuid, parent = event.uuid, event.parent_uuid
        roots = self._roots
        if event.kind == SCOPE_START:
            root = roots.get(parent, parent) if parent else uuid
            roots[uuid] = root
            return root
        if event.kind == SCOPE_END:
            return roots.pop(uuid, None) or (roots.get(parent, parent) if parent else uuid)
        return roots.get(parent, parent) if parent else uuid


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
    meta = {k: v for k, v in event.metadata.items() if k not in _PRIVATE}
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


def atof_event(event: Event, root: str) -> dict[str, Any]:
    """The ATOF line (as a dict) for one event."""
    kind = event.kind
    category = event.scope_type
    profile: dict[str, Any] | None = None
    if kind == MARK:
        data = _chunk(event.data) if event.name == CHUNK_MARK else plain(event.data)
    elif kind == SCOPE_START:
        data = _request_data(event.input) if category == _LLM else plain(event.input)
    else:
        data = plain(event.output)
    if category == _LLM and kind != MARK:
        profile = {"model_name": event.model_name}
        if kind == SCOPE_START:
            profile["annotated_request"] = _annotation(event.annotated_request)
        else:
            profile["annotated_response"] = _annotation(event.annotated_response)
    elif category == _TOOL and isinstance(call_id := event.metadata.get(TOOL_CALL_ID), str):
        profile = {"tool_call_id": call_id}
    line: dict[str, Any] = {
        "atof_version": ATOF_VERSION,
        "kind": "mark" if kind == MARK else "scope",
    }
    if kind != MARK:
        line["scope_category"] = "start" if kind == SCOPE_START else "end"
    line.update(
        uuid=event.uuid,
        parent_uuid=event.parent_uuid,
        propagation_root_uuid=root,
        timestamp=rfc3339(event.timestamp),
        name=event.name,
        category=category if kind != MARK else None,
        category_profile=profile,
        data=data,
        data_schema=None,
        metadata=metadata_of(event),
    )
    if kind != MARK:
        line["attributes"] = []
    return line
