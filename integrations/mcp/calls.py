"""``Client.call_tool``: one tool scope for the logical call, however many rounds it takes.

From the 2026-07-28 protocol on, a server that needs the user's input mid-call answers the
``tools/call`` with ``resultType: "input_required"`` (the input requests, an opaque state); the
``Client`` has its callbacks answer them and sends the ``tools/call`` again, as many times as the
server asks. Each round is a request of its own on the wire, but one call of the tool: so the
tool scope (and the relay's tool intercepts, guardrails included) is opened here, once, around the
whole call, and its rounds are sent as part of it (``client.session_send``), each carrying its
context and the arguments as an intercept left them. Each answer asking for input is a mark on
the scope (``mcp.input_required``: the round and what was asked for); the scope ends with the
call's final result.

A ``tools/call`` sent on a ``ClientSession`` directly (a framework's; a caller driving the rounds
itself, who may resume them in another process) stays a scope of its own per request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from relay_runtime import session

from . import client, routing
from . import conventions as mc

Drive = Callable[..., Awaitable[Any]]
_UNKNOWN: Any = object()


def call_tool(original: Callable[..., Awaitable[Any]], result_type: Any) -> Callable[..., Any]:
    """``Client.call_tool``; ``result_type``: the SDK's ``CallToolResult`` (a refused call's result)."""

    def call_tool(mcp_client: Any, name: Any, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        # ``routing.relay_for_request()``'s first rule read here (a call less per call): a managed turn's relay.
        turn = session.managed_turn()
        relay = turn.relay if turn is not None else routing.relay_for_request()
        if relay is None:
            return original(mcp_client, name, arguments, *args, **kwargs)
        try:
            client_session = mcp_client.session
            # ``mc.tool_target(name)`` and ``routing.hints_for``, their usual cases read here (two calls less per call).
            target = mc.tool_targets.get(name, _UNKNOWN) if type(name) is str else _UNKNOWN
            if target is _UNKNOWN:
                target = mc.tool_target(name)
            dispatcher = client_session._dispatcher
            link = getattr(dispatcher, routing.LINK, None)
            if type(link) is routing.Link:
                hints = link.hints(mc.TOOLS_CALL, target)
            else:
                hints = routing.hints_for(dispatcher, mc.TOOLS_CALL, target)
        except Exception:
            # Not connected, or our bookkeeping failed: the call goes as the SDK makes it (and fails as it does).
            return original(mcp_client, name, arguments, *args, **kwargs)
        if target is None:
            return original(mcp_client, name, arguments, *args, **kwargs)
        call = partial(original, mcp_client, name, arguments, *args, **kwargs)
        return client._tool_call(relay, name, arguments, hints, call, result_type, client_session)

    return call_tool


def drive_input_required(original: Drive, input_required: type) -> Callable[..., Any]:
    """``Client._drive_input_required``, which every call of the ``Client`` passes its first answer
    through: an answer asking for input (rare) is marked on the call's scope, and so is each later one."""

    def _drive_input_required(mcp_client: Any, first: Any, retry: Any) -> Any:
        if not isinstance(first, input_required):
            return original(mcp_client, first, retry)  # the usual: a complete answer, nothing to drive
        owner = client._sending.get()
        relay = routing.relay_for_request()
        if owner is None or owner.driver is None or relay is None:
            return original(mcp_client, first, retry)  # not a tool call of ours (a prompt; a resource)
        rounds = _Rounds(relay)
        rounds.note(first)

        async def noted_retry(*retry_args: Any, **retry_kwargs: Any) -> Any:
            answer = await retry(*retry_args, **retry_kwargs)
            if isinstance(answer, input_required):
                rounds.note(answer)
            return answer

        return original(mcp_client, first, noted_retry)

    return _drive_input_required


class _Rounds:
    """The input-required answers of one call, marked on its scope as they come."""

    def __init__(self, relay: Any) -> None:
        self.relay = relay
        self.count = 0

    def note(self, answer: Any) -> None:
        self.count += 1
        self.relay.scope.mark(mc.INPUT_REQUIRED, {"round": self.count, "requests": mc.input_requests_of(answer)})
