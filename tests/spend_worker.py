"""One worker process spending against shared budgets, for the cross-process spend tests (no tests here).

Run as ``python tests/spend_worker.py CONFIG_JSON``: it builds a relay with a price catalog, the
budgets and the spend store the config names, prints ``ready``, waits for a line on stdin (so every
worker starts together), makes its calls from several threads through a real OpenAI client on the
mock transport, and prints one JSON line: how many calls were sent and refused.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from relay_runtime import adapters, cost, session
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, FileSpendStore, PriceCatalog, RedisSpendStore

PRICES = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}
# 1 input token at 1.0 and 250 output tokens at 4.0 per million: 0.001001, the same as the worst case
# (an empty message list reads as one token, and max_tokens is 250), so budgets come out exact.
CALL_COST = 0.001001
BODY = t.chat_completion_body(model="gpt-x", usage=t.chat_usage(1, 250))
REQUEST = {"model": "gpt-x", "max_tokens": 250, "messages": []}


def store_of(config: dict[str, Any]) -> Any:
    if config["store"] == "file":
        return FileSpendStore(config["where"])
    return RedisSpendStore(config["where"], prefix=config["prefix"])


def main() -> None:
    config = json.loads(sys.argv[1])
    profile = config["profile"]
    host = session.SESSION_COORDINATOR.host(profile)
    budgets = [Budget(limit, per=per, warn_at=None) for per, limit in config["budgets"].items()]
    cost.attach(host, PriceCatalog.from_mapping(PRICES), *budgets, store=store_of(config))
    threads, calls = config["threads"], config["calls"]
    scripted = t.scripted_openai(*(t.json_reply(BODY) for _ in range(threads * calls)))
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=profile, session_id=config["session"], platform="worker")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="spend")
    refused: list[BudgetExceeded] = []
    gate = threading.Barrier(threads)

    def worker() -> None:
        with session.use_turn(turn):
            gate.wait()
            for _ in range(calls):
                try:
                    adapters.complete(scripted.client, dict(REQUEST))
                except BudgetExceeded as exc:
                    refused.append(exc)

    print("ready", flush=True)
    sys.stdin.readline()
    running = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    print(json.dumps({"sent": len(scripted.script.requests), "refused": len(refused)}), flush=True)


if __name__ == "__main__":
    main()
