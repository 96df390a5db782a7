"""A model call's request as every record holds it: its headers and kwargs with credentials blanked.

The conversation kwargs (``redaction.CONVERSATION_KWARGS``) are recorded as they were sent, but for
the credentials of the remote servers a request's tools reach (OpenAI's ``mcp`` and connector tools,
Anthropic's ``mcp_servers``): their headers, OAuth tokens and keyed URLs. Everything else is walked
by the key rules of ``redaction``, whose names these are reachable under too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from . import urls
from .redaction import (
    BODY_TEXT_KWARG,
    CONVERSATION_KWARGS,
    HEADER_KWARGS,
    REDACTED,
    _clean_mapping,
    body_kwargs,
    is_credential_key,
    redact_headers,
)
from .types import AnnotatedLLMRequest


def redact_kwargs(content: Mapping[str, Any]) -> Mapping[str, Any]:
    """``content`` itself when nothing in it can hold a credential (the usual case), else a cleaned copy.

    The conversation kwargs are left as they are, but for the tools' own credentials (``redact_tools``);
    everything else is walked.
    """
    clean = _clean_mapping(content, 0, CONVERSATION_KWARGS)
    if BODY_TEXT_KWARG in clean:
        body = body_kwargs(clean)
        cleaned = redact_kwargs(body) if body is not None else None
        if cleaned is not body:
            clean = {**clean, BODY_TEXT_KWARG: json.dumps(cleaned, ensure_ascii=False)}
    if "tools" not in clean and "mcp_servers" not in clean:  # two lookups: this runs on every managed call
        return clean
    for name in _REMOTE_SERVER_KWARGS:
        tools = clean.get(name)
        if type(tools) is list or type(tools) is tuple:
            kept = redact_tools(tools)
            if kept is not tools:
                clean = {**clean, name: kept}
    return clean


# Kwargs listing remote servers the provider calls for the model: OpenAI's tools, Anthropic's mcp_servers.
_REMOTE_SERVER_KWARGS = ("tools", "mcp_servers")


# The keys of the tools that reach no remote server (OpenAI's and Anthropic's function tools, built-in tools'
# names and versions): no credential can sit in them.
_PLAIN_TOOL_KEYS = frozenset(
    {"type", "function", "name", "description", "parameters", "input_schema", "strict", "cache_control"}
)

# A tool entry's keys holding the address of a remote server it reaches (an OpenAI ``mcp`` tool's).
_TOOL_URL_KEYS = frozenset({"server_url", "url"})


def redact_tools(tools: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    """``tools`` (or ``mcp_servers``) itself when no entry carries a credential, else a cleaned copy.

    A remote tool (OpenAI's ``mcp`` and connector tools) carries its server's ``headers``, an OAuth
    ``authorization`` and a URL that may hold a key in its query, beside what the model reads. Only an
    entry's own keys are judged, never its schema below (a ``password`` property is no credential).
    """
    out: list[Any] | None = None
    for i, tool in enumerate(tools):
        if type(tool) is dict and _PLAIN_TOOL_KEYS.issuperset(tool):
            continue  # a function tool (most of an agent's, sent on every call): judged by its keys in C
        if not isinstance(tool, Mapping):
            continue
        clean: dict[Any, Any] | None = None
        for key, value in tool.items():
            if key in HEADER_KWARGS and isinstance(value, Mapping):
                new: Any = redact_headers(value)
            elif is_credential_key(key) and value:
                new = REDACTED
            elif key in _TOOL_URL_KEYS and type(value) is str:
                new = urls.recorded_url(value)
            else:
                continue
            if new != value:
                if clean is None:
                    clean = dict(tool)
                clean[key] = new
        if clean is not None:
            if out is None:
                out = list(tools)
            out[i] = clean
    if out is None:
        return tools
    return out if type(tools) is list else tuple(out)


def redacted_request(headers: Mapping[str, Any], content: Mapping[str, Any]) -> dict[str, Any]:
    return {"headers": redact_headers(headers) if headers else {}, "content": redact_kwargs(content)}


def redacted_annotation(annotated: AnnotatedLLMRequest | None) -> AnnotatedLLMRequest | None:
    """``annotated`` itself unless a codec left credentials in its params; then a cleaned copy."""
    if annotated is None:
        return None
    params, extra, tools = annotated.params, annotated.provider_params, annotated.tools
    clean_params = redact_kwargs(params) if params else params
    clean_extra = redact_kwargs(extra) if extra else extra  # Anthropic's ``mcp_servers`` is one of these
    clean_tools = redact_tools(tools) if tools else tools
    if clean_params is params and clean_extra is extra and clean_tools is tools:
        return annotated
    return dataclasses.replace(
        annotated,
        params=dict(clean_params),
        provider_params=dict(clean_extra),
        tools=list(clean_tools) if clean_tools is not None else None,
    )
