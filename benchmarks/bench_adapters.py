"""A real ``openai`` chat completion over a mock transport: bare vs ours vs peers.

First the issue's budget: ``adapters.complete`` inside a managed turn (a consumer
retains managed execution, a leased conversation, a begun turn) at most 3% slower
than the bare ``create()`` with one no-op subscriber (also shown: no subscriber, and
the same records written by hand, flat: the floor of what is recorded). The
two are alternated call by call (which goes first flips every pair), in several
runs; each run's figure is a median of single calls, and the verdict is the median
of the runs' ratios.

Then every variant side by side. Variants (each timed in every round, rounds interleaved so drift hits all alike):

- bare:          ``client.chat.completions.create(**kwargs)``
- ours:          ``adapters.complete(client, kwargs)`` inside a managed turn with one subscriber
- ours-idle:     ``adapters.complete`` with no turn (the unmanaged path)
- nemo-relay:    the same SDK call inside ``nemo_relay.llm.execute`` in a scope, one subscriber
                 (its callback must return JSON, so it returns ``model_dump()``; compare with bare+dump)
- otel-v2:       ``opentelemetry-instrumentation-openai-v2`` (if installed), in-memory span exporter
- openinference: ``openinference-instrumentation-openai`` (if installed), in-memory span exporter

Each figure is the median of single-call durations over every round.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import Any

import httpx2

from benchmarks.adapters_floor import KWARGS, by_hand, check_same_records
from benchmarks.managed_turn import managed_turn

CALLS = int(os.environ.get("BENCH_CALLS", "100"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "15"))
# The issue's budget: runs of alternated bare/ours pairs, per subscriber setup.
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "2000"))
WARMUP_PAIRS = 200
TARGET = 1.03  # ours / bare, one no-op subscriber


def openai_client() -> Any:
    import openai

    from relay_runtime.adapters.testing import BASE_OPENAI, TEST_KEY, chat_completion_body, chat_usage

    body = json.dumps(chat_completion_body("hi", model="gpt-bench", usage=chat_usage(9, 2, cached=3))).encode()
    headers = {"content-type": "application/json"}

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=headers, content=body)

    return openai.OpenAI(
        api_key=TEST_KEY,
        base_url=BASE_OPENAI,
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


class Variant:
    name = ""

    def setup(self) -> None: ...

    def run(self, n: int) -> list[float]:
        """The duration of each of ``n`` calls, in seconds."""
        raise NotImplementedError

    def teardown(self) -> None: ...


def _timed(call: Callable[[], Any], n: int) -> list[float]:
    # Each call timed on its own: the median of single calls shrugs off load spikes from
    # other processes, which a block mean on a busy 2-core box does not.
    now = time.perf_counter
    out = []
    for _ in range(n):
        t0 = now()
        call()
        out.append(now() - t0)
    return out


class Bare(Variant):
    name = "bare"

    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, n: int) -> list[float]:
        create, kwargs = self.client.chat.completions.create, KWARGS
        return _timed(lambda: create(**kwargs), n)


class BareDump(Bare):
    name = "bare+dump"

    def run(self, n: int) -> list[float]:
        create, kwargs = self.client.chat.completions.create, KWARGS
        return _timed(lambda: create(**kwargs).model_dump(), n)


class Ours(Variant):
    def __init__(self, client: Any, *, managed: bool) -> None:
        self.client = client
        self.managed = managed
        self.name = "ours" if managed else "ours-idle"
        self.events = 0
        self.home = tempfile.mkdtemp(prefix="relay-bench-")

    def _count(self, event: Any) -> None:
        self.events += 1

    def setup(self) -> None:
        from relay_runtime import session

        os.environ[session.HOME_ENV] = self.home
        session.reset_for_tests()
        if not self.managed:
            return
        coordinator = session.SESSION_COORDINATOR
        self.lease = coordinator.acquire_conversation(
            profile_key=session.current_profile_key(), session_id="bench", platform="bench"
        )
        self.turn = coordinator.begin_turn(self.lease, turn_id="t", task_id="t")
        host = self.lease.host
        host.retain_managed_execution("bench")
        self.sub = host.relay.subscribers.register(self._count, name="bench")

    def run(self, n: int) -> list[float]:
        from relay_runtime import adapters

        complete, client, kwargs = adapters.complete, self.client, KWARGS
        return _timed(lambda: complete(client, kwargs), n)

    def teardown(self) -> None:
        from relay_runtime import session

        if self.managed:
            host = self.lease.host
            host.relay.subscribers.deregister(self.sub)
            host.release_managed_execution("bench")
            session.SESSION_COORDINATOR.end_turn(self.turn, outcome="success")
            session.SESSION_COORDINATOR.release_conversation(self.lease)
        session.reset_for_tests()


class Nemo(Variant):
    name = "nemo-relay"

    def __init__(self, client: Any) -> None:
        import nemo_relay

        self.nemo = nemo_relay
        self.client = client
        self.events = 0

    def _count(self, event: Any) -> None:
        self.events += 1

    def setup(self) -> None:
        self.nemo.subscribers.register("bench", self._count)

    def run(self, n: int) -> list[float]:
        nemo, create = self.nemo, self.client.chat.completions.create

        # nemo_relay.llm.execute insists on a JSON result (a ChatCompletion is rejected), so
        # its callback also pays for model_dump(); the table shows that cost as "bare+dump".
        def callback(request: Any) -> Any:
            return create(**request.content).model_dump()

        async def loop() -> list[float]:
            now, out = time.perf_counter, []
            with nemo.scope.scope("bench", nemo.ScopeType.Agent):
                for _ in range(n):
                    t0 = now()
                    await nemo.llm.execute("openai", nemo.LLMRequest({}, KWARGS), callback, model_name="gpt-bench")
                    out.append(now() - t0)
            return out

        return asyncio.run(loop())

    def teardown(self) -> None:
        self.nemo.subscribers.deregister("bench")


class OTelPeer(Variant):
    def __init__(self, client: Any, name: str, instrumentor: Any) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.name = name
        self.client = client
        self.instrumentor = instrumentor
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.spans = 0

    def setup(self) -> None:
        self.instrumentor.instrument(tracer_provider=self.provider)

    def run(self, n: int) -> list[float]:
        return Bare(self.client).run(n)

    def teardown(self) -> None:
        self.instrumentor.uninstrument()
        self.spans += len(self.exporter.get_finished_spans())
        self.exporter.clear()


def _peers(client: Any) -> tuple[list[Variant], list[str]]:
    peers: list[Variant] = []
    notes: list[str] = []
    try:
        peers += [Nemo(client), BareDump(client)]
    except ImportError as exc:
        notes.append(f"nemo-relay not run: {exc}")
    try:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as V2

        peers.append(OTelPeer(client, "otel-v2", V2()))
    except ImportError as exc:
        notes.append(f"opentelemetry-instrumentation-openai-v2 not run: {exc}")
    try:
        from openinference.instrumentation.openai import OpenAIInstrumentor as OI

        peers.append(OTelPeer(client, "openinference", OI()))
    except ImportError as exc:
        notes.append(f"openinference-instrumentation-openai not run: {exc}")
    return peers, notes


def _check(variant: Variant) -> str | None:
    """One untimed call: a peer that cannot instrument this SDK version is reported, not timed."""
    try:
        variant.setup()
        try:
            variant.run(3)
        finally:
            variant.teardown()
    except Exception as exc:
        return f"{variant.name} failed on this SDK: {type(exc).__name__}: {exc}"
    if isinstance(variant, OTelPeer) and variant.spans == 0:
        return f"{variant.name} ran but recorded no spans on this SDK"
    return None


def main() -> None:
    client = openai_client()
    _issue_budget(client)
    variants: list[Variant] = [Bare(client), Ours(client, managed=True), Ours(client, managed=False)]
    peers, notes = _peers(client)
    for peer in peers:
        problem = _check(peer)
        if problem is None:
            variants.append(peer)
        else:
            notes.append(problem)
    for v in variants:  # warm up every path once
        v.setup()
        v.run(20)
        v.teardown()

    per_call: dict[str, list[float]] = {v.name: [] for v in variants}
    for round_no in range(ROUNDS):
        # Reverse the order every other round so drift in machine load hits every variant alike.
        for v in variants if round_no % 2 == 0 else variants[::-1]:
            v.setup()
            try:
                per_call[v.name] += v.run(CALLS)
            finally:
                v.teardown()

    bare = statistics.median(per_call["bare"])
    print(f"\nall variants, {ROUNDS} rounds x {CALLS} calls each (median of single calls)")
    print(f"{'variant':<14} {'median us/call':>14} {'vs bare':>8}   (p25..p75 us)")
    for name, samples in per_call.items():
        med = statistics.median(samples)
        q = statistics.quantiles(samples, n=4)
        print(f"{name:<14} {med * 1e6:>14.1f} {med / bare:>8.3f}   ({q[0] * 1e6:.1f}..{q[2] * 1e6:.1f})")
    managed = next(v for v in variants if isinstance(v, Ours) and v.managed)
    assert isinstance(managed, Ours)
    print(f"events seen by our subscriber: {managed.events}")
    print("\nour own cost over an instant create() (warm caches; best of 7 blocks), us/call:")
    for subscribed in (False, True):
        layers = _relay_overhead(subscribed)
        label = "one subscriber" if subscribed else "no subscriber "
        print(f"  {label}: " + ", ".join(f"{name} {us:.1f}" for name, us in layers.items()))
    for note in notes:
        print("note:", note)
    sys.stdout.flush()


def _alternating(
    client: Any, pairs: int, *, subscribed: bool, ours: Callable[[], Any] | None = None
) -> tuple[float, float]:
    """Median bare and median ours (seconds) over ``pairs`` calls of each, alternated call by call.

    Which of the two goes first flips every pair: the second call of a pair finds the
    caches the first one warmed, and neither side should get that for free. ``ours``
    stands in for ``adapters.complete(client, KWARGS)`` when given.
    """
    from relay_runtime import adapters

    create, kwargs = client.chat.completions.create, KWARGS
    run = ours if ours is not None else partial(adapters.complete, client, kwargs)
    now = time.perf_counter
    bare_t: list[float] = []
    ours_t: list[float] = []
    with managed_turn(subscribed=subscribed):
        for _ in range(WARMUP_PAIRS):
            create(**kwargs)
            run()
        for i in range(pairs):
            if i & 1:
                t0 = now()
                run()
                t1 = now()
                create(**kwargs)
                t2 = now()
                ours_t.append(t1 - t0)
                bare_t.append(t2 - t1)
            else:
                t0 = now()
                create(**kwargs)
                t1 = now()
                run()
                t2 = now()
                bare_t.append(t1 - t0)
                ours_t.append(t2 - t1)
    return statistics.median(bare_t), statistics.median(ours_t)


def _issue_budget(client: Any) -> None:
    """The issue's target: ``adapters.complete`` in a managed turn at most 3% over the bare SDK call."""
    print(
        f"openai {_version('openai')} chat completion over MockTransport: bare create() vs adapters.complete "
        f"in a managed turn,\nalternated call by call; {RUNS} runs x {PAIRS} pairs, medians per run"
    )
    check_same_records(client)
    by_hand_call = by_hand(client)
    for label, subscribed, ours in (
        ("no subscriber", False, None),
        ("one no-op subscriber", True, None),
        ("the same by hand", True, by_hand_call),
    ):
        runs = [_alternating(client, PAIRS, subscribed=subscribed, ours=ours) for _ in range(RUNS)]
        ratios = [o / b for b, o in runs]
        bare_us = statistics.median(b for b, _ in runs) * 1e6
        ours_us = statistics.median(o for _, o in runs) * 1e6
        ratio = statistics.median(ratios)
        verdict = "within" if ratio <= TARGET else "OVER"
        print(
            f"  {label:<20}: bare {bare_us:.1f} us, ours {ours_us:.1f} us, ratio {ratio:.3f} "
            f"({verdict} {TARGET}); per run: {' '.join(f'{r:.3f}' for r in ratios)}"
        )
    print(
        "  (the same by hand: the four events of one no-op-subscribed call written flat, nothing else;"
        " the floor of these records)"
    )
    sys.stdout.flush()


def _relay_overhead(subscribed: bool, n: int = 5000) -> dict[str, float]:
    """Our own cost per call, isolated from the SDK (us over the bare call), layer by layer,
    on an OpenAI-shaped client whose create() returns a prebuilt ChatCompletion."""
    from openai.types.chat import ChatCompletion

    from relay_runtime import LLMRequest, adapters, calls
    from relay_runtime.adapters.testing import chat_completion_body

    response = ChatCompletion.model_validate(chat_completion_body("hi"))

    class Completions:
        def create(self, **kwargs: Any) -> Any:
            return response

    class Chat:
        completions = Completions()

    class Client:
        chat = Chat()

    client, kwargs = Client(), KWARGS
    request = LLMRequest({}, kwargs)
    create = client.chat.completions.create

    def best(call: Callable[[], Any]) -> float:
        blocks = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            blocks.append((time.perf_counter() - t0) / n)
        return min(blocks)

    with managed_turn(subscribed=subscribed):
        bare = best(lambda: create(**kwargs))
        managed_call = best(lambda: calls.execute_current(request, lambda r: response, name="openai"))
        adapter_call = best(lambda: adapters.complete(client, kwargs))
    return {"calls.execute_current": (managed_call - bare) * 1e6, "adapters.complete": (adapter_call - bare) * 1e6}


def _version(dist: str) -> str:
    with suppress(Exception):
        from importlib.metadata import version

        return version(dist)
    return "?"


if __name__ == "__main__":
    main()
