"""adapters.complete / acomplete / stream / astream refuse a client of the other calling
convention before anything is recorded or sent, and a ``stream: True`` call is a managed stream."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from relay_runtime import Recorder, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t

# The ``oa`` / ``an`` fixtures: scripted OpenAI and Anthropic clients.
pytest_plugins = ["adapters_support"]


def test_complete_with_an_async_client_is_a_type_error_naming_acomplete(relay_turn, relay_events, oa, an) -> None:
    for client, kwargs in (
        (oa.aclient, {"model": "m", "messages": []}),
        (an.aclient, {"model": "m", "max_tokens": 5, "messages": []}),
    ):
        with pytest.raises(TypeError, match=r"adapters\.acomplete\(\)") as caught:
            adapters.complete(client, kwargs)
        assert type(client).__name__ in str(caught.value)
    assert len(relay_events) == 0  # no attempt, no logical call: nothing happened
    assert oa.script.requests == [] and an.script.requests == []


def test_stream_with_an_async_client_names_astream(relay_turn, relay_events, oa) -> None:
    with pytest.raises(TypeError, match=r"adapters\.astream\(\)"):
        adapters.stream(oa.aclient, {"model": "m", "messages": []})
    assert len(relay_events) == 0 and oa.script.requests == []


@pytest.mark.asyncio
async def test_async_entry_points_with_a_sync_client_name_the_sync_ones(relay_turn, relay_events, oa) -> None:
    with pytest.raises(TypeError, match=r"adapters\.complete\(\)"):
        await adapters.acomplete(oa.client, {"model": "m", "messages": []})
    with pytest.raises(TypeError, match=r"adapters\.stream\(\)"):
        await adapters.astream(oa.client, {"model": "m", "messages": []})
    assert len(relay_events) == 0 and oa.script.requests == []


def test_a_duck_typed_create_returning_a_coroutine_fails_the_attempt_not_succeeds(relay_turn, relay_events) -> None:
    async def create(**kwargs: Any) -> Any:
        return SimpleNamespace(model="m")

    made: list[Any] = []

    def sync_looking_create(**kwargs: Any) -> Any:
        made.append(create(**kwargs))
        return made[-1]

    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=sync_looking_create)))
    with pytest.raises(TypeError, match="returned an awaitable"):
        adapters.complete(client, {"model": "m", "messages": []})
    assert inspect.getcoroutinestate(made[0]) == inspect.CORO_CLOSED  # closed: no "never awaited" warning
    attempt = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    assert attempt.outcome == "failed" and attempt.error_type == "TypeError"


def _attempt_and_logical(events: Recorder) -> tuple[list[Any], list[Any]]:
    attempts = [e.outcome for e in events.ends(relay_kind=cv.ATTEMPT)]
    logical = [(e.output or {}).get("outcome") for e in events.ends(relay_kind=cv.LOGICAL_CALL)]
    return attempts, logical


def test_complete_with_stream_true_returns_a_managed_stream(relay_turn, relay_events, oa) -> None:
    oa.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b"]))))
    result = adapters.complete(oa.client, {"model": "m", "messages": [], "stream": True})
    # Nothing has settled yet: the call is in flight until the stream is read.
    assert _attempt_and_logical(relay_events) == ([], [])
    chunks = list(result)
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ab"
    assert _attempt_and_logical(relay_events) == (["success"], ["success"])
    end = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    assert end.annotated_response.output_text == "ab"
    assert len(relay_events.marks()) >= 2  # chunk marks: the stream was tracked


def test_complete_with_stream_true_broken_off_is_cancelled(relay_turn, relay_events, oa) -> None:
    oa.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b", "c"]))))
    result = adapters.complete(oa.client, {"model": "m", "messages": [], "stream": True})
    for _ in result:
        break
    result.close()
    assert _attempt_and_logical(relay_events) == (["cancelled"], ["cancelled"])


@pytest.mark.asyncio
async def test_acomplete_with_stream_true_returns_a_managed_async_stream(relay_turn, relay_events, an) -> None:
    an.add(t.sse_reply(t.typed_sse(t.anthropic_events(["x", "y"]))))
    result = await adapters.acomplete(
        an.aclient, {"model": "claude", "max_tokens": 5, "messages": [], "stream": True}
    )
    assert _attempt_and_logical(relay_events) == ([], [])
    kinds = [event.type async for event in result]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert _attempt_and_logical(relay_events) == (["success"], ["success"])
    assert relay_events.ends(relay_kind=cv.ATTEMPT)[0].annotated_response.output_text == "xy"
