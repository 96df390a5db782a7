"""One line per consumer: ``attach(target)`` on a Relay, a host, or SESSION_COORDINATOR; ``detach()`` undoes it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import Relay, adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.run_journal import JournalSubscriber, read_run_events

COORDINATOR = session.SESSION_COORDINATOR


@pytest.fixture
def spans(relay_home: Path) -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    yield memory
    memory.shutdown()


def exporter_for(memory: InMemorySpanExporter) -> OTelExporter:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return OTelExporter(provider)


def one_turn(profile_key: str, session_id: str, text: str = "hi") -> None:
    """A conversation with one turn making one real SDK call over the mock transport."""
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(text)))
    lease = COORDINATOR.acquire_conversation(profile_key=profile_key, session_id=session_id, platform="test")
    turn = COORDINATOR.begin_turn(lease, turn_id=f"{session_id}-turn", task_id="task")
    try:
        adapters.complete(scripted.client, {"model": "gpt-test", "messages": [{"role": "user", "content": "q"}]})
    finally:
        COORDINATOR.end_turn(turn, outcome="success")
        COORDINATOR.release_conversation(lease)


def span_names(memory: InMemorySpanExporter) -> list[str]:
    return sorted(s.name for s in memory.get_finished_spans())


def test_otel_attached_to_the_coordinator_follows_every_host_present_and_future(spans) -> None:
    before = COORDINATOR.host("/profiles/before")
    exporter = exporter_for(spans).attach(COORDINATOR)
    after = COORDINATOR.host("/profiles/after")
    assert before.consumers() == after.consumers() == ["otel"]  # managed execution retained on both
    one_turn(before.profile_key, "s-before")
    one_turn(after.profile_key, "s-after")
    attempts = [s for s in spans.get_finished_spans() if s.name == "chat gpt-test"]
    assert sorted(s.attributes["gen_ai.conversation.id"] for s in attempts) == ["s-after", "s-before"]

    exporter.detach()
    exporter.detach()  # idempotent
    assert before.consumers() == after.consumers() == []
    later = COORDINATOR.host("/profiles/later")
    assert later.consumers() == [] and "otel" not in later.relay.subscribers.names()
    spans.clear()
    one_turn(before.profile_key, "s-quiet")
    assert spans.get_finished_spans() == ()


def test_otel_attached_to_a_host_retains_and_a_relay_does_not(spans) -> None:
    host = COORDINATOR.host("/profiles/one")
    exporter = exporter_for(spans).attach(host)
    assert host.consumers() == ["otel"]
    one_turn(host.profile_key, "s1")
    assert "chat gpt-test" in span_names(spans)
    exporter.detach()
    assert host.consumers() == []

    bare = Relay(name="bare")
    exporter = exporter_for(spans).attach(bare)
    assert bare.subscribers.names() == ["otel"]
    exporter.detach()
    assert bare.subscribers.names() == []


def test_attach_refuses_what_it_cannot_follow(spans, tmp_path) -> None:
    with pytest.raises(TypeError, match="takes a Relay, a session Host or the SESSION_COORDINATOR, got str"):
        exporter_for(spans).attach("a relay's name")
    journal = JournalSubscriber(session_dir=tmp_path)
    with pytest.raises(TypeError, match="got int"):
        journal.attach(42)
    with pytest.raises(ValueError, match="needs a Relay, a session host or SESSION_COORDINATOR"):
        journal.attach()
    journal.close()


def journal_rows(tmp_path: Path, session_id: str) -> list[str]:
    return [row["event"] for row in read_run_events(session_id, f"{session_id}-turn", session_dir=tmp_path)["events"]]


def test_journal_attached_to_a_host_records_the_llm_calls(tmp_path, relay_home) -> None:
    host = COORDINATOR.host("/profiles/j")
    journal = JournalSubscriber(session_dir=tmp_path).attach(host)
    assert host.consumers() == ["run_journal"]
    one_turn(host.profile_key, "sj", text="journaled")
    assert journal.flush(5)
    rows = read_run_events("sj", "sj-turn", session_dir=tmp_path)["events"]
    assert [r["event"] for r in rows if r["event"] != "span"] == ["status", "runtime_model", "token", "done"]
    assert [r["payload"] for r in rows if r["event"] == "token"] == [{"text": "journaled"}]
    assert journal.close()
    assert host.consumers() == [] and "run_journal" not in host.relay.subscribers.names()


def test_journal_attached_to_the_coordinator_follows_new_hosts(tmp_path, relay_home) -> None:
    journal = JournalSubscriber(session_dir=tmp_path).attach(COORDINATOR)
    host = COORDINATOR.host("/profiles/new")
    one_turn(host.profile_key, "sn", text="new host")
    assert journal.flush(5)
    assert "token" in journal_rows(tmp_path, "sn")
    journal.close()
    assert host.consumers() == []


def test_journal_on_a_bare_relay_says_once_that_calls_are_not_journaled(tmp_path, relay_home, caplog) -> None:
    host = COORDINATOR.host("/profiles/bare")
    journal = JournalSubscriber(host.relay, session_dir=tmp_path)
    journal.register()  # the relay only: nothing retains managed execution
    with caplog.at_level(logging.WARNING, logger="relay_runtime.integrations.run_journal"):
        one_turn(host.profile_key, "sb1")
        one_turn(host.profile_key, "sb2")
    warnings = [r for r in caplog.records if "not journaled" in r.getMessage()]
    assert len(warnings) == 1
    assert "attach the journal to the host" in warnings[0].getMessage()
    journal.close()


def test_otel_and_journal_attached_together_release_only_their_own_hold(spans, tmp_path: Any) -> None:
    host = COORDINATOR.host("/profiles/both")
    exporter = exporter_for(spans).attach(COORDINATOR)
    journal = JournalSubscriber(session_dir=tmp_path).attach(host)
    assert host.consumers() == ["otel", "run_journal"]
    exporter.detach()
    assert host.consumers() == ["run_journal"]
    one_turn(host.profile_key, "sboth")
    journal.close()
    assert "token" in journal_rows(tmp_path, "sboth")


def test_hosts_made_while_detaching_are_left_clean(spans) -> None:
    import threading

    for round_ in range(20):
        exporter = exporter_for(spans).attach(COORDINATOR)
        barrier = threading.Barrier(5)

        def make(i: int, r: int, gate: threading.Barrier) -> None:
            gate.wait(5)
            COORDINATOR.host(f"/profiles/race-{r}-{i}")

        threads = [threading.Thread(target=make, args=(i, round_, barrier)) for i in range(4)]
        for th in threads:
            th.start()
        barrier.wait(5)
        exporter.detach()
        for th in threads:
            th.join(5)
    assert all(h.consumers() == [] and h.relay.subscribers.names() == [] for h in COORDINATOR.hosts())
    assert len(COORDINATOR.hosts()) == 80
