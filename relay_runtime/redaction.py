"""Keeping credentials out of everything the relay emits."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .types import AnnotatedLLMRequest

REDACTED = "[redacted]"

CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-admin-key",
    }
)
# Request kwargs that carry credentials, or headers that may.
CREDENTIAL_KWARGS = frozenset({"api_key", "auth_token", "authorization", "password", "secret", "token"})
HEADER_KWARGS = frozenset({"extra_headers", "headers", "default_headers"})


SENSITIVE_KWARGS = CREDENTIAL_KWARGS | HEADER_KWARGS

# Header names repeat from call to call: classify each once. Bounded, since names are caller data.
_verdicts: dict[Any, bool] = {}
_VERDICTS_MAX = 4096


def is_credential_header(name: str | bytes) -> bool:
    verdict = _verdicts.get(name)
    if verdict is None:
        # Header names may be bytes (httpx accepts them); str(b"...") would hide "authorization".
        text = name.decode("latin-1") if isinstance(name, (bytes, bytearray)) else str(name)
        lowered = text.strip().lower()
        verdict = lowered in CREDENTIAL_HEADERS or lowered.endswith(("-api-key", "-token", "-secret"))
        if len(_verdicts) < _VERDICTS_MAX and isinstance(name, (str, bytes)):
            _verdicts[name] = verdict
    return verdict


def redact_headers(headers: Mapping[Any, Any]) -> dict[str, Any]:
    """A copy with credential values replaced; bytes names become text so every encoder can take them."""
    out: dict[str, Any] = {}
    verdicts = _verdicts
    for k, v in headers.items():
        verdict = verdicts.get(k)
        if verdict is None:
            verdict = is_credential_header(k)
        if type(k) is not str and isinstance(k, (bytes, bytearray)):
            k = k.decode("latin-1")
        out[k] = REDACTED if verdict else v
    return out


def redact_kwargs(content: Mapping[str, Any]) -> Mapping[str, Any]:
    """``content`` itself when nothing in it can hold a credential (the usual case), else a cleaned copy."""
    if SENSITIVE_KWARGS.isdisjoint(content):
        return content
    out: dict[str, Any] = {}
    for k, v in content.items():
        if k in CREDENTIAL_KWARGS:
            out[k] = REDACTED
        elif k in HEADER_KWARGS and isinstance(v, Mapping):
            out[k] = redact_headers(v)
        else:
            out[k] = v
    return out


def redacted_request(headers: Mapping[str, Any], content: Mapping[str, Any]) -> dict[str, Any]:
    return {"headers": redact_headers(headers) if headers else {}, "content": redact_kwargs(content)}


def redacted_annotation(annotated: AnnotatedLLMRequest | None) -> AnnotatedLLMRequest | None:
    """``annotated`` itself unless a codec left credentials in its ``params``; then a cleaned copy."""
    if annotated is None or not annotated.params or SENSITIVE_KWARGS.isdisjoint(annotated.params):
        return annotated
    return dataclasses.replace(annotated, params=dict(redact_kwargs(annotated.params)))
