"""Every SDK call path named in the README is traced, per client and globally, exactly once."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest

from relay_runtime import Recorder, adapters, auxiliary
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.instrument import ManagedCreate, is_instrumented

Make = Callable[..., t.Scripted]


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


@pytest.fixture(params=["per_client", "global"])
def scripted(request: pytest.FixtureRequest) -> Iterator[Callable[[str, Any], t.Scripted]]:
    """``scripted("openai"|"anthropic", *replies)``: clients traced the way the parameter says."""
    path = request.param
    if path == "global":
        adapters.instrument()
    made: list[t.Scripted] = []

    def make(sdk: str, *replies: t.Reply) -> t.Scripted:
        s = (t.scripted_openai if sdk == "openai" else t.scripted_anthropic)(*replies, max_retries=0)
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


def only_attempt(events: Recorder) -> Any:
    (end,) = attempts(events)
    return end


def check(end: Any, *, model: str, inputs: int, outputs: int, finish: list[str], text: str | None) -> None:
    assert end.outcome == "success"
    response = end.annotated_response
    assert response.model == model
    assert (response.usage.input_tokens, response.usage.output_tokens) == (inputs, outputs)
    assert response.finish_reasons == finish
    assert response.output_text == text


class Answer(pydantic.BaseModel):
    city: str


# -- openai chat completions ---------------------------------------------------------------------


def test_chat_create_and_parse(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", t.json_reply(t.chat_completion_body('{"city": "Oslo"}', model="gpt-p")))
    parsed = s.client.chat.completions.parse(model="gpt-p", messages=[], response_format=Answer)
    assert parsed.choices[0].message.parsed == Answer(city="Oslo")
    check(only_attempt(relay_events), model="gpt-p", inputs=12, outputs=5, finish=["stop"], text='{"city": "Oslo"}')


def test_chat_stream_helper(relay_turn, relay_events, scripted) -> None:
    chunks = t.chat_chunks(["a", "b"], model="gpt-s", usage=t.chat_usage(3, 2))
    s = scripted("openai", t.sse_reply(t.openai_chat_sse(chunks)))
    with s.client.chat.completions.stream(model="gpt-s", messages=[]) as stream:
        kinds = [event.type for event in stream]
    assert "content.done" in kinds
    check(only_attempt(relay_events), model="gpt-s", inputs=3, outputs=2, finish=["stop"], text="ab")


@pytest.mark.asyncio
async def test_async_chat_parse_and_stream_helper(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "openai",
        t.json_reply(t.chat_completion_body('{"city": "Rome"}')),
        t.sse_reply(t.openai_chat_sse(t.chat_chunks(["x"], usage=t.chat_usage(4, 1)))),
    )
    parsed = await s.aclient.chat.completions.parse(model="m", messages=[], response_format=Answer)
    assert parsed.choices[0].message.parsed.city == "Rome"
    async with s.aclient.chat.completions.stream(model="m", messages=[]) as stream:
        async for _event in stream:
            pass
    first, second = attempts(relay_events)
    check(first, model="gpt-test", inputs=12, outputs=5, finish=["stop"], text='{"city": "Rome"}')
    check(second, model="gpt-test", inputs=4, outputs=1, finish=["stop"], text="x")


# -- openai responses ------------------------------------------------------------------------------


def helper_ready_events(pieces: list[str], model: str) -> list[dict[str, Any]]:
    """``responses_events`` plus the message item and content part the SDK's stream helper insists on."""
    events = t.responses_events(pieces, model=model)
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    opening = [
        {"type": "response.output_item.added", "sequence_number": 0, "output_index": 0, "item": item},
        {
            "type": "response.content_part.added",
            "sequence_number": 0,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
    ]
    return [events[0], *opening, *events[1:]]


def test_responses_create_parse_and_stream(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "openai",
        t.json_reply(t.responses_body("plain", model="gpt-r")),
        t.json_reply(t.responses_body('{"city": "Lima"}', model="gpt-r")),
        t.sse_reply(t.typed_sse(helper_ready_events(["st", "ream"], model="gpt-r"))),
    )
    assert s.client.responses.create(model="gpt-r", input="hi").output_text == "plain"
    assert s.client.responses.parse(model="gpt-r", input="hi", text_format=Answer).output_parsed == Answer(city="Lima")
    with s.client.responses.stream(model="gpt-r", input="hi") as stream:
        for _event in stream:
            pass
        assert stream.get_final_response().output_text == "stream"
    ends = attempts(relay_events)
    assert [e.annotated_request.operation for e in ends] == ["responses"] * 3
    for end, text in zip(ends, ["plain", '{"city": "Lima"}', "stream"], strict=True):
        check(end, model="gpt-r", inputs=20, outputs=7, finish=["completed"], text=text)


# -- anthropic messages -------------------------------------------------------------------------------


def test_anthropic_create_and_stream_helper(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "anthropic",
        t.json_reply(t.anthropic_message_body("whole", model="claude-w")),
        t.sse_reply(t.typed_sse(t.anthropic_events(["pi", "ece"], model="claude-s", output_tokens=4))),
    )
    assert s.client.messages.create(model="claude-w", max_tokens=5, messages=[]).content[0].text == "whole"
    with s.client.messages.stream(model="claude-s", max_tokens=5, messages=[]) as stream:
        assert "".join(stream.text_stream) == "piece"
        assert stream.get_final_message().stop_reason == "end_turn"
    first, second = attempts(relay_events)
    check(first, model="claude-w", inputs=30, outputs=9, finish=["end_turn"], text="whole")
    check(second, model="claude-s", inputs=30, outputs=4, finish=["end_turn"], text="piece")
    assert second.annotated_request.stream is True


@pytest.mark.asyncio
async def test_async_anthropic_stream_helper(relay_turn, relay_events, scripted) -> None:
    s = scripted("anthropic", t.sse_reply(t.typed_sse(t.anthropic_events(["as", "ync"], output_tokens=2))))
    async with s.aclient.messages.stream(model="claude-a", max_tokens=5, messages=[]) as stream:
        text = "".join([piece async for piece in stream.text_stream])
    assert text == "async"
    check(only_attempt(relay_events), model="claude-test", inputs=30, outputs=2, finish=["end_turn"], text="async")


def test_anthropic_stream_helper_sends_what_intercepts_edited(relay_turn, relay_events, scripted) -> None:
    relay, _turn = relay_turn

    def cooler(name: str, request: Any, annotated: Any) -> Any:
        annotated.params["stop"] = ["END"]  # the neutral name: anthropic spells it stop_sequences
        return relay.LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("cooler", 1, False, cooler)
    s = scripted("anthropic", t.sse_reply(t.typed_sse(t.anthropic_events(["x"]))))
    try:
        with s.client.messages.stream(model="c", max_tokens=5, messages=[], stop_sequences=["X"]) as stream:
            stream.until_done()
    finally:
        relay.intercepts.deregister_llm_request("cooler")
    assert s.script.bodies()[0]["stop_sequences"] == ["END"]
    assert len(attempts(relay_events)) == 1


# -- derived clients and raw responses ---------------------------------------------------------------


def test_with_options_clients_are_traced(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", t.json_reply(t.chat_completion_body("derived")))
    derived = s.client.with_options(timeout=5)
    assert derived.chat.completions.create(model="m", messages=[]).choices[0].message.content == "derived"
    check(only_attempt(relay_events), model="gpt-test", inputs=12, outputs=5, finish=["stop"], text="derived")


def test_with_raw_response_ends_with_what_the_body_said(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "openai",
        t.json_reply(t.chat_completion_body("raw")),
        t.json_reply(t.anthropic_message_body("unused")),
    )
    raw = s.client.chat.completions.with_raw_response.create(model="m", messages=[])
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.parse().choices[0].message.content == "raw"
    check(only_attempt(relay_events), model="gpt-test", inputs=12, outputs=5, finish=["stop"], text="raw")


def test_with_streaming_response_ends_when_the_body_is_read(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", t.json_reply(t.chat_completion_body("later")), t.json_reply(t.chat_completion_body("n")))
    with s.client.chat.completions.with_streaming_response.create(model="m", messages=[]) as response:
        assert attempts(relay_events) == []  # headers are in, the body is not read yet
        assert relay_events.starts(relay_kind=cv.ATTEMPT)
        assert response.parse().choices[0].message.content == "later"
    check(only_attempt(relay_events), model="gpt-test", inputs=12, outputs=5, finish=["stop"], text="later")

    with s.client.chat.completions.with_streaming_response.create(model="m", messages=[]) as response:
        assert response.status_code == 200
    unread = attempts(relay_events)[-1]
    assert unread.outcome == "cancelled"
    assert len(attempts(relay_events)) == 2


def test_with_streaming_response_of_a_stream_folds_its_chunks(relay_turn, relay_events, scripted) -> None:
    chunks = t.chat_chunks(["p", "q"], usage=t.chat_usage(7, 2))
    s = scripted("openai", t.sse_reply(t.openai_chat_sse(chunks)))
    with s.client.chat.completions.with_streaming_response.create(model="m", messages=[], stream=True) as response:
        pieces = [c.choices[0].delta.content or "" for c in response.parse() if c.choices]
    assert "".join(pieces) == "pq"
    check(only_attempt(relay_events), model="gpt-test", inputs=7, outputs=2, finish=["stop"], text="pq")


@pytest.mark.asyncio
async def test_async_raw_responses(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "anthropic",
        t.json_reply(t.anthropic_message_body("one")),
        t.json_reply(t.anthropic_message_body("two")),
    )
    raw = await s.aclient.messages.with_raw_response.create(model="c", max_tokens=5, messages=[])
    assert (await raw.parse()).content[0].text == "one"
    async with s.aclient.messages.with_streaming_response.create(model="c", max_tokens=5, messages=[]) as response:
        body = await response.json()
    assert body["content"][0]["text"] == "two"
    first, second = attempts(relay_events)
    check(first, model="claude-test", inputs=30, outputs=9, finish=["end_turn"], text="one")
    check(second, model="claude-test", inputs=30, outputs=9, finish=["end_turn"], text="two")


# -- global and per-client together -------------------------------------------------------------------


def test_global_and_per_client_never_double_a_call(relay_turn, relay_events) -> None:
    s = t.scripted_openai(
        t.json_reply(t.chat_completion_body("1")),
        t.json_reply(t.chat_completion_body("2")),
        t.json_reply(t.chat_completion_body("3")),
    )
    wrapped = adapters.instrument()
    try:
        assert any(name.endswith("Completions.create") for name in wrapped)
        assert is_instrumented()
        adapters.instrument()  # idempotent
        adapters.instrument(s.client)
        s.client.chat.completions.create(model="m", messages=[])
        adapters.complete(s.client, {"model": "m", "messages": []})
        adapters.uninstrument(s.client)
        s.client.chat.completions.create(model="m", messages=[])
    finally:
        adapters.uninstrument()
    assert [e.annotated_response.output_text for e in attempts(relay_events)] == ["1", "2", "3"]
    assert not is_instrumented()


def test_uninstrument_restores_the_sdk_classes(relay_turn, relay_events) -> None:
    import openai.resources.chat.completions.completions as chat

    before = vars(chat.Completions)["create"]
    adapters.instrument()
    assert isinstance(vars(chat.Completions)["create"], ManagedCreate)
    adapters.uninstrument()
    adapters.uninstrument()
    assert vars(chat.Completions)["create"] is before
    s = t.scripted_openai(t.json_reply(t.chat_completion_body()))
    s.client.chat.completions.create(model="m", messages=[])
    assert attempts(relay_events) == []


def test_global_instrumentation_without_a_turn_is_a_plain_call(relay_home) -> None:
    s = t.scripted_openai(t.json_reply(t.chat_completion_body("bare")))
    adapters.instrument()
    try:
        assert s.client.chat.completions.create(model="m", messages=[]).choices[0].message.content == "bare"
    finally:
        adapters.uninstrument()


def test_anthropic_parse(relay_turn, relay_events, scripted) -> None:
    s = scripted("anthropic", t.json_reply(t.anthropic_message_body('{"city": "Kyiv"}', model="claude-p")))
    parsed = s.client.messages.parse(model="claude-p", max_tokens=50, messages=[], output_format=Answer)
    assert parsed.parsed_output == Answer(city="Kyiv")
    check(
        only_attempt(relay_events), model="claude-p", inputs=30, outputs=9, finish=["end_turn"], text='{"city": "Kyiv"}'
    )


def test_raw_response_paths_end_once_whatever_the_caller_does(relay_turn, relay_events, scripted) -> None:
    import openai

    s = scripted(
        "openai",
        t.error(500, "down"),
        t.json_reply(t.chat_completion_body("lines")),
    )
    with pytest.raises(openai.InternalServerError):
        s.client.chat.completions.with_raw_response.create(model="m", messages=[])
    with s.client.chat.completions.with_streaming_response.create(model="m", messages=[]) as response:
        body = "".join(response.iter_lines())
    assert '"lines"' in body
    failed, read = attempts(relay_events)
    assert (failed.outcome, failed.error_type) == ("failed", "InternalServerError")
    assert read.outcome == "success"  # read line by line: ended once, with what the lines said
    assert read.annotated_response.output_text == "lines"
    assert len(relay_events.starts(relay_kind=cv.ATTEMPT)) == 2


@pytest.mark.asyncio
async def test_async_streaming_response_closed_unread_is_cancelled(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", t.json_reply(t.chat_completion_body("unread")))
    async with s.aclient.chat.completions.with_streaming_response.create(model="m", messages=[]) as response:
        assert response.status_code == 200
    (end,) = attempts(relay_events)
    assert end.outcome == "cancelled"
    assert relay_events.ends(relay_kind=cv.LOGICAL_CALL)[0].output["outcome"] == "cancelled"


def test_include_usage_reaches_streams_on_the_global_path_and_derived_clients(relay_turn, relay_events) -> None:
    chunks = t.chat_chunks(["u"], usage=t.chat_usage(5, 1))
    s = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)), t.sse_reply(t.openai_chat_sse(chunks)))
    adapters.instrument(include_usage=True)
    try:
        for _ in s.client.chat.completions.create(model="m", messages=[], stream=True):
            pass
    finally:
        adapters.uninstrument()
    derived = adapters.instrument(s.client, include_usage=True).with_options(timeout=3)
    for _ in derived.chat.completions.create(model="m", messages=[], stream=True):
        pass
    assert [b["stream_options"] for b in s.script.bodies()] == [{"include_usage": True}] * 2
    assert [e.annotated_response.usage.input_tokens for e in attempts(relay_events)] == [5, 5]


def _rejected_then_accepted(events: Recorder) -> None:
    ends = attempts(events)
    assert [(e.outcome, e.error_type, e.metadata[cv.RETRY_COUNT]) for e in ends] == [
        ("failed", "response_rejected", 0),
        ("success", None, 1),
    ]
    assert len({e.metadata[cv.API_REQUEST_ID] for e in ends}) == 1
    assert len(events.starts(relay_kind=cv.LOGICAL_CALL)) == 1  # one logical call, not one per attempt
    assert [e.output["outcome"] for e in events.ends(relay_kind=cv.LOGICAL_CALL)] == ["success"]


def test_raw_responses_in_an_auxiliary_call_are_attempts_of_one_validated_call(
    relay_turn, relay_events, scripted
) -> None:
    s = scripted("openai", t.json_reply(t.chat_completion_body("")), t.json_reply(t.chat_completion_body("good")))

    @auxiliary.auxiliary_call
    def title(task: str) -> Any:
        auxiliary.set_route("openai", "m")
        for raw in (s.client.chat.completions.with_raw_response, s.client.chat.completions.with_streaming_response):
            response = raw.create(model="m", messages=[])
            with response if hasattr(response, "__enter__") else contextlib.nullcontext(response) as body:
                try:
                    return auxiliary.validate_response(body.parse(), task)
                except auxiliary.ResponseRejected:
                    continue
        return None

    assert title("title").choices[0].message.content == "good"
    _rejected_then_accepted(relay_events)


@pytest.mark.asyncio
async def test_async_raw_responses_in_an_auxiliary_call_are_attempts_of_one_validated_call(
    relay_turn, relay_events, scripted
) -> None:
    s = scripted(
        "anthropic", t.json_reply(t.anthropic_message_body(" ")), t.json_reply(t.anthropic_message_body("good"))
    )

    @auxiliary.auxiliary_call
    async def title(task: str) -> Any:
        auxiliary.set_route("anthropic", "c", "anthropic_messages")
        for _ in range(2):
            async with s.aclient.messages.with_streaming_response.create(model="c", max_tokens=5, messages=[]) as r:
                try:
                    return auxiliary.validate_response(await r.parse(), task)
                except auxiliary.ResponseRejected:
                    continue
        return None

    assert (await title("title")).content[0].text == "good"
    _rejected_then_accepted(relay_events)


def test_global_instrumentation_traces_anthropic_beta_messages(relay_turn, relay_events) -> None:
    s = t.scripted_anthropic(
        t.json_reply(t.anthropic_message_body("beta")),
        t.sse_reply(t.typed_sse(t.anthropic_events(["a", "b"]))),
        t.json_reply(t.anthropic_message_body("after")),
    )
    adapters.instrument()
    try:
        answer = s.client.beta.messages.create(model="c", max_tokens=5, messages=[], betas=["b-1"])
        with s.client.beta.messages.stream(model="c", max_tokens=5, messages=[], betas=["b-1"]) as stream:
            text = "".join(stream.text_stream)
    finally:
        adapters.uninstrument()
    assert (type(answer).__name__, answer.content[0].text, text) == ("BetaMessage", "beta", "ab")
    assert [(e.outcome, e.annotated_response.output_text) for e in attempts(relay_events)] == [
        ("success", "beta"),
        ("success", "ab"),
    ]
    assert [r.headers.get("anthropic-beta") for r in s.script.requests] == ["b-1", "b-1"]  # the betas were sent
    s.client.beta.messages.create(model="c", max_tokens=5, messages=[])  # uninstrumented again
    assert len(attempts(relay_events)) == 2


# -- beta namespaces, and the calls that cannot be attempts -------------------------------------------


def test_openai_beta_chat_and_responses_are_traced(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "openai",
        t.json_reply(t.chat_completion_body("beta chat", model="gpt-b")),
        t.json_reply(t.chat_completion_body('{"city": "Rome"}', model="gpt-b")),
        t.sse_reply(t.openai_chat_sse(t.chat_chunks(["be", "ta"], model="gpt-b"))),
        t.json_reply(t.responses_body("beta resp", model="gpt-r")),
        t.sse_reply(t.typed_sse(t.responses_events(["st", "ream"], model="gpt-r"))),
    )
    c = s.client
    assert c.beta.chat.completions.create(model="gpt-b", messages=[]).choices[0].message.content == "beta chat"
    parsed = c.beta.chat.completions.parse(model="gpt-b", messages=[], response_format=Answer)
    assert parsed.choices[0].message.parsed == Answer(city="Rome")
    with c.beta.chat.completions.stream(model="gpt-b", messages=[]) as stream:
        for _event in stream:
            pass
    answer = c.beta.responses.create(model="gpt-r", input="hi")
    assert (type(answer).__name__, answer.output[0].content[0].text) == ("BetaResponse", "beta resp")
    assert [e.type for e in c.beta.responses.create(model="gpt-r", input="hi", stream=True)][-1] == "response.completed"
    ends = attempts(relay_events)
    assert [(e.outcome, e.annotated_request.operation, e.annotated_response.output_text) for e in ends] == [
        ("success", "chat", "beta chat"),
        ("success", "chat", '{"city": "Rome"}'),
        ("success", "chat", "beta"),
        ("success", "responses", "beta resp"),
        ("success", "responses", "stream"),
    ]
    sent = s.script.requests[-1]
    assert sent.url.path == "/v1/responses" and "beta=true" in str(sent.url)  # the beta endpoint was called


def test_anthropic_beta_messages_are_traced_on_every_path(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "anthropic",
        t.json_reply(t.anthropic_message_body("create")),
        t.sse_reply(t.typed_sse(t.anthropic_events(["st", "ream"]))),
        t.json_reply(t.anthropic_message_body('{"city": "Bern"}')),
        t.json_reply(t.anthropic_message_body("raw")),
        t.json_reply(t.anthropic_message_body("client raw")),
    )
    c = s.client
    assert type(c.beta.messages.create(model="c", max_tokens=5, messages=[], betas=["b-1"])).__name__ == "BetaMessage"
    with c.beta.messages.stream(model="c", max_tokens=5, messages=[]) as stream:
        assert "".join(stream.text_stream) == "stream"
    assert c.beta.messages.parse(model="c", max_tokens=5, messages=[], output_format=Answer).parsed_output == Answer(
        city="Bern"
    )
    assert (
        c.beta.messages.with_raw_response.create(model="c", max_tokens=5, messages=[]).parse().content[0].text == "raw"
    )
    raw = c.with_raw_response.beta.messages.create(model="c", max_tokens=5, messages=[])
    assert raw.parse().content[0].text == "client raw"
    texts = [(e.outcome, e.annotated_response.output_text) for e in attempts(relay_events)]
    assert texts == [
        ("success", "create"),
        ("success", "stream"),
        ("success", '{"city": "Bern"}'),
        ("success", "raw"),
        ("success", "client raw"),
    ]


@pytest.mark.asyncio
async def test_async_beta_messages_are_traced(relay_turn, relay_events, scripted) -> None:
    s = scripted(
        "anthropic",
        t.json_reply(t.anthropic_message_body("async beta")),
        t.sse_reply(t.typed_sse(t.anthropic_events(["a", "b"]))),
    )
    assert (await s.aclient.beta.messages.create(model="c", max_tokens=5, messages=[])).content[0].text == "async beta"
    async with s.aclient.beta.messages.stream(model="c", max_tokens=5, messages=[]) as stream:
        assert "".join([piece async for piece in stream.text_stream]) == "ab"
    assert [e.annotated_response.output_text for e in attempts(relay_events)] == ["async beta", "ab"]


def _batch_body() -> dict[str, Any]:
    counts = {"canceled": 0, "errored": 0, "expired": 0, "processing": 1, "succeeded": 0}
    return {"id": "msgbatch_1", "type": "message_batch", "processing_status": "in_progress",
            "request_counts": counts, "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-02T00:00:00Z",
            "ended_at": None, "archived_at": None, "cancel_initiated_at": None, "results_url": None}  # fmt: skip


def _compacted_body() -> dict[str, Any]:
    return {"id": "cmp_1", "object": "response.compaction", "created_at": 1700000000, "output": [],
            "usage": t.responses_usage()}  # fmt: skip


def test_calls_that_cannot_be_attempts_are_counted_not_silent(relay_turn, relay_events, scripted) -> None:
    relay, _turn = relay_turn
    o = scripted("openai", t.json_reply(_compacted_body()), t.json_reply(_compacted_body()))
    a = scripted("anthropic", t.json_reply(_batch_body()), t.json_reply(_batch_body()))
    o.client.responses.compact(model="m", input="long history")
    o.client.beta.responses.compact(model="m", input="long history")
    request = {"custom_id": "r-1", "params": {"model": "c", "max_tokens": 5, "messages": []}}
    a.client.messages.batches.create(requests=[request])
    a.client.beta.messages.batches.create(requests=[request])
    assert attempts(relay_events) == []  # no attempt claims what cannot be read as one
    counts = relay.diagnostics()
    assert counts["adapters.untraced_calls"] == 4
    assert counts["adapters.untraced_calls.responses.compact"] == 2
    assert counts["adapters.untraced_calls.messages.batches.create"] == 2
    assert len(o.script.requests) == len(a.script.requests) == 2  # the SDK's own calls, sent as they were


@pytest.mark.asyncio
async def test_a_background_response_is_an_attempt_whose_output_is_counted_untraced(
    relay_turn, relay_events, scripted
) -> None:
    """``background=True`` answers at once with a queued response; its output, usage and cost come later through
    ``responses.retrieve``, which is not traced. The create is an attempt saying so, and it is counted: a budget
    sees only its input estimate, never silently."""
    relay, _turn = relay_turn
    queued = {**t.responses_body(""), "status": "queued", "output": [], "usage": None, "background": True}
    s = scripted("openai", t.json_reply(queued), t.json_reply(queued), t.json_reply(t.responses_body("now")))
    assert s.client.responses.create(model="o3-pro", input="hard", background=True).status == "queued"
    assert (await s.aclient.responses.create(model="o3-pro", input="hard", background=True)).status == "queued"
    s.client.responses.create(model="o3-pro", input="easy")  # answered at once: not counted
    ends = attempts(relay_events)
    assert [e.annotated_response.finish_reasons for e in ends] == [["queued"], ["queued"], ["completed"]]
    counts = relay.diagnostics()
    assert counts["adapters.untraced_calls.responses.background"] == 2
    assert counts["adapters.untraced_calls"] == 2


def test_uninstrument_undoes_the_beta_and_counted_paths(relay_turn, relay_events) -> None:
    o = t.scripted_openai(t.json_reply(t.chat_completion_body()), t.json_reply(_compacted_body()))
    a = t.scripted_anthropic(t.json_reply(t.anthropic_message_body()), t.json_reply(_batch_body()))
    owners = [
        (o.client.beta.chat.completions, ("create", "parse")),
        (o.client.beta.responses, ("create", "compact", "connect")),
        (a.client.beta.messages, ("create", "stream", "parse")),
        (a.client.messages.batches, ("create",)),
        (a.client.beta.messages.batches, ("create",)),
    ]
    for client in (o.client, a.client):
        adapters.instrument(client)
    assert all(isinstance(vars(owner)[m], ManagedCreate) for owner, methods in owners for m in methods)
    for client in (o.client, a.client):
        adapters.uninstrument(client)
    assert not any(m in vars(owner) for owner, methods in owners for m in methods)
    o.client.beta.chat.completions.create(model="m", messages=[])
    o.client.responses.compact(model="m", input="x")
    a.client.beta.messages.create(model="c", max_tokens=5, messages=[])
    a.client.messages.batches.create(requests=[])
    relay, _turn = relay_turn
    assert attempts(relay_events) == [] and "adapters.untraced_calls" not in relay.diagnostics()


def test_global_uninstrument_undoes_the_counted_paths(relay_turn) -> None:
    import anthropic.resources.messages.batches as batches
    import openai.resources.beta.responses.responses as beta_responses

    before = (vars(batches.Batches)["create"], vars(beta_responses.Responses)["create"])
    adapters.instrument()
    assert isinstance(vars(batches.Batches)["create"], ManagedCreate)
    assert isinstance(vars(beta_responses.AsyncResponses)["compact"], ManagedCreate)
    adapters.uninstrument()
    assert (vars(batches.Batches)["create"], vars(beta_responses.Responses)["create"]) == before


def test_a_streaming_response_body_the_caller_iterates_is_recorded_as_it_read(
    relay_turn, relay_events, scripted
) -> None:
    """A with_streaming_response body read through iter_lines / iter_bytes / iter_text: the SDK can no longer
    parse it, but what it said (usage, finish reason, text) is still the record's, not an empty success."""
    s = scripted("openai", t.json_reply(t.chat_completion_body("lines")), t.json_reply(t.chat_completion_body("bytes")))
    with s.client.chat.completions.with_streaming_response.create(model="m", messages=[]) as response:
        assert '"lines"' in "\n".join(response.iter_lines())
    with s.client.chat.completions.with_streaming_response.create(model="m", messages=[]) as response:
        assert b'"bytes"' in b"".join(response.iter_bytes(chunk_size=7))
    lines, pieces = attempts(relay_events)
    check(lines, model="gpt-test", inputs=12, outputs=5, finish=["stop"], text="lines")
    check(pieces, model="gpt-test", inputs=12, outputs=5, finish=["stop"], text="bytes")


@pytest.mark.asyncio
async def test_an_async_streaming_response_body_iterated_is_recorded_as_it_read(
    relay_turn, relay_events, scripted
) -> None:
    s = scripted("anthropic", t.json_reply(t.anthropic_message_body("text")))
    async with s.aclient.messages.with_streaming_response.create(model="c", max_tokens=5, messages=[]) as response:
        assert '"text"' in "".join([piece async for piece in response.iter_text()])
    check(only_attempt(relay_events), model="claude-test", inputs=30, outputs=9, finish=["end_turn"], text="text")
