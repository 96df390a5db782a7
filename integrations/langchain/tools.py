"""A LangChain / LangGraph tool call as a managed tool call (``relay.tools``): shared by ``RelayMiddleware``
and LangGraph's ``create_tool_node``.

Tool request intercepts see (and may rewrite) the call's arguments; one that raises refuses the call:
the tool never runs, its scope ends failed with that error, and the agent gets a ``ToolMessage`` with
``status="error"`` carrying the reason, which the model reads and can act on. A tool whose error the
``ToolNode`` turned into an error message ends failed too (its scope says what the message says).
An exception the tool raises and the framework does not handle ends the scope failed and propagates.
LangGraph's control flow (``interrupt()`` pausing for a human, a ``Command`` for the parent graph) is no
failure: the tool's scope ends as a success with ``{"control_flow": "GraphInterrupt"}``, as the node's
does, and the exception goes on to the framework, which pauses the graph; so does a pause a request
intercept makes (a human asked to approve the call), before the tool runs. Execution intercepts see
that output as the tool's result, not the exception (so one that retries on errors does not run the
tool again); what they return is recorded, and the pause goes on to the framework all the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import ToolMessage

from relay_runtime import conventions as cv
from relay_runtime import session
from relay_runtime.tools import control_flow_output

from ..frameworks import current_parent, refusal_text

TOOL_CALL_ID = "tool_call_id"
_FRAMEWORK = cv.FRAMEWORK
_CONTROL_FLOW = ("GraphBubbleUp", "GraphInterrupt", "NodeInterrupt", "ParentCommand")

# The id of the tool call a managed tool call runs here (``_NONE``: none does). The callback handler opens
# no second scope for that call's tool run, and a ``RelayMiddleware`` wrapping it again (a second one in
# the stack) adds no second managed call; a tool call of another id (a sub-agent's, inside the tool) is
# its own. An id, not a flag: what the tool runs inside inherits it.
_NONE: Any = object()
managed_tool: ContextVar[Any] = ContextVar("relay_langchain_managed_tool", default=_NONE)


def is_managed(tool_call_id: Any) -> bool:
    """Whether the tool call ``tool_call_id`` names is the one a managed tool call runs here."""
    managed = managed_tool.get()
    return managed is not _NONE and managed == tool_call_id


def is_control_flow(error: BaseException) -> bool:
    """LangGraph's interrupts and parent commands travel as exceptions; they are not failures.
    By name: LangChain alone (no LangGraph installed) uses this module too."""
    return any(type(error).__name__ == name for name in _CONTROL_FLOW) or any(
        cls.__name__ == "GraphBubbleUp" for cls in type(error).__mro__
    )


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


def is_error_message(result: Any) -> bool:
    """A ``ToolMessage`` saying the tool failed (its handled error, or the ``ToolNode``'s)."""
    # ``type() is`` first: pydantic's metaclass is an ABCMeta, so a bare isinstance runs its Python hook.
    return (type(result) is ToolMessage or isinstance(result, ToolMessage)) and result.status == "error"


def _checked(result: Any) -> Any:
    if is_error_message(result):
        raise ToolFailed(result)
    return result


class _ToolRun:
    """One tool call's bookkeeping, the same for the sync and the async path: what ``relay.tools`` is
    given (name, arguments, parent scope, metadata), read once from the request."""

    __slots__ = ("args", "handler", "metadata", "name", "parent", "paused", "request", "started")

    def __init__(self, turn: Any, request: Any, handler: Callable[[Any], Any]) -> None:
        self.request = request
        self.handler = handler
        self.started = False
        # The framework's control-flow exception the tool raised: held past ``relay.tools`` (which
        # would end the scope failed with it) and raised again once the scope has ended.
        self.paused: Exception | None = None
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
        return request, managed_tool.set(call.get("id"))

    def result(self, result: Any) -> Any:
        """The tool call's result; a pause the tool made goes on to the framework (the scope has ended)."""
        paused = self.paused
        if paused is not None:
            self.paused = None
            raise paused
        return result

    def pause(self, error: Exception) -> dict[str, str]:
        """``error``, the framework's control flow, held: what ``relay.tools`` records instead."""
        self.paused = error
        return control_flow_output(error)

    def settle(self, error: Exception) -> Any:
        """What the agent gets when the managed call raised ``error``: a refusal or the error message. A pause
        a request intercept made (``interrupt()`` asking a human to approve the call) goes on to the
        framework: on resume the intercept runs again and lets the call through or refuses it."""
        if isinstance(error, ToolFailed):
            return error.message
        if self.started or is_control_flow(error):
            raise error
        return _refusal(self.request, error)


def run_tool(request: Any, handler: Callable[[Any], Any]) -> Any:
    """``handler(request)`` as a managed tool call of the turn managed here (straight through without one)."""
    turn = session.managed_turn()
    if turn is None or is_managed(request.tool_call.get("id")):  # no turn, or this call is managed already
        return handler(request)
    run = _ToolRun(turn, request, handler)

    def execute(args: Any) -> Any:
        current, token = run.start(args)
        try:
            return _checked(handler(current))
        except Exception as exc:
            if not is_control_flow(exc):
                raise
            return run.pause(exc)
        finally:
            managed_tool.reset(token)

    try:
        result = turn.relay.tools.execute(
            run.name, run.args, execute, parent=run.parent, metadata=run.metadata, control_flow=is_control_flow
        )
    except Exception as exc:
        return run.settle(exc)
    return run.result(result)


async def arun_tool(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    turn = session.managed_turn()
    if turn is None or is_managed(request.tool_call.get("id")):
        return await handler(request)
    run = _ToolRun(turn, request, handler)

    async def execute(args: Any) -> Any:
        current, token = run.start(args)
        try:
            return _checked(await handler(current))
        except Exception as exc:
            if not is_control_flow(exc):
                raise
            return run.pause(exc)
        finally:
            managed_tool.reset(token)

    try:
        result = await turn.relay.tools.execute_async(
            run.name, run.args, execute, parent=run.parent, metadata=run.metadata, control_flow=is_control_flow
        )
    except Exception as exc:
        return run.settle(exc)
    return run.result(result)
