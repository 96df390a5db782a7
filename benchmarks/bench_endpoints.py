"""Endpoints named for what they are: what naming a call costs, beside the bare call.

The same openai chat completion over a mock transport, through an instrumented client
(``instrument(client)``) in a managed turn with one no-op subscriber, against the bare
``create()`` of an uninstrumented client on the same transport, alternated call by call:

- openai:    base URL ``api.openai.com`` (the codec's own name: nothing to rename)
- groq:      base URL ``api.groq.com`` (named by the base URL: a codec named ``groq``)
- vllm:      ``instrument(client, provider="vllm")`` (the caller's word: ``openai`` + ``relay.provider.endpoint``)
- azure:     an ``AzureOpenAI`` client with ``azure_deployment`` (the deployment as the request model)

Target: each at most 1.06x the bare call. Figures are medians of single calls per run, then
the median of the runs' ratios.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

import httpx2

from benchmarks.adapters_floor import KWARGS
from benchmarks.managed_turn import managed_turn

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "2000"))
WARMUP_PAIRS = 200
TARGET = 1.06


def _transport() -> httpx2.MockTransport:
    from relay_runtime.adapters.testing import chat_completion_body, chat_usage

    body = json.dumps(chat_completion_body("hi", model="gpt-bench", usage=chat_usage(9, 2))).encode()
    headers = {"content-type": "application/json"}
    return httpx2.MockTransport(lambda request: httpx2.Response(200, headers=headers, content=body))


def _client(base_url: str) -> Any:
    import openai

    from relay_runtime.adapters.testing import TEST_KEY

    return openai.OpenAI(
        api_key=TEST_KEY, base_url=base_url, max_retries=0, http_client=httpx2.Client(transport=_transport())
    )


def _azure() -> Any:
    import openai

    from relay_runtime.adapters.testing import TEST_KEY

    return openai.AzureOpenAI(
        api_key=TEST_KEY, api_version="2024-10-21", azure_endpoint="https://res.openai.azure.com",
        azure_deployment="bench", max_retries=0, http_client=httpx2.Client(transport=_transport()),
    )  # fmt: skip


def _pairs(bare: Any, ours: Any) -> tuple[float, float]:
    bare_create, ours_create, kwargs = bare.chat.completions.create, ours.chat.completions.create, KWARGS
    now = time.perf_counter
    bare_t: list[float] = []
    ours_t: list[float] = []
    with managed_turn(subscribed=True):
        for _ in range(WARMUP_PAIRS):
            bare_create(**kwargs)
            ours_create(**kwargs)
        for i in range(PAIRS):
            first, second = (ours_create, bare_create) if i & 1 else (bare_create, ours_create)
            t0 = now()
            first(**kwargs)
            t1 = now()
            second(**kwargs)
            t2 = now()
            (ours_t if i & 1 else bare_t).append(t1 - t0)
            (bare_t if i & 1 else ours_t).append(t2 - t1)
    return statistics.median(bare_t), statistics.median(ours_t)


def main() -> None:
    from relay_runtime import adapters

    cases = {
        "openai": (lambda: _client("https://api.openai.com/v1"), {}),
        "groq": (lambda: _client("https://api.groq.com/openai/v1"), {}),
        "vllm": (lambda: _client("http://10.0.0.7:9000/v1"), {"provider": "vllm"}),
        "azure": (_azure, {}),
    }
    print(
        f"openai chat completion over MockTransport, instrument(client) in a managed turn (one no-op subscriber) "
        f"vs the bare create();\n{RUNS} runs x {PAIRS} alternated pairs, medians per run"
    )
    for label, (make, options) in cases.items():
        bare, ours = make(), adapters.instrument(make(), **options)
        runs = [_pairs(bare, ours) for _ in range(RUNS)]
        ratios = [o / b for b, o in runs]
        ratio = statistics.median(ratios)
        bare_us = statistics.median(b for b, _ in runs) * 1e6
        ours_us = statistics.median(o for _, o in runs) * 1e6
        verdict = "within" if ratio <= TARGET else "OVER"
        print(
            f"  {label:<7}: bare {bare_us:.1f} us, ours {ours_us:.1f} us, ratio {ratio:.3f} ({verdict} {TARGET}); "
            f"per run: {' '.join(f'{r:.3f}' for r in ratios)}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
