"""A tool's streamed result: the generator a tool's function returns, managed as a stream of its tool scope.

A tool that returns a generator (or an async generator) has not answered when it returns: its answer is
what the generator yields, and reading it may still fail. So its scope stays open, taken off the caller's
stack, until the caller's iteration ends it, once, as a managed LLM stream ends its attempt:

| how the iteration ends                                   | the tool scope |
|----------------------------------------------------------|----------------|
| the generator is exhausted                               | success |
| the generator raises                                     | failed (the same error re-raised) |
| ``close()`` / ``aclose()``, ``break``, garbage collected | cancelled |
| ``CancelledError``, ``KeyboardInterrupt``                | cancelled (re-raised) |
| an error the call's ``control_flow`` accepts             | success, ``{"control_flow": <class>}`` (re-raised) |

The caller gets the generator's own items (the same objects). The output is the list of items the caller
read, as far as it read (the first ``RECORDED_ITEMS``: a tool may stream without end, and the record is kept
whole until the scope ends), each recorded as a tool's result is (credential-keyed values in its text
blanked); the end's metadata counts them all (``conventions.TOOL_STREAMED_ITEMS``). While the generator
runs, in whichever thread or task reads it, the tool scope is the current scope: what it calls nests under
the tool.

Intercepts: tool request intercepts (the tools' guardrails) run before the function, as for any tool.
Execution intercepts run around the call that returns the generator; what the chain returns is the stream,
so an intercept that maps the items (a generator over its ``next``'s result) is what the caller reads and
the record holds. Their ``next`` works until the stream ends, as for an LLM stream; an error raised while
the items are read is past them (an intercept cannot retry it).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from types import AsyncGeneratorType, GeneratorType
from typing import TYPE_CHECKING, Any

from . import conventions as cv
from .streams import exhausted_async
from .tool_results import result_blanked
from .types import Outcome

if TYPE_CHECKING:
    from .chains import Live
    from .scopes import ScopeHandle
    from .tools import ControlFlow, Tools

RECORDED_ITEMS = 1000
# What a tool's function may return that ``execute`` makes a managed stream: its caller checks one type.
STREAMED = (GeneratorType, AsyncGeneratorType)

_CANCELLED = Outcome.CANCELLED.value


def _finished() -> Any:
    yield from ()


_EXHAUSTED: GeneratorType[Any, Any, None] = _finished()
next(_EXHAUSTED, None)  # a finished generator: what a closed stream reads from
_ASYNC_EXHAUSTED = exhausted_async()


def managed(
    tools: Tools, handle: ScopeHandle, result: Any, owner: Live | None, control_flow: ControlFlow | None
) -> ManagedToolStream | ManagedAsyncToolStream:
    """``result`` (a ``STREAMED`` value) as a stream of ``handle``, which leaves the caller's stack now, open."""
    scope = tools._relay.scope
    if scope.current() is handle:
        scope._stack.set(handle.below)
    handle.attached = False  # ended later, from wherever the iteration ends: no stack to check then
    record = ToolStream(tools, handle, owner, control_flow)
    if type(result) is GeneratorType:
        return ManagedToolStream(result, record)
    return ManagedAsyncToolStream(result, record)


class ToolStream:
    """What a streamed result records, the same for sync and async generators: its items, and one end."""

    __slots__ = ("_ended", "control_flow", "count", "handle", "items", "owner", "tools")

    def __init__(self, tools: Tools, handle: ScopeHandle, owner: Live | None, control_flow: ControlFlow | None) -> None:
        self.tools = tools
        self.handle = handle
        self.owner = owner
        self.control_flow = control_flow
        self.items: list[Any] = []
        self.count = 0
        # Acquired by the first end and never released: an end on one thread (close) racing one on another
        # (the reader's last read) records one.
        self._ended = threading.Lock()

    def enter(self) -> Any:
        """Make the tool scope current in this context while its generator runs; ``leave`` undoes it."""
        return self.tools._relay.scope._stack.set(self.handle)

    def leave(self, token: Any, error: BaseException | None) -> None:
        """Undo ``enter``; an ``error`` the generator's step raised ends the scope (exhaustion: a success)."""
        self.tools._relay.scope._stack.reset(token)
        if error is None:
            return
        if isinstance(error, (StopIteration, StopAsyncIteration)):
            self.end(None, None)
        else:
            self.end(error, None)

    def item(self, item: Any) -> Any:
        if not self._ended.locked():  # read after a close from another thread: the caller's, unrecorded
            self.count += 1
            if len(self.items) < RECORDED_ITEMS:
                self.items.append(item)
        return item

    def end(self, error: BaseException | None, outcome: str | None) -> None:
        if not self._ended.acquire(blocking=False):
            return
        if self.owner is not None:
            self.owner.live = False
        tools = self.tools
        # Each item as a tool's result is recorded (a list is walked by the key rule only, its texts unread).
        output = [result_blanked(item) for item in self.items] if tools._relay.subscribers.end else None
        metadata = {cv.TOOL_STREAMED_ITEMS: self.count}
        if error is not None:
            tools._ended_by(self.handle, error, self.control_flow, output, metadata)
        else:
            tools._relay.scope.pop(self.handle, output=output, metadata=metadata, outcome=outcome)


class _Managed:
    __slots__ = ("_gen", "_record")

    def __init__(self, gen: Any, record: ToolStream) -> None:
        self._gen = gen
        self._record = record

    def __del__(self) -> None:
        try:
            record = self._record
        except AttributeError:  # __init__ never ran to the end
            return
        record.end(None, _CANCELLED)  # a no-op once ended

    def __repr__(self) -> str:
        return f"<managed tool stream {self._record.handle.name!r} of {self._gen!r}>"


class ManagedToolStream(_Managed):
    """A tool's generator, managed: iterate it, or ``close()`` it (also by a context manager)."""

    __slots__ = ()
    _gen: GeneratorType[Any, Any, Any]

    def _run(self, step: Callable[[], Any]) -> Any:
        record = self._record
        token = record.enter()
        try:
            value = step()
        except BaseException as exc:
            record.leave(token, exc)
            raise
        record.leave(token, None)
        return value

    def __iter__(self) -> ManagedToolStream:
        return self

    def __next__(self) -> Any:
        return self._record.item(self._run(self._gen.__next__))

    def close(self) -> None:
        """Stop early: the generator is closed (its cleanup under the tool scope), the tool ends cancelled."""
        gen, self._gen = self._gen, _EXHAUSTED
        if gen is not _EXHAUSTED and not gen.gi_running:  # running: read on another thread, closed by its end
            self._run(gen.close)
        self._record.end(None, _CANCELLED)

    def __del__(self) -> None:
        # Closed here, under the tool scope, before the tool ends: left to its own finalizer, the generator's
        # cleanup (a scope it holds open across a yield) would run after the tool's end, outside it.
        gen = getattr(self, "_gen", _EXHAUSTED)
        if gen is not _EXHAUSTED and not gen.gi_running:
            self.close()
        super().__del__()

    def __enter__(self) -> ManagedToolStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ManagedAsyncToolStream(_Managed):
    """A tool's async generator, managed: iterate it, or ``aclose()`` it (also by an async context manager)."""

    __slots__ = ()
    _gen: AsyncGeneratorType[Any, Any]

    async def _run(self, step: Awaitable[Any]) -> Any:
        record = self._record
        token = record.enter()
        try:
            value = await step
        except BaseException as exc:
            record.leave(token, exc)
            raise
        record.leave(token, None)
        return value

    def __aiter__(self) -> ManagedAsyncToolStream:
        return self

    async def __anext__(self) -> Any:
        return self._record.item(await self._run(self._gen.__anext__()))

    async def aclose(self) -> None:
        """``ManagedToolStream.close`` for async generators."""
        gen, self._gen = self._gen, _ASYNC_EXHAUSTED
        if gen is not _ASYNC_EXHAUSTED and not gen.ag_running:
            await self._run(gen.aclose())
        self._record.end(None, _CANCELLED)

    async def __aenter__(self) -> ManagedAsyncToolStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
