"""Codec for the OpenAI Responses API (``client.responses.create``).

The neutral ``messages`` is ``input`` (a bare string input reads as one user
message) and ``system`` is ``instructions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay_runtime import neutral
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, TokenUsage

from .common import (
    FieldMap,
    StreamedResponse,
    ToolCallParts,
    apply_common,
    as_list,
    as_str,
    decode_common,
    get,
    openai_usage,
)

_FIELDS = FieldMap.of("input", "instructions", neutral.OPENAI_RESPONSES)
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_REASONING_DELTAS = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})
# Deltas that are not model output in characters: base64 audio (its transcript is counted instead).
_UNMETERED_DELTAS = frozenset({"response.audio.delta", "response.image_generation_call.partial_image"})
# The output items that are tool calls of the record, with the field holding what the call passes: a stream cut
# before its terminal event is rebuilt from their pieces (``StreamedResponse``), custom tools' calls included.
_CALL_ARGUMENTS = {"function_call": "arguments", "custom_tool_call": "input"}
_CALL_DELTAS = frozenset({"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"})


def usage_of(usage: Any) -> TokenUsage:
    return openai_usage(usage, "input", "output")


class ResponseFailed(RuntimeError):
    """A stream ended with ``response.failed``: the provider's word that the response failed.

    The SDK raises nothing for it (the caller reads the event); this is what the attempt records. Also
    what a stream's ``error`` event says (``error`` is then that event: its code and message are its own).
    """

    def __init__(self, response: Any, *, error: Any = None) -> None:
        if error is None:
            error = get(response, "error")
        code = as_str(get(error, "code"))
        super().__init__(as_str(get(error, "message")) or "the provider reported that the response failed")
        self.relay_error_type = code or "response_failed"


def _finish_reasons(response: Any) -> list[str]:
    status = as_str(get(response, "status"))
    if status == "incomplete":
        reason = as_str(get(get(response, "incomplete_details"), "reason"))
        return [reason or status]
    return [status] if status else []


def _function_call(item: Any) -> dict[str, Any]:
    return {
        "id": as_str(get(item, "call_id")) or as_str(get(item, "id")),
        "name": as_str(get(item, "name")),
        "arguments": as_str(get(item, "arguments")),
    }


class OpenAIResponsesCodec:
    provider = "openai"
    price_provider = "openai"  # its id in genai-prices (see relay_runtime.cost.providers)
    endpoint: str | None = None  # a compatible endpoint it reaches (see adapters.endpoints)
    operation = "responses"
    spelling = neutral.OPENAI_RESPONSES  # how this API spells the neutral params

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        annotated = decode_common(content, _FIELDS, self.provider, self.operation)
        given = content.get("input")
        if isinstance(given, str):
            annotated.messages = [{"role": "user", "content": given}]
        return annotated

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        return apply_common(content, changes, _FIELDS)

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        text, calls = self.response_content(response)
        return AnnotatedLLMResponse(
            model=as_str(get(response, "model")),
            id=as_str(get(response, "id")),
            finish_reasons=_finish_reasons(response),
            usage=usage_of(get(response, "usage")),
            output_text=text,
            tool_calls=calls,
        )

    def response_content(self, response: Any) -> tuple[str | None, list[dict[str, Any]]]:
        """What ``annotate_response`` reads as ``output_text`` and ``tool_calls``, alone (cheaper)."""
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for item in as_list(get(response, "output")):
            kind = get(item, "type")
            if kind == "message":
                for part in as_list(get(item, "content")):
                    if get(part, "type") == "output_text" and (text := as_str(get(part, "text"))):
                        texts.append(text)
            elif kind == "function_call":
                calls.append(_function_call(item))
            elif kind == "custom_tool_call":  # a custom (freeform) tool: its ``input`` is the call's text
                calls.append({**_function_call(item), "arguments": as_str(get(item, "input"))})
        if not texts and (text := as_str(get(response, "output_text"))):
            texts.append(text)  # duck-typed responses that only carry the convenience field
        return ("".join(texts) if texts else None), calls

    def accumulator(self) -> ResponsesAccumulator:
        return ResponsesAccumulator(self)


class ResponsesAccumulator:
    """Follows the event stream; the final response is the one ``response.completed`` carries.

    ``response.incomplete`` and ``response.failed`` count as terminal too. A
    stream that ends without any of them yields a ``StreamedResponse`` rebuilt
    from the deltas.
    """

    __slots__ = ("calls", "codec", "failure", "id", "model", "reasoning", "terminal", "text")

    def __init__(self, codec: OpenAIResponsesCodec) -> None:
        self.codec = codec
        self.id: str | None = None
        self.model: str | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[str, ToolCallParts] = {}
        self.terminal: Any = None
        # Read by the stream's lifecycle when the stream ends: the attempt then ends failed with it.
        self.failure: ResponseFailed | None = None

    def add(self, chunk: Any) -> ChunkDelta | None:
        kind = get(chunk, "type")
        if kind == "response.output_text.delta":
            piece = as_str(get(chunk, "delta")) or ""
            self.text.append(piece)
            return ChunkDelta(text=piece) if piece else None
        if kind in _REASONING_DELTAS:
            piece = as_str(get(chunk, "delta")) or ""
            self.reasoning.append(piece)
            return ChunkDelta(reasoning=piece) if piece else None
        if kind in _CALL_DELTAS:  # a function's arguments, a custom (freeform) tool's input
            call = self._call(as_str(get(chunk, "item_id")))
            fragment = as_str(get(chunk, "delta"))
            if fragment:
                call.arguments.append(fragment)
            return ChunkDelta(extra_chars=len(fragment) if fragment else 0)
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = get(chunk, "item")
            item_type = get(item, "type")
            if item_type in _CALL_ARGUMENTS:
                call = self._call(as_str(get(item, "id")) or as_str(get(item, "call_id")))
                call.id = as_str(get(item, "call_id")) or call.id
                call.name = as_str(get(item, "name")) or call.name
                final = as_str(get(item, _CALL_ARGUMENTS[item_type]))
                if kind == "response.output_item.done" and final is not None:
                    call.arguments = [final]  # the done item is authoritative over the fragments
            return None
        response = get(chunk, "response")
        if response is None:
            if type(kind) is str and kind.endswith(".delta") and kind not in _UNMETERED_DELTAS:
                # Any other output the model writes piece by piece (a refusal, a custom tool's input,
                # code for a hosted tool) is billed as output: a budget's stream meter counts it.
                other = as_str(get(chunk, "delta"))
                return ChunkDelta(extra_chars=len(other)) if other else None
            if kind == "error" and self.terminal is None:
                # The SDK yields a stream's error event and raises nothing; the stream then ends
                # without a terminal event. The record keeps the provider's code and message.
                self.failure = ResponseFailed(None, error=chunk)
            return None
        if kind in _TERMINAL:
            self.terminal = response
            if kind == "response.failed":
                self.failure = ResponseFailed(response)
        self.id = as_str(get(response, "id")) or self.id
        model = as_str(get(response, "model"))
        if model and model != self.model:
            self.model = model
            return ChunkDelta(model=model)
        return None

    @property
    def terminated(self) -> bool:
        """Whether ``response.completed``, ``response.incomplete`` or ``response.failed`` arrived."""
        return self.terminal is not None

    def _call(self, key: str | None) -> ToolCallParts:
        slot = key or ""
        call = self.calls.get(slot)
        if call is None:
            call = self.calls[slot] = ToolCallParts()
        return call

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        if self.terminal is not None:
            return self.terminal, self.codec.annotate_response(self.terminal)
        partial = StreamedResponse(
            model=self.model,
            id=self.id,
            output_text="".join(self.text),
            reasoning_text="".join(self.reasoning),
            tool_calls=[c.as_dict() for c in self.calls.values()],
        )
        return partial, partial.annotation()
