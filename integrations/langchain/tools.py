"""A LangChain / LangGraph tool call as a managed tool call (``relay.tools``): shared by ``RelayMiddleware``
and LangGraph's ``create_tool_node``.

Tool request intercepts see (and may rewrite) the call's arguments; one that raises refuses the call:
the tool never runs, its scope ends failed with that error, and the agent gets a ``ToolMessage`` with
``status="error"`` carrying the reason, which the model reads and can act on. A tool whose error the
``ToolNode`` turned into an error message ends failed too (its scope says what the message says).
An exception the tool raises and the framework does not handle ends the scope failed and propagates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import ToolMessage

from relay_runtime import conventions as cv
from relay_runtime import session

from ..frameworks import current_parent, refusal_text

TOOL_CALL_ID = "tool_call_id"
_FRAMEWORK = cv.FRAMEWORK

# True while a managed tool call runs here: the callback handler then opens no second tool scope.
managed_tool: ContextVar[bool] = ContextVar("relay_langchain_managed_tool", default=False)


class ToolFailed(RuntimeError):
    """The tool's error, as the framework reported it in an error ``ToolMessage``."""

    relay_error_type = "tool_error"

    def __init__(self, message: ToolMessage) -> None:
        super().__init__(str(message.content))
        self.message = message


class _Refused(Exception):
    """Carries a request intercept's exception out of ``relay.tools`` past the framework."""


def _refusal(request: Any, error: BaseException) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(
        content=refusal_text(error), tool_call_id=call.get("id") or "", name=call.get("name"), status="error"
    )


def _checked(result: Any) -> Any:
    # ``type() is`` first: pydantic's metaclass is an ABCMeta, so a bare isinstance runs its Python hook.
    if (type(result) is ToolMessage or isinstance(result, ToolMessage)) and result.status == "error":
        raise ToolFailed(result)
    return result


class _ToolRun:
    """One tool call's bookkeeping, the same for the sync and the async path: what ``relay.tools`` is
    given (name, arguments, parent scope, metadata), read once from the request."""

    __slots__ = ("args", "handler", "metadata", "name", "parent", "request", "started")

    def __init__(self, turn: Any, request: Any, handler: Callable[[Any], Any]) -> None:
        self.request = request
        self.handler = handler
        self.started = False
        call = request.tool_call
        self.name = call["name"]
        self.args = call.get("args") or {}
        self.parent = current_parent(turn)
        self.metadata = {TOOL_CALL_ID: call.get("id"), _FRAMEWORK: "langchain"}

    def start(self, args: Any) -> tuple[Any, Any]:
        """The tool runs now (the intercepts let it): the request with their arguments, and the marker's token."""
        self.started = True
        request = self.request
        call = request.tool_call
        if args is not call.get("args"):  # rewritten by an intercept (the request's own needs no copy)
            request = request.override(tool_call={**call, "args": args})
        return request, managed_tool.set(True)

    def settle(self, error: Exception) -> Any:
        """What the agent gets when the managed call raised ``error``: a refusal or the error message."""
        if isinstance(error, ToolFailed):
            return error.message
        if self.started:
            raise error
        return _refusal(self.request, error)


def run_tool(request: Any, handler: Callable[[Any], Any]) -> Any:
    """``handler(request)`` as a managed tool call of the turn managed here (straight through without one)."""
    turn = session.managed_turn()
    if turn is None:
        return handler(request)
    run = _ToolRun(turn, request, handler)

    def execute(args: Any) -> Any:
        current, token = run.start(args)
        try:
            return _checked(handler(current))
        finally:
            managed_tool.reset(token)

    try:
        return turn.relay.tools.execute(run.name, run.args, execute, parent=run.parent, metadata=run.metadata)
    except Exception as exc:
        return run.settle(exc)


async def arun_tool(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    turn = session.managed_turn()
    if turn is None:
        return await handler(request)
    run = _ToolRun(turn, request, handler)

    async def execute(args: Any) -> Any:
        current, token = run.start(args)
        try:
            return _checked(await handler(current))
        finally:
            managed_tool.reset(token)

    try:
        return await turn.relay.tools.execute_async(
            run.name, run.args, execute, parent=run.parent, metadata=run.metadata
        )
    except Exception as exc:
        return run.settle(exc)
