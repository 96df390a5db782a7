"""A managed stream stays the SDK's stream: the SDKs' own checks pass on it, its methods keep their
calling convention, and the SDK's own ways of closing it end its attempt at once.

The last section replays assertions of the openai and anthropic SDKs' own test suites (their
``api_resources`` stream tests, anthropic's stream-helper and refusal-fallback tests) over real
clients on the mock transport, inside a turn, with the relay on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from relay_runtime import CHUNK_MARK, Recorder, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t

Make = Callable[..., t.Scripted]


@pytest.fixture(params=["per_client", "global"])
def scripted(request: pytest.FixtureRequest) -> Iterator[Make]:
    """``scripted("openai"|"anthropic", *replies, **client_options)``: clients traced as the parameter says."""
    path = request.param
    if path == "global":
        adapters.instrument()
    made: list[t.Scripted] = []

    def make(sdk: str, *replies: t.Reply, **options: Any) -> t.Scripted:
        script = t.Script(replies)
        if sdk == "openai":
            s = t.Scripted(script, t.openai_client(script, max_retries=0), t.async_openai_client(script, max_retries=0))
        else:
            s = t.Scripted(script, _anthropic(script, False, **options), _anthropic(script, True, **options))
        if path == "per_client":
            adapters.instrument(s.client)
            adapters.instrument(s.aclient)
        made.append(s)
        return s

    try:
        yield make
    finally:
        adapters.uninstrument()
        for s in made:
            s.client.close()


def _anthropic(script: t.Script, is_async: bool, **options: Any) -> Any:
    import httpx2

    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    http = httpx2.AsyncClient(transport=script.transport()) if is_async else httpx2.Client(transport=script.transport())
    return cls(
        api_key=t.TEST_KEY, base_url=t.BASE_ANTHROPIC, max_retries=0, open_telemetry=False, http_client=http, **options
    )


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def outcomes(events: Recorder) -> list[str | None]:
    return [e.outcome for e in attempts(events)]


def chat_sse(*pieces: str) -> t.Reply:
    return t.sse_reply(t.openai_chat_sse(t.chat_chunks(list(pieces) or ["a", "b"])))


def responses_sse() -> t.Reply:
    return t.sse_reply(t.typed_sse(t.responses_events(["a", "b"])))


def anthropic_sse() -> t.Reply:
    return t.sse_reply(t.typed_sse(t.anthropic_events(["a", "b"])))


MESSAGES = [{"role": "user", "content": "hi"}]


# -- the SDK's isinstance checks -------------------------------------------------------------------


def test_create_stream_is_an_sdk_stream(relay_turn, relay_events, scripted) -> None:
    o = scripted("openai", chat_sse(), responses_sse())
    a = scripted("anthropic", anthropic_sse(), anthropic_sse())
    chat = o.client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    responses = o.client.responses.create(model="m", input="hi", stream=True)
    messages = a.client.messages.create(model="c", max_tokens=5, messages=MESSAGES, stream=True)
    beta = a.client.beta.messages.create(model="c", max_tokens=5, messages=MESSAGES, stream=True)
    assert isinstance(chat, openai.Stream) and isinstance(responses, openai.Stream)
    assert isinstance(messages, anthropic.Stream) and isinstance(beta, anthropic.Stream)
    assert not isinstance(chat, openai.AsyncStream)
    for stream in (chat, responses, messages, beta):
        for _ in stream:
            pass
    assert outcomes(relay_events) == ["success"] * 4  # and they are still managed


@pytest.mark.asyncio
async def test_async_create_stream_is_an_sdk_async_stream(relay_turn, relay_events, scripted) -> None:
    o = scripted("openai", chat_sse(), responses_sse())
    a = scripted("anthropic", anthropic_sse())
    chat = await o.aclient.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    responses = await o.aclient.responses.create(model="m", input="hi", stream=True)
    messages = await a.aclient.messages.create(model="c", max_tokens=5, messages=MESSAGES, stream=True)
    assert isinstance(chat, openai.AsyncStream) and isinstance(responses, openai.AsyncStream)
    assert isinstance(messages, anthropic.AsyncStream)
    for stream in (chat, responses, messages):
        async for _ in stream:
            pass
    assert outcomes(relay_events) == ["success"] * 3


def test_a_stream_a_provider_opened_as_a_generator_is_not_impersonated(relay_turn, relay_events) -> None:
    """Only SDK (non-builtin) sources lend their type: a generator's type promises a layout we do not have."""
    relay, _turn = relay_turn
    from relay_runtime import LLMRequest
    from relay_runtime.streams import ManagedStream

    stream = relay.llm.stream("p", LLMRequest({}, {"model": "m"}), lambda r: (c for c in (1, 2)))
    assert type(stream) is ManagedStream and isinstance(stream, ManagedStream)
    assert stream.__class__ is ManagedStream
    assert list(stream) == [1, 2]


# -- raw responses: parse() gives the SDK's stream, with its own close() ---------------------------


def test_raw_response_parse_is_an_sdk_stream_and_close_cancels_at_once(relay_turn, relay_events, scripted) -> None:
    o = scripted("openai", chat_sse(), chat_sse())
    a = scripted("anthropic", anthropic_sse())
    raw = o.client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True)
    stream = raw.parse()
    assert isinstance(stream, openai.Stream)
    stream.close()
    assert outcomes(relay_events) == ["cancelled"]  # at once: not at garbage collection or the end of the turn
    assert stream.response.is_closed

    with o.client.chat.completions.with_streaming_response.create(
        model="m", messages=MESSAGES, stream=True
    ) as response:
        stream = response.parse()
        assert isinstance(stream, openai.Stream)
        assert next(iter(stream)).choices[0].delta.role == "assistant"
        stream.close()
        assert outcomes(relay_events) == ["cancelled", "cancelled"]

    raw = a.client.messages.with_raw_response.create(model="c", max_tokens=5, messages=MESSAGES, stream=True)
    stream = raw.parse()
    assert isinstance(stream, anthropic.Stream)
    assert [e.type for e in stream][-1] == "message_stop"
    assert outcomes(relay_events) == ["cancelled", "cancelled", "success"]


@pytest.mark.asyncio
async def test_async_raw_response_stream_closes_with_an_awaited_close(relay_turn, relay_events, scripted) -> None:
    """Before: ``await stream.close()`` raised TypeError (a sync no-op close was handed out)."""
    o = scripted("openai", chat_sse())
    a = scripted("anthropic", anthropic_sse(), anthropic_sse())
    raw = await o.aclient.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True)
    stream = raw.parse()  # openai's legacy raw response parses synchronously
    assert isinstance(stream, openai.AsyncStream)
    await stream.close()
    assert outcomes(relay_events) == ["cancelled"]

    raw = await a.aclient.messages.with_raw_response.create(model="c", max_tokens=5, messages=MESSAGES, stream=True)
    stream = await raw.parse()
    assert isinstance(stream, anthropic.AsyncStream)
    await stream.close()
    assert outcomes(relay_events) == ["cancelled", "cancelled"]
    assert stream.response.is_closed

    async with a.aclient.messages.with_streaming_response.create(
        model="c", max_tokens=5, messages=MESSAGES, stream=True
    ) as response:
        stream = await response.parse()
        assert isinstance(stream, anthropic.AsyncStream)
        assert [e.type async for e in stream][-1] == "message_stop"
    assert outcomes(relay_events) == ["cancelled", "cancelled", "success"]


# -- the SDK's own ways of closing a stream end its attempt at once ---------------------------------


def test_closing_the_streams_http_response_cancels_the_attempt_at_once(relay_turn, relay_events, scripted) -> None:
    o = scripted("openai", chat_sse(), chat_sse())
    stream = o.client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert stream.response is stream.response  # one stand-in per stream
    stream.response.close()
    assert outcomes(relay_events) == ["cancelled"]
    assert stream.response.is_closed

    # Read to its end first: the close that follows changes nothing.
    stream = o.client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    for _ in stream:
        pass
    stream.response.close()
    assert outcomes(relay_events) == ["cancelled", "success"]


def test_the_sdks_stream_helpers_close_cancels_at_once(relay_turn, relay_events, scripted) -> None:
    """openai's stream helpers close through the HTTP response they took from the stream."""
    o = scripted("openai", chat_sse("x", "y", "z"), responses_sse())
    with o.client.chat.completions.stream(model="m", messages=MESSAGES) as helper:
        next(iter(helper))
        helper.close()
        assert outcomes(relay_events) == ["cancelled"]
    with o.client.responses.stream(model="m", input="hi") as helper:
        next(iter(helper))
        helper.close()
        assert outcomes(relay_events) == ["cancelled", "cancelled"]


@pytest.mark.asyncio
async def test_async_stream_helpers_and_response_aclose_cancel_at_once(relay_turn, relay_events, scripted) -> None:
    o = scripted("openai", chat_sse("x", "y", "z"), chat_sse())
    async with o.aclient.chat.completions.stream(model="m", messages=MESSAGES) as helper:
        await helper.__anext__()
        await helper.close()
        assert outcomes(relay_events) == ["cancelled"]
    stream = await o.aclient.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    await stream.response.aclose()
    assert outcomes(relay_events) == ["cancelled", "cancelled"]


# -- assertions of the SDKs' own test suites, with the relay on inside a turn -----------------------


def test_sdk_suite_openai_api_resources_stream_overloads(relay_turn, relay_events, scripted) -> None:
    """tests/api_resources/chat/test_completions.py: the ``create`` overload with ``stream=True``."""
    o = scripted("openai", chat_sse(), chat_sse(), chat_sse())
    messages = [{"content": "string", "role": "developer"}]
    # test_method_create_overload_2
    completion_stream = o.client.chat.completions.create(messages=messages, model="gpt-5.4", stream=True)
    completion_stream.response.close()
    # test_raw_response_create_overload_2
    response = o.client.chat.completions.with_raw_response.create(messages=messages, model="gpt-5.4", stream=True)
    assert response.http_request.headers.get("X-Stainless-Lang") == "python"
    stream = response.parse()
    stream.close()
    # test_streaming_response_create_overload_2
    with o.client.chat.completions.with_streaming_response.create(
        messages=messages, model="gpt-5.4", stream=True
    ) as response:
        assert not response.is_closed
        assert response.http_request.headers.get("X-Stainless-Lang") == "python"
        stream = response.parse()
        stream.close()
    assert response.is_closed is True
    assert outcomes(relay_events) == ["cancelled"] * 3


@pytest.mark.asyncio
async def test_sdk_suite_anthropic_api_resources_async_stream_overloads(relay_turn, relay_events, scripted) -> None:
    """tests/api_resources/test_messages.py (async): raw and streaming responses of ``create(stream=True)``."""
    a = scripted("anthropic", anthropic_sse(), anthropic_sse(), anthropic_sse())
    # test_method_create_overload_2
    message_stream = await a.aclient.messages.create(max_tokens=1024, messages=MESSAGES, model="c", stream=True)
    await message_stream.response.aclose()
    # test_raw_response_create_overload_2
    response = await a.aclient.messages.with_raw_response.create(
        max_tokens=1024, messages=MESSAGES, model="c", stream=True
    )
    assert response.http_request.headers.get("X-Stainless-Lang") == "python"
    stream = await response.parse()
    await stream.close()
    # test_streaming_response_create_overload_2
    async with a.aclient.messages.with_streaming_response.create(
        max_tokens=1024, messages=MESSAGES, model="c", stream=True
    ) as response:
        assert not response.is_closed
        stream = await response.parse()
        await stream.close()
    assert response.is_closed is True
    assert outcomes(relay_events) == ["cancelled"] * 3


def test_sdk_suite_anthropic_stream_helper_context_manager(relay_turn, relay_events, scripted) -> None:
    """tests/lib/streaming/test_messages.py::test_context_manager and test_basic_response."""
    a = scripted("anthropic", anthropic_sse(), anthropic_sse())
    with a.client.messages.stream(max_tokens=1024, messages=MESSAGES, model="c") as stream:
        assert not stream.response.is_closed
    # response should be closed even if the body isn't read
    assert stream.response.is_closed
    assert outcomes(relay_events) == ["cancelled"]
    with a.client.messages.stream(max_tokens=1024, messages=MESSAGES, model="c") as stream:
        events = [event.type for event in stream]
        assert stream.get_final_message().content[0].text == "ab"
    assert events[-1] == "message_stop"
    assert outcomes(relay_events) == ["cancelled", "success"]


REFUSAL = {"model": "claude-fallback"}


def test_sdk_suite_refusal_fallback_stream_closed_mid_passthrough(relay_turn, relay_events, scripted) -> None:
    """tests/lib/test_refusal_fallback_streaming.py::TestCancellation (sync): break after two events, close."""
    middleware = [anthropic.BetaRefusalFallbackMiddleware([REFUSAL])]
    a = scripted("anthropic", anthropic_sse(), middleware=middleware)
    stream = a.client.beta.messages.create(model="c", max_tokens=1024, messages=MESSAGES, stream=True)
    assert isinstance(stream, anthropic.Stream)
    for seen, _event in enumerate(stream, 1):
        if seen == 2:
            break
    stream.close()
    assert len(a.script.requests) == 1
    assert outcomes(relay_events) == ["cancelled"]


@pytest.mark.asyncio
async def test_sdk_suite_async_refusal_fallback_stream_closed_mid_passthrough(
    relay_turn, relay_events, scripted
) -> None:
    """The async twin: ``await stream.close()``."""
    middleware = [anthropic.BetaRefusalFallbackMiddleware([REFUSAL])]
    a = scripted("anthropic", anthropic_sse(), middleware=middleware)
    stream = await a.aclient.beta.messages.create(model="c", max_tokens=1024, messages=MESSAGES, stream=True)
    assert isinstance(stream, anthropic.AsyncStream)
    seen = 0
    async for _event in stream:
        seen += 1
        if seen == 2:
            break
    await stream.close()
    assert len(a.script.requests) == 1
    assert outcomes(relay_events) == ["cancelled"]


# -- what the record reads from a stream matches the SDK's own final message --------------------------


def test_a_stream_block_whose_start_carries_its_content_is_recorded_as_the_sdk_reads_it(
    relay_turn, relay_events, scripted
) -> None:
    """A content_block_start may carry the block's content (a tool_use's whole ``input`` with no
    input_json_delta, a text block's opening text, a thinking block's opening thought): the SDK's final
    message keeps it, and so must the record, and the chunk marks (which carry the answer as it streams)."""
    events = t.anthropic_events(["lo"])
    events[1]["content_block"]["text"] = "Hel"  # the text block's start
    thinking = {"type": "thinking", "thinking": "Greet", "signature": ""}
    tool = {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}}
    events[-2:-2] = [
        {"type": "content_block_start", "index": 1, "content_block": thinking},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "thinking_delta", "thinking": " them."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": tool},
        {"type": "content_block_stop", "index": 2},
    ]
    s = scripted("anthropic", t.sse_reply(t.typed_sse(events)))
    with s.client.messages.stream(model="m", max_tokens=5, messages=MESSAGES) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "thinking", "tool_use"]
    assert final.content[0].text == "Hello" and final.content[2].input == {"city": "Oslo"}
    assert final.content[1].thinking == "Greet them."
    (end,) = attempts(relay_events)
    assert end.outcome == "success"
    assert end.annotated_response.output_text == "Hello"
    assert end.annotated_response.tool_calls == [{"id": "tu_1", "name": "weather", "arguments": {"city": "Oslo"}}]
    deltas = [d for m in relay_events.marks(name=CHUNK_MARK) if (d := m.data.get("delta")) is not None]
    assert "".join(d.text or "" for d in deltas) == "Hello"
    assert "".join(d.reasoning or "" for d in deltas) == "Greet them."


@pytest.mark.parametrize("streamed", [False, True])
def test_a_legacy_function_call_is_the_attempts_tool_call(relay_turn, relay_events, scripted, streamed) -> None:
    """The chat API's function calling before tools (``functions=``) answers with ``message.function_call``, no
    id: the attempt records it as a tool call, whole or streamed in fragments, and the streamed answer the record
    holds has the ``function_call`` the same call unstreamed would."""
    call = {"name": "weather", "arguments": '{"city": "Paris"}'}
    functions = [{"name": "weather", "parameters": {"type": "object"}}]
    if streamed:
        chunks = t.chat_chunks([], finish_reason="function_call")
        fragments = [{"name": "weather", "arguments": ""}, {"arguments": '{"city": '}, {"arguments": '"Paris"}'}]
        chunks[1:1] = [
            {**chunks[0], "choices": [{"index": 0, "delta": {"function_call": f}, "finish_reason": None}]}
            for f in fragments
        ]
        s = scripted("openai", t.sse_reply(t.openai_chat_sse(chunks)))
        for _chunk in s.client.chat.completions.create(model="m", messages=MESSAGES, functions=functions, stream=True):
            pass
    else:
        body = t.chat_completion_body(None, finish_reason="function_call")
        body["choices"][0]["message"]["function_call"] = call
        s = scripted("openai", t.json_reply(body))
        s.client.chat.completions.create(model="m", messages=MESSAGES, functions=functions)
    (end,) = attempts(relay_events)
    assert end.outcome == "success"
    assert end.annotated_response.tool_calls == [{"id": None, **call}]
    assert end.annotated_response.finish_reasons == ["function_call"]
    recorded = end.output.choices[0].message.function_call
    assert (recorded.name, recorded.arguments) == (call["name"], call["arguments"])


def test_unindexed_tool_calls_of_a_compatible_server_stay_apart(relay_turn, relay_events, scripted) -> None:
    """Some OpenAI-compatible servers stream each tool call whole, without ``index``: two calls with two
    ids are two tool calls, not one named after the last with both argument texts run together."""
    chunks = t.chat_chunks([], finish_reason="tool_calls")

    def call(id: str, name: str, arguments: str) -> dict[str, Any]:
        fragment = {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
        return {**chunks[0], "choices": [{"index": 0, "delta": {"tool_calls": [fragment]}, "finish_reason": None}]}

    chunks[1:1] = [call("call_a", "f", '{"x": 1}'), call("call_b", "g", '{"y": 2}')]
    s = scripted("openai", t.sse_reply(t.openai_chat_sse(chunks)))
    for _chunk in s.client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass
    (end,) = attempts(relay_events)
    assert end.outcome == "success" and end.annotated_response.finish_reasons == ["tool_calls"]
    assert end.annotated_response.tool_calls == [
        {"id": "call_a", "name": "f", "arguments": '{"x": 1}'},
        {"id": "call_b", "name": "g", "arguments": '{"y": 2}'},
    ]


def test_a_server_tool_blocks_streamed_input_is_in_the_recorded_message(relay_turn, relay_events, scripted) -> None:
    """A server tool (web search) streams its input as input_json_delta like a tool_use: the message the
    attempt records holds that input, as the SDK's own final message does, not the start's empty ``{}``."""
    events = t.anthropic_events(["hi"])
    start = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}
    events[-2:-2] = [
        {"type": "content_block_start", "index": 1, "content_block": start},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": '},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '"oslo"}'}},
        {"type": "content_block_stop", "index": 1},
    ]
    s = scripted("anthropic", t.sse_reply(t.typed_sse(events)))
    with s.client.messages.stream(model="m", max_tokens=5, messages=MESSAGES) as stream:
        final = stream.get_final_message()
    assert final.content[1].input == {"query": "oslo"}
    (end,) = attempts(relay_events)
    assert end.outcome == "success"
    recorded = end.output.content[1]
    assert (recorded.type, recorded.id, recorded.input) == ("server_tool_use", "srv_1", {"query": "oslo"})


def test_a_responses_custom_tool_call_is_recorded_whole_and_streamed(relay_turn, relay_events, scripted) -> None:
    """A custom (freeform) tool's call is a ``custom_tool_call`` output item carrying ``input`` text: a
    tool call of the record, as the chat codec reads custom calls, both answered whole and streamed."""
    call = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "grammar", "input": "x = 1"}
    whole = t.responses_body("")
    whole["output"] = [{**call, "status": "completed"}]
    events = t.responses_events(["a"])
    events[-1]["response"]["output"] = [{**call, "status": "completed"}]
    s = scripted("openai", t.json_reply(whole), t.sse_reply(t.typed_sse(events)))
    assert s.client.responses.create(model="m", input="hi").output[0].input == "x = 1"
    for _event in s.client.responses.create(model="m", input="hi", stream=True):
        pass
    expected = [{"id": "call_1", "name": "grammar", "arguments": "x = 1"}]
    assert [e.annotated_response.tool_calls for e in attempts(relay_events)] == [expected, expected]


def test_a_responses_stream_cut_before_its_end_keeps_its_custom_tool_call(relay_turn, relay_events, scripted) -> None:
    """A stream that stops before ``response.completed`` is recorded from its pieces: a custom tool's call, its
    input streamed as ``response.custom_tool_call_input.delta``, is one of them, as a function's call is."""
    call = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "grammar", "input": "",
            "status": "in_progress"}  # fmt: skip
    events = t.responses_events(["a"])[:-1]  # no terminal event: the connection ended first
    events.append({"type": "response.output_item.added", "sequence_number": 90, "output_index": 1, "item": call})
    for n, piece in enumerate(("x = ", "1")):
        events.append({"type": "response.custom_tool_call_input.delta", "sequence_number": 91 + n,
                       "output_index": 1, "item_id": "ctc_1", "delta": piece})  # fmt: skip
    s = scripted("openai", t.sse_reply(t.typed_sse(events)))
    for _event in s.client.responses.create(model="m", input="hi", stream=True):
        pass
    (end,) = attempts(relay_events)
    assert end.annotated_response.output_text == "a"
    assert end.annotated_response.tool_calls == [{"id": "call_1", "name": "grammar", "arguments": "x = 1"}]


def test_a_text_blocks_streamed_citations_are_in_the_recorded_message(relay_turn, relay_events, scripted) -> None:
    """citations_delta events give a text block its citations: the message the attempt records keeps them,
    as the SDK's own final message does."""
    citation = {"type": "char_location", "cited_text": "Oslo", "document_index": 0, "document_title": None,
                "start_char_index": 0, "end_char_index": 4}  # fmt: skip
    events = t.anthropic_events(["Oslo"])
    events.insert(
        3, {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": citation}}
    )
    s = scripted("anthropic", t.sse_reply(t.typed_sse(events)))
    with s.client.messages.stream(model="m", max_tokens=5, messages=MESSAGES) as stream:
        final = stream.get_final_message()
    assert [c.cited_text for c in final.content[0].citations] == ["Oslo"]
    (end,) = attempts(relay_events)
    recorded = end.output.content[0]
    assert recorded.text == "Oslo" and [c.cited_text for c in recorded.citations] == ["Oslo"]


def test_a_chat_streams_id_is_its_first_non_empty_one(relay_turn, relay_events, scripted) -> None:
    """Azure OpenAI opens a chat stream with a prompt-filter chunk whose id and model are empty: the
    record's response id and created time are those of the chunks that follow, not the empty first."""
    chunks = t.chat_chunks(["a"])
    opening = {"id": "", "object": "", "created": 0, "model": "", "choices": [],
               "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]}  # fmt: skip
    s = scripted("openai", t.sse_reply(t.openai_chat_sse([opening, *chunks])))
    for _chunk in s.client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass
    (end,) = attempts(relay_events)
    assert end.outcome == "success"
    assert (end.annotated_response.id, end.annotated_response.model) == ("chatcmpl-s1", "gpt-test")
    assert (end.output.id, end.output.created) == ("chatcmpl-s1", 1700000000)
