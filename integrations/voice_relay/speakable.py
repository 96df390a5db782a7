"""What the voice model may be asked to say: an agent answer made fit for speech.

Answers are written for a screen: they end with source lists and file paths, or they are a tool's
raw JSON. Read aloud, those are noise (or a leak of local paths), so before an answer is handed to
the provider for speech, source and path lines go, and structured output becomes a short plain
description for the model to summarise instead of text to read out.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_SPOKEN_CHARS = 1400
_MAX_FIELDS = 12
_SOURCE_HEADERS = ("source:", "sources:", "citation:", "citations:", "reference:", "references:", "file:",
                   "files:", "path:")
# A line that is nothing but a path: /abs/path, ~/x, ./x, C:\x, or a relative path with a slash and
# an extension ("notes/today.md").
_PATH_LINE = re.compile(r"^(?:[-*•]\s*|\d+[.)]\s*)?(?:[~.]?/|[A-Za-z]:\\|\S+/\S+\.\w{1,8}$)\S*$")
_LIST_MARKER = re.compile(r"^(?:[-*•]|\d+[.)])\s+")
# The fields that, when a JSON answer has them, already say what happened in words.
_TEXT_FIELDS = ("answer", "text", "summary", "message", "output", "result", "error")


def strip_source_lines(text: str) -> str:
    """Drop `Source:`-style lines (and the list under one) and lines that are only a file path."""
    kept: list[str] = []
    in_sources = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            in_sources = False
            kept.append(line)
            continue
        lowered = stripped.lower()
        if lowered.startswith(_SOURCE_HEADERS):
            in_sources = True
            continue
        if _PATH_LINE.match(stripped) or (in_sources and _LIST_MARKER.match(stripped)):
            continue
        in_sources = False
        kept.append(line)
    return "\n".join(kept)


def structured(text: str) -> dict[str, Any] | list[Any] | None:
    """The JSON object or array `text` is, or None when it is prose."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def _leaves(value: Any, prefix: str, out: list[str]) -> None:
    if len(out) >= _MAX_FIELDS:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, f"{prefix}{key} " if prefix else f"{key} ", out)
    elif isinstance(value, list):
        for item in value[:_MAX_FIELDS]:
            _leaves(item, prefix, out)
    elif value is not None and value != "":
        name = prefix.strip().replace("_", " ")
        out.append(f"{name}: {value}" if name else str(value))


def describe_structured(value: dict[str, Any] | list[Any]) -> str:
    """Plain words for a JSON result: its own prose field if it has one, else its values."""
    if isinstance(value, dict):
        for key in _TEXT_FIELDS:
            field = value.get(key)
            if isinstance(field, str) and field.strip() and structured(field) is None:
                return " ".join(strip_source_lines(field).split())
    parts: list[str] = []
    _leaves(value, "", parts)
    head = f"A list of {len(value)} items" if isinstance(value, list) else "A structured result"
    body = "; ".join(parts)
    return f"{head}: {body}." if body else f"{head}, with nothing in it."


def speakable(answer: str, *, max_chars: int = MAX_SPOKEN_CHARS) -> str:
    """`answer` as the voice model may say it: no source or path lines, no raw JSON, bounded."""
    value = structured(answer)
    text = describe_structured(value) if value is not None else " ".join(strip_source_lines(answer).split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text
