"""A provider that reports a failure inside a stream it ends normally: the SDK raises nothing, so the
caller's iteration ends as usual, but the record is the provider's word: the attempt (and its logical
call) failed, with the provider's error code as its error type."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay_runtime import adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t


def _failed_stream() -> t.Reply:
    events = t.responses_events(["par", "tial"], usage=t.responses_usage(20, 2))
    final = events[-1]["response"]
    final.update(status="failed", error={"code": "server_error", "message": "The model failed mid-way."})
    events[-1] = {"type": "response.failed", "sequence_number": events[-1]["sequence_number"],
                  "response": final}  # fmt: skip
    return t.sse_reply(t.typed_sse(events))


def _kinds(chunks: list[Any]) -> list[str]:
    return [c.type for c in chunks]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_responses_stream_that_ends_with_response_failed_is_recorded_as_failed(
    relay_turn, relay_events, flavour: str
) -> None:
    scripted = t.scripted_openai(_failed_stream())
    kwargs = {"model": "gpt-test", "input": "hi", "stream": True}
    if flavour == "sync":
        chunks = list(adapters.stream(scripted.client, kwargs, api_mode="responses"))
    else:

        async def read() -> list[Any]:
            return [c async for c in await adapters.astream(scripted.aclient, kwargs, api_mode="responses")]

        chunks = asyncio.run(read())
    assert _kinds(chunks)[-1] == "response.failed"  # the caller's stream is the provider's, unchanged
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "failed"
    assert end.error_type == "server_error" and "The model failed mid-way." in (end.error_message or "")
    assert end.annotated_response.finish_reasons == ["failed"]
    assert end.annotated_response.usage.input_tokens == 20  # what it used is still recorded
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "failed"
    scripted.client.close()


def test_a_responses_stream_that_completes_is_still_a_success(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(t.sse_reply(t.typed_sse(t.responses_events(["all", " good"]))))
    list(adapters.stream(scripted.client, {"model": "gpt-test", "input": "hi", "stream": True}, api_mode="responses"))
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "success" and end.error_type is None
    scripted.client.close()


def test_a_responses_streams_error_event_is_recorded_with_the_providers_code_and_message(
    relay_turn, relay_events
) -> None:
    """The Responses API's ``error`` event: the SDK yields it and raises nothing, and the stream ends without
    a terminal event. The record keeps what the provider said, not only that the stream was cut short."""
    events = [e for e in t.responses_events(["par"]) if e["type"] != "response.completed"]
    events.append({"type": "error", "code": "server_error", "message": "The model failed.", "param": None,
                   "sequence_number": len(events)})  # fmt: skip
    scripted = t.scripted_openai(t.sse_reply(t.typed_sse(events)))
    kwargs = {"model": "gpt-test", "input": "hi", "stream": True}
    chunks = list(adapters.stream(scripted.client, kwargs, api_mode="responses"))
    assert _kinds(chunks)[-1] == "error"  # the caller's stream is the provider's, unchanged
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "failed"
    assert end.error_type == "server_error" and "The model failed." in (end.error_message or "")
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "failed"
    scripted.client.close()
