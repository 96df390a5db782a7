"""A turn ended while its call is under way: its attempt ends cancelled with a start before its end, and the
call goes on unrecorded, returning its answer (or raising the provider's own error), never the relay's: when
an execution intercept retries after the turn ended, and when a guardrail was still deciding."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from core_support import DictCodec, request, response

from relay_runtime import LLMRequest, Recorder, adapters, calls, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.threads import ContextExecutor


def _retry(name: str, req: LLMRequest, call_next: Any) -> Any:
    try:
        return call_next(req)
    except ConnectionError:
        return call_next(req)


async def _retry_async(name: str, req: LLMRequest, call_next: Any) -> Any:
    try:
        return await call_next(req)
    except ConnectionError:
        return await call_next(req)


def test_a_retry_after_the_turn_ended_returns_the_retried_answer_unrecorded(relay_turn, relay_events) -> None:
    relay, turn = relay_turn
    arrived, let_go = threading.Event(), threading.Event()
    sent: list[str] = []

    def provider(req: LLMRequest) -> dict[str, Any]:
        sent.append("call")
        if len(sent) == 1:
            arrived.set()
            let_go.wait()
            raise ConnectionError("reset")
        return response("retried")

    relay.intercepts.register_llm_execution("retry", 0, _retry)
    with ContextExecutor(1) as pool:
        answer = pool.submit(calls.execute_current, request(), provider, name="p", codec=DictCodec())
        assert arrived.wait(5)
        session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
        recorded = len(relay_events.events)
        let_go.set()
        assert answer.result(5)["text"] == "retried"
    assert len(sent) == 2 and len(relay_events.events) == recorded
    assert [e.outcome for e in relay_events.ends(relay_kind=cv.ATTEMPT)] == ["cancelled"]


@pytest.mark.asyncio
async def test_an_async_retry_after_the_turn_ended_returns_the_retried_answer_unrecorded(
    relay_turn, relay_events: Recorder
) -> None:
    relay, turn = relay_turn
    arrived, let_go = asyncio.Event(), asyncio.Event()
    sent: list[str] = []

    async def provider(req: LLMRequest) -> dict[str, Any]:
        sent.append("call")
        if len(sent) == 1:
            arrived.set()
            await let_go.wait()
            raise ConnectionError("reset")
        return response("retried")

    relay.intercepts.register_llm_execution("retry", 0, _retry_async)
    answer = asyncio.ensure_future(calls.execute_current_async(request(), provider, name="p", codec=DictCodec()))
    await arrived.wait()
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    recorded = len(relay_events.events)
    let_go.set()
    assert (await answer)["text"] == "retried"
    assert len(sent) == 2 and len(relay_events.events) == recorded


@pytest.mark.asyncio
async def test_a_turn_ended_while_an_async_guardrail_decides_records_the_attempt_started_then_cancelled(
    relay_turn, relay_events: Recorder
) -> None:
    relay, turn = relay_turn
    deciding, decided = asyncio.Event(), asyncio.Event()

    async def guard(name: str, req: LLMRequest, annotated: Any) -> str | None:
        deciding.set()
        await decided.wait()
        return None

    async def provider(req: LLMRequest) -> dict[str, Any]:
        return response("answered")

    relay.intercepts.register_llm_guardrail("slow", 0, guard)
    answer = asyncio.ensure_future(calls.execute_current_async(request(), provider, name="p", codec=DictCodec()))
    await deciding.wait()
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    recorded = len(relay_events.events)
    decided.set()
    assert (await answer)["text"] == "answered"
    assert len(relay_events.events) == recorded
    kinds = [e.kind for e in relay_events.events if e.metadata.get(cv.KIND) == cv.ATTEMPT]
    assert kinds == ["scope_start", "scope_end"]
    assert [e.outcome for e in relay_events.ends(relay_kind=cv.ATTEMPT)] == ["cancelled"]


# -- a call that found its turn open, which another thread ended before the call's logical call opened -----


@pytest.fixture
def turn_ends_as_it_is_found(relay_turn, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The interleaving of a call on one thread with ``end_turn`` on another: the turn is found managed,
    then ends before the call opens its logical call in it (``calls`` looks ``managed_turn`` up at call time)."""
    _relay, turn = relay_turn
    found = session.managed_turn

    def racing() -> Any:
        managed = found()
        if managed is turn:
            session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
        return managed

    monkeypatch.setattr(session, "managed_turn", racing)
    return turn


def _recorded_outside(relay_events: Recorder, turn: Any) -> None:
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "success" and call.parent_uuid != turn.scope.uuid
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert attempt.outcome == "success" and attempt.parent_uuid == call.uuid
    assert turn.logical_llm_calls == {}


def test_a_call_racing_the_end_of_its_turn_gets_its_answer(turn_ends_as_it_is_found, relay_events) -> None:
    """The relay's own 'cannot push under an ended scope' ValueError reached the caller; nothing was sent."""
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("answer")))
    answer = adapters.complete(scripted.client, {"model": "gpt-test", "messages": []})
    assert answer.choices[0].message.content == "answer"
    _recorded_outside(relay_events, turn_ends_as_it_is_found)


@pytest.mark.asyncio
async def test_an_async_stream_racing_the_end_of_its_turn_gets_its_chunks(
    turn_ends_as_it_is_found, relay_events
) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b"], usage=usage))))
    stream = await adapters.astream(scripted.aclient, {"model": "gpt-test", "messages": []}, include_usage=True)
    assert len([chunk async for chunk in stream]) == 5
    _recorded_outside(relay_events, turn_ends_as_it_is_found)


def _failing(req: LLMRequest) -> dict[str, Any]:
    raise ConnectionError("reset")


@pytest.mark.parametrize(("answers", "closed"), [((False,), "failed"), ((False, True), "success")])
def test_a_call_left_open_closes_at_the_turns_end_as_its_last_attempt_ended(
    relay_turn, relay_events, answers, closed
) -> None:
    # A caller keeping the call open for a retry (``defer_logical_completion``) that never came: the call was
    # not answered, whatever the turn's outcome; one whose retry succeeded was.
    _relay, turn = relay_turn
    meta = {cv.API_REQUEST_ID: "r-1"}
    for answered in answers:
        provider = (lambda req: response("ok")) if answered else _failing
        try:
            calls.execute_current(request(), provider, name="p", codec=DictCodec(), metadata=dict(meta),
                                  defer_logical_completion=True)  # fmt: skip
        except ConnectionError:
            pass
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == closed
