"""``RelayMiddleware``: a LangChain agent's model and tool calls as managed executions.

    from langchain.agents import create_agent
    agent = create_agent(model, tools, middleware=[RelayMiddleware(), ModelRetryMiddleware()])

Each model call of the agent is one logical call of the current turn; every provider call made for it,
retries of middleware placed inside this one included, is an attempt of that call (see ``models``),
with the relay's guardrails, request / execution / response intercepts and budgets applied once per
attempt. Each tool call is a managed tool call (see ``tools``). Without a managed turn the agent runs
untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from relay_runtime import session
from relay_runtime.calls import open_call_in

from ..frameworks import ModelCall, current_parent
from . import models
from .tools import arun_tool, run_tool

# Read once: every model call of an agent goes through these.
_middleware_call = models.middleware_call
_managed_turn = session.managed_turn


class RelayMiddleware(AgentMiddleware):
    """Model calls as logical calls with managed attempts, tool calls as managed tool calls."""

    def __init__(self, *, call_role: str = "primary", name: str = "RelayMiddleware") -> None:
        super().__init__()
        models.install()
        self.call_role = call_role
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def _open(self) -> ModelCall | None:
        if _middleware_call.get() is not None:
            return None
        turn = _managed_turn()
        if turn is None:
            return None
        # ``ModelCall.under``'s work, inlined: this runs for every model call of the agent.
        parent = current_parent(turn)
        role = self.call_role
        return ModelCall(turn, open_call_in(turn, parent, role), role, parent)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = self._open()
        if call is None:  # no managed turn, or already inside one of ours: the attempts join that one
            return handler(request)
        token = _middleware_call.set(call)
        try:
            response = handler(request)
        except BaseException as exc:
            call.close(exc)
            raise
        finally:
            _middleware_call.reset(token)
        call.close()
        return response

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        call = self._open()
        if call is None:
            return await handler(request)
        token = _middleware_call.set(call)
        try:
            response = await handler(request)
        except BaseException as exc:
            call.close(exc)
            raise
        finally:
            _middleware_call.reset(token)
        call.close()
        return response

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return run_tool(request, handler)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await arun_tool(request, handler)
