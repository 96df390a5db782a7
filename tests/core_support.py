"""A small provider codec and helpers shared by the core tests (``tests/test_core_*.py``).

The "provider" here is plain dicts: a request is SDK-style kwargs
(``model``, ``messages``, anything else is a param), a response is
``{"id", "model", "text", "usage": {"in", "out"}}`` and a stream chunk is
``{"text": ..., "model": ...}``. That is enough to exercise every path the
core takes through a codec without any SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay_runtime import (
    AnnotatedLLMRequest,
    AnnotatedLLMResponse,
    ChunkDelta,
    Event,
    LLMRequest,
    Relay,
    TokenUsage,
)
from relay_runtime.types import REMOVED

_TOP = ("model", "messages", "stream")


class DictCodec:
    provider = "dictchat"
    operation = "chat"

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        return AnnotatedLLMRequest(
            model=content.get("model"),
            messages=list(content.get("messages", [])),
            params={k: v for k, v in content.items() if k not in _TOP},
            stream=bool(content.get("stream", False)),
            provider=self.provider,
            operation=self.operation,
        )

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        out = dict(content)
        for key, value in changes.items():
            if key == "params":
                for pk, pv in value.items():
                    if pv is REMOVED:
                        out.pop(pk, None)
                    else:
                        out[pk] = pv
            elif key in ("model", "messages"):
                out[key] = value
        return out

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        usage = response.get("usage", {})
        return AnnotatedLLMResponse(
            model=response.get("model"),
            id=response.get("id"),
            finish_reasons=["stop"],
            usage=TokenUsage(input_tokens=usage.get("in"), output_tokens=usage.get("out")),
            output_text=response.get("text"),
        )

    def accumulator(self) -> DictAccumulator:
        return DictAccumulator()


class DictAccumulator:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.model: str | None = None

    def add(self, chunk: Any) -> ChunkDelta | None:
        text = chunk.get("text", "")
        self.model = chunk.get("model", self.model)
        self.parts.append(text)
        return ChunkDelta(text=text, model=self.model) if text else None

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        text = "".join(self.parts)
        response = {"model": self.model, "text": text}
        usage = TokenUsage(output_tokens=len(self.parts))
        return response, AnnotatedLLMResponse(model=self.model, output_text=text, usage=usage)


def request(**content: Any) -> LLMRequest:
    body = {"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}
    body.update(content)
    return LLMRequest({"content-type": "application/json"}, body)


def response(text: str = "hello", model: str = "m-1-2024") -> dict[str, Any]:
    return {"id": "resp-1", "model": model, "text": text, "usage": {"in": 3, "out": 5}}


def chunks(n: int, model: str = "m-1-2024") -> list[dict[str, Any]]:
    return [{"text": f"t{i}", "model": model} for i in range(n)]


def balanced(events: list[Event]) -> bool:
    """Every scope started is ended exactly once, and nothing ends that never started."""
    starts = [e.uuid for e in events if e.kind == "scope_start"]
    ends = [e.uuid for e in events if e.kind == "scope_end"]
    return len(set(starts)) == len(starts) and sorted(starts) == sorted(ends)


def attempts(relay_events: list[Event], kind: str = "scope_end") -> list[Event]:
    return [e for e in relay_events if e.kind == kind and e.scope_type == "llm"]


def new_relay() -> tuple[Relay, Any]:
    """A relay with a recorder that sees every event, chunk marks included."""
    from relay_runtime import Recorder

    relay = Relay("test")
    recorder = Recorder()
    relay.subscribers.register(recorder, name="recorder", chunks=True)
    return relay, recorder
