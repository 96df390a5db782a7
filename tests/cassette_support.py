"""What the cassette tests share: the three APIs' calls and replies, offline clients, event shapes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from relay_runtime import Recorder
from relay_runtime.adapters import testing as t

_ID = re.compile(r"\b[0-9a-f]{32}\b")
_VOLATILE_FIELDS = ("timestamp", "start_timestamp")


@dataclass(frozen=True)
class Api:
    name: str
    sdk: str  # "openai" | "anthropic"
    api_mode: str | None
    kwargs: dict[str, Any]
    reply: Callable[[str], t.Reply]
    stream_reply: Callable[[list[str]], t.Reply]

    def scripted(self, *replies: t.Reply) -> t.Scripted:
        return t.scripted_openai(*replies) if self.sdk == "openai" else t.scripted_anthropic(*replies)


APIS = {
    "chat": Api(
        "chat",
        "openai",
        None,
        {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.2},
        lambda text: t.json_reply(t.chat_completion_body(text)),
        lambda pieces: t.sse_reply(t.openai_chat_sse(t.chat_chunks(pieces, usage=t.chat_usage()))),
    ),
    "responses": Api(
        "responses",
        "openai",
        "responses",
        {"model": "gpt-test", "input": "hello", "instructions": "be brief"},
        lambda text: t.json_reply(t.responses_body(text)),
        lambda pieces: t.sse_reply(t.typed_sse(t.responses_events(pieces))),
    ),
    "anthropic": Api(
        "anthropic",
        "anthropic",
        None,
        {
            "model": "claude-test",
            "max_tokens": 64,
            "system": "be brief",
            "messages": [{"role": "user", "content": "hello"}],
        },
        lambda text: t.json_reply(t.anthropic_message_body(text)),
        lambda pieces: t.sse_reply(t.typed_sse(t.anthropic_events(pieces))),
    ),
}


class Offline:
    """Real SDK clients whose transport fails any request it is given (and counts them)."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    def _refuse(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        raise AssertionError(f"a replayed call reached the network: {request.method} {request.url}")

    def clients(self, sdk: str) -> tuple[Any, Any]:
        transport = httpx2.MockTransport(self._refuse)
        if sdk == "openai":
            import openai

            common: dict[str, Any] = {"api_key": "sk-offline-key-0000", "base_url": t.BASE_OPENAI}
            return (
                openai.OpenAI(**common, http_client=httpx2.Client(transport=transport)),
                openai.AsyncOpenAI(**common, http_client=httpx2.AsyncClient(transport=transport)),
            )
        import anthropic

        common = {"api_key": "sk-offline-key-0000", "base_url": t.BASE_ANTHROPIC, "open_telemetry": False}
        return (
            anthropic.Anthropic(**common, http_client=httpx2.Client(transport=transport)),
            anthropic.AsyncAnthropic(**common, http_client=httpx2.AsyncClient(transport=transport)),
        )


def shape(events: Recorder) -> list[dict[str, Any]]:
    """The events as JSON, with times dropped and every id replaced by its order of first appearance."""
    text = json.dumps([e.to_dict() for e in events], default=repr, sort_keys=True)
    seen: dict[str, str] = {}
    text = _ID.sub(lambda m: seen.setdefault(m.group(0), f"id{len(seen)}"), text)
    out = json.loads(text)
    for event in out:
        for name in _VOLATILE_FIELDS:
            event.pop(name, None)
        response = event.get("annotated_response")
        if isinstance(response, dict) and response.get("time_to_first_chunk_ns") is not None:
            response["time_to_first_chunk_ns"] = "set"
    return out


def dump(value: Any) -> Any:
    """An SDK object (or a list of chunks) as plain data, for comparing a replay with the live call."""
    if isinstance(value, list):
        return [dump(v) for v in value]
    return value.model_dump(mode="json")


# Edits of a recorded HTTP try, as a hand-edited or truncated cassette has them (the damage tests).
Edit = Callable[[dict[str, Any]], None]


def set_field(field: str, value: Any) -> Edit:
    return lambda exchange: exchange.__setitem__(field, value)


def drop_body_then(field: str | None = None, value: Any = None) -> Edit:
    def edit(exchange: dict[str, Any]) -> None:
        exchange.pop("body", None)
        if field is not None:
            exchange[field] = value

    return edit
