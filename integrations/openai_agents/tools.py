"""Function tools of the OpenAI Agents SDK as managed tool calls, so relay tool intercepts reach them.

A trace processor only observes; to let a tool request intercept see (and rewrite) a tool's
arguments or refuse the call, the tool's invocation is wrapped, in place, the first time
an agent hands the tool to a run (``Agent.get_all_tools``). A refused call never runs the tool:
its scope ends failed with the intercept's error and the model gets ``Tool call refused: <reason>``
as the tool's output. The SDK's failure handling stays outside the managed call: an exception inside
the tool ends the scope failed and goes on to the SDK, which turns it into the error message the
model sees (its ``failure_error_function``).

A tool's ``timeout`` (``function_tool(timeout=...)``) is the SDK's: it cancels the task running the
tool and reports the timeout to the model (or raises ``ToolTimeoutError``). The scope ends failed
with error type ``timeout`` then, not cancelled: the SDK went on. A tool cancelled with its run
(the task running its ``function`` span is being cancelled, see ``tool_spans``) ends cancelled.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import weakref
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime import session

from ..frameworks import current_parent, refusal_text
from . import tool_spans

TOOL_CALL_ID = "tool_call_id"
_MARK = "__relay_managed_tool__"
_FRAMEWORK = cv.FRAMEWORK
_managed_turn = session.managed_turn  # read once: every tool call asks it
_decode = json.JSONDecoder().decode


class ToolWrapping:
    """Wraps function tools' invocations; ``restore()`` puts every original back."""

    def __init__(self) -> None:
        self.live = True
        self.names: set[str] = set()
        # id(owner) -> (a weak reference to it, the attribute replaced, what it held); tools are unhashable.
        self._originals: dict[int, tuple[weakref.ref[Any], str, Any]] = {}
        self._lock = threading.Lock()

    def wrap(self, tool: Any) -> None:
        # The SDK's own invoker turns a tool's exception into the error text the model sees: its inner
        # implementation is wrapped, so the managed call sees the exception (and ends failed) first.
        # Another callable (a FunctionTool built by hand) is wrapped itself.
        invoker = getattr(tool, "on_invoke_tool", None)
        owner, attr = (
            (invoker, "_invoke_tool_impl") if hasattr(invoker, "_invoke_tool_impl") else (tool, "on_invoke_tool")
        )
        with self._lock:
            current = getattr(owner, attr, None)
            if current is None or getattr(current, _MARK, False):
                return
            key = id(owner)
            forget = self._forget(key)
            self._originals[key] = (weakref.ref(owner, forget), attr, current)
            setattr(owner, attr, self._managed(tool.name, current, weakref.ref(tool), _mcp_tool_of(tool)))
            self.names.add(tool.name)

    def _forget(self, key: int) -> Any:
        return lambda _ref: self._originals.pop(key, None)

    def restore(self) -> None:
        with self._lock:
            self.live = False
            for ref, attr, original in list(self._originals.values()):
                owner = ref()
                if owner is not None:
                    setattr(owner, attr, original)
            self._originals.clear()
            self.names.clear()

    def _managed(self, name: str, original: Any, tool: weakref.ref[Any], mcp_tool: str | None) -> Any:
        async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
            turn = _managed_turn()
            if turn is None or not self.live:
                return await original(ctx, arguments)
            span = tool_spans.current()
            if span is not None:
                span.ran = True  # this call has its scope: the processor records none for its span
            parsed = parse_arguments(arguments)
            started = False

            async def execute(args: Any) -> Any:
                nonlocal started
                started = True
                if span is not None:
                    span.scope = turn.relay.scope.current()  # the tool's scope: spans started inside nest there
                if args is not parsed and args != parsed:
                    # An intercept rewrote the arguments: the SDK's arguments prepared for the old text
                    # would be refused as not matching, so they are dropped and the new text parsed anew.
                    if hasattr(ctx, "_function_tool_arguments"):
                        ctx._function_tool_arguments = None
                    text = args if isinstance(args, str) else json.dumps(args)
                else:
                    text = arguments
                try:
                    return await original(ctx, text)
                except asyncio.CancelledError as exc:
                    seconds = getattr(tool(), "timeout_seconds", None)
                    if seconds is not None and _timed_out(span):
                        raise ToolTimedOut(name, seconds, exc) from None
                    raise

            metadata = {TOOL_CALL_ID: getattr(ctx, "tool_call_id", None), _FRAMEWORK: "openai_agents"}
            if mcp_tool is not None:
                metadata[cv.MCP_TOOL] = mcp_tool
            try:
                return await turn.relay.tools.execute_async(
                    name, parsed, execute, parent=current_parent(turn), metadata=metadata
                )
            except ToolTimedOut as timed_out:
                raise timed_out.cancelled from None  # the SDK's timeout waits for the task's cancellation
            except Exception as exc:
                if started:
                    raise
                return refusal_text(exc)

        functools.update_wrapper(on_invoke_tool, original)  # keeps the SDK's markers on the function
        setattr(on_invoke_tool, _MARK, True)
        return on_invoke_tool


def _mcp_tool_of(tool: Any) -> str | None:
    """The server's name of the MCP tool a function tool calls, when the SDK exposes it under another
    (``mcp_config={"include_server_in_tool_names": True}``): the MCP client's request must still
    recognise this tool's scope as its own call. The SDK keeps the binding in a private field."""
    binding = getattr(tool, "_mcp_tool_binding", None)
    if not isinstance(binding, tuple) or len(binding) < 2:
        return None
    raw = binding[1]
    return raw if isinstance(raw, str) and raw and raw != tool.name else None


class ToolTimedOut(BaseException):
    """The SDK's ``timeout`` cancelled the tool: the scope's error (failed, ``timeout``).

    A ``BaseException`` as the ``CancelledError`` it stands for is, so an execution intercept
    catching ``Exception`` does not swallow it; the invocation re-raises that ``CancelledError``.
    """

    relay_error_type = "timeout"

    def __init__(self, name: str, seconds: float, cancelled: asyncio.CancelledError) -> None:
        super().__init__(f"Tool '{name}' timed out after {seconds:g} seconds.")  # the SDK's wording
        self.cancelled = cancelled


def _timed_out(span: tool_spans.ToolSpan | None) -> bool:
    """Whether the cancellation a tool with a ``timeout`` got is the SDK's timeout.

    The SDK runs such a tool in a task of its own and cancels it at the deadline; the run's own
    cancellation reaches that task too, after cancelling the task running the function span. With
    no span followed (the SDK's tracing off) that cannot be told: the scope stays cancelled.
    """
    task = tool_spans.running_task()
    if task is None or not task.cancelling():
        return False  # the tool raised CancelledError itself: nobody cancelled its task
    return span is not None and span.task is not None and not span.task.cancelling()


def parse_arguments(arguments: str) -> Any:
    """A tool call's argument text as the value intercepts see: its JSON, or the text itself."""
    if not arguments:
        return {}
    try:
        # A str (what the SDK passes) goes straight to the decoder ``json.loads`` would use.
        return _decode(arguments) if type(arguments) is str else json.loads(arguments)
    except ValueError:
        return arguments
