"""Calls made with no managed turn open: recorded by a process-wide default host (``outside_turns="record"``,
the default) or only counted (``configure(outside_turns="count")``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from otel_support import Pipeline

from relay_runtime import Recorder, adapters, auxiliary, configure, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.run_journal import JournalSubscriber

COORDINATOR = session.SESSION_COORDINATOR
CHAT = {"model": "gpt-o", "messages": [{"role": "user", "content": "q"}]}


@pytest.fixture
def recorded(relay_home: Path) -> Iterator[Recorder]:
    """A recorder attached to the coordinator, as an exporter would be (no host exists before the call)."""
    recorder = Recorder()
    watcher = _Attach(recorder)
    COORDINATOR.watch_hosts(watcher)
    try:
        yield recorder
    finally:
        COORDINATOR.unwatch_hosts(watcher)


class _Attach:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __call__(self, host: session.Host) -> None:
        host.relay.subscribers.register(self.recorder, name="outside-recorder", chunks=True)
        host.retain_managed_execution("outside-recorder")


def _calls(recorder: Recorder) -> list[tuple[str | None, str | None]]:
    """Each logical call's outcome, and whether it is a root (no conversation or turn above it)."""
    return [((e.output or {}).get("outcome"), e.parent_uuid) for e in recorder.ends(relay_kind=cv.LOGICAL_CALL)]


def _attempts(recorder: Recorder) -> list[str | None]:
    return [e.outcome for e in recorder.ends(relay_kind=cv.ATTEMPT)]


def _balanced(recorder: Recorder) -> bool:
    return sorted(e.uuid for e in recorder.starts()) == sorted(e.uuid for e in recorder.ends())


def _under_its_call(recorder: Recorder) -> bool:
    calls = {e.uuid for e in recorder.starts(relay_kind=cv.LOGICAL_CALL)}
    return all(e.parent_uuid in calls for e in recorder.starts(relay_kind=cv.ATTEMPT))


# -- recorded by default ---------------------------------------------------------------------------------


def test_an_instrumented_client_call_with_no_turn_becomes_spans_with_no_conversation(relay_home) -> None:
    out = Pipeline()
    exporter = OTelExporter(out.tracer_provider, out.meter_provider).attach(COORDINATOR)
    scripted = t.scripted_openai(t.error(500), t.json_reply(t.chat_completion_body("Paris.", model="gpt-o-1")))
    client = adapters.instrument(scripted.client)
    try:
        reply = client.chat.completions.create(**CHAT)
    finally:
        exporter.shutdown()
        scripted.client.close()
    assert reply.choices[0].message.content == "Paris."
    logical, attempt = out.one("logical_llm_call"), out.one("chat gpt-o")
    assert attempt.parent is not None and attempt.parent.span_id == logical.context.span_id
    assert logical.parent is None
    assert attempt.attributes["relay.sdk_retries"] == 1
    assert attempt.attributes["gen_ai.response.model"] == "gpt-o-1"
    for span in out.finished():
        assert "gen_ai.conversation.id" not in span.attributes, span.name
    assert [s.name for s in out.finished()] == ["chat gpt-o", "logical_llm_call"]  # no agent, no turn


def test_every_calling_convention_is_recorded_outside_turns(recorded, oa_pair) -> None:
    oa_pair.add(
        t.json_reply(t.chat_completion_body("a")),
        t.sse_reply(t.openai_chat_sse(t.chat_chunks(["b", "c"]))),
        t.json_reply(t.chat_completion_body("d")),
        t.sse_reply(t.openai_chat_sse(t.chat_chunks(["e"]))),
    )
    adapters.complete(oa_pair.client, CHAT)
    text = [c.choices[0].delta.content or "" for c in adapters.stream(oa_pair.client, CHAT) if c.choices]
    assert "".join(text) == "bc"

    async def run() -> None:
        await adapters.acomplete(oa_pair.aclient, CHAT)
        stream = await adapters.astream(oa_pair.aclient, CHAT)
        assert [c async for c in stream]

    asyncio.run(run())
    assert _attempts(recorded) == ["success"] * 4
    assert _calls(recorded) == [("success", None)] * 4
    assert _under_its_call(recorded) and _balanced(recorded)
    assert {e.provider for e in recorded.ends(relay_kind=cv.ATTEMPT)} == {"openai"}


def test_a_provider_error_and_a_stream_broken_off_end_their_logical_calls_so(recorded, oa_pair) -> None:
    oa_pair.add(t.error(400, "bad model"), t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b", "c"]))))
    with pytest.raises(openai.BadRequestError):
        adapters.complete(oa_pair.client, CHAT)
    stream = adapters.stream(oa_pair.client, CHAT)
    next(iter(stream))
    stream.close()
    assert _attempts(recorded) == ["failed", "cancelled"]
    assert _calls(recorded) == [("failed", None), ("cancelled", None)]
    assert _balanced(recorded)


def test_a_thread_not_handed_the_turn_and_a_second_concurrent_turn_are_recorded_outside_turns(
    recorded, oa_pair
) -> None:
    host = COORDINATOR.default_host()
    lease = COORDINATOR.acquire_conversation(profile_key=host.profile_key, session_id="s-1", platform="t")
    turn = COORDINATOR.begin_turn(lease, turn_id="t-1", task_id="k")
    oa_pair.add(*(t.json_reply(t.chat_completion_body(str(n))) for n in range(3)))
    try:
        adapters.complete(oa_pair.client, CHAT)  # in the turn
        thread = threading.Thread(target=lambda: adapters.complete(oa_pair.client, CHAT))
        thread.start()
        thread.join(10)
        second = COORDINATOR.begin_turn(lease, turn_id="t-2", task_id="k")
        assert not second.managed
        adapters.complete(oa_pair.client, CHAT)
        COORDINATOR.end_turn(second, outcome="success")
    finally:
        COORDINATOR.end_turn(turn, outcome="success")
        COORDINATOR.release_conversation(lease)
    (turn_scope,) = recorded.ends(relay_kind=cv.TURN)
    assert _calls(recorded) == [("success", turn_scope.uuid), ("success", None), ("success", None)]
    assert _attempts(recorded) == ["success"] * 3
    assert not any(k.startswith("unmanaged_calls") for k in host.relay.diagnostics())


def test_no_turn_calls_write_no_journal_rows(relay_home, tmp_path, oa_pair) -> None:
    journal = tmp_path / "journal"
    subscriber = JournalSubscriber(session_dir=journal).attach(COORDINATOR)
    recorder = Recorder()
    host = COORDINATOR.default_host()
    host.relay.subscribers.register(recorder, name="r")
    oa_pair.add(t.json_reply(t.chat_completion_body("a")), t.json_reply(t.chat_completion_body("b")))
    try:
        adapters.complete(oa_pair.client, CHAT)
        assert subscriber.flush(timeout=10)
        assert _attempts(recorder) == ["success"]  # recorded: the journal is attached and saw it
        assert not journal.exists() or not any(p.is_file() for p in journal.rglob("*"))
        lease = COORDINATOR.acquire_conversation(profile_key=host.profile_key, session_id="s-1", platform="t")
        turn = COORDINATOR.begin_turn(lease, turn_id="run-1", task_id="k")
        adapters.complete(oa_pair.client, CHAT)
        COORDINATOR.end_turn(turn, outcome="success")
        COORDINATOR.release_conversation(lease)
        assert subscriber.flush(timeout=10)
    finally:
        subscriber.detach()
    assert any(p.is_file() for p in journal.rglob("*"))  # a turn's call is journaled as ever


def test_profile_budgets_apply_outside_turns_and_turn_and_conversation_budgets_do_not(relay_home) -> None:
    host = COORDINATOR.default_host()
    prices = {"openai": {"gpt-o": {"input": 1.0, "output": 4.0}}}
    body = t.chat_completion_body(model="gpt-o", usage=t.chat_usage(100, 250))  # 0.0001 + 0.001 a call
    tight = {"model": "gpt-o", "max_tokens": 250, "messages": []}
    cost.attach(host, PriceCatalog.from_mapping(prices), Budget(0.00001, per="turn"),
                Budget(0.00001, per="conversation"))  # fmt: skip
    scripted = t.scripted_openai(*(t.json_reply(body) for _ in range(3)))
    adapters.complete(scripted.client, tight)  # only turn and conversation budgets: nothing refuses it
    host.relay.cost.budget(Budget(0.0015, per="profile", warn_at=None))
    adapters.complete(scripted.client, tight)
    with pytest.raises(BudgetExceeded) as caught:
        adapters.complete(scripted.client, tight)
    assert caught.value.budget.per == "profile"
    assert len(scripted.script.requests) == 2
    assert host.relay.cost.profile_rollup(host.profile_key).total == pytest.approx(0.0011)


def test_an_auxiliary_call_outside_turns_records_a_rejected_answer_as_failed(recorded, oa_pair) -> None:
    oa_pair.add(t.json_reply(t.chat_completion_body("")), t.json_reply(t.chat_completion_body("a summary")))

    @auxiliary.auxiliary_call
    def summarise(task: str) -> Any:
        for _ in range(2):
            try:
                return auxiliary.validate_response(adapters.complete(oa_pair.client, CHAT), task)
            except RuntimeError:
                continue
        return None

    assert summarise("compression").choices[0].message.content == "a summary"
    ends = recorded.ends(relay_kind=cv.ATTEMPT)
    assert [(e.outcome, e.error_type, e.metadata[cv.RETRY_COUNT]) for e in ends] == [
        ("failed", "response_rejected", 0),
        ("success", None, 1),
    ]
    # Each attempt's logical call closed when it ended (once judged), with its outcome: no turn completes it later.
    assert _calls(recorded) == [("failed", None), ("success", None)]
    assert {e.metadata[cv.CALL_ROLE] for e in ends} == {"auxiliary:compression"} and _balanced(recorded)


# -- configure ---------------------------------------------------------------------------------------


def test_count_keeps_no_turn_calls_unrecorded_and_counted(recorded, oa_pair) -> None:
    configure(outside_turns="count")
    host = COORDINATOR.default_host()  # counted on the hosts there are (none is made for it)
    oa_pair.add(t.json_reply(t.chat_completion_body("a")), t.sse_reply(t.openai_chat_sse(t.chat_chunks(["b"]))))
    adapters.complete(oa_pair.client, CHAT)
    stream = adapters.stream(oa_pair.client, CHAT)
    assert type(stream) is openai.Stream
    list(stream)
    assert recorded.events == []
    diagnostics = host.relay.diagnostics()
    assert diagnostics["unmanaged_calls"] == 2 and diagnostics["unmanaged_calls.no_turn"] == 2
    configure(outside_turns="record")
    oa_pair.add(t.json_reply(t.chat_completion_body("c")))
    adapters.complete(oa_pair.client, CHAT)
    assert _attempts(recorded) == ["success"]


def test_nothing_attached_means_nothing_recorded_only_counted(relay_host, oa_pair) -> None:
    recorder = Recorder()
    relay_host.relay.subscribers.register(recorder, name="r")  # listens, but retains no managed execution
    oa_pair.add(t.json_reply(t.chat_completion_body("a")))
    adapters.complete(oa_pair.client, CHAT)
    assert recorder.events == []
    assert relay_host.relay.diagnostics()["unmanaged_calls.no_turn"] == 1


def test_configure_refuses_an_unknown_choice_by_name() -> None:
    with pytest.raises(ValueError, match="outside_turns must be one of \\['record', 'count'\\], got 'never'"):
        configure(outside_turns="never")


@pytest.fixture
def oa_pair() -> Iterator[Any]:
    scripted = t.scripted_openai()
    yield scripted
    scripted.client.close()
