"""Amazon Bedrock ``converse`` with a real boto3 client against a loopback server: bare vs ours vs a peer.

- bare:          ``client.converse(...)`` on a client nobody instrumented
- ours:          the same call on an ``adapters.instrument(client)`` client inside a managed turn,
                 one no-op subscriber (bare and ours swap their two clients every run)
- openinference: ``openinference-instrumentation-bedrock`` (if installed), in-memory span exporter

The variants are alternated call by call (which goes first flips every pair) in several runs;
each run's figure is the median of single calls, and the verdict is the median of the runs' ratios.
The server runs in a child process (as a real endpoint would, it does not take this process's GIL).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import instructions
from benchmarks.alternation import alternate
from benchmarks.managed_turn import managed_turn

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
PAIRS = int(os.environ.get("BENCH_BEDROCK_PAIRS", "300"))
TARGET = 1.06  # ours / bare
MESSAGES = [{"role": "user", "content": [{"text": "hello"}]}]


def _openinference(server: Any) -> tuple[Callable[[], Any], Callable[[], None]] | None:
    try:
        from openinference.instrumentation.bedrock import BedrockInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = BedrockInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    client = server.client()  # the instrumentor wraps clients made after it (bare and ours are made before)

    def call() -> Any:
        exporter.clear()
        return client.converse(modelId=MODEL, messages=MESSAGES)

    call()
    if not exporter.get_finished_spans():
        print("note: openinference recorded no span: left out")
        instrumentor.uninstrument()
        return None

    def done() -> None:
        instrumentor.uninstrument()
        provider.shutdown()

    return call, done


_SERVE = (
    "import sys, threading; sys.path.insert(0, sys.argv[1]); from bedrock_support import BedrockServer; "
    "s = BedrockServer(); print(s.url, flush=True); sys.stdin.read(); s.close()"
)


class _Remote:
    """The loopback Bedrock server in a child process; ``client()`` as ``BedrockServer.client``."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, _TESTS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def client(self) -> Any:
        return BedrockServer.client(self, 0)  # type: ignore[arg-type]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


def main() -> None:
    from relay_runtime import adapters

    server = _Remote()
    try:
        # Two clients (each its own connection) that swap roles every run: a client's connection
        # alone makes a few percent of difference here, which would otherwise count for or against us.
        pair = [server.client(), server.client()]
        peer = _openinference(server)
        calls: dict[str, Callable[[], Any]] = {
            "bare": lambda: pair[0].converse(modelId=MODEL, messages=MESSAGES),
            "ours": lambda: pair[1].converse(modelId=MODEL, messages=MESSAGES),
        }
        if peer is not None:
            calls["openinference"] = peer[0]
        ratios: dict[str, list[float]] = {name: [] for name in calls if name != "bare"}
        medians: dict[str, list[float]] = {name: [] for name in calls}
        with managed_turn(subscribed=True) as host:
            for call in calls.values():  # warm up: connections, botocore's caches
                for _ in range(30):
                    call()
            for _ in range(RUNS):
                pair.reverse()
                adapters.uninstrument(pair[0])
                adapters.instrument(pair[1])
                figures = alternate(calls, PAIRS)
                for name, value in figures.items():
                    medians[name].append(value)
                    if name != "bare":
                        ratios[name].append(value / figures["bare"])
            seen: list[Any] = []
            host.relay.subscribers.register(seen.append, name="bench-check")
            pair[1].converse(modelId=MODEL, messages=MESSAGES)
            host.relay.subscribers.deregister("bench-check")
            recorded = any(getattr(e, "provider", None) == "aws.bedrock" for e in seen)
        print(f"bedrock converse, loopback server, {RUNS} runs x {PAIRS} alternated calls (shared machine)")
        for name, values in medians.items():
            ratio = f"  {statistics.median(ratios[name]):.3f}x bare" if name in ratios else ""
            print(f"  {name:14s} {statistics.median(values) * 1e6:9.1f} us{ratio}")
        verdict = statistics.median(ratios["ours"])
        print(f"  target ours <= {TARGET}x bare: {'met' if verdict <= TARGET else 'MISSED'} ({verdict:.3f}x)")
        if peer is None:
            print("note: openinference-instrumentation-bedrock is not installed (pip install -e '.[bench]')")
        else:
            peer[1]()
        if not recorded:
            print("note: ours recorded no aws.bedrock attempt: the figure is not a managed call's")
    finally:
        server.close()
    if instructions.available():
        variants = ["bare", "ours"] + (["openinference"] if peer is not None else [])
        counted = instructions.report("benchmarks.bench_bedrock", variants)
        verdict = counted["ours"] / counted["bare"]
        print(f"  target ours <= {TARGET}x bare in instructions: {'met' if verdict <= TARGET else 'MISSED'} "
              f"({verdict:.3f}x)")  # fmt: skip
    sys.stdout.flush()


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` calls of one variant in a managed turn."""
    from relay_runtime import adapters

    server = _Remote()
    try:
        client = server.client()
        call: Callable[[], Any] = lambda: client.converse(modelId=MODEL, messages=MESSAGES)  # noqa: E731
        peer = None
        if variant == "ours":
            adapters.instrument(client)
        elif variant == "openinference":
            peer = _openinference(server)
            assert peer is not None, "openinference-instrumentation-bedrock is not installed"
            call = peer[0]
        with managed_turn(subscribed=True):
            instructions.counted(call, n, warm=20)
        if peer is not None:
            peer[1]()
    finally:
        server.close()


# The loopback server and constants the tests use: one Bedrock speaker for both.
_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
sys.path.insert(0, _TESTS)
from bedrock_support import MODEL, BedrockServer  # noqa: E402

if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
