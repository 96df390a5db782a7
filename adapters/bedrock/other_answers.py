"""The answers of ``invoke_model`` families with no body codec of their own, read by the shape of the body.

Without these the attempt recorded no answer for them, only the token counts of Bedrock's headers:

- Amazon Nova answers as Converse does (``output.message.content``, ``stopReason``, ``usage``); in an
  invoke body its cache counts are ``cacheReadInputTokenCount`` / ``cacheWriteInputTokenCount``;
- Mistral: ``outputs[].text`` and ``stop_reason``;
- Amazon Titan text: ``results[].outputText``, ``completionReason``, and its own token counts;
- Cohere Command R: ``text`` and ``finish_reason`` (Command: ``generations[].text``);
- AI21 Jamba and the open-weight OpenAI models: OpenAI's ``choices[].message`` and ``usage``.

A body of none of these shapes gives None: the headers' counts stand, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from relay_runtime.types import AnnotatedLLMResponse, TokenUsage

from ..common import as_int, as_list, as_str, get
from .codec import ConverseCodec, usage_of

_CONVERSE = ConverseCodec(False)


def _nova(body: Mapping[str, Any]) -> AnnotatedLLMResponse:
    annotation = _CONVERSE.annotate_response(body)
    usage = get(body, "usage")
    read, write = as_int(get(usage, "cacheReadInputTokenCount")), as_int(get(usage, "cacheWriteInputTokenCount"))
    if read is not None or write is not None:
        # The invoke body's names for Converse's ``cacheReadInputTokens`` / ``cacheWriteInputTokens``.
        annotation.usage = usage_of({**usage, "cacheReadInputTokens": read, "cacheWriteInputTokens": write})
    return annotation


def _texts(items: Any, key: str) -> tuple[str | None, list[str]]:
    """The texts under ``key`` of a list of choices, joined, and their finish reasons."""
    texts, reasons = [], []
    for item in as_list(items):
        text = as_str(get(item, key))
        if text:
            texts.append(text)
        reason = as_str(get(item, "stop_reason")) or as_str(get(item, "finish_reason"))
        if reason:
            reasons.append(reason)
    return ("".join(texts) if texts else None), reasons


def _mistral(body: Mapping[str, Any]) -> AnnotatedLLMResponse:
    text, reasons = _texts(body.get("outputs"), "text")
    return AnnotatedLLMResponse(output_text=text, finish_reasons=reasons)


def _titan_text(body: Mapping[str, Any]) -> AnnotatedLLMResponse:
    results = as_list(body.get("results"))
    text, _ = _texts(results, "outputText")
    reasons = [r for item in results if (r := as_str(get(item, "completionReason")))]
    counts = [c for item in results if (c := as_int(get(item, "tokenCount"))) is not None]
    usage = TokenUsage(
        input_tokens=as_int(body.get("inputTextTokenCount")), output_tokens=sum(counts) if counts else None
    )
    return AnnotatedLLMResponse(output_text=text, finish_reasons=reasons, usage=usage)


def _cohere(body: Mapping[str, Any]) -> AnnotatedLLMResponse:
    if "generations" in body:
        text, reasons = _texts(body.get("generations"), "text")
    else:
        text = as_str(body.get("text"))
        reason = as_str(body.get("finish_reason"))
        reasons = [reason] if reason else []
    billed = get(get(body, "meta"), "billed_units")
    usage = TokenUsage(
        input_tokens=as_int(get(billed, "input_tokens")), output_tokens=as_int(get(billed, "output_tokens"))
    )
    return AnnotatedLLMResponse(output_text=text, finish_reasons=reasons, usage=usage)


def _chat_choices(body: Mapping[str, Any]) -> AnnotatedLLMResponse:
    choices = as_list(body.get("choices"))
    text, _ = _texts([get(choice, "message") for choice in choices], "content")
    reasons = [r for choice in choices if (r := as_str(get(choice, "finish_reason")))]
    usage = get(body, "usage")
    return AnnotatedLLMResponse(
        model=as_str(body.get("model")),
        output_text=text,
        finish_reasons=reasons,
        usage=TokenUsage(
            input_tokens=as_int(get(usage, "prompt_tokens")), output_tokens=as_int(get(usage, "completion_tokens"))
        ),
    )


# The key that tells each shape, and its reader; the first a body holds decides.
_SHAPES: tuple[tuple[str, Callable[[Mapping[str, Any]], AnnotatedLLMResponse]], ...] = (
    ("output", _nova),
    ("outputs", _mistral),
    ("results", _titan_text),
    ("choices", _chat_choices),
    ("generations", _cohere),
    ("text", _cohere),
)


def answer_of(body: Mapping[str, Any]) -> AnnotatedLLMResponse | None:
    """The answer a body of one of the shapes above holds; None for another shape."""
    for key, read in _SHAPES:
        if key in body:
            return read(body)
    return None


def _first(items: Any) -> Any:
    found = as_list(items)
    return found[0] if found else None


def piece_of(event: Mapping[str, Any]) -> tuple[str, str | None]:
    """A stream event of one of these families: the text it adds, and why the answer stopped when it says."""
    if "contentBlockDelta" in event or "messageStop" in event:  # Nova, as ConverseStream
        text = as_str(get(get(event.get("contentBlockDelta"), "delta"), "text"))
        return text or "", as_str(get(event.get("messageStop"), "stopReason"))
    if "outputs" in event:  # Mistral
        first = _first(event.get("outputs"))
        return as_str(get(first, "text")) or "", as_str(get(first, "stop_reason"))
    if "outputText" in event:  # Titan text
        return as_str(event.get("outputText")) or "", as_str(event.get("completionReason"))
    if "choices" in event:  # OpenAI-style chunks
        first = _first(event.get("choices"))
        return as_str(get(get(first, "delta"), "content")) or "", as_str(get(first, "finish_reason"))
    if "text" in event or "finish_reason" in event:  # Cohere Command R
        return as_str(event.get("text")) or "", as_str(event.get("finish_reason"))
    return "", None
