"""Keeping credentials out of everything the relay emits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def is_credential_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in CREDENTIAL_HEADERS or lowered.endswith(("-api-key", "-token", "-secret"))


def redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (REDACTED if is_credential_header(str(k)) else v) for k, v in headers.items()}


def redact_kwargs(content: Mapping[str, Any]) -> Mapping[str, Any]:
    """``content`` itself when nothing in it can hold a credential (the usual case), else a cleaned copy."""
    if not any(k in CREDENTIAL_KWARGS or k in HEADER_KWARGS for k in content):
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
