"""The core's overhead, side by side with the bare callback and with ``nemo_relay`` in the same run.

Every figure is a median over several samples, and the variants of one
comparison are sampled in turn (round-robin), so a noisy neighbour on the
machine slows all of them alike instead of skewing one. Overheads are the
managed time minus the bare time of the same work.

Each sample is timed twice: by the process's CPU clock (all its threads, so
work nemo_relay hands to its own thread counts) and by the wall clock. On a
shared 2-core machine wall time also counts the moments the process sat
descheduled, so budgets are judged on CPU time; wall medians are printed
beside them.

Budgets: a sync call with one request intercept and one subscriber at most
6 us over the bare call and at least 150x less overhead than
``nemo_relay.llm.execute`` (sync and async, in the same run); a call nobody
watches at most 3 us over the bare call; a 100-chunk stream at most 0.35 us per
chunk; 100,000 calls leave no memory behind once collected. With valgrind, the instructions per
call of the bare callback, the watched call and a call in a turn (``--count`` is their entry): the
yardstick ``instructions.REFERENCE_INSTRUCTIONS_PER_US`` was read off.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from benchmarks import instructions
from relay_runtime import LLMRequest, LLMRequestInterceptOutcome, Relay

ROUNDS = 15  # samples per variant
CALLS = 4000  # calls per sample
STREAM_CHUNKS = 100
STREAMS = 200  # streams per sample
MEMORY_CALLS = 100_000
# tracemalloc's own bookkeeping and interpreter free lists move a little; growth per call would be megabytes.
MEMORY_SLACK = 16 * 1024

_clock = time.perf_counter
_cpu = time.process_time


def _content() -> dict[str, Any]:
    return {"model": "bench-model", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.2}


HEADERS = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
RESPONSE = {"id": "r-1", "model": "bench-model", "choices": [{"message": {"content": "hi"}}]}


def provider(request: LLMRequest) -> dict[str, Any]:
    return RESPONSE


async def aprovider(request: Any) -> dict[str, Any]:
    return RESPONSE


def keep(name: str, request: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
    return LLMRequestInterceptOutcome(request, annotated)


def sink(event: Any) -> None:
    return None


# -- measuring ---------------------------------------------------------------------------------------


class Timing:
    """Medians (and the best sample) of one variant, in microseconds per call."""

    def __init__(self, cpu: list[float], wall: list[float]) -> None:
        self.cpu = statistics.median(cpu)
        self.wall = statistics.median(wall)
        self.best = min(cpu)

    def __sub__(self, other: Timing) -> Timing:
        out = Timing([0.0], [0.0])
        out.cpu, out.wall, out.best = self.cpu - other.cpu, self.wall - other.wall, self.best - other.best
        return out

    def __truediv__(self, n: float) -> Timing:
        out = Timing([0.0], [0.0])
        out.cpu, out.wall, out.best = self.cpu / n, self.wall / n, self.best / n
        return out


def _sample_sync(fn: Callable[[], Any], n: int, done: Callable[[], Any] | None = None) -> tuple[float, float]:
    cpu, wall = _cpu(), _clock()
    for _ in range(n):
        fn()
    if done is not None:
        done()
    return (_cpu() - cpu) / n * 1e6, (_clock() - wall) / n * 1e6


def compare_sync(
    variants: dict[str, Callable[[], Any]],
    n: int = CALLS,
    rounds: int = ROUNDS,
    after: dict[str, Callable[[], Any]] | None = None,
) -> dict[str, Timing]:
    """Each variant sampled ``rounds`` times, round-robin, ``n`` calls a sample; ``after[name]`` runs inside each
    of its samples (a peer that delivers its events on a thread of its own flushes them there)."""
    after = after or {}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    wall: dict[str, list[float]] = {name: [] for name in variants}
    for name, fn in variants.items():  # warm up
        _sample_sync(fn, max(1, n // 10), after.get(name))
    for _ in range(rounds):
        for name, fn in variants.items():
            c, w = _sample_sync(fn, n, after.get(name))
            cpu[name].append(c)
            wall[name].append(w)
    return {name: Timing(cpu[name], wall[name]) for name in variants}


def compare_async(
    variants: dict[str, Callable[[], Awaitable[Any]]],
    n: int = CALLS,
    rounds: int = ROUNDS,
    after: dict[str, Callable[[], Awaitable[None]]] | None = None,
) -> dict[str, Timing]:
    """As ``compare_sync``, each call awaited in one event loop; ``after[name]`` runs inside each sample."""
    after = after or {}

    async def sample(
        fn: Callable[[], Awaitable[Any]], count: int, done: Callable[[], Awaitable[None]] | None
    ) -> tuple[float, float]:
        cpu, wall = _cpu(), _clock()
        for _ in range(count):
            await fn()
        if done is not None:
            await done()
        return (_cpu() - cpu) / count * 1e6, (_clock() - wall) / count * 1e6

    async def run() -> dict[str, Timing]:
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        wall: dict[str, list[float]] = {name: [] for name in variants}
        for name, fn in variants.items():
            await sample(fn, max(1, n // 10), after.get(name))
        for _ in range(rounds):
            for name, fn in variants.items():
                c, w = await sample(fn, n, after.get(name))
                cpu[name].append(c)
                wall[name].append(w)
        return {name: Timing(cpu[name], wall[name]) for name in variants}

    return asyncio.run(run())


def _line(label: str, t: Timing, budget: float | None = None) -> None:
    verdict = "" if budget is None else ("  ok" if t.cpu <= budget else f"  OVER BUDGET ({budget} us)")
    print(f"  {label:<52} cpu {t.cpu:8.2f}  wall {t.wall:8.2f}  best {t.best:8.2f} us{verdict}", flush=True)


def _ratio(label: str, value: float, floor: float | None = None) -> None:
    verdict = "" if floor is None else ("  ok" if value >= floor else f"  UNDER {floor:g}x")
    print(f"  {label:<52} {value:8.1f} x{verdict}", flush=True)


# -- scenarios ---------------------------------------------------------------------------------------


def bench_unwatched() -> Timing:
    relay = Relay("bench-unwatched")
    content = _content()
    times = compare_sync(
        {
            "bare": lambda: provider(LLMRequest(HEADERS, content)),
            "ours": lambda: relay.llm.execute("bench", LLMRequest(HEADERS, content), provider),
        }
    )
    overhead = times["ours"] - times["bare"]
    print("call with no subscriber and no intercept (sync)")
    _line("bare callback", times["bare"])
    _line("relay.llm.execute", times["ours"])
    _line("overhead", overhead, 3.0)
    return overhead


def _watched_relay() -> Relay:
    relay = Relay("bench-watched")
    relay.intercepts.register_llm_request("keep", 0, False, keep)
    relay.subscribers.register(sink, name="sink")
    return relay


def bench_watched_sync() -> Timing:
    relay = _watched_relay()
    content = _content()
    times = compare_sync(
        {
            "bare": lambda: provider(LLMRequest(HEADERS, content)),
            "ours": lambda: relay.llm.execute("bench", LLMRequest(HEADERS, content), provider),
        }
    )
    overhead = times["ours"] - times["bare"]
    print("call with one request intercept and one subscriber (sync)")
    _line("bare callback", times["bare"])
    _line("relay.llm.execute", times["ours"])
    _line("overhead", overhead, 6.0)
    return overhead


def bench_against_nemo(ours_sync: Timing) -> None:
    try:
        import nemo_relay
    except ImportError:
        print("nemo_relay: not installed (make bench installs the [bench] extra); skipped")
        return
    relay = _watched_relay()
    content = _content()
    nemo_relay.intercepts.register_llm_request("keep", 0, False, _nemo_keep)
    nemo_relay.subscribers.register("sink", sink)
    try:
        nemo_calls = max(200, CALLS // 20)  # nemo is slow enough that fewer calls give as steady a median
        times = compare_async(
            {
                "bare": lambda: aprovider(LLMRequest(HEADERS, content)),
                "ours": lambda: relay.llm.execute_async("bench", LLMRequest(HEADERS, content), aprovider),
            }
        )
        nemo_times = compare_async(
            {
                "bare": lambda: aprovider(nemo_relay.LLMRequest(HEADERS, content)),
                "nemo": lambda: nemo_relay.llm.execute("bench", nemo_relay.LLMRequest(HEADERS, content), aprovider),
            },
            n=nemo_calls,
            rounds=max(5, ROUNDS // 2),
            # nemo_relay delivers to subscribers on its own thread; waiting for that delivery keeps the
            # comparison fair, since ours delivers inside the call.
            after={"nemo": nemo_relay.subscribers.flush_async},
        )
    finally:
        nemo_relay.intercepts.deregister_llm_request("keep")
        nemo_relay.subscribers.deregister("sink")
    ours_async = times["ours"] - times["bare"]
    nemo = nemo_times["nemo"] - nemo_times["bare"]
    print("same call (one request intercept, one subscriber), async, against nemo_relay.llm.execute")
    _line("bare async callback", times["bare"])
    _line("relay.llm.execute_async", times["ours"])
    _line("nemo_relay.llm.execute", nemo_times["nemo"])
    _line("overhead: ours async", ours_async)
    _line("overhead: nemo_relay", nemo)
    _ratio("nemo overhead / ours, sync execute (cpu)", nemo.cpu / ours_sync.cpu, 150.0)
    _ratio("nemo overhead / ours, sync execute (wall)", nemo.wall / ours_sync.wall)
    _ratio("nemo overhead / ours, execute_async (cpu)", nemo.cpu / ours_async.cpu, 150.0)
    _ratio("nemo overhead / ours, execute_async (wall)", nemo.wall / ours_async.wall)


def _nemo_keep(name: str, request: Any, annotated: Any) -> Any:
    import nemo_relay

    return nemo_relay.LLMRequestInterceptOutcome(request, annotated)


def _chunks() -> Iterator[dict[str, Any]]:
    for i in range(STREAM_CHUNKS):
        yield {"i": i}


def bench_stream() -> None:
    relay = _watched_relay()
    chunky = Relay("bench-chunks")
    chunky.subscribers.register(sink, name="sink", chunks=True)
    content = _content()

    def bare() -> None:
        for _ in provider_stream(LLMRequest(HEADERS, content)):
            pass

    def ours() -> None:
        for _ in relay.llm.stream("bench", LLMRequest(HEADERS, content), provider_stream):
            pass

    def ours_chunk_marks() -> None:
        for _ in chunky.llm.stream("bench", LLMRequest(HEADERS, content), provider_stream):
            pass

    times = compare_sync({"bare": bare, "ours": ours, "marks": ours_chunk_marks}, n=STREAMS)
    print(f"{STREAM_CHUNKS}-chunk stream (one request intercept, one subscriber)")
    _line("bare iteration, per stream", times["bare"])
    _line("relay.llm.stream, per stream", times["ours"])
    _line("overhead per chunk (call overhead included)", (times["ours"] - times["bare"]) / STREAM_CHUNKS, 0.35)
    _line("same with a subscriber of chunk marks, per chunk", (times["marks"] - times["bare"]) / STREAM_CHUNKS)


def provider_stream(request: LLMRequest) -> Iterator[dict[str, Any]]:
    return _chunks()


def bench_memory() -> None:
    relay = _watched_relay()
    content = _content()

    def calls(n: int) -> None:
        for _ in range(n):
            relay.llm.execute("bench", LLMRequest(HEADERS, content), provider)
            for _ in relay.llm.stream("bench", LLMRequest(HEADERS, content), lambda r: iter((1, 2))):
                pass

    calls(1000)  # caches and free lists settle first
    gc.collect()
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        calls(MEMORY_CALLS)
        gc.collect()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    growth = after - before
    print(f"memory over {MEMORY_CALLS:,} calls and {MEMORY_CALLS:,} streams (tracemalloc, after gc)")
    verdict = "  ok" if growth <= MEMORY_SLACK else f"  OVER BUDGET ({MEMORY_SLACK} bytes)"
    print(f"  {'retained growth':<52} {growth:8d} bytes{verdict}")
    print(f"  {'peak above start':<52} {(peak - before) / 1024:8.1f} KiB")


def bench_outside_turns() -> None:
    """The session layer's call, one request intercept and one subscriber on the host: in a managed turn,
    and with no turn open (recorded by the default host, the default). Each variant runs in a context of
    its own (``Context.run``), so the turn is active in one only; the bare call pays the same ``run``."""
    from relay_runtime import calls, session

    coordinator = session.SESSION_COORDINATOR
    host = coordinator.default_host()
    host.relay.intercepts.register_llm_request("keep", 0, False, keep)
    host.relay.subscribers.register(sink, name="sink")
    host.retain_managed_execution("bench")
    in_turn, no_turn, bare_ctx = contextvars.copy_context(), contextvars.copy_context(), contextvars.copy_context()
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="bench", platform="bench")
    turn = in_turn.run(coordinator.begin_turn, lease, turn_id="t", task_id="t")
    content = _content()
    execute = calls.execute_current
    try:
        times = compare_sync(
            {
                "bare": lambda: bare_ctx.run(provider, LLMRequest(HEADERS, content)),
                "turn": lambda: in_turn.run(execute, LLMRequest(HEADERS, content), provider, name="bench"),
                "outside": lambda: no_turn.run(execute, LLMRequest(HEADERS, content), provider, name="bench"),
            }
        )
    finally:
        in_turn.run(coordinator.end_turn, turn, outcome="success")
        coordinator.release_conversation(lease)
        host.release_managed_execution("bench")
        host.relay.intercepts.deregister_llm_request("keep")
        host.relay.subscribers.deregister("sink")
    print("calls.execute_current (one request intercept, one subscriber): in a turn, and with no turn open")
    _line("bare callback", times["bare"])
    _line("in a managed turn (attempt + logical call)", times["turn"])
    _line("no turn open, recorded by the default host", times["outside"])
    _line("overhead: in a turn", times["turn"] - times["bare"])
    _line("overhead: no turn open", times["outside"] - times["bare"])


def _count_calls(variant: str) -> Callable[[], Any]:
    """One call of ``variant``, each in a context of its own as in ``bench_outside_turns``."""
    from relay_runtime import calls, session

    content = _content()
    ctx = contextvars.copy_context()
    if variant == "bare":
        return lambda: ctx.run(provider, LLMRequest(HEADERS, content))
    if variant == "watched":
        relay = _watched_relay()
        return lambda: ctx.run(relay.llm.execute, "bench", LLMRequest(HEADERS, content), provider)
    if variant != "turn":
        raise SystemExit(f"unknown variant {variant!r}: bare, watched or turn")
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.default_host()
    host.relay.intercepts.register_llm_request("keep", 0, False, keep)
    host.relay.subscribers.register(sink, name="sink")
    host.retain_managed_execution("bench")
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="bench", platform="bench")
    ctx.run(coordinator.begin_turn, lease, turn_id="t", task_id="t")
    return lambda: ctx.run(calls.execute_current, LLMRequest(HEADERS, content), provider, name="bench")


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` calls of one variant."""
    instructions.counted(_count_calls(variant), n, warm=300)


def bench_instructions() -> None:
    if not instructions.available():
        return
    print("instructions per call: the managed call with one intercept and one subscriber, and in a turn")
    instructions.report("benchmarks.bench_core", ["bare", "watched", "turn"], calls=200)


def main() -> None:
    print(f"python {sys.version.split()[0]}; medians of {ROUNDS} samples of {CALLS} calls each", flush=True)
    bench_unwatched()
    bench_against_nemo(bench_watched_sync())
    bench_stream()
    bench_outside_turns()
    bench_memory()
    bench_instructions()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
