"""What pricing and budgets add to a managed call, side by side with the same call unpriced, in one run.

The baseline is a managed call whose subscriber reads the response's annotation
(as the OTel exporter and the journal do), so the annotation is paid for in
both; the difference is the pricing, the roll-ups into the scopes above, and
the budget's worst-case check and reservation. Calls run inside a turn scope
(the session layer's kind), where a per-turn budget applies.

Budget (issue 14): a catalog and one budget add at most 1 us per managed call
(CPU medians; the machine is shared, so wall figures are printed beside them).
Without a catalog, cost adds nothing but the ``relay.cost.active`` tests: the
core benchmark (``bench_core``) measures that path against its own budgets.

Spend stores (issue 23): a call under a conversation or profile budget reserves
its worst case in the store before it is sent and settles after; the figures
compare that pair on the memory, file and Redis stores (a real ``redis-server``
on loopback, with ``appendfsync everysec`` and ``always``), and a whole managed
call with its spend in memory and in Redis.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_core import CALLS, HEADERS, ROUNDS, Timing, _line, _ratio, compare_sync
from benchmarks.journal_stores import _start_redis
from relay_runtime import LLMRequest, Relay
from relay_runtime import conventions as cv
from relay_runtime.adapters.openai_chat import OpenAIChatCodec
from relay_runtime.cost import Budget, Claim, FileSpendStore, MemorySpendStore, PriceCatalog, RedisSpendStore

CODEC = OpenAIChatCodec()
RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-x",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 64}},
}
PRICES = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0, "cache_read": 0.1, "context_window": 128_000}}}


def _content() -> dict[str, Any]:
    return {"model": "gpt-x", "max_tokens": 256, "messages": [{"role": "user", "content": "hello there"}]}


def provider(request: LLMRequest) -> dict[str, Any]:
    return RESPONSE


def reads_usage(event: Any) -> None:
    if event.kind == "scope_end":
        response = event.annotated_response
        if response is not None:
            _ = response.usage


def _relay(name: str, *, catalog: bool, budget: bool) -> tuple[Relay, Any]:
    relay = Relay(name)
    relay.subscribers.register(reads_usage, name="reads-usage")
    if catalog:
        relay.cost.use(PriceCatalog.from_mapping(PRICES))
    if budget:
        relay.cost.budget(Budget(100.0, per="turn"))  # far from the limit: the quick check decides
    turn = relay.scope.push("turn", metadata={cv.KIND: cv.TURN})
    return relay, turn


def bench_pricing() -> Timing:
    plain, plain_turn = _relay("bench-plain", catalog=False, budget=False)
    priced, _ = _relay("bench-priced", catalog=True, budget=False)
    budgeted, budgeted_turn = _relay("bench-budget", catalog=True, budget=True)
    content = _content()

    def call(relay: Relay) -> Any:
        return relay.llm.execute("bench", LLMRequest(HEADERS, content), provider, codec=CODEC)

    times = compare_sync(
        {
            "bare": lambda: provider(LLMRequest(HEADERS, content)),
            "plain": lambda: call(plain),
            "priced": lambda: call(priced),
            "budget": lambda: call(budgeted),
        }
    )
    print("managed call with a subscriber reading usage (sync): unpriced, priced, priced with one budget")
    _line("bare callback", times["bare"])
    _line("relay.llm.execute, no catalog", times["plain"])
    _line("relay.llm.execute, catalog", times["priced"])
    _line("relay.llm.execute, catalog and one turn budget", times["budget"])
    _line("added by pricing", times["priced"] - times["plain"])
    added = times["budget"] - times["plain"]
    _line("added by pricing and one budget", added, 1.0)
    # Sanity: what was measured is what the report says (the attempts were priced and rolled up).
    assert budgeted_turn.cost.attempts > 0 and plain_turn.cost is None
    return added


STORE_CALLS = 300  # reserve+settle pairs per sample: each is two round trips to Redis, or two locked file writes
STORE_ROUNDS = 7


def _reserve_settle(store: Any, key: str) -> Callable[[], Any]:
    claims = [Claim(key, 1e12)]

    def call() -> Any:
        return store.settle(store.reserve(claims, 0.001), 0.0009)

    return call


def _managed_call(relay: Relay) -> Callable[[], Any]:
    content = _content()
    return lambda: relay.llm.execute("bench", LLMRequest(HEADERS, content), provider, codec=CODEC)


def bench_spend_stores() -> None:
    """One call's shared-budget accounting (reserve before sending, settle after) on each store, in one run;
    then a whole managed call with a conversation budget kept in memory and in Redis."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        servers = {fsync: _start_redis(root / f"redis-{fsync}", fsync) for fsync in ("everysec", "always")}
        try:
            if any(found is None for found in servers.values()):
                print("redis-server not found (apt-get install redis-server): Redis figures skipped")
                return
            stores: dict[str, Any] = {"memory": MemorySpendStore(), "file": FileSpendStore(root / "spend")}
            for fsync, found in servers.items():
                assert found is not None
                stores[f"redis {fsync}"] = RedisSpendStore(found[1], prefix=f"bench-{fsync}")
            times = compare_sync({name: _reserve_settle(store, "conversation:bench:s")
                                  for name, store in stores.items()}, n=STORE_CALLS, rounds=STORE_ROUNDS)  # fmt: skip
            print(f"spend store: reserve + settle per call (medians of {STORE_ROUNDS} x {STORE_CALLS}; wall is "
                  "what a call waits, Redis on loopback)")  # fmt: skip
            for name, timing in times.items():
                _line(f"{name} store", timing)
            _ratio("redis everysec over memory (wall)", times["redis everysec"].wall / times["memory"].wall)
            _ratio("file over redis everysec (wall)", times["file"].wall / times["redis everysec"].wall)
            calls = {}
            for name in ("memory", "redis everysec"):
                relay, _turn = _relay(f"bench-{name}", catalog=True, budget=False)
                relay.cost.use_store(stores[name])
                relay.cost.budget(Budget(1e9, per="conversation"))
                relay.scope.push("conversation", metadata={cv.KIND: cv.CONVERSATION, cv.SESSION_ID: f"s-{name}"})
                calls[name] = _managed_call(relay)
            whole = compare_sync(calls, n=STORE_CALLS, rounds=STORE_ROUNDS)
            print("managed call with one conversation budget, by where its spend is kept")
            for name, timing in whole.items():
                _line(f"relay.llm.execute, {name} store", timing)
            _line("added by Redis (wall)", whole["redis everysec"] - whole["memory"])
            for store in stores.values():
                if isinstance(store, RedisSpendStore):
                    store.close()
        finally:
            for found in servers.values():
                if found is not None:
                    found[0].terminate()
                    found[0].wait(10)


def main() -> None:
    print(f"medians of {ROUNDS} samples of {CALLS} calls each; CPU time per call (the machine is shared)")
    bench_pricing()
    bench_spend_stores()


if __name__ == "__main__":
    main()
