"""Budgets hold for every provider call an execution intercept makes: a retry after an answer or an error,
and calls fanned out side by side, are checked before each is sent (real SDK clients, mock transport)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from tests.core_support import balanced
from tests.test_cost import close, conversation

PRICES = PriceCatalog.from_mapping(
    {"openai": {"gpt-x": {"input": 1.0, "output": 4.0}, "gpt-x-mini": {"input": 0.1, "output": 0.4}}}
)
REQUEST = {"model": "gpt-x", "max_tokens": 250, "messages": []}  # 0.001001 at worst (250 out, 1 in)
CALL = 0.001001  # what each answer below costs: 1 input and 250 output tokens
LIMIT = 0.0025  # two answers fit, a third does not


def _answers(count: int, model: str = "gpt-x") -> t.Scripted:
    body = t.chat_completion_body(model=model, usage=t.chat_usage(1, 250))
    return t.scripted_openai(*(t.json_reply(body) for _ in range(count)))


def _attempts(events: Recorder) -> list[tuple[str, str | None]]:
    return [(e.outcome, e.error_type) for e in events.ends(relay_kind=cv.ATTEMPT)]


def test_a_retrying_intercept_is_refused_once_the_budget_is_spent(relay_host, relay_events) -> None:
    """Each call after the intercept's first went unchecked: four answers (0.004) under a 0.0025 budget."""
    cost.attach(relay_host, PRICES, Budget(LIMIT, per="turn"))
    scripted = _answers(4)

    def ask_four_times(name: str, request: Any, next_: Any) -> Any:
        for _ in range(4):
            answer = next_(request)
        return answer

    relay_host.relay.intercepts.register_llm_execution("ask-four-times", 0, ask_four_times)
    lease, turn = conversation(relay_host)
    with pytest.raises(BudgetExceeded):
        adapters.complete(scripted.client, dict(REQUEST))
    close(lease, turn)
    assert len(scripted.script.requests) == 2
    assert turn.scope.cost.total == pytest.approx(2 * CALL) and turn.scope.cost.reserved == 0.0
    assert _attempts(relay_events) == [("success", None), ("success", None), ("failed", "BudgetExceeded")]
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "failed"
    assert balanced(relay_events.events)


def test_an_intercept_answering_in_place_of_a_refused_retry_is_a_fallback(relay_host, relay_events) -> None:
    cost.attach(relay_host, PRICES, Budget(LIMIT, per="turn"))
    scripted = _answers(3)

    def best_of_three(name: str, request: Any, next_: Any) -> Any:
        answers = []
        for _ in range(3):
            try:
                answers.append(next_(request))
            except BudgetExceeded:
                break
        return answers[-1]

    relay_host.relay.intercepts.register_llm_execution("best-of-three", 0, best_of_three)
    lease, turn = conversation(relay_host)
    assert adapters.complete(scripted.client, dict(REQUEST)).choices[0].message.content
    close(lease, turn)
    assert len(scripted.script.requests) == 2
    assert _attempts(relay_events) == [("success", None), ("success", None), ("failed", "BudgetExceeded")]
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert call.outcome == "success" and call.metadata[cv.FALLBACK] == "best-of-three"
    assert balanced(relay_events.events)


def test_a_retry_over_the_budget_is_downgraded_as_a_first_call_is(relay_host, relay_events) -> None:
    downgrade = Budget(LIMIT, per="turn", on_exceed="downgrade", downgrade_to={"gpt-x": "gpt-x-mini"})
    cost.attach(relay_host, PRICES, downgrade)
    scripted = _answers(3)

    def ask_three_times(name: str, request: Any, next_: Any) -> Any:
        for _ in range(3):
            answer = next_(request)
        return answer

    relay_host.relay.intercepts.register_llm_execution("ask-three-times", 0, ask_three_times)
    lease, turn = conversation(relay_host)
    adapters.complete(scripted.client, dict(REQUEST))
    close(lease, turn)
    sent = [r.content for r in scripted.script.requests]
    assert [b'"model":"gpt-x-mini"' in body for body in sent] == [False, False, True]
    assert _attempts(relay_events) == [
        ("success", None), ("success", None), ("failed", "BudgetExceeded"), ("success", None)
    ]  # fmt: skip
    assert balanced(relay_events.events)


@pytest.mark.asyncio
async def test_calls_fanned_out_side_by_side_are_each_checked(relay_host, relay_events) -> None:
    """Each call beside the first went unchecked: three in flight at once (0.003) under a 0.0025 budget."""
    cost.attach(relay_host, PRICES, Budget(LIMIT, per="turn"))
    scripted = _answers(3)

    async def fan_out(name: str, request: Any, next_: Any) -> Any:
        answers = await asyncio.gather(*(next_(request) for _ in range(3)), return_exceptions=True)
        refused = [a for a in answers if isinstance(a, BudgetExceeded)]
        assert len(refused) == 1
        return next(a for a in answers if not isinstance(a, BaseException))

    relay_host.relay.intercepts.register_llm_execution("fan-out", 0, fan_out)
    lease, turn = conversation(relay_host)
    await adapters.acomplete(scripted.aclient, dict(REQUEST))
    close(lease, turn)
    assert len(scripted.script.requests) == 2
    assert turn.scope.cost.total == pytest.approx(2 * CALL) and turn.scope.cost.reserved == 0.0
    assert sorted(_attempts(relay_events), key=str) == [
        ("failed", "BudgetExceeded"), ("success", None), ("success", None)
    ]  # fmt: skip
    assert balanced(relay_events.events)


def test_an_intercept_that_stays_within_the_budget_is_not_refused(relay_host: session.Host) -> None:
    cost.attach(relay_host, PRICES, Budget(1.0, per="turn"))
    scripted = _answers(3)

    def ask_three_times(name: str, request: Any, next_: Any) -> Any:
        return [next_(request) for _ in range(3)][-1]

    relay_host.relay.intercepts.register_llm_execution("ask-three-times", 0, ask_three_times)
    lease, turn = conversation(relay_host)
    adapters.complete(scripted.client, dict(REQUEST))
    close(lease, turn)
    assert len(scripted.script.requests) == 3
    assert turn.scope.cost.total == pytest.approx(3 * CALL) and turn.scope.cost.reserved == 0.0
