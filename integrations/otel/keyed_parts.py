"""Content blocks named by the key they hold, not by a ``type`` field, as the conventions' message parts.

Gemini's parts (``{"text"}``, ``{"function_call"}``, ``{"inline_data"}``, ... as dicts in either spelling
or the SDK's ``Part`` objects) and Bedrock Converse's blocks (``{"text"}``, ``{"toolUse"}``,
``{"toolResult"}``, ``{"reasoningContent"}``, ``{"image"}``, ...) say what they are by which key is set.
The request view keeps each provider's own shape; ``content`` maps the typed shapes (OpenAI, Anthropic)
and hands these here. So are their tools: Gemini's ``function_declarations`` and Converse's ``toolSpec``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

# Each kind of block, by the key that holds it: snake case as the SDK's fields and dicts are written, camel case
# as the REST API (and so a dict copied from its documentation) writes them.
_FUNCTION_CALL = ("function_call", "functionCall")
_FUNCTION_RESPONSE = ("function_response", "functionResponse")
_INLINE_DATA = ("inline_data", "inlineData")
_FILE_DATA = ("file_data", "fileData")
_MEDIA = ("image", "document", "video", "audio")


def get(obj: Any, key: str, default: Any = None) -> Any:
    """A block's field, whether the block is a dict or an SDK object (``content`` reads its blocks with it too)."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)



def _first(obj: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = get(obj, key)
        if value is not None:
            return value
    return None


def keyed_part(block: Any) -> dict[str, Any] | None:
    """``block`` as a part, or None when it is none of the kinds known here (a cache point, code to run)."""
    text = get(block, "text")
    if isinstance(text, str):
        return {"type": "reasoning" if get(block, "thought") is True else "text", "content": text}
    call = _first(block, _FUNCTION_CALL)
    if call is not None:
        return {"type": "tool_call", "id": get(call, "id"), "name": get(call, "name"),
                "arguments": get(call, "args")}  # fmt: skip
    answer = _first(block, _FUNCTION_RESPONSE)
    if answer is not None:
        return {"type": "tool_call_response", "id": get(answer, "id"), "response": get(answer, "response")}
    use = get(block, "toolUse")
    if use is not None:
        return {"type": "tool_call", "id": get(use, "toolUseId"), "name": get(use, "name"),
                "arguments": get(use, "input")}  # fmt: skip
    result = get(block, "toolResult")
    if result is not None:
        return {"type": "tool_call_response", "id": get(result, "toolUseId"), "response": _result(result)}
    thought = get(block, "reasoningContent")
    if thought is not None:
        said = get(get(thought, "reasoningText"), "text")
        return {"type": "reasoning", "content": said if isinstance(said, str) else ""}
    data = _first(block, _INLINE_DATA)
    if data is not None:
        mime = _first(data, ("mime_type", "mimeType"))
        return _blob(_modality(mime), mime, get(data, "data"))
    file = _first(block, _FILE_DATA)
    if file is not None:
        mime = _first(file, ("mime_type", "mimeType"))
        return {"type": "uri", "modality": _modality(mime), "uri": _first(file, ("file_uri", "fileUri"))}
    for kind in _MEDIA:
        media = get(block, kind)
        if media is not None:
            return _converse_media(kind, media)
    return None


def keyed_tools(tool: Any) -> list[dict[str, Any]] | None:
    """The definitions a Gemini tool (its ``function_declarations``) or a Converse ``toolSpec`` holds; None
    when ``tool`` is neither."""
    declared = _first(tool, ("function_declarations", "functionDeclarations"))
    if isinstance(declared, (list, tuple)):
        return [
            _definition(get(d, "name"), get(d, "description"), _first(d, ("parameters", "parameters_json_schema")))
            for d in declared
            if get(d, "name") is not None
        ]
    spec = get(tool, "toolSpec")
    if spec is not None and get(spec, "name") is not None:
        return [_definition(get(spec, "name"), get(spec, "description"), get(get(spec, "inputSchema"), "json"))]
    return None


def _definition(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "function", "name": name}
    if description:
        entry["description"] = description
    if parameters is not None:
        dump = getattr(parameters, "model_dump", None)  # the SDK's ``Schema``: its fields that are set
        entry["parameters"] = dump(exclude_none=True, mode="json") if callable(dump) else parameters
    return entry


def _result(result: Any) -> Any:
    """A Converse tool result's content: its text blocks joined, or its one JSON block."""
    content = get(result, "content")
    if not isinstance(content, (list, tuple)):
        return content
    texts = [t for block in content if isinstance(t := get(block, "text"), str)]
    if texts:
        return "".join(texts)
    found = [j for block in content if (j := get(block, "json")) is not None]
    return found[0] if len(found) == 1 else found or None


def _modality(mime: Any) -> str:
    kind = mime.split("/", 1)[0] if isinstance(mime, str) else ""
    return kind if kind in ("image", "audio", "video") else "file"


def _blob(modality: str, mime: Any, data: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "blob", "modality": modality}
    if isinstance(mime, str):
        part["mime_type"] = mime
    if isinstance(data, (bytes, bytearray)):
        data = base64.b64encode(data).decode("ascii")
    if isinstance(data, str):
        part["content"] = data
    return part


def _converse_media(kind: str, media: Any) -> dict[str, Any]:
    """A Converse image, document, video or audio block: a ``uri`` part for one in S3, else a ``blob``."""
    modality = kind if kind != "document" else "file"
    source = get(media, "source")
    located = get(source, "s3Location")
    if located is not None:
        return {"type": "uri", "modality": modality, "uri": get(located, "uri")}
    form = get(media, "format")
    mime = f"{'application' if kind == 'document' else kind}/{form}" if isinstance(form, str) else None
    return _blob(modality, mime, get(source, "bytes"))
