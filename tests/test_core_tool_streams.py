"""A tool whose function returns a generator: its result is a stream of the tool scope, ended by the iteration."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from core_support import balanced, new_relay

from relay_runtime import conventions as cv


class _Paused(Exception):
    """A framework's control flow (as LangGraph's interrupt), raised while the result is read."""


def tool_ends(rec: Any) -> list[Any]:
    return rec.ends(scope_type="tool")


def test_an_error_raised_while_the_caller_iterates_fails_the_tool() -> None:
    relay, rec = new_relay()
    down = RuntimeError("backend down")

    def gen() -> Iterator[dict[str, int]]:
        yield {"hit": 1}
        raise down

    with relay.scope.scope("turn"):
        stream = relay.tools.execute("search", {"q": "x"}, lambda a: gen())
        assert tool_ends(rec) == []  # not answered yet: nothing was read
        got: list[Any] = []
        with pytest.raises(RuntimeError) as info:
            for item in stream:
                got.append(item)
    assert info.value is down and got == [{"hit": 1}]
    (end,) = tool_ends(rec)
    assert (end.name, end.outcome, end.error_type, end.error_message) == (
        "search",
        "failed",
        "RuntimeError",
        "backend down",
    )
    assert end.output == [{"hit": 1}] and end.metadata[cv.TOOL_STREAMED_ITEMS] == 1
    assert balanced(rec.events)


def test_an_exhausted_stream_is_a_success_holding_what_it_yielded_and_runs_under_the_tool_scope() -> None:
    relay, rec = new_relay()
    seen: list[Any] = []
    items = [{"doc": 1}, "two", 3]

    def gen() -> Iterator[Any]:
        for item in items:
            seen.append(relay.scope.current())
            yield item

    with relay.scope.scope("turn") as turn:
        stream = relay.tools.execute("search", {"q": "x"}, lambda a: gen())
        # The caller's stack is its own again: what it opens next is the tool's sibling, not its child.
        assert relay.scope.current() is turn
        with relay.scope.scope("beside") as beside:
            assert beside.parent is turn
        got = list(stream)
    assert got == items and all(a is b for a, b in zip(got, items, strict=True))
    start, end = rec.starts(scope_type="tool")[0], tool_ends(rec)[0]
    assert all(s is not None and s.uuid == start.uuid for s in seen)
    assert (end.outcome, end.error_type, end.output) == ("success", None, items)
    assert end.metadata[cv.TOOL_STREAMED_ITEMS] == 3 and end.metadata[cv.KIND] == cv.TOOL
    assert [e.name for e in rec.ends()] == ["beside", "search", "turn"] and balanced(rec.events)


def test_break_close_and_garbage_collection_end_the_tool_cancelled() -> None:
    relay, rec = new_relay()
    closed: list[str] = []

    def gen(label: str) -> Iterator[int]:
        try:
            yield 1
            yield 2
        finally:
            closed.append(label)

    stream = relay.tools.execute("by-close", {}, lambda a: gen("close"))
    assert next(stream) == 1
    stream.close()
    stream.close()  # closing twice ends it once
    with pytest.raises(StopIteration):
        next(stream)

    def read_one_then_break() -> None:
        for _ in relay.tools.execute("by-break", {}, lambda a: gen("break")):
            break

    read_one_then_break()  # the stream is garbage once the loop is left
    gc.collect()
    unread = relay.tools.execute("never-read", {}, lambda a: gen("unread"))
    del unread
    gc.collect()
    ends = {e.name: e for e in tool_ends(rec)}
    assert {n: (e.outcome, e.output) for n, e in ends.items()} == {
        "by-close": ("cancelled", [1]),
        "by-break": ("cancelled", [1]),
        "never-read": ("cancelled", []),
    }
    assert "close" in closed and "break" in closed and balanced(rec.events)


def test_a_collected_stream_closes_its_generator_under_the_tool_scope_before_the_tool_ends() -> None:
    relay, rec = new_relay()

    def gen() -> Iterator[int]:
        with relay.scope.scope("page"):
            yield 1
            yield 2

    stream = relay.tools.execute("crawl", {}, lambda a: gen())
    assert next(stream) == 1
    del stream
    gc.collect()
    assert [(e.name, e.outcome) for e in rec.ends()] == [("page", "cancelled"), ("crawl", "cancelled")]
    assert rec.starts(name="page")[0].parent_uuid == rec.starts(name="crawl")[0].uuid and balanced(rec.events)


def test_a_stream_read_on_another_thread_ends_there_with_the_tool_scope_current() -> None:
    relay, rec = new_relay()
    nested: list[Any] = []

    def gen() -> Iterator[int]:
        with relay.scope.scope("fetch page") as page:
            nested.append(page)
            yield 1
        yield 2

    with relay.scope.scope("turn"):
        stream = relay.tools.execute("crawl", {}, lambda a: gen())
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    reader.join(5)
    assert got == [1, 2]
    tool_start = rec.starts(scope_type="tool")[0]
    assert nested[0].parent_uuid == tool_start.uuid
    assert [(e.name, e.outcome) for e in rec.ends()] == [
        ("turn", "success"),
        ("fetch page", "success"),
        ("crawl", "success"),
    ]
    assert tool_ends(rec)[0].output == [1, 2] and balanced(rec.events)


@pytest.mark.asyncio
async def test_async_generators_and_sync_generators_returned_to_async_code() -> None:
    relay, rec = new_relay()

    async def agen(fail: bool) -> AsyncIterator[str]:
        await asyncio.sleep(0)
        yield "a"
        if fail:
            raise RuntimeError("backend down")
        yield "b"

    def sgen() -> Iterator[str]:
        yield "s"

    async def async_tool(args: Any) -> Any:  # an async function returning a stream: awaited, then streamed
        return agen(False)

    ok = await relay.tools.execute_async("ok", {}, lambda a: agen(False))
    assert [x async for x in ok] == ["a", "b"]
    failing = await relay.tools.execute_async("failing", {}, lambda a: agen(True))
    with pytest.raises(RuntimeError, match="backend down"):
        async for _ in failing:
            pass
    closed = await relay.tools.execute_async("closed", {}, lambda a: agen(False))
    assert await closed.__anext__() == "a"
    await closed.aclose()
    assert [x async for x in await relay.tools.execute_async("awaited", {}, async_tool)] == ["a", "b"]
    assert list(await relay.tools.execute_async("sync", {}, lambda a: sgen())) == ["s"]
    # An async generator handed back by the sync path is a managed async stream too.
    assert [x async for x in relay.tools.execute("sync-path", {}, lambda a: agen(False))] == ["a", "b"]
    dropped = await relay.tools.execute_async("dropped", {}, lambda a: agen(False))
    assert await dropped.__anext__() == "a"
    del dropped  # garbage: cancelled at once, as a sync stream is
    gc.collect()
    ends = {e.name: (e.outcome, e.error_type, e.output) for e in tool_ends(rec)}
    assert ends == {
        "ok": ("success", None, ["a", "b"]),
        "failing": ("failed", "RuntimeError", ["a"]),
        "closed": ("cancelled", None, ["a"]),
        "awaited": ("success", None, ["a", "b"]),
        "sync": ("success", None, ["s"]),
        "sync-path": ("success", None, ["a", "b"]),
        "dropped": ("cancelled", None, ["a"]),
    }
    assert balanced(rec.events)


@pytest.mark.asyncio
async def test_a_task_cancelled_while_reading_ends_the_tool_cancelled() -> None:
    relay, rec = new_relay()
    started = asyncio.Event()

    async def agen() -> AsyncIterator[int]:
        yield 1
        started.set()
        await asyncio.sleep(3600)
        yield 2

    stream = await relay.tools.execute_async("slow", {}, lambda a: agen())

    async def read() -> list[int]:
        return [x async for x in stream]

    task = asyncio.ensure_future(read())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (end,) = tool_ends(rec)
    assert (end.outcome, end.error_type, end.output) == ("cancelled", "CancelledError", [1])


def test_the_output_keeps_the_first_items_and_the_end_counts_them_all() -> None:
    from relay_runtime.tool_streams import RECORDED_ITEMS

    relay, rec = new_relay()
    total = RECORDED_ITEMS + 5
    assert sum(relay.tools.execute("many", {}, lambda a: iter_gen(total))) == sum(range(total))
    (end,) = tool_ends(rec)
    assert end.output == list(range(RECORDED_ITEMS)) and end.metadata[cv.TOOL_STREAMED_ITEMS] == total


def iter_gen(n: int) -> Iterator[int]:
    yield from range(n)


def test_credentials_in_yielded_text_are_blanked_as_in_a_text_result() -> None:
    relay, rec = new_relay()
    secret = "sk-live-0123456789abcdef"

    def gen() -> Iterator[str]:
        yield f"user='ada' api_key='{secret}'"

    assert list(relay.tools.execute("whoami", {}, lambda a: gen())) == [f"user='ada' api_key='{secret}'"]
    (end,) = tool_ends(rec)
    assert secret not in repr(end.output) and "ada" in end.output[0]


def test_an_execution_intercept_may_stream_around_the_tools_stream() -> None:
    relay, rec = new_relay()

    def upper(name: str, args: Any, next_call: Any) -> Iterator[str]:
        # A generator: ``next_call`` runs when the caller starts reading, after ``execute`` returned.
        for item in next_call(args):
            yield item.upper()

    relay.intercepts.register_tool_execution("upper", 0, upper)

    def gen() -> Iterator[str]:
        yield "a"
        yield "b"

    assert list(relay.tools.execute("letters", {}, lambda a: gen())) == ["A", "B"]
    (end,) = tool_ends(rec)
    assert (end.outcome, end.output) == ("success", ["A", "B"])


def test_control_flow_raised_while_reading_ends_the_tool_as_the_callers_test_says() -> None:
    relay, rec = new_relay()

    def gen() -> Iterator[int]:
        yield 1
        raise _Paused()

    stream = relay.tools.execute("ask", {}, lambda a: gen(), control_flow=lambda e: isinstance(e, _Paused))
    with pytest.raises(_Paused):
        list(stream)
    (end,) = tool_ends(rec)
    assert (end.outcome, end.error_type, end.output) == ("success", None, {"control_flow": "_Paused"})


def test_plain_results_are_recorded_as_before() -> None:
    relay, rec = new_relay()
    result = [1, 2]
    assert relay.tools.execute("plain", {}, lambda a: result) is result
    assert asyncio.run(relay.tools.execute_async("plain-async", {}, lambda a: result)) is result
    assert [(e.outcome, e.output) for e in tool_ends(rec)] == [("success", [1, 2]), ("success", [1, 2])]
    assert cv.TOOL_STREAMED_ITEMS not in (tool_ends(rec)[0].metadata or {})
