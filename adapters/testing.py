"""Real SDK clients over ``httpx2.MockTransport``, answering from a script.

A ``Script`` is a queue of replies; each HTTP request the SDK sends takes the
next one (and is recorded, so tests can see the retries the SDK made):

    script = Script([error(500), json_reply(chat_completion_body("hi"))])
    client = openai_client(script)          # the SDK retries the 500 by itself
    client.chat.completions.create(model="m", messages=[])
    assert len(script.requests) == 2

Error replies carry ``retry-after-ms: 1`` so the SDKs' own retry back-off is ~0.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

BASE_OPENAI = "http://openai.test/v1"
BASE_ANTHROPIC = "http://anthropic.test"
TEST_KEY = "sk-test-not-a-secret"


# -- replies ---------------------------------------------------------------------------


class _SSEBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """SSE frames, then optionally an exception raised where the next bytes would be."""

    def __init__(self, frames: Sequence[bytes], fail_with: BaseException | None) -> None:
        self.frames = frames
        self.fail_with = fail_with

    def __iter__(self) -> Iterator[bytes]:
        yield from self.frames
        if self.fail_with is not None:
            raise self.fail_with

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for frame in self.frames:
            yield frame
        if self.fail_with is not None:
            raise self.fail_with


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able body
    frames: Sequence[bytes] | None = None  # SSE frames instead of a JSON body
    fail_with: BaseException | None = None  # raised by the SSE body after its frames
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> httpx2.Response:
        if self.frames is not None:
            headers = {"content-type": "text/event-stream", **self.headers}
            return httpx2.Response(self.status, headers=headers, stream=_SSEBody(self.frames, self.fail_with))
        return httpx2.Response(self.status, headers=self.headers, json=self.body)


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body=body, headers=dict(headers or {}))


def error(status: int = 500, message: str = "scripted failure", *, retry_after_ms: int = 1) -> Reply:
    """An API error body; ``retry-after-ms`` keeps the SDK's retry sleep near zero."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    # OpenAI reads ``error``; Anthropic's envelope also has a top-level ``type``.
    body = {"type": "error", "error": {"message": message, "type": kind}}
    return Reply(status=status, body=body, headers={"retry-after-ms": str(retry_after_ms)})


def sse_reply(frames: Sequence[bytes], *, fail_with: BaseException | None = None) -> Reply:
    return Reply(frames=list(frames), fail_with=fail_with)


def sse_frame(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def openai_chat_sse(chunks: Iterable[dict[str, Any]]) -> list[bytes]:
    """Chat completion chunks as OpenAI frames them: data-only events, then ``[DONE]``."""
    return [*(sse_frame(c) for c in chunks), sse_frame("[DONE]")]


def typed_sse(events: Iterable[dict[str, Any]]) -> list[bytes]:
    """Events named by their ``type`` field, as the Responses API and Anthropic frame them."""
    return [sse_frame(e, e["type"]) for e in events]


# -- the script --------------------------------------------------------------------------


class ScriptExhausted(AssertionError):
    pass


class Script:
    """Replies handed out in order, one per HTTP request; thread-safe."""

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self.replies: list[Reply] = list(replies)
        self.requests: list[httpx2.Request] = []
        self._lock = threading.Lock()

    def add(self, *replies: Reply) -> Script:
        with self._lock:
            self.replies.extend(replies)
        return self

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        with self._lock:
            self.requests.append(request)
            if not self.replies:
                raise ScriptExhausted(f"no scripted reply left for {request.method} {request.url}")
            reply = self.replies.pop(0)
        return reply.response()

    def bodies(self) -> list[Any]:
        """The JSON bodies of every request received, in order."""
        return [json.loads(r.content) if r.content else None for r in self.requests]

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handler)


def openai_client(script: Script, *, max_retries: int = 2, base_url: str = BASE_OPENAI) -> Any:
    import openai

    return openai.OpenAI(
        api_key=TEST_KEY,
        base_url=base_url,
        max_retries=max_retries,
        http_client=httpx2.Client(transport=script.transport()),
    )


def async_openai_client(script: Script, *, max_retries: int = 2, base_url: str = BASE_OPENAI) -> Any:
    import openai

    return openai.AsyncOpenAI(
        api_key=TEST_KEY,
        base_url=base_url,
        max_retries=max_retries,
        http_client=httpx2.AsyncClient(transport=script.transport()),
    )


def anthropic_client(script: Script, *, max_retries: int = 2) -> Any:
    import anthropic

    # The SDK's own OpenTelemetry spans are off: tests look at ours.
    return anthropic.Anthropic(
        api_key=TEST_KEY,
        base_url=BASE_ANTHROPIC,
        max_retries=max_retries,
        open_telemetry=False,
        http_client=httpx2.Client(transport=script.transport()),
    )


def async_anthropic_client(script: Script, *, max_retries: int = 2) -> Any:
    import anthropic

    return anthropic.AsyncAnthropic(
        api_key=TEST_KEY,
        base_url=BASE_ANTHROPIC,
        max_retries=max_retries,
        open_telemetry=False,
        http_client=httpx2.AsyncClient(transport=script.transport()),
    )


# -- canned bodies ------------------------------------------------------------------------


def chat_completion_body(
    text: str | None = "hello",
    *,
    model: str = "gpt-test",
    id: str = "chatcmpl-1",
    finish_reason: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in tool_calls
        ]
    return {
        "id": id,
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage if usage is not None else chat_usage(),
    }


def chat_usage(prompt: int = 12, completion: int = 5, *, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def chat_chunks(
    pieces: Sequence[str],
    *,
    model: str = "gpt-test",
    id: str = "chatcmpl-s1",
    finish_reason: str = "stop",
    tool_call: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A streamed completion: role chunk, one chunk per text piece, an optional tool call
    split over two chunks, the finish chunk, then (when given) the include_usage chunk."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": id,
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in pieces]
    if tool_call is not None:
        args = tool_call["arguments"]
        half = len(args) // 2
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": tool_call["id"],
                            "type": "function",
                            "function": {"name": tool_call["name"], "arguments": args[:half]},
                        }
                    ]
                }
            )
        )
        out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}))
    out.append(chunk({}, finish_reason))
    if usage is not None:
        out.append(
            {
                "id": id,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [],
                "usage": usage,
            }
        )
    return out


def embeddings_body(
    vectors: Sequence[Sequence[float]] = ((0.1, -0.2, 0.3, 0.4),),
    *,
    model: str = "text-embedding-test",
    prompt_tokens: int = 8,
    base64_encoded: bool = False,
) -> dict[str, Any]:
    """An embeddings answer; ``base64_encoded``: each vector as base64 of float32s, as the SDK asks by default."""
    import base64
    import struct

    def encoded(vector: Sequence[float]) -> Any:
        if not base64_encoded:
            return list(vector)
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def responses_body(
    text: str = "hello",
    *,
    model: str = "gpt-test",
    id: str = "resp_1",
    status: str = "completed",
    function_call: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    output: list[dict[str, Any]] = [
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    ]
    if function_call is not None:
        output.append({"type": "function_call", "id": "fc_1", "status": "completed", **function_call})
    return {
        "id": id,
        "object": "response",
        "created_at": 1700000000,
        "model": model,
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage if usage is not None else responses_usage(),
    }


def responses_usage(inputs: int = 20, outputs: int = 7, *, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": inputs,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": outputs,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": inputs + outputs,
    }


def responses_events(
    pieces: Sequence[str],
    *,
    model: str = "gpt-test",
    id: str = "resp_s1",
    function_call: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A streamed response: created, text deltas, optional function call fragments, completed."""
    text = "".join(pieces)
    created = {**responses_body("", model=model, id=id, status="in_progress"), "output": [], "usage": None}
    seq = iter(range(1000))
    events: list[dict[str, Any]] = [{"type": "response.created", "sequence_number": next(seq), "response": created}]
    events += [
        {
            "type": "response.output_text.delta",
            "sequence_number": next(seq),
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": p,
            "logprobs": [],
        }
        for p in pieces
    ]
    if function_call is not None:
        item = {
            "type": "function_call",
            "id": "fc_1",
            "call_id": function_call["call_id"],
            "name": function_call["name"],
            "arguments": "",
            "status": "in_progress",
        }
        events.append(
            {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": 1,
                "item": item,
            }
        )
        args = function_call["arguments"]
        for part in (args[: len(args) // 2], args[len(args) // 2 :]):
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "sequence_number": next(seq),
                    "item_id": "fc_1",
                    "output_index": 1,
                    "delta": part,
                }
            )
    final = responses_body(text, model=model, id=id, function_call=function_call, usage=usage)
    events.append({"type": "response.completed", "sequence_number": next(seq), "response": final})
    return events


def anthropic_message_body(
    text: str = "hello",
    *,
    model: str = "claude-test",
    id: str = "msg_1",
    stop_reason: str = "end_turn",
    tool_use: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if tool_use is not None:
        content.append({"type": "tool_use", **tool_use})
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage if usage is not None else anthropic_usage(),
    }


def anthropic_usage(
    inputs: int = 30, outputs: int = 9, *, cache_read: int = 0, cache_creation: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": inputs,
        "output_tokens": outputs,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_creation,
    }


def anthropic_events(
    pieces: Sequence[str],
    *,
    model: str = "claude-test",
    id: str = "msg_s1",
    stop_reason: str = "end_turn",
    thinking: str | None = None,
    tool_use: dict[str, Any] | None = None,
    input_usage: dict[str, Any] | None = None,
    output_tokens: int = 9,
) -> list[dict[str, Any]]:
    """A streamed message: message_start, optional thinking block, text block, optional
    tool_use block with its input split in two, message_delta, message_stop."""
    start_usage = input_usage if input_usage is not None else anthropic_usage(outputs=1)
    start = {
        **anthropic_message_body("", model=model, id=id),
        "content": [],
        "stop_reason": None,
        "usage": start_usage,
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    index = 0
    if thinking is not None:
        events += [
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "thinking_delta", "thinking": thinking},
            },
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "signature_delta", "signature": "sig"},
            },
            {"type": "content_block_stop", "index": index},
        ]
        index += 1
    events.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
    events += [
        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}} for p in pieces
    ]
    events.append({"type": "content_block_stop", "index": index})
    if tool_use is not None:
        index += 1
        args = json.dumps(tool_use["input"])
        events.append(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {
                    "type": "tool_use",
                    "id": tool_use["id"],
                    "name": tool_use["name"],
                    "input": {},
                },
            }
        )
        for part in (args[: len(args) // 2], args[len(args) // 2 :]):
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]
    return events


@dataclass
class Scripted:
    """One script, answered through a sync and an async client of the same SDK."""

    script: Script
    client: Any
    aclient: Any

    def add(self, *replies: Reply) -> Scripted:
        self.script.add(*replies)
        return self


def scripted_openai(*replies: Reply, max_retries: int = 2) -> Scripted:
    script = Script(replies)
    return Scripted(
        script,
        openai_client(script, max_retries=max_retries),
        async_openai_client(script, max_retries=max_retries),
    )


def scripted_anthropic(*replies: Reply, max_retries: int = 2) -> Scripted:
    script = Script(replies)
    return Scripted(
        script,
        anthropic_client(script, max_retries=max_retries),
        async_anthropic_client(script, max_retries=max_retries),
    )
