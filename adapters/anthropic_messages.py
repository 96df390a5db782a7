"""Codec for Anthropic messages (``client.messages.create``).

Tool calls are annotated with ``arguments`` as the ``input`` object Anthropic
returns (OpenAI's codecs give the JSON text the API sends).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from relay_runtime import neutral
from relay_runtime.cost.pricing import CACHE_BESIDE_INPUT
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, TokenUsage

from .common import FieldMap, apply_common, as_int, as_list, as_str, decode_common, get

_FIELDS = FieldMap.of("messages", "system", neutral.ANTHROPIC_MESSAGES)
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def usage_of(usage: Any) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    return TokenUsage(
        input_tokens=as_int(get(usage, "input_tokens")),
        output_tokens=as_int(get(usage, "output_tokens")),
        cache_read_tokens=as_int(get(usage, "cache_read_input_tokens")),
        cache_creation_tokens=as_int(get(usage, "cache_creation_input_tokens")),
        reasoning_tokens=as_int(get(get(usage, "output_tokens_details"), "thinking_tokens")),
        cache_creation_1h_tokens=as_int(get(get(usage, "cache_creation"), "ephemeral_1h_input_tokens")),
        web_search_requests=as_int(get(get(usage, "server_tool_use"), "web_search_requests")),
    )


def _tool_use(block: Any) -> dict[str, Any]:
    return {
        "id": as_str(get(block, "id")),
        "name": as_str(get(block, "name")),
        "arguments": get(block, "input"),
    }


class AnthropicMessagesCodec:
    provider = "anthropic"
    price_provider = "anthropic"  # its id in genai-prices (see relay_runtime.cost.providers)
    endpoint: str | None = None  # a compatible endpoint it reaches (see adapters.endpoints)
    operation = "chat"
    spelling = neutral.ANTHROPIC_MESSAGES  # how this API spells the neutral params

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        return decode_common(content, _FIELDS, self.provider, self.operation)

    def usage_of(self, usage: Any) -> TokenUsage:
        """Anthropic's own API counts its input apart from the cache reads and writes. Named for another
        provider (Bedrock or Vertex AI reached by ``AnthropicBedrock`` / ``AnthropicVertex``, a gateway the
        caller named) the input is the whole prompt, as every other provider counts it and as prices and
        exporters read it under that name (``cost.pricing.CACHE_BESIDE_INPUT``)."""
        counted = usage_of(usage)
        if self.provider not in CACHE_BESIDE_INPUT and counted.input_tokens is not None:
            counted.input_tokens += (counted.cache_read_tokens or 0) + (counted.cache_creation_tokens or 0)
        return counted

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        return apply_common(content, changes, _FIELDS)

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        text, calls = self.response_content(response)
        reason = as_str(get(response, "stop_reason"))
        return AnnotatedLLMResponse(
            model=as_str(get(response, "model")),
            id=as_str(get(response, "id")),
            finish_reasons=[reason] if reason else [],
            usage=self.usage_of(get(response, "usage")),
            output_text=text,
            tool_calls=calls,
        )

    def response_content(self, response: Any) -> tuple[str | None, list[dict[str, Any]]]:
        """What ``annotate_response`` reads as ``output_text`` and ``tool_calls``, alone (cheaper)."""
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in as_list(get(response, "content")):
            kind = get(block, "type")
            if kind == "text" and (text := as_str(get(block, "text"))):
                texts.append(text)
            elif kind == "tool_use":
                calls.append(_tool_use(block))
        return ("".join(texts) if texts else None), calls

    def accumulator(self) -> MessagesAccumulator:
        return MessagesAccumulator(self)


class _Block:
    __slots__ = ("citations", "parts", "raw", "signature", "type")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.type = as_str(get(raw, "type"))
        # A start that already carries text keeps it ahead of the deltas, as the SDK's own accumulator does.
        opening = as_str(get(raw, self.type)) if self.type in ("text", "thinking") else None
        self.parts: list[str] = [opening] if opening else []
        self.signature: str | None = as_str(get(raw, "signature"))
        self.citations: list[Any] | None = None  # a text block's citations_delta, in order


class MessagesAccumulator:
    """Folds raw message stream events into an anthropic ``Message``.

    ``message_start`` carries the id, model and input usage; ``message_delta``
    the stop reason and the cumulative output usage.
    """

    __slots__ = ("blocks", "codec", "message", "stop_reason", "stop_sequence", "terminated", "usage")

    def __init__(self, codec: AnthropicMessagesCodec) -> None:
        self.codec = codec
        self.message: Any = None
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage: dict[str, Any] = {}
        self.terminated = False  # ``message_stop`` seen: without it the stream was cut short

    def _merge_usage(self, usage: Any) -> None:
        for name in _USAGE_FIELDS:
            value = as_int(get(usage, name))
            if value is not None:
                self.usage[name] = value
        for name in ("output_tokens_details", "cache_creation", "server_tool_use"):
            details = get(usage, name)
            if details is not None:
                self.usage[name] = details

    def add(self, chunk: Any) -> ChunkDelta | None:
        kind = get(chunk, "type")
        if kind == "content_block_delta":
            block = self.blocks.get(as_int(get(chunk, "index")) or 0)
            delta = get(chunk, "delta")
            dtype = get(delta, "type")
            if dtype == "text_delta":
                text = as_str(get(delta, "text")) or ""
                if block is not None:
                    block.parts.append(text)
                return ChunkDelta(text=text) if text else None
            if dtype == "thinking_delta":
                thought = as_str(get(delta, "thinking")) or ""
                if block is not None:
                    block.parts.append(thought)
                return ChunkDelta(reasoning=thought) if thought else None
            if block is not None:
                if dtype == "input_json_delta":
                    fragment = as_str(get(delta, "partial_json")) or ""
                    block.parts.append(fragment)
                    return ChunkDelta(extra_chars=len(fragment))
                if dtype == "signature_delta":
                    block.signature = as_str(get(delta, "signature"))
                elif dtype == "citations_delta":
                    if block.citations is None:
                        block.citations = []
                    block.citations.append(get(delta, "citation"))
            return None
        if kind == "content_block_start":
            block = self.blocks[as_int(get(chunk, "index")) or 0] = _Block(get(chunk, "content_block"))
            if not block.parts:
                return None
            # Opening text a start carried: the answer's first words, which the chunk marks carry too.
            opening = block.parts[0]
            return ChunkDelta(text=opening) if block.type == "text" else ChunkDelta(reasoning=opening)
        if kind == "message_start":
            self.message = get(chunk, "message")
            self._merge_usage(get(self.message, "usage"))
            model = as_str(get(self.message, "model"))
            return ChunkDelta(model=model) if model else None
        if kind == "message_delta":
            delta = get(chunk, "delta")
            self.stop_reason = as_str(get(delta, "stop_reason")) or self.stop_reason
            self.stop_sequence = as_str(get(delta, "stop_sequence")) or self.stop_sequence
            self._merge_usage(get(chunk, "usage"))
        elif kind == "message_stop":
            self.terminated = True
        return None

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        content = [self._content_block(b) for _, b in sorted(self.blocks.items())]
        texts = [t for b in content if get(b, "type") == "text" and (t := as_str(get(b, "text")))]
        annotation = AnnotatedLLMResponse(
            model=as_str(get(self.message, "model")),
            id=as_str(get(self.message, "id")),
            finish_reasons=[self.stop_reason] if self.stop_reason else [],
            usage=self.codec.usage_of(self.usage),
            output_text="".join(texts) if texts else None,
            tool_calls=[_tool_use(b) for b in content if get(b, "type") == "tool_use"],
        )
        return self._message(content), annotation

    def _content_block(self, block: _Block) -> Any:
        joined = "".join(block.parts)
        if block.type == "text":
            return _construct("TextBlock", {"type": "text", "text": joined, "citations": block.citations})
        if block.type == "thinking":
            return _construct(
                "ThinkingBlock", {"type": "thinking", "thinking": joined, "signature": block.signature or ""}
            )
        if block.type == "tool_use":
            return _construct(
                "ToolUseBlock",
                {
                    "type": "tool_use",
                    "id": get(block.raw, "id"),
                    "name": get(block.raw, "name"),
                    "input": _input_of(joined, block.raw),
                },
            )
        if joined:  # another block streamed its input (a server tool's): the whole input, as the SDK keeps it
            raw, arguments = block.raw, _input_of(joined, block.raw)
            if isinstance(raw, Mapping):
                return {**raw, "input": arguments}
            return raw.model_copy(update={"input": arguments}) if hasattr(raw, "model_copy") else raw
        return block.raw

    def _message(self, content: list[Any]) -> Any:
        return _construct(
            "Message",
            {
                "id": get(self.message, "id"),
                "type": "message",
                "role": "assistant",
                "model": get(self.message, "model"),
                "content": content,
                "stop_reason": self.stop_reason,
                "stop_sequence": self.stop_sequence,
                "usage": _construct("Usage", dict(self.usage)),
            },
        )


def _input_of(joined: str, raw: Any) -> Any:
    """A block's input: its input_json_delta fragments parsed, or the input its start gave when none came."""
    if not joined:
        given = get(raw, "input")
        return {} if given is None else given
    try:
        return json.loads(joined)
    except ValueError:
        return joined  # a stream cut mid-object: keep what arrived rather than nothing


def _construct(type_name: str, values: dict[str, Any]) -> Any:
    """The anthropic SDK type, unvalidated (a lenient stream must not fail here); a dict without the SDK."""
    try:
        import anthropic.types as types
    except ImportError:
        return values
    return getattr(types, type_name).model_construct(**values)
