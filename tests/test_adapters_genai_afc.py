"""Automatic function calling and chats in ``google-genai``: every HTTP request the SDK makes for one public
call is an attempt of one logical call, and every Python function it runs is a tool scope."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from genai_support import MODEL, embed_body, gemini_client, response_body, stream_frames, usage

from relay_runtime import Recorder, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import dispatch, google_genai
from relay_runtime.adapters import testing as t

CALL = {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}}


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def broken_tool(city: str) -> str:
    """A tool that fails."""
    raise RuntimeError(f"no weather for {city}")


async def get_weather_async(city: str) -> str:
    """The weather in a city, asynchronously."""
    return f"sunny in {city}"


@pytest.fixture()
def script() -> t.Script:
    return t.Script()


@pytest.fixture()
def client(script: t.Script) -> Iterator[Any]:
    made = google_genai.instrument_client(gemini_client(script))
    yield made
    google_genai.uninstrument_client(made)


def _afc_replies(script: t.Script, name: str = "get_weather") -> None:
    script.add(t.json_reply(response_body(None, calls=[{**CALL, "name": name}], usage_metadata=usage(10, 3))),
               t.json_reply(response_body("It is sunny.", usage_metadata=usage(30, 4))))  # fmt: skip


def _one_logical_call(events: Recorder, attempts: int) -> Any:
    ends = events.ends(relay_kind=cv.ATTEMPT)
    assert len(ends) == attempts, [(e.outcome, e.error_type) for e in ends]
    (call,) = events.ends(relay_kind=cv.LOGICAL_CALL)
    call_id = call.metadata[cv.API_REQUEST_ID]
    assert [e.metadata[cv.API_REQUEST_ID] for e in ends] == [call_id] * attempts
    assert [e.metadata[cv.RETRY_COUNT] for e in ends] == list(range(attempts))
    assert all(e.parent_uuid == call.uuid for e in ends)
    return call


def _order(events: Recorder) -> list[str]:
    """The attempts and tools as they ended, in order."""
    kinds = {cv.ATTEMPT: "attempt", cv.TOOL: "tool"}
    return [kinds[e.metadata[cv.KIND]] for e in events.events
            if e.kind == "scope_end" and e.metadata.get(cv.KIND) in kinds]  # fmt: skip


def test_automatic_function_calling_is_one_logical_call_with_a_tool_scope(
    relay_turn, relay_events, client, script
) -> None:
    _afc_replies(script)
    response = client.models.generate_content(model=MODEL, contents="weather?", config={"tools": [get_weather]})
    assert response.text == "It is sunny."
    call = _one_logical_call(relay_events, 2)
    assert call.outcome == "success"
    first, second = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert first.annotated_response.tool_calls == [{"id": "fc-1", "name": "get_weather", "arguments": CALL["args"]}]
    assert second.annotated_response.output_text == "It is sunny."
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert tool.name == "get_weather" and tool.outcome == "success" and tool.output == "sunny in Paris"
    assert _order(relay_events) == ["attempt", "tool", "attempt"]
    # The second request answers the call with what the tool returned.
    sent = json.loads(script.requests[1].content)["contents"]
    assert sent[-1]["parts"][0]["functionResponse"]["response"] == {"result": "sunny in Paris"}


def test_a_failing_tool_is_a_failed_tool_scope_and_the_model_is_told(relay_turn, relay_events, client, script):
    _afc_replies(script, "broken_tool")
    client.models.generate_content(model=MODEL, contents="weather?", config={"tools": [broken_tool]})
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert tool.name == "broken_tool" and tool.outcome == "failed"
    assert _one_logical_call(relay_events, 2).outcome == "success"
    sent = json.loads(script.requests[1].content)["contents"]
    assert "no weather for Paris" in sent[-1]["parts"][0]["functionResponse"]["response"]["error"]


def test_tool_request_intercepts_see_the_arguments_the_model_gave(relay_turn, relay_events, client, script) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_tool_request("genai-tool", 1, False, lambda name, args: {**args, "city": "Rome"})
    _afc_replies(script)
    try:
        client.models.generate_content(model=MODEL, contents="weather?", config={"tools": [get_weather]})
    finally:
        relay.intercepts.deregister_tool_request("genai-tool")
    sent = json.loads(script.requests[1].content)["contents"]
    assert sent[-1]["parts"][0]["functionResponse"]["response"] == {"result": "sunny in Rome"}


def test_async_automatic_function_calling_with_an_async_tool(relay_turn, relay_events, client, script) -> None:
    _afc_replies(script, "get_weather_async")
    config = {"tools": [get_weather_async]}
    response = asyncio.run(client.aio.models.generate_content(model=MODEL, contents="weather?", config=config))
    assert response.text == "It is sunny."
    _one_logical_call(relay_events, 2)
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert tool.name == "get_weather_async" and tool.output == "sunny in Paris"


def test_a_streamed_automatic_function_call_is_one_logical_call(relay_turn, relay_events, client, script) -> None:
    script.add(t.sse_reply(stream_frames([""], calls=[CALL])), t.sse_reply(stream_frames(["Sun", "ny."])))
    stream = client.models.generate_content_stream(model=MODEL, contents="weather?", config={"tools": [get_weather]})
    assert "".join(c.text or "" for c in stream) == "Sunny."
    call = _one_logical_call(relay_events, 2)
    assert call.outcome == "success"
    # The SDK runs the function as the chunk that asks for it arrives, before the stream is read out.
    assert _order(relay_events) == ["tool", "attempt", "attempt"]


def test_a_chat_send_is_one_logical_call_with_its_function_calls(relay_turn, relay_events, client, script) -> None:
    chat = client.chats.create(model=MODEL, config={"tools": [get_weather]})
    _afc_replies(script)
    assert chat.send_message("weather?").text == "It is sunny."
    _one_logical_call(relay_events, 2)
    assert len(relay_events.ends(relay_kind=cv.TOOL)) == 1
    # The next message carries the history: a new logical call of one attempt.
    script.add(t.json_reply(response_body("bye")))
    assert chat.send_message("thanks").text == "bye"
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 2
    last = relay_events.ends(relay_kind=cv.ATTEMPT)[-1]
    assert len(last.annotated_request.messages) == 5  # question, call, answer, reply, thanks


def test_chat_send_message_stream(relay_turn, relay_events, client, script) -> None:
    chat = client.chats.create(model=MODEL)
    script.add(t.sse_reply(stream_frames(["Hi ", "there"])))
    assert [c.text for c in chat.send_message_stream("hello")] == ["Hi ", "there"]
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "success" and end.annotated_response.output_text == "Hi there"
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 1


def test_async_chat_sends(relay_turn, relay_events, client, script) -> None:
    script.add(t.json_reply(response_body("one")), t.sse_reply(stream_frames(["tw", "o"])))

    async def talk() -> list[str]:
        chat = client.aio.chats.create(model=MODEL)
        first = await chat.send_message("1")
        stream = await chat.send_message_stream("2")
        return [first.text, "".join([c.text async for c in stream])]

    assert asyncio.run(talk()) == ["one", "two"]
    ends = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [e.annotated_response.output_text for e in ends] == ["one", "two"]
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 2


def test_chats_of_clients_not_instrumented_are_untouched(relay_turn, relay_events, client, script) -> None:
    other = gemini_client(script)
    script.add(t.json_reply(response_body("plain")))
    assert other.chats.create(model=MODEL).send_message("hi").text == "plain"
    assert relay_events.ends(relay_kind=cv.ATTEMPT) == [] and relay_events.ends(relay_kind=cv.LOGICAL_CALL) == []


def test_an_async_chat_runs_a_sync_tool_in_a_thread_as_a_tool_scope(relay_turn, relay_events, client, script) -> None:
    _afc_replies(script)

    async def talk() -> str:
        chat = client.aio.chats.create(model=MODEL, config={"tools": [get_weather]})
        return (await chat.send_message("weather?")).text

    assert asyncio.run(talk()) == "It is sunny."
    _one_logical_call(relay_events, 2)
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert tool.name == "get_weather" and tool.output == "sunny in Paris"


def _every_public_call(client: Any, script: t.Script) -> list[str]:
    """generate_content with automatic function calling, its stream, embed_content and a chat's two sends, sync
    then async: what each answered."""
    answers = []
    for tool in ("get_weather", "get_weather_async"):  # the sync calls, then the async ones
        _afc_replies(script, tool)
        script.add(t.sse_reply(stream_frames(["stre", "am"])), t.json_reply(embed_body()),
                   t.json_reply(response_body("chat")), t.sse_reply(stream_frames(["chat ", "stream"])))  # fmt: skip
    models = client.models
    answers.append(models.generate_content(model=MODEL, contents="weather?", config={"tools": [get_weather]}).text)
    answers.append("".join(c.text for c in models.generate_content_stream(model=MODEL, contents="hi")))
    answers.append(str(len(models.embed_content(model=MODEL, contents="hi").embeddings)))
    chat = client.chats.create(model=MODEL)
    answers.append(chat.send_message("hi").text)
    answers.append("".join(c.text for c in chat.send_message_stream("more")))

    async def asynchronously() -> list[str]:
        models = client.aio.models
        config = {"tools": [get_weather_async]}
        found = [(await models.generate_content(model=MODEL, contents="weather?", config=config)).text]
        found.append("".join([c.text async for c in await models.generate_content_stream(model=MODEL, contents="hi")]))
        found.append(str(len((await models.embed_content(model=MODEL, contents="hi")).embeddings)))
        chat = client.aio.chats.create(model=MODEL)
        found.append((await chat.send_message("hi")).text)
        found.append("".join([c.text async for c in await chat.send_message_stream("more")]))
        return found

    return answers + asyncio.run(asynchronously())


@pytest.mark.parametrize("how", ["classes", "client"], ids=["instrument-classes", "instrument-client"])
def test_inside_another_managed_attempt_every_public_call_passes_straight_through(
    relay_turn, relay_events, script, how
) -> None:
    """While a managed attempt runs the code calling the SDK (dispatch's own SDK call, a LangChain chat model
    under RelayMiddleware: ``inside_sdk_call``), each request is that attempt: no public call, request or tool
    the SDK runs opens a logical call, an attempt or a tool scope of its own, which would count it twice."""
    client = gemini_client(script)
    if how == "classes":
        adapters.instrument()
    else:
        adapters.instrument(client)
    try:
        token = dispatch.inside_sdk_call.set(True)
        try:
            answers = _every_public_call(client, script)
        finally:
            dispatch.inside_sdk_call.reset(token)
        assert answers == ["It is sunny.", "stream", "1", "chat", "chat stream"] * 2
        assert len(script.requests) == 12 and script.replies == []
        assert relay_events.starts() == []
        # Outside it, the same client is traced.
        script.add(t.json_reply(response_body("traced")))
        assert client.models.generate_content(model=MODEL, contents="hi").text == "traced"
    finally:
        adapters.uninstrument()
        adapters.uninstrument(client)
    _one_logical_call(relay_events, 1)
