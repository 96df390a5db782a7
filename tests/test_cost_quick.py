"""Budgets' quick check (a full context window of input still fits), remembered per scope: it never lets a call
through that the full check would refuse, alone or with concurrent calls, and the assumed output limit stays counted."""

from __future__ import annotations

import pytest

from relay_runtime import adapters, cost, session
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from tests.test_cost import race

# A 1000-token window: with max_tokens 250 the quick check's worst case is 0.001 + 0.001.
PRICES = {"openai": {"gpt-w": {"input": 1.0, "output": 4.0, "context_window": 1000}}}
REQUEST = {"model": "gpt-w", "max_tokens": 250, "messages": []}


def _turn(host: session.Host) -> tuple[object, object]:
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="q-1", platform="pytest")
    return lease, coordinator.begin_turn(lease, turn_id="t-1", task_id="task")


def _close(lease: object, turn: object) -> None:
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    session.SESSION_COORDINATOR.release_conversation(lease)


def _replies(n: int) -> t.ScriptedClients:
    body = t.chat_completion_body(model="gpt-w", usage=t.chat_usage(100, 250))  # 0.0001 + 0.001 each
    return t.scripted_openai(*(t.json_reply(body) for _ in range(n)))


def test_a_remembered_quick_check_still_refuses_near_the_limit(relay_host: session.Host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(0.005, per="turn", warn_at=None))
    scripted = _replies(5)
    lease, turn = _turn(relay_host)
    # Calls 1-3 pass the quick check (spent + 0.002 <= 0.005), call 4 only the full one (0.0033 + 0.001001).
    for _ in range(4):
        adapters.complete(scripted.client, dict(REQUEST))
    with pytest.raises(BudgetExceeded) as caught:
        adapters.complete(scripted.client, dict(REQUEST))
    _close(lease, turn)
    assert len(scripted.script.requests) == 4
    assert caught.value.spent == pytest.approx(0.0044) and caught.value.estimate == pytest.approx(0.001001)
    assert turn.scope.cost.total == pytest.approx(0.0044) and turn.scope.cost.reserved == 0.0


def test_concurrent_calls_under_a_remembered_quick_check_cannot_overshoot(relay_host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(0.005, per="turn"))
    scripted = _replies(40)
    lease, turn = _turn(relay_host)
    adapters.complete(scripted.client, dict(REQUEST))  # the quick check is worked out and remembered here
    refused = race(turn, lambda: adapters.complete(scripted.client, dict(REQUEST)))
    _close(lease, turn)
    sent = len(scripted.script.requests)
    assert sent + len(refused) == 21 and refused
    assert turn.scope.cost.total == pytest.approx(sent * 0.0011) and turn.scope.cost.total <= 0.005
    # Released to float rounding: reservations of one size added and taken back in any order.
    assert turn.scope.cost.reserved == 0.0


def test_an_assumed_output_limit_is_counted_on_every_call(relay_host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(1.0, per="turn"))
    scripted = _replies(2)
    lease, turn = _turn(relay_host)
    for _ in range(2):
        adapters.complete(scripted.client, {"model": "gpt-w", "messages": []})
    _close(lease, turn)
    assert len(scripted.script.requests) == 2
    assert relay_host.relay.diagnostics()["cost.assumed_output_tokens"] == 2


def test_calls_in_flight_under_the_quick_check_cannot_overshoot_with_full_windows(relay_host, relay_events) -> None:
    """The quick check lets a call go without reading its text because a full window of input fits: while it is in
    flight, that whole worst case must stay reserved, or concurrent calls pass on room its input may use."""
    import threading

    import httpx2
    import openai

    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(0.005, per="turn"))
    # Each call reads a full window (1000 tokens: 0.001) and writes its limit (250: 0.001), 0.002 in all,
    # as its text (3000 characters) says it may.
    body = t.chat_completion_body(model="gpt-w", usage=t.chat_usage(1000, 250))
    arrived = threading.Condition()
    held: list[object] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        with arrived:  # hold every call that was let through until the others had their chance
            held.append(request)
            arrived.notify_all()
            arrived.wait_for(lambda: len(held) >= 10, timeout=1.0)
        return httpx2.Response(200, json=body)

    client = openai.OpenAI(
        api_key="sk-test", base_url="https://api.openai.test/v1", max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )  # fmt: skip
    lease, turn = _turn(relay_host)
    kwargs = {"model": "gpt-w", "max_tokens": 250, "messages": [{"role": "user", "content": "x" * 3000}]}
    refused = race(turn, lambda: adapters.complete(client, dict(kwargs)), threads=10)
    _close(lease, turn)
    client.close()
    assert len(held) + len(refused) == 10 and refused
    assert turn.scope.cost.total == pytest.approx(len(held) * 0.002)
    assert turn.scope.cost.total <= 0.005
    assert turn.scope.cost.reserved == 0.0
