"""``with_raw_response`` / ``with_streaming_response`` of an instrumented SDK method, as one attempt.

The attempt opens with the request and ends when the caller has read the body (``parse``,
``read``, ``text``, ``json``, iterating it) with what the body said, or cancelled when the
caller closes it unread. The SDK's raw response comes back wrapped in a transparent proxy
that watches those reads.
"""

from __future__ import annotations

import inspect
import json
from collections import deque
from collections.abc import Callable
from typing import Any

import wrapt

from relay_runtime import calls
from relay_runtime.streams import adopt_source, fail_stream, finish_whole

from . import dispatch
from .endpoints import Endpoint
from .sse_body import SseFeed


class _Body:
    """The source of a raw response's managed attempt: empty until the caller parses a streamed body."""

    def __init__(self) -> None:
        self.stream: Any = None

    def __iter__(self) -> _Body:
        return self

    def __next__(self) -> Any:
        if self.stream is None:
            raise StopIteration
        return next(self.stream)

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> Any:
        if self.stream is None:
            raise StopAsyncIteration
        return await self.stream.__anext__()

    def close(self) -> None:
        pass  # the raw response owns the connection: its own close() releases it

    def __getattr__(self, name: str) -> Any:
        # The SDK stream a parse gave stands behind the body; the queue of a body read raw is the body's own.
        if name.startswith("__") or self.stream is None or type(self.stream) is _Queue:
            raise AttributeError(name)
        return getattr(self.stream, name)

    def queue(self) -> _Queue:
        """The events of a streamed body its caller reads raw, handed to the managed stream one by one."""
        if type(self.stream) is not _Queue:
            self.stream = _Queue()
        return self.stream


class _Queue:
    """Events waiting for the managed stream to read them; empty, it ends the stream."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: deque[Any] = deque()

    def __next__(self) -> Any:
        if not self.items:
            raise StopIteration
        return self.items.popleft()

    async def __anext__(self) -> Any:
        if not self.items:
            raise StopAsyncIteration
        return self.items.popleft()


def _open_raw(
    client: Any, mode: str, kwargs: dict[str, Any], is_async: bool, provider: Endpoint | None
) -> tuple[Any, Any, dict[str, Any], _Body]:
    """The API, the request and the attempt's options as dispatch prepares them, and the stream's source."""
    entry = ("astream" if is_async else "stream") if kwargs.get("stream") else ("acomplete" if is_async else "complete")
    prepared = dispatch.prepare(kwargs, mode, client, entry, provider)
    api, _create, request, name, model_name, metadata, auxiliary = prepared
    options: dict[str, Any] = {"name": name, "model_name": model_name, "metadata": metadata, "codec": api.codec}
    if auxiliary and not kwargs.get("stream"):
        # One body answering an auxiliary call: held for validation, as a plain create() is.
        options["defer_logical_completion"] = True
    return api, request, options, _Body()


def _opened(cls: type[Any], raw: Any, managed: Any, body: _Body, kwargs: dict[str, Any], kind: str) -> tuple[Any, bool]:
    """What the caller gets, and whether the body is already read (then it is parsed now, ending the attempt)."""
    if managed is body:  # unmanaged: no turn or no consumer
        return raw, False
    if _read_already(kwargs, kind):
        return raw, True
    return _watch(cls, raw, managed, body, kwargs, kind), False


def raw_call(client: Any, mode: str, wrapped: Any, kwargs: dict[str, Any], kind: str, provider: Endpoint | None) -> Any:
    api, request, options, body = _open_raw(client, mode, kwargs, False, provider)
    holder: list[Any] = []

    def open_body(**sent: Any) -> _Body:
        holder.append(wrapped(**sent))
        return body

    callback = dispatch.sync_callback(open_body, client, api, direct=False)
    managed = calls.stream_current(request, callback, **options)
    out, read = _opened(WatchedResponse, holder[0], managed, body, kwargs, kind)
    if read:
        try:
            parsed = out.parse()
        except Exception:
            parsed = None
        finish_whole(managed, parsed)
    return out


async def araw_call(
    client: Any, mode: str, wrapped: Any, kwargs: dict[str, Any], kind: str, provider: Endpoint | None
) -> Any:
    api, request, options, body = _open_raw(client, mode, kwargs, True, provider)
    holder: list[Any] = []

    async def open_body(**sent: Any) -> _Body:
        holder.append(await wrapped(**sent))
        return body

    callback = dispatch.async_callback(open_body, client, api, direct=False)
    managed = await calls.stream_current_async(request, callback, **options)
    out, read = _opened(AsyncWatchedResponse, holder[0], managed, body, kwargs, kind)
    if read:
        try:
            parsed = out.parse()  # synchronous for openai's legacy response, a coroutine for anthropic's
            if inspect.isawaitable(parsed):
                parsed = await parsed
        except Exception:
            parsed = None
        finish_whole(managed, parsed)
    return out


# "true": openai's with_raw_response (a legacy response, synchronous for both clients);
# "raw": anthropic's. Either way the SDK read the body before returning, unless the call streams.
_READ_BEFORE_RETURN = frozenset({"true", "raw"})


def _read_already(kwargs: dict[str, Any], kind: str) -> bool:
    return kind in _READ_BEFORE_RETURN and not kwargs.get("stream")


def _watch(cls: type[Any], raw: Any, managed: Any, body: _Body, kwargs: dict[str, Any], kind: str) -> Any:
    watched = (LegacyWatchedResponse if kind == "true" else cls)(raw)
    watched._self_managed = managed
    watched._self_body = body
    watched._self_streamed = bool(kwargs.get("stream"))
    return watched


class _Watched(wrapt.ObjectProxy):
    """What both flavours share: settling the attempt from what the body said."""

    _self_managed: Any
    _self_body: _Body
    _self_streamed: bool
    _self_unread = False  # the managed stream reads no more events (it ended, or a budget stopped it)

    def _relay_parsed(self, result: Any) -> Any:
        if self._self_streamed:
            # A streamed body parses to the SDK's stream: the managed stream reads it, chunk by chunk,
            # and stands for it (its type, attributes and close()).
            self._self_body.stream = result
            adopt_source(self._self_managed, result)
            return self._self_managed
        finish_whole(self._self_managed, result)
        return result

    def _relay_read_done(self, result: Any = None) -> None:
        """The body is in memory: end the attempt with its parsed form (or none, if it does not parse)."""
        if self._self_streamed:
            self._relay_stream_end(_events_of(result))
            return
        try:
            parsed = self.__wrapped__.parse()
        except Exception:
            parsed = None
        finish_whole(self._self_managed, parsed)

    # A streamed body the caller reads raw: its events (``SseFeed``) are read by the managed stream as they come
    # (chunk marks, the first chunk's time, a budget's meter), as it reads the SDK's chunks, and the attempt ends
    # with what they said (or as a stream cut short). Nothing the stream raises reaches the caller, who has the
    # body already. The sync and async flavours differ only in how they pull the managed stream.

    def _relay_queued(self, events: list[Any]) -> Any:
        """Queue each of ``events`` for the managed stream, yielding after each: the caller pulls it then."""
        if events and not self._self_unread:
            queue = self._self_body.queue()
            for event in events:
                queue.items.append(event)
                yield event

    def _relay_unfed(self) -> bool:
        """At the body's end: whether no event came (no server-sent events); then it ends as before, unread."""
        if type(self._self_body.stream) is _Queue:
            return False
        finish_whole(self._self_managed, None)
        return True

    def _relay_unread(self) -> None:
        """The managed stream raised on a pull: it reads nothing more, so the caller's later events are not kept
        for it (the rest of the body would be held in the queue, however long)."""
        self._self_unread = True
        if type(self._self_body.stream) is _Queue:
            self._self_body.stream.items.clear()

    def _relay_pull(self) -> None:
        try:
            next(self._self_managed)
        except Exception:  # StopIteration at the end, or once the attempt ended (a budget stopped it)
            self._relay_unread()

    def _relay_events(self, events: list[Any]) -> None:
        for _event in self._relay_queued(events):
            self._relay_pull()

    def _relay_stream_end(self, events: list[Any]) -> None:
        self._relay_events(events)
        if not self._relay_unfed():
            self._relay_pull()  # the queue is empty: the managed stream ends

    def _relay_failed(self, error: BaseException) -> None:
        fail_stream(self._self_managed, error)

    def _relay_closed(self) -> None:
        fail_stream(self._self_managed, None, "cancelled")


# ``json()`` reads the whole body, then parses it: a body that is no JSON document (a stream's events) raises
# the caller's ``ValueError`` after the provider said all it had to say. The attempt then ends with what the body
# said, as after ``read()``, not failed with the caller's parse error.
def _unparsed(name: str, exc: BaseException) -> bool:
    return name == "json" and isinstance(exc, ValueError)


def _reading(name: str) -> Callable[..., Any]:
    def read(self: WatchedResponse, *args: Any, **kwargs: Any) -> Any:
        try:
            result = getattr(self.__wrapped__, name)(*args, **kwargs)
        except BaseException as exc:
            body = None
            if _unparsed(name, exc):
                try:
                    body = self.__wrapped__.read()  # the bytes it read, kept by the response
                except Exception:
                    body = None
            if body is None:
                self._relay_failed(exc)
            else:
                self._relay_read_done(body)
            raise
        self._relay_read_done(result)
        return result

    read.__name__ = name
    return read


def _async_reading(name: str) -> Callable[..., Any]:
    async def read(self: AsyncWatchedResponse, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await getattr(self.__wrapped__, name)(*args, **kwargs)
        except BaseException as exc:
            body = None
            if _unparsed(name, exc):
                try:
                    body = await self.__wrapped__.read()
                except Exception:
                    body = None
            if body is None:
                self._relay_failed(exc)
            else:
                await self._relay_aread_done(body)
            raise
        await self._relay_aread_done(result)
        return result

    read.__name__ = name
    return read


class LegacyWatchedResponse(_Watched):
    """``with_raw_response`` of a streamed call: ``parse()`` gives the managed stream of its chunks."""

    def parse(self, **kwargs: Any) -> Any:
        try:
            result = self.__wrapped__.parse(**kwargs)
        except BaseException as exc:
            self._relay_failed(exc)
            raise
        return self._relay_parsed(result)


class _Collected:
    """What the caller's iteration of a body that is one JSON document gave, to record what the body said:
    the SDK can no longer parse a body its caller has consumed. A streamed body is read as it comes (``SseFeed``)."""

    __slots__ = ("parts", "separator")

    def __init__(self, name: str) -> None:
        self.parts: list[Any] = []
        self.separator = "\n" if name == "iter_lines" else ""  # lines come without their line breaks

    def add(self, part: Any) -> None:
        self.parts.append(part)

    def parsed(self) -> Any:
        """The decoded document (read by the codec as the SDK's object), or None when it is none."""
        parts = self.parts
        if not parts:
            return None
        try:
            if isinstance(parts[0], bytes):
                return json.loads(b"".join(parts))
            return json.loads(self.separator.join(parts))
        except (TypeError, ValueError):
            return None


class _Iterating:
    """The body's iterators, through the flavour's ``_iterate`` (which settles the attempt at their end)."""

    _iterate: Callable[..., Any]

    def iter_bytes(self, *args: Any, **kwargs: Any) -> Any:
        return self._iterate("iter_bytes", *args, **kwargs)

    def iter_text(self, *args: Any, **kwargs: Any) -> Any:
        return self._iterate("iter_text", *args, **kwargs)

    def iter_lines(self, *args: Any, **kwargs: Any) -> Any:
        return self._iterate("iter_lines", *args, **kwargs)


class WatchedResponse(LegacyWatchedResponse, _Iterating):
    """A sync SDK raw response whose attempt ends when its body has been read or closed."""

    read = _reading("read")
    text = _reading("text")
    json = _reading("json")

    def _iterate(self, name: str, *args: Any, **kwargs: Any) -> Any:
        feed, body = SseFeed(name) if self._self_streamed else None, _Collected(name)
        try:
            for part in getattr(self.__wrapped__, name)(*args, **kwargs):
                if feed is not None:
                    self._relay_events(feed.feed(part))
                else:
                    body.add(part)
                yield part
        except GeneratorExit:
            self._relay_closed()
            raise
        except BaseException as exc:
            self._relay_failed(exc)
            raise
        if feed is not None:
            self._relay_stream_end(feed.end())
        else:
            finish_whole(self._self_managed, body.parsed())

    def close(self) -> None:
        self._relay_closed()
        self.__wrapped__.close()


class AsyncWatchedResponse(_Watched, _Iterating):
    """The async flavour: the same settling, awaited."""

    async def parse(self, **kwargs: Any) -> Any:
        try:
            result = await self.__wrapped__.parse(**kwargs)
        except BaseException as exc:
            self._relay_failed(exc)
            raise
        return self._relay_parsed(result)

    async def _relay_aread_done(self, result: Any = None) -> None:
        if self._self_streamed:
            await self._relay_astream_end(_events_of(result))
            return
        try:
            parsed = await self.__wrapped__.parse()
        except Exception:
            parsed = None
        finish_whole(self._self_managed, parsed)

    read = _async_reading("read")
    text = _async_reading("text")
    json = _async_reading("json")

    async def _relay_apull(self) -> None:
        try:
            await self._self_managed.__anext__()
        except Exception:  # StopAsyncIteration at the end, or once the attempt ended
            self._relay_unread()

    async def _relay_aevents(self, events: list[Any]) -> None:
        for _event in self._relay_queued(events):
            await self._relay_apull()

    async def _relay_astream_end(self, events: list[Any]) -> None:
        await self._relay_aevents(events)
        if not self._relay_unfed():
            await self._relay_apull()

    async def _iterate(self, name: str, *args: Any, **kwargs: Any) -> Any:
        feed, body = SseFeed(name) if self._self_streamed else None, _Collected(name)
        try:
            async for item in getattr(self.__wrapped__, name)(*args, **kwargs):
                if feed is not None:
                    await self._relay_aevents(feed.feed(item))
                else:
                    body.add(item)
                yield item
        except GeneratorExit:
            self._relay_closed()
            raise
        except BaseException as exc:
            self._relay_failed(exc)
            raise
        if feed is not None:
            await self._relay_astream_end(feed.end())
        else:
            finish_whole(self._self_managed, body.parsed())

    async def close(self) -> None:
        self._relay_closed()
        await self.__wrapped__.close()


def _events_of(result: Any) -> list[Any]:
    """The events of a streamed body ``read()`` or ``text()`` returned whole."""
    feed = SseFeed("read")
    return [*feed.feed(result), *feed.end()]
