"""Opt-in message content: ``gen_ai.input.messages`` / ``output.messages`` / ``system_instructions``.

Only runs when the user asked for content (``capture_content=True`` or
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``). Messages are
mapped from whichever provider shape the codec left in the neutral view
(OpenAI chat / Responses items, Anthropic blocks; Gemini parts and Bedrock
Converse blocks through ``keyed_parts``) onto the conventions' JSON
schema: ``{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call", ...}]}``, an answer's
reasoning as ``{"type": "reasoning", "content"}`` parts before its text.

Every value passes the user's redaction hook before it is serialised, and keys
that name credentials are blanked whatever the hook does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from relay_runtime import redaction
from relay_runtime.events import Event
from relay_runtime.redaction import scrub_text
from relay_runtime.redaction_reasoning import reasoning_texts

from .keyed_parts import get as _get
from .keyed_parts import keyed_part, keyed_tools

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# What a redaction hook gets: which attribute it is about, and the structured value
# (list of messages / parts, or the tool's arguments / result). It returns the value
# to record, possibly edited, or None to record nothing.
Redactor = Callable[[str, Any], Any]

INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
MARK_DATA = "relay.data"  # a mark's data, recorded on its span event as ``relay.data.<key>``

REDACTED = "[redacted]"
# The rule for a credential's key in recorded data, the core's (``redact_value``) too.
is_credential_key = redaction.is_credential_data_key


def scrub(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` with every mapping entry whose key names a credential blanked, and every
    remembered client key (whole, or any run of 8 of its characters) cut out of keys and strings."""
    if depth > 20:
        return REDACTED
    if isinstance(value, Mapping):
        return {
            scrub_text(str(k)): (REDACTED if is_credential_key(str(k)) else scrub(v, depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [scrub(v, depth + 1) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    dump = getattr(value, "model_dump", None)  # pydantic objects from the SDKs
    if callable(dump):
        try:
            return scrub(dump(), depth + 1)
        except Exception:
            return scrub_text(str(value))
    return scrub_text(str(value))


# -- provider shapes -> the conventions' parts ----------------------------------------------


_GEMINI_ROLES = {"model": "assistant"}
# Whose an item with no role is, by what it holds: a result is the tool's, a text or a medium the user's (given as
# the whole message, as Gemini's ``contents`` may be), anything else (a call, reasoning, a Responses API item
# sent back) the model's.
_ROLE_OF_ITEM = {"tool_call_response": "tool", "text": "user", "blob": "user", "uri": "user"}


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _part(block: Any) -> dict[str, Any] | None:
    if isinstance(block, str):
        return {"type": "text", "content": block}
    kind = _get(block, "type")
    if kind in ("text", "input_text", "output_text"):
        return {"type": "text", "content": _get(block, "text", "")}
    if kind in ("thinking", "reasoning"):
        return {"type": "reasoning", "content": _reasoning_of(block)}
    if kind in ("tool_use", "function_call"):
        return {
            "type": "tool_call",
            "id": _get(block, "id") or _get(block, "call_id"),
            "name": _get(block, "name"),
            "arguments": _arguments(_get(block, "input", _get(block, "arguments"))),
        }
    if kind in ("tool_result", "function_call_output"):
        result = _get(block, "content", _get(block, "output"))
        if isinstance(result, list):
            result = "".join(p.get("content", "") for p in map(_part, result) if p and p["type"] == "text")
        return {
            "type": "tool_call_response",
            "id": _get(block, "tool_use_id") or _get(block, "call_id"),
            "response": result,
        }
    if kind in ("image", "image_url", "input_image", "input_audio", "input_file", "document", "file"):
        return _media(kind, block)
    if kind is None:  # a Gemini part or a Converse block: what it is is the key it holds
        return keyed_part(block)
    return {"type": str(kind)}


def _reasoning_of(block: Any) -> str:
    """A reasoning block's text: an Anthropic ``thinking`` block's, LangChain's standard ``reasoning`` block's, or
    the summary of a Responses API ``reasoning`` item (an agent sends its earlier answers' items back)."""
    for key in ("thinking", "reasoning", "text"):
        said = _get(block, key)
        if isinstance(said, str) and said:
            return said
    summary = _get(block, "summary")
    if isinstance(summary, (list, tuple)):
        return "".join(text for item in summary if isinstance(text := _get(item, "text"), str))
    return ""


def _media(kind: str, block: Any) -> dict[str, Any]:
    """An image, audio or file part: a ``uri`` part for a link, a ``blob`` for inline data."""
    modality = "audio" if "audio" in kind else "image" if "image" in kind else "file"
    url = _get(block, "image_url")
    if isinstance(url, Mapping) or (url is not None and not isinstance(url, str)):
        url = _get(url, "url")
    source = _get(block, "source")
    if url is None and source is not None:
        if _get(source, "type") == "url":
            url = _get(source, "url")
        elif _get(source, "type") == "base64":
            return {"type": "blob", "modality": modality, "mime_type": _get(source, "media_type"),
                    "content": _get(source, "data")}  # fmt: skip
    if url is None:
        url = _get(block, "file_url") or _get(block, "url")
    if isinstance(url, str) and url.startswith("data:"):
        header, _, data = url.partition(",")
        return {"type": "blob", "modality": modality, "mime_type": header[5:].split(";")[0] or None, "content": data}
    if isinstance(url, str):
        return {"type": "uri", "modality": modality, "uri": url}
    data = _get(_get(block, "input_audio") or block, "data")
    if isinstance(data, str):
        return {"type": "blob", "modality": modality, "content": data}
    return {"type": "blob", "modality": modality}


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, (list, tuple)):
        return [p for p in map(_part, content) if p is not None]
    part = _part(content)
    return [part] if part is not None else []


def _message(msg: Any) -> dict[str, Any] | None:
    if isinstance(msg, str):
        return {"role": "user", "parts": [{"type": "text", "content": msg}]}
    role = _get(msg, "role")
    content = _get(msg, "content")
    if content is None:
        content = _get(msg, "parts")  # a Gemini content: a user's when it names no role, as the API reads it
        if content is not None:
            role = _GEMINI_ROLES.get(role, role) if role is not None else "user"
    if role is None:
        # Responses API input items that are not messages (function calls and outputs).
        part = _part(msg)
        if part is None:
            return None
        return {"role": _ROLE_OF_ITEM.get(part["type"], "assistant"), "parts": [part]}
    parts = _parts(content)
    for call in _get(msg, "tool_calls") or ():
        # OpenAI's shape holds the call in ``function``; the neutral view of a framework's message (LangChain's)
        # holds ``name`` and ``arguments`` on the call itself.
        fn = _get(call, "function")
        source = fn if fn is not None else call
        parts.append(
            {
                "type": "tool_call",
                "id": _get(call, "id"),
                "name": _get(source, "name"),
                "arguments": _arguments(_get(source, "arguments")),
            }
        )
    if role == "tool":
        text = "".join(p.get("content", "") for p in parts if p["type"] == "text")
        parts = [{"type": "tool_call_response", "id": _get(msg, "tool_call_id"), "response": text}]
    return {"role": str(role), "parts": parts}


def input_messages(messages: Any) -> list[dict[str, Any]]:
    if isinstance(messages, str):
        messages = [messages]
    return [m for m in map(_message, messages or ()) if m is not None]


def system_instructions(system: Any) -> list[dict[str, Any]]:
    parts = _get(system, "parts") if not isinstance(system, (str, list, tuple)) else None
    return _parts(system if parts is None else parts)  # a Gemini system instruction may be a whole content


def tool_definitions(tools: Any) -> list[dict[str, Any]]:
    """The tools offered, as the conventions' definitions: ``{"type", "name", "description", "parameters"}``."""
    out: list[dict[str, Any]] = []
    for tool in tools or ():
        keyed = keyed_tools(tool)
        if keyed is not None:  # a Gemini tool's declarations, a Converse tool's spec
            out.extend(keyed)
            continue
        fn = _get(tool, "function")
        source = fn if fn is not None else tool
        name = _get(source, "name")
        if name is None:
            continue
        entry: dict[str, Any] = {"type": "function", "name": name}
        description = _get(source, "description")
        if description:
            entry["description"] = description
        parameters = _get(source, "parameters", _get(source, "input_schema"))
        if parameters is not None:
            entry["parameters"] = parameters
        out.append(entry)
    return out


def output_messages(event: Event) -> list[dict[str, Any]]:
    resp = event.annotated_response
    if resp is None:
        return []
    # The answer's reasoning first, as the model gave it: the view has no field for it, so it is read from the
    # answer object (an Anthropic thinking block, a Responses reasoning item, a Gemini thought), as the event
    # holds it: what the redaction policy made of it.
    output = event.output
    parts: list[dict[str, Any]] = (
        [{"type": "reasoning", "content": text} for text in reasoning_texts(output)] if output is not None else []
    )
    if resp.output_text:
        parts.append({"type": "text", "content": resp.output_text})
    for call in resp.tool_calls or ():
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": _arguments(call.get("arguments")),
            }
        )
    if not parts:
        return []
    message: dict[str, Any] = {"role": "assistant", "parts": parts}
    if resp.finish_reasons:
        message["finish_reason"] = str(resp.finish_reasons[0])
    return [message]


# -- recording ---------------------------------------------------------------------------------


class ContentRecorder:
    """Turns content into attributes through the redaction hook; one per exporter."""

    def __init__(self, redact: Redactor | None, openinference: bool, *, max_length: int | None = None) -> None:
        self._redact = redact
        self._openinference = openinference
        self._max_length = max_length

    def structured(self, key: str, value: Any) -> Any:
        """``value`` as recorded: clipped, credentials blanked, then the hook's say; None for nothing to record."""
        if self._max_length is not None:
            # Cut before anything is serialised: a 10 MiB prompt is sliced once, never copied whole.
            value = clipped(value, self._max_length)
        value = scrub(value)
        if self._redact is not None:
            value = self._redact(key, value)
            if value is None:
                return None
            value = scrub(value)  # a hook cannot put credentials back
        if value == [] or value == {}:
            return None
        return value

    def _value(self, key: str, value: Any) -> str | None:
        return self._text(self.structured(key, value))

    def _text(self, value: Any) -> str | None:
        """A recorded value as the attribute's text, cut at the length limit."""
        if value is None:
            return None
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        return text if self._max_length is None or len(text) <= self._max_length else text[: self._max_length]

    def attempt_start(self, event: Event, out: dict[str, Any]) -> None:
        req = event.annotated_request
        if req is None:
            return
        msgs = self._value(INPUT_MESSAGES, input_messages(req.messages))
        if msgs is not None:
            out[INPUT_MESSAGES] = msgs
        system = self._value(SYSTEM_INSTRUCTIONS, system_instructions(req.system)) if req.system else None
        if system is not None:
            out[SYSTEM_INSTRUCTIONS] = system
        tools = self._value(TOOL_DEFINITIONS, tool_definitions(req.tools)) if req.tools else None
        if tools is not None:
            out[TOOL_DEFINITIONS] = tools
        if self._openinference:
            self._oi_messages("llm.input_messages", msgs, system, out)
            if msgs is not None:
                out["input.value"] = msgs
                out["input.mime_type"] = "application/json"

    def attempt_end(self, event: Event, out: dict[str, Any]) -> None:
        kept = self.structured(OUTPUT_MESSAGES, output_messages(event))
        msgs = self._text(kept)
        if msgs is None:
            return
        out[OUTPUT_MESSAGES] = msgs
        if self._openinference:
            self._oi_messages("llm.output_messages", msgs, None, out)
            # The answer's text as the hook left it, never the response's own: what it hid stays hidden.
            text = self._text(_text_of(kept))
            if text:
                out["output.value"] = text
                out["output.mime_type"] = "text/plain"

    def tool_start(self, event: Event, out: dict[str, Any]) -> None:
        if event.input is None:
            return
        args = self._value(TOOL_ARGUMENTS, _arguments(event.input))
        if args is not None:
            out[TOOL_ARGUMENTS] = args
            if self._openinference:
                out["input.value"] = args
                out["tool.parameters"] = args

    def tool_end(self, event: Event, out: dict[str, Any]) -> None:
        if event.output is None or event.outcome == "failed":
            return
        result = self._value(TOOL_RESULT, event.output)
        if result is not None:
            out[TOOL_RESULT] = result
            if self._openinference:
                out["output.value"] = result

    def mark_data(self, data: Mapping[str, Any], out: dict[str, Any]) -> None:
        """A mark's scalar data as ``relay.data.*``: content like any other, so through the hook too."""
        kept = self.structured(MARK_DATA, data)
        if isinstance(kept, Mapping):
            out.update((f"{MARK_DATA}.{k}", v) for k, v in kept.items() if isinstance(v, (str, int, float, bool)))

    @staticmethod
    def _oi_messages(prefix: str, msgs: str | None, system: str | None, out: dict[str, Any]) -> None:
        """OpenInference's flattened ``llm.input_messages.{i}.message.*`` from the recorded JSON."""
        i = 0
        if system is not None:
            parts = _loads_list(system)
            text = "".join(str(p.get("content", "")) for p in parts if isinstance(p, dict)) if parts else system
            out[f"{prefix}.0.message.role"] = "system"
            out[f"{prefix}.0.message.content"] = text
            i = 1
        for msg in (_loads_list(msgs) if msgs is not None else None) or ():
            if not isinstance(msg, dict):
                continue
            out[f"{prefix}.{i}.message.role"] = str(msg.get("role", ""))
            texts = [p.get("content", "") for p in msg.get("parts", ()) if p.get("type") == "text"]
            if texts:
                out[f"{prefix}.{i}.message.content"] = "".join(str(t) for t in texts)
            else:
                # A tool's result, in whichever shape its provider sends it back, is what its message says.
                answers = [p for p in msg.get("parts", ()) if p.get("type") == "tool_call_response"]
                if answers:
                    out[f"{prefix}.{i}.message.content"] = "".join(_response_text(p.get("response")) for p in answers)
                    if len(answers) == 1 and answers[0].get("id"):
                        out[f"{prefix}.{i}.message.tool_call_id"] = str(answers[0]["id"])
            calls = [p for p in msg.get("parts", ()) if p.get("type") == "tool_call"]
            for j, call in enumerate(calls):
                base = f"{prefix}.{i}.message.tool_calls.{j}.tool_call"
                if call.get("id"):
                    out[f"{base}.id"] = str(call["id"])
                out[f"{base}.function.name"] = str(call.get("name") or "")
                out[f"{base}.function.arguments"] = json.dumps(call.get("arguments"), default=str)
            i += 1


def _response_text(response: Any) -> str:
    """A tool's result as OpenInference's message content: its text, or the JSON of a result given as data."""
    if response is None:
        return ""
    return response if isinstance(response, str) else json.dumps(response, default=str)


def clipped(value: Any, limit: int, depth: int = 0) -> Any:
    """``value`` with every string longer than ``limit`` cut to ``limit`` (containers copied only when cut in)."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit]
    if depth > 20:
        return value
    if isinstance(value, Mapping):
        items = {k: clipped(v, limit, depth + 1) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, (list, tuple)):
        cut = [clipped(v, limit, depth + 1) for v in value]
        return value if all(a is b for a, b in zip(cut, value, strict=True)) else cut
    return value


def _text_of(messages: Any) -> str | None:
    """The text parts of recorded messages, joined (a hook that returned plain text: that text)."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return None
    return "".join(
        str(part.get("content", ""))
        for msg in messages
        if isinstance(msg, dict) and isinstance(msg.get("parts"), list)
        for part in msg["parts"]
        if isinstance(part, dict) and part.get("type") == "text"
    )


def _loads_list(text: str) -> list[Any] | None:
    """The JSON list a recorded attribute holds, or None (a redaction hook may have left plain text)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None
