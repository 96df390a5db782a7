"""On a real OpenAI client: what ``adapters.complete`` with the OTel exporter adds, against what
``opentelemetry-instrumentation-openai-v2`` adds (``bench_otel`` runs it last; its docstring says how).

``python -m benchmarks.bench_otel sdk`` runs only this comparison.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from benchmarks.otel_support import KWARGS, RUNS, Managed, interleaved, tracer_provider
from relay_runtime.integrations.otel import OTelExporter

# Calls per body and run on the real client, alternated with the bare call (see ``alternated``).
SDK_CALLS = int(os.environ.get("BENCH_OTEL_SDK_CALLS", "1000"))
SWITCHES = 5  # times per run the real-client comparison switches between our side and openai-v2's
SDK_TARGET = 0.8  # on the real OpenAI client: what we add (two spans) / what openai-v2 adds (one span)



def openai_client() -> Any:
    """A real OpenAI client answering every request from ``httpx2.MockTransport``."""
    import httpx2
    import openai

    body = (
        b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-bench-0613",'
        b'"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}'
    )

    def handler(request: Any) -> Any:
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    return openai.OpenAI(
        api_key="sk-bench",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )


def alternated(
    bodies: dict[str, Callable[[], Any]], calls: int, samples: dict[str, list[int]] | None = None
) -> dict[str, float]:
    """Median wall-clock ns per call of each body, the bodies called in turn one call at a time.

    A real client's call is long enough (hundreds of µs) for the machine's drift and other
    processes to differ between two blocks of calls; alternating call by call (each round
    starting with the next body, so none always runs first, after the other's cache traffic)
    makes every body see the same conditions, and the median drops the calls that were preempted.
    ``samples``: add this round's to those (the medians are then over all of them).
    """
    clock = time.perf_counter_ns
    names = list(bodies)
    order = [bodies[name] for name in names]
    if samples is None:
        samples = {}
    lists = [samples.setdefault(name, []) for name in names]
    k = len(order)
    for i in range(calls):
        for j in range(k):
            slot = (i + j) % k
            body = order[slot]
            t0 = clock()
            body()
            lists[slot].append(clock() - t0)
    return {name: statistics.median(values) for name, values in zip(names, lists, strict=True)}


def sdk_comparison() -> dict[str, Any] | str:
    """On a real OpenAI client: what ``adapters.complete`` with the exporter adds to a bare ``create()``,
    against what ``opentelemetry-instrumentation-openai-v2`` adds, per run (see ``alternated``).

    Ours, the no-op subscriber's and the bare call alternate while nothing is instrumented;
    then openai-v2 is instrumented (it patches the SDK class) and its ``create()`` alternates
    with the same method unwrapped (``create.__wrapped__``: the SDK's own, without its wrapper),
    so each side is compared with the bare call of the same moment. Also the calling thread's
    and the process's CPU time per call over blocks of calls (the process's includes the span
    processors' and the exporter's metric worker's share; openai-v2 records metrics in the call).
    """
    try:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    except Exception as exc:  # an ImportError, or a version clash inside the package
        return f"not measured: opentelemetry-instrumentation-openai-v2 does not import here ({exc!r})"
    from relay_runtime import adapters

    client = openai_client()
    completions = client.chat.completions

    def create() -> Any:
        # Looked up per call: instrumenting patches the class, not a bound method taken earlier.
        return completions.create(**KWARGS)

    def unwrapped() -> Any:
        return completions.create.__wrapped__(**KWARGS)

    managed = Managed(OTelExporter(tracer_provider(), MeterProvider(metric_readers=[InMemoryMetricReader()])))
    run = managed.context.run
    noop = Managed(None)
    run_noop = noop.context.run
    complete = adapters.complete
    bodies = {
        "bare": create,
        "relay, no-op subscriber": lambda: run_noop(complete, client, KWARGS),
        "relay": lambda: run(complete, client, KWARGS),
    }
    instrumentor = OpenAIInstrumentor()
    provider = tracer_provider()
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    runs: list[dict[str, float]] = []
    cpu: dict[str, list[float]] = {name: [] for name in (*bodies, "openai-v2")}
    process: dict[str, list[float]] = {}
    block = max(200, SDK_CALLS // 4)
    for _ in range(RUNS + 1):  # the first run warms up
        # Each run switches between the two sides a few times, so that both see the same stretch
        # of the machine's drift (other processes come and go within seconds).
        mine: dict[str, list[int]] = {}
        peer: dict[str, list[int]] = {}
        for _ in range(SWITCHES):
            ours = alternated(bodies, SDK_CALLS // SWITCHES, mine)
            instrumentor.instrument(tracer_provider=provider, meter_provider=meters)
            try:
                theirs = alternated({"bare": unwrapped, "openai-v2": create}, SDK_CALLS // SWITCHES, peer)
            finally:
                instrumentor.uninstrument()
        for name, values in interleaved(bodies, block, 1, process).items():
            cpu[name].extend(values)
        instrumentor.instrument(tracer_provider=provider, meter_provider=meters)
        try:
            cpu["openai-v2"].extend(interleaved({"openai-v2": create}, block, 1, process)["openai-v2"])
        finally:
            instrumentor.uninstrument()
        runs.append(
            {
                "bare": ours["bare"],
                "noop added": ours["relay, no-op subscriber"] - ours["bare"],
                "ours added": ours["relay"] - ours["bare"],
                "bare (openai-v2 run)": theirs["bare"],
                "theirs added": theirs["openai-v2"] - theirs["bare"],
            }
        )
    managed.close()
    noop.close()
    provider.shutdown()
    runs = runs[1:]
    for r in runs:
        r["ratio"] = r["ours added"] / r["theirs added"]
    out: dict[str, Any] = {"runs": runs}
    out.update({name: statistics.median(r[name] for r in runs) for name in runs[0]})
    out.update({f"{name} (thread)": statistics.median(values) for name, values in cpu.items()})
    out.update({f"{name} (process)": statistics.median(values) for name, values in process.items()})
    return out


def sdk_main() -> None:
    sdk = sdk_comparison()
    if isinstance(sdk, str):
        print(f"  openai-v2: {sdk}")
        return
    us = 1000.0
    print(
        f"  real OpenAI client over httpx2.MockTransport (spans + metrics in both), calls alternated,"
        f" {SDK_CALLS} per body x {RUNS} runs, wall-clock medians:"
    )
    print(f"    bare client call                                 {sdk['bare'] / us:8.2f} us")
    print(f"    adapters.complete, no-op subscriber, added       {sdk['noop added'] / us:8.2f} us")
    print(f"    adapters.complete + OTelExporter, added          {sdk['ours added'] / us:8.2f} us")
    print(f"    opentelemetry-instrumentation-openai-v2, added   {sdk['theirs added'] / us:8.2f} us")
    ratios = ", ".join(f"{r['ratio']:.2f}" for r in sdk["runs"])
    verdict = "within" if sdk["ratio"] <= SDK_TARGET else "OVER"
    print(
        f"    ours added / theirs added, median of runs        {sdk['ratio']:8.2f}x"
        f" ({verdict} {SDK_TARGET}x; runs: {ratios})"
    )
    for clock in ("thread", "process"):
        bare = sdk[f"bare ({clock})"]
        ours = sdk[f"relay ({clock})"] - bare
        theirs = sdk[f"openai-v2 ({clock})"] - bare
        print(
            f"    in {clock} CPU over blocks of calls: ours +{ours / us:.1f} us, theirs +{theirs / us:.1f} us,"
            f" {ours / theirs:.2f}x"
        )
