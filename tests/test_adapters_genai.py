"""The Google Gen AI SDK through real ``google-genai`` clients on a mock transport: generate_content, its stream,
their async twins and embed_content as managed attempts, for the Gemini API and Vertex AI."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import wrapt
from genai_support import (
    GEMINI_KEY,
    LOCATION,
    MODEL,
    api_error,
    embed_body,
    gemini_client,
    response_body,
    stream_frames,
    usage,
    vertex_client,
)

from relay_runtime import AnnotatedLLMRequest, LLMRequest, LLMRequestInterceptOutcome, Recorder, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import google_genai
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.instrument import is_instrumented
from relay_runtime.neutral import UnsupportedParamError

genai_errors = pytest.importorskip("google.genai.errors")


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def only(events: Recorder) -> Any:
    found = attempts(events)
    assert len(found) == 1, [(e.outcome, e.error_type) for e in found]
    return found[0]


@pytest.fixture()
def script() -> t.Script:
    return t.Script()


@pytest.fixture()
def client(script: t.Script) -> Iterator[Any]:
    made = adapters.instrument(gemini_client(script))  # through the provider registry
    yield made
    adapters.uninstrument(made)


FULL_USAGE = usage(
    prompt=100, candidates=20, cachedContentTokenCount=60, thoughtsTokenCount=30, toolUsePromptTokenCount=7,
    promptTokensDetails=[{"modality": "TEXT", "tokenCount": 90}, {"modality": "IMAGE", "tokenCount": 10}],
)  # fmt: skip


def test_generate_content_is_one_attempt_of_one_logical_call_with_every_usage_category(
    relay_turn, relay_events, client, script
) -> None:
    script.add(t.json_reply(response_body("hello", thought="let me think", usage_metadata=FULL_USAGE)))
    response = client.models.generate_content(model=MODEL, contents="hi", config={"temperature": 0.2})
    assert response.text == "hello"
    end = only(relay_events)
    assert end.outcome == "success"
    assert end.provider == "gcp.gemini" and end.model_name == MODEL
    request = end.annotated_request
    assert (request.provider, request.operation) == ("gcp.gemini", "generate_content")
    assert request.params == {"temperature": 0.2} and request.messages == ["hi"]
    annotated = end.annotated_response
    assert annotated.output_text == "hello" and annotated.finish_reasons == ["stop"]
    assert (annotated.model, annotated.id) == ("gemini-test-flash-001", "resp-1")
    u = annotated.usage
    # The prompt holds the cached tokens; the tool-use prompt is input too; thoughts are output (and reasoning).
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens) == (107, 60, 50, 30)
    assert u.input_image_tokens == 10
    assert end.metadata[cv.SERVER_ADDRESS] == "gemini.test" and end.metadata[cv.SDK_RETRIES] == 0
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "success" and end.metadata[cv.API_REQUEST_ID] == call.metadata[cv.API_REQUEST_ID]


def test_async_generate_content_is_one_attempt(relay_turn, relay_events, client, script) -> None:
    script.add(t.json_reply(response_body("async hello", usage_metadata=usage())))
    response = asyncio.run(client.aio.models.generate_content(model=MODEL, contents="hi"))
    assert response.text == "async hello"
    end = only(relay_events)
    assert end.outcome == "success" and end.annotated_response.output_text == "async hello"
    assert end.annotated_response.usage.input_tokens == 12
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 1


def test_generate_content_stream_yields_the_sdks_chunks_and_records_the_whole_answer(
    relay_turn, relay_events, client, script
) -> None:
    script.add(t.sse_reply(stream_frames(["Hel", "lo", "!"], usage_metadata=FULL_USAGE)))
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    assert [c.text for c in chunks] == ["Hel", "lo", "!"]
    end = only(relay_events)
    assert end.outcome == "success", (end.error_type, end.error_message)
    assert end.annotated_request.stream is True
    assert end.annotated_response.output_text == "Hello!" and end.annotated_response.finish_reasons == ["stop"]
    assert end.annotated_response.usage.cache_read_tokens == 60
    assert end.output["candidates"][0]["content"]["parts"] == [{"text": "Hello!"}]
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 1


def test_a_stream_whose_last_chunk_has_no_finish_reason_is_an_incomplete_stream(
    relay_turn, relay_events, client, script
) -> None:
    script.add(t.sse_reply(stream_frames(["cut ", "sho"], finish=None)))
    texts = [c.text for c in client.models.generate_content_stream(model=MODEL, contents="hi")]
    assert texts == ["cut ", "sho"]  # the caller's iteration ends as the provider's stream did
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "IncompleteStream"
    assert end.annotated_response.output_text == "cut sho"
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "failed"  # the logical call ends as its last attempt did


def _candidates_frame(pieces: dict[int, tuple[str, str | None]], **extra: Any) -> bytes:
    """One SSE chunk holding a piece of each candidate named: index -> (text, finish reason or None)."""
    candidates = []
    for index, (text, finish) in pieces.items():
        candidate: dict[str, Any] = {"index": index, "content": {"role": "model", "parts": [{"text": text}]}}
        if finish:
            candidate["finishReason"] = finish
        candidates.append(candidate)
    return t.sse_frame({"candidates": candidates, "modelVersion": "gemini-test-flash-001", **extra})


def test_a_stream_of_several_candidates_records_each_of_them(relay_turn, relay_events, client, script) -> None:
    script.add(
        t.sse_reply(
            [
                _candidates_frame({0: ("Hel", None), 1: ("Bon", None)}),
                _candidates_frame({1: ("jour", "MAX_TOKENS")}),  # a chunk of the second candidate alone
                _candidates_frame({0: ("lo", "STOP")}, usageMetadata=usage()),
            ]
        )
    )
    config = {"candidate_count": 2}
    list(client.models.generate_content_stream(model=MODEL, contents="hi", config=config))
    end = only(relay_events)
    assert end.outcome == "success", (end.error_type, end.error_message)
    # As a whole answer records it: the first candidate's text, every candidate's finish reason.
    assert end.annotated_response.output_text == "Hello"
    assert end.annotated_response.finish_reasons == ["stop", "length"]
    texts = [c["content"]["parts"] for c in end.output["candidates"]]
    assert texts == [[{"text": "Hello"}], [{"text": "Bonjour"}]]


def test_a_stream_one_of_whose_candidates_never_finished_is_an_incomplete_stream(
    relay_turn, relay_events, client, script
) -> None:
    script.add(
        t.sse_reply([_candidates_frame({0: ("Hel", None), 1: ("Bon", None)}), _candidates_frame({0: ("lo", "STOP")})])
    )
    list(client.models.generate_content_stream(model=MODEL, contents="hi", config={"candidate_count": 2}))
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "IncompleteStream"
    assert end.annotated_response.output_text == "Hello"


def test_async_stream_and_its_incomplete_twin(relay_turn, relay_events, client, script) -> None:
    script.add(t.sse_reply(stream_frames(["a", "b"])), t.sse_reply(stream_frames(["c"], finish=None)))

    async def read() -> list[list[str]]:
        out = []
        for _ in range(2):
            stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi")
            out.append([chunk.text async for chunk in stream])
        return out

    assert asyncio.run(read()) == [["a", "b"], ["c"]]
    first, second = attempts(relay_events)
    assert first.outcome == "success" and first.annotated_response.output_text == "ab"
    assert second.outcome == "failed" and second.error_type == "IncompleteStream"


def test_a_stream_broken_off_mid_body_fails_the_attempt_and_raises_as_the_sdk_does(
    relay_turn, relay_events, client, script
) -> None:
    script.add(t.sse_reply(stream_frames(["par", "tial"]), fail_with=httpx2.ReadError("connection reset")))
    seen = []
    with pytest.raises(httpx2.ReadError):
        for chunk in client.models.generate_content_stream(model=MODEL, contents="hi"):
            seen.append(chunk.text)
    assert seen == ["par", "tial"]
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "ReadError"


def test_closing_a_stream_early_ends_the_attempt_and_its_logical_call(relay_turn, relay_events, client, script):
    script.add(t.sse_reply(stream_frames(["one", "two", "three"])))
    stream = client.models.generate_content_stream(model=MODEL, contents="hi")
    assert next(stream).text == "one"
    stream.close()
    end = only(relay_events)
    assert end.outcome == "cancelled"
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 1


def test_an_async_stream_closed_early_ends_its_logical_call_cancelled_not_succeeded(
    relay_turn, relay_events, client, script
) -> None:
    script.add(t.sse_reply(stream_frames(["one", "two", "three"])))

    async def read_one() -> tuple[str, list[str]]:
        stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi")
        first = await stream.__anext__()
        await stream.aclose()  # the SDK's generator is closed; the loop would close the request inside it later
        return first.text, [e.metadata[cv.KIND] for e in relay_events.ends()]

    # Closed with the stream, the attempt ends before the call it is part of, as a read-out stream's does.
    assert asyncio.run(read_one()) == ("one", [cv.ATTEMPT, cv.LOGICAL_CALL])
    assert only(relay_events).outcome == "cancelled"
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "cancelled"


def test_an_async_stream_left_by_break_ends_its_attempt_before_its_logical_call_while_the_loop_runs(
    relay_turn, relay_events, client, script
) -> None:
    """``async for ... break`` never closes the iterator: dropped, the public stream cancels its call, and the
    attempt under it must end then too (cancelled, first), not when the loop finalizes the SDK's generator."""
    script.add(t.sse_reply(stream_frames(["one", "two", "three"])))

    async def read_one() -> list[tuple[str, str]]:
        async for _ in await client.aio.models.generate_content_stream(model=MODEL, contents="hi"):
            break
        gc.collect()
        return [(e.metadata[cv.KIND], e.outcome) for e in relay_events.ends()]

    cancelled = "cancelled"
    assert asyncio.run(read_one()) == [(cv.ATTEMPT, cancelled), (cv.LOGICAL_CALL, cancelled)]
    assert only(relay_events).outcome == cancelled


def test_a_stream_dropped_unread_ends_its_logical_call_cancelled_before_the_turn_ends(
    relay_turn, relay_events, client, script
) -> None:
    script.add(t.sse_reply(stream_frames(["one", "two", "three"])))
    stream = client.models.generate_content_stream(model=MODEL, contents="hi")
    assert next(stream).text == "one"
    del stream  # garbage: the turn, still open, would otherwise close the call with its own outcome
    gc.collect()
    assert only(relay_events).outcome == "cancelled"
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "cancelled"


def test_a_stream_dropped_before_its_first_chunk_ends_its_logical_call_cancelled(relay_turn, relay_events, client):
    stream = client.models.generate_content_stream(model=MODEL, contents="hi")
    del stream  # never read: no request was sent, and its logical call must not wait for the turn's end
    gc.collect()
    assert attempts(relay_events) == []
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "cancelled"


def test_a_stream_closed_early_ends_its_attempt_before_its_logical_call(relay_turn, relay_events, client, script):
    script.add(t.sse_reply(stream_frames(["one", "two", "three"])))
    stream = client.models.generate_content_stream(model=MODEL, contents="hi")
    next(stream)
    stream.close()
    assert [(e.metadata[cv.KIND], e.outcome) for e in relay_events.ends()] == [
        (cv.ATTEMPT, "cancelled"),
        (cv.LOGICAL_CALL, "cancelled"),
    ]


def test_a_call_made_between_a_streams_chunks_is_a_logical_call_of_its_own(relay_turn, relay_events, client, script):
    """The stream's logical call is current only while its source runs: the caller's code between two chunks is
    outside it."""
    script.add(t.sse_reply(stream_frames(["one", "two"])), t.json_reply(response_body("other")))
    stream = client.models.generate_content_stream(model=MODEL, contents="hi")
    assert next(stream).text == "one"
    assert client.models.generate_content(model=MODEL, contents="other").text == "other"
    assert [chunk.text for chunk in stream] == ["two"]
    calls = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert [c.outcome for c in calls] == ["success", "success"]
    ids = [a.metadata[cv.API_REQUEST_ID] for a in attempts(relay_events)]
    assert sorted(ids) == sorted(c.metadata[cv.API_REQUEST_ID] for c in calls) and len(set(ids)) == 2


def test_function_calls_are_tool_calls(relay_turn, relay_events, client, script) -> None:
    call = {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}}
    script.add(t.json_reply(response_body(None, calls=[call])), t.sse_reply(stream_frames(["x"], calls=[call])))
    tools = [{"function_declarations": [{"name": "get_weather", "parameters": {"type": "OBJECT"}}]}]
    client.models.generate_content(model=MODEL, contents="weather?", config={"tools": tools})
    list(client.models.generate_content_stream(model=MODEL, contents="weather?", config={"tools": tools}))
    plain, streamed = attempts(relay_events)
    expected = [{"id": "fc-1", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert plain.annotated_response.tool_calls == expected and streamed.annotated_response.tool_calls == expected
    assert plain.annotated_response.finish_reasons == ["tool_call"] == streamed.annotated_response.finish_reasons
    assert plain.annotated_request.tools is not None and len(plain.annotated_request.tools) == 1


@pytest.mark.parametrize(
    ("reason", "mapped"),
    [("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
     ("PROHIBITED_CONTENT", "content_filter"), ("MALFORMED_FUNCTION_CALL", "error"), ("OTHER", "other")],
)  # fmt: skip
def test_finish_reasons_are_mapped(relay_turn, relay_events, client, script, reason: str, mapped: str) -> None:
    script.add(t.json_reply(response_body("x", finish=reason)))
    client.models.generate_content(model=MODEL, contents="hi")
    assert only(relay_events).annotated_response.finish_reasons == [mapped]


def test_a_prompt_blocked_for_safety_is_a_content_filter(relay_turn, relay_events, client, script) -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage(candidates=0)}
    script.add(t.json_reply(blocked), t.sse_reply([t.sse_frame(blocked)]))
    response = client.models.generate_content(model=MODEL, contents="bad")
    assert response.text is None
    assert [c.text for c in client.models.generate_content_stream(model=MODEL, contents="bad")] == [None]
    plain, streamed = attempts(relay_events)
    assert plain.outcome == "success" and plain.annotated_response.finish_reasons == ["content_filter"]
    # The block ends the stream: it is no cut-off stream.
    assert streamed.outcome == "success" and streamed.annotated_response.finish_reasons == ["content_filter"]


def test_a_provider_error_is_raised_and_recorded_with_its_status(relay_turn, relay_events, client, script) -> None:
    script.add(api_error(400, "INVALID_ARGUMENT", "bad request"))
    with pytest.raises(genai_errors.ClientError):
        client.models.generate_content(model=MODEL, contents="hi")
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "INVALID_ARGUMENT"
    assert end.metadata[cv.SDK_RETRIES] == 0
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "failed"


def test_the_sdks_own_retries_are_counted_on_the_attempt(relay_turn, relay_events, script) -> None:
    client = google_genai.instrument_client(gemini_client(script, retries=3))
    script.add(api_error(503, "UNAVAILABLE"), api_error(429, "RESOURCE_EXHAUSTED"),
               t.json_reply(response_body("third time")))  # fmt: skip
    assert client.models.generate_content(model=MODEL, contents="hi").text == "third time"
    end = only(relay_events)
    assert end.outcome == "success" and end.metadata[cv.SDK_RETRIES] == 2
    assert len(script.requests) == 3


def test_throttling_past_the_retries_fails_as_throttling(relay_turn, relay_events, script) -> None:
    client = google_genai.instrument_client(gemini_client(script, retries=1))
    script.add(api_error(429, "RESOURCE_EXHAUSTED"), api_error(429, "RESOURCE_EXHAUSTED"))

    async def call() -> None:
        await client.aio.models.generate_content(model=MODEL, contents="hi")

    with pytest.raises(genai_errors.ClientError):
        asyncio.run(call())
    end = only(relay_events)
    assert end.error_type == "RESOURCE_EXHAUSTED" and end.metadata[cv.SDK_RETRIES] == 1


def test_a_call_the_sdk_refuses_before_sending_is_marked_unsent(relay_turn, relay_events, client, script) -> None:
    with pytest.raises(ValueError):
        client.models.generate_content(model=MODEL, contents="hi", config={"should_return_http_response": True,
                                                                            "response_schema": object()})  # fmt: skip
    assert script.requests == []
    ends = attempts(relay_events)
    assert all(e.metadata.get(cv.SENT) is False for e in ends)


def test_vertex_ai_clients_are_named_for_vertex_with_their_region(relay_turn, relay_events, script) -> None:
    client = google_genai.instrument_client(vertex_client(script))
    script.add(t.json_reply(response_body("from vertex")))
    client.models.generate_content(model=MODEL, contents="hi")
    end = only(relay_events)
    assert end.provider == "gcp.vertex_ai" and end.annotated_request.provider == "gcp.vertex_ai"
    assert end.metadata[cv.CLOUD_REGION] == LOCATION
    assert f"/locations/{LOCATION}/publishers/google/models/{MODEL}:generateContent" in str(script.requests[0].url)


def test_a_provider_named_by_the_caller_wins(relay_turn, relay_events, script) -> None:
    client = adapters.instrument(gemini_client(script), provider="gcp.gen_ai")
    script.add(t.json_reply(response_body()))
    client.models.generate_content(model=MODEL, contents="hi")
    assert only(relay_events).annotated_request.provider == "gcp.gen_ai"
    with pytest.raises(ValueError, match="instrumented already"):
        adapters.instrument(client)


def test_embed_content_is_an_embeddings_attempt_with_dimensions(relay_turn, relay_events, client, script) -> None:
    script.add(t.json_reply(embed_body(vectors=2, dims=16)))
    result = client.models.embed_content(model="text-embedding-004", contents=["a", "b"],
                                         config={"output_dimensionality": 16})  # fmt: skip
    assert len(result.embeddings) == 2
    end = only(relay_events)
    assert end.annotated_request.operation == "embeddings" and end.annotated_request.messages == ["a", "b"]
    assert end.annotated_request.provider_params == {"output_dimensionality": 16}
    assert end.annotated_response.embedding_dimensions == 16
    assert end.annotated_response.usage.output_tokens is None


def test_vertex_embeddings_count_their_input_tokens(relay_turn, relay_events, script) -> None:
    client = google_genai.instrument_client(vertex_client(script))
    stats = {"token_count": 5, "truncated": False}
    body = {"predictions": [{"embeddings": {"values": [0.1] * 4, "statistics": stats}}] * 2, "metadata": {}}
    script.add(t.json_reply(body))
    asyncio.run(client.aio.models.embed_content(model="text-embedding-005", contents=["a", "b"]))
    end = only(relay_events)
    assert end.annotated_response.usage.input_tokens == 10 and end.annotated_response.embedding_dimensions == 4


def _intercept(relay: Any, edit: Any) -> None:
    def intercept(_name: str, request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        return LLMRequestInterceptOutcome(edit(request, annotated), annotated)

    relay.intercepts.register_llm_request("genai-edit", 1, False, intercept)


def test_intercepts_rewrite_the_request_through_the_neutral_view(relay_turn, relay_events, client, script) -> None:
    relay, _turn = relay_turn

    def edit(request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequest:
        annotated.params["max_tokens"] = 7
        annotated.params["stop"] = "END"
        annotated.system = "Be brief."
        annotated.model = "gemini-other"
        annotated.messages = [*annotated.messages, "and one more thing"]
        return request.replace(headers={"x-relay-tag": "edited"})

    _intercept(relay, edit)
    script.add(t.json_reply(response_body()))
    try:
        from google.genai import types

        client.models.generate_content(model=MODEL, contents="hi", config=types.GenerateContentConfig(temperature=0.5))
    finally:
        relay.intercepts.deregister_llm_request("genai-edit")
    sent = script.requests[0]
    assert "gemini-other:generateContent" in str(sent.url)
    body = json.loads(sent.content)
    assert body["generationConfig"] == {"temperature": 0.5, "maxOutputTokens": 7, "stopSequences": ["END"]}
    assert body["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    # The SDK makes a list of strings one user turn of several parts.
    assert [p["text"] for c in body["contents"] for p in c["parts"]] == ["hi", "and one more thing"]
    assert sent.headers["x-relay-tag"] == "edited" and sent.headers["x-goog-api-key"] == GEMINI_KEY
    assert only(relay_events).outcome == "success"


def test_a_param_gemini_cannot_take_is_refused_before_sending(relay_turn, relay_events, client, script) -> None:
    relay, _turn = relay_turn

    def edit(request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequest:
        assert annotated.accepts("top_k") and not annotated.accepts("parallel_tool_calls")
        annotated.params["parallel_tool_calls"] = False
        return request

    _intercept(relay, edit)
    try:
        with pytest.raises(UnsupportedParamError, match="parallel_tool_calls"):
            client.models.generate_content(model=MODEL, contents="hi")
    finally:
        relay.intercepts.deregister_llm_request("genai-edit")
    assert script.requests == []


def test_without_a_turn_the_call_goes_straight_through(relay_events, client, script) -> None:
    script.add(t.json_reply(response_body("direct")))
    assert client.models.generate_content(model=MODEL, contents="hi").text == "direct"
    assert attempts(relay_events) == []


def test_uninstrument_client_restores_it_and_other_clients_are_untouched(relay_turn, relay_events, script) -> None:
    traced, other = gemini_client(script), gemini_client(script)
    adapters.instrument(traced)
    assert is_instrumented(traced) and not is_instrumented(other)
    script.add(*(t.json_reply(response_body()) for _ in range(3)))
    other.models.generate_content(model=MODEL, contents="hi")
    traced.models.generate_content(model=MODEL, contents="hi")
    adapters.uninstrument(traced)
    assert "generate_content" not in vars(traced.models) and not is_instrumented(traced)
    traced.models.generate_content(model=MODEL, contents="hi")
    assert len(attempts(relay_events)) == 1


def test_uninstrumenting_the_last_instrumented_client_puts_the_sdks_chats_and_tool_function_back(script) -> None:
    """The chat and automatic-function-calling hooks are module-wide: they stay while any client is traced, and go
    with the last one, as they go with ``uninstrument()`` of the classes."""
    from google.genai import _extra_utils, chats

    gc.collect()  # clients earlier tests instrumented and dropped
    assert not google_genai._instrumented and not google_genai.classes_instrumented()
    first, second = gemini_client(script), gemini_client(script)
    google_genai.instrument_client(first)
    google_genai.instrument_client(second)
    google_genai.uninstrument_client(first)
    assert isinstance(vars(chats.Chat)["send_message"], wrapt.FunctionWrapper)  # the second is still traced
    google_genai.uninstrument_client(second)
    assert not isinstance(vars(chats.AsyncChat)["send_message_stream"], wrapt.FunctionWrapper)
    assert getattr(_extra_utils.invoke_function_from_dict_args, "__module__", None) == _extra_utils.__name__


def test_instrument_classes_traces_clients_made_after_and_both_at_once_make_one_attempt(
    relay_turn, relay_events, script
) -> None:
    done = adapters.instrument()  # every provider SDK installed, google-genai's among them
    try:
        assert "google.genai.models.Models._generate_content" in done and google_genai.classes_instrumented()
        script.add(*(t.json_reply(response_body()) for _ in range(3)))
        made_after = gemini_client(script)
        made_after.models.generate_content(model=MODEL, contents="hi")
        google_genai.instrument_client(made_after)  # both on: still one attempt per call
        made_after.models.generate_content(model=MODEL, contents="hi")
    finally:
        adapters.uninstrument()
        adapters.uninstrument(made_after)
    assert len(attempts(relay_events)) == 2
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 2
    fresh = gemini_client(script)  # held: a dropped Client closes its HTTP client
    fresh.models.generate_content(model=MODEL, contents="hi")
    assert len(attempts(relay_events)) == 2  # undone


def test_an_sdk_version_lacking_a_method_is_traced_without_it_after_one_warning(
    relay_turn, relay_events, script, monkeypatch
) -> None:
    from google.genai.models import Models

    from relay_runtime.adapters import wrapping

    monkeypatch.delattr(Models, "_embed_content")  # as if a release had renamed it
    monkeypatch.setattr(wrapping, "_warned", set())
    with pytest.warns(wrapping.UnknownSDKWarning, match="Models._embed_content"):
        client = adapters.instrument(gemini_client(script))
    try:
        assert "_embed_content" not in vars(client.models)
        script.add(t.json_reply(response_body("still traced")))
        assert client.models.generate_content(model=MODEL, contents="hi").text == "still traced"
        assert only(relay_events).outcome == "success"
    finally:
        adapters.uninstrument(client)
