"""What the providers answer, shaped as their real APIs shape it: bodies, usage and stream events.

For ``adapters.testing``'s scripts (``json_reply(chat_completion_body("hi"))``,
``sse_reply(typed_sse(anthropic_events(...)))``); ``adapters.testing`` exports every name here.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from typing import Any


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
