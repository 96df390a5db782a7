"""Managed streams: the provider's own chunks, an accumulator, and exactly one finalization.

| how the stream ends                               | attempt outcome |
|---------------------------------------------------|-----------------|
| exhausted                                         | success         |
| the provider raises mid-stream                    | failed (re-raised as the same object) |
| close(), break, aclose(), garbage collection      | cancelled       |
| CancelledError, KeyboardInterrupt                 | cancelled (re-raised) |
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from . import conventions as cv
from .attempt import Attempt
from .codec import CountingAccumulator, StreamAccumulator
from .types import Outcome

_now = time.time_ns
_CANCELLED = Outcome.CANCELLED.value


_EXHAUSTED: Iterator[Any] = iter(())


class _AsyncExhausted:
    """What a closed async stream reads from: nothing, ever."""

    __slots__ = ()

    def __aiter__(self) -> _AsyncExhausted:
        return self

    async def __anext__(self) -> Any:
        raise StopAsyncIteration


async def _aclose(target: Any) -> None:
    for name in ("aclose", "close"):
        closer = getattr(target, name, None)
        if closer is not None:
            result = closer()
            if hasattr(result, "__await__"):
                await result
            return


class StreamLifecycle:
    """What both stream flavours do per chunk and at the end."""

    __slots__ = ("acc", "attempt", "done", "first_ns", "index")

    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        codec = attempt.codec
        acc: StreamAccumulator
        try:
            acc = codec.accumulator() if codec is not None else CountingAccumulator()
        except Exception as exc:
            attempt.relay.diag.failure("bookkeeping_errors", exc, "creating a stream accumulator")
            acc = CountingAccumulator()
        self.acc = acc
        self.index = 0
        self.first_ns: int | None = None
        self.done = False

    def chunk(self, chunk: Any) -> None:
        if self.first_ns is None:
            self.first_ns = _now()
        try:
            delta = self.acc.add(chunk)
        except Exception as exc:
            # The accumulator is bookkeeping: losing it must not lose the caller's stream.
            self.attempt.relay.diag.failure("bookkeeping_errors", exc, "accumulating a stream chunk")
            self.acc = CountingAccumulator()
            delta = None
        relay = self.attempt.relay
        targets = relay.subscribers.chunk
        if targets:
            relay.scope._emit_mark(
                targets,
                cv.CHUNK,
                {"index": self.index, "delta": delta, "chunk": chunk},
                None,
                self.attempt.handle,
            )
        self.index += 1

    def complete(self) -> None:
        if self.done:
            return
        self.done = True
        attempt = self.attempt
        try:
            response, annotation = self.acc.finish()
        except Exception as exc:
            attempt.relay.diag.failure("bookkeeping_errors", exc, "finishing a stream accumulator")
            response, annotation = None, None
        attempt.finish(Outcome.SUCCESS.value, response, None, annotation, self.first_ns)

    def fail(self, error: BaseException | None, outcome: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.attempt.fail(error, outcome)

    def complete_whole(self, response: Any) -> None:
        """End as a success with a response that arrived in one piece (a raw HTTP body read later)."""
        if self.done:
            return
        self.done = True
        self.attempt.finish(Outcome.SUCCESS.value, response, None, None, self.first_ns)


class _StreamWrapper:
    """What both stream flavours share: the lifecycle, the source's own attributes, and GC as cancellation."""

    __slots__ = ("_iterator", "_life", "_source")

    def __init__(self, source: Any, iterator: Any, life: StreamLifecycle) -> None:
        self._source = source
        self._iterator = iterator
        self._life = life

    def __del__(self) -> None:
        try:
            life = self._life
        except AttributeError:  # __init__ never ran to the end
            return
        if not life.done:
            life.fail(None, _CANCELLED)

    def __getattr__(self, name: str) -> Any:
        # The SDK's own stream attributes (response, headers, ...) stay reachable.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_source"), name)


def finish_whole(stream: _StreamWrapper, response: Any) -> None:
    """End a managed stream's attempt as a success with ``response`` (annotated by the codec), if not ended yet.

    For sources whose content is one body the caller reads when it chooses (an SDK's
    raw response): the attempt opened like a stream and ends when that body is read.
    """
    stream._life.complete_whole(response)


def fail_stream(stream: _StreamWrapper, error: BaseException | None, outcome: str | None = None) -> None:
    """End a managed stream's attempt as failed (or ``outcome``) without touching its source."""
    stream._life.fail(error, outcome)


class ManagedStream(_StreamWrapper):
    """A synchronous managed stream. Iterates on the caller's thread: no loop, no thread."""

    __slots__ = ()
    _iterator: Iterator[Any]

    def __iter__(self) -> ManagedStream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._iterator)
        except StopIteration:
            self._life.complete()
            raise
        except BaseException as exc:
            self._life.fail(exc)
            raise
        self._life.chunk(chunk)
        return chunk

    def close(self) -> None:
        """Stop early: the attempt ends cancelled and the provider stream is closed.

        The iterator is closed too and dropped, so a ``next()`` after ``close()``
        stops instead of reading on from a source whose ``close`` did not end it.
        """
        self._life.fail(None, _CANCELLED)
        iterator, self._iterator = self._iterator, _EXHAUSTED
        targets = (iterator, self._source) if iterator is not self._source else (iterator,)
        for target in targets:
            close = getattr(target, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> ManagedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ManagedAsyncStream(_StreamWrapper):
    __slots__ = ()
    _iterator: AsyncIterator[Any]

    def __aiter__(self) -> ManagedAsyncStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            self._life.complete()
            raise
        except BaseException as exc:
            self._life.fail(exc)
            raise
        self._life.chunk(chunk)
        return chunk

    async def aclose(self) -> None:
        self._life.fail(None, _CANCELLED)
        iterator, self._iterator = self._iterator, _AsyncExhausted()
        await _aclose(iterator)
        if iterator is not self._source:
            await _aclose(self._source)

    async def __aenter__(self) -> ManagedAsyncStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
