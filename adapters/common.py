"""What the three codecs share: tolerant field access and the kwargs overlay.

Provider responses reach the codecs as SDK models, plain dicts or duck-typed
objects (tests and proxies hand in ``SimpleNamespace``); every read here
returns a default instead of raising, because annotation is bookkeeping and
must never cost the caller its response.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relay_runtime.neutral import ParamSpelling
from relay_runtime.types import REMOVED, AnnotatedLLMRequest, AnnotatedLLMResponse, TokenUsage

# SDK call options that are transport, not request content: never "params",
# and never touched by ``apply`` (they keep their identity).
TRANSPORT_KWARGS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


_MISSING = object()


def get(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name`` or ``obj[name]``, else ``default``."""
    if obj is None:
        return default
    if type(obj) is dict:
        return obj.get(name, default)
    try:
        value = getattr(obj, name, _MISSING)
    except Exception:
        # A property that raises (pydantic validators, lazy SDK fields) reads as absent.
        return default
    if value is _MISSING:
        # Mapping is an ABC and its isinstance check is slow: only asked when the attribute is absent.
        return obj.get(name, default) if isinstance(obj, Mapping) else default
    return value


def as_int(value: Any) -> int | None:
    return value if type(value) is int else None


def openai_usage(usage: Any, inputs: str, outputs: str) -> TokenUsage:
    """Token usage in OpenAI's shape, whose two APIs differ only in the key prefix (``prompt``/``input``, ...)."""
    if usage is None:
        return TokenUsage()
    input_details = get(usage, f"{inputs}_tokens_details")
    output_details = get(usage, f"{outputs}_tokens_details")
    return TokenUsage(
        input_tokens=as_int(get(usage, f"{inputs}_tokens")),
        output_tokens=as_int(get(usage, f"{outputs}_tokens")),
        cache_read_tokens=as_int(get(input_details, "cached_tokens")),
        cache_creation_tokens=as_int(get(input_details, "cache_write_tokens")),
        reasoning_tokens=as_int(get(output_details, "reasoning_tokens")),
        input_audio_tokens=as_int(get(input_details, "audio_tokens")),
        output_audio_tokens=as_int(get(output_details, "audio_tokens")),
        input_image_tokens=as_int(get(input_details, "image_tokens")),
        output_image_tokens=as_int(get(output_details, "image_tokens")),
    )


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_list(value: Any) -> list[Any] | tuple[Any, ...]:
    return value if isinstance(value, (list, tuple)) else ()


@dataclass(frozen=True)
class FieldMap:
    """Where an API keeps each neutral field among its create() kwargs."""

    messages: str
    system: str | None  # None: the API keeps system prompts inside ``messages``
    structural: frozenset[str]
    spelling: ParamSpelling

    @classmethod
    def of(cls, messages: str, system: str | None, spelling: ParamSpelling) -> FieldMap:
        keys = {"model", messages, "tools", "tool_choice", "stream"}
        if system is not None:
            keys.add(system)
        return cls(messages, system, frozenset(keys) | TRANSPORT_KWARGS, spelling)


def decode_common(content: Mapping[str, Any], fields: FieldMap, provider: str, operation: str) -> AnnotatedLLMRequest:
    """The fields every API spells the same way; the caller fixes up messages/system."""
    structural = fields.structural
    spelling = fields.spelling
    by_sdk = spelling.by_sdk
    params: dict[str, Any] = {}
    provider_params: dict[str, Any] = {}
    for key, value in content.items():
        if key in structural:
            continue
        neutral = by_sdk.get(key)
        if neutral is None:
            provider_params[key] = value
        elif neutral not in params or key == spelling.names.get(neutral):  # the primary spelling wins
            params[neutral] = value
    messages = content.get(fields.messages)
    tools = content.get("tools")
    return AnnotatedLLMRequest(
        model=as_str(content.get("model")),
        messages=list(messages) if isinstance(messages, list | tuple) else [],
        system=content.get(fields.system) if fields.system is not None else None,
        params=params,
        provider_params=provider_params,
        tools=list(tools) if isinstance(tools, list | tuple) else None,
        tool_choice=content.get("tool_choice"),
        stream=bool(content.get("stream")),
        provider=provider,
        operation=operation,
    )


def _put(kwargs: dict[str, Any], key: str, value: Any) -> None:
    # None (or REMOVED) in the neutral view means "not sent": the SDKs treat an
    # explicit None differently from an absent key for several fields.
    if value is None or value is REMOVED:
        kwargs.pop(key, None)
    else:
        kwargs[key] = value


def _keyed_changes(name: str, value: Any, fields: FieldMap) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} changes must be a mapping, got {type(value).__name__}")
    for key in value:
        if key in fields.structural:
            raise ValueError(
                f"{name} key {key!r} names a structural or transport field; "
                f"edit it through the annotated request's own field instead"
            )
    return value


def apply_common(content: Mapping[str, Any], changes: dict[str, Any], fields: FieldMap) -> dict[str, Any]:
    """A new kwargs dict: ``content`` with only the changed neutral fields written over it.

    Every neutral param is checked against the API before anything is written, so
    a name the API cannot take fails the call before it is sent. ``system`` is
    left to the caller when the API keeps it inside ``messages``.
    """
    kwargs = dict(content)
    spelling = fields.spelling
    params = changes.get("params")
    if params is not None:
        # Spelled first, all of them: an unsupported name fails before anything is written.
        spelled = [(key, *spelling.to_sdk(key, item)) for key, item in _keyed_changes("params", params, fields).items()]
        for neutral, sdk_key, item in spelled:
            for other in spelling.sdk_keys(neutral):  # the deprecated spellings too: never send two
                kwargs.pop(other, None)
            _put(kwargs, sdk_key, item)
    for name, value in changes.items():
        if name == "params":
            continue
        if name == "provider_params":
            for key, item in _keyed_changes(name, value, fields).items():
                meant = spelling.neutral_of(key)
                if meant is not None:
                    raise ValueError(
                        f"provider_params key {key!r} is the {spelling.api} spelling of the neutral "
                        f"param {meant!r}: set annotated.params[{meant!r}] instead"
                    )
                _put(kwargs, key, item)
        elif name == "messages":
            kwargs[fields.messages] = list(value) if value is not None else []
        elif name == "system":
            if fields.system is not None:
                _put(kwargs, fields.system, value)
        elif name == "stream":
            if value:
                kwargs["stream"] = True
            else:
                kwargs.pop("stream", None)
        elif name in ("model", "tools", "tool_choice"):
            _put(kwargs, name, value)
        else:
            raise ValueError(f"unknown annotated request field {name!r} in changes")
    return kwargs


@dataclass
class ToolCallParts:
    """One tool call as it arrives in fragments over a stream."""

    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": "".join(self.arguments)}


@dataclass
class StreamedResponse:
    """The final response of a stream whose API sent no complete response object of its own."""

    model: str | None = None
    id: str | None = None
    output_text: str = ""
    reasoning_text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)

    def annotation(self) -> AnnotatedLLMResponse:
        return AnnotatedLLMResponse(
            model=self.model,
            id=self.id,
            finish_reasons=list(self.finish_reasons),
            usage=self.usage,
            output_text=self.output_text or None,
            tool_calls=list(self.tool_calls),
        )
