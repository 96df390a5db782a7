"""Managed streams: the provider's own chunks, an accumulator, and exactly one finalization.

| how the stream ends                               | attempt outcome |
|---------------------------------------------------|-----------------|
| exhausted after the provider's terminal marker    | success         |
| exhausted without it (the accumulator says so)    | failed, ``IncompleteStream`` (not raised) |
| the provider raises mid-stream                    | failed (re-raised as the same object) |
| close(), break, aclose(), garbage collection      | cancelled       |
| the source's ``response.close()`` / ``aclose()``  | cancelled       |
| CancelledError, KeyboardInterrupt                 | cancelled (re-raised) |

A managed stream stands in for its source (an SDK's ``Stream`` / ``AsyncStream``): it
passes the same ``isinstance`` checks, reaches the source's other attributes, and keeps
the source's calling convention for ``close`` (awaited on an async stream).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from contextvars import Context
from typing import Any

import wrapt

from .stream_lifecycle import StreamLifecycle as StreamLifecycle  # re-exported: llm builds it
from .types import Outcome

_CANCELLED = Outcome.CANCELLED.value


_EXHAUSTED: Iterator[Any] = iter(())
_END: Any = object()  # a sync source's end, as ``next(source, _END)`` returns it (``ManagedStream.chunks``)


class _AsyncExhausted:
    """What a closed async stream reads from: nothing, ever."""

    __slots__ = ()

    def __aiter__(self) -> _AsyncExhausted:
        return self

    async def __anext__(self) -> Any:
        raise StopAsyncIteration


class _Raising:
    """What a stream a budget stopped reads from: the reason, once, then nothing."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def __iter__(self) -> _Raising:
        return self

    def __next__(self) -> Any:
        error, self.error = self.error, None
        if error is None:
            raise StopIteration
        raise error

    def __aiter__(self) -> _Raising:
        return self

    async def __anext__(self) -> Any:
        error, self.error = self.error, None
        if error is None:
            raise StopAsyncIteration
        raise error


def surfaced(exc: BaseException) -> BaseException:
    """``exc``, or the relay's own error that the SDK wrapped in it while reading the stream.

    A cassette raises its miss from inside the SDK's HTTP read, and an SDK may wrap whatever that read
    raises (anthropic 2.x makes it an ``APIConnectionError``): the caller and the record get the miss
    itself, which says what to do, not a connection error that never happened. The relay's errors
    that travel so say it with ``relay_surfaces``.
    """
    cause = exc.__cause__
    return cause if cause is not None and getattr(cause, "relay_surfaces", False) else exc


def _running(target: Any) -> bool:
    """A generator another thread or task is inside right now (reading the next chunk): it cannot be
    closed, and need not be, since closing its source (the next target) ends it."""
    return getattr(target, "gi_running", False) is True or getattr(target, "ag_running", False) is True


async def _aclose(target: Any) -> None:
    for name in ("aclose", "close"):
        closer = getattr(target, name, None)
        if closer is not None:
            result = closer()
            if hasattr(result, "__await__"):
                await result
            return


class _StreamWrapper:
    """What both stream flavours share: the lifecycle, the source's own attributes, and GC as cancellation."""

    __slots__ = ("_iterator", "_life", "_response", "_source")

    def __init__(self, source: Any, iterator: Any, life: StreamLifecycle) -> None:
        self._source = source
        self._iterator = iterator
        self._life = life
        self._response: Any = None

    def __del__(self) -> None:
        try:
            life = self._life
        except AttributeError:  # __init__ never ran to the end
            return
        attempt = life.attempt
        if not attempt.finished or attempt.settle_late is not None:  # not yet priced, when its turn ended it
            life.fail(None, _CANCELLED)

    # isinstance() falls back to ``obj.__class__`` when ``type(obj)`` does not match: the stream
    # passes the checks its source passes (``isinstance(s, openai.Stream)``), as a transparent
    # proxy would, while its own type (and so every lookup on the chunk path) stays this class.
    # Builtin sources (a generator, a list) are not impersonated: their type promises a layout.
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        kind = type(self._source)
        return kind if kind.__module__ != "builtins" else type(self)

    def __getattr__(self, name: str) -> Any:
        # The SDK's own stream attributes (response, headers, ...) stay reachable.
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(object.__getattribute__(self, "_source"), name)
        if name == "response" and (hasattr(value, "close") or hasattr(value, "aclose")):
            # Closing the stream's HTTP response is how the SDKs' helpers (and their tests) close
            # a stream: it ends the attempt as the stream's own close() does.
            watched = self._response
            if watched is None or watched.__wrapped__ is not value:
                watched = self._response = _ClosingResponse(value, self._life)
            return watched
        return value

    def _targets(self, exhausted: Any) -> tuple[Any, ...]:
        """What to close, once: the iterator and the source (if different); () when closed already.

        The iterator is dropped too, so a ``next()`` after closing stops instead of
        reading on from a source whose ``close`` did not end it.
        """
        iterator = self._iterator
        if iterator is exhausted or type(iterator) is _Raising:  # closed already (a budget stopped it)
            return ()
        self._iterator = exhausted
        return (iterator, self._source) if iterator is not self._source else (iterator,)

    def _close_failed(self, what: str, exc: Exception) -> None:
        self._life.attempt.relay.diag.failure("bookkeeping_errors", exc, what)


class _ClosingResponse(wrapt.ObjectProxy):
    """A managed stream's HTTP response: closing it cancels the stream's attempt, then closes it."""

    _self_life: StreamLifecycle

    def __init__(self, response: Any, life: StreamLifecycle) -> None:
        super().__init__(response)
        self._self_life = life

    def close(self, *args: Any, **kwargs: Any) -> Any:
        self._self_life.fail(None, _CANCELLED)
        return self.__wrapped__.close(*args, **kwargs)

    async def aclose(self, *args: Any, **kwargs: Any) -> Any:
        self._self_life.fail(None, _CANCELLED)
        return await self.__wrapped__.aclose(*args, **kwargs)


def finish_whole(stream: _StreamWrapper, response: Any) -> None:
    """End a managed stream's attempt as a success with ``response`` (annotated by the codec), if not ended yet.

    For sources whose content is one body the caller reads when it chooses (an SDK's
    raw response): the attempt opened like a stream and ends when that body is read.
    """
    stream._life.complete_whole(response)


def fail_stream(stream: _StreamWrapper, error: BaseException | None, outcome: str | None = None) -> None:
    """End a managed stream's attempt as failed (or ``outcome``) without touching its source."""
    stream._life.fail(error, outcome)


def adopt_source(stream: _StreamWrapper, source: Any) -> None:
    """The stream now stands for ``source`` (an SDK stream parsed from a raw response after it opened):
    its type, attributes and ``close`` are the source's; chunks still come from the stream's iterator."""
    stream._source = source


class ManagedStream(_StreamWrapper):
    """A synchronous managed stream. Iterates on the caller's thread: no loop, no thread.

    The provider's iterator runs in the stream's own context, where the attempt is
    the current scope: a lazy provider (a generator) sees its attempt as ``execute`` does.
    """

    __slots__ = ("_context", "_run")
    _iterator: Iterator[Any]

    def __init__(self, source: Any, iterator: Any, life: StreamLifecycle, context: Context) -> None:
        _StreamWrapper.__init__(self, source, iterator, life)  # not through ``super()``: one is made for every stream
        self._context = context
        self._run = context.run

    def __iter__(self) -> ManagedStream:
        return self

    def __next__(self) -> Any:
        life = self._life
        try:
            chunk = self._run(next, self._iterator)
            stop = life.chunk(chunk)
        except StopIteration:
            life.complete()
            raise
        except BaseException as exc:
            # A provider error, or a subscriber's BaseException on the chunk.
            raise self._failed(exc)  # noqa: B904 (the error itself, or the relay's own one it wraps)
        if stop is not None:
            self._stopped(stop)
        return chunk

    def chunks(self) -> Iterator[Any]:
        """The chunks ``next()`` reads, read by a generator: for a reader that is a generator itself (an adapter's
        stand-in for an SDK's own), which delegates to this one (``yield from``) with no ``__next__`` call per chunk
        through the type's slot, and no ``StopIteration`` raised through two frames at the end (the source's end is
        a sentinel here). The same steps as ``__next__``'s; closing this generator leaves the stream open (its
        reader closes it, as it would close the stream it iterated)."""
        life = self._life
        run = self._run
        while True:
            try:
                chunk = run(next, self._iterator, _END)  # read again every time: closing or a budget replaces it
                if chunk is _END:
                    break
                stop = life.chunk(chunk)
            except BaseException as exc:
                raise self._failed(exc)  # noqa: B904 (as in ``__next__``)
            if stop is not None:
                self._stopped(stop)
            yield chunk
        life.complete()  # outside the ``try``, as ``__next__``'s is: what ending the attempt raises is not a read's

    def _stopped(self, stop: BaseException) -> None:
        """A budget stopped the stream: the provider's is closed now, the next read raises why."""
        self._release(quiet=True)
        self._iterator = _Raising(stop)

    def _failed(self, exc: BaseException) -> BaseException:
        """The attempt ends with ``exc`` (see ``surfaced``), and the provider's stream is closed before the
        caller sees it; returns the error to raise."""
        exc = surfaced(exc)
        try:
            self._life.fail(exc)
        finally:
            self._release(quiet=True)
        return exc

    def _read_ahead(self) -> tuple[bool, Any]:
        """Read the first chunk ahead (unrecorded until the caller reads it): ``(True, chunk)`` or ``(False, None)``."""
        try:
            chunk = self._run(next, self._iterator)
        except StopIteration:
            return False, None
        except BaseException as exc:
            raise self._failed(exc)  # noqa: B904
        self._iterator = itertools.chain((chunk,), self._iterator)
        return True, chunk

    def close(self) -> None:
        """Stop early: the attempt ends cancelled and the provider stream is closed, once."""
        self._life.fail(None, _CANCELLED)
        self._release(quiet=False)

    def _release(self, *, quiet: bool) -> None:
        # In a copy of the stream's context: close() may come from another thread while the
        # reader's next() has the context itself entered (one thread at a time may enter it).
        run = self._context.copy().run
        for target in self._targets(_EXHAUSTED):
            close = getattr(target, "close", None)
            if close is None or _running(target):
                continue
            try:
                run(close)
            except Exception as exc:
                if not quiet:
                    raise
                self._close_failed("closing a failed provider stream", exc)

    def __enter__(self) -> ManagedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_ASYNC_EXHAUSTED = _AsyncExhausted()
# Provider cleanups running after a stream's error (see ``ManagedAsyncStream._failed``).
_cleanups: set[asyncio.Task[None]] = set()


def exhausted_async() -> Any:
    """An async iterable with nothing in it."""
    return _AsyncExhausted()


class ManagedAsyncStream(_StreamWrapper):
    """An async managed stream; the attempt is the current scope while the provider produces each chunk."""

    __slots__ = ("_cleanup",)
    _iterator: AsyncIterator[Any]

    def __init__(self, source: Any, iterator: Any, life: StreamLifecycle) -> None:
        super().__init__(source, iterator, life)
        self._cleanup: asyncio.Task[None] | None = None

    def __aiter__(self) -> ManagedAsyncStream:
        return self

    async def __anext__(self) -> Any:
        life = self._life
        attempt = life.attempt
        tokens = attempt.enter()
        try:
            chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            attempt.leave(tokens)
            life.complete()
            raise
        except BaseException as exc:
            attempt.leave(tokens)
            raise await self._failed(exc)  # noqa: B904
        attempt.leave(tokens)
        try:
            stop = life.chunk(chunk)
        except BaseException as exc:
            raise await self._failed(exc)  # noqa: B904
        if stop is not None:
            await self._release(quiet=True)
            self._iterator = _Raising(stop)
        return chunk

    async def _failed(self, exc: BaseException) -> BaseException:
        """The attempt ends with ``exc``; the provider's cleanup starts now and ``aclose()`` waits for it.

        As in NeMo Relay, the error reaches the caller at once: a provider whose ``aclose`` hangs
        must not hang the caller's ``anext()`` (only its own ``aclose()``).
        """
        exc = surfaced(exc)
        try:
            self._life.fail(exc)
        finally:
            await self._release_behind()
        return exc

    async def _release_behind(self) -> None:
        """Close the provider's stream in a task of its own on the running loop, started before returning."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio, say): close it inline, as before
            await self._release(quiet=True)
            return
        task = loop.create_task(self._release(quiet=True))
        self._cleanup = task
        _cleanups.add(task)  # the loop holds tasks weakly: kept alive until done
        task.add_done_callback(_cleanups.discard)
        # One turn of the loop: a cleanup that does not wait on anything is done before the caller hears.
        await asyncio.sleep(0)

    async def _read_ahead(self) -> tuple[bool, Any]:
        """``ManagedStream._read_ahead`` for async streams."""
        attempt = self._life.attempt
        tokens = attempt.enter()
        try:
            chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            attempt.leave(tokens)
            return False, None
        except BaseException as exc:
            attempt.leave(tokens)
            raise await self._failed(exc)  # noqa: B904
        attempt.leave(tokens)
        self._iterator = _Prepended(chunk, self._iterator)
        return True, chunk

    async def aclose(self) -> None:
        self._life.fail(None, _CANCELLED)
        cleanup = self._cleanup
        if cleanup is not None:
            self._cleanup = None
            await cleanup  # the provider's cleanup after its error: closed means closed
        await self._release(quiet=False)

    async def close(self) -> None:
        """The SDKs' async streams close with an awaited ``close()``: ``aclose``, under that name."""
        await self.aclose()

    async def _release(self, *, quiet: bool) -> None:
        for target in self._targets(_ASYNC_EXHAUSTED):
            if _running(target):
                continue
            try:
                await _aclose(target)
            except Exception as exc:
                if not quiet:
                    raise
                self._close_failed("closing a failed provider stream", exc)

    async def __aenter__(self) -> ManagedAsyncStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Prepended:
    """An async iterator that yields ``first``, then whatever ``rest`` does; closing it closes ``rest``."""

    __slots__ = ("first", "rest")

    def __init__(self, first: Any, rest: AsyncIterator[Any]) -> None:
        self.first: Any = _UNSET
        self.first = first
        self.rest = rest

    def __aiter__(self) -> _Prepended:
        return self

    async def __anext__(self) -> Any:
        first = self.first
        if first is not _UNSET:
            self.first = _UNSET
            return first
        return await self.rest.__anext__()

    async def aclose(self) -> None:
        await _aclose(self.rest)


_UNSET: Any = object()
