"""Codec for Amazon Bedrock's Converse API (``bedrock-runtime`` ``converse`` / ``converse_stream``).

The request keeps its sampling params in ``inferenceConfig`` and its tools in
``toolConfig``; the neutral view flattens both, and ``apply`` writes a change
back into a copy of the nested dict it came from. Tool calls are annotated with
``arguments`` as the ``input`` object Bedrock returns.

Bedrock counts ``inputTokens`` apart from the cache reads and writes; the
annotation adds them back, so ``input_tokens`` is the whole prompt as in the
OpenAI shape the pricing reads (and as ``gen_ai.usage.input_tokens`` means).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from relay_runtime.neutral import NEUTRAL_PARAMS, UnsupportedParamError
from relay_runtime.types import REMOVED, AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, TokenUsage

from ..common import as_int, as_list, as_str, get

PROVIDER = "aws.bedrock"
API = "Amazon Bedrock Converse"
# neutral name -> its key inside ``inferenceConfig``
INFERENCE_KEYS: dict[str, str] = {
    "max_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "stop": "stopSequences",
}
_NEUTRAL_OF = {sdk: neutral for neutral, sdk in INFERENCE_KEYS.items()}
# Kwargs the neutral view holds in its own fields: never provider params.
STRUCTURAL = frozenset({"modelId", "messages", "system", "inferenceConfig", "toolConfig"})


def usage_of(usage: Any) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    fresh = as_int(get(usage, "inputTokens"))
    read = as_int(get(usage, "cacheReadInputTokens"))
    write = as_int(get(usage, "cacheWriteInputTokens"))
    whole = None if fresh is None else fresh + (read or 0) + (write or 0)
    return TokenUsage(
        input_tokens=whole,
        output_tokens=as_int(get(usage, "outputTokens")),
        cache_read_tokens=read,
        cache_creation_tokens=write,
        cache_creation_1h_tokens=_written_for_an_hour(get(usage, "cacheDetails")),
    )


def _written_for_an_hour(details: Any) -> int | None:
    """The cache writes ``cacheDetails`` says are kept an hour (billed at their own rate, among the writes)."""
    hour = None
    for detail in as_list(details):
        tokens = as_int(get(detail, "inputTokens"))
        if get(detail, "ttl") == "1h" and tokens is not None:
            hour = (hour or 0) + tokens
    return hour


def _tool_call(tool_use: Any) -> dict[str, Any]:
    return {"id": as_str(get(tool_use, "toolUseId")), "name": as_str(get(tool_use, "name")),
            "arguments": get(tool_use, "input")}  # fmt: skip


def _system_of(value: Any) -> list[Any] | None:
    """Converse takes system prompts as content blocks; a plain string from an intercept becomes one."""
    if value is None or value is REMOVED:
        return None
    if isinstance(value, str):
        return [{"text": value}]
    if isinstance(value, list | tuple):
        return list(value)
    raise TypeError(f"system for {API} must be a string or a list of content blocks, got {type(value).__name__}")


class ConverseCodec:
    provider = PROVIDER
    operation = "chat"

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        config = content.get("inferenceConfig")
        params: dict[str, Any] = {}
        if isinstance(config, Mapping):
            for key, value in config.items():
                neutral = _NEUTRAL_OF.get(key)
                if neutral is not None:
                    params[neutral] = value
        tool_config = content.get("toolConfig")
        tools = get(tool_config, "tools") if isinstance(tool_config, Mapping) else None
        messages = content.get("messages")
        return AnnotatedLLMRequest(
            model=as_str(content.get("modelId")),
            messages=list(messages) if isinstance(messages, list | tuple) else [],
            system=content.get("system"),
            params=params,
            provider_params={k: v for k, v in content.items() if k not in STRUCTURAL},
            tools=list(tools) if isinstance(tools, list | tuple) else None,
            tool_choice=get(tool_config, "toolChoice") if isinstance(tool_config, Mapping) else None,
            stream=self.streaming,
            provider=PROVIDER,
            operation=self.operation,
        )

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(content)
        for name, value in changes.items():
            if name == "params":
                self._apply_params(kwargs, value)
            elif name == "provider_params":
                if not isinstance(value, Mapping):
                    raise TypeError(f"provider_params changes must be a mapping, got {type(value).__name__}")
                for key, item in value.items():
                    if key in STRUCTURAL:
                        raise ValueError(
                            f"provider_params key {key!r} is held by the annotated request's own fields "
                            f"(model, messages, system, params, tools, tool_choice): edit it there"
                        )
                    _put(kwargs, key, item)
            elif name == "model":
                _put(kwargs, "modelId", value)
            elif name == "messages":
                kwargs["messages"] = list(value) if value is not None else []
            elif name == "system":
                _put(kwargs, "system", _system_of(value))
            elif name in ("tools", "tool_choice"):
                tool_config = dict(kwargs.get("toolConfig") or {})
                _put(tool_config, "tools" if name == "tools" else "toolChoice", value)
                _put(kwargs, "toolConfig", tool_config if tool_config.get("tools") else None)
            elif name == "stream":
                if bool(value) != self.streaming:
                    raise ValueError(
                        f"{API}: streaming is chosen by the method (converse / converse_stream), "
                        f"not by the request: stream cannot change to {bool(value)}"
                    )
            else:
                raise ValueError(f"unknown annotated request field {name!r} in changes")
        return kwargs

    @staticmethod
    def _apply_params(kwargs: dict[str, Any], params: Any) -> None:
        if not isinstance(params, Mapping):
            raise TypeError(f"params changes must be a mapping, got {type(params).__name__}")
        for key in params:  # every name checked before anything is written
            if key not in NEUTRAL_PARAMS:
                raise ValueError(f"{key!r} is not a neutral param (known: {', '.join(NEUTRAL_PARAMS)})")
            if key not in INFERENCE_KEYS:
                raise UnsupportedParamError(key, API, list(INFERENCE_KEYS))
        config = dict(kwargs.get("inferenceConfig") or {})
        for key, value in params.items():
            if key == "stop" and isinstance(value, str):
                value = [value]
            _put(config, INFERENCE_KEYS[key], value)
        _put(kwargs, "inferenceConfig", config or None)

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in as_list(get(get(get(response, "output"), "message"), "content")):
            text = as_str(get(block, "text"))
            if text:
                texts.append(text)
            tool_use = get(block, "toolUse")
            if tool_use is not None:
                calls.append(_tool_call(tool_use))
        reason = as_str(get(response, "stopReason"))
        return AnnotatedLLMResponse(
            id=as_str(get(get(response, "ResponseMetadata"), "RequestId")),
            finish_reasons=[reason] if reason else [],
            usage=usage_of(get(response, "usage")),
            output_text="".join(texts) if texts else None,
            tool_calls=calls,
        )

    def accumulator(self) -> ConverseStreamAccumulator:
        return ConverseStreamAccumulator()


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    # None (or REMOVED) means "not sent": botocore refuses an explicit None for a member.
    if value is None or value is REMOVED:
        target.pop(key, None)
    else:
        target[key] = value


class _Block:
    __slots__ = ("kind", "parts", "tool_use")

    def __init__(self, kind: str, tool_use: Any = None) -> None:
        self.kind = kind  # "text", "toolUse" or "reasoning"
        self.parts: list[str] = []
        self.tool_use = tool_use


class ConverseStreamAccumulator:
    """Folds ``converse_stream`` events into the shape ``converse`` returns.

    ``messageStop`` carries the stop reason and ends the message; ``metadata``
    (after it) the usage. Without ``messageStop`` the stream was cut short.
    """

    __slots__ = ("blocks", "metadata", "role", "stop_reason", "terminated")

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.role = "assistant"
        self.stop_reason: str | None = None
        self.metadata: Any = None
        self.terminated = False

    def _block(self, index: int, kind: str) -> _Block:
        block = self.blocks.get(index)
        if block is None:
            block = self.blocks[index] = _Block(kind)
        return block

    def add(self, chunk: Any) -> ChunkDelta | None:
        event = get(chunk, "contentBlockDelta")
        if event is not None:
            index = as_int(get(event, "contentBlockIndex")) or 0
            delta = get(event, "delta")
            text = as_str(get(delta, "text"))
            if text is not None:
                self._block(index, "text").parts.append(text)
                return ChunkDelta(text=text) if text else None
            tool_use = get(delta, "toolUse")
            if tool_use is not None:
                fragment = as_str(get(tool_use, "input")) or ""
                self._block(index, "toolUse").parts.append(fragment)
                return ChunkDelta(extra_chars=len(fragment))
            thought = as_str(get(get(delta, "reasoningContent"), "text"))
            if thought:
                self._block(index, "reasoning").parts.append(thought)
                return ChunkDelta(reasoning=thought)
            return None
        event = get(chunk, "contentBlockStart")
        if event is not None:
            tool_use = get(get(event, "start"), "toolUse")
            if tool_use is not None:
                index = as_int(get(event, "contentBlockIndex")) or 0
                self.blocks[index] = _Block("toolUse", tool_use)
            return None
        event = get(chunk, "messageStop")
        if event is not None:
            self.stop_reason = as_str(get(event, "stopReason")) or self.stop_reason
            self.terminated = True
            return None
        event = get(chunk, "metadata")
        if event is not None:
            self.metadata = event
            return None
        event = get(chunk, "messageStart")
        if event is not None:
            self.role = as_str(get(event, "role")) or self.role
        return None

    def _content(self) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        for _, block in sorted(self.blocks.items()):
            joined = "".join(block.parts)
            if block.kind == "text":
                content.append({"text": joined})
            elif block.kind == "reasoning":
                content.append({"reasoningContent": {"reasoningText": {"text": joined}}})
            else:
                try:
                    arguments: Any = json.loads(joined) if joined else {}
                except ValueError:
                    arguments = joined  # a stream cut mid-object: keep what arrived rather than nothing
                content.append({"toolUse": {"toolUseId": get(block.tool_use, "toolUseId"),
                                            "name": get(block.tool_use, "name"), "input": arguments}})  # fmt: skip
        return content

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        content = self._content()
        texts = [text for block in content if (text := block.get("text"))]
        response: dict[str, Any] = {
            "output": {"message": {"role": self.role, "content": content}},
            "stopReason": self.stop_reason,
        }
        usage = get(self.metadata, "usage")
        if usage is not None:
            response["usage"] = usage
        metrics = get(self.metadata, "metrics")
        if metrics is not None:
            response["metrics"] = metrics
        annotation = AnnotatedLLMResponse(
            finish_reasons=[self.stop_reason] if self.stop_reason else [],
            usage=usage_of(usage),
            output_text="".join(texts) if texts else None,
            tool_calls=[_tool_call(block["toolUse"]) for block in content if "toolUse" in block],
        )
        return response, annotation
