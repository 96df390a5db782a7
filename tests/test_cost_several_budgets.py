"""Several budgets on one scope or one profile: each is checked, and what is spent and in flight counts once."""

from __future__ import annotations

import pytest

from relay_runtime import Recorder, adapters, cost, session
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, PriceCatalog
from tests.test_cost import close, conversation
from tests.test_cost_shared_spend import LoadAddStore

PRICES = PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}})
REQUEST = {"model": "gpt-x", "max_tokens": 250, "messages": []}  # 0.001001 at worst (250 out, 1 in)
CALL = 0.001001  # what each answer below costs: 1 input and 250 output tokens


def _answers(count: int) -> t.Scripted:
    body = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1, 250))
    return t.scripted_openai(*(t.json_reply(body) for _ in range(count)))


def test_two_profile_budgets_count_each_call_once(relay_host: session.Host, relay_events: Recorder) -> None:
    store = LoadAddStore()
    cost.attach(relay_host, PRICES, Budget(0.003, per="profile", warn_at=None),
                Budget(0.01, per="profile", warn_at=None), store=store)  # fmt: skip
    scripted = _answers(2)
    lease, turn = conversation(relay_host)
    for _ in range(2):
        adapters.complete(scripted.client, dict(REQUEST))  # 0.002002 spent and 0.001001 more fit under 0.003
    close(lease, turn)
    assert len(scripted.script.requests) == 2
    assert relay_host.relay.cost.profile_rollup(relay_host.profile_key).total == pytest.approx(2 * CALL)
    assert store.load(f"profile:{relay_host.profile_key}") == pytest.approx(2 * CALL)


def test_two_turn_budgets_hold_a_call_in_flight_once(relay_host: session.Host, relay_events: Recorder) -> None:
    cost.attach(relay_host, PRICES, Budget(0.003, per="turn"), Budget(0.01, per="turn"))
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["x"], model="gpt-x"))))
    scripted.add(t.json_reply(t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1, 250))))
    lease, turn = conversation(relay_host)
    stream = adapters.stream(scripted.client, dict(REQUEST))  # in flight until read: 0.001001 held
    assert turn.scope.cost.reserved == pytest.approx(CALL)
    adapters.complete(scripted.client, dict(REQUEST))  # 0.001001 held and 0.001001 more fit under 0.003
    for _ in stream:
        pass
    close(lease, turn)
    assert len(scripted.script.requests) == 2
    assert turn.scope.cost.reserved == 0.0
