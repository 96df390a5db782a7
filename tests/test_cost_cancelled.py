"""A call cancelled once sent, before anything came back: the provider had its prompt and bills the input
once it starts. Counted as nothing, a caller that cancels every call as soon as it is sent would pass any
budget; it is charged its prompt, as an estimate."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx2
import openai
import pytest

from relay_runtime import adapters, cost
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from tests.test_cost import close, conversation

# A 600-character prompt reads as about 200 tokens at the pessimistic 3 characters a token: 0.2 at 1,000 a
# million; the output (one token at most) is next to nothing.
PRICES = {"openai": {"gpt-x": {"input": 1000.0, "output": 1.0}}}
REQUEST = {"model": "gpt-x", "max_tokens": 1, "messages": [{"role": "user", "content": "x" * 600}]}


def _hanging_client(arrived: asyncio.Event) -> Any:
    async def handler(request: httpx2.Request) -> httpx2.Response:
        arrived.set()
        await asyncio.Event().wait()  # the provider is at work: its answer never comes
        raise AssertionError("unreachable")

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, max_retries=0, http_client=http)


async def _sent_then_cancelled(client: Any, arrived: asyncio.Event) -> bool:
    """One call, cancelled as soon as the provider has it; False when the budget refused it before it went."""
    arrived.clear()
    call = asyncio.ensure_future(adapters.acomplete(client, dict(REQUEST)))
    sent = asyncio.ensure_future(arrived.wait())
    await asyncio.wait([call, sent], return_when=asyncio.FIRST_COMPLETED)
    sent.cancel()
    if call.done():
        with pytest.raises(BudgetExceeded):
            call.result()
        return False
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    return True


@pytest.mark.asyncio
async def test_calls_cancelled_once_sent_count_their_prompt_against_the_budget(relay_host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(1.0, per="turn"))
    arrived = asyncio.Event()
    client = _hanging_client(arrived)
    lease, turn = conversation(relay_host)
    try:
        sent = 0
        for _ in range(20):
            if not await _sent_then_cancelled(client, arrived):
                break
            sent += 1
    finally:
        close(lease, turn)
        await client.close()
    assert 3 <= sent <= 6  # the budget held: twenty such prompts cost about 4
    cancelled = [e for e in relay_events.ends(relay_kind=cv.ATTEMPT) if e.outcome == "cancelled"]
    assert len(cancelled) == sent
    assert all(e.cost.estimated and 0.15 < e.cost.amount < 0.3 for e in cancelled)
    assert turn.scope.cost.total <= 1.0
    assert relay_host.relay.diagnostics().get("cost.estimated_cancelled") == sent


@pytest.mark.asyncio
async def test_without_a_budget_a_call_cancelled_once_sent_stays_unpriced(relay_host, relay_events) -> None:
    # Only a budget needs the estimate: the record of the call alone says it was cancelled, with no cost read.
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES))
    arrived = asyncio.Event()
    client = _hanging_client(arrived)
    lease, turn = conversation(relay_host)
    try:
        assert await _sent_then_cancelled(client, arrived)
    finally:
        close(lease, turn)
        await client.close()
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "cancelled" and not end.cost.amount and not end.cost.estimated


def test_a_stream_an_intercept_opened_and_replaced_unread_is_charged_its_prompt_under_a_budget(
    relay_host, relay_events
) -> None:
    """An execution intercept that opens the provider's stream, drops it unread and opens another: the first
    was sent (the provider answered its headers), so under a budget its prompt counts, as a call cancelled once
    sent does; the second is priced from its usage."""
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(10.0, per="turn"))
    body = t.chat_chunks(["fine"], model="gpt-x", usage=t.chat_usage(200, 1))
    s = t.scripted_openai(t.sse_reply(t.openai_chat_sse(body)), t.sse_reply(t.openai_chat_sse(body)))
    adapters.instrument(s.client)

    def second_opinion(name: str, request: Any, next_call: Any) -> Any:
        next_call(request)  # opened, then dropped unread
        return next_call(request)

    relay_host.relay.intercepts.register_llm_stream_execution("second", 0, second_opinion)
    lease, turn = conversation(relay_host)
    try:
        chunks = list(s.client.chat.completions.create(**REQUEST, stream=True, stream_options={"include_usage": True}))
        assert chunks
    finally:
        relay_host.relay.intercepts.deregister_llm_stream_execution("second")
        adapters.uninstrument(s.client)
        close(lease, turn)
    first, second = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert (first.outcome, second.outcome) == ("cancelled", "success")
    assert first.cost.estimated and 0.15 < first.cost.amount < 0.3
    assert not second.cost.estimated and second.cost.amount == pytest.approx(0.2 + 1e-6)
    assert turn.scope.cost.total == pytest.approx(first.cost.amount + second.cost.amount)


def _timing_out_client(error: type[Exception]) -> Any:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise error("the provider took longer than the caller's timeout", request=request)

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    return openai.OpenAI(api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, max_retries=0, http_client=http)


def _timed_out_calls(relay_host: Any, error: type[Exception], budget: Budget | None, calls: int) -> int:
    """``calls`` calls that each time out; how many went before the budget refused one."""
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), *([budget] if budget is not None else []))
    client = _timing_out_client(error)
    lease, turn = conversation(relay_host)
    sent = 0
    try:
        for _ in range(calls):
            try:
                adapters.complete(client, dict(REQUEST))
            except BudgetExceeded:
                break
            except openai.APITimeoutError:
                sent += 1
    finally:
        close(lease, turn)
        client.close()
    return sent


def test_calls_timed_out_waiting_for_the_answer_count_their_prompt_against_the_budget(relay_host, relay_events):
    """A read timeout comes after the whole request went: the provider had the prompt. A caller whose timeout is
    shorter than the model takes would otherwise spend without limit under any budget."""
    sent = _timed_out_calls(relay_host, httpx2.ReadTimeout, Budget(1.0, per="turn"), 20)
    assert 3 <= sent <= 6
    failed = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [e.outcome for e in failed][:sent] == ["failed"] * sent
    assert all(e.cost.estimated and 0.15 < e.cost.amount < 0.3 for e in failed[:sent])
    assert relay_host.relay.diagnostics().get("cost.estimated_timed_out") == sent


@pytest.mark.parametrize("error", [httpx2.ConnectTimeout, httpx2.PoolTimeout, httpx2.WriteTimeout])
def test_a_timeout_before_the_whole_request_went_is_charged_nothing(relay_host, relay_events, error) -> None:
    assert _timed_out_calls(relay_host, error, Budget(1.0, per="turn"), 8) == 8
    assert all(not e.cost.amount and not e.cost.estimated for e in relay_events.ends(relay_kind=cv.ATTEMPT))


def test_without_a_budget_a_call_timed_out_stays_unpriced(relay_host, relay_events) -> None:
    assert _timed_out_calls(relay_host, httpx2.ReadTimeout, None, 1) == 1
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "failed" and not end.cost.amount and not end.cost.estimated
