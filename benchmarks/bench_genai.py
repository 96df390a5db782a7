"""Google Gen AI ``generate_content`` (and its stream) with real ``google-genai`` clients on a mock transport:
bare vs ours vs a peer.

- bare:          ``client.models.generate_content(...)`` on a client nobody instrumented
- ours:          the same call on an ``adapters.instrument(client)`` client inside a managed turn,
                 one no-op subscriber (bare and ours swap their two clients every run)
- floor:         the records ours makes of that call (or stream), written by hand, flat, for this one case
                 on a client of its own (``genai_floor``, checked to record the same before it is timed):
                 what the records themselves cost, against which ours' generality is measured
- openinference: ``openinference-instrumentation-google-genai`` (if installed), in-memory span exporter.
                 It wraps the SDK's classes; its wrappers are taken off them and set on a third
                 client alone, so bare and ours stay bare of it.

CPU time of this thread (``time.thread_time``) per call: the transport is in-process, so a call's
whole cost is CPU here. The variants are alternated call by call (which goes first flips every
pair) in several runs; each run's figure is the median of single calls, and the verdict is the
median of the runs' ratios. With valgrind installed, instructions per call are counted too
(``benchmarks.instructions``): a figure a loaded machine cannot move.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks import genai_floor, instructions
from benchmarks.alternation import alternate
from benchmarks.managed_turn import managed_turn

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
PAIRS = int(os.environ.get("BENCH_GENAI_PAIRS", "300"))
TARGET = 1.06  # ours / bare
MODEL = "gemini-2.5-flash"
_PEER_METHODS = ("generate_content", "generate_content_stream")


def _body(text: str, finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash-001", "responseId": "r-1",
            "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 5, "totalTokenCount": 17}}  # fmt: skip


_JSON = json.dumps(_body("hello there", "STOP")).encode()
_SSE = b"".join(
    b"data: " + json.dumps(_body(part, "STOP" if last else None)).encode() + b"\r\n\r\n"
    for part, last in (("hel", False), ("lo ", False), ("there", True))
)


def _client() -> Any:
    import httpx2
    from google import genai

    def answer(request: httpx2.Request) -> httpx2.Response:
        if b"alt=sse" in request.url.query:
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=_SSE)
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=_JSON)

    transport = httpx2.MockTransport(answer)
    options = {"base_url": "https://gemini.bench", "client_args": {"transport": transport},
               "async_client_args": {"transport": transport}}  # fmt: skip
    return genai.Client(api_key="AIza-bench-not-a-key-0000", http_options=options)


def _openinference(client: Any) -> tuple[Any, Callable[[], None]] | None:
    """``client`` with the peer's wrappers on its own ``models`` (none on the classes), and how to undo it."""
    try:
        from google.genai.models import Models
        from openinference.instrumentation.google_genai import GoogleGenAIInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = GoogleGenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    wrappers = {name: vars(Models)[name] for name in _PEER_METHODS}
    instrumentor.uninstrument()
    for name, wrapper in wrappers.items():
        client.models.__dict__[name] = wrapper.__get__(client.models, Models)
    client.models.generate_content(model=MODEL, contents="hello")
    if not exporter.get_finished_spans():
        print("note: openinference recorded no span: left out")
        return None

    def clear() -> None:
        exporter.clear()

    return client, clear


def _calls(
    bare: Any, ours: Any, peer: tuple[Any, Callable[[], None]] | None, stream: bool, floor: Any = None
) -> dict[str, Any]:
    def call(client: Any) -> Callable[[], Any]:
        if stream:
            return lambda: [c.text for c in client.models.generate_content_stream(model=MODEL, contents="hello")]
        return lambda: client.models.generate_content(model=MODEL, contents="hello").text

    calls: dict[str, Callable[[], Any]] = {"bare": call(bare), "ours": call(ours)}
    if floor is not None and stream:
        by_hand_stream = genai_floor.by_hand_stream(floor)
        calls["floor"] = lambda: [c.text for c in by_hand_stream()]
    elif floor is not None:
        by_hand = genai_floor.by_hand(floor)
        calls["floor"] = lambda: by_hand().text
    if peer is not None:
        peer_call = call(peer[0])

        def with_clear() -> Any:
            peer[1]()  # the in-memory exporter would otherwise grow for the whole run
            return peer_call()

        calls["openinference"] = with_clear
    return calls


def _bench(label: str, pair: list[Any], peer: Any, stream: bool, floor: Any = None) -> None:
    from relay_runtime import adapters

    ratios: dict[str, list[float]] = {"ours": [], "openinference": [], "floor": []}
    medians: dict[str, list[float]] = {}
    with managed_turn(subscribed=True) as host:
        for _ in range(30):  # warm up: connections, the SDK's caches, pydantic
            for call in _calls(pair[0], pair[1], peer, stream, floor).values():
                call()
        for _ in range(RUNS):
            pair.reverse()
            adapters.uninstrument(pair[0])
            adapters.instrument(pair[1])
            figures = alternate(_calls(pair[0], pair[1], peer, stream, floor), PAIRS, time.thread_time)
            for name, value in figures.items():
                medians.setdefault(name, []).append(value)
                if name != "bare":
                    ratios[name].append(value / figures["bare"])
        seen: list[Any] = []
        host.relay.subscribers.register(seen.append, name="bench-check")
        _calls(pair[0], pair[1], None, stream)["ours"]()
        host.relay.subscribers.deregister("bench-check")
        recorded = any(getattr(e, "provider", None) == "gcp.gemini" for e in seen)
    print(f"google-genai {label}, mock transport, {RUNS} runs x {PAIRS} alternated calls, CPU time (shared machine)")
    for name, values in medians.items():
        ratio = f"  {statistics.median(ratios[name]):.3f}x bare" if ratios.get(name) else ""
        print(f"  {name:14s} {statistics.median(values) * 1e6:9.1f} us{ratio}")
    verdict = statistics.median(ratios["ours"])
    print(f"  target ours <= {TARGET}x bare: {'met' if verdict <= TARGET else 'MISSED'} ({verdict:.3f}x)")
    if ratios["openinference"]:
        peer_ratio = statistics.median(ratios["openinference"])
        print(f"  ours ahead of openinference: {'yes' if verdict < peer_ratio else 'NO'}")
    if ratios["floor"]:
        print("  (floor: the four events ours records of this call, written by hand, flat, nothing else)")
    if not recorded:
        print("note: ours recorded no gcp.gemini attempt: the figure is not a managed call's")


def main() -> None:
    from relay_runtime import adapters

    pair = [_client(), _client()]
    peer = _openinference(_client())
    if peer is None:
        print("note: openinference-instrumentation-google-genai is not installed (pip install -e '.[bench]')")
    floor = _client()
    genai_floor.check_same_records(adapters.instrument(_client()), floor)
    _bench("generate_content", pair, peer, stream=False, floor=floor)
    _bench("generate_content_stream (3 chunks)", pair, peer, stream=True, floor=floor)
    if instructions.available():
        print("google-genai generate_content:")
        variants = ["bare", "floor", "ours"] + (["openinference"] if peer is not None else [])
        counted = instructions.report("benchmarks.bench_genai", variants)
        verdict = counted["ours"] / counted["bare"]
        print(f"  target ours <= {TARGET}x bare in instructions: {'met' if verdict <= TARGET else 'MISSED'} "
              f"({verdict:.3f}x)")  # fmt: skip
    sys.stdout.flush()


def _async_call(client: Any) -> Callable[[], Any]:
    """One ``client.aio`` generate_content, run to its end on a loop of its own (made once)."""
    import asyncio

    loop = asyncio.new_event_loop()

    async def call() -> Any:
        return (await client.aio.models.generate_content(model=MODEL, contents="hello")).text

    return lambda: loop.run_until_complete(call())


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` calls of one variant in a managed turn.

    ``bare`` / ``ours`` / ``openinference`` / ``floor``: sync generate_content; a ``-stream`` suffix: its
    3-chunk stream, read out; an ``-async`` suffix: ``client.aio``'s generate_content (bare and ours only:
    the peer's wrappers are set on the sync ``models``).
    """
    from relay_runtime import adapters

    who, _, shape = variant.partition("-")
    client = _client()
    if who == "ours":
        adapters.instrument(client)
    elif who == "openinference":
        peer = _openinference(client)
        assert peer is not None, "openinference-instrumentation-google-genai is not installed"
    if who == "floor":
        call = _calls(client, client, None, shape == "stream", client)["floor"]
    elif shape == "async":
        call = _async_call(client)
    else:
        call = _calls(client, client, None, stream=shape == "stream")["bare"]
    with managed_turn(subscribed=True):
        instructions.counted(call, n, warm=20)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
