"""What the OTel benchmarks share: a span pipeline that drops everything, a codec, and a managed turn.

``Managed`` is a conversation with an open turn on its own profile and in its own context, with the
exporter (or a no-op subscriber) attached: its ``body()`` is one managed LLM call. ``interleaved``
times bodies taking turns, on the calling thread's CPU clock.
"""

from __future__ import annotations

import contextvars
import gc
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from relay_runtime import LLMRequest, session
from relay_runtime import calls as relay_calls
from relay_runtime import conventions as cv
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.recorder import Recorder
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse, TokenUsage

CALLS = int(os.environ.get("BENCH_OTEL_CALLS", "2000"))
RUNS = int(os.environ.get("BENCH_OTEL_RUNS", "7"))
CLOCK = time.thread_time_ns


class DropExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class Codec:
    provider = "openai"
    operation = "chat"

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        return AnnotatedLLMRequest(
            model=content["model"],
            messages=content["messages"],
            params={"temperature": content["temperature"], "max_tokens": content["max_tokens"]},
            provider="openai",
        )

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        return dict(content)

    def annotate_response(self, r: Any) -> AnnotatedLLMResponse:
        u = r["usage"]
        return AnnotatedLLMResponse(
            model=r["model"],
            id=r["id"],
            finish_reasons=[r["finish_reason"]],
            usage=TokenUsage(input_tokens=u["prompt_tokens"], output_tokens=u["completion_tokens"]),
        )

    def accumulator(self) -> Any:
        raise NotImplementedError


KWARGS = {
    "model": "gpt-bench",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0.3,
    "max_tokens": 64,
}
RESPONSE = {
    "id": "chatcmpl-1",
    "model": "gpt-bench-0613",
    "finish_reason": "stop",
    "usage": {"prompt_tokens": 12, "completion_tokens": 5},
}


def provider_call(request: Any) -> dict[str, Any]:
    return RESPONSE


def tracer_provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter(), max_queue_size=100_000))
    return provider


def interleaved(
    bodies: dict[str, Callable[[], Any]],
    calls: int = CALLS,
    runs: int = RUNS,
    process: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Nanoseconds per call for each body, ``runs`` times, the bodies taking turns in every run.

    The machine is shared and its speed drifts; taking turns makes every body see
    the same drift, so their ratios hold even when the absolute figures move.
    Time is the calling thread's CPU time: what a call costs its caller, without
    the time other processes held the CPU, and without the span processor's
    worker thread, which runs off the call path by design. ``process``, when given, also
    gets the whole process's CPU time per call: every thread's, those worker threads' too.
    """
    samples: dict[str, list[float]] = {name: [] for name in bodies}
    for run in range(runs + 1):
        for name, body in bodies.items():
            gc.collect()
            p0 = time.process_time_ns()
            t0 = CLOCK()
            for _ in range(calls):
                body()
            elapsed = (CLOCK() - t0) / calls
            if run:  # the first run warms up
                samples[name].append(elapsed)
                if process is not None:
                    process.setdefault(name, []).append((time.process_time_ns() - p0) / calls)
    return samples


# -- ours -----------------------------------------------------------------------------------


class Managed:
    """A conversation with an open turn on its own profile, in its own context, with a subscriber."""

    def __init__(self, exporter: OTelExporter | None, subscriber: Any = None) -> None:
        self.context = contextvars.copy_context()
        self.exporter = exporter
        self.context.run(self._open, subscriber)

    def _open(self, subscriber: Any) -> None:
        self.host = session.SESSION_COORDINATOR.host(tempfile.mkdtemp(prefix="bench-otel-"))
        if self.exporter is not None:
            self.exporter.attach(self.host)
        else:
            noop = subscriber if subscriber is not None else (lambda e: None)
            self.host.relay.subscribers.register(noop, name="bench.noop")
            self.host.retain_managed_execution("bench")
        self.lease = session.SESSION_COORDINATOR.acquire_conversation(
            profile_key=self.host.profile_key, session_id="bench", platform="bench"
        )
        self.turn = session.SESSION_COORDINATOR.begin_turn(self.lease, turn_id="t", task_id="k")

    def body(self) -> Callable[[], Any]:
        request = LLMRequest(None, KWARGS)
        codec = Codec()
        execute = relay_calls.execute_current
        run = self.context.run

        def body() -> Any:
            return run(execute, request, provider_call, name="openai", codec=codec)

        return body

    def close(self) -> None:
        self.context.run(self._close)

    def _close(self) -> None:
        session.SESSION_COORDINATOR.end_turn(self.turn, outcome="success")
        session.SESSION_COORDINATOR.release_conversation(self.lease)
        if self.exporter is not None:
            self.exporter.shutdown()


def recorded_call_events() -> list[Any]:
    """The four events one managed call emits (logical call and attempt, start and end)."""
    recorder = Recorder()
    managed = Managed(None, recorder)
    managed.body()()
    managed.close()
    return [e for e in recorder if (e.metadata or {}).get(cv.KIND) in (cv.LOGICAL_CALL, cv.ATTEMPT)]


def exporter_only_body(exporter: OTelExporter, events: list[Any]) -> Callable[[], Any]:
    """The exporter fed one call's events: exactly its own work, without the relay's."""
    first, second, third, fourth = events

    def body() -> None:
        exporter(first)
        exporter(second)
        exporter(third)
        exporter(fourth)

    return body
