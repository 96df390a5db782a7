"""``relay.llm``: managed LLM calls in four calling conventions over one lifecycle.

Each convention comes in two halves: the public method (``execute``, ...) builds
the ``Attempt`` from the caller's arguments, and ``run`` (``run_async``,
``open_stream``, ``open_stream_async``) drives an attempt already built. The
session layer (``relay_runtime.calls``) builds its attempts itself and calls
the second half directly.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextvars import copy_context
from typing import TYPE_CHECKING, Any

from . import chains
from .attempt import Attempt, FinishHook, attempt_metadata, current_attempt, reset_current, set_current
from .attempt_request import Paused
from .codec import LLMCodec
from .intercepts import LLM_EXECUTION, LLM_STREAM_EXECUTION
from .scopes import ScopeHandle
from .streams import ManagedAsyncStream, ManagedStream, StreamLifecycle
from .types import LLMRequest, Outcome

if TYPE_CHECKING:
    from .relay import Relay

__all__ = ["LLM", "current_attempt"]

_SUCCESS = Outcome.SUCCESS.value


def _not_callable(name: str, argument: str, value: Any) -> TypeError:
    """Raised before the attempt opens: else an attempt that never reached a provider is recorded as failed."""
    return TypeError(f"LLM call {name!r}: {argument} must be callable, got {type(value).__name__}")


class LLM:
    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self._subscribers = relay.subscribers
        self._intercepts = relay.intercepts
        self._cost = relay.cost

    def _watched(self, on_finish: FinishHook | None) -> bool:
        """Whether the call needs an attempt at all: someone listens, some policy applies, or a hook waits."""
        return self._subscribers.llm or self._intercepts.active or on_finish is not None or self._cost.active

    def execute(
        self,
        name: str,
        request: LLMRequest,
        callback: Callable[[LLMRequest], Any],
        *,
        parent: ScopeHandle | None = None,
        model_name: str | None = None,
        metadata: dict[str, Any] | None = None,
        codec: LLMCodec | None = None,
        on_finish: FinishHook | None = None,
    ) -> Any:
        """Run ``callback(request)`` as one managed attempt; its exception propagates unchanged."""
        if not self._watched(on_finish):
            return callback(request)
        if not callable(callback):  # inline: this runs on every managed call
            raise _not_callable(name, "callback", callback)
        attempt = Attempt(self._relay, name, request, parent, model_name, attempt_metadata(metadata), codec, on_finish)
        return self.run(attempt, callback)

    def run(self, attempt: Attempt, callback: Callable[[LLMRequest], Any]) -> Any:
        """``execute`` for an attempt built by the caller."""
        relay = attempt.relay
        if relay.intercepts.active or relay.cost.active:
            request = attempt.prepare()
        else:  # ``prepare``'s own shortcut (no policy can refuse or change the call), without its frame
            request = attempt._started(attempt.request)
        chain = attempt.chains.get(LLM_EXECUTION) if attempt.chains else None
        # ``attempt.enter()`` and ``leave``, inline: two frames and a tuple fewer on every managed call.
        stack = relay.scope._stack
        scope_token = stack.set(attempt.handle)
        token = set_current(attempt)
        attempt.waiting = True
        try:
            response = chains.run_sync(chain, attempt.name, request, callback, attempt) if chain else callback(request)
        except BaseException as exc:
            attempt.waiting = False
            stack.reset(scope_token)
            reset_current(token)
            attempt.fail(exc)
            raise
        attempt.waiting = False
        stack.reset(scope_token)
        reset_current(token)
        if attempt.chains or attempt.fallback is not None or attempt.hold is not None:
            return attempt.succeed(response)
        # ``succeed``'s plain case (no response intercept, no fallback, nothing held), without its frame.
        attempt.finish(_SUCCESS, response, None, None)
        return response

    async def execute_async(
        self,
        name: str,
        request: LLMRequest,
        callback: Callable[[LLMRequest], Awaitable[Any]],
        *,
        parent: ScopeHandle | None = None,
        model_name: str | None = None,
        metadata: dict[str, Any] | None = None,
        codec: LLMCodec | None = None,
        on_finish: FinishHook | None = None,
    ) -> Any:
        if not self._watched(on_finish):
            return await callback(request)
        if not callable(callback):  # inline: this runs on every managed call
            raise _not_callable(name, "callback", callback)
        attempt = Attempt(self._relay, name, request, parent, model_name, attempt_metadata(metadata), codec, on_finish)
        return await self.run_async(attempt, callback)

    async def run_async(self, attempt: Attempt, callback: Callable[[LLMRequest], Awaitable[Any]]) -> Any:
        """``execute_async`` for an attempt built by the caller."""
        if self._intercepts.async_policy:
            request = await attempt.prepare_async()
        else:
            try:
                request = attempt.prepare(False, True)
            except Paused as paused:  # a plain intercept returned an awaitable: awaited from there on
                request = await attempt.prepare_async(False, paused)
        chain = attempt.chains.get(LLM_EXECUTION)
        tokens = attempt.enter()
        attempt.waiting = True
        try:
            response = await (
                chains.run_async(chain, attempt.name, request, callback, attempt) if chain else callback(request)
            )
        except BaseException as exc:
            attempt.waiting = False
            attempt.leave(tokens)
            attempt.fail(exc)
            raise
        attempt.waiting = False
        attempt.leave(tokens)
        return attempt.succeed(response)

    def stream(
        self,
        name: str,
        request: LLMRequest,
        stream_factory: Callable[[LLMRequest], Iterable[Any]],
        *,
        parent: ScopeHandle | None = None,
        model_name: str | None = None,
        metadata: dict[str, Any] | None = None,
        codec: LLMCodec | None = None,
        on_finish: FinishHook | None = None,
    ) -> Any:
        """Open a provider stream as one attempt; the result yields the provider's own chunks.

        Opening happens now, so an error opening the stream (an HTTP error, say)
        raises here, as it does from the SDK.
        """
        if not self._watched(on_finish):
            return stream_factory(request)
        if not callable(stream_factory):  # inline: this runs on every managed call
            raise _not_callable(name, "stream_factory", stream_factory)
        attempt = Attempt(self._relay, name, request, parent, model_name, attempt_metadata(metadata), codec, on_finish)
        return self.open_stream(attempt, stream_factory)

    def open_stream(self, attempt: Attempt, stream_factory: Callable[[LLMRequest], Iterable[Any]]) -> Any:
        """``stream`` for an attempt built by the caller.

        The stream gets a context of its own in which the attempt is current: the
        provider is opened and read in it, however lazily it starts its work.
        """
        relay = attempt.relay
        if relay.intercepts.active or relay.cost.active:
            request = attempt.prepare(True)
        else:  # as in ``run``
            request = attempt._started(attempt.request)
        chain = attempt.chains.get(LLM_STREAM_EXECUTION) if attempt.chains else None
        context = copy_context()
        run = context.run
        # ``attempt.enter()`` in the stream's context, without its frame and the tokens no one resets there.
        run(relay.scope._stack.set, attempt.handle)
        run(set_current, attempt)
        try:
            # No execution intercept (``run_sync``'s own shortcut, without its frame): the factory itself.
            source = (
                run(chains.run_sync, chain, attempt.name, request, stream_factory, attempt, True)
                if chain
                else run(stream_factory, request)
            )
            iterator: Iterator[Any] = run(iter, source)
        except BaseException as exc:
            attempt.fail(exc)
            raise
        return ManagedStream(source, iterator, StreamLifecycle(attempt), context)

    async def stream_async(
        self,
        name: str,
        request: LLMRequest,
        stream_factory: Callable[[LLMRequest], Any],
        *,
        parent: ScopeHandle | None = None,
        model_name: str | None = None,
        metadata: dict[str, Any] | None = None,
        codec: LLMCodec | None = None,
        on_finish: FinishHook | None = None,
    ) -> Any:
        """``stream`` for async providers: ``stream_factory`` returns an async iterable or an awaitable of one."""
        if not self._watched(on_finish):
            return await _open_async(stream_factory, request)
        if not callable(stream_factory):  # inline: this runs on every managed call
            raise _not_callable(name, "stream_factory", stream_factory)
        attempt = Attempt(self._relay, name, request, parent, model_name, attempt_metadata(metadata), codec, on_finish)
        return await self.open_stream_async(attempt, stream_factory)

    async def open_stream_async(self, attempt: Attempt, stream_factory: Callable[[LLMRequest], Any]) -> Any:
        """``stream_async`` for an attempt built by the caller."""
        if self._intercepts.async_policy:
            request = await attempt.prepare_async(True)
        else:
            try:
                request = attempt.prepare(True, True)
            except Paused as paused:
                request = await attempt.prepare_async(True, paused)
        chain = attempt.chains.get(LLM_STREAM_EXECUTION, ())
        tokens = attempt.enter()
        try:
            source = await chains.run_async(
                chain, attempt.name, request, lambda r: _open_async(stream_factory, r), attempt, True
            )
            iterator: AsyncIterator[Any] = source.__aiter__()
        except BaseException as exc:
            attempt.leave(tokens)
            attempt.fail(exc)
            raise
        attempt.leave(tokens)
        return ManagedAsyncStream(source, iterator, StreamLifecycle(attempt))


async def _open_async(factory: Callable[[LLMRequest], Any], request: LLMRequest) -> Any:
    source = factory(request)
    if inspect.isawaitable(source):
        source = await source
    if not hasattr(source, "__aiter__"):
        raise TypeError(f"async stream factory must produce an async iterable, got {type(source).__name__}")
    return source
