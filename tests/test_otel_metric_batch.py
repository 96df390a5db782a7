"""The GenAI metrics queued off the caller's thread export exactly what recording in place exports.

Real OpenAI clients over ``httpx2.MockTransport``, two exporters on one host: one as
shipped (points queued, recorded by a worker or at collect), one recording every point in
place. Their metric data must be the same; queueing shows only in when the SDK sees a point.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from otel_support import Pipeline

from relay_runtime import adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.otel import metrics as otel_metrics
from relay_runtime.integrations.otel.metric_batch import DRAIN_HOOK, MetricBatch
from relay_runtime.recorder import Recorder

MESSAGES = [{"role": "user", "content": "hi"}]
PRICES = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0, "valid_from": "2026-01-01"}}}
METRICS = (
    otel_metrics.OPERATION_DURATION,
    otel_metrics.TOKEN_USAGE,
    otel_metrics.TIME_TO_FIRST_CHUNK,
    otel_metrics.OPERATION_COST,
)


class Twins:
    """One host, one open turn, two exporters: ``queued`` as shipped, ``in_place`` never queueing."""

    def __init__(self) -> None:
        self.queued = Pipeline()
        self.in_place = Pipeline()
        host = session.SESSION_COORDINATOR.host(session.current_profile_key())
        self.exporter = OTelExporter(self.queued.tracer_provider, self.queued.meter_provider).attach(host, name="q")
        self.plain = OTelExporter(self.in_place.tracer_provider, self.in_place.meter_provider)
        self.plain._metrics = otel_metrics.GenAIMetrics(self.in_place.meter_provider, "test", batch=False)
        self.plain.attach(host, name="p")
        cost.attach(host, PriceCatalog.from_mapping(PRICES))
        self.lease = session.SESSION_COORDINATOR.acquire_conversation(
            profile_key=host.profile_key, session_id="c-1", platform="test"
        )
        self.turn = session.SESSION_COORDINATOR.begin_turn(self.lease, turn_id="t-1", task_id="task")

    @property
    def batch(self) -> MetricBatch:
        assert self.exporter._metrics is not None and self.exporter._metrics.batch is not None
        return self.exporter._metrics.batch

    def close(self) -> None:
        session.SESSION_COORDINATOR.end_turn(self.turn, outcome="success")
        session.SESSION_COORDINATOR.release_conversation(self.lease)
        self.exporter.detach()
        self.plain.detach()
        self.batch.close()  # its worker (started by the first queued point) exits now, not when idle


@pytest.fixture
def twins(relay_home: Any) -> Iterator[Twins]:
    out = Twins()
    # No worker wakes during a test unless the test asks: what is queued stays queued until a collect.
    out.batch._interval = 60.0
    try:
        yield out
    finally:
        out.close()


def points(pipeline: Pipeline) -> dict[str, list[tuple[Any, ...]]]:
    """Every histogram point as comparable data (not its timestamps), per metric, sorted."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for name in METRICS:
        rows = []
        for p in pipeline.histogram(name):
            assert isinstance(p, HistogramDataPoint)
            rows.append((sorted(p.attributes.items()), p.count, round(p.sum, 12), tuple(p.bucket_counts), p.min, p.max))
        out[name] = sorted(rows, key=repr)
    return out


def run_calls(rounds: int) -> None:
    """Calls of several series: two models, a provider error, a stream (time to first chunk), a priced one."""
    for i in range(rounds):
        s = t.scripted_openai(
            t.json_reply(t.chat_completion_body("hi", model="gpt-a-0613", usage=t.chat_usage(10 + i, 3))),
            t.json_reply(t.chat_completion_body("hi", model="gpt-x", usage=t.chat_usage(100, 20 + i))),
            t.error(500, "boom"),
            t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b"], model="gpt-s-1", usage=t.chat_usage(7, i)))),
            max_retries=0,
        )
        adapters.complete(s.client, {"model": "gpt-a", "messages": MESSAGES})
        adapters.complete(s.client, {"model": "gpt-x", "messages": MESSAGES})
        with pytest.raises(Exception, match="boom"):
            adapters.complete(s.client, {"model": "gpt-a", "messages": MESSAGES})
        stream = adapters.stream(
            s.client, {"model": "gpt-s", "messages": MESSAGES, "stream_options": {"include_usage": True}}
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "ab"


def test_queued_points_export_exactly_what_recording_in_place_exports(twins):
    run_calls(4)
    # Only each series' first points went to the SDK on the caller's thread; the rest wait.
    assert twins.batch.pending == 3 * 4
    queued, in_place = points(twins.queued), points(twins.in_place)
    assert twins.batch.pending == 0
    assert queued == in_place
    durations: dict[Any, int] = {}
    for a, n, *_ in queued[otel_metrics.OPERATION_DURATION]:
        durations[dict(a).get("error.type")] = durations.get(dict(a).get("error.type"), 0) + n
    assert durations == {None: 12, "InternalServerError": 4}
    assert sum(n for _, n, *_ in queued[otel_metrics.TIME_TO_FIRST_CHUNK]) == 4
    assert sum(n for _, n, *_ in queued[otel_metrics.OPERATION_COST]) == 4
    assert {dict(a)["gen_ai.token.type"] for a, *_ in queued[otel_metrics.TOKEN_USAGE]} == {"input", "output"}
    # The hook that records the queue at collect exports nothing of its own.
    data = twins.queued.reader.get_metrics_data()
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert DRAIN_HOOK not in names


def test_a_series_start_time_is_not_later_than_its_first_point(twins):
    before = time.time_ns()
    run_calls(1)
    after_first = time.time_ns()
    time.sleep(0.05)
    run_calls(1)  # queued, recorded by the collect below
    assert twins.batch.pending
    for p in twins.queued.histogram(otel_metrics.OPERATION_DURATION):
        assert p.count == 2
        assert before <= p.start_time_unix_nano <= after_first, "the series began at its first call"


def test_the_worker_records_a_full_batch_without_any_collect(twins):
    run_calls(1)
    twins.batch._flush_at = 4  # one round of run_calls
    twins.batch._wake.clear()
    run_calls(1)
    deadline = time.monotonic() + 5
    while twins.batch.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert twins.batch.pending == 0
    assert points(twins.queued) == points(twins.in_place)


def test_too_many_waiting_points_are_recorded_by_the_caller(twins):
    run_calls(1)
    twins.batch._max_pending = 2
    run_calls(1)
    assert twins.batch.pending == 2
    assert points(twins.queued) == points(twins.in_place)


def test_under_a_sampled_span_points_are_recorded_in_place_with_their_exemplar(twins):
    tracer = TracerProvider().get_tracer("app")
    run_calls(1)
    with tracer.start_as_current_span("request") as span:
        run_calls(1)
    assert twins.batch.pending == 0
    (ok,) = [p for p in twins.queued.histogram(otel_metrics.OPERATION_DURATION)
             if p.attributes["gen_ai.request.model"] == "gpt-x"]  # fmt: skip
    assert [e.span_id for e in ok.exemplars] == [span.get_span_context().span_id]
    assert points(twins.queued) == points(twins.in_place)


def test_whether_a_sampled_span_is_current_is_read_as_get_current_span_reads_it():
    """The metrics ask the current context for its span without going through get_current_span:
    the answer must be the same for no span, a sampled one, an unsampled one and a value that is no span."""
    def via_api() -> bool:
        return bool(trace_api.get_current_span().get_span_context().trace_flags.sampled)

    sampled = NonRecordingSpan(SpanContext(1, 2, False, TraceFlags(TraceFlags.SAMPLED)))
    unsampled = NonRecordingSpan(SpanContext(1, 3, False, TraceFlags(TraceFlags.DEFAULT)))
    contexts = {
        "nothing current": context_api.Context(),
        "sampled span": trace_api.set_span_in_context(sampled),
        "unsampled span": trace_api.set_span_in_context(unsampled),
        "no span under the key": context_api.set_value(otel_metrics._SPAN_KEY, sampled.get_span_context()),
    }
    answers = {}
    for name, context in contexts.items():
        token = context_api.attach(context)
        try:
            assert otel_metrics._sampled_span_current() is via_api(), name
            answers[name] = via_api()
        finally:
            context_api.detach(token)
    assert answers == {
        "nothing current": False,
        "sampled span": True,
        "unsampled span": False,
        "no span under the key": False,
    }


def test_shutdown_records_what_is_queued_and_later_points_go_in_place(twins):
    run_calls(2)
    assert twins.batch.pending > 0
    twins.exporter.shutdown()
    assert twins.batch.pending == 0
    twins.exporter.attach(session.SESSION_COORDINATOR.host(session.current_profile_key()), name="q")
    run_calls(1)
    assert twins.batch.pending == 0
    assert points(twins.queued) == points(twins.in_place)


def test_an_exemplar_filter_that_samples_without_a_span_keeps_recording_in_place():
    always = MeterProvider(metric_readers=[InMemoryMetricReader()], exemplar_filter=AlwaysOnExemplarFilter())
    assert otel_metrics.GenAIMetrics(always, "test").batch is None
    assert otel_metrics.GenAIMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()]), "test").batch
    # Not the SDK's provider: nothing says when it reads, so nothing is queued.
    assert otel_metrics.GenAIMetrics(NoOpMeterProvider(), "test").batch is None


def test_the_worker_exits_when_idle_restarts_on_the_next_point_and_stops_on_close():
    got: list[int] = []
    batch = MetricBatch(
        MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("t"), got.append, interval_s=0.01
    )
    batch.offer(1)
    worker = batch._thread
    assert worker is not None
    worker.join(5)
    assert not worker.is_alive() and batch._thread is None
    assert got == [1]
    assert batch.offer(2)
    assert batch._thread is not None and batch._thread is not worker
    batch.close()
    assert got == [1, 2]
    assert not batch.offer(3), "a closed batch hands points back to the caller"


def test_no_point_is_lost_when_callers_the_worker_and_collects_race(relay_home: Any):
    """Eight threads record while the worker drains small batches and a reader collects without pause."""
    recorder = Recorder()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    host.relay.subscribers.register(recorder, name="recorder")
    host.retain_managed_execution("test")
    lease = session.SESSION_COORDINATOR.acquire_conversation(
        profile_key=host.profile_key, session_id="c-1", platform="test"
    )
    turn = session.SESSION_COORDINATOR.begin_turn(lease, turn_id="t-1", task_id="task")
    s = t.scripted_openai(t.json_reply(t.chat_completion_body("hi", model="gpt-a-0613")))
    adapters.complete(s.client, {"model": "gpt-a", "messages": MESSAGES})
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    session.SESSION_COORDINATOR.release_conversation(lease)
    (end,) = [e for e in recorder if e.kind == "scope_end" and (e.metadata or {}).get(cv.KIND) == cv.ATTEMPT]

    reader = InMemoryMetricReader()
    metrics = otel_metrics.GenAIMetrics(MeterProvider(metric_readers=[reader]), "test")
    assert metrics.batch is not None
    metrics.batch._flush_at, metrics.batch._interval = 7, 0.001
    done = threading.Event()
    collected: list[int] = []

    def collect() -> None:
        while not done.is_set():
            reader.get_metrics_data()
            collected.append(1)

    def record() -> None:
        for _ in range(400):
            metrics.record_attempt(end, None)

    collector = threading.Thread(target=collect)
    collector.start()
    callers = [threading.Thread(target=record) for _ in range(8)]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    done.set()
    collector.join()
    assert collected, "the reader collected while the callers recorded"
    data = reader.get_metrics_data()
    counts = {
        m.name: sum(p.count for p in m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert counts[otel_metrics.OPERATION_DURATION] == 8 * 400
    assert counts[otel_metrics.TOKEN_USAGE] == 2 * 8 * 400
    metrics.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_records_its_own_points_not_its_parents_queue():
    got: list[Any] = []
    batch = MetricBatch(MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("t"), got.append)
    batch._interval = 60.0
    assert batch.offer("parent's")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what its drain records, and a fresh worker's start
        try:
            assert batch.offer("child's")
            started = batch._thread is not None and batch._thread.is_alive()
            batch.drain()
            os.write(write, repr((got, started)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    assert child == repr((["child's"], True))
    batch.close()
    assert got == ["parent's"]
