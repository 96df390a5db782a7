"""Codec for OpenAI chat completions (``client.chat.completions.create``).

Also the codec for every OpenAI-compatible endpoint (OpenRouter, vLLM, ...):
fields those servers add (``reasoning_content``, ``reasoning``) are read when present.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from relay_runtime import neutral
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, TokenUsage

from .common import (
    FieldMap,
    StreamedResponse,
    ToolCallParts,
    apply_common,
    as_int,
    as_list,
    as_str,
    decode_common,
    get,
    openai_usage,
)

_FIELDS = FieldMap.of("messages", None, neutral.OPENAI_CHAT)
_SYSTEM_ROLES = ("system", "developer")


def _leading_system(messages: list[Any] | tuple[Any, ...]) -> Any:
    if messages and get(messages[0], "role") in _SYSTEM_ROLES:
        return get(messages[0], "content")
    return None


def _with_system(messages: list[Any], system: Any) -> list[Any]:
    """``messages`` with its leading system message replaced, added, or (system None) dropped."""
    out = list(messages)
    has_leading = bool(out) and get(out[0], "role") in _SYSTEM_ROLES
    if system is None:
        return out[1:] if has_leading else out
    if has_leading:
        first = out[0]
        out[0] = (
            {**first, "content": system}
            if isinstance(first, Mapping)
            else {
                "role": get(first, "role"),
                "content": system,
            }
        )
    else:
        out.insert(0, {"role": "system", "content": system})
    return out


def usage_of(usage: Any) -> TokenUsage:
    return openai_usage(usage, "prompt", "completion")


def _tool_call(call: Any) -> dict[str, Any]:
    function = get(call, "function")
    if function is None:  # custom tools carry ``custom.input`` instead of a function
        custom = get(call, "custom")
        return {
            "id": as_str(get(call, "id")),
            "name": as_str(get(custom, "name")),
            "arguments": as_str(get(custom, "input")),
        }
    return {
        "id": as_str(get(call, "id")),
        "name": as_str(get(function, "name")),
        "arguments": as_str(get(function, "arguments")),
    }


def _legacy_call(function_call: Any) -> dict[str, Any]:
    """A ``function_call`` of the chat API's function calling before tools (``functions=``): a tool call with
    no id (its result comes back as a ``function`` message naming the function)."""
    return {
        "id": None,
        "name": as_str(get(function_call, "name")),
        "arguments": as_str(get(function_call, "arguments")),
    }


def _content_of(choices: Any) -> tuple[str | None, list[dict[str, Any]]]:
    message = get(choices[0], "message") if choices else None
    calls = [_tool_call(c) for c in as_list(get(message, "tool_calls"))]
    legacy = get(message, "function_call")
    if legacy is not None:
        calls.append(_legacy_call(legacy))
    return as_str(get(message, "content")), calls


def _reasoning(obj: Any) -> str | None:
    return as_str(get(obj, "reasoning_content")) or as_str(get(obj, "reasoning"))


class OpenAIChatCodec:
    provider = "openai"
    price_provider = "openai"  # its id in genai-prices (see relay_runtime.cost.providers)
    endpoint: str | None = None  # a compatible endpoint it reaches (see adapters.endpoints)
    operation = "chat"
    spelling = neutral.OPENAI_CHAT  # how this API spells the neutral params

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        annotated = decode_common(content, _FIELDS, self.provider, self.operation)
        annotated.system = _leading_system(annotated.messages)
        return annotated

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        kwargs = apply_common(content, changes, _FIELDS)
        if "system" in changes:
            kwargs["messages"] = _with_system(list(as_list(kwargs.get("messages"))), changes["system"])
        return kwargs

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        choices = as_list(get(response, "choices"))
        finish = [r for c in choices if (r := as_str(get(c, "finish_reason"))) is not None]
        text, calls = _content_of(choices)
        return AnnotatedLLMResponse(
            model=as_str(get(response, "model")),
            id=as_str(get(response, "id")),
            finish_reasons=finish,
            usage=usage_of(get(response, "usage")),
            output_text=text,
            tool_calls=calls,
        )

    def response_content(self, response: Any) -> tuple[str | None, list[dict[str, Any]]]:
        """What ``annotate_response`` reads as ``output_text`` and ``tool_calls``, alone (cheaper)."""
        return _content_of(as_list(get(response, "choices")))

    def accumulator(self) -> ChatAccumulator:
        return ChatAccumulator()

    def counting_missing_usage(self, on_missing: Callable[[], None]) -> OpenAIChatCodec:
        """This codec, whose streams call ``on_missing()`` when they end without a usage chunk."""
        return _UsageWatchingCodec(on_missing, self)


class _UsageWatchingCodec(OpenAIChatCodec):
    def __init__(self, on_missing: Callable[[], None], named: OpenAIChatCodec) -> None:
        self.__dict__.update(vars(named))  # a codec named for its endpoint keeps its name (adapters.endpoints)
        self.on_missing = on_missing

    def accumulator(self) -> ChatAccumulator:
        acc = ChatAccumulator()
        acc.on_missing_usage = self.on_missing
        return acc


class _ChoiceParts:
    __slots__ = ("finish_reason", "function_call", "reasoning", "refusal", "role", "text", "tool_calls")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.role: str | None = None
        self.finish_reason: str | None = None
        self.tool_calls: dict[int, ToolCallParts] = {}
        self.function_call: ToolCallParts | None = None  # a legacy ``function_call``'s fragments


def _unindexed_slot(calls: dict[int, ToolCallParts], call_id: str | None) -> int:
    """The slot of a tool call fragment that has no ``index`` (some OpenAI-compatible servers send each
    call whole, unindexed): a new call when it names an id other than the last call's, else the last call."""
    if not calls:
        return 0
    last = max(calls)
    if call_id and calls[last].id and call_id != calls[last].id:
        return last + 1
    return last


def _fold(call: ToolCallParts, function: Any) -> int:
    """A fragment's function (a tool call's, or a legacy ``function_call`` itself) folded into ``call``: its name,
    and its piece of the arguments; the characters it carried."""
    carried = 0
    name = as_str(get(function, "name"))
    if name:
        call.name = name
        carried += len(name)
    arguments = as_str(get(function, "arguments"))
    if arguments:
        call.arguments.append(arguments)
        carried += len(arguments)
    return carried


class ChatAccumulator:
    """Folds ``ChatCompletionChunk``s into a ``ChatCompletion``.

    Usage arrives only when the caller asked for it
    (``stream_options={"include_usage": True}``), on the last chunk.
    """

    __slots__ = ("choices", "created", "fingerprint", "id", "model", "on_missing_usage", "service_tier", "usage")

    def __init__(self) -> None:
        self.on_missing_usage: Callable[[], None] | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.fingerprint: str | None = None
        self.service_tier: str | None = None
        self.usage: Any = None
        self.choices: dict[int, _ChoiceParts] = {}

    def add(self, chunk: Any) -> ChunkDelta | None:
        if not self.id:  # not only None: Azure's opening prompt-filter chunk has an empty id
            self.id = as_str(get(chunk, "id"))
            self.created = as_int(get(chunk, "created"))
        new_model = None
        model = as_str(get(chunk, "model"))
        if model and model != self.model:
            self.model = new_model = model
        self.fingerprint = as_str(get(chunk, "system_fingerprint")) or self.fingerprint
        self.service_tier = as_str(get(chunk, "service_tier")) or self.service_tier
        usage = get(chunk, "usage")
        if usage is not None:
            self.usage = usage
        text = reasoning = ""
        said = False
        extra = 0  # output beyond the first choice's text and reasoning: billed all the same
        for choice in as_list(get(chunk, "choices")):
            index = as_int(get(choice, "index")) or 0
            parts = self.choices.get(index)
            if parts is None:
                parts = self.choices[index] = _ChoiceParts()
            reason = as_str(get(choice, "finish_reason"))
            if reason is not None:
                parts.finish_reason = reason
            delta = get(choice, "delta")
            if delta is None:
                continue
            parts.role = as_str(get(delta, "role")) or parts.role
            piece = as_str(get(delta, "content"))
            if piece:
                parts.text.append(piece)
                if index == 0:
                    text += piece
                else:
                    extra += len(piece)
            thought = _reasoning(delta)
            if thought:
                parts.reasoning.append(thought)
                if index == 0:
                    reasoning += thought
                else:
                    extra += len(thought)
            refusal = as_str(get(delta, "refusal"))
            if refusal:
                parts.refusal.append(refusal)
                extra += len(refusal)
            fragments = as_list(get(delta, "tool_calls"))
            if not (piece or thought or fragments):
                # Asked only of a chunk that says nothing else: a legacy ``function_call``'s fragments come alone.
                legacy = get(delta, "function_call")
                if legacy is not None:
                    said = True
                    if parts.function_call is None:
                        parts.function_call = ToolCallParts()
                    extra += _fold(parts.function_call, legacy)
            for fragment in fragments:
                said = True
                slot = as_int(get(fragment, "index"))
                if slot is None:
                    slot = _unindexed_slot(parts.tool_calls, as_str(get(fragment, "id")))
                call = parts.tool_calls.get(slot)
                if call is None:
                    call = parts.tool_calls[slot] = ToolCallParts()
                call.id = as_str(get(fragment, "id")) or call.id
                extra += _fold(call, get(fragment, "function"))
        if text or reasoning or new_model or said or extra:
            return ChunkDelta(text=text, reasoning=reasoning, model=new_model, extra_chars=extra)
        return None

    @property
    def terminated(self) -> bool:
        """Whether some choice got its ``finish_reason``: without one the stream was cut short."""
        return any(parts.finish_reason is not None for parts in self.choices.values())

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        if self.usage is None and self.on_missing_usage is not None:
            self.on_missing_usage()
        first = self.choices.get(0) or (next(iter(self.choices.values())) if self.choices else None)
        calls = [c.as_dict() for _, c in sorted(first.tool_calls.items())] if first else []
        if first is not None and first.function_call is not None:
            calls.append(first.function_call.as_dict())
        annotation = AnnotatedLLMResponse(
            model=self.model,
            id=self.id,
            finish_reasons=[p.finish_reason for _, p in sorted(self.choices.items()) if p.finish_reason],
            usage=usage_of(self.usage),
            output_text="".join(first.text) if first and first.text else None,
            tool_calls=calls,
        )
        try:
            return self._completion(), annotation
        except ImportError:  # an OpenAI-compatible client without the openai package
            return StreamedResponse(
                model=self.model,
                id=self.id,
                output_text=annotation.output_text or "",
                reasoning_text="".join(first.reasoning) if first else "",
                tool_calls=calls,
                finish_reasons=annotation.finish_reasons,
                usage=annotation.usage,
            ), annotation

    def _completion(self) -> Any:
        """The ``ChatCompletion`` the same call without ``stream`` would have returned."""
        from openai.types.chat import ChatCompletion, ChatCompletionMessage
        from openai.types.chat.chat_completion import Choice
        from openai.types.chat.chat_completion_message_function_tool_call import (
            ChatCompletionMessageFunctionToolCall,
            Function,
        )

        # model_construct: a stream from a lenient server (missing ids, odd finish
        # reasons) still yields a response instead of a validation error.
        choices = []
        for index, parts in sorted(self.choices.items()):
            calls = [
                ChatCompletionMessageFunctionToolCall.model_construct(
                    id=c.id,
                    type="function",
                    function=Function.model_construct(name=c.name, arguments="".join(c.arguments)),
                )
                for _, c in sorted(parts.tool_calls.items())
            ]
            # reasoning_content is not an OpenAI field but what OpenAI-compatible servers
            # call it; the SDK models keep unknown fields as extras.
            extra: dict[str, Any] = {"reasoning_content": "".join(parts.reasoning)} if parts.reasoning else {}
            legacy = parts.function_call
            if legacy is not None:
                from openai.types.chat.chat_completion_message import FunctionCall

                extra["function_call"] = FunctionCall.model_construct(
                    name=legacy.name, arguments="".join(legacy.arguments)
                )
            build_message: Any = ChatCompletionMessage.model_construct  # extras are keyword-only
            message = build_message(
                role="assistant",
                content="".join(parts.text) if parts.text else None,
                refusal="".join(parts.refusal) if parts.refusal else None,
                tool_calls=calls or None,
                **extra,
            )
            choices.append(Choice.model_construct(index=index, message=message, finish_reason=parts.finish_reason))
        return ChatCompletion.model_construct(
            id=self.id,
            object="chat.completion",
            created=self.created or 0,
            model=self.model,
            choices=choices,
            usage=self.usage,
            system_fingerprint=self.fingerprint,
            service_tier=self.service_tier,
        )
