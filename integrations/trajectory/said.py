"""What a request's new messages say, whatever the provider's shape: the user's words and the tool results.

A trajectory's steps come from the relay's scopes, but two things only ever appear in the requests an
agent sends: what the user said, and the results of tools that ran where no scope saw them (an Agents
SDK handoff's ``transfer_to_*`` call, which the SDK answers itself; a loop that runs its tools in plain
code). Both are read here from an attempt record's request delta (its ``new`` messages, ``records``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .deltas import CONVERSATION_KEYS

_TEXT_PARTS = ("text", "input_text")
# The Responses API's items answering a call the model made by its ``call_id``: a function's, a custom tool's.
_CALL_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _text_of(content: Any) -> str | None:
    """A message's text: a string, or its text parts joined; None when it holds none (a tool result).

    A part is text by its type (OpenAI's, Anthropic's), or, in the shapes whose blocks say what they are by the
    key they hold (a Bedrock Converse block, a Gemini part), by holding ``text`` (a Gemini thought is none). A
    bare string in the list is text too: LangChain sends it as such (``HumanMessage(content=["...", {...}])``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part if isinstance(part, str) else part["text"]
            for part in content
            if isinstance(part, str)
            or (
                isinstance(part, dict)
                and isinstance(part.get("text"), str)
                and (part.get("type") in _TEXT_PARTS if "type" in part else part.get("thought") is not True)
            )
        ]
        return "".join(texts) if texts else None
    return None


def _converse_result(content: Any) -> Any:
    """A Bedrock Converse tool result's content: its text blocks joined, else its JSON block's value."""
    text = _text_of(content)
    if text is not None or not isinstance(content, list):
        return text if text is not None else content
    values = [block["json"] for block in content if isinstance(block, dict) and "json" in block]
    return values[0] if len(values) == 1 else values or None


def _is_user(message: dict[str, Any]) -> bool:
    """A provider's user message, or a LangChain ``HumanMessage`` as recorded (its fields: a ``type``, no
    ``role``): a LangChain model's request holds its own messages (``RelayMiddleware``, the callback handler)."""
    role = message.get("role")
    return role == "user" if role is not None else message.get("type") == "human"


def _bare_part(message: dict[str, Any]) -> bool:
    """A Gemini part given as a whole message (``contents=[Part(text=...)]``): the SDK sends it as the user's."""
    return "role" not in message and "type" not in message and isinstance(message.get("text"), str)


def _new(delta: dict[str, Any] | None) -> list[Any]:
    delta = delta or {}
    new = delta.get("new")
    if isinstance(new, list):
        return new
    if new is None and "key" not in delta:
        # A conversation given as one text or one message (``input="..."``, a Gemini ``Content``): the delta
        # always sets it (``deltas.request_delta``).
        given = delta.get("set")
        if isinstance(given, dict):
            for name in CONVERSATION_KEYS:
                value = given.get(name)
                if isinstance(value, (str, dict)):
                    return [value]
    return []  # a string "new" would be one message per character


def user_messages(delta: dict[str, Any] | None) -> list[str]:
    """The user's messages among a request's new messages (a bare string is one: Gemini's ``contents``)."""
    out: list[str] = []
    for message in _new(delta):
        text = None
        if isinstance(message, str):
            text = message
        elif isinstance(message, dict) and _is_user(message):
            text = _text_of(message["content"] if "content" in message else message.get("parts"))
        elif isinstance(message, dict) and _bare_part(message):
            text = _text_of([message])
        if text is not None:
            out.append(text)
    return out


def _result_text(value: Any) -> str | None:
    """A tool result's text: a string, text parts joined, or a structured result as the JSON it was sent as."""
    text = _text_of(value)
    if text is not None or value is None:
        return text
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return None


def tool_results(delta: dict[str, Any] | None) -> Iterator[tuple[str | None, str | None, str | None]]:
    """``(call id, tool name, text)`` of each tool result among a request's new messages.

    OpenAI Chat's ``tool`` messages (and legacy ``function`` ones, which name their function), the Responses
    API's ``function_call_output`` and ``custom_tool_call_output`` items, Anthropic's ``tool_result`` blocks,
    Bedrock Converse's ``toolResult`` blocks, Gemini's ``function_response`` parts (whose id is optional: then
    the name says which call it answers) and LangChain's ``ToolMessage`` as recorded. A result of no known
    shape is not one: a trajectory never invents an answer."""
    for message in _new(delta):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "tool" or (role is None and message.get("type") == "tool"):
            yield message.get("tool_call_id"), message.get("name"), _result_text(message.get("content"))
        elif role == "function":  # the chat API's legacy function calling: the result names its function
            yield None, message.get("name"), _result_text(message.get("content"))
        elif message.get("type") in _CALL_OUTPUTS:
            yield message.get("call_id"), None, _result_text(message.get("output"))
        elif isinstance(message.get("content"), list):
            for block in message["content"]:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_result":
                    yield block.get("tool_use_id"), None, _result_text(block.get("content"))
                elif isinstance(result := block.get("toolResult"), dict):  # a Bedrock Converse result block
                    content = _converse_result(result.get("content"))
                    yield result.get("toolUseId"), None, _result_text(content)
        elif isinstance(message.get("parts"), list):
            for part in message["parts"]:
                if not isinstance(part, dict):
                    continue
                answer = part.get("function_response") or part.get("functionResponse")
                if isinstance(answer, dict):
                    yield answer.get("id"), answer.get("name"), _result_text(answer.get("response"))
