"""The reasoning an answer object holds, for rules aimed at ``/response/reasoning``.

The provider-neutral response view carries the answer's text and tool calls, not its reasoning: a rule
on ``/response/reasoning`` acts on a stream's chunk marks, whose deltas carry it. The SDK's answer object
on the attempt's end event holds the same reasoning whole (an Anthropic ``thinking`` block, an
OpenAI-compatible message's ``reasoning_content``, a Gemini part marked ``thought``, a Responses API
``reasoning`` item, a Bedrock ``reasoningContent`` block), where only the pathless rules read it. So
those strings are found here by the names the providers give them and read as ``/response/reasoning``;
what the rules make of them is changed in the answer object as every value the view's rules changed is.
Only a policy with a rule on that path pays for this walk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .redaction_objects import fields

_MAX_DEPTH = 32
# Fields holding reasoning text itself (Anthropic's thinking block, OpenAI-compatible servers' message).
_TEXT_KEYS = frozenset({"thinking", "reasoning_content", "reasoning"})
# Fields or item types whose strings are all reasoning, but for the ones below (a Bedrock reasoning block, a
# Responses API reasoning item).
_BLOCK_KEYS = frozenset({"reasoningContent", "reasoning_content"})
_NOT_TEXT = frozenset({"id", "type", "signature", "encrypted_content", "redactedContent", "status", "format"})


def reasoning_texts(answer: Any) -> list[str]:
    """The reasoning strings ``answer`` (an SDK response object, or its dict) holds."""
    found: list[str] = []
    _collect(answer, found, 0)
    return found


def _mapping_of(value: Any, found: list[str], depth: int, walk: Callable[[Any, list[str], int], None]) -> Any:
    """What the walks share: a list's items handed to ``walk``, an object read as its mapping; None when there
    is no mapping to read (a list, a scalar, past the depth)."""
    if depth > _MAX_DEPTH or value is None:
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            walk(item, found, depth + 1)
        return None
    data = value if isinstance(value, Mapping) else fields(value)
    return data if isinstance(data, Mapping) else None


def _collect(value: Any, found: list[str], depth: int) -> None:
    if isinstance(value, (str, bytes, int, float, bool)):
        return
    data = _mapping_of(value, found, depth, _collect)
    if data is None:
        return
    if data.get("type") == "reasoning" or data.get("thought") is True:  # a Responses API item, a Gemini part
        _all_strings(data, found, depth)
        return
    for key, item in data.items():
        if key in _TEXT_KEYS and isinstance(item, str):
            if item:
                found.append(item)
        elif key in _BLOCK_KEYS:
            _all_strings(item, found, depth + 1)
        else:
            _collect(item, found, depth + 1)


def _all_strings(value: Any, found: list[str], depth: int) -> None:
    if isinstance(value, str):
        if value and depth <= _MAX_DEPTH:
            found.append(value)
        return
    data = _mapping_of(value, found, depth, _all_strings)
    if data is not None:
        for key, item in data.items():
            if key not in _NOT_TEXT and key != "thought":
                _all_strings(item, found, depth + 1)
