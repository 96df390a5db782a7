"""One public ``google-genai`` call as one logical call, however many HTTP requests the SDK makes for it.

``generate_content`` runs automatic function calling (and automatic continuation) itself: it
sends a request, runs the Python functions the model asked for, and sends again, until the
model answers. A chat's ``send_message`` does the same over ``generate_content``. The public
method (the outermost one, when a chat calls ``generate_content``) opens a logical call of the
managed turn, every request made inside it is an attempt of that call, every Python function
the SDK runs for it a tool scope, and the call closes when the method returns (a stream: when
it is read out or closed) with its last attempt's outcome, or the outcome of what it raised.

Inside an ``@auxiliary_call`` or a framework's model call the logical call is theirs: the
attempts join it. Inside an attempt someone else makes (``inside_attempt``: dispatch's own SDK
call, a LangChain chat model under ``RelayMiddleware``) the request is that attempt: nothing is
opened here, and each request passes straight through. Outside a managed turn each attempt is its
own logical call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from relay_runtime import auxiliary, calls, logical_calls, session
from relay_runtime import conventions as cv
from relay_runtime.scopes import outcome_of
from relay_runtime.session import Turn
from relay_runtime.streams import fail_stream
from relay_runtime.types import Outcome

from .. import dispatch

_SUCCESS = Outcome.SUCCESS.value
_CANCELLED = Outcome.CANCELLED.value
_ROLE = "primary"


class Group:
    """The logical call a public method opened, while it runs. Its attempts are made of it directly
    (``calls.attempt_of``: no metadata merge, no lookup by id); ``metadata`` names it for ``calls``' own way."""

    __slots__ = ("call", "closed", "streams", "turn")

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.call = calls.open_call_in(turn, None, _ROLE)
        self.closed = False
        # Its async attempts' managed streams, closed with the public stream (``keep``); made by the first, not by
        # every call.
        self.streams: list[Any] | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        return {cv.API_REQUEST_ID: self.call.api_request_id, cv.CALL_ROLE: _ROLE}

    def keep(self, stream: Any) -> None:
        """An async attempt's managed stream: closed with the public stream (``GroupedAsyncIterator.aclose``)."""
        if self.streams is None:
            self.streams = [stream]
        else:
            self.streams.append(stream)

    def close(self, error: BaseException | None, outcome: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        turn = self.turn
        call = self.call
        if outcome is None:
            outcome = outcome_of(error) if error is not None else (call.last_outcome or _SUCCESS)
        try:
            # False when the turn ended first and closed it (or is closing it).
            logical_calls.close_logical_call(turn, call, outcome)
        except Exception as exc:
            turn.relay.diag.failure("bookkeeping_errors", exc, f"completing logical call {call.api_request_id!r}")


current: ContextVar[Group | None] = ContextVar("relay_genai_group", default=None)
# True while a managed attempt runs the code that calls the SDK: the one flag every adapter passes through on.
inside_attempt = dispatch.inside_sdk_call


def _open() -> Group | None:
    if current.get() is not None or auxiliary.in_auxiliary_call() or inside_attempt.get():
        return None  # a chat's generate_content, a logical call someone else holds, or an attempt they make
    turn = session.managed_turn()
    return Group(turn) if turn is not None else None


def grouped(call: Callable[..., Any], streaming: bool, /, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` (a public method) as one logical call; a stream's is closed when the stream ends.

    The arguments come as the caller gave them: an instrumented method is this function with its first two
    bound by a ``partial`` (no Python frame of its own around every call)."""
    group = _open()
    if group is None:
        return call(*args, **kwargs)
    token = current.set(group)
    try:
        result = call(*args, **kwargs)
    except BaseException as exc:
        group.close(exc)
        raise
    finally:
        current.reset(token)
    if streaming:
        stream = _grouped_stream(group, result)
        next(stream)  # started: see ``_grouped_stream``
        return stream
    group.close(None)
    return result


async def grouped_async(call: Callable[..., Any], streaming: bool, /, *args: Any, **kwargs: Any) -> Any:
    group = _open()
    if group is None:
        result = call(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result
    token = current.set(group)
    try:
        result = call(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
    except BaseException as exc:
        group.close(exc)
        raise
    finally:
        current.reset(token)
    if streaming:
        return GroupedAsyncIterator(group, result)
    group.close(None)
    return result


def _grouped_stream(group: Group, source: Iterator[Any]) -> Iterator[Any]:
    """A public method's stream, read with its logical call current; the call closes when it ends.

    A generator (as the SDK's own stream is), not a class with a ``__next__``: the source's end is its ``for``
    loop's, where a ``__next__`` caught the ``StopIteration`` the source raised and raised it again, at every stream's
    end (the exception, its traceback and a frame more on every chunk cost more than the rest of this layer).
    ``grouped`` starts it at its first ``yield``: closed or dropped before its first chunk, the call still closes.
    The call is current only while the source runs (each step between setting and resetting it): never at a yield,
    where the caller's own code runs, in whatever context it resumes this in.
    """
    token = None
    try:
        yield None  # where ``grouped`` starts it
        token = current.set(group)
        for chunk in source:
            current.reset(token)
            token = None
            yield chunk
            token = current.set(group)
        group.close(None)  # read out: its call ends with its last attempt's outcome
    except GeneratorExit:
        # Closed at a yield (``close()``, or dropped unread): the source is closed with the call current, then the
        # call ends cancelled (one read out closed it already: a stream still open was stopped early).
        if token is None:
            token = current.set(group)
        try:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        finally:
            current.reset(token)
            token = None
            group.close(None, _CANCELLED)
        raise
    except BaseException as exc:  # the source failed (or the caller threw into a yield)
        group.close(exc)
        raise
    finally:
        if token is not None:
            current.reset(token)


class GroupedAsyncIterator:
    __slots__ = ("group", "source")

    def __init__(self, group: Group, source: Any) -> None:
        self.group = group
        self.source = source.__aiter__()

    def __aiter__(self) -> GroupedAsyncIterator:
        return self

    async def __anext__(self) -> Any:
        token = current.set(self.group)
        try:
            return await self.source.__anext__()
        except StopAsyncIteration:
            self.group.close(None)
            raise
        except BaseException as exc:
            self.group.close(exc)
            raise
        finally:
            current.reset(token)

    async def aclose(self) -> None:
        token = current.set(self.group)
        try:
            close = getattr(self.source, "aclose", None)
            if close is not None:
                await close()
        finally:
            current.reset(token)
            await self._close_group()

    async def _close_group(self) -> None:
        group = self.group
        try:
            if not group.closed:
                # Closing the SDK's async generator leaves the request it was reading open until the event loop
                # finalizes it: closed here, its attempt ends (cancelled) before the call it is part of.
                for stream in group.streams or ():
                    await stream.aclose()
        finally:
            # Not the last attempt's outcome: the call was stopped before its stream ended.
            group.close(None, _CANCELLED)

    def __del__(self) -> None:
        try:
            group = self.group
        except AttributeError:
            return
        if group.closed:  # the stream ended or was closed
            return
        # Dropped unclosed (``async for ... break``, a cancelled reader): nothing can be awaited here, and the
        # SDK's generator waits for the loop to finalize it, so its attempts end now (cancelled), before their call.
        for stream in group.streams or ():
            fail_stream(stream, None, _CANCELLED)
        group.close(None, _CANCELLED)


# -- the Python functions automatic function calling runs -----------------------------------------


def _tool_name(function: Any) -> str:
    name = getattr(function, "__name__", None)
    return name if isinstance(name, str) and name else type(function).__name__


def invoke_tool(original: Callable[[Any, Any], Any], args: Any, function: Any) -> Any:
    """The SDK's ``invoke_function_from_dict_args(args, function)`` as a tool scope of the open logical call."""
    group = current.get()
    if group is None:
        return original(args, function)
    return group.turn.relay.tools.execute(_tool_name(function), args, lambda edited: original(edited, function))


async def invoke_tool_async(original: Callable[[Any, Any], Any], args: Any, function: Any) -> Any:
    group = current.get()
    if group is None:
        return await original(args, function)
    return await group.turn.relay.tools.execute_async(
        _tool_name(function), args, lambda edited: original(edited, function)
    )
