"""Scopes: the contextvar stack, its LIFO rule, and isolation across tasks and threads."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest
from core_support import balanced, new_relay, request, response
from hypothesis import given, settings
from hypothesis import strategies as st

from relay_runtime import ContextExecutor, Event, Recorder, Relay, ScopeOrderError, ScopeType, propagate_to_thread


def test_scope_events_and_handles_hold_every_slot() -> None:
    # ``Scopes.opened`` makes a handle without calling its class: a slot left unset, on a handle or on the events made
    # of it, would fail whoever reads it.
    from relay_runtime.scopes import ScopeHandle

    relay, rec = new_relay()
    outer = relay.scope.push("outer", ScopeType.AGENT, input={"q": 1}, metadata={"k": "v"})
    inner = relay.scope.push("inner", parent=outer, attach=False)
    relay.scope.end(inner, error=ValueError("no"))
    relay.scope.pop(outer, output={"a": 2})
    slots = [slot for slot in ScopeHandle.__slots__ if slot != "__weakref__"]
    for handle in (outer, inner):
        assert [slot for slot in slots if not hasattr(handle, slot)] == []
        assert (handle.ended, handle.data, handle.cost, handle.local_intercepts) == (True, None, None, None)
    assert (outer.attached, inner.attached, inner.parent, inner.parent_uuid) == (True, False, outer, outer.uuid)
    for event in rec.events:
        assert [slot for slot in Event.__slots__ if not hasattr(event, slot)] == []
    _, start_inner, end_inner, end_outer = rec.events
    assert (end_inner.error_type, end_inner.error_message, end_inner.outcome) == ("ValueError", "no", "failed")
    assert (end_outer.error_type, end_outer.error_message, end_outer.output) == (None, None, {"a": 2})
    assert start_inner.start_timestamp is None and end_inner.start_timestamp == start_inner.timestamp
    assert start_inner.metadata == {} and end_outer.metadata == {"k": "v"}


def test_push_pop_nest_and_emit_balanced_events() -> None:
    relay, rec = new_relay()
    assert relay.scope.current() is None  # the implicit root
    outer = relay.scope.push("outer", ScopeType.AGENT, input={"q": 1}, metadata={"k": "v"})
    inner = relay.scope.push("inner")
    assert relay.scope.current() is inner
    assert inner.parent is outer and inner.trace_id == outer.trace_id
    relay.scope.pop(inner, output={"a": 2})
    assert relay.scope.current() is outer
    relay.scope.pop(outer)
    assert relay.scope.current() is None

    kinds = [(e.kind, e.name) for e in rec.events]
    assert kinds == [
        ("scope_start", "outer"),
        ("scope_start", "inner"),
        ("scope_end", "inner"),
        ("scope_end", "outer"),
    ]
    start_outer, start_inner, end_inner, end_outer = rec.events
    assert start_outer.parent_uuid is None and start_outer.scope_type == "agent"
    assert start_outer.input == {"q": 1} and start_outer.metadata == {"k": "v"}
    assert start_inner.parent_uuid == outer.uuid and start_inner.scope_type == "function"
    assert end_inner.output == {"a": 2} and end_inner.outcome == "success"
    assert end_inner.start_timestamp == start_inner.timestamp <= end_inner.timestamp
    assert end_outer.metadata == {"k": "v"} and end_outer.duration_ns is not None
    assert balanced(rec.events)


def test_out_of_order_pop_names_both_handles_and_changes_nothing() -> None:
    relay, rec = new_relay()
    outer = relay.scope.push("outer")
    inner = relay.scope.push("inner")
    before = len(rec.events)
    with pytest.raises(ScopeOrderError) as info:
        relay.scope.pop(outer)
    assert repr(outer) in str(info.value) and repr(inner) in str(info.value)
    assert relay.scope.current() is inner and not outer.ended
    assert len(rec.events) == before
    relay.scope.pop(inner)
    relay.scope.pop(outer)
    assert balanced(rec.events)


def test_second_pop_is_a_no_op_without_a_second_end_event() -> None:
    relay, rec = new_relay()
    handle = relay.scope.push("once")
    relay.scope.pop(handle)
    relay.scope.pop(handle, output="again")
    assert [e.kind for e in rec.events] == ["scope_start", "scope_end"]
    assert relay.scope.current() is None


def test_scope_context_manager_records_error_and_reraises() -> None:
    relay, rec = new_relay()
    boom = ValueError("bad input")
    with pytest.raises(ValueError) as info, relay.scope.scope("work"):
        raise boom
    assert info.value is boom
    end = rec.ends()[0]
    assert end.outcome == "failed" and end.error_type == "ValueError" and end.error_message == "bad input"
    assert relay.scope.current() is None


def test_scope_cancelled_outcome_for_keyboard_interrupt() -> None:
    relay, rec = new_relay()
    with pytest.raises(KeyboardInterrupt), relay.scope.scope("work"):
        raise KeyboardInterrupt
    assert rec.ends()[0].outcome == "cancelled"


def test_marks_parent_on_current_scope_or_root() -> None:
    relay, rec = new_relay()
    relay.scope.mark("at-root", {"x": 1})
    with relay.scope.scope("s") as handle:
        relay.scope.mark("inside", metadata={"m": 1})
    marks = rec.marks()
    assert marks[0].parent_uuid is None and marks[0].data == {"x": 1}
    assert marks[1].parent_uuid == handle.uuid and marks[1].trace_id == handle.trace_id
    assert marks[1].metadata == {"m": 1}


def test_detached_scope_with_explicit_parent_stays_off_the_stack() -> None:
    relay, rec = new_relay()
    with relay.scope.scope("turn") as turn:
        call = relay.scope.push("logical", parent=turn, attach=False)
        assert relay.scope.current() is turn
        inner = relay.scope.push("inner")
        relay.scope.pop(call)  # not on the stack: no LIFO constraint
        relay.scope.pop(inner)
    assert rec.starts(name="logical")[0].parent_uuid == turn.uuid
    assert balanced(rec.events)


def test_a_scope_recorded_after_the_fact_starts_when_it_began() -> None:
    relay, rec = new_relay()
    began = time.time_ns() - 5_000_000
    handle = relay.scope.push("late", attach=False, root=True, start_ns=began)
    relay.scope.pop(handle)
    start, end = rec.events
    assert start.timestamp == began == end.start_timestamp < end.timestamp


def test_bad_arguments_are_named() -> None:
    relay = Relay()
    with pytest.raises(ValueError, match="scope name"):
        relay.scope.push("")
    with pytest.raises(TypeError, match="scope_type"):
        relay.scope.push("x", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ScopeHandle"):
        relay.scope.pop("x")  # type: ignore[arg-type]
    handle = relay.scope.push("done")
    relay.scope.pop(handle)
    with pytest.raises(ValueError, match="has ended"):
        relay.scope.push("child", parent=handle)
    for bad in (0, -1, 1.5, True, "123"):
        with pytest.raises(ValueError, match="start_ns"):
            relay.scope.push("x", start_ns=bad)  # type: ignore[arg-type]
    assert relay.scope.current() is None  # a refused push leaves nothing open


# -- property: any sequence of pushes and pops behaves like a stack ----------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from(["a", "b", "c"])),
        st.tuples(st.just("pop"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("mark"), st.just("m")),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_push_pop_sequences_follow_a_stack_model(ops: list[tuple[str, object]]) -> None:
    relay, rec = new_relay()
    stack: list = []
    every: list = []
    for op, arg in ops:
        seen = len(rec.events)
        if op == "push":
            handle = relay.scope.push(str(arg))
            start = rec.events[-1]
            assert start.kind == "scope_start" and start.uuid == handle.uuid
            assert start.parent_uuid == (stack[-1].uuid if stack else None)
            stack.append(handle)
            every.append(handle)
        elif op == "mark":
            relay.scope.mark("m")
            assert rec.events[-1].parent_uuid == (stack[-1].uuid if stack else None)
        elif every:
            handle = every[int(arg) % len(every)]  # type: ignore[call-overload]
            if handle not in stack:  # already popped: a no-op
                relay.scope.pop(handle)
                assert len(rec.events) == seen
            elif handle is stack[-1]:
                relay.scope.pop(handle)
                stack.pop()
                assert [e.kind for e in rec.events[seen:]] == ["scope_end"]
                assert rec.events[-1].uuid == handle.uuid
            else:
                with pytest.raises(ScopeOrderError) as info:
                    relay.scope.pop(handle)
                assert repr(handle) in str(info.value) and repr(stack[-1]) in str(info.value)
                assert len(rec.events) == seen and not handle.ended
        assert relay.scope.current() is (stack[-1] if stack else None)
    while stack:
        relay.scope.pop(stack.pop())
    assert relay.scope.current() is None
    assert balanced(rec.events)
    roots = {h.trace_id for h in every if h.parent is None}
    assert all(h.trace_id in roots for h in every)


# -- isolation: tasks and threads never parent into each other --------------------------------------

_worker: contextvars.ContextVar[str] = contextvars.ContextVar("core_test_worker", default="main")


class _TaggingRecorder(Recorder):
    """Tags each event with the worker (task or thread) that emitted it."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, Event]] = []

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.tags.append((_worker.get(), event))


def _assert_no_cross_parenting(rec: _TaggingRecorder, root_uuid: str, workers: int) -> None:
    owned: dict[str, set[str]] = {}
    for tag, event in rec.tags:
        if event.kind == "scope_start":
            owned.setdefault(tag, set()).add(event.uuid)
    assert len([t for t in owned if t != "main"]) == workers
    for tag, event in rec.tags:
        if tag == "main":
            continue
        assert event.parent_uuid == root_uuid or event.parent_uuid in owned[tag], (tag, event)
    for tag in owned:
        events = [e for t, e in rec.tags if t == tag]
        assert balanced(events)


def _provider(_request: object) -> dict:
    return response()


async def _aprovider(_request: object) -> dict:
    await asyncio.sleep(0)
    return response()


@pytest.mark.asyncio
async def test_a_thousand_tasks_each_keep_their_own_stack() -> None:
    relay = Relay()
    rec = _TaggingRecorder()
    relay.subscribers.register(rec)
    root = relay.scope.push("root", ScopeType.AGENT)

    async def work(i: int) -> None:
        _worker.set(f"task-{i}")
        with relay.scope.scope(f"task-{i}") as mine:
            await asyncio.sleep(0)
            with relay.scope.scope("step") as step:
                await asyncio.sleep(0)
                assert relay.scope.current() is step
                relay.scope.mark("progress")
                await relay.llm.execute_async("p", request(), _aprovider)
                await asyncio.sleep(0)
            assert relay.scope.current() is mine
        # A task that leaves a scope open affects only its own stack.
        relay.scope.push("left-open")

    await asyncio.gather(*(work(i) for i in range(1000)))
    assert relay.scope.current() is root
    relay.scope.pop(root)
    owned_ends = [e for t, e in rec.tags if t != "main" and e.kind == "scope_end"]
    assert len(owned_ends) == 3000  # task, step, attempt; "left-open" never ended
    leftover = {e.uuid for t, e in rec.tags if e.kind == "scope_start" and e.name == "left-open"}
    rec.tags = [(t, e) for t, e in rec.tags if e.uuid not in leftover]
    _assert_no_cross_parenting(rec, root.uuid, 1000)


def _thread_work(relay: Relay, i: int, barrier: threading.Barrier) -> str:
    _worker.set(f"thread-{i}")
    with relay.scope.scope(f"thread-{i}") as mine:
        barrier.wait(timeout=10)  # every thread holds its scope open at once
        for _ in range(50):
            with relay.scope.scope("step"):
                relay.scope.mark("progress")
                relay.llm.execute("p", request(), _provider)
        assert relay.scope.current() is mine
    return mine.uuid


def test_eight_threads_through_a_context_executor() -> None:
    relay = Relay()
    rec = _TaggingRecorder()
    relay.subscribers.register(rec)
    barrier = threading.Barrier(8)
    with relay.scope.scope("root", ScopeType.AGENT) as root, ContextExecutor(max_workers=8) as pool:
        futures = [pool.submit(_thread_work, relay, i, barrier) for i in range(8)]
        uuids = [f.result(timeout=30) for f in futures]
        assert relay.scope.current() is root
    assert len(set(uuids)) == 8
    _assert_no_cross_parenting(rec, root.uuid, 8)


def test_eight_threads_through_propagate_to_thread() -> None:
    relay = Relay()
    rec = _TaggingRecorder()
    relay.subscribers.register(rec)
    barrier = threading.Barrier(8)
    results: list[str] = []
    with relay.scope.scope("root", ScopeType.AGENT) as root:
        threads = [
            threading.Thread(target=propagate_to_thread(lambda i=i: results.append(_thread_work(relay, i, barrier))))
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
    assert len(results) == 8
    _assert_no_cross_parenting(rec, root.uuid, 8)


def test_a_plain_thread_starts_at_the_root() -> None:
    relay, _rec = new_relay()
    seen: list[object] = []
    with relay.scope.scope("main-only"):
        t = threading.Thread(target=lambda: seen.append(relay.scope.current()))
        t.start()
        t.join(timeout=10)
    assert seen == [None]


def test_two_relays_keep_separate_trees() -> None:
    a, rec_a = new_relay()
    b, rec_b = new_relay()
    with a.scope.scope("a-scope"), b.scope.scope("b-scope") as b_scope:
        assert a.scope.current() is not None and a.scope.current().name == "a-scope"
        assert b.scope.current() is b_scope
    assert [e.name for e in rec_a.events] == ["a-scope", "a-scope"]
    assert [e.name for e in rec_b.events] == ["b-scope", "b-scope"]
