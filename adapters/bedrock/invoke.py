"""Codecs for ``invoke_model`` / ``invoke_model_with_response_stream``: a model's own JSON body.

The body's shape is the model family's (``modelId`` says which): Anthropic messages
(``anthropic.*``), Anthropic's legacy text completions (Claude 2 and Instant given a ``prompt``: see
``anthropic_text``), Meta Llama prompts (``meta.*``), and the embeddings of Amazon Titan
(``amazon.titan-embed*``) and Cohere (``cohere.embed*``, operation ``embeddings``). Other
families' prompts are read by the names their bodies use, their answers by the shape of the
body (``other_answers``: Nova, Mistral, Titan text, Cohere Command, OpenAI-style choices), with
the response headers' token counts where the body has none.

A response body is a stream botocore hands over unread: it is read here, annotated,
and put back as a fresh ``StreamingBody`` of the same bytes, so the caller reads it as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from relay_runtime.neutral import NEUTRAL_PARAMS, UnsupportedParamError
from relay_runtime.types import REMOVED, AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, TokenUsage

from ..anthropic_messages import AnthropicMessagesCodec, MessagesAccumulator
from ..common import as_int, as_list, as_str, get
from . import anthropic_text, other_answers
from .anthropic_text import TEXT_COMPLETION
from .codec import PROVIDER

ANTHROPIC, META, TITAN_EMBED, COHERE_EMBED, OTHER = "anthropic", "meta", "titan-embed", "cohere-embed", "other"
# neutral name -> the body key, per family whose body this module reads
PARAMS: dict[str, dict[str, str]] = {
    ANTHROPIC: {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                "stop": "stop_sequences"},
    TEXT_COMPLETION: anthropic_text.PARAMS,
    META: {"max_tokens": "max_gen_len", "temperature": "temperature", "top_p": "top_p"},
    TITAN_EMBED: {}, COHERE_EMBED: {}, OTHER: {},
}  # fmt: skip
# The body keys holding what the caller sends the model (its content): the neutral view's messages (and
# system), never provider params, which an exporter may show whatever its content capture says.
_INPUTS: dict[str, tuple[str, ...]] = {
    TITAN_EMBED: ("inputText", "inputImage"),
    COHERE_EMBED: ("texts", "images", "inputs"),
    # Other families' prompts, by the names their bodies use (Nova, Titan text, Mistral, Cohere, AI21, ...), in the
    # order they were said: Cohere's chat history before its new message.
    OTHER: ("messages", "prompt", "inputText", "chat_history", "message", "texts", "input", "inputs"),
}
# Other families' system prompts: Nova's, Mistral's ``system``, Cohere's ``preamble``.
_SYSTEMS = ("system", "preamble")
_STRUCTURAL = {
    ANTHROPIC: {"messages", "system", "tools", "tool_choice"},
    TEXT_COMPLETION: set(anthropic_text.STRUCTURAL),
    META: {"prompt"},
    TITAN_EMBED: set(_INPUTS[TITAN_EMBED]),
    COHERE_EMBED: set(_INPUTS[COHERE_EMBED]),
    OTHER: {*_INPUTS[OTHER], *_SYSTEMS},
}
INPUT_TOKENS_HEADER = "x-amzn-bedrock-input-token-count"
OUTPUT_TOKENS_HEADER = "x-amzn-bedrock-output-token-count"
_ANTHROPIC = AnthropicMessagesCodec()
_ANTHROPIC.provider = PROVIDER  # its usage counted as Bedrock's: the whole prompt as the input


# The key of a text family's answer, whole or a stream chunk's piece; its chunk with a ``stop_reason`` is the last.
_ANSWERS = {META: "generation", TEXT_COMPLETION: anthropic_text.ANSWER}
_FAMILIES = {"anthropic.": ANTHROPIC, "meta.": META, "amazon.titan-embed": TITAN_EMBED, "cohere.embed": COHERE_EMBED}


def family(model: Any) -> str:
    """The body shape of ``modelId`` (an inference profile's region prefix, ``us.`` / ``global.``, skipped)."""
    if not isinstance(model, str):
        return OTHER
    name = model.rsplit("/", 1)[-1]
    for prefix in _FAMILIES:
        at = name.find(prefix)
        if at == 0 or (at > 0 and name[at - 1] == "."):
            return _FAMILIES[prefix]
    return OTHER


def body_of(value: Any) -> dict[str, Any] | None:
    """The JSON object a request or response body holds, or None when it holds none."""
    if isinstance(value, bytes | bytearray | str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return dict(value) if isinstance(value, Mapping) else None


def _header_usage(response: Any) -> TokenUsage:
    headers = get(get(response, "ResponseMetadata"), "HTTPHeaders")

    def count(name: str) -> int | None:
        value = get(headers, name)
        return int(value) if isinstance(value, str) and value.isdigit() else None

    return TokenUsage(input_tokens=count(INPUT_TOKENS_HEADER), output_tokens=count(OUTPUT_TOKENS_HEADER))


def _metrics_usage(metrics: Any) -> TokenUsage:
    return TokenUsage(input_tokens=as_int(get(metrics, "inputTokenCount")),
                      output_tokens=as_int(get(metrics, "outputTokenCount")))  # fmt: skip


RESPONSE_BYTES = "_relay_bytes"  # on the StreamingBody put back in a response: the bytes it replays


class InvokeModelCodec:
    """One per (model family, streaming): the family is the request's, read from its ``modelId``."""

    provider = PROVIDER

    def __init__(self, kind: str, streaming: bool) -> None:
        self.kind = kind
        self.streaming = streaming
        self.operation = "embeddings" if kind in (TITAN_EMBED, COHERE_EMBED) else "chat"

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        model = content.get("modelId")
        kind = self.kind
        body = body_of(content.get("body")) or {}
        names = PARAMS[kind]
        by_body = {key: neutral for neutral, key in names.items()}
        params = {by_body[k]: v for k, v in body.items() if k in by_body}
        structural = _STRUCTURAL.get(kind, set())
        others = {k: v for k, v in content.items() if k not in ("modelId", "body")}
        others.update((k, v) for k, v in body.items() if k not in by_body and k not in structural)
        request = AnnotatedLLMRequest(
            model=as_str(model), params=params, provider_params=others, stream=self.streaming,
            provider=PROVIDER, operation=self.operation,
        )  # fmt: skip
        if kind == ANTHROPIC:
            request.messages = list(as_list(body.get("messages")))
            request.system = body.get("system")
            tools = body.get("tools")
            request.tools = list(tools) if isinstance(tools, list) else None
            request.tool_choice = body.get("tool_choice")
        elif kind == TEXT_COMPLETION:
            request.system, request.messages = anthropic_text.conversation(body.get("prompt"))
        elif kind == META and isinstance(body.get("prompt"), str):
            request.messages = [{"role": "user", "content": body["prompt"]}]
        elif kind in _INPUTS:
            request.messages = _inputs_of(body, _INPUTS[kind])
            key = _system_key(body) if kind == OTHER else None
            if key is not None:
                request.system = body[key]
        return request

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(content)
        kind = self.kind
        body = body_of(kwargs.get("body"))
        if body is None:
            raise ValueError(f"invoke_model body of {kwargs.get('modelId')!r} is no JSON object: it cannot be edited")
        names = PARAMS[kind]
        for name, value in changes.items():
            if name == "model":
                if not (anthropic_text.takes_text(value) if kind == TEXT_COMPLETION else family(value) == kind):
                    raise ValueError(f"model {value!r} takes another body than {kwargs.get('modelId')!r} ({kind})")
                _put(kwargs, "modelId", value)
            elif name == "params":
                for key in value:
                    if key not in NEUTRAL_PARAMS or key not in names:
                        raise UnsupportedParamError(key, f"Bedrock invoke_model ({kind})", list(names))
                for key, item in value.items():
                    _put(body, names[key], [item] if key == "stop" and isinstance(item, str) else item)
            elif name == "provider_params":
                for key, item in value.items():
                    if key in ("modelId", "body") or key in _STRUCTURAL.get(kind, ()):
                        raise ValueError(f"provider_params key {key!r} is held by the annotated request's own fields")
                    _put(kwargs if key in content else body, key, item)
            elif name in ("messages", "system") and kind == TEXT_COMPLETION:
                pass  # both are the one prompt: written below, together
            elif name == "messages" and kind == ANTHROPIC:
                body["messages"] = list(value or [])
            elif name == "messages" and kind == TITAN_EMBED and _present(body, kind) == ["inputText"]:
                if len(value or []) != 1 or not isinstance(value[0], str):
                    raise ValueError("a Titan embeddings body takes one inputText: messages must be one string")
                body["inputText"] = value[0]
            elif name == "messages" and kind == COHERE_EMBED and _present(body, kind) == ["texts"]:
                if not all(isinstance(item, str) for item in value or []):
                    raise ValueError("a Cohere embeddings body takes texts: messages must be strings")
                body["texts"] = list(value or [])
            elif name == "messages" and kind == META:
                last = value[-1] if value else None
                if not isinstance(get(last, "content"), str):
                    raise ValueError("a Meta prompt is one string: the last message's content must be a string")
                body["prompt"] = get(last, "content")
            elif name in ("system", "tools", "tool_choice") and kind == ANTHROPIC:
                _put(body, name, value)
            elif name == "system" and kind == OTHER and (key := _system_key(body)) is not None:
                _put(body, key, value)  # under the name the body gave it (Cohere's preamble)
            elif name != "stream":
                raise ValueError(f"{name!r} cannot change in an invoke_model body of the {kind} family")
        if kind == TEXT_COMPLETION and ("messages" in changes or "system" in changes):
            body["prompt"] = anthropic_text.edited(body.get("prompt"), changes)
        kwargs["body"] = json.dumps(body)
        return kwargs

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        """``response`` as ``managed_invoke`` hands it over: its ``body`` read, and put back replayable."""
        body = body_of(get(get(response, "body"), RESPONSE_BYTES)) or {}
        kind = self.kind
        annotation = AnnotatedLLMResponse(id=as_str(get(get(response, "ResponseMetadata"), "RequestId")))
        if kind == ANTHROPIC:
            annotation = _ANTHROPIC.annotate_response(body)
        elif kind in _ANSWERS:
            reason = as_str(body.get("stop_reason"))
            annotation.output_text = as_str(body.get(_ANSWERS[kind]))
            annotation.finish_reasons = [reason] if reason else []
            # Meta's body counts its tokens; a text completion's does not (Bedrock's headers do).
            annotation.usage = TokenUsage(input_tokens=as_int(body.get("prompt_token_count")),
                                          output_tokens=as_int(body.get("generation_token_count")))  # fmt: skip
        elif kind == TITAN_EMBED:
            annotation.usage = TokenUsage(input_tokens=as_int(body.get("inputTextTokenCount")))
            vector = body.get("embedding")
            annotation.embedding_dimensions = len(vector) if isinstance(vector, list) else None
        elif kind == COHERE_EMBED:
            annotation.embedding_dimensions = _cohere_dimensions(body.get("embeddings"))
        elif kind == OTHER and (answer := other_answers.answer_of(body)) is not None:
            answer.id = annotation.id
            annotation = answer
        if annotation.usage.input_tokens is None:
            annotation.usage = _header_usage(response)
        return annotation

    def accumulator(self) -> InvokeStreamAccumulator:
        return InvokeStreamAccumulator(self.kind)


def _system_key(body: Mapping[str, Any]) -> str | None:
    return next((key for key in _SYSTEMS if body.get(key) is not None), None)


def _present(body: Mapping[str, Any], kind: str) -> list[str]:
    return [key for key in _INPUTS[kind] if body.get(key) is not None]


def _inputs_of(body: Mapping[str, Any], keys: tuple[str, ...]) -> list[Any]:
    """A body's inputs as messages: each list's items, each other value as itself."""
    messages: list[Any] = []
    for key in keys:
        value = body.get(key)
        if isinstance(value, list):
            messages.extend(value)
        elif value is not None:
            messages.append(value)
    return messages


def _cohere_dimensions(embeddings: Any) -> int | None:
    """The first vector's length; ``embeddings`` is a list of vectors, or a dict of them by type."""
    if isinstance(embeddings, dict):
        embeddings = next(iter(embeddings.values()), None)
    first = embeddings[0] if isinstance(embeddings, list) and embeddings else None
    return len(first) if isinstance(first, list) else None


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value is None or value is REMOVED:
        target.pop(key, None)
    else:
        target[key] = value


class InvokeStreamAccumulator:
    """``invoke_model_with_response_stream`` chunks (``{"chunk": {"bytes": ...}}``), each a JSON event of the
    model family's own stream: Anthropic's message events (ended by ``message_stop``), Meta's generations
    and Anthropic's text completions (each ended by the chunk with a ``stop_reason``), and the other
    families' events read by their shape (ended by the chunk with Bedrock's invocation metrics)."""

    __slots__ = ("family", "messages", "metrics", "parts", "reason", "terminated")

    def __init__(self, kind: str) -> None:
        self.family = kind
        self.messages = MessagesAccumulator(_ANTHROPIC)
        self.parts: list[str] = []
        self.reason: str | None = None
        self.metrics: Any = None
        self.terminated = False

    def add(self, chunk: Any) -> ChunkDelta | None:
        event = body_of(get(get(chunk, "chunk"), "bytes"))
        if event is None:
            return None
        metrics = event.get("amazon-bedrock-invocationMetrics")
        if metrics is not None:
            self.metrics = metrics
        if self.family == ANTHROPIC:
            delta = self.messages.add(event)
            self.terminated = self.messages.terminated
            return delta
        if self.family in _ANSWERS:
            text = as_str(event.get(_ANSWERS[self.family])) or ""
            self.parts.append(text)
            reason = as_str(event.get("stop_reason"))
            if reason:
                self.reason = reason
                self.terminated = True
            return ChunkDelta(text=text) if text else None
        # Another family's event, read by its shape (``other_answers``); Bedrock's metrics come with the last chunk.
        self.terminated = self.terminated or metrics is not None
        text, reason = other_answers.piece_of(event)
        if reason:
            self.reason = reason
        if not text:
            return None
        self.parts.append(text)
        return ChunkDelta(text=text)

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        if self.family == ANTHROPIC:
            message, annotation = self.messages.finish()
        else:
            text = "".join(self.parts)
            message = {_ANSWERS.get(self.family, "generation"): text, "stop_reason": self.reason}
            annotation = AnnotatedLLMResponse(finish_reasons=[self.reason] if self.reason else [],
                                              output_text=text or None)  # fmt: skip
        if annotation.usage.input_tokens is None and self.metrics is not None:
            annotation.usage = _metrics_usage(self.metrics)
        return message, annotation


CODECS: dict[tuple[str, bool], InvokeModelCodec] = {
    (kind, streaming): InvokeModelCodec(kind, streaming)
    for kind in (ANTHROPIC, TEXT_COMPLETION, META, TITAN_EMBED, COHERE_EMBED, OTHER)
    for streaming in (False, True)
}


def codec_for(params: Mapping[str, Any], streaming: bool) -> InvokeModelCodec:
    model = params.get("modelId")
    kind = family(model)
    # Claude 2 and Instant take either Anthropic body: only theirs is read here to tell which.
    if kind == ANTHROPIC and anthropic_text.takes_text(model):
        kind = TEXT_COMPLETION if anthropic_text.is_text_body(body_of(params.get("body"))) else ANTHROPIC
    return CODECS[kind, streaming]


def with_body_read(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with a body given as a file (boto3 takes bytes or a seekable file) read into its bytes.

    Unread, the body is no request to read: the record would hold no prompt, and a cassette would match
    every such call to the first one recorded, replaying its answer to another prompt. botocore sends the
    bytes as it would have sent the file, from where the file stood.
    """
    body = params.get("body")
    if body is None or isinstance(body, bytes | bytearray | str) or not callable(getattr(body, "read", None)):
        return params
    return {**params, "body": body.read()}


def replayable(response: Any) -> Any:
    """``response`` with its unread ``body`` read now and put back as a fresh ``StreamingBody`` of the bytes."""
    from io import BytesIO

    from botocore.response import StreamingBody  # type: ignore[import-untyped, unused-ignore]

    body = response.get("body") if isinstance(response, dict) else None
    if body is None or not hasattr(body, "read"):
        return response
    data = body.read()
    fresh = StreamingBody(BytesIO(data), len(data))
    setattr(fresh, RESPONSE_BYTES, data)
    response["body"] = fresh
    return response
