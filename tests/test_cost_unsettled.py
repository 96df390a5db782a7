# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""Spend a shared store failed to settle is settled again before the next check, never counted twice:
a real ``redis-server`` killed mid-call and brought back, a reply lost on the way back through a proxy,
a spend directory that cannot be written for a moment."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from redis_support import DroppingProxy, own_redis_server, redis_prefix, redis_server  # noqa: F401 - fixtures

from relay_runtime import adapters, cost
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, Claim, FileSpendStore, MemorySpendStore, PriceCatalog, RedisSpendStore
from relay_runtime.cost import unsettled as unsettled_module
from tests.spend_worker import BODY, CALL_COST, PRICES, REQUEST
from tests.test_cost import close, conversation


class FaultAfterAnswer(t.Script):
    """Answers every call with ``BODY``, and runs ``fault`` once, as the first answer leaves the provider:
    what the store does next is the settle of that call."""

    def __init__(self, fault: Any) -> None:
        super().__init__(t.json_reply(BODY) for _ in range(4))
        self.fault = fault

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handler(request)
        if self.fault is not None:
            fault, self.fault = self.fault, None
            fault()
        return response


def _attach(relay_host: Any, store: Any) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(1.0, per="profile", warn_at=None), store=store)


def _count(relay_host: Any, name: str) -> int:
    return int(relay_host.relay.diagnostics().get(name, 0))


def _calls(relay_host: Any, script: t.Script, n: int) -> None:
    client = t.openai_client(script, max_retries=0)
    lease, turn = conversation(relay_host)
    try:
        for _ in range(n):
            adapters.complete(client, dict(REQUEST))
    finally:
        close(lease, turn)


def test_a_settle_the_store_never_received_is_settled_at_the_next_check(relay_host, own_redis_server) -> None:
    server = own_redis_server
    store = RedisSpendStore(server.url, prefix="relay-test:unsettled", timeout=0.5)
    key = f"profile:{relay_host.profile_key}"
    _attach(relay_host, store)
    try:
        # The server dies while the provider answers the first call, and is back (its data kept) for the second.
        _calls(relay_host, FaultAfterAnswer(server.kill), 1)
        diagnostics = relay_host.relay.diagnostics()
        assert diagnostics.get("cost.spend_store_errors", 0) == 1
        server.start()
        _calls(relay_host, t.Script([t.json_reply(BODY)]), 1)
        assert store.load(key) == pytest.approx(2 * CALL_COST)  # the first call's spend was lost before
        diagnostics = relay_host.relay.diagnostics()
        assert diagnostics.get("cost.spend_resettled", 0) == 1
        assert diagnostics.get("cost.spend_lost", 0) == 0
        # No reservation is left holding budget: the first one was replaced by its spend.
        fields = store.client.hkeys(f"relay-test:unsettled:{key}")
        assert fields == [b"spent"]
    finally:
        store.close()


def test_a_settle_whose_reply_was_lost_is_not_counted_twice(relay_host, redis_server, redis_prefix) -> None:
    proxy = DroppingProxy(redis_server.port)
    store = RedisSpendStore(proxy.url, prefix=redis_prefix, timeout=2.0)
    key = f"profile:{relay_host.profile_key}"
    _attach(relay_host, store)
    try:
        # The settle of the first call runs on the server; its answer is cut on the way back.
        _calls(relay_host, FaultAfterAnswer(proxy.drop_next_reply.set), 3)
        assert proxy.dropped == 1
        diagnostics = relay_host.relay.diagnostics()
        assert diagnostics.get("cost.spend_store_errors", 0) == 1
        assert diagnostics.get("cost.spend_resettled", 0) == 1  # tried again before the second call's check
        assert store.load(key) == pytest.approx(3 * CALL_COST)  # three calls, three charges: not four
    finally:
        store.close()
        proxy.close()


def test_a_file_store_settle_failing_part_way_is_completed_once(tmp_path: Path, monkeypatch) -> None:
    """Two budgets on two keys: the settle writes the first and fails on the second; the retry adds the second
    alone (the first no longer holds the reservation)."""
    store = FileSpendStore(tmp_path)
    reservation = store.reserve([Claim("a", 1.0), Claim("b", 1.0)], 0.5)
    real_write = store._write
    failing = {"b"}

    def write(key: str, ledger: Any, *, durable: bool) -> None:
        if key in failing:
            raise OSError(28, "No space left on device")
        real_write(key, ledger, durable=durable)

    monkeypatch.setattr(store, "_write", write)
    with pytest.raises(OSError):
        store.settle(reservation, 0.25)
    failing.clear()
    assert store.resettle(reservation, 0.25) == (0.25, 0.25)
    assert store.resettle(reservation, 0.25) == (0.25, 0.25)  # a second retry changes nothing
    assert (store.load("a"), store.load("b")) == (0.25, 0.25)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_resettle_adds_only_where_the_reservation_is_still_held(kind: str, tmp_path: Path) -> None:
    store: Any = MemorySpendStore() if kind == "memory" else FileSpendStore(tmp_path)
    settled = store.reserve([Claim("k", 1.0)], 0.5)
    store.settle(settled, 0.25)
    assert store.resettle(settled, 0.25) == (0.25,)  # it ran: nothing more
    pending = store.reserve([Claim("k", 1.0)], 0.5)
    assert store.resettle(pending, 0.125) == (0.375,)  # it never ran: now it has
    assert store.reserve([Claim("k", 1.0)], 0.625).crossed is None  # no reservation left behind


def test_redis_resettle_adds_only_where_the_reservation_is_still_held(redis_server, redis_prefix) -> None:
    store = RedisSpendStore(redis_server.url, prefix=redis_prefix)
    try:
        settled = store.reserve([Claim("k", 1.0), Claim("j", 1.0)], 0.5)
        store.settle(settled, 0.25)
        assert store.resettle(settled, 0.25) == (0.25, 0.25)
        pending = store.reserve([Claim("k", 1.0)], 0.5)
        assert store.resettle(pending, 0.125) == (0.375,)
        assert store.load("j") == 0.25
    finally:
        store.close()


def test_a_redis_settle_run_after_its_retry_is_not_counted_twice(redis_server, redis_prefix) -> None:
    # The settle timed out but was still on its way; the retry went out on a new connection and ran first.
    store = RedisSpendStore(redis_server.url, prefix=redis_prefix)
    try:
        late = store.reserve([Claim("k", 1.0), Claim("j", 1.0)], 0.5)
        # On "j" the reservation was swept (past its deadline) before the retry: the retry cannot add there.
        store.client.hdel(f"{redis_prefix}:j", f"r:{late.id}")
        assert store.resettle(late, 0.25) == (0.25, 0.0)
        assert store.settle(late, 0.25) == (0.25, 0.25)  # "k" had it from the retry; "j" only now
        assert (store.load("k"), store.load("j")) == (0.25, 0.25)
        # What marks the retry lives no longer than a reservation does.
        assert 0 < store.client.ttl(f"{redis_prefix}:retried:{late.id}") <= store.reservation_ttl
        # A settle with no retry before it adds as it always did, reservation held or not.
        plain = store.reserve([Claim("k", 1.0)], 0.5)
        assert store.settle(plain, 0.125) == (0.375,)
        assert not store.client.exists(f"{redis_prefix}:retried:{plain.id}")
    finally:
        store.close()


def test_a_store_down_past_the_reservations_deadline_counts_the_spend_lost(relay_host, own_redis_server) -> None:
    """Past its deadline the store dropped the reservation: whether the settle ran cannot be told, so the spend
    is counted lost rather than risked twice."""
    server = own_redis_server
    store = RedisSpendStore(server.url, prefix="relay-test:late", timeout=0.5, reservation_ttl=0.2)
    _attach(relay_host, store)
    try:
        _calls(relay_host, FaultAfterAnswer(server.kill), 1)
        server.start()
        import time

        time.sleep(0.3)
        _calls(relay_host, t.Script([t.json_reply(BODY)]), 1)
        diagnostics = relay_host.relay.diagnostics()
        assert diagnostics.get("cost.spend_lost", 0) == 1
        assert diagnostics.get("cost.spend_resettled", 0) == 0
        assert store.load(f"profile:{relay_host.profile_key}") == pytest.approx(CALL_COST)
    finally:
        store.close()


def test_a_store_with_no_resettle_counts_the_spend_lost_at_once(relay_host) -> None:
    class NoRetry(MemorySpendStore):
        resettle = None  # type: ignore[assignment]

        def settle(self, reservation: Any, amount: float) -> tuple[float, ...]:
            raise ConnectionError("down")

    _attach(relay_host, NoRetry())
    _calls(relay_host, t.Script([t.json_reply(BODY)]), 1)
    diagnostics = relay_host.relay.diagnostics()
    assert diagnostics.get("cost.spend_store_errors", 0) == 1
    assert diagnostics.get("cost.spend_lost", 0) == 1


def test_while_the_store_stays_down_the_oldest_settles_are_dropped_past_the_limit(relay_host, monkeypatch) -> None:
    monkeypatch.setattr(unsettled_module, "LIMIT", 2)
    down = {"settle": True}

    class Flaky(MemorySpendStore):
        def settle(self, reservation: Any, amount: float) -> tuple[float, ...]:
            if down["settle"]:
                raise ConnectionError("down")
            return super().settle(reservation, amount)

        def resettle(self, reservation: Any, amount: float) -> tuple[float, ...]:
            if down["settle"]:
                raise ConnectionError("still down")
            return super().resettle(reservation, amount)

    store = Flaky()
    monkeypatch.setattr(unsettled_module, "RETRY_EVERY_S", 0.0)
    _attach(relay_host, store)
    _calls(relay_host, t.Script([t.json_reply(BODY) for _ in range(3)]), 3)
    diagnostics = relay_host.relay.diagnostics()
    assert diagnostics.get("cost.spend_lost", 0) == 1  # three failed, two kept
    down["settle"] = False
    _calls(relay_host, t.Script([t.json_reply(BODY)]), 1)
    assert _count(relay_host, "cost.spend_resettled") == 2
    assert store.load(f"profile:{relay_host.profile_key}") == pytest.approx(3 * CALL_COST)


def test_a_settle_the_store_refuses_for_good_does_not_hold_back_the_others(monkeypatch) -> None:
    """One kept settle the store raises on every time (a spend file gone unreadable under its key): the settles
    kept after it waited behind it, never tried, until the limit dropped them as lost with the store up."""
    from relay_runtime.diagnostics import Diagnostics

    monkeypatch.setattr(unsettled_module, "RETRY_EVERY_S", 0.0)

    class Refusing(MemorySpendStore):
        def resettle(self, reservation: Any, amount: float) -> tuple[float, ...]:
            if "bad" in reservation.keys:
                raise ValueError("spend file for 'bad' is unreadable")
            return super().resettle(reservation, amount)

    store, diag = Refusing(), Diagnostics()
    kept = unsettled_module.Unsettled()
    bad = store.reserve([Claim("bad", 1.0)], 0.5)
    good = store.reserve([Claim("good", 1.0)], 0.5)
    kept.keep(store, bad, 0.25, time.time(), diag)
    kept.keep(store, good, 0.25, time.time(), diag)
    for _ in range(3):
        kept.retry(diag)
    assert store.load("good") == 0.25
    assert diag.snapshot().get(unsettled_module.RESETTLED) == 1
    assert kept  # the refused one is still kept, to be tried again until its deadline


def test_the_limit_drops_no_settle_while_it_is_being_tried(monkeypatch) -> None:
    """Past the limit the oldest kept settle is dropped and counted lost: it was so while a retry was settling
    it again (another thread's settle failing meanwhile), which then succeeded: one spend counted both."""
    from relay_runtime.diagnostics import Diagnostics

    monkeypatch.setattr(unsettled_module, "LIMIT", 2)
    kept = unsettled_module.Unsettled()
    diag = Diagnostics()

    class Store(MemorySpendStore):
        def resettle(self, reservation: Any, amount: float) -> tuple[float, ...]:
            if reservation is first:  # another thread's settle fails as this one is tried
                kept.keep(self, third, 0.5, time.time(), diag)
            return super().resettle(reservation, amount)

    store = Store()
    first, second, third = (store.reserve([Claim(k, 10.0)], 1.0) for k in ("a", "b", "c"))
    kept.keep(store, first, 0.25, time.time(), diag)
    kept.keep(store, second, 0.125, time.time(), diag)
    kept.retry(diag)
    counts = diag.snapshot()
    assert (counts.get(unsettled_module.LOST), counts.get(unsettled_module.RESETTLED)) == (1, 2)
    assert (store.load("a"), store.load("b"), store.load("c")) == (0.25, 0.0, 0.5)  # the second was dropped
    assert not kept
