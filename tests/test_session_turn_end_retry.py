"""A turn ended while its call waits for the provider, and an execution intercept then retries: the call
goes on unrecorded and returns its answer (or raises the provider's own error), never the relay's."""

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
