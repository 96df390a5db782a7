"""A replayed call against the same call on the mock transport (the issue's figure), side by side.

Variants, timed call by call in interleaved rounds (so machine drift hits all alike):

- complete mock / replay: ``adapters.complete`` on a real ``openai`` chat client over
  ``httpx2.MockTransport`` (no cassette), then the same call replayed from a cassette
  (instant timing), the client's transport never used
- <api> stream mock / replay: a streamed call iterated to the end, for OpenAI chat
  (5 chunks), OpenAI responses (5 events) and Anthropic messages (8 events)

- miss on a 600-call cassette: a call no recording matches, on a cassette of 600 recorded
  calls (about 5.8 MiB of agent conversations), until its ``CassetteMiss`` (the closest
  recording and a diff) is raised; target <= 1 s

A replayed call with one recorded answer skips the SDK's request building and HTTP
round trip: a JSON answer is parsed by the client's own parser, a stream is the SDK's
own stream class yielding items built from the recorded JSON by the item class's
compiled validator where that builds what the SDK's parser would (the rest by that
parser). Each figure is the median of single calls over all rounds; the ratio is the
median of the rounds' ratios.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import httpx2

from relay_runtime import adapters, cassettes

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
CALLS = int(os.environ.get("BENCH_CALLS", "200"))
KWARGS: dict[str, Any] = {
    "model": "gpt-bench",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
    "temperature": 0.2,
}
RESPONSES_KWARGS: dict[str, Any] = {"model": "gpt-bench", "input": "hello", "instructions": "be brief"}
ANTHROPIC_KWARGS: dict[str, Any] = {
    "model": "claude-bench",
    "max_tokens": 64,
    "system": "be brief",
    "messages": [{"role": "user", "content": "hello"}],
}


def _mock_http(json_body: Any, frames: list[bytes]) -> httpx2.Client:
    body, sse = json.dumps(json_body).encode(), b"".join(frames)

    def handler(request: httpx2.Request) -> httpx2.Response:
        if b'"stream":true' in request.content.replace(b" ", b""):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=sse)
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=body)

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def _calls() -> dict[str, Callable[[], Any]]:
    """Each variant's call, by name (the same call serves mock and replay: a cassette in use decides)."""
    import anthropic
    import openai

    from relay_runtime.adapters import testing as t

    chat = openai.OpenAI(
        api_key=t.TEST_KEY,
        base_url=t.BASE_OPENAI,
        max_retries=0,
        http_client=_mock_http(
            t.chat_completion_body("hi", model="gpt-bench", usage=t.chat_usage(9, 2)),
            t.openai_chat_sse(t.chat_chunks(["a", "b", "c"], model="gpt-bench")),
        ),
    )
    responses = openai.OpenAI(
        api_key=t.TEST_KEY,
        base_url=t.BASE_OPENAI,
        max_retries=0,
        http_client=_mock_http(t.responses_body("hi"), t.typed_sse(t.responses_events(["a", "b", "c"]))),
    )
    claude = anthropic.Anthropic(
        api_key=t.TEST_KEY,
        base_url=t.BASE_ANTHROPIC,
        max_retries=0,
        open_telemetry=False,
        http_client=_mock_http(t.anthropic_message_body("hi"), t.typed_sse(t.anthropic_events(["a", "b", "c"]))),
    )
    return {
        "complete": lambda: adapters.complete(chat, KWARGS),
        "chat stream": lambda: list(adapters.stream(chat, KWARGS)),
        "responses stream": lambda: list(adapters.stream(responses, RESPONSES_KWARGS, api_mode="responses")),
        "anthropic stream": lambda: list(adapters.stream(claude, ANTHROPIC_KWARGS)),
    }


def _timed(call: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


MISS_CALLS = 600
MISS_ROUNDS = int(os.environ.get("BENCH_MISS_ROUNDS", "5"))


def _conversation(n: int) -> list[dict[str, str]]:
    """An agent's history: ten turns of tool output and answers, about 9.6 KiB in all."""
    messages = [{"role": "system", "content": f"You are agent {n % 7}. Be brief and exact."}]
    for turn in range(10):
        lines = "\n".join(f"row {turn}.{i}: item {n * 31 + i} status ok, latency {(n + i) % 97} ms" for i in range(15))
        messages.append({"role": "user", "content": f"step {turn} of task {n}: results follow\n{lines}"})
        messages.append({"role": "assistant", "content": f"noted step {turn} of task {n}; {n % 13} issues"})
    return messages


def miss() -> None:
    """How long a miss takes to report on a big cassette (its closest recording and a diff)."""
    from relay_runtime.adapters import testing as t

    script = t.Script([t.json_reply(t.chat_completion_body("ok")) for _ in range(MISS_CALLS)])
    client = t.openai_client(script)
    path = os.path.join(tempfile.mkdtemp(prefix="bench-cassette-miss-"), "big.json")
    with cassettes.use(path, mode="record"):
        for n in range(MISS_CALLS):
            adapters.complete(client, {"model": "gpt-bench", "messages": _conversation(n)})
    size = os.path.getsize(path) / 2**20
    changed = _conversation(MISS_CALLS // 2)
    changed[7]["content"] += " (one more line)"
    times = []
    for _ in range(MISS_ROUNDS):
        start = time.perf_counter()
        try:
            with cassettes.use(path):
                adapters.complete(client, {"model": "gpt-bench", "messages": changed})
        except cassettes.CassetteMiss as exc:
            times.append(time.perf_counter() - start)
            assert f"#{MISS_CALLS // 2 + 1} of {MISS_CALLS}" in str(exc), str(exc)[:300]
        else:
            raise AssertionError("the changed call replayed")
    print(
        f"  miss on a {MISS_CALLS}-call {size:.1f} MiB cassette: {statistics.median(times):.3f} s median of "
        f"{MISS_ROUNDS} (open, match, closest recording and diff; min {min(times):.3f} s; target <= 1 s)"
    )


def main() -> None:
    miss()
    calls = _calls()
    path = os.path.join(tempfile.mkdtemp(prefix="bench-cassette-"), "bench.json")
    with cassettes.use(path, mode="record"):
        for _ in range(ROUNDS * (CALLS + 20)):
            for call in calls.values():
                call()
    print(f"{ROUNDS} rounds x {CALLS} calls; the machine is shared and noisy: read the ratios, not the absolutes")
    samples: dict[str, dict[str, list[float]]] = {name: {"mock": [], "replay": []} for name in calls}
    ratios: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(ROUNDS):
        mock = {}
        for name, call in calls.items():
            _timed(call, 20)  # warm-up
            mock[name] = _timed(call, CALLS)
        with cassettes.use(path):
            replay = {}
            for name, call in calls.items():
                _timed(call, 20)
                replay[name] = _timed(call, CALLS)
        for name in calls:
            samples[name]["mock"] += mock[name]
            samples[name]["replay"] += replay[name]
            ratios[name].append(statistics.median(mock[name]) / statistics.median(replay[name]))
    for name, values in ratios.items():
        mock_us = statistics.median(samples[name]["mock"]) * 1e6
        replay_us = statistics.median(samples[name]["replay"]) * 1e6
        print(
            f"  {name:17s} mock {mock_us:7.1f} us  replay {replay_us:7.1f} us  replay is "
            f"{statistics.median(values):.2f}x as fast (rounds {min(values):.2f}..{max(values):.2f}; target >= 5x)"
        )


if __name__ == "__main__":
    main()
