"""Sessions, logical calls and the auxiliary decorator on every exit path, with the real core."""

from __future__ import annotations

import asyncio
import gc
import re
import threading

import pytest

from relay_runtime import LLMRequest, Recorder, auxiliary, calls, configure, logical_calls, propagate_to_thread, session
from relay_runtime import conventions as cv

REQ = LLMRequest({}, {"model": "m", "messages": []})


def _kind(recorder: Recorder, kind: str, relay_kind: str):
    return recorder.select(kind, relay_kind=relay_kind)


def _logical_ends(recorder: Recorder):
    return [e.output["outcome"] for e in _kind(recorder, "scope_end", cv.LOGICAL_CALL)]


def test_conversation_is_shared_by_leases_and_ends_once_on_last_release(relay_home, relay_events):
    coord = session.SESSION_COORDINATOR
    key = session.current_profile_key()
    first = coord.acquire_conversation(profile_key=key, session_id="s", platform="cli")
    second = coord.acquire_conversation(profile_key=key, session_id="s", platform="cli")
    assert first.conversation is second.conversation
    coord.release_conversation(first)
    coord.release_conversation(first)  # idempotent
    assert _kind(relay_events, "scope_end", cv.CONVERSATION) == []
    coord.release_conversation(second)
    ends = _kind(relay_events, "scope_end", cv.CONVERSATION)
    assert len(ends) == 1
    assert ends[0].metadata[cv.SESSION_ID] == "s"
    coord.release_conversation(second)
    assert len(_kind(relay_events, "scope_end", cv.CONVERSATION)) == 1


def test_bad_session_input_is_refused_with_a_clear_error(relay_home):
    coord = session.SESSION_COORDINATOR
    key = session.current_profile_key()
    with pytest.raises(ValueError, match="session_id"):
        coord.acquire_conversation(profile_key=key, session_id="", platform="cli")
    with pytest.raises(ValueError, match="profile_key"):
        coord.acquire_conversation(profile_key="", session_id="s", platform="cli")
    lease = coord.acquire_conversation(profile_key=key, session_id="s", platform="cli")
    turn = coord.begin_turn(lease, turn_id="t", task_id="k")
    with pytest.raises(ValueError, match="outcome must be one of"):
        coord.end_turn(turn, outcome="great")
    coord.end_turn(turn, outcome="success")
    coord.release_conversation(lease)
    with pytest.raises(ValueError, match="released"):
        coord.begin_turn(lease, turn_id="t2", task_id="k")


def test_profile_key_follows_relay_home(relay_home):
    assert session.current_profile_key() == str(relay_home.resolve())


def test_calls_without_a_consumer_are_unmanaged(relay_home, relay_events):
    coord = session.SESSION_COORDINATOR
    lease = coord.acquire_conversation(profile_key=session.current_profile_key(), session_id="s", platform="cli")
    turn = coord.begin_turn(lease, turn_id="t", task_id="k")
    try:
        assert calls.execute_current(REQ, lambda r: "raw", name="openai") == "raw"
        assert relay_events.select(relay_kind=cv.ATTEMPT) == []
        assert turn.logical_llm_calls == {}
    finally:
        coord.end_turn(turn, outcome="success")
        coord.release_conversation(lease)


def test_second_concurrent_turn_runs_unmanaged(relay_turn, relay_events):
    """With ``outside_turns="count"``; recorded outside turns by default (test_session_outside_turns.py)."""
    _relay, turn = relay_turn
    configure(outside_turns="count")
    coord = session.SESSION_COORDINATOR
    other = coord.begin_turn(turn.lease, turn_id="t2", task_id="k2")
    assert not other.managed
    assert session.active_turn() is other
    calls.execute_current(REQ, lambda r: "x", name="openai")
    assert relay_events.select(relay_kind=cv.ATTEMPT) == []
    coord.end_turn(other, outcome="success")
    assert session.active_turn() is turn
    calls.execute_current(REQ, lambda r: "x", name="openai")
    assert len(relay_events.starts(relay_kind=cv.ATTEMPT)) == 1


def test_success_nests_attempt_in_logical_call_in_turn(relay_turn, relay_events):
    _relay, turn = relay_turn
    assert calls.execute_current(REQ, lambda r: {"model": "served"}, name="openai", model_name="m") == {
        "model": "served"
    }
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    (logical,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert attempt.parent_uuid == logical.uuid
    assert logical.parent_uuid == turn.scope.uuid
    assert logical.output == {"outcome": "success", "model": "served", "provider": "openai"}
    assert attempt.metadata[cv.RETRY_COUNT] == 0
    assert turn.logical_llm_calls == {}


def test_ended_calls_in_a_turn_are_freed_without_the_garbage_collector(relay_turn, relay_events):
    # An attempt listed on its logical call while it runs, and holding the call through its finish
    # hook, must leave that list when it ends: a cycle per call would cost every call a collection.
    _relay, turn = relay_turn
    seen: list[object] = []

    def provider(_r):
        seen.extend(turn.logical_llm_calls.values())
        return {"model": "served"}

    gc.collect()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        for _ in range(3):
            calls.execute_current(REQ, provider, name="openai")
        retry_meta = {cv.API_REQUEST_ID: "r-1"}
        for _ in range(2):
            calls.execute_current(REQ, provider, name="openai", metadata=retry_meta, defer_logical_completion=True)
        calls.complete_logical_call("r-1", outcome="success")
        seen.clear()
        gc.collect()
        # Only the relay's own objects: a server thread another test left may free its own cycles meanwhile.
        leaked = [type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("relay_runtime")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 4
    assert leaked == []


def test_provider_error_propagates_unchanged_and_fails_the_logical_call(relay_turn, relay_events):
    boom = ConnectionError("provider down")

    def fail(_r):
        raise boom

    with pytest.raises(ConnectionError) as caught:
        calls.execute_current(REQ, fail, name="openai")
    assert caught.value is boom
    assert caught.value.__traceback__ is not None
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert attempt.outcome == "failed"
    assert attempt.error_type == "ConnectionError"
    assert _logical_ends(relay_events) == ["failed"]


def test_retry_then_fallback_share_one_logical_call(relay_turn, relay_events):
    _relay, turn = relay_turn

    @auxiliary.auxiliary_call
    def summarise(task):
        for provider, result in (("openai", None), ("openai", RuntimeError("503")), ("anthropic", "ok")):

            def callback(_r, result=result):
                if isinstance(result, Exception):
                    raise result
                return {"choices": [{"message": {"content": result}}]} if result else {"choices": []}

            meta = auxiliary.next_attempt_metadata()
            try:
                response = calls.execute_current(
                    REQ, callback, name=provider, metadata=meta, defer_logical_completion=True
                )
                return auxiliary.validate_response(response, task)
            except RuntimeError:
                continue
        raise AssertionError("unreachable")

    assert summarise("compression")["choices"][0]["message"]["content"] == "ok"
    attempts = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [a.metadata[cv.RETRY_COUNT] for a in attempts] == [0, 1, 2]
    assert len({a.metadata[cv.API_REQUEST_ID] for a in attempts}) == 1
    assert [a.provider for a in attempts] == ["openai", "openai", "anthropic"]
    # The first answer was rejected by the validator: its attempt says so.
    assert [a.outcome for a in attempts] == ["failed", "failed", "success"]
    assert [a.error_type for a in attempts] == ["response_rejected", "RuntimeError", None]
    assert len({a.parent_uuid for a in attempts}) == 1
    assert _logical_ends(relay_events) == ["success"]
    assert relay_events.ends(relay_kind=cv.LOGICAL_CALL)[0].output["provider"] == "anthropic"
    assert turn.logical_llm_calls == {}


def test_intercept_error_fails_closed_and_closes_logical_call(relay_turn, relay_events):
    relay, _turn = relay_turn

    def broken(_name, _request, _annotated):
        raise PermissionError("policy")

    relay.intercepts.register_llm_request("broken", 0, False, broken)
    provider_calls = []
    with pytest.raises(PermissionError, match="policy"):
        calls.execute_current(REQ, lambda r: provider_calls.append(r), name="openai")
    assert provider_calls == []
    assert [a.outcome for a in relay_events.ends(relay_kind=cv.ATTEMPT)] == ["failed"]
    assert _logical_ends(relay_events) == ["failed"]


def test_end_turn_closes_open_logical_calls_newest_first_with_turn_outcome(relay_turn, relay_events):
    _relay, turn = relay_turn
    for rid in ("first", "second"):
        calls.execute_current(
            REQ, lambda r: "x", name="openai", metadata={cv.API_REQUEST_ID: rid}, defer_logical_completion=True
        )
    assert list(turn.logical_llm_calls) == ["first", "second"]
    session.SESSION_COORDINATOR.end_turn(turn, outcome="failed")
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")  # idempotent
    ends = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert [e.metadata[cv.API_REQUEST_ID] for e in ends] == ["second", "first"]
    assert [e.output["outcome"] for e in ends] == ["failed", "failed"]
    (turn_end,) = relay_events.ends(relay_kind=cv.TURN)
    assert turn_end.output == {"outcome": "failed"}
    assert session.active_turn() is None


def test_recorded_outcome_is_never_overwritten(relay_turn, relay_events):
    calls.execute_current(
        REQ, lambda r: "x", name="openai", metadata={cv.API_REQUEST_ID: "rid"}, defer_logical_completion=True
    )
    assert calls.complete_logical_call("rid", outcome="failed") is True
    assert calls.complete_logical_call("rid", outcome="success") is False
    assert _logical_ends(relay_events) == ["failed"]


@pytest.mark.asyncio
async def test_cancelled_auxiliary_call_is_recorded_as_cancelled(relay_turn, relay_events):
    started = asyncio.Event()

    async def hang(_r):
        started.set()
        await asyncio.sleep(30)

    @auxiliary.auxiliary_call
    async def run(task):
        return await calls.execute_current_async(
            REQ, hang, name="openai", metadata=auxiliary.next_attempt_metadata(), defer_logical_completion=True
        )

    task = asyncio.ensure_future(run("title"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [a.outcome for a in relay_events.ends(relay_kind=cv.ATTEMPT)] == ["cancelled"]
    assert _logical_ends(relay_events) == ["cancelled"]


def test_keyboard_interrupt_is_cancelled_and_reraised(relay_turn, relay_events):
    @auxiliary.auxiliary_call
    def run(task):
        def interrupt(_r):
            raise KeyboardInterrupt

        return calls.execute_current(
            REQ, interrupt, name="openai", metadata=auxiliary.next_attempt_metadata(), defer_logical_completion=True
        )

    with pytest.raises(KeyboardInterrupt):
        run("title")
    assert _logical_ends(relay_events) == ["cancelled"]


def _chunks(n: int):
    yield from range(n)


@pytest.mark.parametrize("ending", ["exhausted", "break", "close", "gc", "error"])
def test_stream_endings_settle_the_logical_call_once(relay_turn, relay_events, ending):
    _relay, turn = relay_turn
    boom = ValueError("mid-stream")

    def failing():
        yield 1
        raise boom

    stream = calls.stream_current(REQ, lambda r: failing() if ending == "error" else _chunks(3), name="openai")
    if ending == "exhausted":
        assert list(stream) == [0, 1, 2]
    elif ending == "break":
        for _chunk in stream:
            break
        del stream
        gc.collect()
    elif ending == "close":
        next(stream)
        stream.close()
        stream.close()
    elif ending == "gc":
        next(stream)
        del stream
        gc.collect()
    else:
        next(stream)
        with pytest.raises(ValueError) as caught:
            next(stream)
        assert caught.value is boom
    expected = {"exhausted": "success", "error": "failed"}.get(ending, "cancelled")
    assert [a.outcome for a in relay_events.ends(relay_kind=cv.ATTEMPT)] == [expected]
    assert _logical_ends(relay_events) == [expected]
    assert turn.logical_llm_calls == {}


def test_empty_stream_is_not_mistaken_for_a_finished_response(relay_turn, relay_events):
    stream = calls.stream_current(
        REQ, lambda r: _chunks(0), name="openai", completed_response_predicate=lambda source: isinstance(source, dict)
    )
    assert list(stream) == []
    assert _logical_ends(relay_events) == ["success"]


def test_thread_handed_the_turn_makes_managed_calls_inside_it(relay_turn, relay_events):
    _relay, turn = relay_turn
    seen = {}

    def worker():
        seen["turn"] = session.active_turn()
        seen["result"] = calls.execute_current(REQ, lambda r: "from-thread", name="openai")

    thread = threading.Thread(target=propagate_to_thread(worker))
    thread.start()
    thread.join(5)
    assert seen == {"turn": turn, "result": "from-thread"}
    (logical,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert logical.parent_uuid == turn.scope.uuid

    bare = threading.Thread(target=lambda: seen.update(bare=session.active_turn()))
    bare.start()
    bare.join(5)
    assert seen["bare"] is None


def test_release_with_an_abandoned_turn_ends_it_cancelled(relay_home, relay_events):
    coord = session.SESSION_COORDINATOR
    lease = coord.acquire_conversation(profile_key=session.current_profile_key(), session_id="s", platform="cli")
    lease.host.retain_managed_execution("test")
    turn = coord.begin_turn(lease, turn_id="t", task_id="k")
    calls.execute_current(REQ, lambda r: "x", name="openai", defer_logical_completion=True)
    coord.release_conversation(lease)
    assert turn.ended and turn.outcome == "cancelled"
    assert _logical_ends(relay_events) == ["cancelled"]
    assert [e.output for e in relay_events.ends(relay_kind=cv.TURN)] == [{"outcome": "cancelled"}]


def test_fresh_logical_calls_from_many_threads_each_open_and_close_once(relay_turn, relay_events):
    # A call with no api_request_id of its own is opened outside the turn's lock: each must
    # still be one logical call with one attempt, its start before its end, none left open.
    _relay, turn = relay_turn
    threads_n, calls_n = 8, 50
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads_n, timeout=10)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for j in range(calls_n):
                assert calls.execute_current(REQ, lambda r, j=j: {"model": f"m{i}-{j}"}, name="openai") == {
                    "model": f"m{i}-{j}"
                }
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=propagate_to_thread(worker), args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert not any(thread.is_alive() for thread in threads)
    starts = relay_events.starts(relay_kind=cv.LOGICAL_CALL)
    ends = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert len(starts) == len(ends) == threads_n * calls_n
    assert {e.uuid for e in starts} == {e.uuid for e in ends}
    ids = {e.metadata[cv.API_REQUEST_ID] for e in ends}
    assert len(ids) == threads_n * calls_n
    attempts = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert {a.metadata[cv.API_REQUEST_ID] for a in attempts} == ids
    assert {a.metadata[cv.RETRY_COUNT] for a in attempts} == {0}
    assert {e.output["outcome"] for e in ends} == {"success"}
    assert turn.logical_llm_calls == {}


def test_end_turn_closes_a_fresh_call_still_in_flight_once(relay_turn, relay_events):
    # The turn ends (from another thread) while a call it never saw being opened runs: the
    # call was published whole, so the turn closes it, and the attempt's end cannot close it again.
    _relay, turn = relay_turn
    entered, release = threading.Event(), threading.Event()

    def slow(_r):
        entered.set()
        assert release.wait(10)
        return {"model": "late"}

    result: dict[str, object] = {}
    worker = threading.Thread(
        target=propagate_to_thread(lambda: result.update(r=calls.execute_current(REQ, slow, name="openai")))
    )
    worker.start()
    assert entered.wait(10)
    (call,) = turn.logical_llm_calls.values()
    assert (call.attempts, call.in_flight) == (1, 1)
    session.SESSION_COORDINATOR.end_turn(turn, outcome="cancelled")
    release.set()
    worker.join(10)
    assert not worker.is_alive()
    assert result == {"r": {"model": "late"}}
    assert _logical_ends(relay_events) == ["cancelled"]
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    # Ended by the turn, before its call and the turn: the late answer is returned, not recorded.
    assert attempt.outcome == "cancelled"
    kinds = [e.metadata.get(cv.KIND) for e in relay_events.ends()]
    assert kinds.index(cv.ATTEMPT) < kinds.index(cv.LOGICAL_CALL) < kinds.index(cv.TURN)


def test_an_unresolvable_relay_home_is_refused_naming_it(relay_home, tmp_path, monkeypatch):
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "back")
    (tmp_path / "back").symlink_to(loop)
    for bad in (str(loop / "home"), "~no-such-user-relay-test/home"):
        monkeypatch.setenv(session.HOME_ENV, bad)
        refused = rf"RELAY_HOME='{re.escape(bad)}' cannot be resolved to a profile directory"
        with pytest.raises(ValueError, match=refused):
            session.current_profile_key()


@pytest.mark.parametrize("ended_by", ["giver", "worker"])
def test_a_thread_handed_a_turn_that_ended_records_nothing_in_the_turns_it_was_begun_inside(
    relay_turn, relay_events, ended_by
):
    _relay, parent = relay_turn
    coord = session.SESSION_COORDINATOR
    lease = coord.acquire_conversation(profile_key=parent.lease.profile_key, session_id="sub", platform="p")
    sub = coord.begin_turn(lease, turn_id="sub-turn", task_id="k")  # begun inside the parent's turn
    if ended_by == "giver":
        coord.end_turn(sub, outcome="success")
    seen: list[session.Turn | None] = []

    def worker() -> None:
        with session.use_turn(sub):
            if ended_by == "worker":
                coord.end_turn(sub, outcome="success")
            seen.append(session.active_turn())
            calls.execute_current(REQ, lambda r: "late", name="openai")

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [None]  # not the parent's turn, which this thread was never handed
    # Recorded outside every turn (the default, ``outside_turns="record"``): a root logical call.
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert attempt.parent_uuid == call.uuid and call.parent_uuid is None
    assert session.active_turn() is parent  # where the sub-turn was begun, the parent is active again
    coord.release_conversation(lease)


def test_a_streamed_attempt_of_a_held_call_counts_its_stream_and_leaves_the_call_to_its_opener(
    relay_turn, relay_events
):
    relay, turn = relay_turn
    call = calls.open_call_in(turn, None)
    attempt = calls.attempt_of(turn, call, REQ, "openai", "m", None, streaming=True, metadata={"server.address": "h"})
    assert attempt is not None and (call.open_streams, call.in_flight, call.attempts) == (1, 1, 1)
    assert list(relay.llm.open_stream(attempt, lambda r: _chunks(2))) == [0, 1]
    assert (call.open_streams, call.in_flight, call.last_outcome) == (0, 0, "success")
    (start,) = relay_events.starts(relay_kind=cv.ATTEMPT)
    # The metadata given lead the attempt's own, after its kind, as stream_current's do.
    assert list(start.metadata) == [cv.KIND, "server.address", cv.API_REQUEST_ID, cv.CALL_ROLE, cv.RETRY_COUNT]
    assert _logical_ends(relay_events) == []  # open until its opener closes it
    assert logical_calls.close_logical_call(turn, call, "success")
    assert _logical_ends(relay_events) == ["success"] and turn.logical_llm_calls == {}


def _refused_before_any_attempt() -> None:
    """Calls refused before an attempt exists: a nameless one and one whose request is no ``LLMRequest``."""
    with pytest.raises(ValueError, match="non-empty string"):
        calls.execute_current(REQ, lambda r: "answer", name="")
    with pytest.raises(TypeError, match="needs an LLMRequest"):
        calls.stream_current({"model": "m"}, lambda r: iter(()), name="openai")  # type: ignore[arg-type]


def test_a_call_refused_before_its_attempt_ends_its_logical_call_failed(relay_turn, relay_events):
    """Its logical call stayed open on the turn, whose end closed it with the turn's outcome: a success."""
    _relay, turn = relay_turn
    _refused_before_any_attempt()
    assert _logical_ends(relay_events) == ["failed", "failed"]
    assert turn.logical_llm_calls == {}
    assert relay_events.select(relay_kind=cv.ATTEMPT) == []


def test_a_call_refused_before_its_attempt_outside_turns_ends_its_logical_call(relay_host, relay_events):
    """Outside turns nothing else would ever end it: a start with no end, kept by the host for ever."""
    relay_host.retain_managed_execution("test.outside")
    try:
        _refused_before_any_attempt()
    finally:
        relay_host.release_managed_execution("test.outside")
    assert _logical_ends(relay_events) == ["failed", "failed"]
    assert relay_host.outside.logical_llm_calls == {}
    assert len(relay_events.starts(relay_kind=cv.LOGICAL_CALL)) == 2
