"""``relay.tools``: a managed tool call (a TOOL scope around request and execution intercepts)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from . import chains
from . import conventions as cv
from .intercepts import TOOL_EXECUTION, TOOL_REQUEST
from .scopes import ScopeHandle
from .types import ScopeType

if TYPE_CHECKING:
    from .relay import Relay


class Tools:
    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    def _open(
        self, name: str, args: Any, parent: ScopeHandle | None, metadata: dict[str, Any] | None
    ) -> tuple[ScopeHandle, tuple[Any, ...], tuple[Any, ...]]:
        """The tool's scope, and its request and execution chains (resolved now, once: registrations
        made during the call apply to later calls)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool name must be a non-empty string, got {name!r}")
        relay = self._relay
        intercepts = relay.intercepts
        anchor = parent if parent is not None else relay.scope.current()
        resolved = intercepts.resolve(anchor) if intercepts.active else {}
        handle = relay.scope.push(
            name,
            ScopeType.TOOL,
            parent=parent,
            input=args,
            metadata={cv.KIND: cv.TOOL, **(metadata or {})},
        )
        return handle, resolved.get(TOOL_REQUEST, ()), resolved.get(TOOL_EXECUTION, ())

    def _begin(
        self, name: str, args: Any, parent: ScopeHandle | None, metadata: dict[str, Any] | None
    ) -> tuple[ScopeHandle, Any, tuple[Any, ...]]:
        handle, requests, executions = self._open(name, args, parent, metadata)
        try:
            args = chains.run_filters(requests, lambda e, a: e.fn(name, a), args)
        except BaseException as exc:
            self._relay.scope.pop(handle, error=exc)
            raise
        return handle, args, executions

    async def _begin_async(
        self, name: str, args: Any, parent: ScopeHandle | None, metadata: dict[str, Any] | None
    ) -> tuple[ScopeHandle, Any, tuple[Any, ...]]:
        """``_begin`` for async tools: a request intercept may be a coroutine function, awaited here,
        on the caller's loop (as NeMo Relay does, and as LLM request intercepts are)."""
        handle, requests, executions = self._open(name, args, parent, metadata)
        try:
            for entry in requests:
                args = entry.fn(name, args)
                if chains.is_awaitable(args):
                    args = await args
                if entry.break_chain:
                    break
        except BaseException as exc:
            self._relay.scope.pop(handle, error=exc)
            raise
        return handle, args, executions

    def execute(
        self,
        name: str,
        args: Any,
        fn: Callable[[Any], Any],
        *,
        parent: ScopeHandle | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        handle, args, executions = self._begin(name, args, parent, metadata)
        owner = chains.Live()
        try:
            result = chains.run_sync(executions, name, args, fn, owner)
        except BaseException as exc:
            self._relay.scope.pop(handle, error=exc)
            raise
        finally:
            owner.live = False
        self._relay.scope.pop(handle, output=result)
        return result

    async def execute_async(
        self,
        name: str,
        args: Any,
        fn: Callable[[Any], Awaitable[Any] | Any],
        *,
        parent: ScopeHandle | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        handle, args, executions = await self._begin_async(name, args, parent, metadata)

        async def terminal(a: Any) -> Any:
            out = fn(a)
            return await out if inspect.isawaitable(out) else out

        owner = chains.Live()
        try:
            result = await chains.run_async(executions, name, args, terminal, owner)
        except BaseException as exc:
            self._relay.scope.pop(handle, error=exc)
            raise
        finally:
            owner.live = False
        self._relay.scope.pop(handle, output=result)
        return result
