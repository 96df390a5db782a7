"""Codecs for the Google Gen AI SDK (``google-genai``): ``generate_content`` (and its stream) and ``embed_content``.

The SDK's private per-request methods (``Models._generate_content(model=, contents=, config=)``,
``_generate_content_stream``, ``_embed_content``) take three keyword arguments; everything
but the model and the prompt lives in ``config`` (a ``GenerateContentConfig`` or a dict). The
neutral view flattens the config: ``system_instruction`` is the system prompt, ``tools`` and
``tool_config`` the tools, the sampling fields the neutral params, the rest provider params
under the SDK's own names. ``http_options`` is transport (headers, timeouts, retries): it is
neither shown nor matched on, and ``apply`` leaves it as it was.

Responses are the SDK's own ``GenerateContentResponse`` objects, read by attribute (dicts read
the same way, for a response rebuilt from a stream). Gemini's ``prompt_token_count`` already
holds the cached tokens (``cached_content_token_count``) and its candidates' count leaves the
thoughts out: input tokens are the prompt plus the tool-use prompt, output tokens the candidates
plus the thoughts (as OpenAI's ``completion_tokens`` holds its reasoning), so ``input_tokens`` and
``output_tokens`` mean what they mean for every other provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay_runtime.codec import CountingAccumulator
from relay_runtime.neutral import NEUTRAL_PARAMS, ParamSpelling, UnsupportedParamError, register_compatible
from relay_runtime.types import REMOVED, AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, TokenUsage

from ..common import as_int, as_list, as_str, get

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

# Gemini's finish reasons -> the vocabulary the GenAI conventions use (``stop``, ``length``,
# ``content_filter``, ``tool_call``, ``error``); any other is kept, lower-cased (``continuation``).
_FILTERED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                       "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "LANGUAGE"})  # fmt: skip
_ERRORS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS",
                     "MISSING_THOUGHT_SIGNATURE", "MALFORMED_RESPONSE"})  # fmt: skip
_MODALITY_FIELDS = {"AUDIO": "audio", "IMAGE": "image"}


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


def finish_reason(value: Any, tool_calls: bool = False) -> str | None:
    """Gemini's ``FinishReason`` (an enum member or its name) in the conventions' words."""
    name = getattr(value, "value", value)
    if not isinstance(name, str) or not name or name == "FINISH_REASON_UNSPECIFIED":
        return None
    if name == "STOP":
        return "tool_call" if tool_calls else "stop"
    if name == "MAX_TOKENS":
        return "length"
    if name in _FILTERED:
        return "content_filter"
    if name in _ERRORS:
        return "error"
    return name.lower()


def _modality_counts(details: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in as_list(details):
        modality = get(item, "modality")
        name = _MODALITY_FIELDS.get(getattr(modality, "value", modality))
        count = as_int(get(item, "token_count"))
        if name is not None and count is not None:
            counts[name] = counts.get(name, 0) + count
    return counts


# A pydantic model class -> its field names (``model_fields`` is a class property that costs a call per read).
_FIELDS: dict[type, tuple[str, ...]] = {}


def dumped(value: Any) -> Any:
    """``value.model_dump(exclude_none=True)`` for the SDK's models (``extra='forbid'``: their fields are all
    there is), read field by field: the usage a stream ends with is a flat model of counts, for which
    pydantic's serializer costs more than the whole fold. Anything else comes back as it is."""
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None:
        fields = getattr(cls, "model_fields", None)
        if not isinstance(fields, Mapping) or not callable(getattr(value, "model_dump", None)):
            return value
        names = _FIELDS[cls] = tuple(fields)
    out: dict[str, Any] = {}
    for name in names:
        item = getattr(value, name, None)
        if item is None:
            continue
        if type(item) is list:
            item = [dumped(i) for i in item]
        elif hasattr(type(item), "model_fields"):
            item = dumped(item)
        out[name] = item
    return out


def usage_of(usage: Any) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    prompt = as_int(get(usage, "prompt_token_count"))
    tool_prompt = as_int(get(usage, "tool_use_prompt_token_count"))
    candidates = as_int(get(usage, "candidates_token_count"))
    if candidates is None:
        candidates = as_int(get(usage, "response_token_count"))  # the embeddings' and Live's spelling
    thoughts = as_int(get(usage, "thoughts_token_count"))
    inputs = None if prompt is None and tool_prompt is None else (prompt or 0) + (tool_prompt or 0)
    outputs = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    prompt_modalities = _modality_counts(get(usage, "prompt_tokens_details"))
    output_modalities = _modality_counts(get(usage, "candidates_tokens_details"))
    return TokenUsage(
        input_tokens=inputs,
        output_tokens=outputs,
        cache_read_tokens=as_int(get(usage, "cached_content_token_count")),
        reasoning_tokens=thoughts,
        input_audio_tokens=prompt_modalities.get("audio"),
        input_image_tokens=prompt_modalities.get("image"),
        output_audio_tokens=output_modalities.get("audio"),
        output_image_tokens=output_modalities.get("image"),
    )


def tool_call(function_call: Any) -> dict[str, Any]:
    return {"id": as_str(get(function_call, "id")), "name": as_str(get(function_call, "name")),
            "arguments": get(function_call, "args")}  # fmt: skip


def _read_parts(parts: Any) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """A candidate's parts as (texts, thoughts, tool calls)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in as_list(parts):
        text = as_str(get(part, "text"))
        if text:
            (thoughts if get(part, "thought") is True else texts).append(text)
        function_call = get(part, "function_call")
        if function_call is not None:
            calls.append(tool_call(function_call))
    return texts, thoughts, calls


def _blocked(response: Any) -> str | None:
    """A prompt the API refused to answer (``promptFeedback.blockReason``): a content filter."""
    reason = get(get(response, "prompt_feedback"), "block_reason")
    name = getattr(reason, "value", reason)
    if isinstance(name, str) and name and name != "BLOCKED_REASON_UNSPECIFIED":
        return "content_filter"
    return None


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
            candidate_texts, _thoughts, candidate_calls = _read_parts(get(get(candidate, "content"), "parts"))
            if index == 0:
                texts, calls = candidate_texts, candidate_calls
            reason = finish_reason(get(candidate, "finish_reason"), bool(candidate_calls))
            if reason:
                reasons.append(reason)
        blocked = _blocked(response)
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

    def accumulator(self) -> GenerateContentAccumulator:
        return GenerateContentAccumulator()


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


class GenerateContentAccumulator:
    """Folds ``generate_content_stream`` chunks (each a ``GenerateContentResponse``) into one response.

    The last chunk carries the candidate's ``finish_reason`` (and the whole usage); a stream
    whose chunks never said why the model stopped was cut short (``terminated`` stays False).
    A prompt blocked outright ends the stream with its ``prompt_feedback`` instead.
    """

    __slots__ = ("blocked", "calls", "model", "reason", "response_id", "terminated", "texts", "thoughts", "usage")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.reason: Any = None
        self.usage: Any = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.blocked: str | None = None
        self.terminated = False

    def add(self, chunk: Any) -> ChunkDelta | None:
        usage = get(chunk, "usage_metadata")
        if usage is not None:
            self.usage = usage  # each chunk's usage is the running total: the last one is the whole
        self.model = as_str(get(chunk, "model_version")) or self.model
        self.response_id = as_str(get(chunk, "response_id")) or self.response_id
        candidates = as_list(get(chunk, "candidates"))
        if not candidates:
            blocked = _blocked(chunk)
            if blocked:
                self.blocked = blocked
                self.terminated = True
            return None
        candidate = candidates[0]
        texts, thoughts, calls = _read_parts(get(get(candidate, "content"), "parts"))
        self.texts += texts
        self.thoughts += thoughts
        self.calls += calls
        reason = get(candidate, "finish_reason")
        if reason is not None:
            self.reason = reason
            self.terminated = True
        text, thought = "".join(texts), "".join(thoughts)
        extra = 0  # no generator frames for the common chunk: no calls, one candidate
        if calls:
            extra += sum(len(str(call.get("arguments") or "")) for call in calls)
        if len(candidates) > 1:
            extra += sum(len(str(c)) for c in candidates[1:])
        if not text and not thought and not extra:
            return None
        return ChunkDelta(text=text, reasoning=thought, extra_chars=extra)

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        reason = finish_reason(self.reason, bool(self.calls))
        parts: list[dict[str, Any]] = (
            [{"text": t, "thought": True} for t in self.thoughts if t] if self.thoughts else []
        )
        if self.texts:
            parts.append({"text": "".join(self.texts)})
        if self.calls:
            parts += [{"function_call": {"id": c["id"], "name": c["name"], "args": c["arguments"]}} for c in self.calls]
        response: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": parts},
                            "finish_reason": getattr(self.reason, "value", self.reason)}],
            "model_version": self.model,
            "response_id": self.response_id,
        }  # fmt: skip
        if self.usage is not None:
            response["usage_metadata"] = dumped(self.usage)
        reasons = [reason] if reason else ([self.blocked] if self.blocked else [])
        annotation = AnnotatedLLMResponse(
            model=self.model,
            id=self.response_id,
            finish_reasons=reasons,
            usage=usage_of(self.usage),
            output_text="".join(self.texts) if self.texts else None,
            tool_calls=list(self.calls),
        )
        return response, annotation


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
