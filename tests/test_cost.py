"""relay_runtime.cost: prices, the cost of every attempt rolled up, and budgets, on real SDK clients."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, Relay, adapters, auxiliary, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, FileSpendStore, PriceCatalog

PRICES = {
    "openai": {
        "gpt-x": {"input": 1.0, "output": 4.0, "cache_read": 0.1, "valid_from": "2026-01-01"},
        "gpt-r": {"input": 1.0, "output": 4.0, "cache_read": 0.1, "reasoning": 8.0},
        "gpt-x-mini": {"input": 0.1, "output": 0.4},
        "gpt-nocache": {"input": 1.0, "output": 4.0},
    },
    "anthropic": {"claude-x": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}},
}


def catalog() -> PriceCatalog:
    return PriceCatalog.from_mapping(PRICES)


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def one(events: list[Any]) -> Any:
    assert len(events) == 1, events
    return events[0]


@pytest.fixture
def priced(relay_host: session.Host, relay_events: Recorder) -> session.Host:
    cost.attach(relay_host, catalog())
    return relay_host


def conversation(host: session.Host, session_id: str = "s-1") -> tuple[Any, Any]:
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=session_id, platform="pytest")
    return lease, coordinator.begin_turn(lease, turn_id="t-1", task_id="task")


def close(lease: Any, turn: Any, outcome: str = "success") -> None:
    session.SESSION_COORDINATOR.end_turn(turn, outcome=outcome)
    session.SESSION_COORDINATOR.release_conversation(lease)


@auxiliary.auxiliary_call
def retrying_auxiliary(task: str, client: Any) -> Any:
    """One logical call: up to two attempts, the second when the first raised or was rejected."""
    for _ in range(2):
        try:
            return auxiliary.validate_response(adapters.complete(client, {"model": "gpt-x", "messages": []}), task)
        except RuntimeError:
            continue
    return None


# -- the catalog ---------------------------------------------------------------------------------


def test_from_mapping_names_an_unknown_key_and_a_bad_value() -> None:
    with pytest.raises(ValueError, match=r"unknown price keys for openai/gpt-x: \['cached'\]"):
        PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "cached": 0.1}}})
    with pytest.raises(ValueError, match="price 'output' of openai/gpt-x must be a number >= 0"):
        PriceCatalog.from_mapping({"openai": {"gpt-x": {"output": -1}}})
    for endless in (float("inf"), float("nan")):  # inf was taken: every cost inf, which JSON cannot hold
        with pytest.raises(ValueError, match="price 'input' of openai/gpt-x must be a number >= 0"):
            PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": endless, "output": 1.0}}})
    with pytest.raises(ValueError, match="valid_from of openai/gpt-x must be a date"):
        PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1, "valid_from": "yesterday"}}})
    with pytest.raises(TypeError, match="prices of openai/gpt-x must be a mapping"):
        PriceCatalog.from_mapping({"openai": {"gpt-x": 1.0}})


def test_default_reads_genai_prices_and_a_user_catalog_overlays_it() -> None:
    default = PriceCatalog.default()
    gpt4o = default.entry("openai", "gpt-4o")
    assert gpt4o is not None and gpt4o.input == 2.5 and gpt4o.output == 10.0 and gpt4o.cache_read == 1.25
    assert gpt4o.source.startswith("genai-prices ")
    dated = default.entry("openai", "o3")
    assert dated is not None and dated.valid_from is not None  # the data set's own start date
    assert default.entry("openai", "no-such-model-anywhere") is None
    mine = PriceCatalog.from_mapping({"openai": {"gpt-4o": {"input": 9.0, "output": 9.0}}}).overlay(default)
    assert mine.entry("openai", "gpt-4o").input == 9.0  # type: ignore[union-attr]
    assert mine.entry("openai", "GPT-4o").input == 9.0  # type: ignore[union-attr]
    assert mine.entry("openai", "o3") == dated


# -- the cost of every attempt -------------------------------------------------------------------


def test_openai_chat_cached_inside_prompt_and_reasoning_inside_output(priced, relay_turn, relay_events) -> None:
    usage = t.chat_usage(1000, 300, cached=400, reasoning=200)
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body("a", model="gpt-x", usage=usage)),
        t.json_reply(t.chat_completion_body("b", model="gpt-r", usage=usage)),
    )
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    adapters.complete(scripted.client, {"model": "gpt-r", "messages": [{"role": "user", "content": "hi"}]})
    plain, reasoned = (e.cost for e in attempts(relay_events))
    # 600 fresh input at 1.0, 400 cached at 0.1, 300 output (reasoning among them) at 4.0.
    assert plain.breakdown == pytest.approx({"input": 600e-6, "cache_read": 40e-6, "output": 1200e-6})
    assert plain.amount == pytest.approx(1840e-6)
    assert plain.currency == "USD" and plain.valid_from == "2026-01-01" and plain.model == "gpt-x"
    # With a reasoning rate: 100 visible output at 4.0, 200 reasoning at 8.0.
    assert reasoned.breakdown == pytest.approx(
        {"input": 600e-6, "cache_read": 40e-6, "output": 400e-6, "reasoning": 1600e-6}
    )


def test_openai_responses_is_billed_like_chat(priced, relay_turn, relay_events) -> None:
    usage = t.responses_usage(1000, 300, cached=400, reasoning=200)
    scripted = t.scripted_openai(t.json_reply(t.responses_body("ok", model="gpt-x", usage=usage)))
    adapters.complete(scripted.client, {"model": "gpt-x", "input": "hi"}, api_mode="responses")
    assert one(attempts(relay_events)).cost.amount == pytest.approx(1840e-6)


def test_anthropic_cache_reads_and_writes_come_beside_input(priced, relay_turn, relay_events) -> None:
    usage = t.anthropic_usage(100, 50, cache_read=1000, cache_creation=200)
    scripted = t.scripted_anthropic(t.json_reply(t.anthropic_message_body("ok", model="claude-x", usage=usage)))
    adapters.complete(scripted.client, {"model": "claude-x", "max_tokens": 64, "messages": []})
    got = one(attempts(relay_events)).cost
    assert got.breakdown == pytest.approx(
        {"input": 300e-6, "cache_read": 300e-6, "cache_write": 750e-6, "output": 750e-6}
    )
    assert got.amount == pytest.approx(2100e-6)


def test_no_price_gives_no_total_and_is_counted(priced, relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body(model="unknown-model")),
        t.json_reply(t.chat_completion_body(model="gpt-nocache", usage=t.chat_usage(100, 10, cached=50))),
    )
    adapters.complete(scripted.client, {"model": "unknown-model", "messages": []})
    adapters.complete(scripted.client, {"model": "gpt-nocache", "messages": []})
    unknown, uncached = (e.cost for e in attempts(relay_events))
    assert unknown.amount is None and unknown.missing == ("model",)
    assert uncached.amount is None and uncached.missing == ("cache_read",)
    diag = priced.relay.diagnostics()
    assert diag["cost.unpriced_model"] == 1 and diag["cost.unpriced_category"] == 1
    _relay, turn = relay_turn
    rollup = turn.scope.cost
    assert rollup.unpriced == 2 and rollup.total == 0.0 and not rollup.complete


def test_a_stream_is_priced_from_its_final_usage(priced, relay_turn, relay_events) -> None:
    chunks = t.chat_chunks(["a", "b"], model="gpt-x", usage=t.chat_usage(1000, 100))
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)))
    kwargs = {"model": "gpt-x", "messages": [], "stream_options": {"include_usage": True}}
    assert len(list(adapters.stream(scripted.client, kwargs))) == len(chunks)
    assert one(attempts(relay_events)).cost.amount == pytest.approx(1400e-6)


def test_roll_ups_on_logical_call_turn_and_conversation_with_the_wasted_share(
    relay_host: session.Host, relay_events: Recorder
) -> None:
    cost.attach(relay_host, catalog())
    relay = relay_host.relay
    rejected: list[int] = []

    def reject_first(name: str, request: Any, response: Any) -> Any:
        if not rejected:
            rejected.append(1)
            raise RuntimeError("response rejected by policy")
        return response

    relay.intercepts.register_llm_response("reject-first", 0, False, reject_first)
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body("bad", model="gpt-x", usage=t.chat_usage(1000, 0))),
        t.json_reply(t.chat_completion_body("good", model="gpt-x", usage=t.chat_usage(2000, 0))),
    )

    lease, turn = conversation(relay_host)
    retrying_auxiliary("summary", scripted.client)
    close(lease, turn)
    failed, ok = attempts(relay_events)
    assert failed.outcome == "failed" and failed.cost.amount == pytest.approx(1000e-6) and failed.cost.wasted
    assert ok.outcome == "success" and not ok.cost.wasted
    call = one(relay_events.ends(relay_kind=cv.LOGICAL_CALL))
    turn_end = one(relay_events.ends(relay_kind=cv.TURN))
    conv_end = one(relay_events.ends(relay_kind=cv.CONVERSATION))
    for rolled in (call.cost, turn_end.cost, conv_end.cost):
        assert rolled.total == pytest.approx(3000e-6)
        assert rolled.wasted == pytest.approx(1000e-6)  # the failed attempt's, exactly
        assert rolled.attempts == 2 and rolled.currency == "USD"
    assert json.loads(json.dumps(call.to_dict()))["cost"]["wasted"] == pytest.approx(1000e-6)


def test_nothing_is_priced_without_a_catalog(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-x")))
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})
    assert relay.cost.active is False
    assert all(e.cost is None for e in relay_events.ends())
    assert "cost" not in one(attempts(relay_events)).to_dict()


# -- budgets -------------------------------------------------------------------------------------


def test_a_budget_refuses_before_sending(relay_host: session.Host, relay_events: Recorder) -> None:
    cost.attach(relay_host, catalog(), Budget(0.001, per="turn", name="tight"))
    scripted = t.scripted_openai()
    lease, turn = conversation(relay_host)
    with pytest.raises(BudgetExceeded) as caught:
        # 1000 output tokens at 4.0 per million: 0.004 at worst, over the 0.001 limit.
        adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []})
    close(lease, turn)
    assert scripted.script.requests == []  # nothing sent
    err = caught.value
    assert err.budget.name == "tight" and err.limit == 0.001 and err.spent == 0.0
    assert err.estimate == pytest.approx(0.004 + 1e-6)  # the output limit, and 1 token of empty input
    assert "budget 'tight' (per turn) exceeded" in str(err)
    refused = one(attempts(relay_events))
    assert refused.outcome == "failed" and refused.error_type == "BudgetExceeded"
    assert refused.cost.amount == 0.0 and not refused.cost.wasted


def test_max_tokens_bounds_the_estimate_else_the_assumption_is_used_and_counted(relay_host, relay_events) -> None:
    cost.attach(relay_host, catalog(), Budget(0.01, per="turn"))
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-x")))
    lease, turn = conversation(relay_host)
    adapters.complete(scripted.client, {"model": "gpt-x", "max_completion_tokens": 100, "messages": []})
    with pytest.raises(BudgetExceeded):  # 4096 assumed output tokens at 4.0: 0.016 > 0.01
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})
    close(lease, turn)
    assert len(scripted.script.requests) == 1
    assert relay_host.relay.diagnostics()["cost.assumed_output_tokens"] == 1


_SCHEMA = {"type": "object", "description": "x" * 6000, "properties": {"answer": {"type": "string"}}}
_JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": _SCHEMA}}


@pytest.mark.parametrize(
    ("scripted", "request_kwargs"),
    [
        (t.scripted_openai, {"model": "gpt-x", "max_tokens": 100, "messages": [], "response_format": _JSON_SCHEMA}),
        (
            t.scripted_openai,
            {
                "model": "gpt-x",
                "max_tokens": 100,
                "messages": [],
                "functions": [{"name": "answer", "parameters": _SCHEMA}],
            },
        ),
        (
            t.scripted_openai,
            {
                "model": "gpt-x",
                "max_output_tokens": 100,
                "input": "hi",
                "text": {"format": {"type": "json_schema", "name": "a", "schema": _SCHEMA}},
            },
        ),
        (
            t.scripted_anthropic,
            {
                "model": "claude-x",
                "max_tokens": 20,
                "messages": [],
                "output_config": {"format": {"type": "json_schema", "schema": _SCHEMA}},
            },
        ),
    ],
    ids=["chat-response_format", "chat-functions", "responses-text", "anthropic-output_config"],
)
def test_an_output_schema_the_model_reads_counts_in_the_input_estimate(
    relay_host, relay_events, scripted, request_kwargs
) -> None:
    # The schema's 6000+ characters are ~2000 input tokens: at least 0.002 (gpt-x) or 0.006 (claude-x),
    # over the limit whatever the rest; without them the estimate (under 0.0004) would let the call go.
    cost.attach(relay_host, catalog(), Budget(0.0015, per="turn"))
    clients = scripted()
    lease, turn = conversation(relay_host)
    with pytest.raises(BudgetExceeded) as caught:
        adapters.complete(clients.client, request_kwargs)
    close(lease, turn)
    assert clients.script.requests == []
    assert caught.value.estimate > 0.0015


def test_a_budget_downgrades_to_the_cheaper_model_as_a_new_attempt(relay_host, relay_events) -> None:
    budget = Budget(0.001, per="logical_call", on_exceed="downgrade", downgrade_to={"gpt-x": "gpt-x-mini"})
    cost.attach(relay_host, catalog(), budget)
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("cheap", model="gpt-x-mini")))
    lease, turn = conversation(relay_host)
    response = adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []})
    close(lease, turn)
    assert response.choices[0].message.content == "cheap"
    assert [b["model"] for b in scripted.script.bodies()] == ["gpt-x-mini"]
    refused, sent = attempts(relay_events)
    assert refused.error_type == "BudgetExceeded" and refused.model_name == "gpt-x"
    assert sent.outcome == "success" and sent.model_name == "gpt-x-mini"
    assert sent.metadata[cost.DOWNGRADED_FROM] == "gpt-x"
    assert refused.metadata[cv.API_REQUEST_ID] == sent.metadata[cv.API_REQUEST_ID]
    assert (refused.metadata[cv.RETRY_COUNT], sent.metadata[cv.RETRY_COUNT]) == (0, 1)
    assert one(relay_events.ends(relay_kind=cv.LOGICAL_CALL)).outcome == "success"


def test_downgrade_without_a_fitting_mapping_raises(relay_host, relay_events) -> None:
    budget = Budget(0.001, per="turn", on_exceed="downgrade", downgrade_to={"other": "gpt-x-mini"})
    cost.attach(relay_host, catalog(), budget)
    scripted = t.scripted_openai()
    lease, turn = conversation(relay_host)
    with pytest.raises(BudgetExceeded):
        adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []})
    close(lease, turn)
    assert scripted.script.requests == []


def test_stop_stream_closes_a_stream_mid_way(relay_host, relay_events) -> None:
    # 0.0004 of headroom at 4.0 per million output tokens: about 100 tokens, about 300 characters.
    cost.attach(relay_host, catalog(), Budget(0.0004, per="turn", on_exceed="stop_stream"))
    pieces = ["x" * 50] * 20
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(pieces, model="gpt-x"))))
    lease, turn = conversation(relay_host)
    stream = adapters.stream(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []})
    seen = []
    with pytest.raises(BudgetExceeded) as caught:
        for chunk in stream:
            seen.append(chunk)
    with pytest.raises(StopIteration):
        next(stream)
    close(lease, turn)
    assert 2 < len(seen) < len(pieces)  # stopped mid-way, after some text
    stopped = one(attempts(relay_events))
    assert stopped.outcome == "cancelled" and stopped.error_type == "BudgetExceeded"
    assert stopped.cost.estimated and stopped.cost.amount > 0.0004 and stopped.cost.wasted
    assert caught.value.budget.on_exceed == "stop_stream"


def test_stop_stream_on_an_async_stream(relay_host, relay_events) -> None:
    cost.attach(relay_host, catalog(), Budget(0.0004, per="turn", on_exceed="stop_stream"))
    pieces = ["x" * 50] * 20
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(pieces, model="gpt-x"))))

    async def run() -> int:
        lease, turn = conversation(relay_host)
        seen = 0
        try:
            stream = await adapters.astream(scripted.aclient, {"model": "gpt-x", "max_tokens": 1000, "messages": []})
            with pytest.raises(BudgetExceeded):
                async for _ in stream:
                    seen += 1
        finally:
            close(lease, turn)
        return seen

    assert 2 < asyncio.run(run()) < len(pieces)
    assert one(attempts(relay_events)).outcome == "cancelled"


def test_warn_at_emits_one_mark(relay_host, relay_events) -> None:
    cost.attach(relay_host, catalog(), Budget(0.1, per="turn", warn_at=0.01, name="w"))
    body = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1000, 0))  # 0.001 each
    scripted = t.scripted_openai(*(t.json_reply(body) for _ in range(3)))
    lease, turn = conversation(relay_host)
    for _ in range(3):
        adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 10, "messages": []})
    close(lease, turn)
    marks = relay_events.marks(name=cost.WARNING_MARK)
    assert len(marks) == 1
    assert marks[0].data["budget"] == "w" and marks[0].data["spent"] == pytest.approx(0.001)
    assert marks[0].parent_uuid == turn.scope.uuid


def test_a_restart_keeps_a_conversation_budgets_spend(relay_home: Path) -> None:
    body = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1000, 0))  # 0.001

    def run_once() -> Any:
        host = session.SESSION_COORDINATOR.host(session.current_profile_key())
        cost.attach(host, catalog(), Budget(0.0025, per="conversation", name="conv"))
        scripted = t.scripted_openai(t.json_reply(body), t.json_reply(body))
        lease, turn = conversation(host, "persistent")
        try:
            for _ in range(2):
                adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 10, "messages": []})
        finally:
            close(lease, turn)
        return scripted

    first = run_once()
    assert len(first.script.requests) == 2
    session.reset_for_tests()  # the process "restarts": new hosts, relays and stores
    with pytest.raises(BudgetExceeded) as caught:
        run_once()
    assert caught.value.spent == pytest.approx(0.003)  # two carried over, one spent since
    store = FileSpendStore()
    assert store.root == relay_home / "cost" / "spend"
    assert store.load(f"conversation:{session.current_profile_key()}:persistent") == pytest.approx(0.003)


def _answered_after_its_turn_ended(host: session.Host, session_id: str) -> Any:
    """One call in flight when its turn ends; its answer (1000 input tokens of gpt-x: 0.001) comes after.
    Returns the turn."""
    import threading

    from relay_runtime.threads import ContextExecutor

    arrived, let_go = threading.Event(), threading.Event()
    script = t.Script([t.json_reply(t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1000, 0)))])
    answer_of = script.handler

    def held(request: Any) -> Any:
        arrived.set()
        let_go.wait(5)
        return answer_of(request)

    script.handler = held  # type: ignore[method-assign]
    client = t.openai_client(script, max_retries=0)
    lease, turn = conversation(host, session_id)
    with ContextExecutor(1) as pool:
        answer = pool.submit(adapters.complete, client, {"model": "gpt-x", "max_tokens": 10, "messages": []})
        assert arrived.wait(5)
        close(lease, turn)
        let_go.set()
        answer.result(5)
    return turn


def test_a_call_the_turn_ended_while_in_flight_is_still_charged_when_its_answer_comes(relay_home: Path) -> None:
    # The turn ends while the provider still works on a call: the record ends the attempt then,
    # but the provider charges for the answer it sends later, so the budget must count it.
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    cost.attach(host, catalog(), Budget(1.0, per="conversation", name="conv"))
    _answered_after_its_turn_ended(host, "in-flight")
    key = f"conversation:{session.current_profile_key()}:in-flight"
    assert FileSpendStore().load(key) == pytest.approx(0.001)


def _priced_late(session_id: str) -> tuple[Recorder, Any, Any]:
    """A priced call answered after its turn ended: the recorder, the turn and the attempt's end event."""
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    recorder = Recorder()
    host.relay.subscribers.register(recorder, name="recorder")
    cost.attach(host, catalog())
    turn = _answered_after_its_turn_ended(host, session_id)
    return recorder, turn, one(attempts(recorder))


def test_the_late_charge_of_a_call_its_turn_cancelled_is_wasted_as_the_record_says(relay_home: Path) -> None:
    # The attempt is recorded cancelled at the turn's end; what its late answer costs is the wasted share of
    # every roll-up above it, as for any attempt that did not succeed (whatever the late answer was).
    _recorder, turn, attempt = _priced_late("late")
    assert attempt.outcome == "cancelled"
    assert turn.scope.cost.total == pytest.approx(0.001)
    assert turn.scope.cost.wasted == pytest.approx(0.001)


def test_the_late_charge_reaches_the_record_as_a_mark_on_its_attempt(relay_home: Path) -> None:
    # The attempt's end event went out (cancelled) before its answer was priced: the charge reaches the
    # record after it, as a mark on that attempt carrying its cost and the roll-ups of the ended scopes above.
    recorder, turn, attempt = _priced_late("late-mark")
    assert attempt.cost is None  # ended before its answer came: nothing to price yet
    (mark,) = recorder.marks(name=cost.LATE_CHARGE_MARK)
    assert mark.parent_uuid == attempt.uuid and mark.trace_id == attempt.trace_id
    data = mark.data
    assert data["attempt_uuid"] == attempt.uuid and data["outcome"] == "cancelled"
    assert data["cost"]["amount"] == pytest.approx(0.001) and data["cost"]["wasted"] is True
    (logical,) = recorder.ends(relay_kind=cv.LOGICAL_CALL)
    rollups = data["rollups"]
    assert set(rollups) >= {logical.uuid, turn.scope.uuid}
    assert rollups[turn.scope.uuid]["total"] == pytest.approx(0.001)
    assert rollups[turn.scope.uuid]["wasted"] == pytest.approx(0.001)
    assert rollups[logical.uuid]["attempts"] == 1
    # A snapshot: the record says what the scope held once the charge was in, not a live object.
    assert type(rollups[turn.scope.uuid]) is dict
    assert json.loads(json.dumps(mark.to_dict(), default=str))["data"]["attempt_uuid"] == attempt.uuid


def test_the_file_store_writes_atomically_and_refuses_a_damaged_file(tmp_path: Path) -> None:
    store = FileSpendStore(tmp_path)
    assert store.add("conversation:p:s/../../x", 0.5) == 0.5
    path = store.path("conversation:p:s/../../x")
    assert path.parent == tmp_path and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert FileSpendStore(tmp_path).load("conversation:p:s/../../x") == 0.5
    path.write_text("{not json")
    with pytest.raises(ValueError, match="is unreadable"):
        FileSpendStore(tmp_path).load("conversation:p:s/../../x")
    with pytest.raises(ValueError, match="finite amount"):
        store.add("k", float("nan"))


def test_budget_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="limit must be a positive"):
        Budget(0)
    with pytest.raises(ValueError, match="per must be one of"):
        Budget(1, per="week")
    with pytest.raises(ValueError, match="on_exceed must be one of"):
        Budget(1, on_exceed="ignore")
    with pytest.raises(ValueError, match="needs downgrade_to"):
        Budget(1, on_exceed="downgrade")
    with pytest.raises(ValueError, match="warn_at must be a fraction"):
        Budget(1, warn_at=2)
    relay = Relay("x")
    with pytest.raises(ValueError, match="install a price catalog first"):
        relay.cost.budget(Budget(1))


def test_the_quick_check_gives_way_to_the_full_estimate_near_the_limit(relay_host, relay_events) -> None:
    prices = {"openai": {"gpt-w": {"input": 1.0, "output": 4.0, "context_window": 1000}}}
    cost.attach(relay_host, PriceCatalog.from_mapping(prices), Budget(0.002, per="turn"))
    body = t.chat_completion_body(model="gpt-w", usage=t.chat_usage(800, 100))  # 0.0012 each
    scripted = t.scripted_openai(t.json_reply(body), t.json_reply(body))
    lease, turn = conversation(relay_host)
    kwargs = {"model": "gpt-w", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    adapters.complete(scripted.client, kwargs)  # quick: a full window (0.001) + 100 output (0.0004) fits
    adapters.complete(scripted.client, kwargs)  # 0.0012 spent: only the text's estimate still fits
    with pytest.raises(BudgetExceeded) as caught:
        adapters.complete(scripted.client, kwargs)  # 0.0024 spent
    close(lease, turn)
    assert len(scripted.script.requests) == 2
    assert caught.value.spent == pytest.approx(0.0024)
    assert turn.scope.cost.reserved == 0.0  # every reservation released


def test_a_retried_auxiliary_calls_wasted_cost_is_the_rejected_attempts(relay_host, relay_events) -> None:
    cost.attach(relay_host, catalog())
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body("", model="gpt-x", usage=t.chat_usage(1000, 100))),  # empty: rejected
        t.json_reply(t.chat_completion_body("fine", model="gpt-x", usage=t.chat_usage(2000, 100))),
    )

    lease, turn = conversation(relay_host)
    retrying_auxiliary("title_generation", scripted.client)
    close(lease, turn)
    rejected, accepted = attempts(relay_events)
    assert rejected.outcome == "failed" and rejected.error_type == "response_rejected"
    assert rejected.cost.amount == pytest.approx(1400e-6) and rejected.cost.wasted
    assert accepted.outcome == "success" and not accepted.cost.wasted
    call = one(relay_events.ends(relay_kind=cv.LOGICAL_CALL))
    assert call.outcome == "success"
    assert call.cost.total == pytest.approx(1400e-6 + 2400e-6)
    assert call.cost.wasted == pytest.approx(1400e-6)  # the rejected attempt's, exactly
    assert one(relay_events.ends(relay_kind=cv.TURN)).cost.wasted == pytest.approx(1400e-6)


def race(turn: Any, call: Any, threads: int = 20) -> list[BudgetExceeded]:
    """``call`` from ``threads`` threads at once, inside ``turn``; the refusals they met."""
    import threading

    gate = threading.Barrier(threads)
    refused: list[BudgetExceeded] = []

    def worker() -> None:
        with session.use_turn(turn):
            gate.wait()
            try:
                call()
            except BudgetExceeded as exc:
                refused.append(exc)

    running = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return refused


def test_concurrent_calls_cannot_overshoot_a_budget_together(relay_host, relay_events) -> None:
    cost.attach(relay_host, catalog(), Budget(0.005, per="turn"))
    body = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(100, 250))  # 0.0011 each
    scripted = t.scripted_openai(*(t.json_reply(body) for _ in range(40)))
    lease, turn = conversation(relay_host)
    request = {"model": "gpt-x", "max_tokens": 250, "messages": []}
    refused = race(turn, lambda: adapters.complete(scripted.client, request))
    close(lease, turn)
    sent = len(scripted.script.requests)
    assert sent + len(refused) == 20 and refused
    assert turn.scope.cost.total == pytest.approx(sent * 0.0011) and turn.scope.cost.total <= 0.005
    assert turn.scope.cost.reserved == 0.0


def test_tiered_rates_follow_the_whole_input_size() -> None:
    from relay_runtime import TokenUsage
    from relay_runtime.cost import PriceEntry
    from relay_runtime.cost.pricing import price_usage

    entry = PriceEntry("anthropic", "long", input=((0, 3.0), (200_000, 6.0)), output=15.0, cache_read=0.3)
    short = price_usage(entry, "anthropic", TokenUsage(input_tokens=1000, output_tokens=0))
    # Anthropic's cache reads come beside its input: together they cross the 200k tier.
    long = price_usage(entry, "anthropic", TokenUsage(input_tokens=1000, output_tokens=0, cache_read_tokens=199_500))
    assert short.amount == pytest.approx(1000 * 3.0e-6)
    assert long.breakdown["input"] == pytest.approx(1000 * 6.0e-6)


def test_an_async_call_is_refused_before_sending_too(relay_host, relay_events) -> None:
    cost.attach(relay_host, catalog(), Budget(0.001, per="conversation", name="conv"))
    scripted = t.scripted_openai()

    async def run() -> None:
        lease, turn = conversation(relay_host, "async-session")
        try:
            with pytest.raises(BudgetExceeded, match="budget 'conv' \\(per conversation\\)"):
                await adapters.acomplete(scripted.aclient, {"model": "gpt-x", "max_tokens": 1000, "messages": []})
        finally:
            close(lease, turn)

    asyncio.run(run())
    assert scripted.script.requests == []
    assert one(attempts(relay_events)).error_type == "BudgetExceeded"


def test_attempts_after_a_downgrade_number_after_it(relay_host, relay_events) -> None:
    budget = Budget(0.001, per="logical_call", on_exceed="downgrade", downgrade_to={"gpt-x": "gpt-x-mini"})
    cost.attach(relay_host, catalog(), budget)
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body("", model="gpt-x-mini", usage=t.chat_usage(100, 10))),  # rejected
        t.json_reply(t.chat_completion_body("ok", model="gpt-x-mini", usage=t.chat_usage(100, 10))),
    )

    @auxiliary.auxiliary_call
    def summary(task: str) -> Any:
        for _ in range(2):
            try:
                request = {"model": "gpt-x", "max_tokens": 1000, "messages": []}
                return auxiliary.validate_response(adapters.complete(scripted.client, request), task)
            except RuntimeError:
                continue
        return None

    lease, turn = conversation(relay_host)
    assert summary("summary").choices[0].message.content == "ok"
    close(lease, turn)
    ends = attempts(relay_events)
    assert [e.metadata[cv.RETRY_COUNT] for e in ends] == [0, 1, 2, 3]
    assert [e.model_name for e in ends] == ["gpt-x", "gpt-x-mini", "gpt-x", "gpt-x-mini"]
    assert [e.error_type for e in ends] == ["BudgetExceeded", "response_rejected", "BudgetExceeded", None]
    assert [b["model"] for b in scripted.script.bodies()] == ["gpt-x-mini", "gpt-x-mini"]


def test_the_neutral_max_tokens_an_intercept_set_bounds_the_estimate(relay_host, relay_events) -> None:
    cost.attach(relay_host, catalog(), Budget(0.01, per="turn"))
    relay = relay_host.relay

    def cap(name: str, request: Any, annotated: Any) -> Any:
        annotated.params["max_tokens"] = 100  # the neutral name; the codec spells it for the API
        return relay.LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("cap", 0, False, cap)
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-x")))
    lease, turn = conversation(relay_host)
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": []})  # 4096 assumed would be 0.016 > 0.01
    close(lease, turn)
    assert scripted.script.bodies()[0]["max_completion_tokens"] == 100
    assert "cost.assumed_output_tokens" not in relay.diagnostics()


def test_a_downgraded_attempt_refused_again_records_the_request_it_would_have_sent(relay_host, relay_events) -> None:
    """Its start said gpt-x-mini as its model and recorded the gpt-x request it replaced."""
    budget = Budget(1e-9, per="turn", on_exceed="downgrade", downgrade_to={"gpt-x": "gpt-x-mini"})
    cost.attach(relay_host, catalog(), budget)
    scripted = t.scripted_openai()
    lease, turn = conversation(relay_host)
    with pytest.raises(BudgetExceeded):
        adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []})
    close(lease, turn)
    assert scripted.script.requests == []
    first, downgraded = relay_events.starts(relay_kind=cv.ATTEMPT)
    assert (first.model_name, first.input["content"]["model"]) == ("gpt-x", "gpt-x")
    assert (downgraded.model_name, downgraded.input["content"]["model"]) == ("gpt-x-mini", "gpt-x-mini")
    assert downgraded.metadata[cost.DOWNGRADED_FROM] == "gpt-x"
    assert [e.error_type for e in attempts(relay_events)] == ["BudgetExceeded", "BudgetExceeded"]
