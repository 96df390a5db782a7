"""@auxiliary_call on the function shapes it cannot make one logical call of."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from relay_runtime import adapters
from relay_runtime.adapters.testing import chat_completion_body, json_reply, openai_chat_sse, sse_reply
from relay_runtime.auxiliary import auxiliary_call, set_route


def test_a_generator_function_is_refused_when_decorated(relay_turn, relay_events, scripted_openai) -> None:
    """Its body would run after the wrapper returned: its calls would be recorded outside any logical call."""
    scripted_openai.add(json_reply(chat_completion_body("ok")))

    def summarise(task: str) -> Any:
        set_route("openai", "gpt-x", "chat_completions")
        yield adapters.complete(scripted_openai.client, {"model": "gpt-x", "messages": []})

    async def asummarise(task: str) -> Any:
        yield None

    for fn in (summarise, asummarise):
        with pytest.raises(TypeError, match=f"@auxiliary_call cannot decorate '{fn.__name__}': a generator"):
            auxiliary_call(fn)
    assert relay_events.starts(relay_kind="logical_llm_call") == []

    @auxiliary_call
    def plain(task: str) -> Any:  # the shapes it takes still work
        set_route("openai", "gpt-x", "chat_completions")
        return adapters.complete(scripted_openai.client, {"model": "gpt-x", "messages": []})

    plain("summary")
    (call,) = relay_events.ends(relay_kind="logical_llm_call")
    assert call.outcome == "success"


def test_an_async_function_behind_a_sync_wrapper_is_one_logical_call(relay_turn, relay_events, scripted_openai) -> None:
    """A callable object with an async ``__call__``, or a plain wrapper returning a coroutine: awaited, one call."""
    import asyncio
    import functools

    for _ in range(4):
        scripted_openai.add(json_reply(chat_completion_body("ok")))

    async def summarise(task: str) -> Any:
        set_route("openai", "gpt-x", "chat_completions")
        for _ in range(2):  # two attempts of one logical call
            await adapters.acomplete(scripted_openai.aclient, {"model": "gpt-x", "messages": []})
        return "done"

    class Summariser:
        async def __call__(self, task: str) -> Any:
            return await summarise(task)

    def plain_wrapper(fn: Any) -> Any:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        call.__wrapped__ = None  # hides the coroutine function, as many wrappers do
        return call

    for decorated in (auxiliary_call(Summariser()), auxiliary_call(plain_wrapper(summarise))):
        relay_events.clear()
        assert asyncio.run(decorated("summary")) == "done"
        calls = relay_events.ends(relay_kind="logical_llm_call")
        attempts = relay_events.ends(relay_kind="llm_attempt")
        assert [c.outcome for c in calls] == ["success"] and len(attempts) == 2
        assert {a.metadata["api_request_id"] for a in attempts} == {calls[0].metadata["api_request_id"]}
        assert {a.metadata["call_role"] for a in attempts} == {"auxiliary:summary"}


def _chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"id": "c-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}  # fmt: skip


def _one_call_of_two_attempts(relay_events: Any) -> None:
    (call,) = relay_events.ends(relay_kind="logical_llm_call")
    assert call.outcome == "success"
    attempts = relay_events.ends(relay_kind="llm_attempt")
    assert [(a.outcome, a.parent_uuid, a.metadata["retry_count"]) for a in attempts] == [
        ("failed", call.uuid, 0),
        ("success", call.uuid, 1),
    ]
    assert {a.metadata["api_request_id"] for a in attempts} == {call.metadata["api_request_id"]}


def test_a_stream_retried_inside_the_function_is_one_logical_call(relay_turn, relay_events, scripted_openai) -> None:
    """The failed stream's end closed the call as failed, and the retry opened a second call with the same id."""
    scripted_openai.add(json_reply({"error": {"message": "overloaded"}}, status=400))
    scripted_openai.add(sse_reply(openai_chat_sse([_chunk("a"), _chunk("b", "stop")])))

    @auxiliary_call
    def summarise(task: str) -> Any:
        set_route("openai", "gpt-x", "chat_completions")
        for _ in range(2):
            try:
                return list(adapters.stream(scripted_openai.client, {"model": "gpt-x", "messages": []}))
            except openai.BadRequestError:
                continue
        return None

    assert len(summarise("summary")) == 2
    _one_call_of_two_attempts(relay_events)


@pytest.mark.asyncio
async def test_an_async_stream_retried_inside_the_function_is_one_logical_call(
    relay_turn, relay_events, scripted_openai
) -> None:
    scripted_openai.add(sse_reply(openai_chat_sse([_chunk("a")])))  # cut short: no finish_reason
    scripted_openai.add(sse_reply(openai_chat_sse([_chunk("a"), _chunk("b", "stop")])))

    @auxiliary_call
    async def summarise(task: str) -> Any:
        set_route("openai", "gpt-x", "chat_completions")
        for _ in range(2):
            chunks = [
                c async for c in await adapters.astream(scripted_openai.aclient, {"model": "gpt-x", "messages": []})
            ]
            if chunks[-1].choices[0].finish_reason == "stop":
                return chunks
        return None

    assert len(await summarise("summary")) == 2
    _one_call_of_two_attempts(relay_events)
