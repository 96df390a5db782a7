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


def _metadata(given: dict[str, Any] | None, tool_call_id: str | None) -> dict[str, Any]:
    metadata = {cv.KIND: cv.TOOL, **(given or {})}
    if tool_call_id is not None:
        metadata[cv.TOOL_CALL_ID] = tool_call_id
    return metadata


class Tools:
    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    def _begin(
        self,
        name: str,
        args: Any,
        parent: ScopeHandle | None,
        metadata: dict[str, Any] | None,
        tool_call_id: str | None,
    ) -> tuple[ScopeHandle, Any, tuple[Any, ...]]:
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool name must be a non-empty string, got {name!r}")
        if tool_call_id is not None and (not isinstance(tool_call_id, str) or not tool_call_id):
            raise ValueError(f"tool_call_id must be a non-empty string or None, got {tool_call_id!r}")
        relay = self._relay
        intercepts = relay.intercepts
        anchor = parent if parent is not None else relay.scope.current()
        # Both chains are resolved now, once: registrations made during the call apply to later calls.
        resolved = intercepts.resolve(anchor) if intercepts.active else {}
        requests = resolved.get(TOOL_REQUEST, ())
        handle = relay.scope.push(
            name,
            ScopeType.TOOL,
            parent=parent,
            input=args,
            metadata=_metadata(metadata, tool_call_id),
        )
        try:
            args = chains.run_filters(requests, lambda e, a: e.fn(name, a), args)
        except BaseException as exc:
            relay.scope.pop(handle, error=exc)
            raise
        executions = resolved.get(TOOL_EXECUTION, ())
        return handle, args, executions

    def execute(
        self,
        name: str,
        args: Any,
        fn: Callable[[Any], Any],
        *,
        parent: ScopeHandle | None = None,
        metadata: dict[str, Any] | None = None,
        tool_call_id: str | None = None,
    ) -> Any:
        """Run ``fn(args)`` as a managed tool call; ``tool_call_id``: the id of the model's tool call it
        answers (trajectories name the call an observation answers by it)."""
        handle, args, executions = self._begin(name, args, parent, metadata, tool_call_id)
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
        tool_call_id: str | None = None,
    ) -> Any:
        handle, args, executions = self._begin(name, args, parent, metadata, tool_call_id)

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
