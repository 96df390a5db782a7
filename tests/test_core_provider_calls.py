"""An execution intercept that calls ``next`` more than once: every provider call is an attempt of its own.

Each provider call made through the chain is recorded: a call a later one superseded ends with
its own answer (or error) when the next starts, and the call goes on as the next attempt of the
same parent (``retry_count`` one up), in every calling convention. Calls made concurrently (a
fan-out) each get an attempt of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from core_support import DictCodec, attempts, balanced, chunks, new_relay, request, response

from relay_runtime import CHUNK_MARK, LLMRequest, Recorder, adapters, cost
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog


def _retry_on(error: type[BaseException]) -> Any:
    def retry(name: str, req: LLMRequest, next_call: Any) -> Any:
        try:
            return next_call(req)
        except error:
            return next_call(req.replace(headers={"x-retry": "1"}))

    return retry


def _retry_async_on(error: type[BaseException]) -> Any:
    async def retry(name: str, req: LLMRequest, next_call: Any) -> Any:
        try:
            return await next_call(req)
        except error:
            return await next_call(req.replace(headers={"x-retry": "1"}))

    return retry


def _failing_first(error: BaseException, then: Any) -> Any:
    """A provider (or stream factory) whose first call raises ``error`` and later ones return ``then()``."""
    calls: list[int] = []

    def provider(req: LLMRequest) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return then()

    return provider


def _retry_count(event: Any) -> int:
    return (event.metadata or {}).get(cv.RETRY_COUNT) or 0


def _check_retried(rec: Recorder, error_type: str) -> None:
    """Two attempts under one parent: the first failed with ``error_type``, the retry a success."""
    assert balanced(rec.events)
    starts, ends = attempts(rec.events, "scope_start"), attempts(rec.events)
    assert [(e.outcome, e.error_type) for e in ends] == [("failed", error_type), ("success", None)]
    assert [_retry_count(e) for e in ends] == [0, 1]
    assert [s.uuid for s in starts] == [e.uuid for e in ends] and len({e.parent_uuid for e in ends}) == 1
    assert starts[1].input["headers"] == {"x-retry": "1"}  # the retry's own request


def test_a_retried_provider_call_is_an_attempt_of_its_own() -> None:
    relay, rec = new_relay()
    provider = _failing_first(ConnectionError("reset by peer"), lambda: response("second"))
    relay.intercepts.register_llm_execution("retry", 0, _retry_on(ConnectionError))
    assert relay.llm.execute("p", request(), provider, codec=DictCodec())["text"] == "second"
    _check_retried(rec, "ConnectionError")
    assert attempts(rec.events)[1].annotated_response.output_text == "second"


def test_sequential_fan_out_records_each_answer_once() -> None:
    relay, rec = new_relay()
    answers = iter([response("one"), response("two")])

    def both(name: str, req: LLMRequest, next_call: Any) -> Any:
        first = next_call(req)
        second = next_call(req)
        return {**second, "text": first["text"] + "+" + second["text"]}

    relay.intercepts.register_llm_execution("both", 0, both)
    assert relay.llm.execute("p", request(), lambda r: next(answers), codec=DictCodec())["text"] == "one+two"
    ends = attempts(rec.events)
    assert balanced(rec.events) and [e.outcome for e in ends] == ["success", "success"]
    # Each call's own answer (the last one's was recorded as the call's result, which its provider never said), and
    # what the caller got as the call's answer, marked as a fallback's is.
    assert [e.annotated_response.output_text for e in ends] == ["one", "two"]
    (served,) = rec.marks(name=cv.FALLBACK_ANSWER)
    assert served.annotated_response.output_text == "one+two" and ends[1].metadata[cv.FALLBACK] == "both"


@pytest.mark.asyncio
async def test_an_async_retry_is_an_attempt_of_its_own() -> None:
    relay, rec = new_relay()
    calls: list[int] = []

    async def provider(req: LLMRequest) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError("slow")
        return response()

    relay.intercepts.register_llm_execution("retry", 0, _retry_async_on(TimeoutError))
    assert await relay.llm.execute_async("p", request(), provider, codec=DictCodec()) == response()
    _check_retried(rec, "TimeoutError")


@pytest.mark.asyncio
async def test_a_concurrent_fan_out_gives_each_provider_call_an_attempt() -> None:
    relay, rec = new_relay()
    gate = asyncio.Event()
    texts = iter(["a", "b"])

    async def provider(req: LLMRequest) -> dict[str, Any]:
        text = next(texts)
        if text == "a":
            await gate.wait()  # the first answers after the second: both are in flight at once
        else:
            gate.set()
        return response(text)

    async def fan_out(name: str, req: LLMRequest, next_call: Any) -> Any:
        first, second = await asyncio.gather(next_call(req), next_call(req))
        return {**first, "text": first["text"] + second["text"]}

    relay.intercepts.register_llm_execution("fan", 0, fan_out)
    assert (await relay.llm.execute_async("p", request(), provider, codec=DictCodec()))["text"] == "ab"
    ends = attempts(rec.events)
    assert balanced(rec.events) and [e.outcome for e in ends] == ["success", "success"]
    assert sorted(e.annotated_response.output_text for e in ends) == ["a", "b"]  # each call's own answer
    (served,) = rec.marks(name=cv.FALLBACK_ANSWER)
    assert served.annotated_response.output_text == "ab"
    assert len({e.parent_uuid for e in ends}) == 1 and sorted(_retry_count(e) for e in ends) == [0, 1]


class _Chunks:
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __aiter__(self) -> AsyncIterator[Any]:
        async def gen() -> AsyncIterator[Any]:
            for item in self.items:
                yield item

        return gen()


def test_a_stream_whose_opening_is_retried_records_the_failed_open() -> None:
    relay, rec = new_relay()
    factory = _failing_first(ConnectionError("first open fails"), lambda: _Chunks(chunks(2)))
    relay.intercepts.register_llm_stream_execution("retry", 0, _retry_on(ConnectionError))
    assert len(list(relay.llm.stream("p", request(), factory, codec=DictCodec()))) == 2
    _check_retried(rec, "ConnectionError")
    retry = attempts(rec.events)[1]
    assert {m.parent_uuid for m in rec.marks(name=CHUNK_MARK)} == {retry.uuid}  # the chunks are the retry's


def test_a_stream_an_intercept_replaced_unread_is_recorded_cancelled() -> None:
    relay, rec = new_relay()
    sources = iter([_Chunks(chunks(1)), _Chunks(chunks(3))])

    def second_opinion(name: str, req: LLMRequest, next_call: Any) -> Any:
        next_call(req)  # opened, then dropped unread
        return next_call(req)

    relay.intercepts.register_llm_stream_execution("second", 0, second_opinion)
    assert len(list(relay.llm.stream("p", request(), lambda r: next(sources), codec=DictCodec()))) == 3
    ends = attempts(rec.events)
    assert balanced(rec.events) and [e.outcome for e in ends] == ["cancelled", "success"]


@pytest.mark.asyncio
async def test_an_async_stream_whose_opening_is_retried_records_the_failed_open() -> None:
    relay, rec = new_relay()
    opened: list[int] = []

    async def factory(req: LLMRequest) -> Any:
        opened.append(1)
        if len(opened) == 1:
            raise ConnectionError("first open fails")
        return _Chunks(chunks(2))

    relay.intercepts.register_llm_stream_execution("retry", 0, _retry_async_on(ConnectionError))
    stream = await relay.llm.stream_async("p", request(), factory, codec=DictCodec())
    assert len([c async for c in stream]) == 2
    _check_retried(rec, "ConnectionError")


def test_a_managed_sdk_call_retried_by_an_intercept_is_two_priced_attempts_of_one_logical_call(
    relay_turn, relay_events
) -> None:
    relay, turn = relay_turn
    cost.attach(relay, PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}))
    s = t.scripted_openai(
        t.json_reply(t.chat_completion_body("first", model="gpt-x", usage=t.chat_usage(1000, 0))),
        t.json_reply(t.chat_completion_body("second", model="gpt-x", usage=t.chat_usage(2000, 0))),
        max_retries=0,
    )

    def second_opinion(name: str, req: LLMRequest, next_call: Any) -> Any:
        next_call(req)
        return next_call(req)

    relay.intercepts.register_llm_execution("second", 0, second_opinion)
    answer = adapters.complete(s.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.choices[0].message.content == "second" and len(s.script.requests) == 2
    ends = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [(e.outcome, e.annotated_response.output_text) for e in ends] == [
        ("success", "first"),
        ("success", "second"),
    ]
    assert [e.metadata[cv.RETRY_COUNT] for e in ends] == [0, 1]
    assert [e.cost.amount for e in ends] == [pytest.approx(0.001), pytest.approx(0.002)]
    (logical,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert logical.outcome == "success" and {e.parent_uuid for e in ends} == {logical.uuid}
    assert logical.cost.total == pytest.approx(0.003) and logical.cost.attempts == 2
    assert turn.logical_llm_calls == {}


def test_a_managed_sdk_call_whose_first_provider_call_failed_keeps_that_failure(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    s = t.scripted_openai(t.error(500), t.json_reply(t.chat_completion_body("ok")), max_retries=0)
    relay.intercepts.register_llm_execution("retry", 0, _retry_on(Exception))
    assert adapters.complete(s.client, {"model": "m", "messages": []}).choices[0].message.content == "ok"
    ends = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [(e.outcome, e.error_type) for e in ends] == [("failed", "InternalServerError"), ("success", None)]
    assert [e.outcome for e in relay_events.ends(relay_kind=cv.LOGICAL_CALL)] == ["success"]


@pytest.mark.asyncio
async def test_every_provider_call_of_a_wide_fan_out_and_retry_takes_its_own_retry_count() -> None:
    relay, rec = new_relay()
    gate = asyncio.Event()
    started: list[int] = []

    async def provider(req: LLMRequest) -> dict[str, Any]:
        started.append(1)
        if len(started) == 3:
            gate.set()
        await gate.wait()
        return response(f"r{len(started)}")

    async def fan_out_then_again(name: str, req: LLMRequest, next_call: Any) -> Any:
        await asyncio.gather(next_call(req), next_call(req), next_call(req))
        return await next_call(req)

    relay.intercepts.register_llm_execution("fan", 0, fan_out_then_again)
    await relay.llm.execute_async("p", request(), provider, codec=DictCodec())
    ends = attempts(rec.events)
    assert balanced(rec.events) and len(ends) == 4
    assert sorted(_retry_count(e) for e in ends) == [0, 1, 2, 3]
