"""A scope's end event carries its cost roll-up as it stood at the end.

The roll-up itself goes on changing after the end: a call the turn's end cut off is charged when its
answer comes (a late-charge mark says so), and a reservation in flight is released then. Consumers
that hold events and read them later (the ATOF and ATIF exporters buffer them for a writer thread, a
test's recorder keeps them) must read what the record said when it was delivered.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, Relay, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, CostRollup, PriceCatalog
from relay_runtime.integrations.trajectory import AtofExporter
from relay_runtime.threads import ContextExecutor
from tests.test_exporters_held_values import hold_atof_writer

PRICES = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}
BODY = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1000, 0))  # 0.001
REQUEST = {"model": "gpt-x", "max_tokens": 10, "messages": []}


def _turn_with_a_late_answer(host: session.Host, session_id: str) -> Any:
    """A turn: one call answered in it, then one in flight when the turn ends, answered after. Returns the turn."""
    arrived, let_go = threading.Event(), threading.Event()
    script = t.Script([t.json_reply(BODY), t.json_reply(BODY)])
    answer_of = script.handler
    calls = iter(range(2))

    def handler(request: Any) -> Any:
        if next(calls) == 1:  # the second call: held until the turn has ended
            arrived.set()
            let_go.wait(5)
        return answer_of(request)

    script.handler = handler  # type: ignore[method-assign]
    client = t.openai_client(script, max_retries=0)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=session_id, platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="task")
    adapters.complete(client, REQUEST)
    with ContextExecutor(1) as pool:
        late = pool.submit(adapters.complete, client, REQUEST)
        assert arrived.wait(5)
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        let_go.set()
        late.result(5)
    return turn


def test_a_held_turn_end_keeps_the_cost_it_was_delivered_with_after_a_late_charge(relay_home: Path) -> None:
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    events = Recorder()
    host.relay.subscribers.register(events, name="recorder")
    cost.attach(host, PriceCatalog.from_mapping(PRICES), Budget(1.0, per="turn", name="turn"))
    turn = _turn_with_a_late_answer(host, "held")
    (turn_end,) = events.ends(relay_kind=cv.TURN)
    # The live roll-up took the late charge in, and released what the call in flight had reserved.
    assert turn.scope.cost.total == pytest.approx(0.002)
    assert turn.scope.cost.reserved == 0.0
    # The record delivered at the turn's end still says what was true then: one call answered, one in flight.
    assert turn_end.cost is not turn.scope.cost
    assert turn_end.cost.total == pytest.approx(0.001)
    assert turn_end.cost.attempts == 1
    assert turn_end.cost.reserved > 0.0
    (mark,) = events.marks(name=cost.LATE_CHARGE_MARK)
    assert mark.data["rollups"][turn_end.uuid]["total"] == pytest.approx(0.002)


def test_a_buffered_exporter_writes_the_cost_the_turn_ended_with(
    relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    cost.attach(host, PriceCatalog.from_mapping(PRICES))
    written = hold_atof_writer(monkeypatch)  # until the late charge is in
    path = tmp_path / "run.atof.jsonl"
    exporter = AtofExporter(path).attach(host)
    turn = _turn_with_a_late_answer(host, "buffered")
    assert turn.scope.cost.total == pytest.approx(0.002)
    written.set()
    assert exporter.shutdown()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    (end,) = [r for r in rows if r["uuid"] == turn.scope.uuid and r.get("scope_category") == "end"]
    assert end["metadata"]["relay.cost"]["total"] == pytest.approx(0.001)
    assert end["metadata"]["relay.cost"]["attempts"] == 1


def test_a_scope_end_never_carries_half_of_a_charge_another_thread_is_adding(relay_home: Path) -> None:
    relay = Relay("held")
    cost.attach(relay, PriceCatalog.from_mapping(PRICES))
    events = Recorder()
    relay.subscribers.register(events, name="recorder")
    handle = relay.scope.push("work", attach=False)
    rollup = handle.cost = CostRollup("USD")
    charging = relay.cost._lock  # what every charge holds while it adds (``Settlement.settle``)
    charging.acquire()
    rollup.attempts += 1  # half of a charge: counted, not yet added
    ending = threading.Thread(target=relay.scope.end, args=(handle,))
    ending.start()
    ending.join(0.2)
    assert ending.is_alive()  # the end waits for the charge to be whole
    rollup.total += 0.5
    charging.release()
    ending.join(5)
    (end,) = events.ends()
    assert (end.cost.attempts, end.cost.total) == (1, 0.5)
