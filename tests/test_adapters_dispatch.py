"""adapters.complete / acomplete / stream / astream through real SDK clients inside a managed turn."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from relay_runtime import LLMRequestInterceptOutcome, Recorder, adapters, auxiliary, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.events import FIELDS, Event

# The ``oa`` / ``an`` fixtures: scripted OpenAI and Anthropic clients.
pytest_plugins = ["adapters_support"]


def attempt_ends(events: Recorder) -> list[Event]:
    return events.ends(relay_kind=cv.ATTEMPT)


def only_attempt(events: Recorder) -> Event:
    ends = attempt_ends(events)
    assert len(ends) == 1, [e.name for e in ends]
    return ends[0]


def logical_outcomes(events: Recorder) -> list[Any]:
    return [(e.output or {}).get("outcome") for e in events.ends(relay_kind=cv.LOGICAL_CALL)]


def assert_no_secret(events: Recorder) -> None:
    for event in events:
        for name in FIELDS:
            assert t.TEST_KEY not in repr(getattr(event, name)), name


# -- non-streamed ------------------------------------------------------------------------


def test_chat_completion_records_attempt_with_usage_and_sdk_retries(relay_turn, relay_events, oa) -> None:
    oa.add(
        t.error(500),
        t.json_reply(
            t.chat_completion_body("hi there", model="gpt-served", usage=t.chat_usage(11, 3, cached=4, reasoning=2))
        ),
    )
    response = adapters.complete(oa.client, {"model": "gpt-asked", "messages": [{"role": "user", "content": "q"}]})

    assert response.choices[0].message.content == "hi there"
    assert len(oa.script.requests) == 2  # the SDK retried the 500 itself
    attempt = only_attempt(relay_events)
    assert attempt.provider == "openai" and attempt.model_name == "gpt-asked"
    assert attempt.outcome == "success"
    assert attempt.metadata[cv.SDK_RETRIES] == 1
    assert attempt.metadata[cv.CALL_ROLE] == "primary" and attempt.metadata[cv.RETRY_COUNT] == 0
    assert attempt.metadata[cv.SERVER_ADDRESS] == "openai.test"
    annotation = attempt.annotated_response
    assert annotation.model == "gpt-served" and annotation.finish_reasons == ["stop"]
    assert annotation.usage.as_dict() == {
        "input_tokens": 11,
        "output_tokens": 3,
        "cache_read_tokens": 4,
        "reasoning_tokens": 2,
    }
    assert attempt.annotated_request.messages == [{"role": "user", "content": "q"}]
    assert logical_outcomes(relay_events) == ["success"]
    assert_no_secret(relay_events)


def test_sdk_retries_is_zero_without_retries_and_counts_each_retry(relay_turn, relay_events, oa) -> None:
    oa.add(t.json_reply(t.chat_completion_body("a")))
    adapters.complete(oa.client, {"model": "m", "messages": []})
    oa.add(t.error(503), t.error(502), t.json_reply(t.chat_completion_body("b")))
    adapters.complete(oa.client, {"model": "m", "messages": []})
    assert [e.metadata[cv.SDK_RETRIES] for e in attempt_ends(relay_events)] == [0, 2]


def test_provider_error_propagates_and_fails_the_attempt(relay_turn, relay_events, oa) -> None:
    oa.add(t.error(400, "bad model"))
    with pytest.raises(openai.BadRequestError) as caught:
        adapters.complete(oa.client, {"model": "nope", "messages": []})
    assert "bad model" in str(caught.value)
    attempt = only_attempt(relay_events)
    assert attempt.outcome == "failed" and attempt.error_type == "BadRequestError"
    assert attempt.metadata[cv.SDK_RETRIES] == 0  # a 400 is not retried by the SDK
    assert logical_outcomes(relay_events) == ["failed"]


def test_retries_exhausted_records_every_sdk_retry_on_the_failed_attempt(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(t.error(500), t.error(500), max_retries=1)
    with pytest.raises(openai.InternalServerError):
        adapters.complete(scripted.client, {"model": "m", "messages": []})
    attempt = only_attempt(relay_events)
    assert attempt.outcome == "failed" and attempt.metadata[cv.SDK_RETRIES] == 1


@pytest.mark.asyncio
async def test_async_responses_api_by_api_mode(relay_turn, relay_events, oa) -> None:
    oa.add(
        t.error(500),
        t.json_reply(t.responses_body("done", model="gpt-r", usage=t.responses_usage(8, 2, cached=5, reasoning=1))),
    )
    response = await adapters.acomplete(
        oa.aclient, {"model": "gpt-r", "input": "hi", "instructions": "sys"}, api_mode="responses"
    )
    assert response.output_text == "done"
    assert oa.script.requests[-1].url.path == "/v1/responses"
    attempt = only_attempt(relay_events)
    assert attempt.metadata[cv.SDK_RETRIES] == 1
    assert attempt.annotated_request.operation == "responses" and attempt.annotated_request.system == "sys"
    assert attempt.annotated_response.usage.cache_read_tokens == 5
    assert attempt.annotated_response.finish_reasons == ["completed"]


def test_anthropic_client_dispatches_to_messages(relay_turn, relay_events, an) -> None:
    an.add(
        t.error(529),
        t.json_reply(
            t.anthropic_message_body("bonjour", usage=t.anthropic_usage(40, 6, cache_read=30, cache_creation=2))
        ),
    )
    message = adapters.complete(
        an.client,
        {"model": "claude-x", "max_tokens": 20, "system": "sys", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert message.content[0].text == "bonjour"
    attempt = only_attempt(relay_events)
    assert attempt.provider == "anthropic" and attempt.metadata[cv.SDK_RETRIES] == 1
    assert attempt.annotated_request.system == "sys"
    assert attempt.annotated_response.usage.as_dict() == {
        "input_tokens": 40,
        "output_tokens": 6,
        "cache_read_tokens": 30,
        "cache_creation_tokens": 2,
    }
    assert attempt.annotated_response.finish_reasons == ["end_turn"]


@pytest.mark.asyncio
async def test_async_anthropic_many_tasks_keep_their_own_counts(relay_turn, relay_events, an) -> None:
    # Each task's retry count is its own, though all share one client and one hook.
    an.add(*[t.json_reply(t.anthropic_message_body(f"r{i}")) for i in range(8)])
    results = await asyncio.gather(
        *[adapters.acomplete(an.aclient, {"model": "claude-x", "max_tokens": 5, "messages": []}) for _ in range(8)]
    )
    assert sorted(r.content[0].text for r in results) == sorted(f"r{i}" for i in range(8))
    ends = attempt_ends(relay_events)
    assert len(ends) == 8 and all(e.metadata[cv.SDK_RETRIES] == 0 for e in ends)
    assert logical_outcomes(relay_events) == ["success"] * 8


def test_request_intercept_edits_reach_the_http_body_and_headers(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn

    def edit(_name, request, annotated):
        annotated.params["temperature"] = 0.25
        del annotated.params["top_p"]
        return LLMRequestInterceptOutcome(request.replace(headers={"x-relay-test": "yes"}), annotated)

    relay.intercepts.register_llm_request("edit", 1, False, edit)
    try:
        oa.add(t.json_reply(t.chat_completion_body()))
        adapters.complete(
            oa.client,
            {"model": "m", "messages": [], "temperature": 1.0, "top_p": 0.5, "extra_headers": {"x-caller": "kept"}},
        )
    finally:
        relay.intercepts.deregister_llm_request("edit")
    body = oa.script.bodies()[0]
    assert body["temperature"] == 0.25 and "top_p" not in body
    sent = oa.script.requests[0].headers
    assert sent["x-relay-test"] == "yes" and sent["x-caller"] == "kept"


def test_unmanaged_without_a_turn_calls_the_sdk_and_emits_nothing(relay_host, relay_events, oa) -> None:
    oa.add(t.json_reply(t.chat_completion_body("plain")))
    response = adapters.complete(oa.client, {"model": "m", "messages": []})
    assert response.choices[0].message.content == "plain"
    assert len(relay_events) == 0


def test_route_names_the_provider_inside_an_auxiliary_call(relay_turn, relay_events, an) -> None:
    an.add(t.json_reply(t.anthropic_message_body("titled")))

    @auxiliary.auxiliary_call
    def title(task: str) -> Any:
        auxiliary.set_route("anthropic-proxy", "claude-x", "anthropic_messages")
        return auxiliary.validate_response(
            adapters.complete(an.client, {"model": "claude-x", "max_tokens": 9, "messages": []}), task
        )

    assert title("title_generation").content[0].text == "titled"
    attempt = only_attempt(relay_events)
    assert attempt.provider == "anthropic-proxy"
    assert attempt.metadata[cv.CALL_ROLE] == "auxiliary:title_generation"
    assert logical_outcomes(relay_events) == ["success"]


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="SDK kwargs must be a mapping, got list"):
        adapters.complete(object(), [("model", "m")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot tell which LLM API object speaks"):
        adapters.complete(object(), {"model": "m"})
    with pytest.raises(ValueError, match="unknown api_mode 'completions'"):
        adapters.complete(object(), {"model": "m"}, api_mode="completions")
    scripted = t.scripted_anthropic()
    with pytest.raises(TypeError, match=r"Anthropic has no chat\.completions\.create\(\)"):
        adapters.complete(scripted.client, {"model": "m"}, api_mode="chat_completions")


def test_sdk_retries_are_counted_per_provider_call_when_an_execution_intercept_calls_twice(
    relay_turn, relay_events, oa
):
    relay, _turn = relay_turn
    oa.add(t.error(500), t.json_reply(t.chat_completion_body("first")), t.json_reply(t.chat_completion_body("again")))

    def twice(name: str, request: Any, call_next: Any) -> Any:
        call_next(request)
        return call_next(request)

    relay.intercepts.register_llm_execution("twice", 0, twice)
    try:
        response = adapters.complete(oa.client, {"model": "gpt", "messages": []})
    finally:
        relay.intercepts.deregister_llm_execution("twice")
    assert response.choices[0].message.content == "again" and len(oa.script.requests) == 3
    # Each provider call is an attempt, with the SDK retries it made itself.
    ends = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [(e.metadata[cv.SDK_RETRIES], e.annotated_response.output_text) for e in ends] == [
        (1, "first"),
        (0, "again"),
    ]


def test_sdk_retries_without_a_stamp_counts_tries(relay_turn, relay_events, oa) -> None:
    # A proxy in front of the SDK may drop the stamp: each try past the first is then one retry.
    def drop_stamp(request: Any) -> None:
        del request.headers["x-stainless-retry-count"]

    oa.client._client.event_hooks["request"].insert(0, drop_stamp)
    oa.add(t.error(500), t.error(502), t.json_reply(t.chat_completion_body("ok")))
    oa.client.max_retries = 2
    adapters.complete(oa.client, {"model": "gpt", "messages": []})
    assert len(oa.script.requests) == 3 and not any("x-stainless-retry-count" in r.headers for r in oa.script.requests)
    assert only_attempt(relay_events).metadata[cv.SDK_RETRIES] == 2


# -- streams ---------------------------------------------------------------------------------


def test_chat_stream_yields_sdk_chunks_and_records_the_accumulated_response(relay_turn, relay_events, oa) -> None:
    chunks = t.chat_chunks(["Hel", "lo"], model="gpt-s", usage=t.chat_usage(5, 2, cached=1))
    oa.add(t.error(500), t.sse_reply(t.openai_chat_sse(chunks)))
    stream = adapters.stream(oa.client, {"model": "gpt-s", "messages": [], "stream_options": {"include_usage": True}})
    got = list(stream)
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in got) and len(got) == len(chunks)
    assert oa.script.bodies()[-1]["stream"] is True

    attempt = only_attempt(relay_events)
    assert attempt.outcome == "success" and attempt.metadata[cv.SDK_RETRIES] == 1
    annotation = attempt.annotated_response
    assert annotation.output_text == "Hello" and annotation.finish_reasons == ["stop"]
    assert annotation.usage.as_dict() == {
        "input_tokens": 5,
        "output_tokens": 2,
        "cache_read_tokens": 1,
        "reasoning_tokens": 0,
    }
    assert annotation.time_to_first_chunk_ns is not None and annotation.time_to_first_chunk_ns > 0
    marks = relay_events.marks(name=cv.CHUNK)
    assert [m.data["chunk"] for m in marks] == got
    assert "".join(m.data["delta"].text for m in marks if m.data["delta"]) == "Hello"
    assert logical_outcomes(relay_events) == ["success"]


def test_responses_stream_through_the_route(relay_turn, relay_events, oa) -> None:
    events = t.responses_events(["a", "b"], model="gpt-r", usage=t.responses_usage(3, 4, reasoning=2))
    oa.add(t.sse_reply(t.typed_sse(events)))

    @auxiliary.auxiliary_call
    def run(task: str) -> list[Any]:
        auxiliary.set_route("azure", "gpt-r", "responses")
        return list(adapters.stream(oa.client, {"model": "gpt-r", "input": "hi"}))

    assert [e.type for e in run("moa")][-1] == "response.completed"
    attempt = only_attempt(relay_events)
    assert attempt.provider == "azure" and attempt.metadata[cv.CALL_ROLE] == "auxiliary:moa"
    assert attempt.annotated_response.output_text == "ab"
    assert attempt.annotated_response.usage.reasoning_tokens == 2


@pytest.mark.asyncio
async def test_async_anthropic_stream(relay_turn, relay_events, an) -> None:
    events = t.anthropic_events(["x", "y"], thinking="hmm", output_tokens=12)
    an.add(t.error(500), t.sse_reply(t.typed_sse(events)))
    stream = await adapters.astream(an.aclient, {"model": "claude-x", "max_tokens": 50, "messages": []})
    kinds = [event.type async for event in stream]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    attempt = only_attempt(relay_events)
    assert attempt.outcome == "success" and attempt.metadata[cv.SDK_RETRIES] == 1
    annotation = attempt.annotated_response
    assert annotation.output_text == "xy" and annotation.usage.output_tokens == 12
    assert annotation.time_to_first_chunk_ns is not None
    reasoning = [m.data["delta"].reasoning for m in relay_events.marks(name=cv.CHUNK) if m.data["delta"]]
    assert "".join(reasoning) == "hmm"


@pytest.mark.asyncio
async def test_async_chat_stream(relay_turn, relay_events, oa) -> None:
    oa.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["as", "ync"]))))
    stream = await adapters.astream(oa.aclient, {"model": "m", "messages": []})
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "async"
    assert only_attempt(relay_events).annotated_response.output_text == "async"


class StreamCut(Exception):
    pass


def test_stream_failing_after_its_first_chunk_reraises_the_same_error(relay_turn, relay_events, oa) -> None:
    cut = StreamCut("connection reset mid-stream")
    frames = t.openai_chat_sse(t.chat_chunks(["partial", "never"]))
    oa.add(t.sse_reply(frames[:2], fail_with=cut))
    stream = adapters.stream(oa.client, {"model": "m", "messages": []})
    first = next(stream)
    assert first.model == "gpt-test"
    with pytest.raises(StreamCut) as caught:
        for _ in stream:
            pass
    assert caught.value is cut
    attempt = only_attempt(relay_events)
    assert attempt.outcome == "failed" and attempt.error_type == "StreamCut"
    assert logical_outcomes(relay_events) == ["failed"]


@pytest.mark.asyncio
async def test_async_stream_failing_after_first_chunk(relay_turn, relay_events, an) -> None:
    cut = StreamCut("gone")
    an.add(t.sse_reply(t.typed_sse(t.anthropic_events(["a", "b"]))[:3], fail_with=cut))
    stream = await adapters.astream(an.aclient, {"model": "claude-x", "max_tokens": 5, "messages": []})
    seen = []
    # The SDK's own error reaches the caller: the cut itself, or (anthropic 2.17 on) the SDK's wrapper of it.
    with pytest.raises((StreamCut, anthropic.APIConnectionError)) as caught:
        async for event in stream:
            seen.append(event.type)
    assert cut in (caught.value, caught.value.__cause__) and seen[0] == "message_start"
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert attempt.outcome == "failed" and attempt.error_type == type(caught.value).__name__


def test_closing_a_stream_early_cancels_the_attempt(relay_turn, relay_events, oa) -> None:
    oa.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b", "c"]))))
    stream = adapters.stream(oa.client, {"model": "m", "messages": []})
    next(stream)
    stream.close()
    assert stream.response.is_closed  # the SDK's own stream (and its HTTP response) was closed too
    assert only_attempt(relay_events).outcome == "cancelled"
    assert logical_outcomes(relay_events) == ["cancelled"]


def test_breaking_out_of_a_stream_cancels_once_collected(relay_turn, relay_events, oa) -> None:
    oa.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b", "c"]))))
    stream = adapters.stream(oa.client, {"model": "m", "messages": []})
    for _chunk in stream:
        break
    del stream, _chunk
    gc.collect()
    assert only_attempt(relay_events).outcome == "cancelled"


@pytest.mark.asyncio
async def test_aclose_cancels_an_async_stream(relay_turn, relay_events, oa) -> None:
    oa.add(t.sse_reply(t.typed_sse(t.responses_events(["a", "b"]))))
    stream = await adapters.astream(oa.aclient, {"model": "m", "input": "x"}, api_mode="responses")
    await stream.__anext__()
    await stream.aclose()
    assert only_attempt(relay_events).outcome == "cancelled"


def test_session_reset_between_tests_leaves_no_active_turn() -> None:
    assert session.active_turn() is None


def test_server_address_comes_from_the_clients_base_url() -> None:
    import anthropic
    import httpx2

    assert adapters.dispatch.server_address(t.openai_client(t.Script())) == "openai.test"
    client = anthropic.Anthropic(
        api_key=t.TEST_KEY, base_url="https://llm.internal:8443/v1", http_client=httpx2.Client()
    )
    assert adapters.dispatch.server_address(client) == "llm.internal:8443"
    assert adapters.dispatch.server_address(object()) is None


def test_server_address_follows_a_client_whose_base_url_changes() -> None:
    # The address of the last URL seen is remembered; a new URL (the SDKs' base_url setter
    # makes one) or another client must never get the remembered one.
    import httpx2

    client = t.openai_client(t.Script())
    assert adapters.dispatch.server_address(client) == "openai.test"
    assert adapters.dispatch.server_address(client) == "openai.test"
    client.base_url = "http://127.0.0.1:8081/v1"
    assert adapters.dispatch.server_address(client) == "127.0.0.1:8081"
    other = t.openai_client(t.Script())
    other.base_url = httpx2.URL("https://other.test/v1")
    assert adapters.dispatch.server_address(other) == "other.test"
    assert adapters.dispatch.server_address(client) == "127.0.0.1:8081"

    class Url:  # a mutable stand-in is read afresh every time
        host, port = "a.test", None

    class Duck:
        base_url = Url()

    duck = Duck()
    assert adapters.dispatch.server_address(duck) == "a.test"
    Url.host = "b.test"
    assert adapters.dispatch.server_address(duck) == "b.test"


class _GatedBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """An SSE body that sends its first frames, then waits (the reader blocked in next()) until let go."""

    def __init__(self, frames: list[bytes], before_gate: int) -> None:
        self.frames, self.before_gate = frames, before_gate
        self.waiting, self.let_go = threading.Event(), threading.Event()
        self.closed = False

    def __iter__(self) -> Any:
        for i, frame in enumerate(self.frames):
            if i == self.before_gate:
                self.waiting.set()
                self.let_go.wait(5)
            yield frame

    async def __aiter__(self) -> Any:
        for i, frame in enumerate(self.frames):
            if i == self.before_gate:
                self.waiting.set()
                while not self.let_go.is_set():
                    await asyncio.sleep(0.01)
            yield frame

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


def _gated_client(body: _GatedBody, *, is_async: bool) -> Any:
    script = t.Script()
    script.handler = lambda _request: httpx2.Response(  # type: ignore[method-assign]
        200, headers={"content-type": "text/event-stream"}, stream=body
    )
    return t.async_openai_client(script, max_retries=0) if is_async else t.openai_client(script, max_retries=0)


def test_closing_a_stream_from_another_thread_while_it_is_read(relay_turn, relay_events) -> None:
    # One thread reads (blocked inside next(), waiting for the provider), another closes: close()
    # returns, the HTTP response is closed, the attempt ends cancelled once, and the reader stops.
    body = _GatedBody(t.openai_chat_sse(t.chat_chunks(["a", "b", "c", "d"])), before_gate=2)
    stream = adapters.stream(_gated_client(body, is_async=False), {"model": "m", "messages": []})
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _chunk in stream:
                pass
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert body.waiting.wait(5)
    stream.close()
    assert body.closed and stream.response.is_closed
    body.let_go.set()
    reader.join(5)
    assert not reader.is_alive() and errors == []  # the reader's loop just ends
    assert only_attempt(relay_events).outcome == "cancelled"
    assert logical_outcomes(relay_events) == ["cancelled"]


@pytest.mark.asyncio
async def test_aclosing_a_stream_from_another_task_while_it_is_read(relay_turn, relay_events) -> None:
    body = _GatedBody(t.openai_chat_sse(t.chat_chunks(["a", "b", "c", "d"])), before_gate=2)
    stream = await adapters.astream(_gated_client(body, is_async=True), {"model": "m", "messages": []})

    async def reader() -> None:
        async for _chunk in stream:
            pass

    task = asyncio.create_task(reader())
    while not body.waiting.is_set():
        await asyncio.sleep(0.01)
    await stream.aclose()
    assert body.closed and stream.response.is_closed
    body.let_go.set()
    await asyncio.wait_for(task, 5)
    assert only_attempt(relay_events).outcome == "cancelled"
    assert logical_outcomes(relay_events) == ["cancelled"]


# -- the annotation and the metadata agree on the SDK's retries -------------------------------------


def test_annotated_response_sdk_retries_agree_with_the_metadata(relay_turn, relay_events, oa, an) -> None:
    oa.add(t.error(500), t.json_reply(t.chat_completion_body("a")))
    adapters.complete(oa.client, {"model": "m", "messages": []})
    oa.add(t.error(503), t.error(502), t.sse_reply(t.openai_chat_sse(t.chat_chunks(["b", "c"]))))
    list(adapters.stream(oa.client, {"model": "m", "messages": [], "stream": True}))
    an.add(t.json_reply(t.anthropic_message_body("d")))
    adapters.complete(an.client, {"model": "claude", "max_tokens": 9, "messages": []})
    ends = attempt_ends(relay_events)
    assert [e.metadata[cv.SDK_RETRIES] for e in ends] == [1, 2, 0]
    assert [e.annotated_response.sdk_retries for e in ends] == [1, 2, 0]
