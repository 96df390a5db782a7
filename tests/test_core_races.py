"""An execution intercept that races provider calls (hedging) and returns the first answer while its own
first call is still in flight: that call's attempt ends with what that call did (cancelled, or its late
answer), never with the answer another call gave; the logical call ends a success with the winner's."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

import pytest
from core_support import DictCodec, attempts, balanced, new_relay, request, response

from relay_runtime import LLMRequest, Recorder, calls
from relay_runtime import conventions as cv
from relay_runtime.session import Turn


async def _hedge(name: str, req: LLMRequest, call_next: Any) -> Any:
    """Send the request twice and answer with whichever call answers first; cancel the other."""
    racers = [asyncio.ensure_future(call_next(req)), asyncio.ensure_future(call_next(req))]
    done, pending = await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
    for loser in pending:
        loser.cancel()
    return done.pop().result()


def _slow_first(hung: asyncio.Event, cancelled: asyncio.Event) -> Any:
    calls_made = 0

    async def provider(req: LLMRequest) -> dict[str, Any]:
        nonlocal calls_made
        calls_made += 1
        if calls_made == 1:  # the first call hangs until the race is decided, and is cancelled
            hung.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        await hung.wait()
        return response(f"answer {calls_made}")

    return provider


@pytest.mark.asyncio
async def test_a_hedged_call_whose_first_provider_call_lost_the_race_records_it_cancelled() -> None:
    relay, rec = new_relay()
    hung, cancelled = asyncio.Event(), asyncio.Event()
    relay.intercepts.register_llm_execution("hedge", 0, _hedge)
    answer = await relay.llm.execute_async("p", request(), _slow_first(hung, cancelled), codec=DictCodec())
    assert answer["text"] == "answer 2"
    await cancelled.wait()
    await asyncio.sleep(0)  # the cancelled call unwinds through the chain
    ends = sorted(attempts(rec.events), key=lambda e: e.metadata.get(cv.RETRY_COUNT) or 0)
    assert [(e.outcome, e.annotated_response and e.annotated_response.output_text) for e in ends] == [
        ("cancelled", None),
        ("success", "answer 2"),
    ]
    assert balanced(rec.events)


@pytest.mark.asyncio
async def test_a_hedged_call_in_a_turn_ends_its_logical_call_a_success_once(
    relay_turn: tuple[Any, Turn], relay_events: Recorder
) -> None:
    relay, _turn = relay_turn
    hung, cancelled = asyncio.Event(), asyncio.Event()
    relay.intercepts.register_llm_execution("hedge", 0, _hedge)
    provider = _slow_first(hung, cancelled)
    answer = await calls.execute_current_async(request(), provider, name="p", codec=DictCodec())
    assert answer["text"] == "answer 2"
    await cancelled.wait()
    await asyncio.sleep(0)
    tried = sorted(relay_events.ends(relay_kind=cv.ATTEMPT), key=lambda e: e.metadata[cv.RETRY_COUNT])
    assert [e.outcome for e in tried] == ["cancelled", "success"]
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.output["outcome"] == "success" and cv.FALLBACK not in call.metadata
    assert {e.parent_uuid for e in tried} == {call.uuid}


def test_a_sync_hedge_on_threads_records_the_slow_call_with_its_own_late_answer() -> None:
    relay, rec = new_relay()
    first_sent, race_over = threading.Event(), threading.Event()
    order = iter(["slow", "fast"])

    def provider(req: LLMRequest) -> dict[str, Any]:
        which = next(order)
        if which == "slow":
            first_sent.set()
            race_over.wait()  # answers only once the caller has its answer
        return response(which)

    pool = ThreadPoolExecutor(2)

    def hedge(name: str, req: LLMRequest, call_next: Any) -> Any:
        slow = pool.submit(call_next, req)
        first_sent.wait()
        fast = pool.submit(call_next, req)
        done, _pending = wait([slow, fast], return_when=FIRST_COMPLETED)
        return done.pop().result()

    relay.intercepts.register_llm_execution("hedge", 0, hedge)
    try:
        assert relay.llm.execute("p", request(), provider, codec=DictCodec())["text"] == "fast"
        race_over.set()
    finally:
        pool.shutdown(wait=True)
    ends = sorted(attempts(rec.events), key=lambda e: e.metadata.get(cv.RETRY_COUNT) or 0)
    assert [(e.outcome, e.annotated_response.output_text) for e in ends] == [("success", "slow"), ("success", "fast")]
    assert balanced(rec.events)
