"""A real ``openai`` chat completion over a mock transport: bare vs ours vs peers.

Variants (each timed in every round, rounds interleaved so drift hits all alike):

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
from typing import Any

import httpx2

CALLS = int(os.environ.get("BENCH_CALLS", "100"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "15"))
KWARGS: dict[str, Any] = {
    "model": "gpt-bench",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
    "temperature": 0.2,
}


def _client() -> Any:
    import openai

    from adapters.testing import BASE_OPENAI, TEST_KEY, chat_completion_body, chat_usage

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
        import adapters

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
    client = _client()
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
    print(f"openai {_version('openai')} chat completion over MockTransport; {ROUNDS} rounds x {CALLS} calls")
    print(f"{'variant':<14} {'median us/call':>14} {'vs bare':>8}   (p25..p75 us)")
    medians = {}
    for name, samples in per_call.items():
        medians[name] = med = statistics.median(samples)
        q = statistics.quantiles(samples, n=4)
        print(f"{name:<14} {med * 1e6:>14.1f} {med / bare:>8.3f}   ({q[0] * 1e6:.1f}..{q[2] * 1e6:.1f})")
    bare_alt, ours_alt = _alternating(client, ROUNDS * CALLS)
    ours = statistics.median(ours_alt) / statistics.median(bare_alt)
    verdict = "within" if ours <= 1.05 else "OVER"
    print(
        f"alternating call by call ({len(bare_alt)} each): bare {statistics.median(bare_alt) * 1e6:.1f} us, "
        f"ours {statistics.median(ours_alt) * 1e6:.1f} us; ours / bare = {ours:.3f}: {verdict} the 5% budget"
    )
    managed = next(v for v in variants if isinstance(v, Ours) and v.managed)
    assert isinstance(managed, Ours)
    print(f"events seen by our subscriber: {managed.events}")
    idle_us, managed_us = _relay_overhead()
    print(
        f"relay overhead over an instant create(): unmanaged {idle_us:.1f} us/call, "
        f"managed with one subscriber {managed_us:.1f} us/call"
    )
    for note in notes:
        print("note:", note)
    sys.stdout.flush()


def _alternating(client: Any, n: int) -> tuple[list[float], list[float]]:
    """Bare and ours (managed, one subscriber) timed in strict alternation, so both see the same load."""
    import adapters

    ours = Ours(client, managed=True)
    create, complete, kwargs = client.chat.completions.create, adapters.complete, KWARGS
    now = time.perf_counter
    bare_t: list[float] = []
    ours_t: list[float] = []
    ours.setup()
    try:
        for _ in range(n):
            t0 = now()
            create(**kwargs)
            t1 = now()
            complete(client, kwargs)
            t2 = now()
            bare_t.append(t1 - t0)
            ours_t.append(t2 - t1)
    finally:
        ours.teardown()
    return bare_t, ours_t


def _relay_overhead(n: int = 5000) -> tuple[float, float]:
    """Our own cost per call, isolated from the SDK: ``adapters.complete`` minus a bare call,
    on an OpenAI-compatible client whose create() returns a prebuilt ChatCompletion."""
    from types import SimpleNamespace

    from openai.types.chat import ChatCompletion

    from adapters.testing import chat_completion_body

    response = ChatCompletion.model_validate(chat_completion_body("hi"))
    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=lambda **kw: response)))
    bare, idle, managed = Bare(client), Ours(client, managed=False), Ours(client, managed=True)

    def best(variant: Variant) -> float:
        variant.setup()
        try:
            return statistics.median(variant.run(n))
        finally:
            variant.teardown()

    base = best(bare)
    return (best(idle) - base) * 1e6, (best(managed) - base) * 1e6


def _version(dist: str) -> str:
    with suppress(Exception):
        from importlib.metadata import version

        return version(dist)
    return "?"


if __name__ == "__main__":
    main()
