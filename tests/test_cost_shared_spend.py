# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""Conversation and profile budgets shared by processes: a ``FileSpendStore`` on one disk and a
``RedisSpendStore`` on a real ``redis-server``, with real worker processes making calls at once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_support import redis_prefix, redis_server  # noqa: F401 - fixtures

from relay_runtime import adapters, cost
from relay_runtime.adapters import testing as t
from relay_runtime.cost import (
    Budget,
    BudgetExceeded,
    Claim,
    FileSpendStore,
    MemorySpendStore,
    PriceCatalog,
    RedisSpendStore,
)
from tests.process_support import LineReader
from tests.spend_worker import CALL_COST
from tests.test_cost import close, conversation

ROOT = Path(__file__).resolve().parent.parent


def run_workers(count: int, config: dict[str, Any]) -> list[dict[str, int]]:
    """Start ``count`` workers, let them all go at once, and return what each reports."""
    command = [sys.executable, str(ROOT / "tests" / "spend_worker.py"), json.dumps(config)]
    procs = [
        subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    try:
        readers = [LineReader(p.stdout) for p in procs]  # type: ignore[arg-type]
        for reader in readers:
            assert reader.next(120).strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = [json.loads(reader.next(120)) for reader in readers]
        for proc in procs:
            assert proc.wait(60) == 0
        return reports
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_two_processes_share_a_profile_budget_through_the_file_store(tmp_path: Path) -> None:
    root = tmp_path / "spend"
    config = {"store": "file", "where": str(root), "profile": "shared", "session": "s-file",
              "budgets": {"profile": 0.01}, "threads": 2, "calls": 6}  # fmt: skip
    reports = run_workers(2, config)
    sent = sum(r["sent"] for r in reports)
    # 0.01 holds nine calls of 0.001001; each process alone would have sent nine.
    assert sent == 9 and sum(r["refused"] for r in reports) == 24 - 9
    # Both processes' spend is in the file, not the last writer's alone.
    assert FileSpendStore(root).load("profile:shared") == pytest.approx(9 * CALL_COST)


def test_a_file_store_reads_spend_another_process_added_before_every_check(tmp_path: Path) -> None:
    mine, theirs = FileSpendStore(tmp_path), FileSpendStore(tmp_path)
    assert mine.load("k") == 0.0
    theirs.add("k", 0.75)
    assert mine.load("k") == pytest.approx(0.75)
    refused = mine.reserve([Claim("k", 1.0)], 0.5)
    assert refused.crossed == 0 and refused.committed == (pytest.approx(0.75),)
    held = theirs.reserve([Claim("k", 1.0)], 0.2)
    assert held.crossed is None and mine.reserve([Claim("k", 1.0)], 0.1).crossed == 0  # 0.75 + 0.2 in flight
    assert theirs.settle(held, 0.1) == (pytest.approx(0.85),)
    assert mine.reserve([Claim("k", 1.0)], 0.1).crossed is None


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_reservation_is_all_or_nothing_and_expires_when_never_settled(kind: str, tmp_path: Path) -> None:
    store: Any = MemorySpendStore(reservation_ttl=0.2) if kind == "memory" else \
        FileSpendStore(tmp_path, reservation_ttl=0.2)  # fmt: skip
    store.add("b", 0.9)
    refused = store.reserve([Claim("a", 1.0), Claim("b", 1.0)], 0.2)
    assert refused.crossed == 1
    assert store.reserve([Claim("a", 1.0)], 0.9).crossed is None  # nothing was held under "a" by the refusal
    assert store.reserve([Claim("a", 1.0)], 0.2).crossed == 0
    # A metered stream's budget lets a call go while anything is left.
    assert store.reserve([Claim("a", 1.0, soft=True)], 0.2).crossed is None
    time.sleep(0.3)  # the reservations' worker "died": they expire
    assert store.reserve([Claim("a", 1.0)], 0.9).crossed is None


def test_spend_store_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reservation_ttl"):
        FileSpendStore(tmp_path, reservation_ttl=0)
    with pytest.raises(ValueError, match="non-empty key"):
        MemorySpendStore().reserve([Claim("", 1.0)], 0.1)
    with pytest.raises(ValueError, match="finite amount"):
        MemorySpendStore().reserve([Claim("k", 1.0)], float("nan"))
    with pytest.raises(ValueError, match="redis://"):
        RedisSpendStore("http://localhost:6379")


# -- Redis -----------------------------------------------------------------------------------------


@pytest.fixture
def redis_store(redis_server, redis_prefix) -> Any:
    store = RedisSpendStore(redis_server.url, prefix=redis_prefix, reservation_ttl=0.5)
    try:
        yield store
    finally:
        store.close()


def test_redis_reserves_all_or_nothing_and_settles_atomically(redis_store) -> None:
    assert redis_store.load("p") == 0.0
    assert redis_store.add("p", 0.9) == pytest.approx(0.9)
    refused = redis_store.reserve([Claim("c", 1.0), Claim("p", 1.0)], 0.2)
    assert refused.crossed == 1 and refused.committed[1] == pytest.approx(0.9)
    held = redis_store.reserve([Claim("c", 1.0), Claim("p", 1.0, soft=True)], 0.2)
    assert held.crossed is None and held.spent == (0.0, pytest.approx(0.9))
    assert redis_store.reserve([Claim("c", 1.0)], 0.9).crossed == 0  # 0.2 in flight under "c"
    assert redis_store.settle(held, 0.05) == (pytest.approx(0.05), pytest.approx(0.95))
    assert redis_store.reserve([Claim("c", 1.0)], 0.9).crossed is None
    time.sleep(0.7)  # never settled: expired, it holds nothing
    assert redis_store.reserve([Claim("c", 1.0)], 0.9).crossed is None
    assert redis_store.load("c") == pytest.approx(0.05)


def test_many_threads_on_one_redis_store_never_overshoot(redis_store) -> None:
    limit, amount = 1.0, 0.03
    sent: list[int] = []
    gate = threading.Barrier(16)

    def worker() -> None:
        gate.wait()
        for _ in range(10):
            held = redis_store.reserve([Claim("tight", limit)], amount)
            if held.crossed is None:
                sent.append(1)
                redis_store.settle(held, amount)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sent) == 33 and redis_store.load("tight") == pytest.approx(33 * amount)


def test_many_worker_processes_share_conversation_and_profile_budgets_through_redis(
    redis_server, redis_prefix
) -> None:
    # Four processes of four threads, all in one conversation: the conversation budget (0.02) binds
    # first, at 19 calls; the profile budget (0.05) is charged the same calls.
    config = {"store": "redis", "where": redis_server.url, "prefix": redis_prefix, "profile": "fleet",
              "session": "s-redis", "budgets": {"conversation": 0.02, "profile": 0.05}, "threads": 4,
              "calls": 5}  # fmt: skip
    reports = run_workers(4, config)
    assert sum(r["sent"] for r in reports) == 19
    store = RedisSpendStore(redis_server.url, prefix=redis_prefix)
    try:
        assert store.load("conversation:fleet:s-redis") == pytest.approx(19 * CALL_COST)
        assert store.load("profile:fleet") == pytest.approx(19 * CALL_COST)
    finally:
        store.close()


def test_a_stream_is_metered_against_what_the_shared_store_holds(relay_host, relay_events) -> None:
    store = MemorySpendStore()
    # Another worker spent 0.0006 of this profile's 0.001: about 100 output tokens are left at 4.0 per million.
    store.add(f"profile:{relay_host.profile_key}", 0.0006)
    budget = Budget(0.001, per="profile", on_exceed="stop_stream")
    cost.attach(relay_host, PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}), budget,
                store=store)  # fmt: skip
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["x" * 50] * 20, model="gpt-x"))))
    lease, turn = conversation(relay_host)
    seen = 0
    with pytest.raises(BudgetExceeded):
        for _ in adapters.stream(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []}):
            seen += 1
    close(lease, turn)
    assert 2 < seen < 10  # ~300 characters: stopped on the store's figure, not this process's zero
    assert store.load(f"profile:{relay_host.profile_key}") > 0.001  # what the stopped stream cost is recorded


class LoadAddStore:
    """A spend store of the older protocol (load and add only): checked in this process's roll-up."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def load(self, key: str) -> float:
        return self.spent.get(key, 0.0)

    def add(self, key: str, amount: float) -> float:
        self.spent[key] = self.spent.get(key, 0.0) + amount
        return self.spent[key]


def test_a_store_with_only_load_and_add_is_still_checked_in_this_process(relay_host, relay_events) -> None:
    old = LoadAddStore()
    old.add(f"profile:{relay_host.profile_key}", 0.008)
    prices = PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}})
    cost.attach(relay_host, prices, Budget(0.01, per="profile", warn_at=None), store=old)
    body = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1, 250))
    scripted = t.scripted_openai(*(t.json_reply(body) for _ in range(3)))
    lease, turn = conversation(relay_host)
    request = {"model": "gpt-x", "max_tokens": 250, "messages": []}
    adapters.complete(scripted.client, dict(request))
    with pytest.raises(BudgetExceeded):
        adapters.complete(scripted.client, dict(request))  # 0.008 carried + 0.001001 spent + 0.001001 > 0.01
    close(lease, turn)
    assert len(scripted.script.requests) == 1
    assert old.load(f"profile:{relay_host.profile_key}") == pytest.approx(0.009001)


def test_a_store_that_cannot_be_reached_refuses_the_call(relay_host, relay_events) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisSpendStore(f"redis://127.0.0.1:{port}/0", timeout=0.5)
    prices = PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}})
    cost.attach(relay_host, prices, Budget(1.0, per="conversation"), store=store)
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-x")))
    lease, turn = conversation(relay_host)
    with pytest.raises(redis.ConnectionError):
        adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 10, "messages": []})
    close(lease, turn)
    assert scripted.script.requests == []  # never sent unchecked
    assert relay_host.relay.diagnostics()["cost.spend_store_errors"] == 1
    assert turn.scope.cost is None or turn.scope.cost.reserved == 0.0


def test_a_damaged_spend_file_never_lifts_the_budget(tmp_path: Path) -> None:
    store = FileSpendStore(tmp_path)
    store.add("k", 0.5)
    path = store.path("k")
    data = json.loads(path.read_text())
    for held in ("NaN", -1000.0, "Infinity"):
        # A NaN or negative reservation made committed + amount > limit false: any call passed.
        data["reserved"] = {"x": [held, 1e18]}
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="is unreadable"):
            store.reserve([Claim("k", 1.0)], 100.0)


def test_a_damaged_spend_hash_never_lifts_the_budget(redis_store) -> None:
    key = f"{redis_store.prefix}:k"
    damaged = (("spent", "nan"), ("spent", "-5"), ("r:x", "-1000|1e18"), ("r:x", "nan|1e18"), ("r:x", "junk"))
    for field, value in damaged:
        redis_store.client.delete(key)
        redis_store.client.hset(key, field, value)
        with pytest.raises(redis.ResponseError, match=f"spend hash {key} field {field} is unreadable"):
            redis_store.reserve([Claim("k", 1.0)], 100.0)
