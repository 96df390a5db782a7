"""Text that travels base64-encoded, for the redaction walks: read as the text it is, written back encoded.

A text file handed to a model or read from an MCP server often travels as base64: an Anthropic
``document`` source (``{"type": "base64", "media_type": "text/plain", "data": ...}``), a Gemini
``inline_data`` part (``mime_type`` and ``data``), an MCP ``BlobResourceContents`` (``mimeType`` and
``blob``), or a data URL (``data:text/csv;base64,...``). Its text reaches every sink as the encoding,
which anyone can decode, so the walks read it as text; what a rule changes is encoded again in its
place. Only payloads whose media type says text are decoded: an image or a PDF is binary data.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

_TEXT_TYPES = frozenset({
    "application/json", "application/xml", "application/yaml", "application/x-yaml", "application/javascript",
    "application/x-www-form-urlencoded", "application/csv", "application/sql", "application/x-ndjson",
})  # fmt: skip
_MIME_KEYS = ("mime_type", "mimeType", "media_type")
_DATA_KEYS = ("data", "blob")


def textual(media_type: Any) -> bool:
    """Whether a media type (``text/plain; charset=utf-8``) names text."""
    if type(media_type) is not str:
        return False
    kind = media_type.split(";", 1)[0].strip().lower()
    return kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith(("+json", "+xml"))


def _decoded(payload: str) -> str | None:
    if "\n" in payload:  # MIME base64, in lines of 76
        payload = "".join(payload.split())
    try:
        return base64.b64decode(payload, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _encoded(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def blob_of(mapping: Mapping[Any, Any]) -> tuple[Any, str] | None:
    """``(key, text)`` when ``mapping`` carries base64 text beside a media type that says text."""
    for mime_key in _MIME_KEYS:
        if textual(mapping.get(mime_key)):
            break
    else:
        return None
    for data_key in _DATA_KEYS:
        payload = mapping.get(data_key)
        if type(payload) is str and payload:
            text = _decoded(payload)
            return None if text is None else (data_key, text)
    return None


def through_blob(
    mapping: Mapping[Any, Any], walked: Any, redact: Callable[[Any, str], Any], whole: Callable[[Any], bool]
) -> Any:
    """``walked`` (what a walk made of ``mapping``) with ``mapping``'s base64 text redacted by ``redact(key,
    text)`` and encoded again; ``walked`` itself when it has none.

    What the walk made of the payload as a string stands only when it dropped it, or when ``whole(key)``
    (a rule on the field itself replaced it whole). A detector or pattern that matched inside the
    encoding changed a few characters of it and left the rest decodable: the text decides instead.
    """
    found = blob_of(mapping)
    if found is None or not isinstance(walked, Mapping):
        return walked
    key, text = found
    original = mapping[key]
    if key not in walked or (walked[key] is not original and whole(key)):
        return walked
    new = redact(key, text)
    # Nothing in the text: the payload as it was (what matched inside the encoding was not a value).
    encoded = original if new is text or new == text else _encoded(new if type(new) is str else "")
    if walked[key] is encoded:
        return walked
    out = dict(walked)
    out[key] = encoded
    return out


def through_data_url(url: str, redact: Callable[[str], Any]) -> str | None:
    """A ``data:`` URL of text, its text redacted and encoded again; None when it is not one (or nothing changed)."""
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64") or not textual(head[5:-7]):
        return None
    text = _decoded(payload)
    if text is None:
        return None
    new = redact(text)
    if new is text or new == text:
        return None
    return f"{head},{_encoded(new if type(new) is str else '')}"
