"""``relay.tools``: a managed tool call (a TOOL scope around request and execution intercepts)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import chains, tool_streams
from . import conventions as cv
from .intercepts import TOOL_EXECUTION, TOOL_REQUEST
from .redaction import redact_metadata
from .scopes import ScopeHandle
from .types import ScopeType

if TYPE_CHECKING:
    from .relay import Relay

_TOOL = ScopeType.TOOL.value  # the value itself: an enum member would be normalised on every push
_STREAMED = tool_streams.STREAMED  # a result one of these types is a stream of its tool scope


def _with_call_id(metadata: dict[str, Any] | None, tool_call_id: str | None) -> dict[str, Any] | None:
    """The tool scope's metadata, naming the model's tool call it answers when one is given."""
    if tool_call_id is None:
        return metadata
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise ValueError(f"tool_call_id must be a non-empty string or None, got {tool_call_id!r}")
    return {**(metadata or {}), cv.TOOL_CALL_ID: tool_call_id}


ControlFlow = Callable[[BaseException], bool]
CONTROL_FLOW = "control_flow"


def control_flow_output(error: BaseException) -> dict[str, str]:
    """What a scope a framework's control flow ended records as its output (LangGraph's interrupt pausing
    the run at a tool or a node): a success, holding which."""
    return {CONTROL_FLOW: type(error).__name__}


def control_flow_of(output: Any) -> str | None:
    """The control flow a scope's recorded output says ended it (``control_flow_output``), or None: its
    consumers (trajectories) tell a paused tool from one that answered."""
    if type(output) is dict and len(output) == 1:
        name = output.get(CONTROL_FLOW)
        if isinstance(name, str):
            return name
    return None


class Tools:
    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    def open_unintercepted(self, name: str, args: Any, metadata: dict[str, Any] | None = None) -> ScopeHandle | None:
        """The tool scope ``execute`` would open for this call, when no intercept is registered
        anywhere (``relay.intercepts.active`` is False); else None, and the call goes through
        ``execute`` / ``execute_async``. For an integration that runs the call itself, ending the
        scope with ``relay.scope.pop``: no intercept chain, no extra frame around the call."""
        if self._relay.intercepts.active:
            return None
        # The scope ``_open`` would push, without its chains (there are none) and the tuple it hands back.
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool name must be a non-empty string, got {name!r}")
        return self._push(name, args, None, metadata)

    def _open(
        self, name: str, args: Any, parent: ScopeHandle | None, metadata: dict[str, Any] | None
    ) -> tuple[ScopeHandle, tuple[Any, ...], tuple[Any, ...]]:
        """The tool's scope, and its request and execution chains (resolved now, once: registrations
        made during the call apply to later calls)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool name must be a non-empty string, got {name!r}")
        relay = self._relay
        intercepts = relay.intercepts
        resolved: Mapping[str, tuple[Any, ...]] = {}
        if intercepts.active:  # where the chains are resolved from is looked up only when there are some
            resolved = intercepts.resolve(parent if parent is not None else relay.scope.current())
        handle = self._push(name, args, parent, metadata)
        return handle, resolved.get(TOOL_REQUEST, ()), resolved.get(TOOL_EXECUTION, ())

    def _push(self, name: str, args: Any, parent: ScopeHandle | None, metadata: dict[str, Any] | None) -> ScopeHandle:
        # The caller's metadata read for credentials here, once (``redact_metadata``); the tool's own kind beside it.
        meta = {cv.KIND: cv.TOOL, **redact_metadata(metadata)} if metadata else {cv.KIND: cv.TOOL}
        return self._relay.scope.opened(name, _TOOL, parent, args, meta)

    def _begin(
        self,
        name: str,
        args: Any,
        parent: ScopeHandle | None,
        metadata: dict[str, Any] | None,
        control_flow: ControlFlow | None,
    ) -> tuple[ScopeHandle, Any, tuple[Any, ...]]:
        handle, requests, executions = self._open(name, args, parent, metadata)
        try:
            args = chains.run_filters(requests, lambda e, a: e.fn(name, a), args)
        except BaseException as exc:
            self._ended_by(handle, exc, control_flow)
            raise
        return handle, args, executions

    def _ended_by(
        self,
        handle: ScopeHandle,
        error: BaseException,
        control_flow: ControlFlow | None,
        output: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """End the tool's scope with what it raised: failed (with ``output``, what a streamed result yielded
        before), or, for the caller's ``control_flow``, a success recording which (the framework pauses or
        redirects; nothing failed)."""
        if control_flow is not None and control_flow(error):
            self._relay.scope.pop(handle, output=control_flow_output(error), metadata=metadata, outcome="success")
        else:
            self._relay.scope.pop(handle, output=output, metadata=metadata, error=error)

    @staticmethod
    async def _requests_async(name: str, args: Any, requests: tuple[Any, ...]) -> Any:
        """The request chain for async tools: a request intercept may be a coroutine function, awaited
        here, on the caller's loop (as NeMo Relay does, and as LLM request intercepts are)."""
        for entry in requests:
            args = entry.fn(name, args)
            if chains.is_awaitable(args):
                args = await args
            if entry.break_chain:
                break
        return args

    def execute(
        self,
        name: str,
        args: Any,
        fn: Callable[[Any], Any],
        *,
        parent: ScopeHandle | None = None,
        metadata: dict[str, Any] | None = None,
        tool_call_id: str | None = None,
        control_flow: ControlFlow | None = None,
    ) -> Any:
        """Run ``fn(args)`` as a managed tool call; ``tool_call_id``: the id of the model's tool call it
        answers (trajectories name the call an observation answers by it).

        Pipeline: the tool scope opens, request intercepts run in order (one that raises refuses the
        call: ``fn`` never runs), then execution intercepts around ``fn``; the scope ends with the
        result, or failed with what was raised, which propagates. ``control_flow``: a framework's
        test for exceptions that steer its run rather than fail the tool (LangGraph's ``interrupt()``
        raised by an approval intercept): they end the scope as a success holding
        ``{"control_flow": <class name>}``, and propagate all the same.

        A result that is a generator (or an async generator) is returned as a managed stream of the
        tool's scope, which ends when the caller's iteration does: exhausted, a success holding the items
        read; raising, failed with that error; closed, broken off or garbage collected, cancelled (see
        ``tool_streams``)."""
        handle, args, executions = self._begin(name, args, parent, _with_call_id(metadata, tool_call_id), control_flow)
        owner = chains.Live()
        try:
            result = chains.run_sync(executions, name, args, fn, owner)
        except BaseException as exc:
            owner.live = False
            self._ended_by(handle, exc, control_flow)
            raise
        if type(result) in _STREAMED:  # not answered yet: its iteration ends the scope
            return tool_streams.managed(self, handle, result, owner, control_flow)
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
        control_flow: ControlFlow | None = None,
    ) -> Any:
        """``execute`` for async tools (``fn`` may return an awaitable; request intercepts may be coroutine
        functions). A generator or async generator it returns (or its awaitable resolves to) is a managed
        stream of the tool's scope, as in ``execute``."""
        handle, requests, executions = self._open(name, args, parent, _with_call_id(metadata, tool_call_id))
        owner: chains.Live | None = None
        try:
            if requests:
                args = await self._requests_async(name, args, requests)
            if executions:

                async def terminal(a: Any) -> Any:
                    out = fn(a)
                    return await out if inspect.isawaitable(out) else out

                owner = chains.Live()
                result = await chains.run_async(executions, name, args, terminal, owner)
            else:
                # Nothing around the call: its awaitable is awaited right here, so every resume of
                # the tool passes through one frame of ours, not three.
                result = fn(args)
                if chains.is_awaitable(result):
                    result = await result
        except BaseException as exc:
            if owner is not None:
                owner.live = False
            self._ended_by(handle, exc, control_flow)
            raise
        if type(result) in _STREAMED:
            return tool_streams.managed(self, handle, result, owner, control_flow)
        if owner is not None:
            owner.live = False
        self._relay.scope.pop(handle, output=result)
        return result
