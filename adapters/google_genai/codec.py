"""Codecs for the Google Gen AI SDK (``google-genai``): ``generate_content`` (and its stream) and ``embed_content``.

The SDK's private per-request methods (``Models._generate_content(model=, contents=, config=)``,
``_generate_content_stream``, ``_embed_content``) take three keyword arguments; everything
but the model and the prompt lives in ``config`` (a ``GenerateContentConfig`` or a dict). The
neutral view flattens the config: ``system_instruction`` is the system prompt, ``tools`` and
``tool_config`` the tools, the sampling fields the neutral params, the rest provider params
under the SDK's own names. ``http_options`` is transport (headers, timeouts, retries): it is
neither shown nor matched on, and ``apply`` leaves it as it was.

Responses (the SDK's own ``GenerateContentResponse`` objects, or dicts) are read in ``answers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay_runtime.codec import CountingAccumulator
from relay_runtime.neutral import NEUTRAL_PARAMS, ParamSpelling, UnsupportedParamError, register_compatible
from relay_runtime.types import REMOVED, AnnotatedLLMRequest, AnnotatedLLMResponse

from ..common import as_int, as_list, as_str, get
from .answers import GenerateContentAccumulator, blocked_reason, finish_reason, parts_of, read_parts, usage_of

GEMINI = "gcp.gemini"
VERTEX = "gcp.vertex_ai"
GENERATE_CONTENT = "generate_content"
EMBEDDINGS = "embeddings"
API = "Google Gen AI generate_content"

# neutral name -> its field in GenerateContentConfig
CONFIG_KEYS: dict[str, str] = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_tokens": "max_output_tokens",
    "stop": "stop_sequences",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "n": "candidate_count",
}
SPELLING = ParamSpelling(API, CONFIG_KEYS, list_only=frozenset({"stop"}))
_NEUTRAL_OF = {sdk: neutral for neutral, sdk in CONFIG_KEYS.items()}
# Config fields the neutral view holds in its own fields (system, tools, tool_choice) or keeps out (transport).
_SYSTEM, _TOOLS, _TOOL_CHOICE, _TRANSPORT = "system_instruction", "tools", "tool_config", "http_options"
_HELD = frozenset({_SYSTEM, _TOOLS, _TOOL_CHOICE, _TRANSPORT, *_NEUTRAL_OF})


def config_view(config: Any) -> dict[str, Any]:
    """The fields set in a config (a dict, an SDK model or None), as a plain dict (nothing copied deeper)."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return {k: v for k, v in config.items() if v is not None}
    fields = getattr(type(config), "model_fields", None)
    if not isinstance(fields, Mapping):
        raise TypeError(f"config must be a dict or a google.genai config model, got {type(config).__name__}")
    return {name: value for name in fields if (value := getattr(config, name, None)) is not None}


def _with_config(config: Any, updates: dict[str, Any]) -> Any:
    """``config`` with ``updates`` (None removes a field), of the same kind it came as."""
    if not updates:
        return config
    if config is not None and not isinstance(config, Mapping):
        return config.model_copy(update=updates)
    merged = dict(config or {})
    for key, value in updates.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _value(value: Any) -> Any:
    return None if value is REMOVED else value


def _contents_of(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class GenerateContentCodec:
    """One per (provider, streaming): the provider is the client's (Gemini API or Vertex AI)."""

    operation = GENERATE_CONTENT
    spelling = SPELLING

    def __init__(self, provider: str, streaming: bool) -> None:
        self.provider = provider
        self.streaming = streaming

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        config = config_view(content.get("config"))
        tools = config.get(_TOOLS)
        return AnnotatedLLMRequest(
            model=as_str(content.get("model")),
            messages=_contents_of(content.get("contents")),
            system=config.get(_SYSTEM),
            params={_NEUTRAL_OF[k]: v for k, v in config.items() if k in _NEUTRAL_OF},
            provider_params={k: v for k, v in config.items() if k not in _HELD},
            tools=list(tools) if isinstance(tools, list | tuple) else None,
            tool_choice=config.get(_TOOL_CHOICE),
            stream=self.streaming,
            provider=self.provider,
            operation=self.operation,
        )

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(content)
        updates: dict[str, Any] = {}
        for name, value in changes.items():
            if name == "params":
                updates.update(_param_updates(value))
            elif name == "provider_params":
                if not isinstance(value, Mapping):
                    raise TypeError(f"provider_params changes must be a mapping, got {type(value).__name__}")
                for key, item in value.items():
                    if key in _HELD:
                        raise ValueError(
                            f"provider_params key {key!r} is held by the annotated request's own fields "
                            f"(system, params, tools, tool_choice) or is transport: edit it there"
                        )
                    updates[key] = _value(item)
            elif name == "model":
                kwargs["model"] = value
            elif name == "messages":
                kwargs["contents"] = list(value) if value is not None else []
            elif name == "system":
                updates[_SYSTEM] = _value(value)
            elif name == "tools":
                updates[_TOOLS] = _value(value)
            elif name == "tool_choice":
                updates[_TOOL_CHOICE] = _value(value)
            elif name == "stream":
                if bool(value) != self.streaming:
                    raise ValueError(
                        f"{API}: streaming is chosen by the method (generate_content / generate_content_stream), "
                        f"not by the request: stream cannot change to {bool(value)}"
                    )
            else:
                raise ValueError(f"unknown annotated request field {name!r} in changes")
        if updates:
            kwargs["config"] = _with_config(kwargs.get("config"), updates)
        return kwargs

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        reasons: list[str] = []
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for index, candidate in enumerate(as_list(get(response, "candidates"))):
            parts, finish = parts_of(candidate)
            candidate_texts, _thoughts, candidate_calls = read_parts(parts)
            if index == 0:
                texts, calls = candidate_texts, candidate_calls
            reason = finish_reason(finish, bool(candidate_calls))
            if reason:
                reasons.append(reason)
        blocked = blocked_reason(response)
        if blocked and not reasons:
            reasons.append(blocked)
        return AnnotatedLLMResponse(
            model=as_str(get(response, "model_version")),
            id=as_str(get(response, "response_id")),
            finish_reasons=reasons,
            usage=usage_of(get(response, "usage_metadata")),
            output_text="".join(texts) if texts else None,
            tool_calls=calls,
        )

    # The class itself: ``accumulator()`` makes one with no frame of the codec's around it (every stream asks).
    accumulator = GenerateContentAccumulator


def _param_updates(params: Any) -> dict[str, Any]:
    if not isinstance(params, Mapping):
        raise TypeError(f"params changes must be a mapping, got {type(params).__name__}")
    for key in params:  # every name checked before anything is written
        if key not in NEUTRAL_PARAMS:
            raise ValueError(f"{key!r} is not a neutral param (known: {', '.join(NEUTRAL_PARAMS)})")
        if key not in CONFIG_KEYS:
            raise UnsupportedParamError(key, API, list(CONFIG_KEYS))
    updates: dict[str, Any] = {}
    for key, value in params.items():
        value = _value(value)
        if key == "stop" and isinstance(value, str):
            value = [value]
        updates[CONFIG_KEYS[key]] = value
    return updates


# -- embed_content ------------------------------------------------------------------------------

# Where ``_embed_content`` takes its inputs: the Gemini API's ``contents``, Vertex's one
# ``content`` or its ``batch_contents``.
_INPUT_KEYS = ("contents", "batch_contents", "content")
EMBED_SPELLING = ParamSpelling("Google Gen AI embed_content", {})


def _whole(value: Any) -> int | None:
    """A count Vertex sends as a float (``5.0``)."""
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return as_int(value)


class EmbedContentCodec:
    """``embed_content``: the inputs are the messages; the config's fields (``output_dimensionality``,
    ``task_type``, ...) are provider params. An answer has input tokens where the API counts them
    (Vertex: each embedding's ``statistics.token_count``; newer models: ``usage_metadata``)."""

    operation = EMBEDDINGS
    spelling = EMBED_SPELLING

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.streaming = False

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        key = next((k for k in _INPUT_KEYS if content.get(k) is not None), "contents")
        config = config_view(content.get("config"))
        return AnnotatedLLMRequest(
            model=as_str(content.get("model")),
            messages=_contents_of(content.get(key)),
            provider_params={k: v for k, v in config.items() if k != _TRANSPORT},
            provider=self.provider,
            operation=self.operation,
        )

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(content)
        updates: dict[str, Any] = {}
        for name, value in changes.items():
            if name == "model":
                kwargs["model"] = value
            elif name == "messages":
                key = next((k for k in _INPUT_KEYS if content.get(k) is not None), "contents")
                items = list(value) if value is not None else []
                if key == "content":
                    if len(items) != 1:
                        raise ValueError(f"this embed_content request sent one content; intercepts left {len(items)}")
                    kwargs[key] = items[0]
                else:
                    kwargs[key] = items
            elif name == "provider_params":
                for key, item in value.items():
                    if key == _TRANSPORT:
                        raise ValueError("http_options is transport, not a provider param: it cannot change here")
                    updates[key] = _value(item)
            elif name == "params":
                for key in value:
                    raise UnsupportedParamError(key, EMBED_SPELLING.api, [])
            elif name != "stream":
                raise ValueError(f"{name!r} cannot change in an embed_content request")
        if updates:
            kwargs["config"] = _with_config(kwargs.get("config"), updates)
        return kwargs

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        embeddings = as_list(get(response, "embeddings"))
        first = get(embeddings[0], "values") if embeddings else None
        usage = usage_of(get(response, "usage_metadata"))
        if usage.input_tokens is None:
            counts = [_whole(get(get(e, "statistics"), "token_count")) for e in embeddings]
            if counts and all(c is not None for c in counts):
                usage.input_tokens = sum(c for c in counts if c is not None)
        usage.output_tokens = None  # embeddings have no output tokens
        return AnnotatedLLMResponse(usage=usage, embedding_dimensions=len(first) if isinstance(first, list) else None)

    def accumulator(self) -> CountingAccumulator:
        return CountingAccumulator()  # embeddings do not stream


CODECS: dict[tuple[str, str], Any] = {}
for _provider in (GEMINI, VERTEX):
    # So that ``AnnotatedLLMRequest.accepts`` answers for this API (``parallel_tool_calls``: no).
    register_compatible(_provider, GENERATE_CONTENT, SPELLING)
    register_compatible(_provider, EMBEDDINGS, EMBED_SPELLING)
    CODECS[(_provider, "generate")] = GenerateContentCodec(_provider, False)
    CODECS[(_provider, "stream")] = GenerateContentCodec(_provider, True)
    CODECS[(_provider, "embed")] = EmbedContentCodec(_provider)
