"""What a framework's model calls cost when the integration records them from the framework's callbacks.

Without ``adapters.instrument()``, LangChain's ``RelayCallbackHandler`` and the OpenAI Agents SDK's trace
processor record each provider call as an attempt observed from the framework's data (``ModelCall.observe``):
nothing ran it through an ``Attempt``, so it was never priced. Its end event said it cost nothing, no scope
above counted it, and a budget never saw its spend: an agent under the callback handler spent without limit
while its records said it cost nothing. Observed, it cannot be refused before it is sent; it is priced at its
end as a managed attempt is, and its spend counts for the next call. With the SDK instrumented the SDK's own
attempt is the one priced, once.

Real LangChain (a chat model reporting ``usage_metadata``; ``ChatOpenAI`` over the scripted transport) and the
real Agents SDK (an ``AsyncOpenAI`` client on the scripted transport), a ``PriceCatalog.from_mapping``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, FileSpendStore, MemorySpendStore, PriceCatalog
from tests import framework_support
from tests.framework_support import attempts, logical_calls, need, only_our_agents_processor, tool_call_body

langchain_openai = need("langchain_openai")
agents_mod = need("langchain.agents")
chat_models = need("langchain_core.language_models.chat_models")
messages_mod = need("langchain_core.messages")
outputs_mod = need("langchain_core.outputs")
tools_mod = need("langchain_core.tools")
agents = need("agents")

from relay_runtime.integrations import openai_agents  # noqa: E402
from relay_runtime.integrations.langchain import RelayCallbackHandler  # noqa: E402
from tests.test_frameworks_langchain import chat_model  # noqa: E402

otel_spans = framework_support.otel_spans
RATES = {"input": 1.0, "output": 2.0}
PRICES = {"openai": {"gpt-test": RATES, "m-1": RATES}}
# ChatOpenAI's tool round: 12 + 5 tokens (the scripted default), then 30 + 3.
CHAT_COSTS = ((12 * 1.0 + 5 * 2.0) * 1e-6, (30 * 1.0 + 3 * 2.0) * 1e-6)
# The Agents SDK's tool round: 20 + 7 tokens (the scripted default), then 30 + 3.
AGENT_COSTS = ((20 * 1.0 + 7 * 2.0) * 1e-6, (30 * 1.0 + 3 * 2.0) * 1e-6)
BIG = (1000 * 1.0 + 500 * 2.0) * 1e-6  # one call of Spender


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    with only_our_agents_processor():
        yield


class Spender(chat_models.BaseChatModel):
    """An OpenAI chat model as LangChain reports it (1000 input and 500 output tokens a call), no SDK inside.

    ``during`` runs inside the provider call (after the callbacks' start, before their end)."""

    during: Any = None

    @property
    def _llm_type(self) -> str:
        return "spender-test"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"], params["ls_model_name"] = "openai", "m-1"
        return params

    def _generate(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:  # fmt: skip
        if self.during is not None:
            self.during()
        usage = {"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500}
        message = messages_mod.AIMessage(content="ok", usage_metadata=usage, response_metadata={"model_name": "m-1"})
        return outputs_mod.ChatResult(generations=[outputs_mod.ChatGeneration(message=message)])


def observe(model: Any, text: str = "hi") -> Any:
    return model.invoke(text, config={"callbacks": [RelayCallbackHandler()]})


@tools_mod.tool
def weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


def chat_agent() -> tuple[Any, Any, t.Script]:
    script = t.Script([
        t.json_reply(tool_call_body("weather", {"city": "Paris"})),
        t.json_reply(t.chat_completion_body("Done.", usage=t.chat_usage(30, 3))),
    ])  # fmt: skip
    model = chat_model(script)
    return agents_mod.create_agent(model, [weather], name="helper"), model, script


def run_chat_agent(agent: Any) -> Any:
    inputs = {"messages": [{"role": "user", "content": "Weather in Paris?"}]}
    return agent.invoke(inputs, config={"callbacks": [RelayCallbackHandler()]})


def agent_scope(events: Recorder, name: str = "helper") -> Any:
    (scope,) = [e for e in events.ends() if e.scope_type == "agent" and e.name == name]
    return scope


# -- LangChain's callback handler -------------------------------------------------------------------


def test_an_observed_langchain_call_is_priced_and_rolled_up(relay_turn: Any, relay_events: Recorder) -> None:
    relay, turn = relay_turn
    cost.attach(relay, PriceCatalog.from_mapping(PRICES))
    observe(Spender())
    (end,) = attempts(relay_events)
    assert (end.cost.amount, end.cost.provider, end.cost.model) == (pytest.approx(BIG), "openai", "m-1")
    (call,) = logical_calls(relay_events)
    assert (call.cost.total, call.cost.attempts) == (pytest.approx(BIG), 1)
    assert (turn.scope.cost.total, turn.scope.cost.attempts) == (pytest.approx(BIG), 1)


def test_a_chat_openai_agent_under_the_handler_costs_what_its_calls_cost_in_every_record(
    relay_turn: Any, relay_events: Recorder, otel_spans: Any
) -> None:
    relay, turn = relay_turn
    cost.attach(relay, PriceCatalog.from_mapping(PRICES))
    agent, _model, script = chat_agent()
    run_chat_agent(agent)
    tried = attempts(relay_events)
    assert len(tried) == len(script.requests) == 2
    assert [a.cost.amount for a in tried] == [pytest.approx(c) for c in CHAT_COSTS]
    assert agent_scope(relay_events).cost.total == pytest.approx(sum(CHAT_COSTS))
    assert (turn.scope.cost.total, turn.scope.cost.attempts) == (pytest.approx(sum(CHAT_COSTS)), 2)
    spans = [dict(s.attributes or {}) for s in otel_spans.get_finished_spans()]
    priced = sorted(a["gen_ai.usage.cost.amount"] for a in spans if "gen_ai.usage.cost.amount" in a)
    assert priced == [pytest.approx(c) for c in sorted(CHAT_COSTS)]
    (agent_span,) = [a for a in spans if a.get("gen_ai.agent.name") == "helper" and "relay.cost.rollup.total" in a]
    assert agent_span["relay.cost.rollup.total"] == pytest.approx(sum(CHAT_COSTS))


@pytest.mark.parametrize("instrumented", ["sdk", "own-client", "another-client"])
def test_with_an_sdk_instrumented_a_handler_call_is_priced_once(
    relay_turn: Any, relay_events: Recorder, instrumented: str
) -> None:
    """The SDK attempt joins the handler's call (``instrument()``, or the model's own client instrumented,
    decided at the call's end): it is the one priced, never beside an observed one. With another client
    instrumented, the observed attempt is the one."""
    relay, turn = relay_turn
    cost.attach(relay, PriceCatalog.from_mapping(PRICES))
    agent, model, script = chat_agent()
    if instrumented == "sdk":
        adapters.instrument()
    else:
        adapters.instrument(model.root_client if instrumented == "own-client" else t.openai_client(t.Script([])))
    run_chat_agent(agent)
    tried = attempts(relay_events)
    assert len(tried) == len(script.requests) == 2
    assert [a.cost.amount for a in tried] == [pytest.approx(c) for c in CHAT_COSTS]
    assert (turn.scope.cost.total, turn.scope.cost.attempts) == (pytest.approx(sum(CHAT_COSTS)), 2)


def test_observed_spend_counts_against_a_turn_budget(relay_home: Any) -> None:
    """Observed calls cannot be refused before they go; their spend counts after the fact: the budget warns,
    and the next managed call, which would cross it, is refused with nothing sent."""
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    events = Recorder()
    host.relay.subscribers.register(events, name="test")
    budget = Budget(3 * BIG, per="turn", warn_at=0.5)
    cost.attach(host, PriceCatalog.from_mapping(PRICES), budget, store=MemorySpendStore())
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="c-1", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="task")
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="m-1")), max_retries=0)
    try:
        observe(Spender())
        observe(Spender())
        (warning,) = events.marks(name=cost.WARNING_MARK)
        assert warning.data["spent"] == pytest.approx(2 * BIG)
        with pytest.raises(BudgetExceeded) as refused:
            adapters.complete(scripted.client, {"model": "m-1", "messages": [], "max_tokens": 1000})
        assert refused.value.spent == pytest.approx(2 * BIG)
        assert scripted.script.requests == []  # nothing sent
        observe(Spender())  # observed: it went, and it counts
        assert turn.scope.cost.total == pytest.approx(3 * BIG)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)


@pytest.mark.parametrize("store", ["memory", "file"])
def test_observed_spend_is_kept_for_conversation_and_profile_budgets(relay_home: Any, store: str) -> None:
    """Spend that outlives the process is in the spend store, also a shared one's (the default file store)."""
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    spend = MemorySpendStore() if store == "memory" else FileSpendStore()
    budgets = (Budget(1.0, per="conversation"), Budget(1.0, per="profile"))
    cost.attach(host, PriceCatalog.from_mapping(PRICES), *budgets, store=spend)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="c-1", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="task")
    try:
        observe(Spender())
        observe(Spender())
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
    assert spend.load(f"profile:{host.profile_key}") == pytest.approx(2 * BIG)
    assert spend.load(f"conversation:{host.profile_key}:c-1") == pytest.approx(2 * BIG)
    assert host.relay.cost.profile_rollup(host.profile_key).spent == pytest.approx(2 * BIG)


@pytest.mark.parametrize("single_clients", [False, True], ids=["recorded-at-start", "recorded-at-end"])
def test_an_observed_call_answered_after_its_turn_ended_is_a_late_charge(
    relay_home: Any, monkeypatch: pytest.MonkeyPatch, single_clients: bool
) -> None:
    """The turn ends while the framework's call runs: the attempt ends with it, cancelled, before its logical
    call (as a managed attempt does: no attempt outlives its turn), and the answer that comes after is a
    late-charge mark carrying the attempt's cost and the roll-ups it belongs in. With no single client
    instrumented the handler records the attempt when the call starts; with one (the flag is sticky), only at
    its end, unless an SDK attempt joins: the end of the turn then records it, or it was lost."""
    monkeypatch.setattr(sys.modules["relay_runtime.adapters.instrument"], "_single_clients", single_clients)
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    events = Recorder()
    host.relay.subscribers.register(events, name="test")
    cost.attach(host, PriceCatalog.from_mapping(PRICES), store=MemorySpendStore())
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="c-1", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="task")
    try:
        observe(Spender(during=lambda: coordinator.end_turn(turn, outcome="cancelled")))
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
    (end,) = attempts(events)
    assert end.outcome == "cancelled"
    (call_end,) = logical_calls(events)
    ends = [e.uuid for e in events.ends()]
    assert ends.index(end.uuid) < ends.index(call_end.uuid)
    (turn_end,) = events.ends(relay_kind=cv.TURN)
    assert turn_end.cost is None or turn_end.cost.total == 0  # it ended before the answer came
    (mark,) = events.marks(name=cost.LATE_CHARGE_MARK)
    assert mark.data["attempt_uuid"] == end.uuid
    assert mark.data["cost"]["amount"] == pytest.approx(BIG)
    assert mark.data["rollups"][turn_end.uuid]["total"] == pytest.approx(BIG)


# -- the OpenAI Agents SDK's trace processor ------------------------------------------------------------


def agents_run(*, instrumented: bool) -> t.Scripted:
    if instrumented:
        adapters.instrument()
    openai_agents.instrument()
    call = {"call_id": "call-1", "name": "weather", "arguments": json.dumps({"city": "Paris"})}
    s = t.scripted_openai(
        t.json_reply(t.responses_body("", function_call=call)),
        t.json_reply(t.responses_body("Done.", usage=t.responses_usage(30, 3))),
        max_retries=0,
    )
    agents.set_default_openai_client(s.aclient, use_for_tracing=False)
    tool = agents.function_tool(lambda city: f"sunny in {city}", name_override="weather")
    agent = agents.Agent(name="helper", instructions="Answer briefly.", model="gpt-test", tools=[tool])
    assert asyncio.run(agents.Runner.run(agent, "Weather in Paris?")).final_output == "Done."
    return s


@pytest.mark.parametrize("instrumented", [False, True], ids=["spans", "with-instrument"])
def test_an_agents_sdk_run_costs_what_its_calls_cost_once(
    relay_turn: Any, relay_events: Recorder, otel_spans: Any, instrumented: bool
) -> None:
    relay, turn = relay_turn
    cost.attach(relay, PriceCatalog.from_mapping(PRICES))
    s = agents_run(instrumented=instrumented)
    tried = attempts(relay_events)
    assert len(tried) == len(s.script.requests) == 2
    assert [a.cost.amount for a in tried] == [pytest.approx(c) for c in AGENT_COSTS]
    assert [a.cost.provider for a in tried] == ["openai", "openai"]
    assert agent_scope(relay_events).cost.total == pytest.approx(sum(AGENT_COSTS))
    assert (turn.scope.cost.total, turn.scope.cost.attempts) == (pytest.approx(sum(AGENT_COSTS)), 2)
    spans = [dict(s.attributes or {}) for s in otel_spans.get_finished_spans()]
    priced = sorted(a["gen_ai.usage.cost.amount"] for a in spans if "gen_ai.usage.cost.amount" in a)
    assert priced == [pytest.approx(c) for c in sorted(AGENT_COSTS)]


def test_an_agents_sdk_run_spends_a_turn_budget(relay_turn: Any, relay_events: Recorder) -> None:
    relay, _turn = relay_turn
    cost.attach(relay, PriceCatalog.from_mapping(PRICES), Budget(sum(AGENT_COSTS), per="turn"),
                store=MemorySpendStore())  # fmt: skip
    agents_run(instrumented=False)
    (warning,) = relay_events.marks(name=cost.WARNING_MARK)
    assert warning.data["spent"] == pytest.approx(sum(AGENT_COSTS))
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("more")), max_retries=0)
    with pytest.raises(BudgetExceeded):  # spent to the limit: the next managed call is refused
        adapters.complete(scripted.client, {"model": "gpt-test", "messages": [], "max_tokens": 10})
    assert scripted.script.requests == []
