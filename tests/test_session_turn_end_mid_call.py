"""A turn ended while its call is under way: its attempt ends cancelled with a start before its end, and the
call goes on unrecorded, returning its answer (or raising the provider's own error), never the relay's: when
an execution intercept retries after the turn ended, and when a guardrail was still deciding."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from core_support import DictCodec, request, response

from relay_runtime import LLMRequest, Recorder, calls, session
from relay_runtime import conventions as cv
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
