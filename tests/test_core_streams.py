"""Managed streams end exactly once, whichever way they end, and sync streams stay synchronous."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any

import pytest
from core_support import DictCodec, attempts, balanced, chunks, new_relay, request

from relay_runtime import CHUNK_MARK, ChunkDelta, LLMRequest


class Source:
    """A provider stream: yields given chunks, may raise after some, records being closed."""

    def __init__(self, items: list[Any], error: BaseException | None = None, after: int = 0) -> None:
        self.items = items
        self.error = error
        self.after = after
        self.closed = False
        self.response = "sdk attribute"

    def __iter__(self) -> Iterator[Any]:
        return self._gen()

    def _gen(self) -> Iterator[Any]:
        try:
            for i, item in enumerate(self.items):
                if self.error is not None and i == self.after:
                    raise self.error
                yield item
        finally:
            self.closed = True

    def close(self) -> None:
        self.closed = True


class AsyncSource(Source):
    def __aiter__(self) -> AsyncIterator[Any]:
        return self._agen()

    async def _agen(self) -> AsyncIterator[Any]:
        try:
            for i, item in enumerate(self.items):
                if self.error is not None and i == self.after:
                    raise self.error
                yield item
        finally:
            self.closed = True

    async def aclose(self) -> None:
        self.closed = True


def outcomes(rec: Any) -> list[str | None]:
    return [e.outcome for e in attempts(rec.events)]


# -- sync ----------------------------------------------------------------------------------------------


def test_exhausted_stream_yields_the_providers_own_chunks_and_succeeds() -> None:
    relay, rec = new_relay()
    items = chunks(4)
    with relay.scope.scope("turn") as turn:
        stream = relay.llm.stream("p", request(stream=True), lambda r: Source(items), codec=DictCodec())
        got = list(stream)
    assert all(a is b for a, b in zip(got, items, strict=True))
    (end,) = attempts(rec.events)
    assert end.outcome == "success" and end.parent_uuid == turn.uuid
    assert end.output == {"model": "m-1-2024", "text": "t0t1t2t3"}
    assert end.annotated_response.output_text == "t0t1t2t3"
    assert end.annotated_response.time_to_first_chunk_ns is not None
    assert end.annotated_response.time_to_first_chunk_ns >= 0
    marks = rec.marks(name=CHUNK_MARK)
    assert [m.data["index"] for m in marks] == [0, 1, 2, 3]
    assert all(m.parent_uuid == end.uuid for m in marks)
    assert marks[0].data["chunk"] is items[0] and marks[0].data["delta"] == ChunkDelta("t0", "", "m-1-2024")
    # Ending again in any way emits nothing more.
    stream.close()
    del stream
    gc.collect()
    assert outcomes(rec) == ["success"] and balanced(rec.events)


def test_provider_error_mid_stream_fails_and_reraises_the_same_object() -> None:
    relay, rec = new_relay()
    boom = ConnectionResetError("peer went away")
    stream = relay.llm.stream("p", request(), lambda r: Source(chunks(5), boom, after=2))
    got = []
    with pytest.raises(ConnectionResetError) as info:
        for chunk in stream:
            got.append(chunk)
    assert info.value is boom and len(got) == 2
    (end,) = attempts(rec.events)
    assert end.outcome == "failed" and end.error_message == "peer went away"


def test_close_cancels_and_closes_the_provider_stream() -> None:
    relay, rec = new_relay()
    source = Source(chunks(5))
    stream = relay.llm.stream("p", request(), lambda r: source)
    assert next(stream) is source.items[0]
    assert stream.response == "sdk attribute"  # the SDK stream's own attributes stay reachable
    stream.close()
    stream.close()
    assert source.closed and outcomes(rec) == ["cancelled"]
    with pytest.raises(StopIteration):
        next(stream)
    assert outcomes(rec) == ["cancelled"] and balanced(rec.events)


def test_break_cancels() -> None:
    relay, rec = new_relay()
    for chunk in relay.llm.stream("p", request(), lambda r: Source(chunks(5))):
        if chunk["text"] == "t1":
            break
    assert outcomes(rec) == ["cancelled"]


def test_with_block_exit_cancels() -> None:
    relay, rec = new_relay()
    with relay.llm.stream("p", request(), lambda r: Source(chunks(5))) as stream:
        next(stream)
    assert outcomes(rec) == ["cancelled"]


def test_garbage_collected_stream_cancels() -> None:
    relay, rec = new_relay()
    stream = relay.llm.stream("p", request(), lambda r: Source(chunks(5)))
    next(stream)
    assert outcomes(rec) == []
    del stream
    gc.collect()
    assert outcomes(rec) == ["cancelled"]


def test_keyboard_interrupt_mid_stream_cancels_and_reraises() -> None:
    relay, rec = new_relay()
    stream = relay.llm.stream("p", request(), lambda r: Source(chunks(5), KeyboardInterrupt(), after=1))
    next(stream)
    with pytest.raises(KeyboardInterrupt):
        next(stream)
    assert outcomes(rec) == ["cancelled"]


def test_error_opening_the_stream_raises_from_stream_itself() -> None:
    relay, rec = new_relay()
    boom = PermissionError("401")

    def factory(req: LLMRequest) -> Any:
        raise boom

    with pytest.raises(PermissionError) as info:
        relay.llm.stream("p", request(), factory)
    assert info.value is boom and outcomes(rec) == ["failed"]


def test_sync_stream_runs_on_the_callers_thread_without_a_loop() -> None:
    relay, rec = new_relay()
    threads_before = threading.active_count()
    caller = threading.current_thread()
    observed: list[tuple[Any, Any, int]] = []

    def provider() -> Iterator[Any]:
        for item in chunks(3):
            observed.append((threading.current_thread(), asyncio._get_running_loop(), threading.active_count()))
            yield item

    assert len(list(relay.llm.stream("p", request(), lambda r: provider()))) == 3
    assert observed == [(caller, None, threads_before)] * 3
    assert threading.active_count() == threads_before and outcomes(rec) == ["success"]


def test_a_broken_accumulator_costs_the_annotation_not_the_stream() -> None:
    relay, rec = new_relay()

    class BadCodec(DictCodec):
        def accumulator(self) -> Any:
            raise RuntimeError("no accumulator today")

    items = chunks(3)
    assert list(relay.llm.stream("p", request(), lambda r: iter(items), codec=BadCodec())) == items
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    (end,) = attempts(rec.events)
    assert end.outcome == "success" and end.output is items[-1]


def test_stream_execution_intercepts_wrap_the_stream_and_can_retry_opening() -> None:
    relay, rec = new_relay()
    opened: list[int] = []

    def factory(req: LLMRequest) -> Any:
        opened.append(1)
        if len(opened) == 1:
            raise ConnectionError("first open fails")
        return Source(chunks(3))

    def retry_open(name: str, req: LLMRequest, next_call: Any) -> Any:
        try:
            return next_call(req)
        except ConnectionError:
            return next_call(req)

    def only_odd(name: str, req: LLMRequest, next_call: Any) -> Any:
        return (c for i, c in enumerate(next_call(req)) if i % 2)

    relay.intercepts.register_llm_stream_execution("retry", 0, retry_open)
    relay.intercepts.register_llm_stream_execution("odd", 1, only_odd)
    got = list(relay.llm.stream("p", request(), factory))
    assert [c["text"] for c in got] == ["t1"] and len(opened) == 2
    # The failed opening is an attempt of its own.
    assert outcomes(rec) == ["failed", "success"] and len(rec.marks(name=CHUNK_MARK)) == 1


# -- async ---------------------------------------------------------------------------------------------


async def _open(relay: Any, source: Any, **kw: Any) -> Any:
    return await relay.llm.stream_async("p", request(stream=True), lambda r: source, **kw)


@pytest.mark.asyncio
async def test_async_exhausted_stream_succeeds() -> None:
    relay, rec = new_relay()
    items = chunks(3)

    async def factory(req: LLMRequest) -> Any:  # an awaitable of an async iterable, as SDKs return
        return AsyncSource(items)

    stream = await relay.llm.stream_async("p", request(), factory, codec=DictCodec())
    got = [c async for c in stream]
    assert all(a is b for a, b in zip(got, items, strict=True))
    assert outcomes(rec) == ["success"] and attempts(rec.events)[0].output["text"] == "t0t1t2"
    await stream.aclose()
    assert outcomes(rec) == ["success"]


@pytest.mark.asyncio
async def test_async_provider_error_fails_and_reraises_the_same_object() -> None:
    relay, rec = new_relay()
    boom = TimeoutError("read timeout")
    stream = await _open(relay, AsyncSource(chunks(3), boom, after=1))
    with pytest.raises(TimeoutError) as info:
        async for _ in stream:
            pass
    assert info.value is boom and outcomes(rec) == ["failed"]


@pytest.mark.asyncio
async def test_async_aclose_cancels_and_closes_the_source() -> None:
    relay, rec = new_relay()
    source = AsyncSource(chunks(3))
    stream = await _open(relay, source)
    assert await stream.__anext__() is source.items[0]
    await stream.aclose()
    assert source.closed and outcomes(rec) == ["cancelled"]
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert outcomes(rec) == ["cancelled"] and balanced(rec.events)


@pytest.mark.asyncio
async def test_async_with_exit_cancels() -> None:
    relay, rec = new_relay()
    async with await _open(relay, AsyncSource(chunks(3))) as stream:
        await stream.__anext__()
    assert outcomes(rec) == ["cancelled"]


@pytest.mark.asyncio
async def test_async_break_then_drop_cancels() -> None:
    relay, rec = new_relay()
    async for _ in await _open(relay, AsyncSource(chunks(3))):
        break
    gc.collect()
    assert outcomes(rec) == ["cancelled"]


@pytest.mark.asyncio
async def test_async_garbage_collected_stream_cancels() -> None:
    relay, rec = new_relay()
    stream = await _open(relay, AsyncSource(chunks(3)))
    await stream.__anext__()
    del stream
    gc.collect()
    assert outcomes(rec) == ["cancelled"]


@pytest.mark.asyncio
async def test_task_cancelled_while_waiting_for_a_chunk_cancels_and_reraises() -> None:
    relay, rec = new_relay()
    waiting = asyncio.Event()

    async def slow() -> AsyncIterator[Any]:
        yield {"text": "first"}
        waiting.set()
        await asyncio.sleep(30)
        yield {"text": "never"}

    stream = await relay.llm.stream_async("p", request(), lambda r: slow())

    async def consume() -> None:
        async for _ in stream:
            pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(waiting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcomes(rec) == ["cancelled"]


def _drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends, without any event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine suspended")


def test_async_keyboard_interrupt_cancels_and_reraises() -> None:
    relay, rec = new_relay()
    stream = _drive(_open(relay, AsyncSource(chunks(3), KeyboardInterrupt(), after=1)))
    assert _drive(stream.__anext__())["text"] == "t0"
    with pytest.raises(KeyboardInterrupt):
        _drive(stream.__anext__())
    assert outcomes(rec) == ["cancelled"]


@pytest.mark.asyncio
async def test_async_stream_execution_intercept() -> None:
    relay, rec = new_relay()

    async def tag(name: str, req: LLMRequest, next_call: Any) -> Any:
        source = await next_call(req)

        async def tagged() -> AsyncIterator[Any]:
            async for chunk in source:
                yield {**chunk, "tagged": True}

        return tagged()

    relay.intercepts.register_llm_stream_execution("tag", 0, tag)
    stream = await _open(relay, AsyncSource(chunks(2)))
    got = [c async for c in stream]
    assert [c["tagged"] for c in got] == [True, True] and outcomes(rec) == ["success"]


@pytest.mark.asyncio
async def test_async_factory_must_give_an_async_iterable() -> None:
    relay, rec = new_relay()
    with pytest.raises(TypeError, match="async iterable"):
        await relay.llm.stream_async("p", request(), lambda r: [1, 2])
    assert outcomes(rec) == ["failed"]


def test_an_accumulator_that_cannot_finish_still_ends_the_attempt_as_a_success() -> None:
    relay, rec = new_relay()

    class Unfinished(DictCodec):
        def accumulator(self) -> Any:
            acc = super().accumulator()

            def finish() -> Any:
                raise ValueError("truncated final chunk")

            acc.finish = finish  # type: ignore[method-assign]
            return acc

    items = chunks(2)
    assert list(relay.llm.stream("p", request(), lambda r: iter(items), codec=Unfinished())) == items
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    (end,) = attempts(rec.events)
    assert end.outcome == "success" and end.output is None and balanced(rec.events)


# -- a managed stream stands in for its source --------------------------------------------------------


class HttpResponse:
    """What an SDK stream's ``response`` is: something the caller may close."""

    def __init__(self) -> None:
        self.is_closed = False

    def close(self) -> None:
        self.is_closed = True

    async def aclose(self) -> None:
        self.is_closed = True


def test_a_stream_passes_its_sources_isinstance_checks_and_keeps_its_type() -> None:
    from relay_runtime.streams import ManagedStream

    relay, rec = new_relay()
    source = Source(chunks(2))
    stream = relay.llm.stream("p", request(), lambda r: source)
    assert isinstance(stream, Source) and isinstance(stream, ManagedStream)
    assert type(stream) is ManagedStream  # lookups on the chunk path stay on our own class
    assert stream.response == "sdk attribute"  # not a closable response: handed out as it is
    generator_stream = relay.llm.stream("p", request(), lambda r: iter(chunks(1)))
    assert not isinstance(generator_stream, type(iter([])))  # a builtin's type is never claimed
    assert list(stream) == chunks(2) and list(generator_stream) == chunks(1)
    assert outcomes(rec) == ["success", "success"]


def test_closing_the_sources_response_cancels_the_attempt_at_once() -> None:
    relay, rec = new_relay()
    source = Source(chunks(3))
    source.response = HttpResponse()  # type: ignore[assignment]
    stream = relay.llm.stream("p", request(), lambda r: source)
    next(stream)
    stream.response.close()
    assert outcomes(rec) == ["cancelled"] and source.response.is_closed  # type: ignore[attr-defined]
    assert isinstance(stream.response, HttpResponse)
    assert balanced(rec.events)


@pytest.mark.asyncio
async def test_an_async_stream_closes_with_an_awaited_close() -> None:
    relay, rec = new_relay()
    source = AsyncSource(chunks(3))
    source.response = HttpResponse()  # type: ignore[assignment]
    stream = await relay.llm.stream_async("p", request(), lambda r: source)
    assert isinstance(stream, AsyncSource)
    await stream.__anext__()
    await stream.close()
    assert outcomes(rec) == ["cancelled"] and source.closed
    assert [c async for c in stream] == []  # closed: nothing more is read

    second = AsyncSource(chunks(2))
    second.response = HttpResponse()  # type: ignore[assignment]
    stream = await relay.llm.stream_async("p", request(), lambda r: second)
    await stream.response.aclose()
    assert outcomes(rec) == ["cancelled", "cancelled"] and second.response.is_closed  # type: ignore[attr-defined]
