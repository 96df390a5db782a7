"""The addresses a request's conversation gives the model, recorded without the credentials they carry.

An image or a file is given to the model by its address: OpenAI chat's ``image_url.url``, Responses'
``input_image`` / ``input_file`` (``image_url``, ``file_url``), Anthropic's ``image`` / ``document`` blocks
with a ``url`` source (a ``search_result``'s ``source``), Gemini's ``file_data.file_uri``
(``types.Part.from_uri``), LangChain's blocks (``url``), in a Bedrock ``invoke_model`` body's JSON text
too. A signed address (a GCS or S3 presigned URL, an Azure SAS) carries its signature and token in its
query, and the conversation is recorded as it was sent (``redaction``'s ``CONVERSATION_KWARGS``): every
record of the request (its events, JSONL, spans, the journal, trajectories, cassettes) held them. Such an
address is recorded as ``urls.recorded_url`` records one: its user info and the values of its credential
query parameters (``?X-Goog-Signature=``, ``?sig=``, ``?key=``) blanked, the rest as given, so the record
still says which file the model was shown.

The values are not remembered as the process's secrets: the conversation is the caller's data (a peer's,
on a server), and a fresh signature per request would push the process's own keys out of that memory
(``urls.recorded_url``'s ``taken``). A provider's error quoting the address is blanked by the query rule
of error texts (``error_text``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .redaction import BODY_TEXT_KWARG, REDACTED, body_kwargs
from .tool_results import blanked as tool_results_blanked
from .urls import recorded_url, signing_times_blanked

_CONVERSATIONS = ("messages", "input", "contents")
# Part types that give the model an address (Gemini's parts have no type), and a tool result's, which holds parts.
_URL_TYPES = frozenset({"image_url", "input_image", "input_file", "image", "document", "file", "search_result"})
_NESTING_TYPES = frozenset({"tool_result", "function_call_output"})
_WALKED_TYPES = _URL_TYPES | _NESTING_TYPES | {None}
# Where a part holds its address: the key, and the key under it when its value is an object.
_URL_PLACES = (
    ("image_url", "url"),
    ("file_url", None),
    ("url", None),
    ("source", "url"),
    ("file_data", "file_uri"),
    ("fileData", "fileUri"),
)


def recorded(kwargs: Mapping[str, Any], taken: list[str] | None = None) -> Mapping[str, Any]:
    """``kwargs`` (an SDK call's, or a cassette's neutral request) as every record holds its conversation:
    its tools' results blanked (``tool_results``) and its addresses without their credentials. ``kwargs``
    itself when there was nothing to blank (nearly every request).

    ``taken``: where the credential values taken out of the addresses go, for a caller that cuts them from
    what else it records of the request (a cassette, from an error body echoing the address).
    """
    if _plain_chat(kwargs):
        return kwargs
    return blanked(tool_results_blanked(kwargs), taken)


# Chat roles whose messages carry no tool's result (``tool_results``' result roles are "tool" and "function").
_PLAIN_ROLES = frozenset({"system", "user", "assistant", "developer"})


def _plain_chat(kwargs: Mapping[str, Any]) -> bool:
    """Whether ``kwargs``' conversation is chat messages of text alone (most requests): then it holds neither a tool's
    result nor an address, and ``recorded`` leaves it as it is without the walks of ``tool_results`` and of this
    module, each of which would loop over its messages to find that out (every managed call records its request
    twice: its start event's input, and the view observers read)."""
    if BODY_TEXT_KWARG in kwargs:
        return False
    for key in _CONVERSATIONS:
        items = kwargs.get(key)
        if items is None or type(items) is str:
            continue
        if type(items) is not list:
            return False
        for item in items:
            if (
                type(item) is not dict
                or type(item.get("content")) is not str
                or item.get("role") not in _PLAIN_ROLES
                or "parts" in item
            ):
                return False
    return True


def blanked(kwargs: Mapping[str, Any], taken: list[str] | None = None) -> Mapping[str, Any]:
    """``kwargs`` with the credentials of its conversation's addresses blanked (itself when none had any)."""
    return _blanked(kwargs, lambda url: _address(url, taken))


def matched(kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """``kwargs`` as a cassette compares it: as ``recorded``, and a signed address without the times of its
    signing either (``?X-Amz-Date=``, ``?X-Goog-Expires=``, a SAS's ``se=``), which a freshly signed address
    changes as it changes its signature: the file the model is shown is the same request."""
    return _blanked(tool_results_blanked(kwargs), _matched_address)


def _blanked(kwargs: Mapping[str, Any], address: Callable[[str], str]) -> Mapping[str, Any]:
    changed: dict[str, Any] | None = None
    for key in _CONVERSATIONS:
        items = kwargs.get(key)
        if items is None or type(items) is str:
            continue
        if type(items) is list:
            if not _may_hold_addresses(items):
                continue
            new: Any = _mapped(items, _item, address)
        else:  # Gemini's contents may be one content or part
            new = _item(items, address)
        if new is not items:
            changed = {} if changed is None else changed
            changed[key] = new
    if BODY_TEXT_KWARG in kwargs:  # Bedrock's invoke_model: the conversation inside the body's JSON text
        body = body_kwargs(kwargs)
        kept = _blanked(body, address) if body is not None else None
        if kept is not body:
            changed = {} if changed is None else changed
            changed[BODY_TEXT_KWARG] = json.dumps(kept, ensure_ascii=False)
    return kwargs if changed is None else {**kwargs, **changed}


def _may_hold_addresses(items: list[Any]) -> bool:
    """Whether any item may hold an address: loops and no call per item or part, since every record of a
    managed call asks it of its whole conversation (most items are text, or parts of text)."""
    for item in items:
        if type(item) is dict:
            content = item.get("content")
            if type(content) is str:
                continue
            if type(content) is list:
                for part in content:
                    if type(part) is not dict or part.get("type") in _WALKED_TYPES:
                        return True
                continue
            if "parts" in item or type(item.get("output")) is list or "file_data" in item or "fileData" in item:
                return True
        elif type(item) is not str:
            return True  # an SDK's or a framework's object (Gemini's Content or Part, LangChain's message)
    return False


Address = Callable[[str], str]


def _mapped(items: list[Any], each: Callable[[Any, Address], Any], address: Address) -> list[Any]:
    """``items`` itself when ``each`` leaves every item as it is, else a copy holding what it made of them."""
    out: list[Any] | None = None
    for i, item in enumerate(items):
        new = each(item, address)
        if new is not item:
            if out is None:
                out = list(items)
            out[i] = new
    return items if out is None else out


def _item(item: Any, address: Address) -> Any:
    """A message, an input item or a Gemini content (or a part given in their place)."""
    if type(item) is dict:
        for key in ("content", "parts", "output"):
            parts = item.get(key)
            if type(parts) is list:
                new = _mapped(parts, _part, address)
                return item if new is parts else {**item, key: new}
        return _part(item, address)
    if type(item) is str or item is None:
        return item
    for name in ("parts", "content"):  # Gemini's Content, LangChain's message: pydantic models
        parts = getattr(item, name, None)
        if type(parts) is list:
            new = _mapped(parts, _part, address)
            return item if new is parts else _copied(item, name, new)
    return _part(item, address)


def _part(part: Any, address: Address) -> Any:
    if type(part) is dict:
        kind = part.get("type")
        if kind in _NESTING_TYPES:  # a tool's result may be images given by address (Anthropic, Responses)
            for key in ("content", "output"):
                parts = part.get(key)
                if type(parts) is list:
                    kept = _mapped(parts, _part, address)
                    return part if kept is parts else {**part, key: kept}
            return part
        if kind is not None and kind not in _URL_TYPES:
            return part
        for key, below in _URL_PLACES:
            value = part.get(key)
            if type(value) is str:
                new = address(value)
                if new is not value:
                    return {**part, key: new}
            elif below is not None and type(value) is dict:
                url = value.get(below)
                if type(url) is str:
                    new = address(url)
                    if new is not url:
                        return {**part, key: {**value, below: new}}
        return part
    data = getattr(part, "file_data", None)  # Gemini's Part (types.Part.from_uri)
    url = getattr(data, "file_uri", None)
    if type(url) is str:
        new = address(url)
        if new is not url:
            return _copied(part, "file_data", _copied(data, "file_uri", new))
    return part


def _address(url: str, taken: list[str] | None) -> str:
    """``url`` itself when it holds no credential, else as records hold it."""
    if url.startswith("data:"):  # inline data (megabytes of base64): no address, no credential
        return url
    new = recorded_url(url, [] if taken is None else taken)
    return url if new == url else new


def _matched_address(url: str) -> str:
    """``url`` as records hold it, and, when it was signed (a credential blanked now, or in the recording
    already), without the times of its signing."""
    new = _address(url, [])
    return signing_times_blanked(new) if REDACTED in new else new


def _copied(model: Any, field: str, value: Any) -> Any:
    """A copy of an SDK's model with ``field`` set; the model itself when it cannot be copied (then unchanged)."""
    copy = getattr(model, "model_copy", None)
    return model if copy is None else copy(update={field: value})
