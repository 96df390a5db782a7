"""The request a cassette matches on: the provider-neutral view, as plain JSON.

``neutral_request`` is the one place that turns a codec's annotated request into
what a cassette stores and compares, so a change in the neutral view lands here only.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from .. import redaction
from ..conversation_urls import matched as matched_conversation
from ..types import AnnotatedLLMRequest

# Params that differ from run to run without changing what the model is asked: request and
# user ids, cache keys, tagging metadata, and the SDK's transport options.
VOLATILE_PARAMS = frozenset(
    {
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "metadata",
        "idempotency_key",
        "extra_headers",
        "extra_query",
        "timeout",
    }
)
# SDK sentinels for "not given": a kwarg holding one was not sent.
_SENTINELS = frozenset({"NotGiven", "Omit"})

Normalize = Callable[[dict[str, Any]], dict[str, Any]]


def jsonable(value: Any) -> Any:
    """``value`` as JSON types only; SDK models through their own dump, unknown objects by type name.

    Unknown objects keep only their type's name: a repr often carries a memory address,
    which would make two identical requests differ.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items() if type(v).__name__ not in _SENTINELS}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(mode="json"))
        except Exception:
            pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    return f"<{type(value).__qualname__}>"


def neutral_request(annotated: AnnotatedLLMRequest) -> dict[str, Any]:
    """What a cassette stores for one call: provider, API, model, prompt, tools and params, volatile ids dropped."""
    out: dict[str, Any] = {
        "provider": annotated.provider,
        "api": annotated.operation,
        "model": annotated.model,
    }
    if annotated.system is not None:
        out["system"] = jsonable(annotated.system)
    out["messages"] = jsonable(annotated.messages)
    if annotated.tools is not None:
        out["tools"] = jsonable(annotated.tools)
    if annotated.tool_choice is not None:
        out["tool_choice"] = jsonable(annotated.tool_choice)
    for name in ("params", "provider_params"):  # SDK-only arguments, where the neutral view keeps them apart
        values = getattr(annotated, name, None) or {}
        kept = {k: v for k, v in values.items() if k not in VOLATILE_PARAMS}
        if kept:
            out[name] = jsonable(kept)
    out["stream"] = bool(annotated.stream)
    return out


def with_sent_extras(request: dict[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` with what the SDK sends beside the neutral view, which changes the answer as much:
    ``extra_body`` as given, and ``extra_query`` with credential parameters redacted (a key that
    changes from run to run is no different request). ``extra_headers`` stay out: transport."""
    body = kwargs.get("extra_body")
    if body is not None and type(body).__name__ not in _SENTINELS:
        request["extra_body"] = jsonable(body)
    query = kwargs.get("extra_query")
    if isinstance(query, Mapping) and query:
        request["extra_query"] = {
            str(k): redaction.REDACTED if redaction.is_credential_name(str(k)) else jsonable(v)
            for k, v in query.items()
            if type(v).__name__ not in _SENTINELS
        }
    return request


def default_normalize(request: Mapping[str, Any]) -> dict[str, Any]:
    """Drop volatile params again (a cassette edited by hand, or recorded before a param became volatile), and
    blank credential-keyed values in the tools' results the conversation carries and the credentials of its
    addresses (``conversation_urls``), as the file holds them (``Cassette.written``), and a signed address's
    signing times: a live call compares equal to its recording, and to one written before they were blanked,
    whatever key the tool returned this run and whatever signature, date and expiry its presigned URL holds."""
    out = dict(matched_conversation(request))
    for name in ("params", "provider_params"):
        values = out.get(name)
        if isinstance(values, Mapping):
            kept = {k: v for k, v in values.items() if k not in VOLATILE_PARAMS}
            if kept:
                out[name] = kept
            else:
                out.pop(name)
    return out


def normalized(request: Mapping[str, Any], hook: Normalize | None) -> dict[str, Any]:
    out = default_normalize(request)
    if hook is not None:
        out = hook(out)
        if not isinstance(out, dict):
            raise TypeError(f"cassette normalize= hook must return a dict, got {type(out).__name__}")
    return out


def pretty(request: Mapping[str, Any]) -> str:
    """The text form used in files and in diffs: stable key order of the request, two-space indent."""
    return json.dumps(request, indent=2, ensure_ascii=False, sort_keys=False)


# One encoder for all: json.dumps with options builds a new one per call, and this runs on every call.
_canonical = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode


def canonical(request: Mapping[str, Any]) -> str:
    """The form two requests are compared in: key order does not count."""
    return _canonical(request)
