"""A real ``openai`` ``embeddings.create`` over a mock transport: bare vs ``instrument(client)`` vs peers.

- bare:          an uninstrumented client's ``embeddings.create`` (the SDK asks for base64 and decodes it)
- ours:          ``adapters.instrument(client)`` in a managed turn with one no-op subscriber
- openinference: ``openinference-instrumentation-openai`` (if installed), in-memory span exporter
- openllmetry:   ``opentelemetry-instrumentation-openai`` (if installed), in-memory span exporter

``ours`` is alternated call by call with the bare call in several runs (the ratio is the median of
the runs' ratios, target <= 1.06x); a peer patches the SDK's classes, so it is timed in blocks with
its instrumentor on, beside blocks of bare calls with it off, in turn. Figures are medians of single calls.
With valgrind installed, instructions per call are counted too (``benchmarks.instructions``): a figure a
loaded machine cannot move.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx2

from benchmarks import instructions
from benchmarks.managed_turn import managed_turn

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "2000"))
WARMUP_PAIRS = 200
TARGET = 1.06
KWARGS: dict[str, Any] = {"model": "text-embedding-3-small", "input": "the quick brown fox"}


def _client() -> Any:
    import openai

    from relay_runtime.adapters.testing import BASE_OPENAI, TEST_KEY, embeddings_body

    body = json.dumps(embeddings_body([[0.01 * i for i in range(256)]], base64_encoded=True)).encode()
    headers = {"content-type": "application/json"}
    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, headers=headers, content=body))
    return openai.OpenAI(
        api_key=TEST_KEY, base_url=BASE_OPENAI, max_retries=0, http_client=httpx2.Client(transport=transport)
    )


def _pairs(bare: Callable[[], Any], ours: Callable[[], Any]) -> tuple[float, float]:
    now = time.perf_counter
    bare_t: list[float] = []
    ours_t: list[float] = []
    for _ in range(WARMUP_PAIRS):
        bare()
        ours()
    for i in range(PAIRS):
        first, second = (ours, bare) if i & 1 else (bare, ours)
        t0 = now()
        first()
        t1 = now()
        second()
        t2 = now()
        (ours_t if i & 1 else bare_t).append(t1 - t0)
        (bare_t if i & 1 else ours_t).append(t2 - t1)
    return statistics.median(bare_t), statistics.median(ours_t)


def _report(label: str, runs: list[tuple[float, float]], target: float | None) -> None:
    ratios = [o / b for b, o in runs]
    ratio = statistics.median(ratios)
    bare_us = statistics.median(b for b, _ in runs) * 1e6
    ours_us = statistics.median(o for _, o in runs) * 1e6
    verdict = "" if target is None else f" ({'within' if ratio <= target else 'OVER'} {target})"
    print(f"  {label:<14}: bare {bare_us:.1f} us, {label} {ours_us:.1f} us, ratio {ratio:.3f}{verdict}; "
          f"per run: {' '.join(f'{r:.3f}' for r in ratios)}")  # fmt: skip


def _peers() -> tuple[list[tuple[str, Any]], list[str]]:
    found: list[tuple[str, Any]] = []
    notes: list[str] = []
    try:
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        found.append(("openinference", OpenInference()))
    except ImportError as exc:
        notes.append(f"openinference-instrumentation-openai not run: {exc}")
    try:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetry

        found.append(("openllmetry", OpenLLMetry()))
    except ImportError as exc:
        notes.append(f"opentelemetry-instrumentation-openai not run: {exc}")
    return found, notes


def _peer_runs(instrumentor: Any) -> tuple[list[tuple[float, float]], int]:
    """Blocks of bare calls with the peer off and of calls with it on, in turn (it patches the SDK's
    classes, so every client is traced while it is on: the two cannot alternate call by call)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = _client()
    call = partial(client.embeddings.create, **KWARGS)
    now = time.perf_counter
    runs = []
    spans = 0

    def block() -> float:
        for _ in range(WARMUP_PAIRS):
            call()
        out = []
        for _ in range(PAIRS):
            t0 = now()
            call()
            out.append(now() - t0)
        return statistics.median(out)

    for run in range(RUNS):
        timed: dict[bool, float] = {}
        for traced in (False, True) if run % 2 == 0 else (True, False):
            if traced:
                instrumentor.instrument(tracer_provider=provider)
                try:
                    timed[True] = block()
                finally:
                    instrumentor.uninstrument()
            else:
                timed[False] = block()
        runs.append((timed[False], timed[True]))
        spans += len(exporter.get_finished_spans())
        exporter.clear()
    return runs, spans


def main() -> None:
    from relay_runtime import adapters

    print(f"openai embeddings.create over MockTransport (256 dims, base64): bare vs traced, alternated call by "
          f"call;\n{RUNS} runs x {PAIRS} pairs, medians per run")  # fmt: skip
    bare_client, ours_client = _client(), adapters.instrument(_client())
    bare_create, ours_create = bare_client.embeddings.create, ours_client.embeddings.create
    with managed_turn(subscribed=True):
        runs = [_pairs(partial(bare_create, **KWARGS), partial(ours_create, **KWARGS)) for _ in range(RUNS)]
    _report("ours", runs, TARGET)
    peers, notes = _peers()
    for name, instrumentor in peers:
        try:
            peer_runs, spans = _peer_runs(instrumentor)
        except Exception as exc:  # a peer that cannot instrument this SDK version is reported, not timed
            notes.append(f"{name} failed on this SDK: {type(exc).__name__}: {exc}")
            continue
        _report(name, peer_runs, None)
        if spans == 0:
            notes.append(f"{name} ran but recorded no spans for embeddings")
    for note in notes:
        print("note:", note)
    if instructions.available():
        print("openai embeddings.create:")
        counted = instructions.report("benchmarks.bench_embeddings", ["bare", "ours"] + [name for name, _ in peers])
        verdict = counted["ours"] / counted["bare"]
        print(f"  target ours <= {TARGET}x bare in instructions: {'met' if verdict <= TARGET else 'MISSED'} "
              f"({verdict:.3f}x)")  # fmt: skip
    sys.stdout.flush()


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` calls of one variant in a managed turn.

    ``bare`` / ``ours`` (``adapters.instrument``) / ``openinference`` / ``openllmetry`` (the peer's
    instrumentor on, in-memory span exporter, cleared before each call as the exporter would grow).
    """
    from relay_runtime import adapters

    client = _client()
    create = partial(client.embeddings.create, **KWARGS)
    call: Callable[[], Any] = create
    if variant == "ours":
        adapters.instrument(client)
        call = partial(client.embeddings.create, **KWARGS)
    elif variant != "bare":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        instrumentor = dict(_peers()[0])[variant]
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentor.instrument(tracer_provider=provider)

        def call() -> Any:
            exporter.clear()
            return client.embeddings.create(**KWARGS)

    with managed_turn(subscribed=True):
        instructions.counted(call, n, warm=20)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
