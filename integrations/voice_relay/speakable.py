"""What the voice model may be asked to say: an agent answer made fit for speech.

Answers are written for a screen: they end with source lists and file paths, or they are a tool's
raw JSON. Read aloud, those are noise (or a leak of local paths), so before an answer is handed to
the provider for speech, source and path lines go, and structured output and raw output (a
command's 80 lines) become a short plain description for the model to summarise instead of text
to read out.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_SPOKEN_CHARS = 1400
MAX_DESCRIBED_CHARS = 880  # what a description of raw output may take: a sentence or two, never the output
_MAX_FIELDS = 12
# Raw output (a command's, a log's, a table's) is many short lines that are not sentences, full of
# digits and symbols: read aloud it is minutes of noise. Past this many lines it is described.
_OUTPUT_MIN_LINES = 8
_PROSE_LINE = re.compile(r"^[\"'(]?[A-Za-z][^\n]*[.!?:;]['\")]?$")
_SAMPLE_CHARS = 160
_PROBLEM_WORDS = re.compile(r"\b(?:error|errors|failed|failure|fatal|exception|traceback|denied|warning)\b", re.I)
_SOURCE_HEADERS = (
    "source:",
    "sources:",
    "citation:",
    "citations:",
    "reference:",
    "references:",
    "file:",
    "files:",
    "path:",
)
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


def _is_prose(line: str) -> bool:
    """A sentence a person wrote: starts with a letter, ends like a sentence, mostly words."""
    if not _PROSE_LINE.match(line) or len(line.split()) < 3:
        return False
    plain = sum(c.isalpha() or c.isspace() for c in line)
    return plain >= 0.8 * len(line)


def _squashed(line: str, limit: int = _SAMPLE_CHARS) -> str:
    text = " ".join(line.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def describe_output(text: str) -> str | None:
    """A short description of ``text`` when it is raw output (many lines, few of them sentences); None for prose.

    It says how many lines there are, how many mention a problem, and the first and last lines
    (clipped). Source and path lines are never quoted: output that is nothing but paths is counted.
    """
    every = [line for line in text.splitlines() if line.strip()]
    if len(every) < _OUTPUT_MIN_LINES:
        return None
    lines = [line.strip() for line in strip_source_lines(text).splitlines() if line.strip()]
    if not lines:
        return f"A list of {len(every)} file paths or sources, not read out."
    if len(lines) < _OUTPUT_MIN_LINES or sum(_is_prose(line) for line in lines) * 2 >= len(lines):
        return None
    problems = sum(bool(_PROBLEM_WORDS.search(line)) for line in lines)
    head = f"Raw output of {len(every)} lines, not read out"
    if problems:
        head += (
            f"; {problems} of them mention an error, failure or warning"
            if problems > 1
            else ("; one of them mentions an error, failure or warning")
        )
    described = f"{head}. It starts with: {_squashed(lines[0])}. It ends with: {_squashed(lines[-1])}."
    if len(described) > MAX_DESCRIBED_CHARS:
        described = described[: MAX_DESCRIBED_CHARS - 1].rstrip() + "…"
    return described


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
                return describe_output(field) or " ".join(strip_source_lines(field).split())
    parts: list[str] = []
    _leaves(value, "", parts)
    head = f"A list of {len(value)} items" if isinstance(value, list) else "A structured result"
    body = "; ".join(parts)
    return f"{head}: {body}." if body else f"{head}, with nothing in it."


def speakable(answer: str, *, max_chars: int = MAX_SPOKEN_CHARS) -> str:
    """`answer` as the voice model may say it: no source or path lines, no raw JSON, bounded."""
    value = structured(answer)
    if value is not None:
        text = describe_structured(value)
    else:
        text = describe_output(answer) or " ".join(strip_source_lines(answer).split())
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text
