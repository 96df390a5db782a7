"""Logical calls at the edges: finished responses from a stream call, failing pops, streams left open
at the end of a turn, rejected auxiliary answers, and calls that run unmanaged."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from core_support import DictCodec, balanced, chunks, request, response

from relay_runtime import LLMRequest, Recorder, adapters, auxiliary, calls, configure, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.scopes import ScopeOrderError
from relay_runtime.threads import ContextExecutor


def logical_ends(recorder: Recorder) -> list[str]:
    return [e.output["outcome"] for e in recorder.ends(relay_kind=cv.LOGICAL_CALL)]


def balanced_calls(recorder: Recorder) -> bool:
    """Logical calls and attempts balanced (the turn began before the recorder was registered)."""
    return balanced([e for e in recorder.events if e.metadata.get(cv.KIND) not in (cv.CONVERSATION, cv.TURN)])


def attempt_ends(recorder: Recorder) -> list[Any]:
    return recorder.ends(relay_kind=cv.ATTEMPT)


@pytest.fixture()
def oa() -> Iterator[t.Scripted]:
    scripted = t.scripted_openai()
    yield scripted
    scripted.client.close()


# -- 6. stream_current and a provider that ignored stream=True ----------------------------------


def finished(source: Any) -> bool:
    return isinstance(source, dict) and "text" in source


def _pass_through(name: str, req: LLMRequest, call_next: Any) -> Any:
    return call_next(req)


def _lazy(name: str, req: LLMRequest, call_next: Any) -> Iterator[Any]:
    yield from call_next(req)


@pytest.mark.parametrize("intercept", [None, _pass_through, _lazy], ids=["none", "pass-through", "lazy"])
def test_finished_response_comes_back_as_it_is_and_settles_as_success(relay_turn, relay_events, intercept) -> None:
    relay, turn = relay_turn
    if intercept is not None:
        relay.intercepts.register_llm_stream_execution("wrap", 0, intercept)
    answer = response("whole")
    try:
        got = calls.stream_current(
            request(stream=True), lambda r: answer, name="p", codec=DictCodec(), completed_response_predicate=finished
        )
    finally:
        if intercept is not None:
            relay.intercepts.deregister_llm_stream_execution("wrap")
    assert got is answer
    (end,) = attempt_ends(relay_events)
    assert end.outcome == "success" and end.output is answer
    assert end.annotated_response.output_text == "whole"
    assert logical_ends(relay_events) == ["success"]
    assert turn.logical_llm_calls == {}
    assert balanced(relay_events.events)


def test_real_stream_with_the_predicate_and_a_lazy_intercept_loses_no_chunk(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_llm_stream_execution("wrap", 0, _lazy)
    try:
        stream = calls.stream_current(
            request(stream=True), lambda r: iter(chunks(3)), name="p", codec=DictCodec(),
            completed_response_predicate=finished,
        )  # fmt: skip
        assert list(stream) == chunks(3)
    finally:
        relay.intercepts.deregister_llm_stream_execution("wrap")
    (end,) = attempt_ends(relay_events)
    assert end.outcome == "success" and end.output["text"] == "t0t1t2"
    assert len(relay_events.marks()) == 3
    assert logical_ends(relay_events) == ["success"]


@pytest.mark.asyncio
async def test_async_finished_response_comes_back_as_it_is(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn

    async def lazy(name: str, req: LLMRequest, call_next: Any) -> AsyncIterator[Any]:
        async for chunk in await call_next(req):
            yield chunk

    relay.intercepts.register_llm_stream_execution("wrap", 0, lazy)
    answer = response("whole")

    async def factory(req: LLMRequest) -> Any:
        return answer

    try:
        got = await calls.stream_current_async(
            request(stream=True), factory, name="p", codec=DictCodec(), completed_response_predicate=finished
        )
    finally:
        relay.intercepts.deregister_llm_stream_execution("wrap")
    assert got is answer
    assert [e.outcome for e in attempt_ends(relay_events)] == ["success"]
    assert logical_ends(relay_events) == ["success"]


# -- 7. a logical call whose pop fails stays on its turn ----------------------------------------


def test_logical_call_whose_pop_fails_stays_on_the_turn_and_end_turn_closes_it(
    relay_turn, relay_events, monkeypatch
) -> None:
    relay, turn = relay_turn
    real_pop = relay.scope.pop
    refused: list[Any] = []

    def flaky_pop(handle: Any, **kwargs: Any) -> None:
        if (handle.metadata or {}).get(cv.KIND) == cv.LOGICAL_CALL and not refused:
            refused.append(handle)
            raise ScopeOrderError(f"cannot pop {handle!r}")
        real_pop(handle, **kwargs)

    monkeypatch.setattr(relay.scope, "pop", flaky_pop)
    assert calls.execute_current(request(), lambda r: response(), name="p") == response()
    assert refused and len(turn.logical_llm_calls) == 1
    assert logical_ends(relay_events) == []
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    assert logical_ends(relay_events) == ["success"]
    assert turn.logical_llm_calls == {}
    assert balanced_calls(relay_events)


def test_subscriber_interrupt_at_a_logical_end_leaves_nothing_open(relay_turn, relay_events) -> None:
    relay, turn = relay_turn
    fired: list[bool] = []

    def interrupt(event: Any) -> None:
        if event.kind == "scope_end" and event.metadata.get(cv.KIND) == cv.LOGICAL_CALL and not fired:
            fired.append(True)
            raise KeyboardInterrupt

    relay.subscribers.register(interrupt, name="interrupt")
    try:
        with pytest.raises(KeyboardInterrupt):
            calls.execute_current(request(), lambda r: response(), name="p")
    finally:
        relay.subscribers.deregister("interrupt")
    assert [e.outcome for e in attempt_ends(relay_events)] == ["success"]
    assert logical_ends(relay_events) == ["success"]
    assert turn.logical_llm_calls == {}
    assert relay.scope.current() is turn.scope


# -- 10. streams left open when their turn ends -------------------------------------------------


def test_end_turn_ends_open_streams_newest_first_before_their_calls_and_the_turn(relay_turn, relay_events) -> None:
    _relay, turn = relay_turn
    first = calls.stream_current(request(), lambda r: iter(chunks(3)), name="p", codec=DictCodec())
    second = calls.stream_current(request(), lambda r: iter(chunks(3)), name="p", codec=DictCodec())
    for stream in (first, second):
        for _chunk in stream:
            break  # the caller broke out but still holds the stream
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    ends = [e for e in relay_events.ends() if e.metadata.get(cv.KIND) != cv.CONVERSATION]
    kinds = [(e.metadata[cv.KIND], e.outcome) for e in ends]
    assert kinds == [
        (cv.ATTEMPT, "cancelled"),
        (cv.LOGICAL_CALL, "cancelled"),
        (cv.ATTEMPT, "cancelled"),
        (cv.LOGICAL_CALL, "cancelled"),
        (cv.TURN, "success"),
    ]
    second_attempt = relay_events.starts(relay_kind=cv.ATTEMPT)[1]
    assert ends[0].uuid == second_attempt.uuid  # newest first
    recorded = len(relay_events)
    assert list(first) == chunks(3)[1:]  # the provider's chunks, still
    assert len(relay_events) == recorded  # ... unrecorded
    assert balanced_calls(relay_events)


def test_sdk_stream_left_open_is_ended_by_the_turn(relay_turn, relay_events, oa) -> None:
    _relay, turn = relay_turn
    oa.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b", "c"]))))
    stream = adapters.stream(oa.client, {"model": "m", "messages": [], "stream": True})
    next(stream)
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    assert [e.outcome for e in attempt_ends(relay_events)] == ["cancelled"]
    assert logical_ends(relay_events) == ["cancelled"]
    recorded = len(relay_events)
    rest = [c.choices[0].delta.content or "" for c in stream]  # the role chunk was read before
    assert "".join(rest) == "abc"
    assert len(relay_events) == recorded


# -- 11. a rejected auxiliary answer is a failed attempt ----------------------------------------


def _empty_then_answer(oa: t.Scripted) -> None:
    oa.add(
        t.json_reply(t.chat_completion_body("", usage=t.chat_usage(7, 0))),
        t.json_reply(t.chat_completion_body("a title", usage=t.chat_usage(7, 2))),
    )


@auxiliary.auxiliary_call
def _title(task: str, client: Any) -> Any:
    auxiliary.set_route("openai", "m", "chat_completions")
    try:
        return auxiliary.validate_response(adapters.complete(client, {"model": "m", "messages": []}), task)
    except RuntimeError:
        return auxiliary.validate_response(adapters.complete(client, {"model": "m", "messages": []}), task)


def test_rejected_auxiliary_answer_ends_its_attempt_failed_with_the_reason(relay_turn, relay_events, oa) -> None:
    _empty_then_answer(oa)
    assert _title("title", oa.client).choices[0].message.content == "a title"
    first, second = attempt_ends(relay_events)
    assert (first.outcome, first.error_type) == ("failed", "response_rejected")
    assert "Auxiliary title: LLM returned invalid response (empty message content)" in first.error_message
    assert first.annotated_response.usage.input_tokens == 7  # the rejected answer's tokens stay in the record
    assert (second.outcome, second.error_type) == ("success", None)
    assert [a.metadata[cv.RETRY_COUNT] for a in (first, second)] == [0, 1]
    assert logical_ends(relay_events) == ["success"]


@pytest.mark.asyncio
async def test_rejected_async_auxiliary_answer_ends_its_attempt_failed(relay_turn, relay_events, oa) -> None:
    _empty_then_answer(oa)

    @auxiliary.auxiliary_call
    async def title(task: str) -> Any:
        auxiliary.set_route("openai", "m", "chat_completions")
        for _ in range(2):
            try:
                return auxiliary.validate_response(
                    await adapters.acomplete(oa.aclient, {"model": "m", "messages": []}), task
                )
            except RuntimeError:
                continue

    assert (await title("title")).choices[0].message.content == "a title"
    assert [(e.outcome, e.error_type) for e in attempt_ends(relay_events)] == [
        ("failed", "response_rejected"),
        ("success", None),
    ]


def test_unvalidated_answer_ends_as_success_when_the_next_attempt_starts(relay_turn, relay_events, oa) -> None:
    oa.add(t.json_reply(t.chat_completion_body("one")), t.json_reply(t.chat_completion_body("two")))
    seen: list[int] = []

    @auxiliary.auxiliary_call
    def twice(task: str) -> Any:
        adapters.complete(oa.client, {"model": "m", "messages": []})
        seen.append(len(attempt_ends(relay_events)))  # held: not ended yet
        return adapters.complete(oa.client, {"model": "m", "messages": []})

    twice("x")
    assert seen == [0]
    assert [e.outcome for e in attempt_ends(relay_events)] == ["success", "success"]
    assert logical_ends(relay_events) == ["success"]


def test_held_answer_is_ended_by_the_turn_if_nothing_else_ends_it(relay_turn, relay_events, oa) -> None:
    _relay, turn = relay_turn
    oa.add(t.json_reply(t.chat_completion_body("one")))

    @auxiliary.auxiliary_call
    def runs_past_its_turn(task: str) -> None:
        adapters.complete(oa.client, {"model": "m", "messages": []})
        session.SESSION_COORDINATOR.end_turn(turn, outcome="cancelled")

    runs_past_its_turn("x")
    assert [e.outcome for e in attempt_ends(relay_events)] == ["success"]
    assert logical_ends(relay_events) == ["cancelled"]
    assert balanced_calls(relay_events)


# -- 12. calls that run unmanaged are counted ----------------------------------------------------
# (with ``configure(outside_turns="count")`` where a consumer would otherwise record them outside
# turns: tests/test_session_outside_turns.py)


def _unmanaged(host: session.Host) -> dict[str, int]:
    return {k: v for k, v in host.relay.diagnostics().items() if k.startswith("unmanaged_calls")}


def test_call_without_a_turn_is_counted(relay_host, oa) -> None:
    oa.add(t.json_reply(t.chat_completion_body()))
    adapters.complete(oa.client, {"model": "m", "messages": []})
    assert _unmanaged(relay_host) == {"unmanaged_calls": 1, "unmanaged_calls.no_turn": 1}


def test_call_in_a_turn_no_consumer_retained_is_counted(relay_host, oa) -> None:
    coord = session.SESSION_COORDINATOR
    lease = coord.acquire_conversation(profile_key=relay_host.profile_key, session_id="s", platform="t")
    turn = coord.begin_turn(lease, turn_id="t1", task_id="k")
    oa.add(t.json_reply(t.chat_completion_body()))
    adapters.complete(oa.client, {"model": "m", "messages": []})
    coord.end_turn(turn, outcome="success")
    coord.release_conversation(lease)
    assert _unmanaged(relay_host) == {"unmanaged_calls": 1, "unmanaged_calls.no_consumer": 1}


def test_second_concurrent_turn_is_counted_and_warned_once_per_conversation(relay_turn, oa, caplog) -> None:
    _relay, turn = relay_turn
    configure(outside_turns="count")
    coord = session.SESSION_COORDINATOR
    caplog.set_level(logging.WARNING, logger="relay_runtime.session")
    for n in range(2):
        second = coord.begin_turn(turn.lease, turn_id=f"t-{n}", task_id="k")
        assert not second.managed
        oa.add(t.json_reply(t.chat_completion_body()), t.json_reply(t.chat_completion_body()))
        adapters.complete(oa.client, {"model": "m", "messages": []})
        adapters.complete(oa.client, {"model": "m", "messages": []})
        coord.end_turn(second, outcome="success")
    host = turn.lease.host
    assert _unmanaged(host) == {"unmanaged_calls": 4, "unmanaged_calls.busy_conversation": 4}
    warnings = [r for r in caplog.records if "unmanaged" in r.getMessage()]
    assert len(warnings) == 1 and "session-1" in warnings[0].getMessage()


def test_plain_thread_not_handed_the_turn_is_counted(relay_turn, relay_events, oa) -> None:
    _relay, turn = relay_turn
    configure(outside_turns="count")
    oa.add(t.json_reply(t.chat_completion_body()))
    thread = threading.Thread(target=lambda: adapters.complete(oa.client, {"model": "m", "messages": []}))
    thread.start()
    thread.join(10)
    assert attempt_ends(relay_events) == []
    assert _unmanaged(turn.lease.host) == {"unmanaged_calls": 1, "unmanaged_calls.not_handed_turn": 1}


@pytest.mark.asyncio
async def test_unmanaged_async_calls_and_streams_are_counted(relay_host) -> None:
    async def provider(req: LLMRequest) -> Any:
        return response()

    async def open_stream(req: LLMRequest) -> AsyncIterator[Any]:
        yield {"text": "a"}

    await calls.execute_current_async(request(), provider, name="p")
    stream = await calls.stream_current_async(request(), open_stream, name="p")
    assert [c async for c in stream] == [{"text": "a"}]
    calls.stream_current(request(), lambda r: iter(()), name="p")
    await asyncio.sleep(0)
    assert _unmanaged(relay_host) == {"unmanaged_calls": 3, "unmanaged_calls.no_turn": 3}


def test_continuation_of_a_held_attempt_is_dead_once_its_call_returned(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    kept: list[Any] = []

    def keep_next(name: str, req: LLMRequest, call_next: Any) -> Any:
        kept.append((call_next, req))
        return call_next(req)

    oa.add(t.json_reply(t.chat_completion_body("one")))
    relay.intercepts.register_llm_execution("keep", 0, keep_next)
    outcome: list[str] = []

    @auxiliary.auxiliary_call
    def held(task: str) -> Any:
        response = adapters.complete(oa.client, {"model": "m", "messages": []})
        assert attempt_ends(relay_events) == []  # held open for validation ...
        with pytest.raises(RuntimeError, match="execution continuation is no longer active"):
            kept[0][0](kept[0][1])  # ... but its call has settled
        outcome.append("refused")
        return auxiliary.validate_response(response, task)

    try:
        held("x")
    finally:
        relay.intercepts.deregister_llm_execution("keep")
    assert outcome == ["refused"] and len(oa.script.requests) == 1
    assert [e.outcome for e in attempt_ends(relay_events)] == ["success"]


@pytest.mark.asyncio
async def test_end_turn_ends_an_async_stream_left_open(relay_turn, relay_events) -> None:
    _relay, turn = relay_turn

    async def provider(req: LLMRequest) -> AsyncIterator[Any]:
        for chunk in chunks(3):
            yield chunk

    stream = await calls.stream_current_async(request(), provider, name="p", codec=DictCodec())
    async for _chunk in stream:
        break
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    assert [e.outcome for e in attempt_ends(relay_events)] == ["cancelled"]
    assert logical_ends(relay_events) == ["cancelled"]
    recorded = len(relay_events)
    assert [c async for c in stream] == chunks(3)[1:]
    assert len(relay_events) == recorded
    assert balanced_calls(relay_events)


@pytest.mark.parametrize("kind", [cv.TURN, cv.LOGICAL_CALL])
def test_subscriber_interrupt_on_a_turn_or_call_start_leaves_nothing_open(relay_host, kind) -> None:
    coord = session.SESSION_COORDINATOR
    relay = relay_host.relay
    recorder = Recorder()
    fired: list[bool] = []

    def interrupt(event: Any) -> None:
        if event.kind == "scope_start" and event.metadata.get(cv.KIND) == kind and not fired:
            fired.append(True)
            raise KeyboardInterrupt

    relay.subscribers.register(interrupt, name="interrupt")
    relay.subscribers.register(recorder, name="recorder")
    relay_host.retain_managed_execution("test")
    lease = coord.acquire_conversation(profile_key=relay_host.profile_key, session_id="s", platform="t")
    first = None
    with pytest.raises(KeyboardInterrupt):
        first = coord.begin_turn(lease, turn_id="t1", task_id="k")
        calls.execute_current(request(), lambda r: response(), name="p")
    assert fired
    if first is not None:  # the call's start was interrupted: its turn is intact and ends as usual
        assert relay.scope.current() is first.scope and first.logical_llm_calls == {}
        coord.end_turn(first, outcome="cancelled")
    assert relay.scope.current() is None
    turn = coord.begin_turn(lease, turn_id="t2", task_id="k")  # the conversation is not left busy
    assert turn.managed
    assert calls.execute_current(request(), lambda r: response(), name="p") == response()
    coord.end_turn(turn, outcome="success")
    coord.release_conversation(lease)
    assert relay.scope.current() is None
    assert balanced(recorder.events)


def test_validated_call_whose_pop_fails_still_returns_and_the_turn_closes_it(relay_turn, relay_events, oa, monkeypatch):
    relay, turn = relay_turn
    real_pop = relay.scope.pop

    def refusing_pop(handle: Any, **kwargs: Any) -> None:
        if (handle.metadata or {}).get(cv.KIND) == cv.LOGICAL_CALL and not turn.ended:
            raise ScopeOrderError(f"cannot pop {handle!r}")
        real_pop(handle, **kwargs)

    monkeypatch.setattr(relay.scope, "pop", refusing_pop)
    oa.add(t.json_reply(t.chat_completion_body("fine")))
    assert _title("title", oa.client).choices[0].message.content == "fine"
    assert len(turn.logical_llm_calls) == 1 and logical_ends(relay_events) == []
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    assert logical_ends(relay_events) == ["success"]
    assert balanced_calls(relay_events)


class _HeldReply(t.Script):
    """Replies only once let go: the request is in flight at the provider until then. ``on_loop``:
    for an async client, the handler waits without blocking the event loop."""

    def __init__(self, *replies: t.Reply, on_loop: bool = False) -> None:
        super().__init__(replies)
        self.arrived = threading.Event()
        self.let_go = threading.Event()
        self.on_loop = on_loop

    def handler(self, request: Any) -> Any:
        self.arrived.set()
        if self.on_loop:
            return self._later(request)
        self.let_go.wait(5)
        return super().handler(request)

    async def _later(self, request: Any) -> Any:
        while not self.let_go.is_set():
            await asyncio.sleep(0.01)
        return t.Script.handler(self, request)


def _ended_by_the_turn(relay_events: Recorder, outcome: str) -> bool:
    """The in-flight attempt ended cancelled, then its call, then the turn with ``outcome``."""
    ends = [e for e in relay_events.ends() if e.metadata.get(cv.KIND) != cv.CONVERSATION]
    kinds = [(e.metadata[cv.KIND], e.outcome) for e in ends]
    return kinds == [(cv.ATTEMPT, "cancelled"), (cv.LOGICAL_CALL, "cancelled"), (cv.TURN, outcome)]


def test_end_turn_ends_a_call_in_flight_on_another_thread_before_the_turn(relay_turn, relay_events) -> None:
    # The provider answers after the turn has ended: the attempt must not end after its call and
    # its turn (consumers have closed the run by then), and is not a success the turn never saw.
    _relay, turn = relay_turn
    script = _HeldReply(t.json_reply(t.chat_completion_body("late answer")))
    client = t.openai_client(script, max_retries=0)
    with ContextExecutor(1) as pool:
        answer = pool.submit(adapters.complete, client, {"model": "m", "messages": []})
        assert script.arrived.wait(5)
        session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
        assert _ended_by_the_turn(relay_events, "success")
        recorded = len(relay_events)
        script.let_go.set()
        assert answer.result(5).choices[0].message.content == "late answer"  # the caller still gets it
    assert len(relay_events) == recorded  # ... unrecorded
    assert balanced_calls(relay_events)


@pytest.mark.asyncio
async def test_end_turn_ends_a_call_in_flight_in_another_task_before_the_turn(relay_turn, relay_events) -> None:
    _relay, turn = relay_turn
    script = _HeldReply(t.json_reply(t.chat_completion_body("late answer")), on_loop=True)
    client = t.async_openai_client(script, max_retries=0)
    task = asyncio.create_task(adapters.acomplete(client, {"model": "m", "messages": []}))
    assert await asyncio.to_thread(script.arrived.wait, 5)
    session.SESSION_COORDINATOR.end_turn(turn, outcome="failed")
    assert _ended_by_the_turn(relay_events, "failed")
    recorded = len(relay_events)
    script.let_go.set()
    assert (await task).choices[0].message.content == "late answer"
    assert len(relay_events) == recorded


def _side_by_side_verdicts(events: Recorder) -> list[tuple[str, str | None, str | None]]:
    return sorted((e.outcome, e.error_type, e.annotated_response.output_text) for e in attempt_ends(events))


def test_answers_validated_side_by_side_in_threads_each_end_with_their_own_verdict(
    relay_turn, relay_events, oa
) -> None:
    oa.add(t.json_reply(t.chat_completion_body("")), t.json_reply(t.chat_completion_body("good")))
    both_answered = threading.Barrier(2, timeout=5)

    @auxiliary.auxiliary_call
    def hedge(task: str) -> Any:
        auxiliary.set_route("openai", "m", "chat_completions")

        def one() -> Any:
            answer = adapters.complete(oa.client, {"model": "m", "messages": []})
            both_answered.wait()  # the other attempt has started (and holds its answer) by now
            try:
                return auxiliary.validate_response(answer, task)
            except auxiliary.ResponseRejected:
                return None

        with ContextExecutor(2) as pool:
            return [f.result() for f in [pool.submit(one), pool.submit(one)]]

    hedge("hedge")
    assert _side_by_side_verdicts(relay_events) == [("failed", "response_rejected", ""), ("success", None, "good")]
    assert logical_ends(relay_events) == ["success"]


@pytest.mark.asyncio
async def test_answers_validated_side_by_side_in_tasks_each_end_with_their_own_verdict(
    relay_turn, relay_events, oa
) -> None:
    oa.add(t.json_reply(t.chat_completion_body("")), t.json_reply(t.chat_completion_body("good")))
    both_answered = asyncio.Barrier(2)

    @auxiliary.auxiliary_call
    async def hedge(task: str) -> Any:
        auxiliary.set_route("openai", "m", "chat_completions")

        async def one() -> Any:
            answer = await adapters.acomplete(oa.aclient, {"model": "m", "messages": []})
            await both_answered.wait()
            try:
                return auxiliary.validate_response(answer, task)
            except auxiliary.ResponseRejected:
                return None

        return await asyncio.gather(one(), one())

    await hedge("hedge")
    assert _side_by_side_verdicts(relay_events) == [("failed", "response_rejected", ""), ("success", None, "good")]
    assert logical_ends(relay_events) == ["success"]


def test_a_responses_answer_that_only_calls_a_tool_is_accepted(relay_turn, relay_events, oa) -> None:
    # As a chat tool_calls message and an anthropic tool_use block are: the model answered with a call.
    tool_only = t.responses_body()
    tool_only["output"] = [
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": "{}",
            "status": "completed",
        }
    ]
    reasoning_only = t.responses_body()
    reasoning_only["output"] = [{"type": "reasoning", "id": "rs_1", "summary": []}]
    oa.add(t.json_reply(reasoning_only), t.json_reply(tool_only))

    @auxiliary.auxiliary_call
    def route_tool(task: str) -> Any:
        auxiliary.set_route("openai", "m", "responses")
        for _ in range(2):
            try:
                return auxiliary.validate_response(adapters.complete(oa.client, {"model": "m", "input": "hi"}), task)
            except auxiliary.ResponseRejected:
                continue
        return None

    answer = route_tool("tools")
    assert answer is not None and answer.output[0].name == "lookup"
    assert [(e.outcome, e.error_type) for e in attempt_ends(relay_events)] == [
        ("failed", "response_rejected"),
        ("success", None),
    ]
    assert logical_ends(relay_events) == ["success"]


@pytest.mark.parametrize("method", ["begin_turn", "end_turn", "release_conversation"])
def test_coordinator_calls_given_none_name_what_they_take(relay_turn, relay_events, method) -> None:
    coordinator = session.SESSION_COORDINATOR
    call = {
        "begin_turn": lambda: coordinator.begin_turn(None, turn_id="t2", task_id="t2"),  # type: ignore[arg-type]
        "end_turn": lambda: coordinator.end_turn(None, outcome="success"),  # type: ignore[arg-type]
        "release_conversation": lambda: coordinator.release_conversation(None),  # type: ignore[arg-type]
    }[method]
    seen = len(relay_events.events)
    with pytest.raises(TypeError, match=rf"{method}\(\) takes a \w+ as \w+, got NoneType"):
        call()
    assert len(relay_events.events) == seen  # nothing recorded for a refused call
    assert not relay_turn[1].ended


@pytest.mark.asyncio
async def test_end_turn_ends_an_attempt_made_beside_another_before_its_call(relay_turn, relay_events) -> None:
    # An execution intercept fanning out: two provider calls of one logical call in flight when the
    # turn ends. Both attempts end (cancelled) before their call and the turn, and the late answers
    # record nothing after the turn's end.
    relay, turn = relay_turn
    both_in_flight = asyncio.Event()
    let_go = asyncio.Event()
    arrived: list[int] = []

    async def provider(req: LLMRequest) -> dict[str, Any]:
        arrived.append(1)
        if len(arrived) == 2:
            both_in_flight.set()
        await let_go.wait()
        return response("late")

    async def fan_out(name: str, req: LLMRequest, next_call: Any) -> Any:
        first, _second = await asyncio.gather(next_call(req), next_call(req))
        return first

    relay.intercepts.register_llm_execution("fan", 0, fan_out)
    task = asyncio.create_task(calls.execute_current_async(request(), provider, name="p", codec=DictCodec()))
    await asyncio.wait_for(both_in_flight.wait(), 5)
    session.SESSION_COORDINATOR.end_turn(turn, outcome="failed")
    ends = [e for e in relay_events.ends() if e.metadata.get(cv.KIND) != cv.CONVERSATION]
    kinds = [(e.metadata[cv.KIND], e.outcome) for e in ends]
    assert kinds == [(cv.ATTEMPT, "cancelled"), (cv.ATTEMPT, "cancelled"), (cv.LOGICAL_CALL, "cancelled"),
                     (cv.TURN, "failed")]  # fmt: skip
    recorded = len(relay_events)
    let_go.set()
    assert (await task)["text"] == "late"
    assert len(relay_events) == recorded
    assert balanced_calls(relay_events)


def test_an_interrupt_ending_the_turn_a_released_lease_left_open_still_ends_its_conversation(relay_host) -> None:
    """The last release ends a turn its caller crashed out of; an interrupt there (Ctrl-C while a subscriber
    takes the turn's end) skipped the conversation's end, and the conversation, off the coordinator's books,
    could never be ended."""
    coord = session.SESSION_COORDINATOR
    relay = relay_host.relay
    recorder = Recorder()
    fired: list[bool] = []

    def interrupt(event: Any) -> None:
        if event.kind == "scope_end" and event.metadata.get(cv.KIND) == cv.TURN and not fired:
            fired.append(True)
            raise KeyboardInterrupt

    relay.subscribers.register(interrupt, name="interrupt")
    relay.subscribers.register(recorder, name="recorder")
    lease = coord.acquire_conversation(profile_key=relay_host.profile_key, session_id="s", platform="t")
    turn = coord.begin_turn(lease, turn_id="t1", task_id="k")
    with pytest.raises(KeyboardInterrupt):
        coord.release_conversation(lease)  # the turn never ended: its caller crashed out of it
    assert fired and turn.ended
    assert [e.output["outcome"] for e in recorder.ends(relay_kind=cv.TURN)] == ["cancelled"]
    assert len(recorder.ends(relay_kind=cv.CONVERSATION)) == 1
    assert balanced(recorder.events)
    assert relay.scope.current() is None
