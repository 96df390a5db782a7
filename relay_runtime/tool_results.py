"""The tools' results a request carries back to the model, with the values of credential keys blanked.

A tool that returns an object holding an ``api_key`` has its output recorded with that value blanked
(``redact_value``, key by key). The agent then sends the result back to the model as text (the SDKs
send ``str(result)``: ``user='ada' api_key='sk-...'``), inside the conversation, which the credential
walk leaves alone as conversation: every record of the next request (its start event, JSONL, spans)
carried the value the tool's own record blanked. So the tool results in a request's conversation are
read as text for credential-keyed values (``error_text.keyed_values_blanked``), in every API's shape:
OpenAI chat's ``tool`` (and older ``function``) messages, Responses' function, custom tool, shell and patch
output items, Anthropic's ``tool_result`` blocks (in a Bedrock ``invoke_model`` body's JSON text too),
Bedrock Converse's ``toolResult`` blocks, LangChain's ``ToolMessage``, with the blocks nested in them (search
results, plain-text documents, bare texts); a result given as data (Converse's ``json`` block, Gemini's
``function_response``) is walked by the key rule, its texts read at any depth.
What the model and the user said is left as it is.

An agent sends its whole history on every call: each result's text is read once and remembered, so a
call pays a pass over its conversation's items, not over their text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .error_text import keyed_values_blanked
from .redaction import BODY_TEXT_KWARG, body_kwargs, redact_value

_CONVERSATIONS = ("messages", "input", "contents")
# Responses' items carrying what the caller's side ran back to the model: a function's, a custom tool's, a shell's
# (whose output may print the environment) and a patch's output.
_OUTPUT_ITEMS = frozenset(
    ("function_call_output", "custom_tool_call_output", "local_shell_call_output", "shell_call_output",
     "apply_patch_call_output")
)  # fmt: skip
_RESULT_ROLES = frozenset(("tool", "function"))  # OpenAI chat's messages carrying a result
_MEMO_MAX = 4096
_MAX_DEPTH = 64
_SAME = "\x00unchanged"  # remembered for a text with nothing to blank (never a blanked text: those are kept)
_memo: dict[str, str] = {}
_HAS_PARTS: dict[type, bool] = {}  # by class: whether its objects have ``parts`` (``_parts_of``)


def blanked(kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """``kwargs`` itself when no tool result in its conversation holds a credential-keyed value (nearly
    every request), else a copy whose conversation holds the results blanked."""
    for key in _CONVERSATIONS:  # chat messages, Responses' input items, Gemini's contents
        items = kwargs.get(key)
        if type(items) is list and _holds_results(items):
            return _blanked(kwargs)
    if BODY_TEXT_KWARG in kwargs:  # Bedrock's invoke_model: the conversation inside the body's JSON text
        body = body_kwargs(kwargs)
        kept = blanked(body) if body is not None else None
        if kept is not body:
            return {**kwargs, BODY_TEXT_KWARG: json.dumps(kept, ensure_ascii=False)}
    return kwargs


def _blanked(kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    conversations = {key: kwargs[key] for key in _CONVERSATIONS if type(kwargs.get(key)) is list}
    return _with_all(kwargs, {key: _mapped(items, _item) for key, items in conversations.items()})


def result_blanked(result: Any) -> Any:
    """A tool's result as its own scope records it, the values of credential keys blanked where it is text: a
    string, the strings of its data, or a framework's message carrying it (LangChain's ``ToolMessage``);
    ``result`` itself otherwise."""
    kind = type(result)
    if kind is str or kind is dict or kind is list or kind is tuple:
        return data_blanked(result)
    return _item(result)


def data_blanked(value: Any, depth: int = 0) -> Any:
    """``value`` (a tool's arguments or result) with the values of credential keys blanked in every string of its
    dicts, lists and tuples, as in the text it is sent as (the model's tool call, the tool message carrying the
    result back), which is read whole; ``value`` itself when none held one."""
    kind = type(value)
    if kind is str:
        return text_blanked(value)
    if depth >= _MAX_DEPTH or (kind is not dict and kind is not list and kind is not tuple):
        return value  # not data, or deeper than the key walk goes (``redact_value``): recorded as it left it
    # One pass, no call for the numbers and other scalars that most arguments and results are made of.
    changed: dict[Any, Any] | None = None
    for key, item in value.items() if kind is dict else enumerate(value):
        inner = type(item)
        if inner is str:
            new = text_blanked(item)
        elif inner is dict or inner is list or inner is tuple:
            new = data_blanked(item, depth + 1)
        else:
            continue
        if new is not item:
            if changed is None:
                changed = {}
            changed[key] = new
    if changed is None:
        return value
    if kind is dict:
        return {**value, **changed}
    items = list(value)
    for index, new in changed.items():
        items[index] = new
    return items if kind is list else tuple(items)


def calls_blanked(calls: list[Any]) -> list[Any]:
    """The tool calls an answer asked for (``AnnotatedLLMResponse.tool_calls``), each one's arguments as its tool's
    own scope records them (``redact_value``, then the values of credential keys in their text: ``data_blanked``), so
    a model passing on a password a tool gave it puts it in no record; ``calls`` itself when none held one."""
    out: list[Any] | None = None
    for index, call in enumerate(calls):
        if type(call) is not dict or "arguments" not in call:
            continue
        arguments = call["arguments"]
        clean = _data(arguments)
        if clean is not arguments:
            if out is None:
                out = list(calls)
            out[index] = {**call, "arguments": clean}
    return calls if out is None else out


def _holds_results(items: list[Any]) -> bool:
    """Whether any item may be a tool's result: one loop and no call per item, since every managed call with
    an observer asks it of its whole conversation (most items are the user's and the model's messages)."""
    for item in items:
        if type(item) is dict:
            role = item.get("role")
            if role is None:
                if item.get("type") in _OUTPUT_ITEMS:
                    return True
            elif role == "user":
                if type(item.get("content")) is list:
                    return True
            elif role in _RESULT_ROLES:
                return True
            if type(item.get("parts")) is list:
                return True
        elif type(item) is not str and (getattr(item, "type", None) == "tool" or _parts_of(item) is not None):
            return True
    return False


def _parts_of(item: Any) -> list[Any] | None:
    """A google-genai ``Content`` object's parts (an agent builds its history with the SDK's objects too)."""
    kind = type(item)
    has = _HAS_PARTS.get(kind)
    if has is None:
        # Asked once per class: a pydantic model without the field (LangChain's messages, asked of each message of
        # every conversation) answers a missing attribute through its Python ``__getattr__``, 1.7 us each time.
        if len(_HAS_PARTS) >= _MEMO_MAX:
            _HAS_PARTS.clear()
        has = _HAS_PARTS[kind] = hasattr(item, "parts")
    if not has:
        return None
    parts = getattr(item, "parts", None)
    return parts if type(parts) is list else None


def _mapped(items: list[Any], each: Callable[[Any], Any]) -> list[Any]:
    """``items`` itself when ``each`` leaves every item as it is, else a copy holding what it made of them."""
    out: list[Any] | None = None
    for i, item in enumerate(items):
        new = each(item)
        if new is not item:
            if out is None:
                out = list(items)
            out[i] = new
    return items if out is None else out


def _item(item: Any) -> Any:
    if type(item) is dict:
        role = item.get("role")
        if role in _RESULT_ROLES:  # OpenAI chat (``function``: its older function calling)
            return _with(item, "content", _content(item.get("content")))
        content = item.get("content")
        if role == "user" and type(content) is list:  # Anthropic, Converse: results are blocks of a user message
            return _with(item, "content", _mapped(content, _block))
        if role is None and item.get("type") in _OUTPUT_ITEMS:  # Responses
            return _with(item, "output", _content(item.get("output")))
        parts = item.get("parts")  # Gemini: a content's parts
        return _with(item, "parts", _mapped(parts, _part_result)) if type(parts) is list else item
    if getattr(item, "type", None) == "tool":  # LangChain's ToolMessage (a pydantic model)
        # Its artifact is never sent (the model reads the content): data the tool's own record blanked key by key.
        return _updated(item, content=_content, artifact=_data)
    parts = _parts_of(item)
    return item if parts is None else _updated(item, parts=lambda given: _mapped(given, _part_result))


def _updated(item: Any, **edits: Callable[[Any], Any]) -> Any:
    """A pydantic model with ``edits`` applied to its fields (each field's value given to its function): ``item``
    itself when they change nothing, else a copy."""
    changed: dict[str, Any] = {}
    for name, edit in edits.items():
        value = getattr(item, name, None)
        new = edit(value)
        if new is not value:
            changed[name] = new
    copy = getattr(item, "model_copy", None)
    return item if not changed or copy is None else copy(update=changed)


def _with(item: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return item if value is item.get(key) else {**item, key: value}


def _block(block: Any) -> Any:
    if type(block) is dict:
        if block.get("type") == "tool_result":  # Anthropic
            return _with(block, "content", _content(block.get("content")))
        result = block.get("toolResult")  # Bedrock Converse
        if type(result) is dict:
            return _with(block, "toolResult", _with(result, "content", _content(result.get("content"))))
    return block


def _part_result(part: Any) -> Any:
    """A Gemini part answering a function call: its response is data."""
    if type(part) is not dict:
        answer = getattr(part, "function_response", None)  # the SDK's ``Part`` object
        if answer is None:
            return part
        return _updated(part, function_response=lambda given: _updated(given, response=_data))
    for key in ("function_response", "functionResponse"):
        response = part.get(key)
        if type(response) is dict:
            return _with(part, key, _with(response, "response", _data(response.get("response"))))
    return part


def _data(value: Any) -> Any:
    """A result given as data: credential keys blanked by the key rule, its strings read as texts."""
    if value is None:
        return value
    # Every string at any depth, as the tool's own record reads its result (``data_blanked``): a result nests.
    return data_blanked(redact_value(value))


def _with_all(item: Mapping[str, Any], values: dict[str, Any]) -> Any:
    """``item`` itself when every one of ``values`` is what it holds already, else a copy holding them."""
    changed = {k: v for k, v in values.items() if v is not item[k]}
    return {**item, **changed} if changed else item


def _content(content: Any, depth: int = 0) -> Any:
    """A result's text, or its parts (``{"type": "text", "text": ...}``, bare texts, nested blocks), blanked."""
    if type(content) is str:
        return text_blanked(content)
    if type(content) is not list or depth >= _MAX_DEPTH:
        return content
    out: list[Any] | None = None  # ``_mapped``'s loop, with no closure made for each result
    for i, part in enumerate(content):
        new = _part(part, depth + 1)
        if new is not part:
            if out is None:
                out = list(content)
            out[i] = new
    return content if out is None else out


def _part(part: Any, depth: int) -> Any:
    """One part of a result. Its media (images' bytes) are not read: only the fields that hold text."""
    if type(part) is not dict:
        return text_blanked(part) if type(part) is str else part  # LangChain: a content list may hold bare texts
    if type(part.get("text")) is str:
        return _with(part, "text", text_blanked(part["text"]))
    if "json" in part:  # Bedrock Converse: a result given as data
        return _with(part, "json", _data(part["json"]))
    changed: dict[str, Any] = {}
    for key in ("stdout", "stderr"):  # Responses: a shell's output
        if type(part.get(key)) is str:
            changed[key] = text_blanked(part[key])
    if type(part.get("content")) is list:  # Anthropic: a search result's text blocks
        changed["content"] = _content(part["content"], depth)
    if type(part.get("source")) is dict:  # Anthropic: a plain-text document, its text in its source
        changed["source"] = _source(part["source"], depth)
    document = part.get("document")
    if type(document) is dict and type(document.get("source")) is dict:  # Bedrock Converse: a document block
        changed["document"] = _with(document, "source", _source(document["source"], depth))
    found = part.get("searchResult")
    if type(found) is dict and type(found.get("content")) is list:  # Bedrock Converse: a search result's texts
        changed["searchResult"] = _with(found, "content", _content(found["content"], depth))
    return _with_all(part, changed) if changed else part


def _source(source: dict[str, Any], depth: int) -> dict[str, Any]:
    """A document's source: its text (Anthropic's ``data`` of a ``text`` source, Converse's ``text``) or content
    blocks; bytes and links are left as they are."""
    changed: dict[str, Any] = {}
    if source.get("type") == "text" and type(source.get("data")) is str:
        changed["data"] = text_blanked(source["data"])
    if type(source.get("text")) is str:
        changed["text"] = text_blanked(source["text"])
    if type(source.get("content")) is list:
        changed["content"] = _content(source["content"], depth)
    return _with_all(source, changed) if changed else source


def text_blanked(text: str) -> str:
    """``text`` with the values of credential keys blanked (``text`` itself when none), read once and remembered."""
    found = _memo.get(text)
    if found is None:
        blank = keyed_values_blanked(text)
        found = _SAME if blank == text else blank
        if len(_memo) >= _MEMO_MAX:  # a bound, not a cache policy: a long-running process starts over
            _memo.clear()
        _memo[text] = found
    # Unchanged: the caller's own object (an equal string remembered from another call is another object).
    return text if found is _SAME else found
