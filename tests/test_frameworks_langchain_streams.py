"""A LangChain chat model streamed under ``RelayCallbackHandler`` with ``adapters.instrument()``: what the
caller's own code calls while the stream is open, or after it ended elsewhere, is no attempt of it.

The handler joins the model run's logical call so that the SDK call inside is its attempt. A stream runs in
the caller's context (a generator yields into it), or ends in another one (an async generator closed by the
event loop; ``astream_events(version="v3")``'s producer task), so the join must not outlive the SDK call.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from relay_runtime import adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from tests.framework_support import attempts, need
from tests.test_frameworks_langchain import chat_model

need("langchain_openai")

from relay_runtime.integrations.langchain import RelayCallbackHandler  # noqa: E402


@pytest.fixture(autouse=True)
def _instrumented() -> Iterator[None]:
    adapters.instrument()
    yield
    adapters.uninstrument()


def streamed_model() -> Any:
    script = t.Script([t.sse_reply(t.openai_chat_sse(t.chat_chunks(["Hel", "lo", " there"])))])
    return chat_model(script, streaming=True)


def other_script() -> t.Script:
    return t.Script([t.json_reply(t.chat_completion_body("Unrelated."))])


def ask(client: Any) -> Any:
    return client.chat.completions.create(model="gpt-other", messages=[{"role": "user", "content": "Other?"}])


CONFIG = {"callbacks": [RelayCallbackHandler()]}


def assert_its_own_call(relay_events: Any) -> None:
    """The stream's attempt and the caller's own call: two logical calls, each its first attempt."""
    streamed, own = sorted(relay_events.starts(relay_kind=cv.ATTEMPT), key=lambda a: a.model_name != "gpt-test")
    assert (streamed.model_name, own.model_name) == ("gpt-test", "gpt-other")
    assert own.metadata[cv.API_REQUEST_ID] != streamed.metadata[cv.API_REQUEST_ID]
    assert own.metadata[cv.RETRY_COUNT] == 0
    assert [a.outcome for a in attempts(relay_events) if a.uuid == own.uuid] == ["success"]


def test_a_call_the_caller_makes_while_a_stream_is_left_open_is_its_own(relay_turn, relay_events) -> None:
    stream = streamed_model().stream("Hi", config=CONFIG)
    for _chunk in stream:
        break  # the stream stays open: it is still referenced
    ask(t.openai_client(other_script()))
    assert_its_own_call(relay_events)
    stream.close()
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 2


def test_a_call_after_an_async_stream_broken_off_is_its_own(relay_turn, relay_events) -> None:
    async def main() -> None:
        async for _chunk in streamed_model().astream("Hi", config=CONFIG):
            break
        gc.collect()  # the event loop closes the generator, in a task of its own
        await asyncio.sleep(0.01)
        await ask(t.async_openai_client(other_script()))

    asyncio.run(main())
    assert_its_own_call(relay_events)


@pytest.mark.filterwarnings("ignore:.*is in beta")
def test_a_call_after_a_finished_v3_event_stream_is_its_own(relay_turn, relay_events) -> None:
    """``astream_events(version="v3")`` ends the run in its producer task, not in the caller's."""

    async def main() -> None:
        stream = await streamed_model().astream_events("Hi", config=CONFIG, version="v3")
        await stream
        await ask(t.async_openai_client(other_script()))

    asyncio.run(main())
    assert_its_own_call(relay_events)


def test_an_async_stream_broken_off_ends_its_attempt_before_its_call(relay_turn, relay_events) -> None:
    """LangChain ends the run when the event loop closes the broken-off stream; the provider's stream inside
    it is closed only later (after the turn's end, at worst): its attempt ends with the call, before it."""

    async def main() -> None:
        async for _chunk in streamed_model().astream("Hi", config=CONFIG):
            break
        gc.collect()
        await asyncio.sleep(0.01)

    asyncio.run(main())
    ends = [(e.metadata.get(cv.KIND), e.outcome) for e in relay_events.ends()]
    assert ends == [(cv.ATTEMPT, "cancelled"), (cv.LOGICAL_CALL, "cancelled")]
