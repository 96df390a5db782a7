"""What a redaction policy costs a managed call, side by side with NeMo Relay's PII redaction in the same run.

Scenarios (medians of round-robin samples, CPU time; see ``bench_core`` for the method):

- the core's figure with no policy installed: one request intercept and one subscriber,
  budget 6 us over the bare call (the policy must cost nothing when absent);
- the same call over a 2 KB prompt with every built-in detector but ``presidio`` and
  ``high_entropy`` (``redact``), budget 50 us added over the same call with no policy: with a
  new prompt every call (nothing remembered), and with the same prompt again (an agent resends
  its history every turn; the policy remembers what it made of strings it has seen);
- one ``email`` redact rule on both libraries (the configuration NeMo Relay's built-in
  PII redaction can express: one detector per process), async, a new prompt every call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from benchmarks import instructions
from benchmarks.bench_core import (
    CALLS,
    HEADERS,
    ROUNDS,
    _line,
    _ratio,
    compare_async,
    compare_sync,
    keep,
    sink,
)
from relay_runtime import LLMRequest, Relay
from relay_runtime.redaction import RedactionPolicy, Rule

DETECTORS = ("email", "phone", "credit_card", "iban", "ip_address", "us_ssn", "jwt", "api_key")

_FILLER = (
    "Please summarise the following support ticket and suggest the next step for the agent. The customer "
    "reports that the export job fails every night since the upgrade, with a timeout after ten minutes; "
    "the logs show the worker retrying three times before it gives up. "
)
_PERSONAL = (
    "You can reach me at jane.doe@example.com or on +44 20 7946 0958; my card ending is on file as "
    "4111 1111 1111 1111, the server is 10.0.4.17, and the key we used was sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ. "
)


def prompt_2kb() -> str:
    text = _PERSONAL
    while len(text) < 2048:
        text += _FILLER
    return text[:2048]


def _content(prompt: str | None = None) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a support assistant."},
            {"role": "user", "content": prompt or prompt_2kb()},
        ],
        "temperature": 0.2,
    }


# More distinct prompts than the policy remembers (4096): cycling through them, every call is a first sight.
DISTINCT = 5000


def _distinct_contents() -> list[dict[str, Any]]:
    base = prompt_2kb()
    return [_content(f"ticket {i:05d}. " + base[:-13]) for i in range(DISTINCT)]


def _response() -> Any:
    from openai.types.chat import ChatCompletion

    from relay_runtime.adapters import testing

    return ChatCompletion.model_validate(testing.chat_completion_body("The export job times out; raise the limit."))


def _relay(policy: RedactionPolicy | None) -> Relay:
    relay = Relay("bench-redaction")
    relay.intercepts.register_llm_request("keep", 0, False, keep)
    relay.subscribers.register(sink, name="sink")
    relay.redaction.use(policy)
    return relay


def all_detectors() -> RedactionPolicy:
    return RedactionPolicy([Rule("redact", detector=name) for name in DETECTORS])


def _variants() -> dict[str, Callable[[], Any]]:
    """The calls ``bench_policy`` compares (and ``--count`` counts): bare, no policy, a policy on the same
    prompt, a policy on a new prompt every call."""
    from relay_runtime.adapters.openai_chat import OpenAIChatCodec

    codec = OpenAIChatCodec()
    response = _response()
    content = _content()
    distinct = _distinct_contents()
    plain, redacting, fresh = _relay(None), _relay(all_detectors()), _relay(all_detectors())
    turn = iter(range(1 << 62))

    def provider(request: LLMRequest) -> Any:
        return response

    def new_prompt() -> Any:
        return fresh.llm.execute("openai", LLMRequest(HEADERS, distinct[next(turn) % DISTINCT]), provider, codec=codec)

    return {
        "bare": lambda: provider(LLMRequest(HEADERS, content)),
        "none": lambda: plain.llm.execute("openai", LLMRequest(HEADERS, content), provider, codec=codec),
        "policy": lambda: redacting.llm.execute("openai", LLMRequest(HEADERS, content), provider, codec=codec),
        "fresh": new_prompt,
    }


def bench_policy() -> None:
    times = compare_sync(_variants(), n=max(200, CALLS // 8))
    print(f"managed call over a {len(prompt_2kb())}-byte prompt (one request intercept, one subscriber, a codec, sync)")
    _line("bare callback", times["bare"])
    _line("no policy installed: overhead (with the view decoded)", times["none"] - times["bare"])
    _line(f"{len(DETECTORS)} detectors, a new prompt every call: added", times["fresh"] - times["none"], 50.0)
    _line(f"{len(DETECTORS)} detectors, the same prompt again (history): added", times["policy"] - times["none"])


def bench_against_nemo() -> None:
    try:
        import nemo_relay
        from nemo_relay import pii_redaction, plugin
    except ImportError:
        print("nemo_relay: not installed (make bench installs the [bench] extra); skipped")
        return
    import asyncio

    distinct = _distinct_contents()  # a new prompt every call, for both libraries
    turn = iter(range(1 << 62))

    def content() -> dict[str, Any]:
        return distinct[next(turn) % DISTINCT]

    answer = {"choices": [{"message": {"role": "assistant", "content": "Write to jane.doe@example.com."}}]}

    async def aprovider(request: Any) -> Any:
        return answer

    email = RedactionPolicy([Rule("redact", detector="email")])
    ours_plain, ours = _relay(None), _relay(email)
    ours_times = compare_async(
        {
            "none": lambda: ours_plain.llm.execute_async("openai", LLMRequest(HEADERS, content()), aprovider),
            "policy": lambda: ours.llm.execute_async("openai", LLMRequest(HEADERS, content()), aprovider),
        }
    )
    config = pii_redaction.PiiRedactionConfig(
        builtin=pii_redaction.BuiltinConfig(action="redact", detector="email"), codec="openai_chat"
    )
    activation = plugin.PluginConfig(components=[plugin.ComponentSpec(kind="pii_redaction", config=config.to_dict())])
    nemo_calls = max(400, CALLS // 10)

    def nemo_call() -> Any:
        return nemo_relay.llm.execute("openai", nemo_relay.LLMRequest(HEADERS, content()), aprovider)

    nemo_relay.intercepts.register_llm_request("keep", 0, False, _nemo_keep)
    nemo_relay.subscribers.register("sink", sink)
    try:
        nemo = asyncio.run(_nemo_rounds(nemo_call, nemo_calls, plugin.activate, activation))
    finally:
        nemo_relay.intercepts.deregister_llm_request("keep")
        nemo_relay.subscribers.deregister("sink")
    ours_added = ours_times["policy"] - ours_times["none"]
    nemo_added = nemo["with"] - nemo["without"]
    print("one email redact rule, a new 2 KB prompt every call, async: added to a managed call")
    _line("relay-runtime: call without a policy", ours_times["none"])
    _line("relay-runtime: call with the policy", ours_times["policy"])
    _line("relay-runtime: policy added", ours_added)
    _line("nemo_relay: call without the plugin", nemo["without"])
    _line("nemo_relay: call with its pii_redaction plugin", nemo["with"])
    _line("nemo_relay: plugin added", nemo_added)
    # NeMo works on threads of its own, so its samples scatter: the best samples are compared too.
    if ours_added.best > 0:
        _ratio("nemo added / ours added (best samples, cpu)", nemo_added.best / ours_added.best)


async def _nemo_rounds(call: Any, n: int, activate: Any, activation: Any) -> dict[str, Any]:
    """NeMo Relay's call without and with its PII plugin, sampled in turn in one event loop (the plugin
    is activated around each of its samples, outside the timed part)."""
    import time

    import nemo_relay

    from benchmarks.bench_core import Timing

    cpu: dict[str, list[float]] = {"without": [], "with": []}
    wall: dict[str, list[float]] = {"without": [], "with": []}

    async def sample(name: str) -> None:
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            await call()
        await nemo_relay.subscribers.flush_async()  # it delivers on its own thread: wait for that too
        cpu[name].append((time.process_time() - c0) / n * 1e6)
        wall[name].append((time.perf_counter() - w0) / n * 1e6)

    for _ in range(ROUNDS + 1):  # NeMo's own threads make its samples noisy: as many rounds as ours
        await sample("without")
        async with activate(activation):
            await sample("with")
    # The first round warms up.
    return {name: Timing(cpu[name][1:], wall[name][1:]) for name in cpu}


def _nemo_keep(name: str, request: Any, annotated: Any) -> Any:
    import nemo_relay

    return nemo_relay.LLMRequestInterceptOutcome(request, annotated)


def main() -> None:
    print(f"python {sys.version.split()[0]}; medians of {ROUNDS} samples", flush=True)
    bench_policy()
    bench_against_nemo()
    if instructions.available():
        counted = instructions.report("benchmarks.bench_redaction", ["none", "policy", "fresh"], baseline="none")
        fresh, same = counted["fresh"] - counted["none"], counted["policy"] - counted["none"]
        print(f"  instructions added by {len(DETECTORS)} detectors: new prompt {fresh:,.0f}, same prompt {same:,.0f}")


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` calls of a variant (each "fresh" call a prompt not seen)."""
    instructions.counted(_variants()[variant], n, warm=200)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
