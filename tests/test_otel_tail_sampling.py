"""Tail sampling: a turn's spans are held until it ends, then exported or dropped together."""

from __future__ import annotations

import posixpath
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from otel_support import Pipeline, span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import Relay, adapters, session
from relay_runtime.adapters import testing
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from relay_runtime.integrations.otel import DETAILS_EVENT, OTelExporter, TailSampler

pytestmark = pytest.mark.usefixtures("span_path")


class Run:
    """A conversation on the coordinator with an exporter that tail-samples."""

    def __init__(self, sampler: TailSampler, session_id: str = "s1", **options: Any) -> None:
        self.pipeline = Pipeline()
        self.exporter = OTelExporter(
            self.pipeline.tracer_provider, self.pipeline.meter_provider, sampler=sampler, **options
        ).attach(session.SESSION_COORDINATOR)
        self.coordinator = session.SESSION_COORDINATOR
        self.lease = self.coordinator.acquire_conversation(
            profile_key=session.current_profile_key(), session_id=session_id, platform="cli"
        )
        self.relay = self.lease.host.relay
        self.turns = 0

    def turn(self, body: Any) -> None:
        self.turns += 1
        turn = self.coordinator.begin_turn(self.lease, turn_id=f"t{self.turns}", task_id="x")
        try:
            body()
        finally:
            self.coordinator.end_turn(turn, outcome="success")

    def close(self) -> None:
        self.coordinator.release_conversation(self.lease)

    @staticmethod
    def tool(name: str, fn: Any) -> Any:
        relay = session.SESSION_COORDINATOR.host(session.current_profile_key()).relay
        return relay.tools.execute(name, {}, fn)

    def names(self) -> list[str]:
        return sorted(s.name for s in self.pipeline.finished())


def _call(answer: Any = None) -> Any:
    scripted = testing.scripted_openai(answer or testing.json_reply(testing.chat_completion_body("ok")))

    def call() -> None:
        try:
            adapters.complete(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        except Exception:
            pass

    return call


def test_a_dropped_turn_leaves_nothing_but_its_metrics(relay_home) -> None:  # type: ignore[no-untyped-def]
    run = Run(TailSampler(ratio=0.0))
    run.turn(_call())
    run.close()
    assert run.pipeline.finished() == []
    assert sum(p.count for p in run.pipeline.histogram("gen_ai.client.operation.duration")) == 1
    assert run.exporter.diagnostics()["otel.sampler.dropped_traces"] >= 1


def test_an_error_anywhere_keeps_the_whole_turn_and_its_parents(relay_home) -> None:  # type: ignore[no-untyped-def]
    run = Run(TailSampler(ratio=0.0))
    run.turn(_call())  # dropped
    run.turn(_call(testing.error(400)))  # a failed attempt: kept, all of it
    assert run.names() == ["chat gpt-x", "logical_llm_call", "turn"]
    run.close()
    assert run.names() == ["chat gpt-x", "invoke_agent agent", "logical_llm_call", "turn"]
    spans = run.pipeline.finished()
    assert len({s.context.trace_id for s in spans}) == 1
    ids = {s.context.span_id for s in spans}
    assert all(s.parent is None or s.parent.span_id in ids for s in spans)  # nothing cut off from its parent


def test_nothing_is_exported_before_its_turn_ends(relay_home) -> None:  # type: ignore[no-untyped-def]
    run = Run(TailSampler(ratio=1.0))
    seen: list[list[str]] = []

    def body() -> None:
        _call()()
        run.relay.tools.execute("lookup", {}, lambda a: 1)
        seen.append(run.names())

    run.turn(body)
    assert seen == [[]]
    assert run.names() == ["chat gpt-x", "execute_tool lookup", "logical_llm_call", "turn"]
    run.close()


def test_the_ratio_decides_by_trace_and_never_splits_one(relay_home) -> None:  # type: ignore[no-untyped-def]
    pipeline_spans: dict[int, list[str]] = defaultdict(list)
    kept = dropped = 0
    for i in range(24):
        run = Run(TailSampler(ratio=0.5), session_id=f"s{i}")
        run.turn(_call())
        run.turn(_call())
        run.close()
        run.exporter.detach()
        for span in run.pipeline.finished():
            pipeline_spans[span.context.trace_id].append(span.name)
        if run.pipeline.finished():
            kept += 1
            assert len(run.pipeline.finished()) == 7  # the conversation, and both turns whole
        else:
            dropped += 1
    assert kept and dropped
    sampler = TailSampler(ratio=0.5)
    for trace_id in pipeline_spans:
        assert sampler.sampled(trace_id)


def test_cost_latency_and_keep_if_rules(relay_home) -> None:  # type: ignore[no-untyped-def]
    sampler = TailSampler(ratio=0.0, keep_cost_above=0.001, keep_slower_than=0.05, keep_if=lambda e: e.name == "vip")

    def kept(body: Any, prices: dict[str, float] | None = None) -> list[str]:
        run = Run(sampler, session_id=f"s{time.monotonic_ns()}")
        if prices is not None:
            run.relay.cost.use(PriceCatalog.from_mapping({"openai": {"gpt-x": prices}}))
        run.turn(body)
        run.close()
        run.exporter.detach()
        return run.names()

    # 12 input + 5 output tokens: 0.0032 at the first prices (above the line), 0.00000017 at the second.
    assert "chat gpt-x" in kept(_call(), {"input": 100.0, "output": 400.0})
    assert kept(_call(), {"input": 0.01, "output": 0.01}) == []
    assert "execute_tool slow" in kept(lambda: Run.tool("slow", lambda a: time.sleep(0.08)))
    assert "execute_tool vip" in kept(lambda: Run.tool("vip", lambda a: 1))
    assert kept(lambda: Run.tool("plain", lambda a: 1)) == []


def test_a_kept_turn_keeps_the_later_turns_of_its_trace(relay_home) -> None:  # type: ignore[no-untyped-def]
    run = Run(TailSampler(ratio=0.0))
    run.turn(_call())  # dropped: decided when it ended
    run.turn(_call(testing.error(400)))  # kept: the trace is marked
    run.turn(_call())  # kept with its trace
    run.close()
    assert run.names().count("turn") == 2 and "invoke_agent agent" in run.names()


def test_a_budget_refusal_and_a_guardrail_rejection_keep_their_turn(relay_home) -> None:  # type: ignore[no-untyped-def]
    run = Run(TailSampler(ratio=0.0))
    run.relay.cost.use(PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 100.0, "output": 400.0}}}))
    run.relay.cost.budget(Budget(0.0000001, per="turn"))

    def refused() -> None:
        with pytest.raises(BudgetExceeded):
            adapters.complete(testing.scripted_openai().client, {"model": "gpt-x", "messages": [], "max_tokens": 5})

    run.turn(refused)
    assert run.names().count("turn") == 1
    run.close()
    run.exporter.detach()
    rejected = Run(TailSampler(ratio=0.0), session_id="s2")
    rejected.relay.intercepts.register_llm_guardrail("no", 0, lambda name, request, annotated: "refused")
    rejected.turn(_call())
    assert rejected.names() == ["chat gpt-x", "logical_llm_call", "turn"]
    rejected.close()


def test_a_full_buffer_exports_unsampled_and_counts_it(relay_home) -> None:  # type: ignore[no-untyped-def]
    run = Run(TailSampler(ratio=0.0, max_buffered_spans=3))

    def five_tools() -> None:
        for i in range(5):
            run.relay.tools.execute(f"tool{i}", {}, lambda a: 1)

    run.turn(five_tools)
    names = run.names()
    assert names == sorted([f"execute_tool tool{i}" for i in range(5)] + ["turn"])  # the whole unit, not half
    assert run.exporter.diagnostics()["otel.sampler.overflow"] == 1
    run.close()


def test_shutdown_exports_what_is_still_held(relay_home) -> None:  # type: ignore[no-untyped-def]
    run = Run(TailSampler(ratio=0.0))
    turn = run.coordinator.begin_turn(run.lease, turn_id="open", task_id="x")
    run.relay.tools.execute("lookup", {}, lambda a: 1)
    run.exporter.shutdown()
    assert "execute_tool lookup" in run.names() and "turn" in run.names()  # abandoned: an error, kept
    run.coordinator.end_turn(turn, outcome="success")
    run.close()


def test_a_raising_keep_if_keeps_the_whole_unit_and_is_counted(relay_home) -> None:  # type: ignore[no-untyped-def]
    def broken(event: Any) -> bool:
        if event.name in ("flaky", "turn"):
            raise KeyError("no such field")
        return False

    run = Run(TailSampler(ratio=0.0, keep_if=broken))

    def body() -> None:
        Run.tool("plain", lambda a: 1)
        Run.tool("flaky", lambda a: 1)

    run.turn(body)
    # Neither the span the rule raised on nor the unit whose end it raised on is lost or left held.
    assert run.names() == ["execute_tool flaky", "execute_tool plain", "turn"]
    assert run.exporter._tail is not None and run.exporter._tail.held() == 0
    assert run.exporter.diagnostics()["otel.sampler.rule_errors"] == 2
    run.close()


def test_a_scope_that_outlives_its_kept_root_is_kept_with_it() -> None:
    pipeline = Pipeline()
    relay = Relay()
    exporter = OTelExporter(pipeline.tracer_provider, sampler=TailSampler(ratio=0.0)).attach(relay)
    root = relay.scope.push("handle_request", "function", root=True)
    background = relay.scope.push("background", "function", parent=root, attach=False)
    relay.scope.pop(root, error=RuntimeError("request failed"))  # an error: kept
    relay.scope.end(background)  # ends after its root, handed down as a root of its own
    spans = pipeline.finished()
    assert sorted(s.name for s in spans) == ["background", "handle_request"]  # the trace whole, not half
    assert len({s.context.trace_id for s in spans}) == 1
    exporter.detach()


def test_details_log_records_go_out_with_their_trace_or_not_at_all(relay_home) -> None:  # type: ignore[no-untyped-def]
    logs = InMemoryLogRecordExporter()
    loggers = LoggerProvider()
    loggers.add_log_record_processor(SimpleLogRecordProcessor(logs))
    run = Run(TailSampler(ratio=0.0), capture_content="EVENT_ONLY", logger_provider=loggers)
    run.turn(_call())  # dropped: nothing of it goes out, its content least of all
    assert run.names() == [] and logs.get_finished_logs() == ()
    run.turn(_call(testing.error(400)))  # kept: its attempt's record with it, in its span's context
    (attempt,) = run.pipeline.by_name("chat gpt-x")
    (record,) = [r.log_record for r in logs.get_finished_logs()]
    assert record.event_name == DETAILS_EVENT and record.span_id == attempt.context.span_id
    run.close()


def test_content_files_are_written_only_for_the_traces_kept(relay_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "genai"
    keep = [False]
    sampler = TailSampler(ratio=0.0, keep_if=lambda event: keep[0])
    run = Run(sampler, capture_content=True, content_store=f"file://{store}")
    run.turn(_call())  # dropped: what the user said is not left in the store
    assert run.exporter.force_flush() and run.names() == []
    assert list(store.iterdir()) == []
    keep[0] = True
    run.turn(_call())  # kept: its files are written, and its span names them
    assert run.exporter.force_flush()
    (attempt,) = run.pipeline.by_name("chat gpt-x")
    refs = sorted(v for k, v in attempt.attributes.items() if k.endswith("_ref"))
    assert len(refs) == 2  # the input and output messages (no system instructions, no tools)
    assert sorted(p.name for p in store.iterdir()) == sorted(posixpath.basename(ref) for ref in refs)
    run.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ratio": 1.5}, "ratio must be a number from 0 to 1"),
        ({"ratio": True}, "ratio must be a number from 0 to 1"),
        ({"keep_cost_above": -1}, "keep_cost_above must be a non-negative number"),
        ({"keep_slower_than": "1s"}, "keep_slower_than must be a non-negative number"),
        ({"max_buffered_spans": 0}, "max_buffered_spans must be a positive int"),
    ],
)
def test_bad_configuration_is_a_clear_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TailSampler(**kwargs)
    with pytest.raises(TypeError, match="keep_if must be callable"):
        TailSampler(keep_if="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sampler must be a TailSampler"):
        OTelExporter(Pipeline().tracer_provider, sampler=0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(("ratio", "exported"), [(1.0, ["handle_request", "work"]), (0.0, [])])
def test_a_span_that_ends_on_another_thread_as_its_unit_is_decided_goes_as_its_unit_went(
    ratio: float, exported: list[str]
) -> None:
    # The child's end has left the span table when its root ends on another thread, so the root's end does
    # not sweep it; the child reaches the sampler only after its unit was decided.
    pipeline = Pipeline()
    relay = Relay()
    child_waits, root_ended = threading.Event(), threading.Event()

    def keep_if(event: Any) -> bool:
        if event.name == "work":
            child_waits.set()
            root_ended.wait()
        return False

    exporter = OTelExporter(pipeline.tracer_provider, sampler=TailSampler(ratio=ratio, keep_if=keep_if)).attach(relay)
    root = relay.scope.push("handle_request", "function", root=True)
    child = relay.scope.push("work", "function", parent=root, attach=False)
    ending = threading.Thread(target=relay.scope.end, args=(child,))
    ending.start()
    child_waits.wait()
    relay.scope.pop(root)
    root_ended.set()
    ending.join()
    assert sorted(s.name for s in pipeline.finished()) == exported
    assert exporter._tail is not None and exporter._tail.held() == 0  # nothing left held for a unit that ended
    exporter.detach()
