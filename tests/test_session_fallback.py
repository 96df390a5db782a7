"""An execution intercept that catches its provider's error and answers in its place (a fallback): the attempt
ends failed with the provider's error, the logical call a success marked ``relay.fallback``, and response
intercepts run on the fallback like on any answer."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from core_support import new_relay, request
from openai.types.chat import ChatCompletion
from otel_support import Pipeline

from relay_runtime import LLMRequest, Recorder, adapters, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter

pytest_plugins = ["adapters_support"]

CHAT = {"model": "gpt-x", "messages": [{"role": "user", "content": "q"}]}
CANNED = ChatCompletion.model_validate(t.chat_completion_body("from the cache", model="cache"))


def canned(name: str, req: LLMRequest, call_next: Any) -> Any:
    try:
        return call_next(req)
    except openai.APIStatusError:
        return CANNED


async def canned_async(name: str, req: LLMRequest, call_next: Any) -> Any:
    try:
        return await call_next(req)
    except openai.APIStatusError:
        return CANNED


def passing(name: str, req: LLMRequest, call_next: Any) -> Any:
    return call_next(req)


def _attempts(events: Recorder) -> list[tuple[Any, Any]]:
    return [(e.outcome, e.error_type) for e in events.ends(relay_kind=cv.ATTEMPT)]


def _calls(events: Recorder) -> list[tuple[Any, Any]]:
    ends = events.ends(relay_kind=cv.LOGICAL_CALL)
    return [((e.output or {}).get("outcome"), e.metadata.get(cv.FALLBACK)) for e in ends]


def test_a_fallback_fails_the_attempt_and_succeeds_the_call_with_response_intercepts_on_it(
    relay_turn, relay_events, oa
) -> None:
    relay, _turn = relay_turn
    seen: list[Any] = []

    def stamp(name: str, req: LLMRequest, response: Any) -> Any:
        seen.append(response)
        return response.model_copy(update={"id": "stamped"})

    relay.intercepts.register_llm_execution("cache", 0, canned)
    relay.intercepts.register_llm_response("stamp", 0, False, stamp)
    oa.add(t.error(400, "model overloaded"))
    reply = adapters.complete(oa.client, CHAT)
    assert reply.choices[0].message.content == "from the cache" and reply.id == "stamped"
    assert seen == [CANNED]
    assert _attempts(relay_events) == [("failed", "BadRequestError")]
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert "model overloaded" in attempt.error_message and attempt.output is None
    assert _calls(relay_events) == [("success", "cache")]
    (start,) = relay_events.starts(relay_kind=cv.LOGICAL_CALL)
    assert cv.FALLBACK not in start.metadata  # known only at the end


def test_the_fallback_is_named_after_the_intercept_that_caught_the_error(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_llm_execution("outer", 0, passing)
    relay.intercepts.register_llm_execution("inner", 1, canned)
    relay.intercepts.register_llm_execution("innermost", 2, passing)
    oa.add(t.error(400))
    assert adapters.complete(oa.client, CHAT) is CANNED
    assert _calls(relay_events) == [("success", "inner")]


def test_a_retry_that_answers_is_no_fallback(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn

    def retry(name: str, req: LLMRequest, call_next: Any) -> Any:
        try:
            return call_next(req)
        except openai.APIStatusError:
            return call_next(req)

    relay.intercepts.register_llm_execution("retry", 0, retry)
    oa.add(t.error(400), t.json_reply(t.chat_completion_body("second")))
    assert adapters.complete(oa.client, CHAT).choices[0].message.content == "second"
    assert _attempts(relay_events) == [("failed", "BadRequestError"), ("success", None)]
    assert _calls(relay_events) == [("success", None)]


def test_an_intercept_answering_without_calling_next_is_no_fallback(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_llm_execution("cache", 0, lambda name, req, call_next: CANNED)
    assert adapters.complete(oa.client, CHAT) is CANNED
    assert _attempts(relay_events) == [("success", None)]
    assert _calls(relay_events) == [("success", None)]


def test_a_failing_response_intercept_on_a_fallback_fails_closed(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn

    def refuse(name: str, req: LLMRequest, response: Any) -> Any:
        raise PermissionError("no cached answers")

    relay.intercepts.register_llm_execution("cache", 0, canned)
    relay.intercepts.register_llm_response("refuse", 0, False, refuse)
    oa.add(t.error(400))
    with pytest.raises(PermissionError):
        adapters.complete(oa.client, CHAT)
    assert _attempts(relay_events) == [("failed", "PermissionError")]
    assert _calls(relay_events) == [("failed", None)]


def test_an_async_fallback_is_recorded_the_same_way(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_llm_execution("cache", 0, canned_async)
    oa.add(t.error(400))
    assert asyncio.run(adapters.acomplete(oa.aclient, CHAT)) is CANNED
    assert _attempts(relay_events) == [("failed", "BadRequestError")]
    assert _calls(relay_events) == [("success", "cache")]


def test_a_fallback_with_no_logical_call_marks_the_attempt() -> None:
    relay, recorder = new_relay()
    boom = ConnectionError("down")

    def failing(req: LLMRequest) -> Any:
        raise boom

    def fallback(name: str, req: LLMRequest, call_next: Any) -> Any:
        try:
            return call_next(req)
        except ConnectionError:
            return {"text": "offline answer"}

    relay.intercepts.register_llm_execution("offline", 0, fallback)
    finished: list[Any] = []
    answer = relay.llm.execute("p", request(), failing, on_finish=lambda *a: finished.append(a))
    assert answer == {"text": "offline answer"}
    (end,) = [e for e in recorder.ends() if e.scope_type == "llm"]
    assert end.outcome == "failed" and end.error_type == "ConnectionError"
    assert end.metadata[cv.FALLBACK] == "offline"
    assert finished == [("success", {"text": "offline answer"}, None)]  # the call's own result


def test_the_spans_say_so_too(relay_home) -> None:
    out = Pipeline()
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    exporter = OTelExporter(out.tracer_provider).attach(host)
    host.relay.intercepts.register_llm_execution("cache", 0, canned)
    scripted = t.scripted_openai(t.error(400))
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="k")
    try:
        assert adapters.complete(scripted.client, CHAT) is CANNED
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        scripted.client.close()
        exporter.shutdown()
    attempt, logical = out.one("chat gpt-x"), out.one("logical_llm_call")
    assert attempt.attributes["error.type"] == "BadRequestError"
    assert logical.attributes["relay.outcome"] == "success" and logical.attributes[cv.FALLBACK] == "cache"


def test_the_fallback_answer_is_marked_under_the_call_between_the_failed_attempt_and_the_calls_end(
    relay_turn, relay_events, oa
) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_llm_execution("cache", 0, canned)
    oa.add(t.error(400))
    assert adapters.complete(oa.client, CHAT) is CANNED
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    (mark,) = [e for e in relay_events if e.kind == "mark" and e.name == cv.FALLBACK_ANSWER]
    order = [id(e) for e in relay_events]
    assert order.index(id(attempt)) < order.index(id(mark)) < order.index(id(call))
    assert mark.parent_uuid == call.uuid and mark.data == {"intercept": "cache"}
    assert attempt.annotated_response is None  # the provider's call answered nothing
    answer = mark.annotated_response
    assert answer is not None and answer.output_text == "from the cache" and answer.model == "cache"


def test_a_retry_that_answers_marks_no_fallback_answer(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_llm_execution("retry", 0, lambda name, req, call_next: call_next(req))
    oa.add(t.json_reply(t.chat_completion_body("served")))
    adapters.complete(oa.client, CHAT)
    assert not [e for e in relay_events if e.kind == "mark" and e.name == cv.FALLBACK_ANSWER]
