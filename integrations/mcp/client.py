"""The sending side: every request an MCP client sends becomes a scope of the relay that records it.

Pipeline of one managed request (``ClientSession.send_request``, which also checks the result;
requests a dispatcher sends on its own, such as a server calling its client back, the same way
at ``send_raw_request``):

1. ``tools/call``: a TOOL scope through ``relay.tools.execute_async``, so the relay's tool request
   intercepts (guardrails; argument rewrites) and execution intercepts run first. An intercept
   that raises refuses the call: nothing is sent, the scope ends failed with that error, and the
   caller gets the SDK's ordinary error result (``isError: true`` carrying the reason).
   Any other method: a plain scope.
2. The request's ``params._meta`` gets our scope's trace context (``traceparent``, and
   ``tracestate`` / ``baggage`` when set), merged over the caller's own ``_meta`` keys; the SDK's
   own injection is swapped for ours while the request is sent, so it cannot replace it.
3. The SDK's own client span is not made: its span hook hands back a collector that keeps the
   JSON-RPC id and error code for our scope.
4. The scope ends once: success; failed with the JSON-RPC error code as ``error.type``, with the
   SDK's error for a result it cannot read, or ``tool_error`` for a result marked ``isError``;
   cancelled when the caller is cancelled.

Failure policy: intercepts fail closed (they are policy); the instrumentation's own bookkeeping
fails open: if it cannot describe a request, the request goes out as the SDK would send it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime.trace_context import carrier_for
from relay_runtime.types import ScopeType

from . import conventions as mc
from . import routing

Send = Callable[..., Awaitable[Any]]
Notify = Callable[..., Awaitable[None]]

# The managed request being sent in this task, for the SDK hooks swapped below.
_sending: ContextVar[_Sending | None] = ContextVar("relay_mcp_sending", default=None)


_UNSET: Any = object()


class _Sending:
    """One managed request on its way: the context it carries, arguments an intercept rewrote,
    and what the SDK told its span hook (the JSON-RPC id, an error code)."""

    __slots__ = ("arguments", "attributes", "carrier", "dispatched")

    def __init__(self, carrier: dict[str, str]) -> None:
        self.carrier = carrier
        self.arguments: Any = _UNSET
        self.attributes: dict[str, Any] = {}
        self.dispatched = False

    def params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """``params`` as they go out: ``_meta`` merged with our context, arguments as rewritten."""
        out = dict(params) if params is not None else {}
        if self.arguments is not _UNSET:
            out["arguments"] = self.arguments
        meta = out.get("_meta")
        out["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), **self.carrier}
        return out


class ToolErrorResult(Exception):
    """A tool result the server marked ``isError``: the scope fails with ``tool_error``; the caller gets the result."""

    relay_error_type = mc.TOOL_ERROR

    def __init__(self, result: Any) -> None:
        super().__init__(mc.tool_error_text(result))
        self.result = result


# -- the SDK's hooks, swapped while instrumented --------------------------------------------------


class _Collector:
    """Stands in for the SDK's span during a managed send: what the SDK sets on it goes to our scope."""

    def __init__(self, sending: _Sending) -> None:
        self._sending = sending

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._sending.attributes.update(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self._sending.attributes[key] = value

    def set_status(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def record_exception(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def is_recording(self) -> bool:
        return False


def swapped_span(original: Callable[..., Any]) -> Callable[..., Any]:
    @contextlib.contextmanager
    def otel_span(name: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        sending = _sending.get()
        if sending is None:
            with original(name, *args, **kwargs) as span:  # not ours: the SDK's tracing as it was
                yield span
            return
        attributes = kwargs.get("attributes")
        if isinstance(attributes, Mapping):
            sending.attributes.update(attributes)
        yield _Collector(sending)

    return otel_span


def swapped_inject(original: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def inject_trace_context(meta: dict[str, Any]) -> None:
        sending = _sending.get()
        if sending is None:
            original(meta)
            return
        meta.update(sending.carrier)  # last: whatever was merged before, ours is what the server reads

    return inject_trace_context


# -- requests ----------------------------------------------------------------------------------------

Forward = Callable[[_Sending], Awaitable[Any]]


def _refusal(error: BaseException) -> dict[str, Any]:
    reason = str(error) or type(error).__name__
    # ``resultType`` is required from the 2026-07-28 protocol on; earlier sessions drop it as a later field.
    return {
        "content": [{"type": "text", "text": f"Tool call refused: {reason}"}],
        "isError": True,
        "resultType": "complete",
    }


def _end_attributes(sending: _Sending, error: BaseException | None) -> dict[str, Any]:
    out = {k: v for k, v in sending.attributes.items() if k in ("jsonrpc.request.id", "rpc.response.status_code")}
    code = getattr(getattr(error, "error", None), "code", None)
    if code is not None:
        out.update(mc.error_code_attributes(code))
    elif "rpc.response.status_code" in sending.attributes:
        out["error.type"] = sending.attributes["rpc.response.status_code"]
    return out


def _end_hints(hints: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    return {cv.SPAN_HINTS: {**hints, "attributes": {**hints["attributes"], **end}}}


async def session_send(
    original: Send, client_session: Any, request: Any, result_type: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``ClientSession.send_request``: the scope spans the send *and* the SDK's check of the result,
    so a server answering junk fails the scope the caller's error comes from."""
    relay = routing.relay_for_request()
    if relay is None:
        return await original(client_session, request, result_type, *args, **kwargs)
    try:
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        method, params = data["method"], data.get("params")
    except Exception:
        return await original(client_session, request, result_type, *args, **kwargs)

    async def forward(sending: _Sending) -> Any:
        token = _sending.set(sending)
        try:
            return await original(client_session, request, result_type, *args, **kwargs)
        finally:
            _sending.reset(token)

    def typed(raw: dict[str, Any]) -> Any:
        validate = getattr(result_type, "validate_python", None) or result_type.model_validate
        return validate(raw, by_name=False)

    return await _managed(relay, method, params, getattr(client_session, "_dispatcher", None), forward, typed)


async def send(original: Send, dispatcher: Any, method: str, params: Any, opts: Any, kwargs: dict[str, Any]) -> Any:
    """A dispatcher's ``send_raw_request``. Inside a session's request (above) it only writes what
    that request carries; alone (a server calling its client back) the request is a scope of its own."""
    owner = _sending.get()
    if owner is not None and not owner.dispatched:
        owner.dispatched = True
        return await original(dispatcher, method, owner.params(params), opts, **kwargs)
    relay = routing.relay_for_request()
    if relay is None or not isinstance(method, str):
        return await original(dispatcher, method, params, opts, **kwargs)

    async def forward(sending: _Sending) -> Any:
        sending.dispatched = True
        token = _sending.set(sending)
        try:
            return await original(dispatcher, method, sending.params(params), opts, **kwargs)
        finally:
            _sending.reset(token)

    return await _managed(relay, method, params, dispatcher, forward, lambda raw: raw)


async def _managed(
    relay: Any, method: str, params: Any, dispatcher: Any, forward: Forward, typed: Callable[[dict[str, Any]], Any]
) -> Any:
    mapping = params if isinstance(params, Mapping) else None
    try:
        hints = mc.hints(method, mc.target_of(method, mapping), "client", _attributes(method, mapping, dispatcher))
    except Exception:
        return await forward(_Sending({}))
    if method == mc.TOOLS_CALL and mapping is not None and isinstance(mapping.get("name"), str):
        return await _tool_call(relay, mapping, hints, forward, typed)
    handle = relay.scope.push(hints["name"], ScopeType.CUSTOM, metadata={cv.SPAN_HINTS: hints})
    sending = _Sending(carrier_for(handle))
    try:
        result = await forward(sending)
    except BaseException as exc:
        relay.scope.pop(handle, error=exc, metadata=_end_hints(hints, _end_attributes(sending, exc)))
        raise
    relay.scope.pop(handle, metadata=_end_hints(hints, _end_attributes(sending, None)))
    return result


def _attributes(method: str, params: Mapping[str, Any] | None, dispatcher: Any) -> dict[str, Any]:
    attributes = mc.request_attributes(method, params, routing.protocol_version_of(dispatcher))
    attributes.update(routing.peer_of(dispatcher))
    attributes.update(routing.transport_attributes(dispatcher))
    return attributes


async def _tool_call(
    relay: Any,
    params: Mapping[str, Any],
    hints: dict[str, Any],
    forward: Forward,
    typed: Callable[[dict[str, Any]], Any],
) -> Any:
    tool = params["name"]
    arguments = params.get("arguments")
    current = relay.scope.current()
    if current is not None and current.scope_type == ScopeType.TOOL.value and current.name == tool:
        # A framework already opened this call's tool scope (and ran the relay's tool intercepts):
        # the MCP attributes join it rather than making a second scope.
        return await _join_tool_scope(current, hints, forward)
    sending = _Sending({})
    sent = False

    async def terminal(args: Any) -> Any:
        nonlocal sent
        handle = relay.scope.current()
        sending.carrier = carrier_for(handle) if handle is not None else {}
        if args is not arguments:
            sending.arguments = args
        sent = True
        try:
            result = await forward(sending)
        except BaseException as exc:
            # Set before the tool scope ends (which happens as this propagates).
            hints["attributes"].update(_end_attributes(sending, exc))
            raise
        hints["attributes"].update(_end_attributes(sending, None))
        if mc.is_tool_error(result):
            hints["attributes"]["error.type"] = mc.TOOL_ERROR
            raise ToolErrorResult(result)
        return result

    try:
        return await relay.tools.execute_async(tool, arguments, terminal, metadata={cv.SPAN_HINTS: hints})
    except ToolErrorResult as failed:
        return failed.result
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if sent:
            raise
        return typed(_refusal(exc))


async def _join_tool_scope(handle: Any, hints: dict[str, Any], forward: Forward) -> Any:
    sending = _Sending(carrier_for(handle))
    error: BaseException | None = None
    try:
        return await forward(sending)
    except BaseException as exc:
        error = exc
        raise
    finally:
        if isinstance(handle.metadata, dict):
            end = _end_attributes(sending, error)
            handle.metadata[cv.SPAN_HINTS] = {**hints, "attributes": {**hints["attributes"], **end}}


async def notify(original: Notify, dispatcher: Any, method: str, params: Any, opts: Any, kwargs: dict[str, Any]) -> Any:
    relay = routing.relay_for_request()
    if relay is None or not isinstance(method, str):
        return await original(dispatcher, method, params, opts, **kwargs)
    hints = mc.hints(method, None, "client", {"mcp.method.name": method, **routing.peer_of(dispatcher)})
    # Notifications carry no trace context: the conventions give them a span, not a child on the other side.
    with relay.scope.scope(method, ScopeType.CUSTOM, metadata={cv.SPAN_HINTS: hints}):
        return await original(dispatcher, method, params, opts, **kwargs)


def peer_attributes_of(mcp_client: Any) -> dict[str, Any]:
    """What a ``Client`` was given to connect to, as span attributes."""
    return mc.peer_attributes(getattr(mcp_client, "server", None))
