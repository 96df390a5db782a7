"""A replayed call against the same call on the mock transport (the issue's figure), side by side.

Variants, timed call by call in interleaved rounds (so machine drift hits all alike):

- mock:        ``adapters.complete`` on a real ``openai`` client over ``httpx2.MockTransport`` (no cassette)
- replay:      the same call replayed from a cassette (instant timing), the client's transport never used
- mock-stream / replay-stream: the same for a streamed call of five chunks, iterated to the end

A replayed non-streamed call with one recorded answer is parsed straight from the
recording by the SDK client's own parser, skipping the SDK's request building and
HTTP round trip (most of the mock transport call). A replayed stream still runs
the SDK's whole HTTP path with the cassette under it, so it costs about what the
mock transport costs. Each figure is the median of single calls over all rounds;
the ratio is the median of the rounds' ratios.
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


def _client() -> Any:
    import openai

    from relay_runtime.adapters import testing as t

    body = json.dumps(t.chat_completion_body("hi", model="gpt-bench", usage=t.chat_usage(9, 2))).encode()
    frames = b"".join(t.openai_chat_sse(t.chat_chunks(["a", "b", "c"], model="gpt-bench")))

    def handler(request: httpx2.Request) -> httpx2.Response:
        if b'"stream":true' in request.content.replace(b" ", b""):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=frames)
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=body)

    return openai.OpenAI(
        api_key=t.TEST_KEY,
        base_url=t.BASE_OPENAI,
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def _timed(call: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    client = _client()

    def complete() -> Any:
        return adapters.complete(client, KWARGS)

    def stream() -> Any:
        return list(adapters.stream(client, KWARGS))

    path = os.path.join(tempfile.mkdtemp(prefix="bench-cassette-"), "bench.json")
    total = ROUNDS * (CALLS + 20)
    with cassettes.use(path, mode="record"):
        for _ in range(total):
            complete()
            stream()
    print(f"{ROUNDS} rounds x {CALLS} calls; the machine is shared and noisy: read the ratios, not the absolutes")
    samples: dict[str, list[float]] = {"mock": [], "replay": [], "mock-stream": [], "replay-stream": []}
    ratios: dict[str, list[float]] = {"complete": [], "stream": []}
    for _ in range(ROUNDS):
        _timed(complete, 20)  # warm-up
        mock = _timed(complete, CALLS)
        mock_stream = _timed(stream, CALLS)
        with cassettes.use(path):
            _timed(complete, 20)
            _timed(stream, 20)
            replay = _timed(complete, CALLS)
            replay_stream = _timed(stream, CALLS)
        samples["mock"] += mock
        samples["replay"] += replay
        samples["mock-stream"] += mock_stream
        samples["replay-stream"] += replay_stream
        ratios["complete"].append(statistics.median(mock) / statistics.median(replay))
        ratios["stream"].append(statistics.median(mock_stream) / statistics.median(replay_stream))
    for name, values in samples.items():
        print(f"  {name:14s} median {statistics.median(values) * 1e6:8.1f} us")
    for name, values in ratios.items():
        low, high = min(values), max(values)
        print(
            f"  {name:9s}: replay is {statistics.median(values):.2f}x as fast as the mock transport "
            f"(rounds {low:.2f}..{high:.2f}; target >= 5x for complete)"
        )


if __name__ == "__main__":
    main()
