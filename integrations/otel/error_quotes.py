"""A scope's error message without the conversation it quotes, for spans that carry no content.

A provider's 400 often quotes the request it refused (``Invalid prompt: '...' is too long``, a
validation error's ``input_value=...``): with content capture off, the span's status and its
``exception`` event would carry the prompt the capture mode keeps out of every other attribute. So each
text of the request (its messages' strings, its system prompt, its tools' definitions) is blanked where
the message quotes it: whole, or a quote of its head or tail that a provider cut (at least ``_QUOTE``
characters of it, grown to all the message holds). Shorter texts are left: too short to tell a quote from
ordinary words. A tool's error quotes its arguments as often (``no row for '...'``), a chain's its inputs:
what a scope's start was given is blanked in its end's message the same way. Only failed scopes pay for this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from relay_runtime import clipping
from relay_runtime.redaction import REDACTED

_QUOTE = 24  # the shortest head or tail of a text read as a quote of it
_MIN = 8  # texts shorter than this are not looked for
_MAX_DEPTH = 16
_MAX_TEXTS = 512  # a huge conversation: the newest texts are the likeliest quoted
_STATUS_MESSAGE_LIMIT = 512


def record_error(span: Span, error_type: str, message: str, limit: int, timestamp: int | None) -> None:
    """A failed scope's error on its span: an ``exception`` event, its message held to ``limit`` (the length every
    other attribute is held to), and the error status, its description shorter still."""
    if len(message) > limit:
        message = clipping.head(message, limit)
    span.add_event("exception", {"exception.type": error_type, "exception.message": message}, timestamp=timestamp)
    span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}"[:_STATUS_MESSAGE_LIMIT]))


def sent(request: Any) -> tuple[Any, ...]:
    """What ``request`` (an ``AnnotatedLLMRequest``, or None) sent of the conversation, for ``unquoted``."""
    if request is None:
        return ()
    return getattr(request, "system", None), getattr(request, "tools", None), getattr(request, "messages", None)


def unquoted(message: str, *given: Any) -> str:
    """``message`` with every text ``given`` holds (strings, nested in dicts and lists) blanked where it quotes it."""
    if not message or not given:
        return message
    texts: list[str] = []
    for part in given:
        _strings(part, texts, 0)
    for text in sorted(set(texts[-_MAX_TEXTS:]), key=len, reverse=True):
        message = _blanked(message, text)
    return message


def _strings(value: Any, out: list[str], depth: int) -> None:
    if type(value) is str:
        if len(value) >= _MIN:
            out.append(value)
    elif depth < _MAX_DEPTH:
        if isinstance(value, Mapping):
            for item in value.values():
                _strings(item, out, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value:
                _strings(item, out, depth + 1)


def _blanked(message: str, text: str) -> str:
    if text in message:
        message = message.replace(text, REDACTED)
    if len(text) <= _QUOTE:
        return message
    head, tail = text[:_QUOTE], text[-_QUOTE:]
    at = message.find(head)
    while at != -1:  # a quote of the text's head: as far as the message goes on quoting it
        end = at + _QUOTE
        while end < len(message) and end - at < len(text) and message[end] == text[end - at]:
            end += 1
        message = message[:at] + REDACTED + message[end:]
        at = message.find(head, at + len(REDACTED))
    at = message.find(tail)
    while at != -1:  # a quote of its tail (pydantic cuts a long value in its middle)
        start, n = at, 0
        while start > 0 and n < len(text) - _QUOTE and message[start - 1] == text[-_QUOTE - n - 1]:
            start -= 1
            n += 1
        message = message[:start] + REDACTED + message[at + _QUOTE :]
        at = message.find(tail, start + len(REDACTED))
    return message
