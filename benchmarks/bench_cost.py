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
"""

from __future__ import annotations

from typing import Any

from benchmarks.bench_core import CALLS, HEADERS, ROUNDS, Timing, _line, compare_sync
from relay_runtime import LLMRequest, Relay
from relay_runtime import conventions as cv
from relay_runtime.adapters.openai_chat import OpenAIChatCodec
from relay_runtime.cost import Budget, PriceCatalog

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


def main() -> None:
    print(f"medians of {ROUNDS} samples of {CALLS} calls each; CPU time per call (the machine is shared)")
    bench_pricing()


if __name__ == "__main__":
    main()
